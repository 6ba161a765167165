/// The statements that one owner (an extension's writer, a view's pages) runs again and again,
/// named by a small enum whose SQL text depends on the extension's tables.
///
/// Each text is built and its statement looked up once, on first use; after that a use is an
/// array read. ``SQLiteHandle/cachedStatement(_:)`` instead builds, hashes and compares the text
/// on every call: about 1 µs a row, which was 13% of registering a secondary index or a
/// full-text index over 200,000 values, and took `fts-build` from 1.37× GRDB's FTS5 build to
/// 1.13× at 1,000,000 values. A set lives as long as its owner (one transaction's writer), so a
/// commit that runs a statement once pays what it paid before. The statements are the handle's
/// cached ones; the set only spares the lookup.
final class StatementSet<Name: RawRepresentable & CaseIterable> where Name.RawValue == Int {
    private let handle: SQLiteHandle
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
