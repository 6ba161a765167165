internal import Foundation

/// A full-text index (SQLite's FTS5) of text extracted from the values of some collections,
/// updated by every commit and searched at a transaction's snapshot, ranked by relevance (bm25).
///
/// ```swift
/// let search = FullTextSearch<Note>(name: "notes", version: "1", collections: ["notes"],
///     columns: ["title", "body"], extract: { _, _, note in ["title": note.title, "body": note.body] })
/// try db.register(search)
/// let hits = try ui.read { try $0.search(named: "notes").keys(matching: "swift NEAR/5 sqlite", limit: 50) }
/// let snippets = try ui.read { try $0.search(named: "notes").snippets(matching: "swift", column: "body") }
/// ```
///
/// Queries use FTS5's syntax (words, `"phrases"`, `prefix*`, `AND`/`OR`/`NOT`, `NEAR(a b, 5)`,
/// `column:`); FTS4's `a NEAR/5 b` is accepted too and rewritten as `NEAR(a b, 5)`. A query
/// that is not valid FTS5 syntax throws `invalidQuery`. The text lives in an FTS5 table
/// in the same file (`snapshotdb_x<length>_<name>_fts`) with a map from each item to its row.
public struct FullTextSearch<Value: Decodable & Sendable>: ExtensionDefinition {
    /// The name the index is registered and searched under.
    public let name: String
    /// The index's version (with its columns): registering another version rebuilds it.
    public let version: String
    /// The collections whose values it indexes; `nil` for every collection.
    public let collections: Set<String>?
    /// The text columns.
    public let columns: [String]
    let extract: @Sendable (_ collection: String, _ key: String, _ value: Value) -> [String: String]

    /// A full-text index named `name` of `columns` extracted from the values of `collections`.
    /// A value for which `extract` returns nothing is not in the index.
    public init(
        name: String, version: String, collections: Set<String>? = nil, columns: [String],
        extract: @escaping @Sendable (_ collection: String, _ key: String, _ value: Value) -> [String: String]
    ) {
        self.name = name
        self.version = version + "/" + columns.joined(separator: ",")
        self.collections = collections
        self.columns = columns
        self.extract = extract
    }

    var kind: ExtensionKind { .search }

    func createTables(_ context: ExtensionContext) throws(DatabaseError) {
        // FTS5 refuses columns named `rank` or `rowid` (its own hidden columns).
        try IndexTable.checkColumns(
            columns.map { .text($0) }, of: "a full-text index", column: "full-text column",
            reserved: ["collection", "key", "rank", "rowid"])
        let prefix = context.tablePrefix
        let names = columns.map { "\"\($0)\"" }.joined(separator: ", ")
        try context.handle.execute(
            """
            CREATE VIRTUAL TABLE \(prefix)fts USING fts5(\(names));
            CREATE TABLE \(prefix)map(id INTEGER PRIMARY KEY, collection TEXT NOT NULL, key TEXT NOT NULL);
            """ + Self.createMapIndex(prefix: prefix))
    }

    /// The map's unique index of the items (made after the rows by a rebuild).
    static func createMapIndex(prefix: String) -> String {
        "CREATE UNIQUE INDEX \(prefix)map_item ON \(prefix)map(collection, key);"
    }

    func makeWriter(_ context: ExtensionContext) -> any ExtensionWriter {
        SearchWriter(context: context, search: self)
    }
}

