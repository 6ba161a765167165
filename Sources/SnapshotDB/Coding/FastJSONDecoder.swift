internal import Foundation

/// A decoder for the JSON that ``JSONValueCodec`` stores, in front of Foundation's `JSONDecoder`,
/// which it never contradicts. On a record of five fields with an array of two strings it takes
/// 1.5–1.7 µs where `JSONDecoder` takes 4.1–4.9 µs (2026-11-25, release build, this machine);
/// the cost left is mostly the `Decoder` protocol's own: generic metadata lookups, the boxed
/// keyed container, and the array the record's `init(from:)` appends to.
///
/// Decoding values is the CPU cost of reads, of view upkeep and of every extension build, and
/// most of a `JSONDecoder` call is its generic machinery: it scans the whole document into a map
/// of tokens, boxes containers, and builds coding paths. This decoder reads the bytes where they
/// lie: an object is scanned once into its members (key bytes and value offsets), and each
/// `decode(_:forKey:)` compares key bytes and parses the value in place.
///
/// **It never answers differently from Foundation.** It handles the exact cases whose result is
/// certain: objects, arrays, `null`, `true`/`false`, strings (with every JSON escape),
/// integers written as integers, and `Double`s (parsed by Swift's locale-independent parser,
/// correctly rounded as Foundation's). Anything else sets ``Document/mustFallBack`` and throws:
/// a `Float` (whose rounding path differs), an integer written with a fraction or exponent, a
/// zero `Double` written with one (Foundation's check for a true zero and its underflow rule), `Data`, `URL` and
/// `Decimal` (which `JSONDecoder` decodes its own way), duplicate keys (compared as Swift
/// compares strings, so `"é"` and `"e\u{301}"` are duplicates, as they are for Foundation's
/// dictionary of members), two keys that are one integer key (`"1"` and `"01"`), an object of
/// more than 64 members, `superDecoder`, a missing key, a type mismatch, invalid JSON, or any
/// error the value's own `init(from:)` throws. When that flag is set, the value is decoded again by
/// Foundation, whose result or error is the answer, even if the value's `init(from:)` caught
/// the error and went on (a `try?` must not take another branch here than under Foundation).
///
/// The handing over is a thrown error, so the value's own code sees it: a `try!` on a field
/// this decoder hands over (a `Float`, say) traps where Foundation would return, and code of
/// `init(from:)` that ran before the hand-over (a counter, a log line) runs again under
/// Foundation. Values of plain `Codable` types, whose `init(from:)` is synthesized, see neither.
/// So a value that decodes through an unusual path costs both decoders; a value of plain fields
/// costs this one only.
enum FastJSON {
    /// `value` decoded from `data`, or `nil` when Foundation must decode it.
    static func decode<T: Decodable>(_ type: T.Type, from data: Data) -> T? {
        // Its one error is `Fallback`, which this form answers as `nil`: Foundation decodes.
        try? decodeOrFallBack(T.self, from: data)
    }

    /// `value` decoded from `data`; throws ``Fallback`` when Foundation must decode it.
    ///
    /// The form the codec calls: it returns a `T`, not a `T?`, because in generic code that is
    /// not specialized (a codec's `decode<T>` called with the app's type) an `Optional<T>` has
    /// its type metadata looked up at run time on every call, about 330 instructions of a
    /// 6,000-instruction decode of a two-field record (callgrind).
    static func decodeOrFallBack<T: Decodable>(_ type: T.Type, from data: Data) throws(Fallback) -> T {
        if isSpecial(T.self) { throw Fallback() }
        return try decodeOrFallBack(T.self, document: Document(data))
    }

    /// ``decodeOrFallBack(_:from:)`` of bytes in place (copied once, into the document).
    static func decodeOrFallBack<T: Decodable>(_ type: T.Type, fromBytes bytes: UnsafeRawBufferPointer)
        throws(Fallback) -> T
    {
        if isSpecial(T.self) { throw Fallback() }
        return try decodeOrFallBack(T.self, document: Document(bytes))
    }

    private static func decodeOrFallBack<T: Decodable>(_ type: T.Type, document: Document) throws(Fallback)
        -> T
    {
        let value: T
        do {
            let root = try document.root()
            value = try document.decode(T.self, at: root, path: CodingPath())
        } catch {
            throw Fallback()
        }
        if document.mustFallBack { throw Fallback() }
        return value
    }

    /// Types `JSONDecoder` decodes its own way (its data, URL and decimal strategies).
    static func isSpecial<T>(_ type: T.Type) -> Bool {
        T.self == Data.self || T.self == URL.self || T.self == Decimal.self
    }

