internal import CSQLite
internal import Foundation

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

    /// The value stored in column `index` of `statement`'s current row, by its storage class
    /// (a blob, which the index never stores, reads as `nil`).
    init?(_ statement: SQLiteStatement, at index: Int32) {
        switch statement.storageClass(at: index) {
        case SQLITE_INTEGER: self = .integer(Int(statement.int64(at: index)))
        case SQLITE_FLOAT: self = .real(statement.double(at: index))
        case SQLITE_TEXT: self = .text(statement.string(at: index))
        case SQLITE_NULL: self = .null
        default: return nil
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
/// name are `NULL`, names it returns that are not declared are ignored.
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

    var kind: String { "index" }

    func createTables(_ context: ExtensionContext) throws(DatabaseError) {
        try IndexTable.checkColumns(columns)
        let table = IndexTable(prefix: context.tablePrefix, columns: columns)
        // A rowid table: each column's SQLite index then ends in an integer, and a query finds its
        // rows by rowid, not by (collection, key) text (as a table keyed by an app's own rowid).
        var sql =
            "CREATE TABLE \(table.name)(id INTEGER PRIMARY KEY, collection TEXT NOT NULL, key TEXT NOT NULL"
        for column in columns { sql += ", \"\(column.name)\" \(column.sqlType)" }
        sql += "); CREATE UNIQUE INDEX \(context.tablePrefix)item ON \(table.name)(collection, key);"
        try context.handle.execute(sql + table.createColumnIndexes)
    }

    func makeWriter(_ context: ExtensionContext) -> any ExtensionWriter {
        IndexWriter(context: context, index: self)
    }
}

/// What identifies an index query's SQL: the same key, the same checked statement.
struct IndexQueryKey: Equatable {
    let table: String
    let columns: String
    let select: String
    let whereClause: String
    let orderBy: String?
    let hasLimit: Bool
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
    /// digit, and not the table's own `collection` and `key`.
    static func checkColumns(_ columns: [IndexColumn]) throws(DatabaseError) {
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
            guard valid, !["collection", "key"].contains(name.lowercased()),
                seen.insert(name.lowercased()).inserted
            else {
                throw DatabaseError(
                    .misuse,
                    "index column \(name.debugDescription) must be letters, digits and underscores, unique, "
                        + "and not 'collection' or 'key'")
            }
        }
    }

    /// Inserts an item's row, or updates its columns in place (its rowid, and so the entries of
    /// columns that did not change, stay).
    var upsert: String {
        let names = columns.map { "\"\($0.name)\"" }.joined(separator: ", ")
        let parameters = columns.indices.map { "?\($0 + 3)" }.joined(separator: ", ")
        let updates = columns.map { "\"\($0.name)\" = excluded.\"\($0.name)\"" }.joined(separator: ", ")
        return "INSERT INTO \(name)(collection, key, \(names)) VALUES (?1, ?2, \(parameters)) "
            + "ON CONFLICT(collection, key) DO UPDATE SET \(updates)"
    }

    /// An item's current columns.
    var current: String {
        let names = columns.map { "\"\($0.name)\"" }.joined(separator: ", ")
        return "SELECT \(names) FROM \(name) WHERE collection = ?1 AND key = ?2"
    }
}

/// Keeps one secondary index's table up to date during a read-write transaction.
final class IndexWriter<Value: Decodable & Sendable>: ExtensionWriter {
    private let context: ExtensionContext
    private let index: SecondaryIndex<Value>
    private let table: IndexTable
    /// Set while the table is filled from empty: there is nothing stored to compare with.
    private var rebuilding = false

    init(context: ExtensionContext, index: SecondaryIndex<Value>) {
        self.context = context
        self.index = index
        self.table = IndexTable(prefix: context.tablePrefix, columns: index.columns)
    }

    private func store(_ data: Data, key: String, collection: String) throws(DatabaseError) {
        let value = try context.decode(Value.self, data, key: key, collection: collection)
        let columns = index.extract(collection, key, value)
        guard !columns.isEmpty else {
            try willRemove(forKey: key, inCollection: collection)
            return
        }
        if !rebuilding, try isStored(columns, key: key, collection: collection) { return }
        let upsert = try context.handle.cachedStatement(table.upsert)
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
        let select = try context.handle.cachedStatement(table.current)
        defer { select.reset() }
        try select.bind(collection, at: 1)
        try select.bind(key, at: 2)
        guard try select.step() else { return false }
        for (offset, column) in index.columns.enumerated() {
            guard IndexValue(select, at: Int32(offset)) == (columns[column.name] ?? .null) else {
                return false
            }
        }
        return true
    }

