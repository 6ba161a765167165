internal import CSQLite
internal import Foundation

/// What a query fragment written by an app (a secondary index's `WHERE` and `ORDER BY`) may
/// name: the columns of one table, plain operators, and SQL functions that only compute.
struct FragmentPolicy: Sendable {
    /// The table the fragment is compiled against.
    let table: String
    /// The columns it may read, in the order they were declared.
    let columnList: [String]
    /// The columns as one string: part of the key under which an approval is kept.
    let columnsKey: String

    /// The columns it may read.
    var columns: Set<String> { Set(columnList) }

    init(table: String, columns: [String]) {
        self.table = table
        self.columnList = columns
        self.columnsKey = columns.joined(separator: ",")
    }

    /// Functions that only compute a value from their arguments: no side effects, no reads, no
    /// randomness, bounded memory. Anything else (`load_extension`, `random`, `zeroblob`,
    /// `sqlite_*`, `changes`, `readfile`, user functions) is refused.
    static let functions: Set<String> = [
        "abs", "char", "coalesce", "glob", "hex", "ifnull", "iif", "instr", "length", "like", "lower",
        "ltrim",
        "max", "min", "nullif", "octet_length", "replace", "round", "rtrim", "sign", "substr", "substring",
        "trim",
        "typeof", "unicode", "upper",
    ]
}

/// The authorizer's state while one fragment is compiled: what it allows, and the first thing it
/// refused.
private final class FragmentAuthorizer {
    let policy: FragmentPolicy
    var refusal: String?
    var selects = 0

    init(policy: FragmentPolicy) { self.policy = policy }

    func authorize(_ action: Int32, _ first: String?, _ second: String?) -> Int32 {
        switch action {
        case SQLITE_SELECT:
            selects += 1
            if selects > 1 { return refuse("a subquery") }
            return SQLITE_OK
        case SQLITE_READ:
            guard first == policy.table else { return refuse("table \(first ?? "?")") }
            // An empty column name: the table is read without any of its columns (`SELECT 1`).
            guard let column = second, column.isEmpty || policy.columnList.contains(column) else {
                // The index table's `id INTEGER PRIMARY KEY` is the rowid: SQLite reports
                // `rowid`, `oid` and `_rowid_` under that name, which the fragment may not say.
                if second == "id" {
                    return refuse(
                        "the row id (rowid, oid, _rowid_ or id: the index's own numbering of its rows, not a "
                            + "value's; the index's columns are \(policy.columns.sorted().joined(separator: ", ")))"
                    )
                }
                return refuse(
                    "column \(second ?? "?") (the index's columns are \(policy.columns.sorted().joined(separator: ", ")))"
                )
            }
            return SQLITE_OK
        case SQLITE_FUNCTION:
            guard let name = second?.lowercased(), FragmentPolicy.functions.contains(name) else {
                return refuse("function \(second ?? "?")")
            }
            return SQLITE_OK
        default:
            return refuse("an operation other than reading the index (authorizer action \(action))")
        }
    }

    private func refuse(_ what: String) -> Int32 {
        if refusal == nil { refusal = what }
        return SQLITE_DENY
    }
}

extension SQLiteHandle {
    /// Checks that `sql`, a query built around an app's fragment, is one `SELECT` that reads
    /// only the columns `policy` allows and calls only computing functions, by compiling it
    /// under an authorizer (`sqlite3_set_authorizer`) before it ever runs; nothing is executed.
    ///
    /// - Throws: ``DatabaseError/Code/invalidQuery`` naming what was refused (another table, a
    ///   column outside the index, a subquery, a second statement, a function with side
    ///   effects, a syntax error).
    func checkFragment(_ sql: String, policy: FragmentPolicy, fragment: String) throws(DatabaseError) {
        let authorizer = FragmentAuthorizer(policy: policy)
        let context = Unmanaged.passUnretained(authorizer).toOpaque()
        sqlite3_set_authorizer(
            pointer,
            { context, action, first, second, _, _ in
                guard let context else { return SQLITE_DENY }
                let authorizer = Unmanaged<FragmentAuthorizer>.fromOpaque(context).takeUnretainedValue()
                return authorizer.authorize(
                    action, first.map { String(cString: $0) }, second.map { String(cString: $0) })
            }, context)
        defer { sqlite3_set_authorizer(pointer, nil, nil) }
        var statement: OpaquePointer?
        var rest = ""
        let result = withExtendedLifetime(authorizer) {
            sql.withCString { base -> Int32 in
                var tail: UnsafePointer<CChar>?
                let result = sqlite3_prepare_v3(pointer, base, -1, 0, &statement, &tail)
                rest = tail.map { String(cString: $0) } ?? ""
                return result
            }
        }
        defer { sqlite3_finalize(statement) }
        if let refusal = authorizer.refusal {
            throw DatabaseError(
                .invalidQuery, "the query fragment \(QuotedInput.quote(fragment)) may not use \(refusal)")
        }
        guard result == SQLITE_OK else {
            let message = String(cString: sqlite3_errmsg(pointer))
            // A misspelt or undeclared column: say which ones there are.
            let columns =
                message.hasPrefix("no such column")
                ? "; the columns are " + policy.columnList.joined(separator: ", ") : ""
            throw DatabaseError(
                .invalidQuery,
                "the query fragment \(QuotedInput.quote(fragment)) is not valid SQL: \(message)\(columns)",
                sqliteCode: result)
        }
        guard rest.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else {
            throw DatabaseError(
                .invalidQuery,
                "the query fragment \(QuotedInput.quote(fragment)) holds more than one statement"
            )
        }
    }
}
