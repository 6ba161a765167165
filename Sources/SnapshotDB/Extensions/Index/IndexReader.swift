extension ReadTransaction {
    /// The secondary index registered as `name`, queried at this transaction's commit.
    ///
    /// - Throws: `unknownExtension` when no index of that name is registered, or this
    ///   snapshot predates it.
    public func index(named name: String) throws(DatabaseError) -> IndexReader {
        let definition = try registeredExtension(named: name, kind: .index, as: (any IndexDefinition).self)
        return IndexReader(
            transaction: self,
            table: IndexTable(prefix: ExtensionContext.tablePrefix(name), columns: definition.indexColumns))
    }
}

/// A secondary index read at one transaction's commit.
public struct IndexReader {
    private let reference: ReaderTransaction
    let table: IndexTable

    init(transaction: ReadTransaction, table: IndexTable) {
        reference = ReaderTransaction(transaction, reader: "an index")
        self.table = table
    }

    var transaction: ReadTransaction { get throws(DatabaseError) { try reference.get() } }

    /// The longest `WHERE` or `ORDER BY` fragment, in UTF-8 bytes, a query takes (longer ones
    /// throw `invalidQuery` before SQLite compiles them). A fragment's cost comes from what it
    /// computes per row, which no length bounds (nested `replace()` calls grow strings
    /// exponentially): put a time limit on reads whose fragments come from outside the app
    /// (``Configuration/readTimeLimit``).
    public static let maximumFragmentBytes = 4_096

    /// The items whose columns match `whereClause` (a SQL boolean expression over the index's
    /// columns, with `?` for each of `arguments`), sorted by `orderBy` (an `ORDER BY` list over
    /// the columns; by collection and key in SQLite's byte order when `nil`, which is also
    /// `ViewItem`'s `<`), at most `limit` of them (`nil`: all).
    ///
    /// - Throws: `invalidQuery` for a fragment that names anything but the index's columns, is
    ///   not valid SQL, holds a comment or a second statement, or whose `?` count differs from
    ///   `arguments`, and for an empty `whereClause` (`"1"` matches every row); `misuse` for a
    ///   negative `limit` (`nil` is no limit); a ``DatabaseError`` from SQLite.
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
        // SQLite would only say `near ")": syntax error` of the query around it.
        guard !whereClause.allSatisfy(\.isWhitespace) else {
            throw DatabaseError(.invalidQuery, "the where: fragment is empty; to match every row, pass \"1\"")
        }
        if let orderBy, orderBy.allSatisfy(\.isWhitespace) {
            throw DatabaseError(
                .invalidQuery, "the orderBy: fragment is empty; pass nil for the default order")
        }
        for fragment in [whereClause, orderBy ?? ""] {
            if fragment.utf8.count > Self.maximumFragmentBytes {
                throw DatabaseError(
                    .invalidQuery,
                    "the query fragment \(QuotedInput.quote(fragment)) is \(fragment.utf8.count) bytes long; "
                        + "a fragment takes at most \(Self.maximumFragmentBytes)")
            }
            // SQLite reads SQL text up to its first NUL: the rest would be dropped unseen.
            if fragment.utf8.contains(0) {
                throw DatabaseError(
                    .invalidQuery, "the query fragment \(QuotedInput.quote(fragment)) holds a NUL character")
            }
            if Self.holdsCommentOrSemicolon(fragment) {
                throw DatabaseError(
                    .invalidQuery,
                    "the query fragment \(QuotedInput.quote(fragment)) holds a comment or a second statement")
            }
        }
        let order = orderBy.map { "\n ORDER BY \($0)" } ?? "\n ORDER BY collection, key"
        let handle = try transaction.core.handle()
        let checked =
            "SELECT 1 FROM \(table.name) WHERE (\(whereClause))\n" + (orderBy.map { " ORDER BY \($0)" } ?? "")
        let approval = table.policy.columnsKey + "|" + checked
        let handleCache = ExtensionHandleCache.of(handle)
        if !handleCache.isApproved(approval) {
            try handle.checkFragment(
                checked, policy: table.policy,
                fragment: orderBy.map { "\(whereClause) ORDER BY \($0)" } ?? whereClause)
            handleCache.approve(approval)
        }
        return "SELECT \(select) FROM \(table.name) WHERE (\(whereClause))\(order)"
            + (limit ? "\n LIMIT ?" : "")
    }

    private func prepare(
        select: String, whereClause: String, arguments: [IndexValue], orderBy: String?, limit: Int?
    ) throws(DatabaseError) -> SQLiteStatement {
        // SQLite reads a negative LIMIT as no limit; Swift's APIs refuse a negative count.
        if let limit, limit < 0 {
            throw DatabaseError(.misuse, "a query's limit must not be negative (\(limit))")
        }
        let handle = try transaction.core.handle()
        let key = IndexQueryKey(
            table: table.name, columns: table.policy.columnsKey, select: select, whereClause: whereClause,
            orderBy: orderBy, hasLimit: limit != nil)
        let handleCache = ExtensionHandleCache.of(handle)
        let statement: SQLiteStatement
        if let last = handleCache.lastIndexQuery, last.key == key {
            // The same query again (a loop over arguments): already checked and prepared.
            try transaction.checkActive()
            statement = last.statement
        } else {
            let sql = try query(
                select: select, whereClause: whereClause, orderBy: orderBy, limit: limit != nil)
            statement = try handle.cachedStatement(sql)
            handleCache.lastIndexQuery = (key, statement)
        }
        let expected = arguments.count + (limit != nil ? 1 : 0)
        guard statement.parameterCount == expected else {
            throw DatabaseError(
                .invalidQuery,
                "the query \(QuotedInput.quote(whereClause)) has \(statement.parameterCount - (limit != nil ? 1 : 0)) "
                    + "parameters but \(arguments.count) arguments were given")
        }
        for (offset, argument) in arguments.enumerated() {
            try argument.bind(to: statement, at: Int32(offset + 1))
        }
        if let limit { try statement.bind(Int64(limit), at: Int32(arguments.count + 1)) }
        return statement
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
