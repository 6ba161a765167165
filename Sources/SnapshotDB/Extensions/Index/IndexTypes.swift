public import Foundation

/// A typed column of a ``SecondaryIndex``.
public enum IndexColumn: Hashable, Sendable {
    /// A text column.
    case text(String)
    /// A 64-bit integer column.
    case integer(String)
    /// A floating-point column.
    case real(String)

    /// The column's name.
    public var name: String {
        switch self {
        case .text(let name), .integer(let name), .real(let name): name
        }
    }

    var sqlType: String {
        switch self {
        case .text: "TEXT"
        case .integer: "INTEGER"
        case .real: "REAL"
        }
    }
}

/// A value stored in, or compared with, a column of a ``SecondaryIndex``; written as a literal
/// in query arguments (`["Oslo", 30, 2.5, nil]`).
public enum IndexValue: Hashable, Sendable, ExpressibleByStringLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByNilLiteral, ExpressibleByBooleanLiteral
{
    /// Text.
    case text(String)
    /// An integer.
    case integer(Int)
    /// A floating-point number.
    case real(Double)
    /// SQL `NULL`.
    case null

    /// A text value.
    public init(stringLiteral value: String) { self = .text(value) }
    /// An integer value.
    public init(integerLiteral value: Int) { self = .integer(value) }
    /// A floating-point value.
    public init(floatLiteral value: Double) { self = .real(value) }
    /// `NULL`.
    public init(nilLiteral: ()) { self = .null }
    /// A boolean, stored as the integer 0 or 1 (as SQLite does).
    public init(booleanLiteral value: Bool) { self = .integer(value ? 1 : 0) }

    /// Text, or `NULL` for `nil` (for a property or variable; literals need no call).
    public init(_ value: String?) { self = value.map { .text($0) } ?? .null }
    /// An integer, or `NULL` for `nil`.
    public init(_ value: Int?) { self = value.map { .integer($0) } ?? .null }
    /// A floating-point number, or `NULL` for `nil`.
    public init(_ value: Double?) { self = value.map { .real($0) } ?? .null }

    /// A boolean as the integer 0 or 1 (for an `.integer` column), or `NULL` for `nil`.
    public static func bool(_ value: Bool?) -> IndexValue { value.map { .integer($0 ? 1 : 0) } ?? .null }

    /// A date as its seconds since 1970-01-01 UTC (`timeIntervalSince1970`, for a `.real`
    /// column), or `NULL` for `nil`. Store dates and pass them as arguments this one way, and
    /// they compare as numbers: `"due < ?"` with `[.date(deadline)]`.
    public static func date(_ value: Date?) -> IndexValue {
        value.map { .real($0.timeIntervalSince1970) } ?? .null
    }

    /// The value stored in column `index` of `statement`'s current row, by its storage class
    /// (a blob, which the index never stores, reads as `nil`).
    init?(_ statement: SQLiteStatement, at index: Int32) {
        switch statement.storageClass(at: index) {
        case .integer: self = .integer(Int(statement.int64(at: index)))
        case .float: self = .real(statement.double(at: index))
        case .text: self = .text(statement.string(at: index))
        case .null: self = .null
        case .blob: return nil
        }
    }

    /// Whether the index holds the same thing for both: text by its UTF-8 bytes, as SQLite
    /// compares it (Swift's `==` holds `"é"` and `"e\u{301}"` equal, and an update between the
    /// two would have left the old bytes in the index), other values by `==`.
    func isStored(as other: IndexValue) -> Bool {
        switch (self, other) {
        case (.text(let text), .text(let otherText)): return sameUTF8(text, otherText)
        // A `.real` column stores an integer as a real, and an `.integer` column an integral
        // real as an integer: the same number, which comparing the cases would have written
        // again at every write of the item.
        case (.real(let real), .integer(let integer)), (.integer(let integer), .real(let real)):
            return Double(integer) == real
        default: return self == other
        }
    }

    func bind(to statement: SQLiteStatement, at index: Int32) throws(DatabaseError) {
        switch self {
        case .text(let text): try statement.bind(text, at: index)
        case .integer(let integer): try statement.bind(Int64(integer), at: index)
        case .real(let real): try statement.bind(real, at: index)
        case .null: try statement.bindNull(at: index)
        }
    }
}
