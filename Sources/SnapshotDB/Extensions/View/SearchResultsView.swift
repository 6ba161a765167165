internal import Foundation

/// A view of the items that match a full-text query, in a parent view's groups and order
/// (YapDatabase's search-results view): a search list that gets row changes on advance, like
/// any view.
///
/// ```swift
/// let search = FullTextSearch<Note>(name: "noteText", version: "1", collections: ["notes"],
///     columns: ["title", "body"], extract: { _, _, note in ["title": note.title, "body": note.body] })
/// let results = SearchResultsView(name: "found", parent: byTitle, search: search, version: "1",
///     query: "swift")
/// try db.register(search)
/// try db.register(results)
///
/// let changes = try ui.beginLongLivedReadTransaction()
/// let rows = try ui.read { try $0.view(named: "found").changes(for: changes) }
///
/// try db.register(results.searching("sqlite"))   // a new query: the view is rebuilt
/// ```
///
/// An item is in the view when the full-text index matches it with `query` (FTS5 syntax, as
/// ``SearchReader/keys(matching:limit:)``) and the parent's `group` gives it a group; items are
/// in the parent's order, not by relevance (use ``SearchReader`` for ranked hits). Every commit
/// keeps it up to date in the same SQLite transaction, after the full-text index: a write that
/// makes an item match, or stop matching, inserts or deletes its row.
///
/// A new query is a new version: registering ``searching(_:)`` rebuilds the view in a commit
/// of its own, and that commit's changeset makes readers reload the view
/// (``ViewReader/requiresReload(for:)``), as for any rebuild. The rebuild reads only the values
/// that match. The full-text index must be registered first and stays registered while the
/// view is (`unregister` refuses it with `misuse`).
public struct SearchResultsView<Value: Decodable & Sendable>: ExtensionDefinition {
    /// The name the view is registered and read under (with ``ReadTransaction/view(named:)``).
    public let name: String
    /// The parent's version, the full-text index's, this view's own and the query, combined:
    /// any of them changing rebuilds the view.
    public let version: String
    /// The parent's collections.
    public let collections: Set<String>?
    /// The full-text query the items match.
    public let query: String
    /// The name of the full-text index the query runs on.
    public let searchName: String
    private let parent: View<Value>
    private let searchVersion: String
    private let ownVersion: String

    /// The items of `parent` that `search` matches with `query`.
    public init(
        name: String, parent: View<Value>, search: FullTextSearch<Value>, version: String, query: String
    ) {
        self.init(
            name: name, parent: parent, searchName: search.name, searchVersion: search.version,
            ownVersion: version, query: query)
    }

    private init(
        name: String, parent: View<Value>, searchName: String, searchVersion: String, ownVersion: String,
        query: String
    ) {
        self.name = name
        self.parent = parent
        self.searchName = searchName
        self.searchVersion = searchVersion
        self.ownVersion = ownVersion
        self.query = query
        self.collections = parent.collections
        self.version = "\(parent.version)/\(searchVersion)/\(ownVersion)/query:\(query)"
    }

    /// The same view with another query; register it to rebuild the view.
    public func searching(_ query: String) -> SearchResultsView {
        SearchResultsView(
            name: name, parent: parent, searchName: searchName, searchVersion: searchVersion,
            ownVersion: ownVersion, query: query)
    }

    var kind: ExtensionKind { .view }
    /// The parent's: a keyed parent's pages hold sort keys (a parent changing between a key
    /// and a closure changes the format, which rebuilds this view too).
    var tableFormat: String { parent.tableFormat }

    var dependencies: [String] { [searchName] }

    func createTables(_ context: ExtensionContext) throws(DatabaseError) {
        try ViewPages.createTables(prefix: context.tablePrefix, handle: context.handle)
    }

    func makeWriter(_ context: ExtensionContext) -> any ExtensionWriter {
        let matcher = SearchMatcher(
            handle: context.handle, prefix: ExtensionContext.tablePrefix(searchName), query: query)
        return ViewWriter(
            context: context, order: parent.makeOrder(context), collections: collections,
            membership: ViewMembership(
                contains: { (collection, key) throws(DatabaseError) in try matcher.matches(collection, key) },
                all: { () throws(DatabaseError) in try matcher.allMatches() }))
    }
}

extension SearchResultsView: ViewDefinition {
    func ranking(_ context: ExtensionContext) -> any ViewRanking { parent.makeOrder(context) }
}

/// Runs a search-results view's query against its full-text index, inside the writer's
/// transaction (after the index's own writer, so it sees the text being written).
final class SearchMatcher {
    private let handle: SQLiteHandle
    private let prefix: String
    private let query: String
    private let ftsQuery: String

    init(handle: SQLiteHandle, prefix: String, query: String) {
        self.handle = handle
        self.prefix = prefix
        self.query = query
        self.ftsQuery = SearchReader.fts5(query)
    }

    /// Whether the index matches the item with the query now.
    func matches(_ collection: String, _ key: String) throws(DatabaseError) -> Bool {
        let find = try handle.cachedStatement(
            "SELECT id FROM \(prefix)map WHERE collection = ?1 AND key = ?2")
        try find.bind(collection, at: 1)
        try find.bind(key, at: 2)
        let id = try find.step() ? find.int64(at: 0) : nil
        find.reset()
        guard let id else { return false }
        let match = try handle.cachedStatement(
            "SELECT 1 FROM \(prefix)fts WHERE \(prefix)fts MATCH ?1 AND rowid = ?2")
        defer { match.reset() }
        try match.bind(ftsQuery, at: 1)
        try match.bind(id, at: 2)
        do {
            return try match.step()
        } catch {
            throw SearchReader.queryError(error, query: query)
        }
    }

    /// Every item the index matches with the query now.
    func allMatches() throws(DatabaseError) -> [ViewItem] {
        try SearchReader.checkBounds(query)
        let select = try handle.cachedStatement(
            "SELECT m.collection, m.key FROM \(prefix)fts JOIN \(prefix)map m ON m.id = \(prefix)fts.rowid "
                + "WHERE \(prefix)fts MATCH ?1")
        defer { select.reset() }
        try select.bind(ftsQuery, at: 1)
        var items: [ViewItem] = []
        do {
            while try select.step() {
                items.append(ViewItem(collection: select.string(at: 0), key: select.string(at: 1)))
            }
        } catch {
            throw SearchReader.queryError(error, query: query)
        }
        return items
    }
}