/// Keeps one full-text index up to date during a read-write transaction.
final class SearchWriter<Value: Decodable & Sendable>: ExtensionWriter {
    private let context: ExtensionContext
    private let search: FullTextSearch<Value>
    private let prefix: String
    private let statements: StatementSet<Statement>
    /// Set while the tables are filled from empty: there is nothing stored to compare with.
    ///
    /// A rebuild inserts one row per statement, unlike a view's map (see
    /// ``ViewPages/writeMap(count:row:)``). A statement of several rows that may abort opens a
    /// statement savepoint, and FTS5 writes the terms it holds in memory to disk at every
    /// savepoint: inserting the map rows sixteen per statement took a full-text build from 40k
    /// to about 74k instructions per item (callgrind, 50,000 values), one small segment per
    /// statement. The same goes for any such statement run while FTS5 holds terms: a view's
    /// build writes its map rows several per statement after every value was fed, where FTS5
    /// writes its terms once, as it would at the commit; a view's bulk merge inside a write
    /// transaction (before a savepoint, which writes them anyway, or a read of the view) can
    /// make FTS5 write the terms of that transaction's earlier writes one segment early.
    private var rebuilding = false

    /// The statements the writer runs per item.
    enum Statement: Int, CaseIterable {
        case insertText, deleteText, insertMapRow, deleteMapRow, stored, find
    }

    init(context: ExtensionContext, search: FullTextSearch<Value>) {
        self.context = context
        self.search = search
        let prefix = context.tablePrefix
        self.prefix = prefix
        let columns = search.columns
        statements = context.handle.statementSet("search|" + prefix + "|" + search.version) {
            (statement: Statement) in
            switch statement {
            case .insertText:
                let names = columns.map { "\"\($0)\"" }.joined(separator: ", ")
                let parameters = columns.indices.map { "?\($0 + 2)" }.joined(separator: ", ")
                return "INSERT INTO \(prefix)fts(rowid, \(names)) VALUES (?1, \(parameters))"
            case .deleteText: return "DELETE FROM \(prefix)fts WHERE rowid = ?1"
            case .insertMapRow: return "INSERT INTO \(prefix)map(collection, key) VALUES (?1, ?2)"
            case .deleteMapRow: return "DELETE FROM \(prefix)map WHERE id = ?1"
            case .stored:
                let names = columns.map { "f.\"\($0)\"" }.joined(separator: ", ")
                return "SELECT m.id, \(names) FROM \(prefix)map m JOIN \(prefix)fts f ON f.rowid = m.id "
                    + "WHERE m.collection = ?1 AND m.key = ?2"
            case .find: return "SELECT id FROM \(prefix)map WHERE collection = ?1 AND key = ?2"
            }
        }
    }

    private func store(_ storedValue: StoredValue, key: String, collection: String) throws(DatabaseError) {
        let value = try context.decode(Value.self, storedValue, key: key, collection: collection)
        let texts = search.extract(collection, key, value)
        guard !texts.isEmpty else { return try willRemove(forKey: key, inCollection: collection) }
        let wanted = search.columns.map { texts[$0] ?? "" }
        let id: Int64
        if !rebuilding, let stored = try stored(key: key, collection: collection) {
            // Most writes leave the indexed text as it was: then FTS5's index is not touched.
            // By bytes: Swift's `==` holds "é" and "e\u{301}" equal, which FTS5 does not.
            if stored.texts.count == wanted.count, zip(stored.texts, wanted).allSatisfy(sameUTF8) { return }
            // The item keeps its row id and map row; only its text is replaced.
            let delete = try statements[.deleteText]
            try delete.bind(stored.id, at: 1)
            try delete.execute()
            id = stored.id
        } else {
            // A new item (or a map row without its text, which a rebuild of the map would also
            // drop): make sure no row of it is left before adding one.
            if !rebuilding { try willRemove(forKey: key, inCollection: collection) }
            let map = try statements[.insertMapRow]
            try map.bind(collection, at: 1)
            try map.bind(key, at: 2)
            try map.execute()
            id = context.handle.lastInsertRowID
        }
        let insert = try statements[.insertText]
        try insert.bind(id, at: 1)
        for (offset, text) in wanted.enumerated() { try insert.bind(text, at: Int32(offset + 2)) }
        try insert.execute()
    }

