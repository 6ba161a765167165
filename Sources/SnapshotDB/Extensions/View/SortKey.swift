public import Foundation

/// A view's order as bytes: a key built from a value's fields that compares byte by byte
/// (`memcmp`) exactly as the fields compare in Swift, in order, each ascending or descending.
///
/// ```swift
/// SortKey(note.folder, .descending(note.modified), note.title)
/// ```
///
/// A view declared with a sort key (``View/init(name:version:collections:group:sortKey:)``)
/// stores each item's key beside it, in its pages: inserting, moving and finding an item
/// compare keys and never decode a value.
///
/// The encoding of each component (all big-endian, so that byte order is numeric order):
///
/// | component | bytes | order |
/// |---|---|---|
/// | `String` | its UTF-8 in Unicode normalization form C, each `0x00` byte written `0x00 0xFF`, then `0x00 0x00` | Swift's `<` (which compares canonically equivalent strings as equal: `"é"` and `"e\u{301}"` give the same key) |
/// | `Int` | 8 bytes: the two's complement with its sign bit flipped | numeric |
/// | `Double` | 8 bytes: the IEEE 754 bits, all flipped for a negative number, the sign bit flipped for a positive one; `-0.0` as `0.0`, every NaN as one NaN | numeric; NaN after `+infinity` (Swift's `<` has no place for NaN) |
/// | `Date` | its `timeIntervalSinceReferenceDate` as a `Double` | chronological |
/// | `Bool` | 1 byte, `0x00` or `0x01` | `false` first |
/// | `Optional` | `0x00` for `nil`; `0x01`, then the value | `nil` first |
/// | `.descending(x)` | every byte of `x`'s encoding flipped | reversed |
///
/// Swift's `<` on strings promises canonical order, and mostly keeps it; for some pairs with
/// decomposed characters it answers neither way (Swift 6.3: `"A\u{30A}" < "Åa"`,
/// `"Åa" < "A\u{30A}"` and `==` are all `false`). A string key follows canonical order for every
/// pair: normalization form C, scalar by scalar (UTF-8 bytes compare as scalars do).
///
/// Every encoding is prefix-free (none is the start of another), so a component never bleeds
/// into the next one's comparison and flipping an encoding reverses its order.
public struct SortKey: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// The encoded key.
    public let bytes: [UInt8]

    /// The key of `components`, compared in order.
    public init<each Component: SortKeyComponent>(_ components: repeat each Component) {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(32)
        for component in repeat each components {
            component.appendSortKey(to: &bytes)
        }
        self.bytes = bytes
    }

    /// A key of bytes already encoded (by ``SortKey/init(_:)``, or read back from storage).
    public init(bytes: [UInt8]) {
        self.bytes = bytes
    }

    /// Byte-by-byte comparison; a key that is a prefix of another comes first.
    public static func < (lhs: SortKey, rhs: SortKey) -> Bool {
        Self.compare(lhs.bytes, rhs.bytes) < 0
    }

    /// `memcmp` order of two encoded keys: negative, zero or positive.
    static func compare(_ lhs: [UInt8], _ rhs: [UInt8]) -> Int {
        lhs.withUnsafeBytes { left in rhs.withUnsafeBytes { right in compare(left, right) } }
    }

    /// `memcmp` order of two encoded keys where they lie: negative, zero or positive.
    static func compare(_ lhs: UnsafeRawBufferPointer, _ rhs: UnsafeRawBufferPointer) -> Int {
        let common = min(lhs.count, rhs.count)
        if common > 0 {
            let result = memcmp(lhs.baseAddress!, rhs.baseAddress!, common)
            if result != 0 { return Int(result) }
        }
        return lhs.count - rhs.count
    }

    /// Whether the encoded key `lhs` of `lhsItem` sorts before `rhs` of `rhsItem` in a keyed
    /// view: the keys' bytes, then the items.
    static func less(_ lhs: [UInt8], _ lhsItem: ViewItem, _ rhs: [UInt8], _ rhsItem: ViewItem) -> Bool {
        less(keyOrder: compare(lhs, rhs), lhsItem, rhsItem)
    }

    /// Whether an item sorts before another in a keyed view, given the `memcmp` order of their
    /// keys: the keys, then the items (the one rule of a keyed view, wherever its keys lie).
    static func less(
        keyOrder: Int, _ lhsItem: @autoclosure () -> ViewItem, _ rhsItem: @autoclosure () -> ViewItem
    )
        -> Bool
    {
        keyOrder < 0 || (keyOrder == 0 && lhsItem() < rhsItem())
    }

    /// The key's bytes in hexadecimal.
    public var description: String {
        "SortKey(" + bytes.map { String($0, radix: 16).leftPadded(to: 2) }.joined() + ")"
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}

/// A value that can be a component of a ``SortKey``: `String`, `Int`, `Double`, `Date`,
/// `Bool`, an `Optional` of one, or ``SortKeyComponent/descending(_:)`` of one.
public protocol SortKeyComponent {
    /// Appends this value's encoding (see ``SortKey``) to `bytes`.
    func appendSortKey(to bytes: inout [UInt8])
}

