internal import Foundation

/// A secondary index: typed columns extracted from the values of some collections, kept in a
/// table of their own with a SQLite index per column, updated by every commit and queried with
/// SQL `WHERE` / `ORDER BY` fragments over those columns at a transaction's snapshot.
///
/// ```swift
/// let byCity = SecondaryIndex<Person>(
///     name: "people", version: "1", collections: ["people"],
///     columns: [.text("city"), .integer("age"), .real("score")],
///     extract: { collection, key, person in ["city": .text(person.city), "age": .integer(person.age)] })
/// try db.register(byCity)
/// let keys = try ui.read {
///     try $0.index(named: "people").keys(where: "city = ? AND age >= ?", ["Oslo", 30], orderBy: "age DESC", limit: 20)
/// }
/// ```
///
/// Fragments may name only the declared columns; values are always bound (`?`), never spliced.
/// A fragment that names anything else (another table, `collection` or `key`, a subquery, a
/// second statement, a comment, a function with side effects) is refused with `invalidQuery`
/// before SQLite runs anything: it is compiled under an authorizer that allows only reading
/// the index's columns (`sqlite3_set_authorizer`). A query no SQLite index serves is allowed
/// and scans the index table; ``IndexReader/explain(where:orderBy:)`` shows SQLite's plan.
/// A value for which `extract` returns no columns is not in the index; columns it does not
/// name are `NULL`, names it returns that are not declared are ignored. Values take their
/// column's type by SQLite's affinity rules: an integral real or text that reads as a number
/// becomes an integer in an `.integer` column, an integer becomes text in a `.text` column.
/// Text that is not a number stays text in a numeric column, where SQLite sorts it above every
/// number (`n > 0` finds it): return numbers for numeric columns.
public struct SecondaryIndex<Value: Decodable & Sendable>: ExtensionDefinition {
    /// The name the index is registered and read under.
    public let name: String
    /// The index's version: registering another version rebuilds it.
    public let version: String
    /// The collections whose values it indexes; `nil` for every collection.
    public let collections: Set<String>?
    /// The typed columns.
    public let columns: [IndexColumn]
    let extract: @Sendable (_ collection: String, _ key: String, _ value: Value) -> [String: IndexValue]

    /// An index named `name` of `columns` extracted from the values of `collections`.
    public init(
        name: String, version: String, collections: Set<String>? = nil, columns: [IndexColumn],
        extract:
            @escaping @Sendable (_ collection: String, _ key: String, _ value: Value) -> [String: IndexValue]
    ) {
        self.name = name
        self.version = version + "/" + columns.map { "\($0.name):\($0.sqlType)" }.joined(separator: ",")
        self.collections = collections
        self.columns = columns
        self.extract = extract
    }

    var kind: ExtensionKind { .index }

    func createTables(_ context: ExtensionContext) throws(DatabaseError) {
        try IndexTable.checkColumns(columns)
        let table = IndexTable(prefix: context.tablePrefix, columns: columns)
        // A rowid table: each column's SQLite index then ends in an integer, and a query finds its
        // rows by rowid, not by (collection, key) text (as a table keyed by an app's own rowid).
        var sql =
            "CREATE TABLE \(table.name)(id INTEGER PRIMARY KEY, collection TEXT NOT NULL, key TEXT NOT NULL"
        for column in columns { sql += ", \"\(column.name)\" \(column.sqlType)" }
        sql += ");"
        try context.handle.execute(sql + table.createItemIndex + table.createColumnIndexes)
    }

    func makeWriter(_ context: ExtensionContext) -> any ExtensionWriter {
        IndexWriter(context: context, index: self)
    }
}

/// What ``ReadTransaction/index(named:)`` needs of an index, whatever its value type.
protocol IndexDefinition: ExtensionDefinition {
    var indexColumns: [IndexColumn] { get }
}

extension SecondaryIndex: IndexDefinition {
    var indexColumns: [IndexColumn] { columns }
}

/// The index table's name and statements.
struct IndexTable {
    let name: String
    let columns: [IndexColumn]

    /// What a query's fragments may read: the declared columns of this table.
    let policy: FragmentPolicy
    /// The prefix of the extension's tables.
    let prefix: String