    func willSet(_ data: Data, forKey key: String, inCollection collection: String) throws(DatabaseError) {
        try store(data, key: key, collection: collection)
    }

    func willRemove(forKey key: String, inCollection collection: String) throws(DatabaseError) {
        let delete = try context.handle.cachedStatement(
            "DELETE FROM \(table.name) WHERE collection = ?1 AND key = ?2")
        try delete.bind(collection, at: 1)
        try delete.bind(key, at: 2)
        try delete.execute()
    }

    func willRemoveAll(inCollection collection: String) throws(DatabaseError) {
        let delete = try context.handle.cachedStatement("DELETE FROM \(table.name) WHERE collection = ?1")
        try delete.bind(collection, at: 1)
        try delete.execute()
    }

    func willRemoveAllCollections() throws(DatabaseError) {
        try context.handle.execute("DELETE FROM \(table.name)")
    }

    func rebuild() throws(DatabaseError) {
        // Filling the table first and creating each SQLite index after it sorts once per index,
        // instead of one random B-tree insert per value and index.
        try context.handle.execute("DELETE FROM \(table.name);" + table.dropColumnIndexes)
        rebuilding = true
        defer { rebuilding = false }
        try context.forEachValue(inCollections: index.collections) {
            (collection, key, data) throws(DatabaseError) in
            try store(data, key: key, collection: collection)
        }
        try context.handle.execute(table.createColumnIndexes)
    }

    func finish() throws(DatabaseError) -> (any Sendable)? { nil }
}

extension ReadTransaction {
    /// The secondary index registered as `name`, queried at this transaction's commit.
    ///
    /// - Throws: `unknownExtension` when no index of that name is registered, or this
    ///   snapshot predates it.
    public func index(named name: String) throws(DatabaseError) -> IndexReader {
        guard let definition = core.database.extensionDefinition(named: name), definition.kind == "index",
            let columns = (definition as? any IndexDefinition)?.indexColumns
        else {
            throw DatabaseError(.unknownExtension, "no secondary index named '\(name)' is registered")
        }
        try checkInstalled(definition)
        return IndexReader(
            transaction: self,
            table: IndexTable(prefix: ExtensionContext.tablePrefix(name), columns: columns))
    }
}

/// What ``ReadTransaction/index(named:)`` needs of an index, whatever its value type.
protocol IndexDefinition: ExtensionDefinition {
    var indexColumns: [IndexColumn] { get }
}

extension SecondaryIndex: IndexDefinition {
    var indexColumns: [IndexColumn] { columns }
}

/// A secondary index read at one transaction's commit.
public struct IndexReader {
    let transaction: ReadTransaction
    let table: IndexTable

    /// The items whose columns match `whereClause` (a SQL boolean expression over the index's
    /// columns, with `?` for each of `arguments`), sorted by `orderBy` (an `ORDER BY` list over
    /// the columns; by collection and key when `nil`), at most `limit` of them.
    ///
    /// - Throws: `invalidQuery` for a fragment that names anything but the index's columns, is
    ///   not valid SQL, holds a comment or a second statement, or whose `?` count differs from
    ///   `arguments`; a ``DatabaseError`` from SQLite.
    public func keys(
        where whereClause: String, _ arguments: [IndexValue] = [], orderBy: String? = nil, limit: Int? = nil
    ) throws(DatabaseError) -> [ViewItem] {
        let statement = try prepare(
            select: "collection, key", whereClause: whereClause, arguments: arguments, orderBy: orderBy,
            limit: limit)
        defer { statement.reset() }
        var items: [ViewItem] = []
        var collection: String?
        while try statement.step() {
            // Rows of one collection share one string.
            collection = statement.string(at: 0, reusing: collection)
            items.append(ViewItem(collection: collection!, key: statement.string(at: 1)))
        }
        return items
    }