    /// The item's row id and the texts the index holds for it, in column order, or `nil` when
    /// it is not in the index.
    private func stored(key: String, collection: String) throws(DatabaseError) -> (
        id: Int64, texts: [String]
    )? {
        let select = try statements[.stored]
        defer { select.reset() }
        try select.bind(collection, at: 1)
        try select.bind(key, at: 2)
        guard try select.step() else { return nil }
        return (select.int64(at: 0), search.columns.indices.map { select.string(at: Int32($0 + 1)) })
    }

    func willSet(_ data: Data, forKey key: String, inCollection collection: String) throws(DatabaseError) {
        try store(.data(data), key: key, collection: collection)
    }

    func willRemove(forKey key: String, inCollection collection: String) throws(DatabaseError) {
        let find = try statements[.find]
        try find.bind(collection, at: 1)
        try find.bind(key, at: 2)
        let id = try find.step() ? find.int64(at: 0) : nil
        find.reset()
        guard let id else { return }
        for statement in [Statement.deleteText, .deleteMapRow] {
            let delete = try statements[statement]
            try delete.bind(id, at: 1)
            try delete.execute()
        }
    }

    func willRemoveAll(inCollection collection: String) throws(DatabaseError) {
        let delete = try context.handle.cachedStatement(
            "DELETE FROM \(prefix)fts WHERE rowid IN (SELECT id FROM \(prefix)map WHERE collection = ?1)")
        try delete.bind(collection, at: 1)
        try delete.execute()
        let forget = try context.handle.cachedStatement("DELETE FROM \(prefix)map WHERE collection = ?1")
        try forget.bind(collection, at: 1)
        try forget.execute()
    }

    func willRemoveAllCollections() throws(DatabaseError) {
        try context.handle.execute("DELETE FROM \(prefix)fts; DELETE FROM \(prefix)map;")
    }

    func rebuild() throws(DatabaseError) {
        try ExtensionWriters.rebuildTogether([self], handle: context.handle)
    }

    var feedsRebuild: Bool { true }

    var rebuildCollections: Set<String>? { search.collections }

    var rebuildMemo: DecodeMemo? { context.memo }

    func beginRebuild() throws(DatabaseError) {
        try willRemoveAllCollections()
        // The map's unique index is made after the rows (one sort instead of one B-tree insert
        // per item), as an index build makes its column indexes.
        try context.handle.execute("DROP INDEX IF EXISTS \(prefix)map_item")
        rebuilding = true
    }

    func feedRebuild(_ collection: String, _ key: String, _ value: StoredValue) throws(DatabaseError) {
        try store(value, key: key, collection: collection)
    }

    func endRebuild() throws(DatabaseError) {
        rebuilding = false
        try context.handle.execute(FullTextSearch<Value>.createMapIndex(prefix: prefix))
    }

    func finish() throws(DatabaseError) -> (any ExtensionRecord)? { nil }
}

/// A search hit with a snippet of the matching text.
public struct SearchSnippet: Hashable, Sendable {
    /// The item whose text matched.
    public let item: ViewItem
    /// The text around the match, with matches between `[` and `]`.
    public let text: String
}

extension ReadTransaction {
    /// The full-text index registered as `name`, searched at this transaction's commit.
    ///
    /// - Throws: `unknownExtension` when no full-text index of that name is registered, or this
    ///   snapshot predates it.
    public func search(named name: String) throws(DatabaseError) -> SearchReader {
        let definition = try registeredExtension(named: name, kind: .search, as: (any SearchDefinition).self)
        return SearchReader(
            transaction: self, prefix: ExtensionContext.tablePrefix(name), columns: definition.searchColumns)
    }
}

/// What ``ReadTransaction/search(named:)`` needs of a full-text index, whatever its value type.
protocol SearchDefinition: ExtensionDefinition {
    var searchColumns: [String] { get }
}

extension FullTextSearch: SearchDefinition {
    var searchColumns: [String] { columns }
}

/// A full-text index read at one transaction's commit.
public struct SearchReader {
    private let reference: ReaderTransaction
    let prefix: String
    let columns: [String]

    init(transaction: ReadTransaction, prefix: String, columns: [String]) {
        reference = ReaderTransaction(transaction, reader: "a full-text index")
        self.prefix = prefix
        self.columns = columns
    }

