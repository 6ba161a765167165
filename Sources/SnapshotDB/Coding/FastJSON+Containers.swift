internal import Foundation

/// The decoder and its containers, over a scanned ``FastJSON/Document``.
extension FastJSON {
    /// A `Decoder` at one value of a ``Document``.
    final class ValueDecoder: Decoder {
        let document: Document
        let index: Int
        let path: CodingPath
        var codingPath: [any CodingKey] { path.array }
        var userInfo: [CodingUserInfoKey: Any] { [:] }

        init(document: Document, at index: Int, path: CodingPath) {
            self.document = document
            self.index = index
            self.path = path
        }

        func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
            KeyedDecodingContainer(
                Keyed<Key>(document: document, members: try document.members(index), path: path))
        }

        func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
            Unkeyed(document: document, elements: try document.elements(index), path: path)
        }

        func singleValueContainer() throws -> any SingleValueDecodingContainer {
            Single(document: document, index: index, path: path)
        }
    }

    struct Keyed<Key: CodingKey>: KeyedDecodingContainerProtocol {
        let document: Document
        let members: [Member]
        let path: CodingPath
        var codingPath: [any CodingKey] { path.array }

        var allKeys: [Key] {
            let keys = members.compactMap { Key(stringValue: document.keyString($0)) }
            // Two members that are one integer key ("1" and "01" of a `[Int: V]`) leave the
            // winner to the order of Foundation's dictionary of members: its call.
            var integers: Set<Int> = []
            for key in keys {
                if let integer = key.intValue, !integers.insert(integer).inserted { _ = document.fallBack() }
            }
            return keys
        }

        func contains(_ key: Key) -> Bool { document.find(key, in: members) != nil }

        private func value(_ key: Key) throws(Fallback) -> Int {
            guard let index = document.find(key, in: members) else { throw document.fallBack() }
            return index
        }

        /// The value of `key`, or `nil` when it is missing or `null`.
        private func present(_ key: Key) -> Int? {
            guard let index = document.find(key, in: members), !document.isNull(index) else { return nil }
            return index
        }

        func decodeNil(forKey key: Key) throws -> Bool { document.isNull(try value(key)) }
        func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try document.bool(try value(key)) }
        func decode(_ type: String.Type, forKey key: Key) throws -> String {
            try document.string(try value(key))
        }
        func decode(_ type: Double.Type, forKey key: Key) throws -> Double {
            try document.double(try value(key))
        }
        func decode(_ type: Float.Type, forKey key: Key) throws -> Float { throw document.fallBack() }
        func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try document.int(try value(key)) }
        func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try integer(key) }
        func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try integer(key) }
        func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try integer(key) }
        func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try integer(key) }
        func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try integer(key) }
        func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try integer(key) }
        func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try integer(key) }
        func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try integer(key) }
        func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try integer(key) }
        // 128-bit integers: Foundation's own rules (and the protocol's default throws otherwise).
        func decode(_ type: Int128.Type, forKey key: Key) throws -> Int128 { throw document.fallBack() }
        func decode(_ type: UInt128.Type, forKey key: Key) throws -> UInt128 { throw document.fallBack() }

        private func integer<I: FixedWidthInteger>(_ key: Key) throws(Fallback) -> I {
            try document.integer(try value(key), as: I.self)
        }

        func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
            try document.decode(T.self, at: try value(key), path: path.appending(key))
        }

        func decodeIfPresent(_ type: String.Type, forKey key: Key) throws -> String? {
            try present(key).map { (index) throws(Fallback) in try document.string(index) }
        }

        func decodeIfPresent(_ type: Bool.Type, forKey key: Key) throws -> Bool? {
            try present(key).map { (index) throws(Fallback) in try document.bool(index) }
        }

        func decodeIfPresent(_ type: Double.Type, forKey key: Key) throws -> Double? {
            try present(key).map { (index) throws(Fallback) in try document.double(index) }
        }

        func decodeIfPresent(_ type: Int.Type, forKey key: Key) throws -> Int? {
            try present(key).map { (index) throws(Fallback) in try document.int(index) }
        }

        func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
            guard let index = present(key) else { return nil }
            return try document.decode(T.self, at: index, path: path.appending(key))
        }

        func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws
            -> KeyedDecodingContainer<NestedKey>
        {
            try ValueDecoder(document: document, at: try value(key), path: path.appending(key))
                .container(keyedBy: NestedKey.self)
        }

        func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
            try ValueDecoder(document: document, at: try value(key), path: path.appending(key))
                .unkeyedContainer()
        }

        func superDecoder() throws -> any Decoder { throw document.fallBack() }
        func superDecoder(forKey key: Key) throws -> any Decoder { throw document.fallBack() }
    }

    struct Unkeyed: UnkeyedDecodingContainer {
        let document: Document
        let elements: [Int]
        let path: CodingPath
        var codingPath: [any CodingKey] { path.array }
        private(set) var currentIndex = 0

        init(document: Document, elements: [Int], path: CodingPath) {
            self.document = document
            self.elements = elements
            self.path = path
        }

        var count: Int? { elements.count }
        var isAtEnd: Bool { currentIndex >= elements.count }

        private mutating func next() throws(Fallback) -> Int {
            guard currentIndex < elements.count else { throw document.fallBack() }
            defer { currentIndex += 1 }
            return elements[currentIndex]
        }

        mutating func decodeIfPresent<T: Decodable>(_ type: T.Type) throws -> T? {
            // Past the end, Foundation has its own rule for the index: its call.
            guard currentIndex < elements.count else { throw document.fallBack() }
            if try decodeNil() { return nil }
            return try decode(T.self)
        }

        mutating func decodeNil() throws -> Bool {
            guard currentIndex < elements.count else { throw document.fallBack() }
            if document.isNull(elements[currentIndex]) {
                currentIndex += 1
                return true
            }
            return false
        }

        mutating func decode(_ type: Bool.Type) throws -> Bool { try document.bool(try next()) }
        mutating func decode(_ type: String.Type) throws -> String { try document.string(try next()) }
        mutating func decode(_ type: Double.Type) throws -> Double { try document.double(try next()) }
        // Each call that hands the value to Foundation still moves past its element: a caller
        // that retries until the container is at its end (`while !isAtEnd { try? … }`) ends.
        mutating func decode(_ type: Float.Type) throws -> Float { try fallBackPast() }
        mutating func decode(_ type: Int.Type) throws -> Int {
            try document.int(try next())
        }
        mutating func decode(_ type: Int8.Type) throws -> Int8 {
            try document.integer(try next(), as: Int8.self)
        }
        mutating func decode(_ type: Int16.Type) throws -> Int16 {
            try document.integer(try next(), as: Int16.self)
        }
        mutating func decode(_ type: Int32.Type) throws -> Int32 {
            try document.integer(try next(), as: Int32.self)
        }
        mutating func decode(_ type: Int64.Type) throws -> Int64 {
            try document.integer(try next(), as: Int64.self)
        }
        mutating func decode(_ type: UInt.Type) throws -> UInt {
            try document.integer(try next(), as: UInt.self)
        }
        mutating func decode(_ type: UInt8.Type) throws -> UInt8 {
            try document.integer(try next(), as: UInt8.self)
        }
        mutating func decode(_ type: UInt16.Type) throws -> UInt16 {
            try document.integer(try next(), as: UInt16.self)
        }
        mutating func decode(_ type: UInt32.Type) throws -> UInt32 {
            try document.integer(try next(), as: UInt32.self)
        }
        mutating func decode(_ type: UInt64.Type) throws -> UInt64 {
            try document.integer(try next(), as: UInt64.self)
        }

        mutating func decode(_ type: Int128.Type) throws -> Int128 { try fallBackPast() }
        mutating func decode(_ type: UInt128.Type) throws -> UInt128 { try fallBackPast() }

        /// Moves past the current element and sends the value to Foundation.
        private mutating func fallBackPast() throws -> Never {
            _ = try next()
            throw document.fallBack()
        }

        mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
            let index = currentIndex
            return try document.decode(T.self, at: try next(), path: path.appending(IndexKey(index: index)))
        }

        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws
            -> KeyedDecodingContainer<NestedKey>
        {
            let path = path.appending(IndexKey(index: currentIndex))
            return try ValueDecoder(document: document, at: try next(), path: path)
                .container(keyedBy: NestedKey.self)
        }

        mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
            let path = path.appending(IndexKey(index: currentIndex))
            return try ValueDecoder(document: document, at: try next(), path: path).unkeyedContainer()
        }

        mutating func superDecoder() throws -> any Decoder { try fallBackPast() }
    }

    struct Single: SingleValueDecodingContainer {
        let document: Document
        let index: Int
        let path: CodingPath
        var codingPath: [any CodingKey] { path.array }

        func decodeNil() -> Bool { document.isNull(index) }
        func decode(_ type: Bool.Type) throws -> Bool { try document.bool(index) }
        func decode(_ type: String.Type) throws -> String { try document.string(index) }
        func decode(_ type: Double.Type) throws -> Double { try document.double(index) }
        func decode(_ type: Float.Type) throws -> Float { throw document.fallBack() }
        func decode(_ type: Int.Type) throws -> Int { try document.int(index) }
        func decode(_ type: Int8.Type) throws -> Int8 { try document.integer(index, as: Int8.self) }
        func decode(_ type: Int16.Type) throws -> Int16 { try document.integer(index, as: Int16.self) }
        func decode(_ type: Int32.Type) throws -> Int32 { try document.integer(index, as: Int32.self) }
        func decode(_ type: Int64.Type) throws -> Int64 { try document.integer(index, as: Int64.self) }
        func decode(_ type: UInt.Type) throws -> UInt { try document.integer(index, as: UInt.self) }
        func decode(_ type: UInt8.Type) throws -> UInt8 { try document.integer(index, as: UInt8.self) }
        func decode(_ type: UInt16.Type) throws -> UInt16 { try document.integer(index, as: UInt16.self) }
        func decode(_ type: UInt32.Type) throws -> UInt32 { try document.integer(index, as: UInt32.self) }
        func decode(_ type: UInt64.Type) throws -> UInt64 { try document.integer(index, as: UInt64.self) }
        func decode(_ type: Int128.Type) throws -> Int128 { throw document.fallBack() }
        func decode(_ type: UInt128.Type) throws -> UInt128 { throw document.fallBack() }

        func decode<T: Decodable>(_ type: T.Type) throws -> T {
            try document.decode(T.self, at: index, path: path)
        }
    }
}
