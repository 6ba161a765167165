internal import Foundation

/// A sorted, grouped list of the values of some collections, kept up to date by every commit
/// and read at a transaction's snapshot: what a list UI shows, with the exact row changes to
/// animate when its bookmark advances.
///
/// ```swift
/// struct Note: Codable, Sendable { var title: String; var folder: String; var archived: Bool }
/// let byTitle = View<Note>(
///     name: "byTitle", version: "1", collections: ["notes"],
///     group: { collection, key, note in note.archived ? nil : note.folder },  // nil: not in the view
///     areInIncreasingOrder: { a, b in a.title < b.title })                     // ties: by (collection, key)
/// try db.register(byTitle)
///
/// try ui.beginLongLivedReadTransaction()
/// let first = try ui.read { try $0.view(named: "byTitle").item(at: 0, inGroup: "inbox") }
/// let changes = try ui.beginLongLivedReadTransaction()
/// let rows = try ui.read { try $0.view(named: "byTitle").changes(for: changes) }
/// ```
///
/// The view lives in its own tables in the database file (pages of items, see `ViewPages`,
/// whose order and counts are kept in memory, see `ViewLayout`), updated by the writer inside
/// the same SQLite transaction as the values, so a bookmarked connection reads it at exactly its
/// commit and a crash never leaves it out of step. `count(inGroup:)` is in memory;
/// `item(at:inGroup:)` adds one row read and `index(ofKey:inCollection:)` two, at any size; a
/// write costs O(log n) comparisons per changed value and writes the pages it changed.
///
/// Its order is either a ``SortKey`` (``init(name:version:collections:group:sortKey:)``) or a
/// comparison of values (``init(name:version:collections:group:areInIncreasingOrder:)``):
/// - A **keyed** view stores each item's sort key beside it in its pages. Inserting, moving,
///   ranking and the row changes of an advance compare bytes where they lie and never decode a
///   value, and the history records old keys instead of old values. Prefer it whenever the
///   order is of fields (`String`, `Int`, `Double`, `Date`, `Bool`, optionals, each ascending
///   or descending): a one-row move decodes one value (the one written) instead of about 15.
/// - A **closure** view compares decoded values: any strict weak order, at the cost of decoding
///   the values it compares with (kept decoded between transactions while they fit, see
///   `ViewWriterCache`).
///
/// `group` and the order must be pure: the same values must always give the same groups and
/// order (change the `version` when they change). Registering a view again under the version
/// the file holds checks a sample of stored items against `group` and the sort key, and throws
/// `extensionChanged` when they disagree.
public struct View<Value: Decodable & Sendable>: ExtensionDefinition {
    /// The name the view is registered and read under.
    public let name: String
    /// The view's version: registering another version rebuilds it.
    public let version: String
    /// The collections whose values the view lists; `nil` for every collection.
    public let collections: Set<String>?
    let group: @Sendable (_ collection: String, _ key: String, _ value: Value) -> String?
    let ordering: ViewOrdering<Value>

    /// A view named `name` of the values of `collections` (every collection when `nil`).
    ///
    /// - Parameters:
    ///   - name: the name the view is registered and read under.
    ///   - version: the view's version: registering another version rebuilds it.
    ///   - collections: the collections whose values it lists; `nil` for every collection.
    ///   - group: the group of a value, or `nil` to leave it out of the view.
    ///   - areInIncreasingOrder: the order within a group (a strict weak order); equal values
    ///     are ordered by collection, then key.
    public init(
        name: String, version: String, collections: Set<String>? = nil,
        group: @escaping @Sendable (_ collection: String, _ key: String, _ value: Value) -> String?,
        areInIncreasingOrder: @escaping @Sendable (Value, Value) -> Bool
    ) {
        self.init(
            name: name, version: version, collections: collections, group: group,
            ordering: .closure(areInIncreasingOrder))
    }

    /// A keyed view named `name` of the values of `collections` (every collection when `nil`),
    /// ordered within each group by the ``SortKey`` of each value, byte by byte.
    ///
    /// ```swift
    /// let recent = View<Note>(
    ///     name: "recent", version: "1", collections: ["notes"],
    ///     group: { _, _, note in note.folder },
    ///     sortKey: { _, _, note in SortKey(.descending(note.modified), note.title) })
    /// ```
    ///
    /// - Parameters:
    ///   - name: the name the view is registered and read under.
    ///   - version: the view's version: registering another version rebuilds it.
    ///   - collections: the collections whose values it lists; `nil` for every collection.
    ///   - group: the group of a value, or `nil` to leave it out of the view.
    ///   - sortKey: the key of a value in its group; items with equal keys are ordered by
    ///     collection, then key.
    public init(
        name: String, version: String, collections: Set<String>? = nil,
        group: @escaping @Sendable (_ collection: String, _ key: String, _ value: Value) -> String?,
        sortKey: @escaping @Sendable (_ collection: String, _ key: String, _ value: Value) -> SortKey
    ) {
        self.init(
            name: name, version: version, collections: collections, group: group, ordering: .key(sortKey))
    }