    var transaction: ReadTransaction { get throws(DatabaseError) { try reference.get() } }

    /// The longest query, in UTF-8 bytes, a search takes: FTS5's cost grows with the square of
    /// a query's terms (800 repeated words took 0.5 s over 500 rows, 6 KB of them 84 s over a
    /// notes app's), so a query is bounded before SQLite sees it. A search box's text fits many
    /// times over.
    public static let maximumQueryBytes = 1_024

    /// The most terms (words and operators, separated by white space) a query may hold; see
    /// ``maximumQueryBytes``. 64 terms cost about 5 ms over 500 rows.
    public static let maximumQueryTerms = 64

    /// An FTS5 query that matches `text` as a person typed it into a search box: every word
    /// (split at white space) must appear, each as a phrase of its own, so that punctuation and
    /// FTS5's operators in it are text, not syntax (`e-mail`, `C++`, `don't`, `swift:`, `NOT`,
    /// a trailing `OR`, which ``keys(matching:limit:)`` refuses as `invalidQuery` when given
    /// raw). With `prefix`, the last word also matches the words it begins (search as you
    /// type). Text of white space alone gives a query that matches nothing. A NUL character
    /// separates words too (FTS5 reads a query as a C string). The query's bounds still hold:
    /// text of more than ``maximumQueryTerms`` words, or longer than ``maximumQueryBytes`` once
    /// each word is quoted, is refused as `invalidQuery`.
    ///
    /// ```swift
    /// let found = try txn.search(named: "notes").keys(matching: SearchReader.query(forText: box.text))
    /// ```
    public static func query(forText text: String, prefix: Bool = false) -> String {
        let words = text.split { $0.isWhitespace || $0 == "\0" }
        guard !words.isEmpty else { return "\"\"" }
        var query = words.map { "\"" + $0.replacingOccurrences(of: "\"", with: "\"\"") + "\"" }
            .joined(separator: " ")
        if prefix { query += "*" }
        return query
    }

    /// The items matching `query` (FTS5 syntax), most relevant first (bm25), at most `limit`.
    ///
    /// - Throws: `invalidQuery` for a query that is not valid FTS5 syntax (an unterminated
    ///   string, a dangling operator, an unknown column, a lone `*`), or longer than
    ///   ``maximumQueryBytes`` or ``maximumQueryTerms``; `misuse` for a negative `limit` (pass
    ///   `Int.max` for every match); `interrupted` past the read's time limit.
    public func keys(matching query: String, limit: Int = 100) throws(DatabaseError) -> [ViewItem] {
        try rows(
            "SELECT m.collection, m.key FROM \(prefix)fts JOIN \(prefix)map m ON m.id = \(prefix)fts.rowid "
                + "WHERE \(prefix)fts MATCH ?1 ORDER BY bm25(\(prefix)fts) LIMIT ?2", query: query,
            limit: limit
        ) { statement in ViewItem(collection: statement.string(at: 0), key: statement.string(at: 1)) }
    }

    /// The items matching `query`, most relevant first, each with a snippet of `column` around
    /// the match (matches between `[` and `]`).
    ///
    /// - Throws: `invalidQuery` for a query that is not valid FTS5 syntax, or a column the index
    ///   does not have; `misuse` for a negative `limit`.
    public func snippets(matching query: String, column: String, limit: Int = 100) throws(DatabaseError)
        -> [SearchSnippet]
    {
        guard let index = columns.firstIndex(of: column) else {
            throw DatabaseError(
                .invalidQuery, "the full-text index has no column '\(column)' (it has \(columns))")
        }
        return try rows(
            "SELECT m.collection, m.key, snippet(\(prefix)fts, \(index), '[', ']', '…', 12) FROM \(prefix)fts "
                + "JOIN \(prefix)map m ON m.id = \(prefix)fts.rowid WHERE \(prefix)fts MATCH ?1 "
                + "ORDER BY bm25(\(prefix)fts) LIMIT ?2", query: query, limit: limit
        ) { statement in
            SearchSnippet(
                item: ViewItem(collection: statement.string(at: 0), key: statement.string(at: 1)),
                text: statement.string(at: 2))
        }
    }

