/// The statements that one owner (an extension's writer, a view's pages) runs again and again,
/// named by a small enum whose SQL text depends on the extension's tables.
///
/// A handle keeps one set per extension and table layout (``SQLiteHandle/statementSet(_:sql:)``),
/// so each text is built and its statement looked up once per handle, on first use; after that
/// a use is an array read. ``SQLiteHandle/cachedStatement(_:)`` instead builds, hashes and
/// compares the text on every call: about 1 µs a row, which was 13% of registering a secondary
/// index or a full-text index over 200,000 values (and took `fts-build` from 1.37× GRDB's FTS5
/// build to 1.13–1.32× at 1,000,000 values, median 1.19× of five runs), and about 14k instructions (4.5%) of a one-row commit
/// into a view, which built each of its statements' texts once per transaction.
final class StatementSet<Name: RawRepresentable & CaseIterable> where Name.RawValue == Int {
    // The handle keeps its sets: unowned, as its statements hold it.
    private unowned let handle: SQLiteHandle
    private let sql: (Name) -> String
    private var prepared: [SQLiteStatement?]

    /// The set of `handle` whose statement `name` runs `sql(name)`.
    init(handle: SQLiteHandle, sql: @escaping (Name) -> String) {
        self.handle = handle
        self.sql = sql
        prepared = [SQLiteStatement?](repeating: nil, count: Name.allCases.count)
    }

    /// The statement `name`, prepared on first use.
    subscript(name: Name) -> SQLiteStatement {
        get throws(DatabaseError) {
            if let statement = prepared[name.rawValue] { return statement }
            let statement = try handle.cachedStatement(sql(name))
            prepared[name.rawValue] = statement
            return statement
        }
    }
}