    /// The error that sends a value to Foundation.
    struct Fallback: Error {}

    /// A coding path, kept as its parent's path and its last key until someone asks for it
    /// (decoding a nested value then makes no array).
    struct CodingPath {
        var prefix: [any CodingKey] = []
        var last: (any CodingKey)?

        var array: [any CodingKey] { last.map { prefix + [$0] } ?? prefix }

        func appending(_ key: any CodingKey) -> CodingPath { CodingPath(prefix: array, last: key) }
    }

    /// An array element's place in a coding path.
    struct IndexKey: CodingKey {
        let intValue: Int?
        var stringValue: String { "Index \(intValue ?? 0)" }
        init(index: Int) { intValue = index }
        init?(stringValue: String) { nil }
        init?(intValue: Int) { self.intValue = intValue }
    }

    /// One member of an object: its key's bytes (between the quotes), where its value starts,
    /// and whether the key is plain ASCII. Other keys (escapes, or other scalars) are compared
    /// as strings, as Swift compares strings (canonical equivalence), as Foundation looks keys
    /// up; plain ASCII keys compare byte by byte, which is the same thing for them. (No string
    /// is kept here: an array of members with none is copied and freed without reference
    /// counting.)
    struct Member {
        let keyStart: Int
        let keyEnd: Int
        let value: Int
        let plain: Bool
    }

    /// The bytes of one value being decoded, copied with a terminating zero (so that every scan
    /// stops at the end without a bounds check of its own), and whether it must go to
    /// Foundation.
    final class Document {
        let bytes: UnsafeMutablePointer<UInt8>
        let count: Int
        var mustFallBack = false
        /// Past this nesting the document goes to Foundation (which refuses past 512).
        static let maximumDepth = 256

        init(_ data: Data) {
            count = data.count
            bytes = data.withUnsafeBytes(Self.copy)
        }

        /// A document of a copy of `source` (which may be SQLite's buffer, valid only now).
        init(_ source: UnsafeRawBufferPointer) {
            count = source.count
            bytes = Self.copy(source)
        }

        /// `source` copied into new memory, with a terminating zero.
        static func copy(_ source: UnsafeRawBufferPointer) -> UnsafeMutablePointer<UInt8> {
            let bytes = UnsafeMutablePointer<UInt8>.allocate(capacity: source.count + 1)
            if let base = source.baseAddress, source.count > 0 {
                UnsafeMutableRawPointer(bytes).copyMemory(from: base, byteCount: source.count)
            }
            bytes[source.count] = 0
            return bytes
        }

        // Containers hold the document: the bytes live as long as any of them.
        deinit { bytes.deallocate() }

        /// Marks the document for Foundation and returns the error to throw.
        func fallBack() -> Fallback {
            mustFallBack = true
            return Fallback()
        }

        // MARK: Scanning

        func skipSpace(_ index: Int) -> Int {
            var index = index
            while index < count {
                switch bytes[index] {
                case 0x20, 0x0A, 0x0D, 0x09: index += 1
                default: return index
                }
            }
            return index
        }

        /// Where the value of the whole document starts; checks that the document is one value.
        func root() throws(Fallback) -> Int {
            let start = skipSpace(0)
            let end = try valueEnd(start, depth: 0)
            guard skipSpace(end) == count else { throw fallBack() }
            return start
        }

        /// The end of the value at `index`, checking that it is valid JSON.
        func valueEnd(_ index: Int, depth: Int) throws(Fallback) -> Int {
            guard index < count else { throw fallBack() }
            switch bytes[index] {
            case UInt8(ascii: "\""): return try stringEnd(index).end
            case UInt8(ascii: "{"):
                guard depth < Self.maximumDepth else { throw fallBack() }
                var at = skipSpace(index + 1)
                if bytes[at] == UInt8(ascii: "}") { return at + 1 }
                while true {
                    guard bytes[at] == UInt8(ascii: "\"") else { throw fallBack() }
                    at = skipSpace(try stringEnd(at).end)
                    guard bytes[at] == UInt8(ascii: ":") else { throw fallBack() }
                    at = skipSpace(try valueEnd(skipSpace(at + 1), depth: depth + 1))
                    if bytes[at] == UInt8(ascii: ",") {
                        at = skipSpace(at + 1)
                    } else if bytes[at] == UInt8(ascii: "}") {
                        return at + 1
                    } else {
                        throw fallBack()
                    }
                }
            case UInt8(ascii: "["):
                guard depth < Self.maximumDepth else { throw fallBack() }
                var at = skipSpace(index + 1)
                if bytes[at] == UInt8(ascii: "]") { return at + 1 }
                while true {
                    at = skipSpace(try valueEnd(at, depth: depth + 1))
                    if bytes[at] == UInt8(ascii: ",") {
                        at = skipSpace(at + 1)
                    } else if bytes[at] == UInt8(ascii: "]") {
                        return at + 1
                    } else {
                        throw fallBack()
                    }
                }
            case UInt8(ascii: "t"): return try literalEnd(index, "true")
            case UInt8(ascii: "f"): return try literalEnd(index, "false")
            case UInt8(ascii: "n"): return try literalEnd(index, "null")
            default: return try numberEnd(index).end
            }
        }