    /// One SQLite index per column. Each also holds the item (collection, key), so a query that
    /// one index serves reads no table row to return its keys (a covering index, as GRDB's
    /// index on a table keyed by its key is).
    var createColumnIndexes: String {
        columns.map { column in
            " CREATE INDEX \(prefix)by_\(column.name) ON \(name)(\"\(column.name)\", collection, key);"
        }.joined()
    }

    /// Drops the column indexes (a rebuild fills the table first, then sorts once per index).
    var dropColumnIndexes: String {
        columns.map { " DROP INDEX IF EXISTS \(prefix)by_\($0.name);" }.joined()
    }

    init(prefix: String, columns: [IndexColumn]) {
        self.prefix = prefix
        name = prefix + "index"
        self.columns = columns
        policy = FragmentPolicy(table: name, columns: columns.map(\.name))
    }

    /// Column names become SQL identifiers: letters, digits and underscores, not starting with a
    /// digit, and none of `reserved` (compared without case); `what` (for messages) needs at
    /// least one.
    static func checkColumns(
        _ columns: [IndexColumn], of what: String = "a secondary index", column noun: String = "index column",
        reserved: [String] = reservedColumns
    ) throws(DatabaseError) {
        guard !columns.isEmpty else { throw DatabaseError(.misuse, "\(what) needs at least one column") }
        var seen: Set<String> = []
        for column in columns {
            let name = column.name
            let valid =
                !name.isEmpty && name.utf8.count <= 64
                && !(name.utf8.first.map { $0 >= 0x30 && $0 <= 0x39 } ?? true)
                && name.utf8.allSatisfy { byte in
                    (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A)
                        || (byte >= 0x61 && byte <= 0x7A)
                        || byte == 0x5F
                }
            guard valid, !reserved.contains(name.lowercased()), seen.insert(name.lowercased()).inserted else {
                throw DatabaseError(
                    .misuse,
                    "\(noun) \(name.debugDescription) must be letters, digits and underscores (not starting with "
                        + "a digit), unique, and none of '\(reserved.joined(separator: "', '"))' (names the index's "
                        + "tables use)")
            }
        }
    }

    /// The column names an index's table has already: `CREATE TABLE` refuses a second `id`.
    /// (`rowid`, `oid` and `_rowid_` are allowed, as they always were: a column of that name
    /// shadows the rowid, which the index reads as `id`.)
    static let reservedColumns = ["collection", "key", "id"]

    /// The statements a writer runs per item.
    enum Statement: Int, CaseIterable {
        /// Inserts an item's row, or updates its columns in place (its rowid, and so the entries
        /// of columns that did not change, stay).
        case upsert
        /// Inserts an item's row into a table that has none for it (a rebuild).
        case insert
        /// An item's current columns.
        case current
        /// Deletes an item's row.
        case delete
        /// Deletes the rows of one collection.
        case deleteCollection
    }

    /// The SQL text of `statement`.
    func sql(_ statement: Statement) -> String {
        let names = columns.map { "\"\($0.name)\"" }.joined(separator: ", ")
        let parameters = columns.indices.map { "?\($0 + 3)" }.joined(separator: ", ")
        switch statement {
        case .upsert:
            let updates = columns.map { "\"\($0.name)\" = excluded.\"\($0.name)\"" }.joined(separator: ", ")
            return "INSERT INTO \(name)(collection, key, \(names)) VALUES (?1, ?2, \(parameters)) "
                + "ON CONFLICT(collection, key) DO UPDATE SET \(updates)"
        case .insert: return "INSERT INTO \(name)(collection, key, \(names)) VALUES (?1, ?2, \(parameters))"
        case .current: return "SELECT \(names) FROM \(name) WHERE collection = ?1 AND key = ?2"
        case .delete: return "DELETE FROM \(name) WHERE collection = ?1 AND key = ?2"
        case .deleteCollection: return "DELETE FROM \(name) WHERE collection = ?1"
        }
    }

    /// The unique index of the items, dropped while a rebuild fills the table and made after
    /// (one sort instead of one B-tree insert per item).
    var createItemIndex: String { "CREATE UNIQUE INDEX \(prefix)item ON \(name)(collection, key);" }

