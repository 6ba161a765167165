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
        private(set) var mustFallBack = false
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
        private static func copy(_ source: UnsafeRawBufferPointer) -> UnsafeMutablePointer<UInt8> {
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

        private func literalEnd(_ index: Int, _ literal: StaticString) throws(Fallback) -> Int {
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

        private func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

        private func hexValue(_ byte: UInt8) -> UInt32? {
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

        private func sameKey(_ a: Member, _ b: Member) -> Bool {
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

        // MARK: Values

        func isNull(_ index: Int) -> Bool { bytes[index] == UInt8(ascii: "n") }

        func bool(_ index: Int) throws(Fallback) -> Bool {
            switch bytes[index] {
            case UInt8(ascii: "t"): return true
            case UInt8(ascii: "f"): return false
            default: throw fallBack()
            }
        }

        func string(_ index: Int) throws(Fallback) -> String {
            guard bytes[index] == UInt8(ascii: "\"") else { throw fallBack() }
            let (end, escaped) = try stringEnd(index)
            let raw = UnsafeBufferPointer(start: bytes + index + 1, count: end - index - 2)
            if !escaped {
                // ASCII is valid UTF-8: no validation pass.
                if isASCII(index + 1, raw.count) { return String(decoding: raw, as: UTF8.self) }
                guard let string = String(validating: raw, as: UTF8.self) else { throw fallBack() }
                return string
            }
            var unescaped: [UInt8] = []
            unescaped.reserveCapacity(raw.count)
            var at = 0
            while at < raw.count {
                let byte = raw[at]
                guard byte == UInt8(ascii: "\\") else {
                    unescaped.append(byte)
                    at += 1
                    continue
                }
                let code = raw[at + 1]
                at += 2
                switch code {
                case UInt8(ascii: "b"): unescaped.append(0x08)
                case UInt8(ascii: "f"): unescaped.append(0x0C)
                case UInt8(ascii: "n"): unescaped.append(0x0A)
                case UInt8(ascii: "r"): unescaped.append(0x0D)
                case UInt8(ascii: "t"): unescaped.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try hex4(raw, at)
                    at += 4
                    if scalar >= 0xD800 && scalar < 0xDC00 {
                        // A high surrogate must be followed by a low one.
                        guard at + 6 <= raw.count, raw[at] == UInt8(ascii: "\\"),
                            raw[at + 1] == UInt8(ascii: "u")
                        else { throw fallBack() }
                        let low = try hex4(raw, at + 2)
                        guard low >= 0xDC00 && low < 0xE000 else { throw fallBack() }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                        at += 6
                    }
                    guard let unicode = Unicode.Scalar(scalar) else { throw fallBack() }
                    unescaped.append(contentsOf: UTF8.encode(unicode)!)
                default: unescaped.append(code)
                }
            }
            guard let string = String(validating: unescaped, as: UTF8.self) else { throw fallBack() }
            return string
        }

        private func hex4(_ raw: UnsafeBufferPointer<UInt8>, _ at: Int) throws(Fallback) -> UInt32 {
            var value: UInt32 = 0
            for offset in 0..<4 {
                guard at + offset < raw.count, let digit = hexValue(raw[at + offset]) else {
                    throw fallBack()
                }
                value = value << 4 | digit
            }
            return value
        }

        /// An integer written as one (an integer with a fraction or exponent, or one out of
        /// range, goes to Foundation, whose rules for those are its own).
        func integer<I: FixedWidthInteger>(_ index: Int, as type: I.Type) throws(Fallback) -> I {
            let (negative, magnitude) = try digits(index)
            if negative {
                // -2^63 is the one magnitude past Int64.max.
                guard I.isSigned, magnitude <= UInt64(Int64.max) + 1 else { throw fallBack() }
                let value = magnitude == UInt64(Int64.max) + 1 ? Int64.min : -Int64(magnitude)
                guard let result = I(exactly: value) else { throw fallBack() }
                return result
            }
            guard let result = I(exactly: magnitude) else { throw fallBack() }
            return result
        }

        /// An `Int` (the common case, without the generic conversion).
        func int(_ index: Int) throws(Fallback) -> Int {
            let (negative, magnitude) = try digits(index)
            if negative {
                guard magnitude <= UInt64(Int.max) + 1 else { throw fallBack() }
                return magnitude == UInt64(Int.max) + 1 ? Int.min : -Int(magnitude)
            }
            guard magnitude <= UInt64(Int.max) else { throw fallBack() }
            return Int(magnitude)
        }

        /// The sign and magnitude of an integer written as one.
        private func digits(_ index: Int) throws(Fallback) -> (negative: Bool, magnitude: UInt64) {
            let (end, isInteger) = try numberEnd(index)
            guard isInteger else { throw fallBack() }
            var at = index
            let negative = bytes[at] == UInt8(ascii: "-")
            if negative { at += 1 }
            var magnitude: UInt64 = 0
            while at < end {
                let (times, overflow) = magnitude.multipliedReportingOverflow(by: 10)
                let (next, overflow2) = times.addingReportingOverflow(UInt64(bytes[at] - UInt8(ascii: "0")))
                guard !overflow, !overflow2 else { throw fallBack() }
                magnitude = next
                at += 1
            }
            return (negative, magnitude)
        }

        /// A finite `Double`, by Swift's correctly rounded, locale-independent parser.
        func double(_ index: Int) throws(Fallback) -> Double {
            let (end, isInteger) = try numberEnd(index)
            let value: Double
            if let exact = exactDouble(index, end) {
                value = exact
            } else {
                let text = String(
                    decoding: UnsafeBufferPointer(start: bytes + index, count: end - index), as: UTF8.self)
                guard let parsed = Double(text), parsed.isFinite else { throw fallBack() }
                value = parsed
            }
            // Foundation checks a zero its own way (it reads "0e1" as zero and refuses an
            // underflow such as "1e-400"): a zero written with a fraction or exponent is its call.
            if value == 0 && !isInteger { throw fallBack() }
            return value
        }

        /// The number between `start` and `end` (valid JSON, see ``numberEnd(_:)``) when its
        /// digits, without the point, make an integer of at most 2^53 and its decimal exponent is
        /// within ±22; `nil` otherwise.
        ///
        /// Such a number is that integer times or divided by a power of ten that a `Double`
        /// holds exactly, so one IEEE multiplication or division rounds it correctly (Clinger's
        /// fast path): the `Double` that `Double(String)` (`strtod`) and Foundation, which
        /// round correctly too, give. It is most numbers an app stores (`12.5`, `-0.25`,
        /// `1e3`), and takes about a tenth of `Double(String)`'s instructions.
        func exactDouble(_ start: Int, _ end: Int) -> Double? {
            var at = start
            let negative = bytes[at] == UInt8(ascii: "-")
            if negative { at += 1 }
            var mantissa: UInt64 = 0
            var digits = 0
            var exponent = 0
            var inFraction = false
            while at < end {
                let byte = bytes[at]
                if isDigit(byte) {
                    // Past 19 digits the integer could overflow: `strtod`'s call.
                    digits += 1
                    if digits > 19 { return nil }
                    mantissa = mantissa * 10 + UInt64(byte - UInt8(ascii: "0"))
                    if inFraction { exponent -= 1 }
                } else if byte == UInt8(ascii: ".") {
                    inFraction = true
                } else {
                    break
                }
                at += 1
            }
            if at < end {
                // An exponent: `e` or `E`, a sign, digits (checked by `numberEnd`).
                at += 1
                var negativeExponent = false
                if bytes[at] == UInt8(ascii: "+") || bytes[at] == UInt8(ascii: "-") {
                    negativeExponent = bytes[at] == UInt8(ascii: "-")
                    at += 1
                }
                var written = 0
                while at < end {
                    written = written * 10 + Int(bytes[at] - UInt8(ascii: "0"))
                    if written > 1_000 { return nil }
                    at += 1
                }
                exponent += negativeExponent ? -written : written
            }
            guard mantissa <= 1 << 53, exponent >= -22, exponent <= 22 else { return nil }
            var value = Double(mantissa)
            if exponent < 0 {
                value /= Self.powersOfTen[-exponent]
            } else {
                value *= Self.powersOfTen[exponent]
            }
            return negative ? -value : value
        }

        /// 10^0 through 10^22, each exact in a `Double`.
        static let powersOfTen: [Double] = (0...22).map { power in
            var value = 1.0
            for _ in 0..<power { value *= 10 }
            return value
        }

        /// The elements of the array at `index`, each read by `element` where it starts.
        func array<Element>(_ index: Int, _ element: (Int) throws(Fallback) -> Element) throws(Fallback)
            -> [Element]
        {
            guard bytes[index] == UInt8(ascii: "[") else { throw fallBack() }
            var result: [Element] = []
            var at = skipSpace(index + 1)
            if bytes[at] == UInt8(ascii: "]") { return result }
            while true {
                result.append(try element(at))
                at = skipSpace(skipValue(at))
                if bytes[at] == UInt8(ascii: "]") { return result }
                at = skipSpace(at + 1)
            }
        }

        /// `T` at `index`: plain types parsed in place, others through their `init(from:)`.
        func decode<T: Decodable>(_ type: T.Type, at index: Int, path: @autoclosure () -> CodingPath) throws
            -> T
        {
            // The same type: a bit cast, not a dynamic cast.
            if T.self == String.self { return unsafeBitCast(try string(index), to: T.self) }
            if T.self == Int.self { return unsafeBitCast(try int(index), to: T.self) }
            if T.self == Double.self { return unsafeBitCast(try double(index), to: T.self) }
            if T.self == Bool.self { return unsafeBitCast(try bool(index), to: T.self) }
            // Arrays of those: parsed in place too, not through `Array.init(from:)`, whose
            // generic unkeyed container cost about two thirds of a record's `[String]` field.
            // (Foundation's array is the same elements in order; anything else, a `null` among
            // them included, throws `Fallback` and is Foundation's to answer.)
            if T.self == [String].self { return unsafeBitCast(try array(index, string), to: T.self) }
            if T.self == [Int].self { return unsafeBitCast(try array(index, int), to: T.self) }
            if T.self == [Double].self { return unsafeBitCast(try array(index, double), to: T.self) }
            if T.self == [Bool].self { return unsafeBitCast(try array(index, bool), to: T.self) }
            if FastJSON.isSpecial(T.self) { throw fallBack() }
            // An error of the value's own `init(from:)` (a raw value no case has, a check of its
            // own) sends the whole value to Foundation, whatever its caller does with the error:
            // a caller that catches it and reads on must never go on from where this decoder
            // stands, which is not always where Foundation would (an unkeyed container here
            // moves past an element whose decode failed; Foundation's stays on it).
            do {
                return try T(from: ValueDecoder(document: self, at: index, path: path()))
            } catch {
                mustFallBack = true
                throw error
            }
        }
    }

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