        /// The end of the value at `index`, in a document ``root()`` checked: strings to their
        /// closing quote, containers to their closing bracket, without checking again.
        func skipValue(_ index: Int) -> Int {
            switch bytes[index] {
            case UInt8(ascii: "\""):
                // Checked by `root()`: no control character, every escape whole.
                var at = index + 1
                while true {
                    at = specialByte(from: at)
                    if at >= count { return count }
                    if bytes[at] == UInt8(ascii: "\"") { return at + 1 }
                    at += 2
                }
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                var depth = 0
                var at = index
                repeat {
                    switch bytes[at] {
                    case UInt8(ascii: "\""):
                        at = skipValue(at)
                        continue
                    case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
                    case UInt8(ascii: "}"), UInt8(ascii: "]"): depth -= 1
                    default: break
                    }
                    at += 1
                } while depth > 0
                return at
            default:
                // A number or a literal: letters, digits, signs and points.
                var at = index
                while true {
                    switch bytes[at] {
                    case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                        UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "+"), UInt8(ascii: "-"),
                        UInt8(ascii: "."):
                        at += 1
                    default: return at
                    }
                }
            }
        }

        func literalEnd(_ index: Int, _ literal: StaticString) throws(Fallback) -> Int {
            let length = literal.utf8CodeUnitCount
            guard index + length <= count, memcmp(bytes + index, literal.utf8Start, length) == 0 else {
                throw fallBack()
            }
            return index + length
        }

        /// The end of the string at `index` (its opening quote) and whether it holds escapes;
        /// checks its escapes and that it holds no control character.
        func stringEnd(_ index: Int) throws(Fallback) -> (end: Int, escaped: Bool) {
            var at = index + 1
            var escaped = false
            while true {
                at = specialByte(from: at)
                guard at < count else { throw fallBack() }
                let byte = bytes[at]
                if byte == UInt8(ascii: "\"") { return (at + 1, escaped) }
                if byte < 0x20 { throw fallBack() }
                if byte == UInt8(ascii: "\\") {
                    escaped = true
                    switch bytes[at + 1] {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"),
                        UInt8(ascii: "f"), UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                        at += 2
                    case UInt8(ascii: "u"):
                        guard at + 5 < count else { throw fallBack() }
                        for offset in 2..<6 where hexValue(bytes[at + offset]) == nil { throw fallBack() }
                        at += 6
                    default: throw fallBack()
                    }
                }
            }
        }

        /// The first byte from `start` on that ends a run of plain string bytes (a quote, a
        /// backslash or a control character), or `count`. Eight bytes at a time: bitwise tests
        /// on a 64-bit word flag each byte that is one of them, and the lowest flag is the first
        /// such byte (a test's borrow runs only upward from a byte it flags rightly, so no byte
        /// before the first is flagged). Strings are most of a record's bytes, and are scanned
        /// twice (checked, then read).
        @inline(__always)
        func specialByte(from start: Int) -> Int {
            let ones: UInt64 = 0x0101_0101_0101_0101
            var at = start
            while at + 8 <= count {
                let word = UInt64(littleEndian: UnsafeRawPointer(bytes + at).loadUnaligned(as: UInt64.self))
                let quote = word ^ (ones &* 0x22)
                let backslash = word ^ (ones &* 0x5C)
                let found =
                    (((quote &- ones) & ~quote) | ((backslash &- ones) & ~backslash)
                        | ((word &- ones &* 0x20) & ~word)) & 0x8080_8080_8080_8080
                if found != 0 { return at + found.trailingZeroBitCount >> 3 }
                at += 8
            }
            while at < count {
                let byte = bytes[at]
                if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") || byte < 0x20 { return at }
                at += 1
            }
            return count
        }

        /// Whether the `length` bytes at `start` are all ASCII, eight at a time.
        func isASCII(_ start: Int, _ length: Int) -> Bool {
            var at = start
            let end = start + length
            var high: UInt64 = 0
            while at + 8 <= end {
                high |= UnsafeRawPointer(bytes + at).loadUnaligned(as: UInt64.self)
                at += 8
            }
            while at < end {
                high |= UInt64(bytes[at])
                at += 1
            }
            return high & 0x8080_8080_8080_8080 == 0
        }

