internal import Foundation

/// The document's values: what its containers decode, read from the bytes the scanner indexed.
extension FastJSON.Document {
    // (An extension of a nested type does not see its outer type's names.)
    typealias Fallback = FastJSON.Fallback
    typealias CodingPath = FastJSON.CodingPath
    typealias ValueDecoder = FastJSON.ValueDecoder

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

    func hex4(_ raw: UnsafeBufferPointer<UInt8>, _ at: Int) throws(Fallback) -> UInt32 {
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
    func digits(_ index: Int) throws(Fallback) -> (negative: Bool, magnitude: UInt64) {
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