    /// How many items match `whereClause`; see ``keys(where:_:orderBy:limit:)``.
    public func count(where whereClause: String, _ arguments: [IndexValue] = []) throws(DatabaseError) -> Int
    {
        let statement = try prepare(
            select: "count(*)", whereClause: whereClause, arguments: arguments, orderBy: nil, limit: nil)
        defer { statement.reset() }
        return try statement.step() ? Int(statement.int64(at: 0)) : 0
    }

    /// SQLite's query plan for the query (`EXPLAIN QUERY PLAN`): says whether an index serves
    /// it (`SEARCH … USING INDEX`) or the table is scanned (`SCAN`).
    public func explain(where whereClause: String, orderBy: String? = nil) throws(DatabaseError) -> String {
        let sql = try query(
            select: "collection, key", whereClause: whereClause, orderBy: orderBy, limit: false)
        let handle = try transaction.core.handle()
        let statement = try SQLiteStatement(
            handle: handle, sql: "EXPLAIN QUERY PLAN " + sql, persistent: false)
        defer { statement.reset() }
        var lines: [String] = []
        while try statement.step() { lines.append(statement.string(at: 3)) }
        return lines.joined(separator: "\n")
    }

    /// Whether `fragment` holds `--`, `/*` or `;` (one pass over its bytes: this runs on every
    /// query).
    static func holdsCommentOrSemicolon(_ fragment: String) -> Bool {
        var previous: UInt8 = 0
        for byte in fragment.utf8 {
            if byte == UInt8(ascii: ";") || (previous == UInt8(ascii: "-") && byte == UInt8(ascii: "-"))
                || (previous == UInt8(ascii: "/") && byte == UInt8(ascii: "*"))
            {
                return true
            }
            previous = byte
        }
        return false
    }

    /// The SQL for the fragments, after they passed the authorizer.
    private func query(select: String, whereClause: String, orderBy: String?, limit: Bool)
        throws(DatabaseError)
        -> String
    {
        try transaction.checkActive()
        for fragment in [whereClause, orderBy ?? ""] where Self.holdsCommentOrSemicolon(fragment) {
            throw DatabaseError(
                .invalidQuery,
                "the query fragment \(fragment.debugDescription) holds a comment or a second statement")
        }
        let order = orderBy.map { "\n ORDER BY \($0)" } ?? "\n ORDER BY collection, key"
        let handle = try transaction.core.handle()
        try handle.checkFragment(
            "SELECT 1 FROM \(table.name) WHERE (\(whereClause))\n"
                + (orderBy.map { " ORDER BY \($0)" } ?? ""),
            policy: table.policy,
            fragment: orderBy.map { "\(whereClause) ORDER BY \($0)" } ?? whereClause)
        return "SELECT \(select) FROM \(table.name) WHERE (\(whereClause))\(order)"
            + (limit ? "\n LIMIT ?" : "")
    }

    private func prepare(
        select: String, whereClause: String, arguments: [IndexValue], orderBy: String?, limit: Int?
    ) throws(DatabaseError) -> SQLiteStatement {
        let handle = try transaction.core.handle()
        let key = IndexQueryKey(
            table: table.name, columns: table.policy.columnsKey, select: select, whereClause: whereClause,
            orderBy: orderBy, hasLimit: limit != nil)
        let statement: SQLiteStatement
        if let last = handle.lastIndexQuery, last.key == key {
            // The same query again (a loop over arguments): already checked and prepared.
            try transaction.checkActive()
            statement = last.statement
        } else {
            let sql = try query(
                select: select, whereClause: whereClause, orderBy: orderBy, limit: limit != nil)
            statement = try handle.cachedStatement(sql)
            handle.lastIndexQuery = (key, statement)
        }
        let expected = arguments.count + (limit != nil ? 1 : 0)
        guard statement.parameterCount == expected else {
            throw DatabaseError(
                .invalidQuery,
                "the query \(whereClause.debugDescription) has \(statement.parameterCount - (limit != nil ? 1 : 0)) "
                    + "parameters but \(arguments.count) arguments were given")
        }
        for (offset, argument) in arguments.enumerated() {
            try argument.bind(to: statement, at: Int32(offset + 1))
        }
        if let limit { try statement.bind(Int64(max(0, limit)), at: Int32(arguments.count + 1)) }
        return statement
    }
}