        /// The end of the number at `index` and whether it is an integer (no fraction, no
        /// exponent); checks JSON's grammar (no leading zero, digits after a point).
        func numberEnd(_ index: Int) throws(Fallback) -> (end: Int, isInteger: Bool) {
            var at = index
            if bytes[at] == UInt8(ascii: "-") { at += 1 }
            guard isDigit(bytes[at]) else { throw fallBack() }
            if bytes[at] == UInt8(ascii: "0") {
                at += 1
                if isDigit(bytes[at]) { throw fallBack() }
            } else {
                while isDigit(bytes[at]) { at += 1 }
            }
            var isInteger = true
            if bytes[at] == UInt8(ascii: ".") {
                isInteger = false
                at += 1
                guard isDigit(bytes[at]) else { throw fallBack() }
                while isDigit(bytes[at]) { at += 1 }
            }
            if bytes[at] == UInt8(ascii: "e") || bytes[at] == UInt8(ascii: "E") {
                isInteger = false
                at += 1
                if bytes[at] == UInt8(ascii: "+") || bytes[at] == UInt8(ascii: "-") { at += 1 }
                guard isDigit(bytes[at]) else { throw fallBack() }
                while isDigit(bytes[at]) { at += 1 }
            }
            return (at, isInteger)
        }

        func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

        func hexValue(_ byte: UInt8) -> UInt32? {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): UInt32(byte - UInt8(ascii: "A") + 10)
            default: nil
            }
        }

        /// The members of the object at `index` (already checked by ``root()``); duplicate keys
        /// and keys with escapes go to Foundation.
        func members(_ index: Int) throws(Fallback) -> [Member] {
            guard bytes[index] == UInt8(ascii: "{") else { throw fallBack() }
            var members: [Member] = []
            members.reserveCapacity(8)
            var at = skipSpace(index + 1)
            if bytes[at] == UInt8(ascii: "}") { return members }
            while true {
                let (keyEnd, escaped) = try stringEnd(at)
                let plain = !escaped && isASCII(at + 1, keyEnd - at - 2)
                // A key that is not plain must be a valid string (its escapes, its UTF-8).
                if !plain { _ = try string(at) }
                let value = skipSpace(skipSpace(keyEnd) + 1)
                let member = Member(keyStart: at + 1, keyEnd: keyEnd - 1, value: value, plain: plain)
                for other in members where sameKey(other, member) { throw fallBack() }
                members.append(member)
                at = skipSpace(skipValue(value))
                if bytes[at] == UInt8(ascii: "}") { return members }
                at = skipSpace(at + 1)
                if members.count > 64 { throw fallBack() }
            }
        }

        /// Where each element of the array at `index` starts.
        func elements(_ index: Int) throws(Fallback) -> [Int] { try array(index) { $0 } }

        /// The key of `member` as a string (unescaped: ``members(_:)`` checked that it reads).
        func keyString(_ member: Member) -> String {
            // ``members(_:)`` read every key that is not plain, so this read cannot fail.
            guard member.plain else { return (try? string(member.keyStart - 1)) ?? "" }
            return String(
                decoding: UnsafeBufferPointer(
                    start: bytes + member.keyStart, count: member.keyEnd - member.keyStart),
                as: UTF8.self)
        }

        func sameKey(_ a: Member, _ b: Member) -> Bool {
            if a.plain, b.plain {
                let length = a.keyEnd - a.keyStart
                return length == b.keyEnd - b.keyStart
                    && memcmp(bytes + a.keyStart, bytes + b.keyStart, length) == 0
            }
            return keyString(a) == keyString(b)
        }

        /// The member whose key is `key`: plain keys by their bytes, others as strings.
        func find(_ key: some CodingKey, in members: [Member]) -> Int? {
            let name = key.stringValue
            var bytesOfName = name
            return bytesOfName.withUTF8 { utf8 in
                var isASCII = true
                for byte in utf8 where byte >= 0x80 {
                    isASCII = false
                    break
                }
                for member in members {
                    if isASCII, member.plain {
                        let length = member.keyEnd - member.keyStart
                        if length == utf8.count
                            && (length == 0
                                || memcmp(bytes + member.keyStart, utf8.baseAddress!, length) == 0)
                        {
                            return member.value
                        }
                    } else if keyString(member) == name {
                        return member.value
                    }
                }
                return nil
            }
        }

    }

}