    /// `query` with FTS4's proximity syntax, `a NEAR/5 b` (and `a NEAR b`, within 10 tokens),
    /// rewritten as FTS5's `NEAR(a b, 5)`; FTS5 syntax passes through unchanged.
    static func fts5(_ query: String) -> String {
        var words = query.split(separator: " ", omittingEmptySubsequences: true).map(String.init)
        var index = 1
        while index + 1 < words.count {
            let word = words[index]
            let distance: Int?
            if word == "NEAR" {
                distance = 10
            } else if word.hasPrefix("NEAR/"), let number = Int(word.dropFirst(5)) {
                distance = number
            } else {
                distance = nil
            }
            if let distance, !words[index - 1].hasSuffix(")"), !words[index + 1].hasPrefix("(") {
                words.replaceSubrange(
                    index - 1...index + 1,
                    with: ["NEAR(\(words[index - 1]) \(words[index + 1]), \(distance))"])
            } else {
                index += 1
            }
        }
        return words.joined(separator: " ")
    }

    private func rows<T>(
        _ sql: String, query: String, limit: Int, _ row: (SQLiteStatement) -> T
    ) throws(DatabaseError) -> [T] {
        try transaction.checkActive()
        guard limit >= 0 else {
            throw DatabaseError(.misuse, "a search's limit must not be negative (\(limit))")
        }
        try Self.checkBounds(query)
        let statement = try transaction.core.handle().cachedStatement(sql)
        defer { statement.reset() }
        try statement.bind(Self.fts5(query), at: 1)
        try statement.bind(Int64(limit), at: 2)
        var results: [T] = []
        do {
            while try statement.step() { results.append(row(statement)) }
        } catch {
            throw Self.queryError(error, query: query)
        }
        return results
    }

    /// Refuses a query past ``maximumQueryBytes`` or ``maximumQueryTerms``.
    static func checkBounds(_ query: String) throws(DatabaseError) {
        // FTS5 reads a query up to its first NUL: "urg\0ent" searched for "urg".
        if query.utf8.contains(0) {
            throw DatabaseError(.invalidQuery, "the search \(QuotedInput.quote(query)) holds a NUL character")
        }
        let bytes = query.utf8.count
        if bytes > maximumQueryBytes {
            throw DatabaseError(
                .invalidQuery,
                "the search \(QuotedInput.quote(query)) is \(bytes) bytes long; a search takes at most \(maximumQueryBytes)"
            )
        }
        let terms = query.split(whereSeparator: { $0.isWhitespace }).count
        if terms > maximumQueryTerms {
            throw DatabaseError(
                .invalidQuery,
                "the search \(QuotedInput.quote(query)) has \(terms) terms; a search takes at most \(maximumQueryTerms)"
            )
        }
    }

    /// `invalidQuery` for a query FTS5 refuses; other errors unchanged.
    ///
    /// The statement around the query is SnapshotDB's own and valid, so a plain `SQLITE_ERROR`
    /// while it runs comes from the query: FTS5's "fts5: syntax error near …", "unterminated
    /// string", "unknown special query" (a lone `*`) and "no such column" (`-paris`, which FTS5
    /// reads as a column filter, and `nosuch:paris`).
    static func queryError(_ error: DatabaseError, query: String) -> DatabaseError {
        // Plain SQLITE_ERROR only: its extended codes (a missing collation, a retry) are not
        // the query's fault.
        guard error.isPlainSQLiteError else { return error }
        return DatabaseError(
            .invalidQuery,
            "the search \(QuotedInput.quote(query)) is not a valid FTS5 query: \(error.message)",
            sqliteCode: error.sqliteCode, cause: error)
    }
}
