import Foundation

/// Encodes a value to JSON keeping absent optionals as `null`, so that every document of a kind
/// has the same keys (scripts test `x == null`, not whether `x` exists). `JSONEncoder` leaves
/// them out: synthesized `Encodable` conformances call `encodeIfPresent`, which this encoder
/// answers with `null`.
enum NullPreservingJSON {
    static func encode(_ value: some Encodable, pretty: Bool) throws -> String {
        let encoder = TreeEncoder()
        try value.encode(to: encoder)
        var options: JSONSerialization.WritingOptions = [
            .sortedKeys, .withoutEscapingSlashes, .fragmentsAllowed,
        ]
        if pretty { options.insert(.prettyPrinted) }
        let data = try JSONSerialization.data(withJSONObject: encoder.root.value, options: options)
        return String(decoding: data, as: UTF8.self)
    }
}

/// A JSON value under construction: containers are filled after they are handed out, so they
/// are reference types.
private final class Node {
    enum Kind {
        case unset
        case object([String: Node])
        case array([Node])
        case scalar(Any)
    }

    var kind: Kind = .unset

    var value: Any {
        switch kind {
        case .unset: return NSNull()
        case .object(let members): return members.mapValues(\.value)
        case .array(let elements): return elements.map(\.value)
        case .scalar(let scalar): return scalar
        }
    }
}

private final class TreeEncoder: Encoder {
    let root: Node
    var codingPath: [any CodingKey] = []
    var userInfo: [CodingUserInfoKey: Any] = [:]

    init(root: Node = Node()) { self.root = root }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        if case .object = root.kind {} else { root.kind = .object([:]) }
        return KeyedEncodingContainer(KeyedContainer<Key>(node: root))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        if case .array = root.kind {} else { root.kind = .array([]) }
        return UnkeyedContainer(node: root)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer { SingleContainer(node: root) }

    /// Encodes `value` into `node`: scalars directly, everything else through its own encoding.
    static func encode(_ value: some Encodable, into node: Node) throws {
        switch value {
        case let string as String: node.kind = .scalar(string)
        case let bool as Bool: node.kind = .scalar(bool)
        case let int as Int: node.kind = .scalar(int)
        case let int as Int32: node.kind = .scalar(int)
        case let int as Int64: node.kind = .scalar(int)
        case let int as UInt32: node.kind = .scalar(int)
        case let int as UInt64: node.kind = .scalar(int)
        case let int as UInt8: node.kind = .scalar(int)
        case let int as UInt16: node.kind = .scalar(int)
        case let int as Int16: node.kind = .scalar(int)
        case let int as UInt: node.kind = .scalar(int)
        case let double as Double: node.kind = .scalar(double)
        case let float as Float: node.kind = .scalar(Double(float))
        case let date as Date: node.kind = .scalar(ISO8601DateFormatter().string(from: date))
        case let data as Data: node.kind = .scalar(data.base64EncodedString())
        default: try value.encode(to: TreeEncoder(root: node))
        }
    }
}

private struct KeyedContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let node: Node
    var codingPath: [any CodingKey] = []

    private func child(_ key: Key) -> Node {
        let child = Node()
        if case .object(var members) = node.kind {
            members[key.stringValue] = child
            node.kind = .object(members)
        }
        return child
    }

    mutating func encodeNil(forKey key: Key) throws { _ = child(key) }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        try TreeEncoder.encode(value, into: child(key))
    }

    mutating func encodeIfPresent<T: Encodable>(_ value: T?, forKey key: Key) throws {
        if let value { try encode(value, forKey: key) } else { try encodeNil(forKey: key) }
    }

    // The concrete-type `encodeIfPresent` requirements, answered the same way.
    mutating func encodeIfPresent(_ value: String?, forKey key: Key) throws { try encodeOptional(value, key) }
    mutating func encodeIfPresent(_ value: Bool?, forKey key: Key) throws { try encodeOptional(value, key) }
    mutating func encodeIfPresent(_ value: Int?, forKey key: Key) throws { try encodeOptional(value, key) }
    mutating func encodeIfPresent(_ value: Int32?, forKey key: Key) throws { try encodeOptional(value, key) }
    mutating func encodeIfPresent(_ value: Int64?, forKey key: Key) throws { try encodeOptional(value, key) }
    mutating func encodeIfPresent(_ value: UInt32?, forKey key: Key) throws { try encodeOptional(value, key) }
    mutating func encodeIfPresent(_ value: UInt64?, forKey key: Key) throws { try encodeOptional(value, key) }
    mutating func encodeIfPresent(_ value: Double?, forKey key: Key) throws { try encodeOptional(value, key) }

    private mutating func encodeOptional<T: Encodable>(_ value: T?, _ key: Key) throws {
        if let value { try encode(value, forKey: key) } else { try encodeNil(forKey: key) }
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key)
        -> KeyedEncodingContainer<NestedKey>
    {
        let nested = child(key)
        nested.kind = .object([:])
        return KeyedEncodingContainer(KeyedContainer<NestedKey>(node: nested))
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        let nested = child(key)
        nested.kind = .array([])
        return UnkeyedContainer(node: nested)
    }

    mutating func superEncoder() -> any Encoder { TreeEncoder(root: node) }
    mutating func superEncoder(forKey key: Key) -> any Encoder { TreeEncoder(root: child(key)) }
}

private struct UnkeyedContainer: UnkeyedEncodingContainer {
    let node: Node
    var codingPath: [any CodingKey] = []

    var count: Int {
        if case .array(let elements) = node.kind { return elements.count }
        return 0
    }

    private func append() -> Node {
        let child = Node()
        if case .array(var elements) = node.kind {
            elements.append(child)
            node.kind = .array(elements)
        }
        return child
    }

    mutating func encodeNil() throws { _ = append() }

    mutating func encode<T: Encodable>(_ value: T) throws { try TreeEncoder.encode(value, into: append()) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type)
        -> KeyedEncodingContainer<NestedKey>
    {
        let nested = append()
        nested.kind = .object([:])
        return KeyedEncodingContainer(KeyedContainer<NestedKey>(node: nested))
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        let nested = append()
        nested.kind = .array([])
        return UnkeyedContainer(node: nested)
    }

    mutating func superEncoder() -> any Encoder { TreeEncoder(root: append()) }
}

private struct SingleContainer: SingleValueEncodingContainer {
    let node: Node
    var codingPath: [any CodingKey] = []

    mutating func encodeNil() throws { node.kind = .scalar(NSNull()) }

    mutating func encode<T: Encodable>(_ value: T) throws { try TreeEncoder.encode(value, into: node) }
}
