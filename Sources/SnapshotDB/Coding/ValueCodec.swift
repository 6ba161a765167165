public import Foundation

/// Turns values into the bytes stored for a collection and back.
///
/// SnapshotDB ships ``JSONValueCodec`` (the default, readable with the `sqlite3` shell),
/// ``PropertyListValueCodec`` (binary property lists, compact) and ``RawDataCodec`` (stores
/// `Data` as is). Register a codec per collection with ``Database/register(_:forCollection:)``
/// right after the open, before any transaction, extension, consumer or observer.
public protocol ValueCodec: Sendable {
    /// Encodes `value`; throws when the value cannot be represented.
    func encode<T: Encodable>(_ value: T) throws -> Data
    /// Decodes a `T` from `data`; throws when the bytes are not a `T`.
    func decode<T: Decodable>(_ type: T.Type, from data: Data) throws -> T
}

/// The default codec: JSON through Foundation's `JSONEncoder` and `JSONDecoder`.
public struct JSONValueCodec: ValueCodec {
    // One encoder and one decoder per codec rather than per value: Foundation's coders are
    // thread-safe (`Sendable`), and making them cost about as much as encoding a small value.
    private let encoder: JSONEncoder
    private let decoder = JSONDecoder()

    /// Creates the codec.
    public init() {
        encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
    }

    /// Encodes `value` as JSON with sorted keys, so equal values store equal bytes.
    public func encode<T: Encodable>(_ value: T) throws -> Data {
        try encoder.encode(value)
    }

    /// Decodes JSON: through SnapshotDB's own decoder where its result is certain to be
    /// Foundation's (plain records of strings, integers, `Double`s, booleans, optionals, arrays,
    /// dictionaries and nested records), else through Foundation's `JSONDecoder`, whose result
    /// or error is then the answer (see `FastJSON`).
    public func decode<T: Decodable>(_ type: T.Type, from data: Data) throws -> T {
        do {
            return try FastJSON.decodeOrFallBack(T.self, from: data)
        } catch {
            return try decoder.decode(type, from: data)
        }
    }

    /// ``decode(_:from:)`` of stored bytes read in place (SQLite's buffer, valid only during
    /// the call): no `Data` is made for them unless Foundation must decode the value, so a scan
    /// copies each value once (into the decoder's document) instead of three times. Neither
    /// decoder keeps the bytes past the call, which is why only this codec reads in place.
    func decode<T: Decodable>(_ type: T.Type, fromBytes bytes: UnsafeRawBufferPointer) throws -> T {
        do {
            return try FastJSON.decodeOrFallBack(T.self, fromBytes: bytes)
        } catch {
            return try decoder.decode(type, from: Data(bytes))
        }
    }
}

/// Binary property lists through Foundation's `PropertyListEncoder` and `PropertyListDecoder`.
public struct PropertyListValueCodec: ValueCodec {
    // Made once, like ``JSONValueCodec``'s coders.
    private let encoder: PropertyListEncoder
    private let decoder = PropertyListDecoder()

    /// Creates the codec.
    public init() {
        encoder = PropertyListEncoder()
        encoder.outputFormat = .binary
    }

    /// Encodes `value` as a binary property list.
    public func encode<T: Encodable>(_ value: T) throws -> Data {
        try encoder.encode(value)
    }

    /// Decodes a property list (binary or XML).
    public func decode<T: Decodable>(_ type: T.Type, from data: Data) throws -> T {
        try decoder.decode(type, from: data)
    }
}

/// Stores `Data` values byte for byte; any other type is refused with a typed error.
public struct RawDataCodec: ValueCodec {
    /// The error a ``RawDataCodec`` throws for a value that is not `Data`.
    public struct NotData: Error, CustomStringConvertible {
        /// The type that was offered.
        public let typeName: String
        /// Explains that only `Data` is accepted.
        public var description: String { "RawDataCodec stores only Data, not \(typeName)" }
    }

    /// Creates the codec.
    public init() {}

    /// Returns `value` itself when it is `Data`.
    public func encode<T: Encodable>(_ value: T) throws -> Data {
        guard let data = value as? Data else { throw NotData(typeName: String(describing: T.self)) }
        return data
    }

    /// Returns the bytes when `T` is `Data`.
    public func decode<T: Decodable>(_ type: T.Type, from data: Data) throws -> T {
        guard let value = data as? T else { throw NotData(typeName: String(describing: T.self)) }
        return value
    }
}