extension SortKeyComponent {
    /// `value` in descending order: its encoding with every byte flipped.
    public static func descending<Value: SortKeyComponent>(_ value: Value) -> Descending<Value>
    where Self == Descending<Value> {
        Descending(value)
    }
}

/// A component in descending order (``SortKeyComponent/descending(_:)``).
public struct Descending<Value: SortKeyComponent>: SortKeyComponent {
    /// The value whose order is reversed.
    public let value: Value

    /// `value`, in descending order.
    public init(_ value: Value) { self.value = value }

    /// Appends the encoding the table of ``SortKey`` gives for this type.
    public func appendSortKey(to bytes: inout [UInt8]) {
        let start = bytes.count
        value.appendSortKey(to: &bytes)
        for index in start..<bytes.count { bytes[index] = ~bytes[index] }
    }
}

extension String: SortKeyComponent {
    /// Appends the encoding the table of ``SortKey`` gives for this type.
    public func appendSortKey(to bytes: inout [UInt8]) {
        // ASCII is its own normalization form C; anything else is normalized, so that
        // canonically equivalent strings (which Swift's `==` calls equal) give one key.
        var string = self
        let isASCII = string.withUTF8 { Self.appendASCII($0, to: &bytes) }
        if !isASCII {
            var normalized = precomposedStringWithCanonicalMapping
            normalized.withUTF8 { Self.appendEscaped($0, to: &bytes) }
        }
        bytes.append(0)
        bytes.append(0)
    }

    /// Appends `utf8` escaped (see ``appendEscaped(_:to:)``) when it is all ASCII, and says
    /// whether it was. One pass finds both what the copy needs to know: a string of ASCII
    /// without a NUL (nearly every key) is then copied whole, not byte by byte (a key of 80
    /// characters went from about 6,200 instructions to a few hundred).
    private static func appendASCII(_ utf8: UnsafeBufferPointer<UInt8>, to bytes: inout [UInt8]) -> Bool {
        var high: UInt8 = 0
        var low: UInt8 = 0xFF
        for byte in utf8 {
            high |= byte
            low = Swift.min(low, byte)
        }
        guard high < 0x80 else { return false }
        if low == 0 {
            appendEscaped(utf8, to: &bytes)
        } else {
            bytes.reserveCapacity(bytes.count + utf8.count + 2)
            bytes.append(contentsOf: utf8)
        }
        return true
    }

    /// Appends `utf8` with each `0x00` byte written `0x00 0xFF`.
    private static func appendEscaped(_ utf8: UnsafeBufferPointer<UInt8>, to bytes: inout [UInt8]) {
        bytes.reserveCapacity(bytes.count + utf8.count + 2)
        for byte in utf8 {
            bytes.append(byte)
            if byte == 0 { bytes.append(0xFF) }
        }
    }
}

extension Int: SortKeyComponent {
    /// Appends the encoding the table of ``SortKey`` gives for this type.
    public func appendSortKey(to bytes: inout [UInt8]) {
        Int64(self).appendSortKey(to: &bytes)
    }
}

extension Int64: SortKeyComponent {
    /// Appends the encoding the table of ``SortKey`` gives for this type.
    public func appendSortKey(to bytes: inout [UInt8]) {
        appendBigEndian(UInt64(bitPattern: self) ^ (1 << 63), to: &bytes)
    }
}

extension Double: SortKeyComponent {
    /// Appends the encoding the table of ``SortKey`` gives for this type.
    public func appendSortKey(to bytes: inout [UInt8]) {
        let canonical: Double = isNaN ? .nan : (self == 0 ? 0 : self)
        let bits = canonical.bitPattern
        appendBigEndian(bits & (1 << 63) != 0 ? ~bits : bits | (1 << 63), to: &bytes)
    }
}

extension Date: SortKeyComponent {
    /// Appends the encoding the table of ``SortKey`` gives for this type.
    public func appendSortKey(to bytes: inout [UInt8]) {
        timeIntervalSinceReferenceDate.appendSortKey(to: &bytes)
    }
}

extension Bool: SortKeyComponent {
    /// Appends the encoding the table of ``SortKey`` gives for this type.
    public func appendSortKey(to bytes: inout [UInt8]) {
        bytes.append(self ? 1 : 0)
    }
}

extension Optional: SortKeyComponent where Wrapped: SortKeyComponent {
    /// Appends the encoding the table of ``SortKey`` gives for this type.
    public func appendSortKey(to bytes: inout [UInt8]) {
        switch self {
        case .none:
            bytes.append(0)
        case .some(let value):
            bytes.append(1)
            value.appendSortKey(to: &bytes)
        }
    }
}

private func appendBigEndian(_ value: UInt64, to bytes: inout [UInt8]) {
    for shift in stride(from: 56, through: 0, by: -8) {
        bytes.append(UInt8(truncatingIfNeeded: value >> UInt64(shift)))
    }
}