    var dropItemIndex: String { " DROP INDEX IF EXISTS \(prefix)item;" }
}

/// Keeps one secondary index's table up to date during a read-write transaction.
final class IndexWriter<Value: Decodable & Sendable>: ExtensionWriter {
    private let context: ExtensionContext
    private let index: SecondaryIndex<Value>
    private let table: IndexTable
    private let statements: StatementSet<IndexTable.Statement>
    /// Set while the table is filled from empty: there is nothing stored to compare with.
    private var rebuilding = false

    init(context: ExtensionContext, index: SecondaryIndex<Value>) {
        self.context = context
        self.index = index
        let table = IndexTable(prefix: context.tablePrefix, columns: index.columns)
        self.table = table
        statements = context.handle.statementSet("index|" + table.name + "|" + index.version, sql: table.sql)
    }

    private func store(_ stored: StoredValue, key: String, collection: String) throws(DatabaseError) {
        let value = try context.decode(Value.self, stored, key: key, collection: collection)
        let columns = index.extract(collection, key, value)
        guard !columns.isEmpty else {
            try willRemove(forKey: key, inCollection: collection)
            return
        }
        if !rebuilding, try isStored(columns, key: key, collection: collection) { return }
        // A rebuild fills an empty table, one row per item: a plain insert, with no conflict
        // to look for.
        let upsert = try statements[rebuilding ? .insert : .upsert]
        try upsert.bind(collection, at: 1)
        try upsert.bind(key, at: 2)
        for (offset, column) in index.columns.enumerated() {
            try (columns[column.name] ?? .null).bind(to: upsert, at: Int32(offset + 3))
        }
        try upsert.execute()
    }

    /// Whether the item's row already holds `columns`: most writes change no indexed column, and
    /// then the index is not written at all (no page of it changes).
    private func isStored(_ columns: [String: IndexValue], key: String, collection: String)
        throws(DatabaseError)
        -> Bool
    {
        let select = try statements[.current]
        defer { select.reset() }
        try select.bind(collection, at: 1)
        try select.bind(key, at: 2)
        guard try select.step() else { return false }
        for (offset, column) in index.columns.enumerated() {
            guard let stored = IndexValue(select, at: Int32(offset)),
                stored.isStored(as: columns[column.name] ?? .null)
            else {
                return false
            }
        }
        return true
    }

    func willSet(_ data: Data, forKey key: String, inCollection collection: String) throws(DatabaseError) {
        try store(.data(data), key: key, collection: collection)
    }

    func willRemove(forKey key: String, inCollection collection: String) throws(DatabaseError) {
        let delete = try statements[.delete]
        try delete.bind(collection, at: 1)
        try delete.bind(key, at: 2)
        try delete.execute()
    }

    func willRemoveAll(inCollection collection: String) throws(DatabaseError) {
        let delete = try statements[.deleteCollection]
        try delete.bind(collection, at: 1)
        try delete.execute()
    }

    func willRemoveAllCollections() throws(DatabaseError) {
        try context.handle.execute("DELETE FROM \(table.name)")
    }

    func rebuild() throws(DatabaseError) {
        try ExtensionWriters.rebuildTogether([self], handle: context.handle)
    }

    var feedsRebuild: Bool { true }

    var rebuildCollections: Set<String>? { index.collections }

    var rebuildMemo: DecodeMemo? { context.memo }

    func beginRebuild() throws(DatabaseError) {
        // Filling the table first and creating each SQLite index after it sorts once per index,
        // instead of one random B-tree insert per value and index.
        try context.handle.execute(
            "DELETE FROM \(table.name);" + table.dropItemIndex + table.dropColumnIndexes)
        rebuilding = true
    }

    func feedRebuild(_ collection: String, _ key: String, _ value: StoredValue) throws(DatabaseError) {
        try store(value, key: key, collection: collection)
    }

    func endRebuild() throws(DatabaseError) {
        rebuilding = false
        try context.handle.execute(table.createItemIndex + table.createColumnIndexes)
    }

    func finish() throws(DatabaseError) -> (any ExtensionRecord)? { nil }
}