    init(
        name: String, version: String, collections: Set<String>?,
        group: @escaping @Sendable (_ collection: String, _ key: String, _ value: Value) -> String?,
        ordering: ViewOrdering<Value>
    ) {
        self.name = name
        self.version = version
        self.collections = collections
        self.group = group
        self.ordering = ordering
    }

    /// Whether the view is ordered by a ``SortKey`` (its items' keys are stored with them).
    public var isKeyed: Bool {
        if case .key = ordering { return true }
        return false
    }

    var kind: ExtensionKind { .view }
    var tableFormat: String { isKeyed ? ViewPages.keyedTableFormat : ViewPages.tableFormat }

    func createTables(_ context: ExtensionContext) throws(DatabaseError) {
        try ViewPages.createTables(prefix: context.tablePrefix, handle: context.handle)
    }

    func makeWriter(_ context: ExtensionContext) -> any ExtensionWriter {
        ViewWriter(context: context, order: makeOrder(context), collections: collections)
    }

    func makeOrder(_ context: ExtensionContext) -> ViewOrder<Value> {
        ViewOrder(context: context, group: group, ordering: ordering)
    }
}

/// How a view orders the items of a group: by the values' sort keys, or by comparing values.
enum ViewOrdering<Value>: Sendable {
    case key(@Sendable (_ collection: String, _ key: String, _ value: Value) -> SortKey)
    case closure(@Sendable (Value, Value) -> Bool)
}

/// A view of the items of another view that pass a filter, in the parent's groups and order
/// (YapDatabase's filtered view). Its filter can change at run time: register it again with a
/// new `version` and it is filtered again, in a commit of its own, whose changeset makes its
/// readers reload.
///
/// ```swift
/// let starred = FilteredView(name: "starred", parent: byTitle, version: "1") { _, _, note in note.isStarred }
/// try db.register(starred)
/// ```
///
/// It is kept like any view (its own tables, updated in the same transaction), so it reads at
/// the same cost; the parent need not be registered. Its stored version combines the parent's
/// and its own, so a new parent version rebuilds it too.
public struct FilteredView<Value: Decodable & Sendable>: ExtensionDefinition {
    /// The name the filtered view is registered and read under.
    public let name: String
    /// The filter's version combined with the parent's: `parent/own`.
    public let version: String
    /// The parent's collections.
    public let collections: Set<String>?
    private let view: View<Value>

    /// The items of `parent` for which `filter` returns `true`.
    public init(
        name: String, parent: View<Value>, version: String,
        filter: @escaping @Sendable (_ collection: String, _ key: String, _ value: Value) -> Bool
    ) {
        self.name = name
        self.version = "\(parent.version)/\(version)"
        self.collections = parent.collections
        let group = parent.group
        self.view = View(
            name: name, version: self.version, collections: parent.collections,
            group: { collection, key, value in
                guard let group = group(collection, key, value), filter(collection, key, value) else {
                    return nil
                }
                return group
            }, ordering: parent.ordering)
    }

    var kind: ExtensionKind { .view }
    var tableFormat: String { view.tableFormat }

    func createTables(_ context: ExtensionContext) throws(DatabaseError) { try view.createTables(context) }

    func makeWriter(_ context: ExtensionContext) -> any ExtensionWriter { view.makeWriter(context) }

    func makeOrder(_ context: ExtensionContext) -> ViewOrder<Value> { view.makeOrder(context) }
}

/// What ``ReadTransaction/view(named:)`` needs of a view or filtered view, whatever its value
/// type.
protocol ViewDefinition: ExtensionDefinition {
    func ranking(_ context: ExtensionContext) -> any ViewRanking
}

extension ViewDefinition {
    /// A keyed view finds an item's old place in its map; a view ordered by a closure compares
    /// with neighbours whose values may have changed too, and is rebuilt.
    func keepsItemsAfterForeignWrites(_ context: ExtensionContext) -> Bool { ranking(context).keyed }

    /// The file's pages still sort by this definition's order (see ``ViewRanking/checkStored(version:)``).
    func checkStored(_ context: ExtensionContext) throws(DatabaseError) {
        try ranking(context).checkStored(version: version)
    }

    /// t5 and t6 broke ties with Swift's `String` `<`, which is this release's byte order for
    /// NFC names only: a view of those formats is kept when all its items are NFC, and rebuilt
    /// otherwise (its pages may hold a decomposed key in the order it arrived).
    var formerTableFormat: String? { ViewPages.formerTableFormats[tableFormat] }

    func formerFormatHolds(_ context: ExtensionContext) throws(DatabaseError) -> Bool {
        try ViewPages.itemsAreNFC(prefix: context.tablePrefix, handle: context.handle)
    }
}

extension View: ViewDefinition {
    func ranking(_ context: ExtensionContext) -> any ViewRanking { makeOrder(context) }
}

extension FilteredView: ViewDefinition {
    func ranking(_ context: ExtensionContext) -> any ViewRanking { makeOrder(context) }
}
