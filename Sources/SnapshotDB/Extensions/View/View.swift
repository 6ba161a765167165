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
///   ``ViewWriterCache``).
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
}

extension View: ViewDefinition {
    func ranking(_ context: ExtensionContext) -> any ViewRanking { makeOrder(context) }
}

extension FilteredView: ViewDefinition {
    func ranking(_ context: ExtensionContext) -> any ViewRanking { makeOrder(context) }
}

/// A view item with its decoded value (or, in a keyed view, its ``SortKey``), for
/// comparisons.
struct ViewSortKey {
    let item: ViewItem
    let value: any Sendable
}

/// Comparisons in a view's order, whatever its value type.
protocol ViewRanking: AnyObject {
    /// Whether the view is keyed (its pages hold sort keys).
    var keyed: Bool { get }
    /// The key of `item`, which is in `page` of `pages`, as the transaction reads it now.
    func currentKey(_ item: ViewItem, page: Int64, in pages: ViewPages) throws(DatabaseError) -> ViewSortKey
    /// The key of `item` as a commit's record kept it from before the commit.
    func key(_ item: ViewItem, before: ViewCommitRecord.Stored) throws(DatabaseError) -> ViewSortKey
    /// Whether `lhs` sorts before `rhs`.
    func less(_ lhs: ViewSortKey, _ rhs: ViewSortKey) -> Bool
    /// Compares items with `key`, for a binary search.
    func probe(for key: ViewSortKey) -> ViewProbe
    /// Checks a sample of the stored items against the view's grouping and sort key: the
    /// registration of `version`, which the file holds, must compute what the file holds.
    func checkStored(version: String) throws(DatabaseError)
}

/// A view's grouping and order over decoded values or their sort keys, with the values it
/// decoded kept for the comparisons of one transaction (closure order only: a keyed view
/// compares the keys stored in its pages).
final class ViewOrder<Value: Decodable & Sendable>: ViewRanking {
    let context: ExtensionContext
    let group: @Sendable (String, String, Value) -> String?
    let ordering: ViewOrdering<Value>
    let keyed: Bool
    /// Values decoded for comparisons, kept from one write transaction to the next (see
    /// ``ViewWriterCache``).
    var decoded: [ViewItem: Value] = [:]

    init(
        context: ExtensionContext, group: @escaping @Sendable (String, String, Value) -> String?,
        ordering: ViewOrdering<Value>
    ) {
        self.context = context
        self.group = group
        self.ordering = ordering
        if case .key = ordering { keyed = true } else { keyed = false }
    }

    func decode(_ stored: StoredValue, _ item: ViewItem) throws(DatabaseError) -> Value {
        try context.decode(Value.self, stored, key: item.key, collection: item.collection)
    }

    /// The value of `item` as the open transaction reads it (decoded once per transaction, and
    /// kept decoded across transactions by the connection's value cache).
    func value(_ item: ViewItem) throws(DatabaseError) -> Value {
        if let value = decoded[item] { return value }
        guard let value = try context.value(Value.self, key: item.key, collection: item.collection) else {
            throw ViewPages.damaged(context.tablePrefix, "\(item) is in the view but has no value")
        }
        if decoded.count > 100_000 { decoded.removeAll(keepingCapacity: true) }
        decoded[item] = value
        return value
    }

    /// Forgets the decoded value of `item`, which is about to change.
    func forget(_ item: ViewItem) { decoded[item] = nil }

    /// Forgets every decoded value (a savepoint rolled values back).
    func forgetAll() { decoded.removeAll() }

    /// The encoded sort key of `item` at `value` (keyed views).
    func sortKey(_ item: ViewItem, _ value: Value) -> [UInt8] {
        guard case .key(let sortKey) = ordering else { preconditionFailure("a sort key of a closure view") }
        return sortKey(item.collection, item.key, value).bytes
    }

    /// The comparison of a closure view.
    var areInIncreasingOrder: @Sendable (Value, Value) -> Bool {
        guard case .closure(let isBefore) = ordering else { preconditionFailure("a closure of a keyed view") }
        return isBefore
    }

    /// Whether (`lhs`, `lhsItem`) sorts before (`rhs`, `rhsItem`): the view's order, then the
    /// items' (collection, key). Closure views.
    func less(_ lhs: Value, _ lhsItem: ViewItem, _ rhs: Value, _ rhsItem: ViewItem) -> Bool {
        let isBefore = areInIncreasingOrder
        if isBefore(lhs, rhs) { return true }
        if isBefore(rhs, lhs) { return false }
        return lhsItem < rhsItem
    }

    func currentKey(_ item: ViewItem, page: Int64, in pages: ViewPages) throws(DatabaseError) -> ViewSortKey {
        guard keyed else { return ViewSortKey(item: item, value: try value(item)) }
        guard let key = try pages.sortKey(of: item, page: page) else {
            throw ViewPages.damaged(context.tablePrefix, "\(item) is not in its page \(page)")
        }
        return ViewSortKey(item: item, value: SortKey(bytes: key))
    }

    func key(_ item: ViewItem, before: ViewCommitRecord.Stored) throws(DatabaseError) -> ViewSortKey {
        switch (before, keyed) {
        case (.value(let data), false): return ViewSortKey(item: item, value: try decode(.data(data), item))
        case (.value(let data), true):
            return ViewSortKey(
                item: item, value: SortKey(bytes: sortKey(item, try decode(.data(data), item))))
        case (.sortKey(let bytes), true): return ViewSortKey(item: item, value: SortKey(bytes: bytes))
        case (.sortKey, false):
            throw DatabaseError(
                .historyMismatch,
                "the history holds a sort key for \(item) in view '\(context.name)', which is not keyed now")
        }
    }

    func less(_ lhs: ViewSortKey, _ rhs: ViewSortKey) -> Bool {
        // The keys were made by this order: `SortKey`s in a keyed view, `Value`s otherwise.
        if keyed {
            return SortKey.less(
                (lhs.value as! SortKey).bytes, lhs.item, (rhs.value as! SortKey).bytes, rhs.item)
        }
        return less(lhs.value as! Value, lhs.item, rhs.value as! Value, rhs.item)
    }

    /// Compares items with `item` at `value`, for a binary search (and, in a keyed view, places
    /// `item` with its sort key).
    func probe(_ item: ViewItem, at value: Value) -> ViewProbe {
        if keyed { return Self.probe(item, key: sortKey(item, value)) }
        return ViewProbe(
            isBefore: { (items, index) throws(DatabaseError) in
                let other = items[index]
                return self.less(try self.value(other), other, value, item)
            },
            isValueBefore: { other, known in (known as? Value).map { self.less($0, other, value, item) } },
            value: { (other) throws(DatabaseError) in try self.value(other) },
            storedKey: nil, item: item)
    }

    /// Compares items with `item` at the encoded sort key `key`: the keys stored in the pages,
    /// and the pages' first keys the layout holds.
    static func probe(_ item: ViewItem, key: [UInt8]) -> ViewProbe {
        ViewProbe(
            isBefore: { items, index in
                SortKey.less(keyOrder: items.compareSortKey(at: index, with: key), items[index], item)
            },
            isValueBefore: { other, known in
                (known as? SortKey).map { SortKey.less($0.bytes, other, key, item) }
            },
            value: { (other) throws(DatabaseError) in
                throw DatabaseError(
                    .corrupt, "a keyed view's layout lacks the sort key of its page's first item \(other)")
            },
            storedKey: key, item: item)
    }

    func probe(for key: ViewSortKey) -> ViewProbe {
        if keyed { return Self.probe(key.item, key: (key.value as! SortKey).bytes) }
        return probe(key.item, at: key.value as! Value)
    }

    /// The pages whose items ``checkStored(version:)`` checks (their first and last items): the
    /// oldest and newest of this many each, about 32 value decodes in all.
    static var checkedPages: Int { 8 }

    /// Throws `extensionChanged` when an item of a sampled page is not in the group `group`
    /// gives its value now, or (keyed views) is stored with another sort key than `sortKey`
    /// gives, or (closure views) a sampled page's last item sorts before its first by
    /// `areInIncreasingOrder` (a reversed or otherwise changed order; a change that keeps every
    /// sampled page's ends in order goes unseen). A view's membership beyond `group` (a
    /// search-results view's query) is not checked.
    func checkStored(version: String) throws(DatabaseError) {
        let prefix = context.tablePrefix
        let select = try context.handle.cachedStatement(
            """
            SELECT grp, data FROM \(prefix)page WHERE id IN (SELECT id FROM \(prefix)page ORDER BY id LIMIT ?1)
                OR id IN (SELECT id FROM \(prefix)page ORDER BY id DESC LIMIT ?1)
            """)
        defer { select.reset() }
        try select.bind(Int64(Self.checkedPages), at: 1)
        var pages: [(group: String, items: PageItems)] = []
        while try select.step() {
            // A damaged page is reported where the view reads or writes it, with its id.
            guard let items = PageItems(bytes: select.bytes(at: 1), keyed: keyed), !items.isEmpty else {
                continue
            }
            pages.append((select.string(at: 0), items))
        }
        select.reset()
        for (stored, items) in pages {
            var ends: [(item: ViewItem, value: Value)] = []
            for index in items.count == 1 ? [0] : [0, items.count - 1] {
                let item = items[index]
                guard let value = try context.value(Value.self, key: item.key, collection: item.collection)
                else {
                    throw ViewPages.damaged(prefix, "\(item) is in the view but has no value")
                }
                ends.append((item, value))
                let now = group(item.collection, item.key, value)
                var differs = now != stored
                var what =
                    "in group \(QuotedInput.quote(stored)), and the registered view puts it in "
                    + (now.map { "group \(QuotedInput.quote($0))" } ?? "no group")
                if !differs, keyed, items.compareSortKey(at: index, with: sortKey(item, value)) != 0 {
                    differs = true
                    what =
                        "with \(SortKey(bytes: items.sortKey(at: index))), and the registered view's sort key is "
                        + "\(SortKey(bytes: sortKey(item, value)))"
                }
                guard differs else { continue }
                throw DatabaseError(
                    .extensionChanged,
                    "view '\(context.name)' version '\(version)' does not compute what the file holds for that "
                        + "version: \(item) is stored \(what). Its grouping or order changed; give it a new version "
                        + "to rebuild it")
            }
            // The page holds its items in the stored order: its last may not sort before its first.
            // (Both ways round, so that a closure that is not a strict order, `<=`, is not taken
            // for a changed one where the two are equal.)
            if !keyed, ends.count == 2, less(ends[1].value, ends[1].item, ends[0].value, ends[0].item),
                !less(ends[0].value, ends[0].item, ends[1].value, ends[1].item)
            {
                throw DatabaseError(
                    .extensionChanged,
                    "view '\(context.name)' version '\(version)' does not compute what the file holds for that "
                        + "version: \(ends[0].item) is stored before \(ends[1].item) in group "
                        + "\(QuotedInput.quote(stored)), and the registered view's order puts it after. Its order "
                        + "changed (or its closure is not a strict weak order, which a view's order must be); give "
                        + "it a new version to rebuild it")
            }
        }
    }
}

/// What a view records of one commit: for each item the commit touched, where it was before
/// (its group and stored value, or its sort key in a keyed view), or `nil` when it was not in
/// the view.
struct ViewCommitRecord: Sendable {
    /// What places an item in its group before the commit.
    enum Stored: Sendable, Equatable {
        /// The value as stored (closure views decode it to compare).
        case value(Data)
        /// The encoded sort key (keyed views).
        case sortKey([UInt8])
    }

    struct Before: Sendable, Equatable {
        let group: String
        let stored: Stored
    }

    var touched: [ViewItem: Before?]
}

/// A view's record in the durable history: each touched item with its group and stored value
/// (or sort key) before the commit, so that a reader in another process computes the same row
/// changes. Flags: 0 not in the view, 1 a value, 2 a sort key.
extension ViewCommitRecord: ExtensionRecord {
    /// The view's record's tag in the history; never reused.
    static let tag: UInt8 = 1

    var historyTag: UInt8 { Self.tag }

    func encode(into writer: inout HistoryWriter) {
        writer.varint(UInt64(touched.count))
        for (item, before) in touched {
            writer.string(item.collection)
            writer.string(item.key)
            switch before?.stored {
            case .value(let data)?:
                writer.byte(1)
                writer.string(before!.group)
                writer.data(data)
            case .sortKey(let bytes)?:
                writer.byte(2)
                writer.string(before!.group)
                writer.data(Data(bytes))
            case nil:
                writer.byte(0)
            }
        }
    }

    static func decode(from reader: inout HistoryReader) throws(HistoryReader.Failure) -> ViewCommitRecord {
        var touched: [ViewItem: Before?] = [:]
        let count = try reader.count()
        touched.reserveCapacity(count)
        for _ in 0..<count {
            let item = ViewItem(collection: try reader.string(), key: try reader.string())
            switch try reader.byte() {
            case 0: touched[item] = .some(nil)
            case 1: touched[item] = Before(group: try reader.string(), stored: .value(try reader.data()))
            case 2:
                touched[item] = Before(
                    group: try reader.string(), stored: .sortKey([UInt8](try reader.data())))
            case let flag: throw HistoryReader.Failure("a view item has flag \(flag)")
            }
        }
        return ViewCommitRecord(touched: touched)
    }

    /// The view's record of a commit from what the changeset holds under the view's name: the
    /// record itself (made in this process), or decoded from the bytes the history holds. `nil`
    /// for a record of another tag (a newer version's), which the view cannot read: its readers
    /// reload (``ViewReader/requiresReload(for:)``).
    ///
    /// - Throws: ``HistoryReader/Failure`` for bytes that are not a view's record.
    static func from(_ record: any ExtensionRecord) throws(HistoryReader.Failure) -> ViewCommitRecord? {
        if let record = record as? ViewCommitRecord { return record }
        guard let stored = record as? StoredExtensionRecord, stored.historyTag == tag else { return nil }
        // (`withUnsafeBytes` rethrows untyped errors: the outcome comes out as a `Result`.)
        let outcome = stored.payload.withUnsafeBytes {
            bytes -> Result<ViewCommitRecord, HistoryReader.Failure> in
            var reader = HistoryReader(bytes)
            do throws(HistoryReader.Failure) {
                let decoded = try decode(from: &reader)
                guard reader.isAtEnd else {
                    throw HistoryReader.Failure("extra bytes after the view's record")
                }
                return .success(decoded)
            } catch {
                return .failure(error)
            }
        }
        return try outcome.get()
    }

    /// Whether a view can read `record` (no record at all: nothing to read, and nothing missed).
    static func isReadable(_ record: (any ExtensionRecord)?) -> Bool {
        guard let record, !(record is ViewCommitRecord) else { return true }
        return (record as? StoredExtensionRecord)?.historyTag == tag
    }
}

/// Which items may be in a view at all, decided outside its values (a search-results view's
/// query): asked before the view's own grouping.
struct ViewMembership {
    /// Whether the item may be in the view, as the transaction reads it now.
    let contains: (_ collection: String, _ key: String) throws(DatabaseError) -> Bool
    /// Every item that may be in the view (for a rebuild, which then reads only those values).
    let all: () throws(DatabaseError) -> [ViewItem]
}

/// A key's eight bytes at some offset and its index, in ``ViewWriter/keyedOrder(_:_:)``.
private struct KeyedOrderEntry {
    var prefix: UInt64
    var index: Int
}

/// What a view's writer keeps from one write transaction to the next: the layout (which the
/// next transaction would otherwise take from the published one, or load) and the values it
/// decoded to compare items. Valid only for the commit it is stamped with (``ExtensionCaches``).
final class ViewWriterCache<Value> {
    let layout: ViewLayout
    let decoded: [ViewItem: Value]

    init(layout: ViewLayout, decoded: [ViewItem: Value]) {
        self.layout = layout
        self.decoded = decoded
    }

    /// At most this many decoded values are kept between transactions. (Two generations,
    /// which keep the values in use when the table is full instead of dropping it, were
    /// measured: random moves rarely hit the cache, a miss then costs two lookups, and 4,000
    /// one-row moves into a 50,000-item view cost 3% more instructions.)
    static var decodedLimit: Int { 20_000 }
}

/// Keeps a view's tables up to date during one read-write transaction.
final class ViewWriter<Value: Decodable & Sendable>: ExtensionWriter, ViewLayoutSource {
    private let context: ExtensionContext
    private let order: ViewOrder<Value>
    private let collections: Set<String>?
    private let membership: ViewMembership?
    /// The layout the writer starts from when the previous transaction left it one.
    private var keptLayout: ViewLayout?
    /// The pages, made on first use (their layout may have to be read).
    private var store: ViewPages?
    /// The layout as each open savepoint began (`nil`: as the transaction began, before the
    /// writer read it).
    private var savepoints: [ViewLayout?] = []
    /// Where each item the transaction touched was before it (first touch wins: a savepoint
    /// that rolls back does not change what an item was before the transaction).
    private var touched: [ViewItem: ViewCommitRecord.Before?] = [:]
    /// Items new to the view, not yet placed: placed together when the pages are next written
    /// (``applyPending()``), so that a bulk load sorts them once and builds pages, instead of
    /// searching the view for each.
    private var pending: [ViewItem: (group: String, value: Value)] = [:]

    /// A group that gets at least this many new items at once, and at least an eighth of what it
    /// holds, is built again with them (a sort and a merge) rather than searched once per item.
    static var bulkMinimum: Int { 64 }

    init(
        context: ExtensionContext, order: ViewOrder<Value>, collections: Set<String>?,
        membership: ViewMembership? = nil
    ) {
        self.context = context
        self.order = order
        self.collections = collections
        self.membership = membership
        if let transaction = context.transaction,
            let cache = transaction.core.database.extensionCaches.take(context.name, at: transaction.commit)
                as? ViewWriterCache<Value>
        {
            keptLayout = cache.layout
            order.decoded = cache.decoded
        }
    }

    /// The view's pages, with the layout of the transaction's start.
    private func pages() throws(DatabaseError) -> ViewPages {
        if let store { return store }
        let layout: ViewLayout
        if let keptLayout {
            layout = keptLayout
        } else if let transaction = context.transaction {
            layout = try ViewLayout.committed(
                name: context.name, context: context, transaction: transaction, keyed: order.keyed)
        } else {
            layout = try ViewLayout.load(
                handle: context.handle, prefix: context.tablePrefix, keyed: order.keyed)
        }
        let store = ViewPages(
            handle: context.handle, prefix: context.tablePrefix, keyed: order.keyed, layout: layout,
            caching: true)
        self.store = store
        return store
    }

    func currentLayout() throws(DatabaseError) -> ViewLayout {
        try applyPending()
        return try pages().layout
    }

    func keptCache() -> AnyObject? {
        guard let store else { return nil }
        return ViewWriterCache(
            layout: store.layout,
            decoded: order.decoded.count <= ViewWriterCache<Value>.decodedLimit ? order.decoded : [:])
    }

    func publishedState() -> AnyObject? { store.map { ViewLayoutBox($0.layout) } }

    func beginSavepoint() { savepoints.append(store?.layout) }

    func endSavepoint(rolledBack: Bool) {
        let saved = savepoints.removeLast()
        // Placed when the savepoint began (a savepoint flushes first): what waits was added in it.
        if rolledBack { pending = [:] }
        guard rolledBack, let store else { return }
        store.discardCache()
        order.forgetAll()
        if let saved {
            store.restore(saved)
        } else {
            // The writer first read the layout inside the savepoint: read it again.
            self.store = nil
        }
    }

    /// Records where `item` is before the transaction changes it, the first time: its group and
    /// stored value, or in a keyed view its sort key (from its page, which the change reads
    /// anyway).
    private func recordBefore(_ item: ViewItem, location: (group: String, page: Int64)?) throws(DatabaseError)
    {
        guard touched[item] == nil else { return }
        guard let location else {
            touched[item] = .some(nil)
            return
        }
        let stored: ViewCommitRecord.Stored
        if order.keyed {
            guard let key = try pages().sortKey(of: item, page: location.page) else {
                throw ViewPages.damaged(context.tablePrefix, "\(item) is not in its page \(location.page)")
            }
            stored = .sortKey(key)
        } else {
            stored = .value(
                try context.handle.statement(.getData).fetchBlob(item.collection, item.key) ?? Data())
        }
        touched[item] = ViewCommitRecord.Before(group: location.group, stored: stored)
    }

    func willSet(_ data: Data, forKey key: String, inCollection collection: String) throws(DatabaseError) {
        let item = ViewItem(collection: collection, key: key)
        let value = try order.decode(.data(data), item)
        let isMember = try membership?.contains(collection, key) ?? true
        let group = isMember ? order.group(collection, key, value) : nil
        if pending[item] != nil {
            // New in this transaction and not placed yet: it waits with its new value.
            pending[item] = group.map { ($0, value) }
            return
        }
        let pages = try pages()
        let location = try pages.location(of: item)
        try recordBefore(item, location: location)
        order.forget(item)
        if location == nil {
            if let group { pending[item] = (group, value) }
            return
        }
        let probe = order.probe(item, at: value)
        if let location, location.group == group,
            try !pages.leavesPage(item, page: location.page, probe: probe)
        {
            // Most updates leave an item between the same neighbours: nothing to move.
            if try pages.keepsPlace(item, page: location.page, probe: probe) {
                // Its page may keep its old value as the page's first; a keyed page stores the
                // new key (when it changed).
                try pages.valueChanged(item, page: location.page, key: probe.storedKey)
                return
            }
            if try pages.moveWithinPage(item, page: location.page, probe: probe) { return }
        }
        // A move keeps the item's map row: the insertion below replaces it (one write, not two).
        if let location {
            try pages.remove(item, group: location.group, page: location.page, keepingLocation: group != nil)
        }
        guard let group else { return }
        try pages.insert(item, group: group, probe: probe)
    }

    func willRemove(forKey key: String, inCollection collection: String) throws(DatabaseError) {
        let item = ViewItem(collection: collection, key: key)
        if pending.removeValue(forKey: item) != nil { return }
        let pages = try pages()
        guard let location = try pages.location(of: item) else { return }
        try recordBefore(item, location: location)
        try pages.remove(item, group: location.group, page: location.page)
        order.forget(item)
    }

    func willRemoveAll(inCollection collection: String) throws(DatabaseError) {
        pending = pending.filter { $0.key.collection != collection }
        for item in try pages().items(inCollection: collection) {
            try willRemove(forKey: item.key, inCollection: collection)
        }
    }

    func willRemoveAllCollections() throws(DatabaseError) {
        pending = [:]
        let pages = try pages()
        for item in try pages.allItems() {
            try recordBefore(item, location: try pages.location(of: item))
        }
        try pages.removeEverything()
    }

    func rebuild() throws(DatabaseError) {
        guard let membership else {
            try ExtensionWriters.rebuildTogether([self], handle: context.handle)
            return
        }
        // Only the members' values are read and decoded.
        try beginRebuild()
        let read = try context.handle.statement(.getData)
        // In key order, the order of a scan of the values, in which the map rows are written.
        for item in try membership.all().sorted() where collections?.contains(item.collection) ?? true {
            guard let data = try read.fetchBlob(item.collection, item.key) else { continue }
            try feedRebuild(item.collection, item.key, .data(data))
        }
        try endRebuild()
    }

    /// A search-results view reads its full-text index to rebuild: it rebuilds on its own,
    /// after the pass that fills that index.
    var feedsRebuild: Bool { membership == nil }

    var rebuildCollections: Set<String>? { collections }

    var rebuildMemo: DecodeMemo? { context.memo }

    /// The members a rebuild collects, by group, until ``endRebuild()`` sorts them (see
    /// ``ViewRebuildMembers``); in a closure view their values too, by group and index in it.
    private var rebuildMembers = ViewRebuildMembers()
    private var rebuildValues: [[Value]] = []

    /// Items of one group with what orders them: `values` for a closure view, `keys` for a
    /// keyed one.
    private struct Members {
        var items: [ViewItem] = []
        var values: [Value] = []
        var keys: [[UInt8]] = []
    }

    func beginRebuild() throws(DatabaseError) {
        // New, empty tables: nothing to read.
        let tree = ViewPages(
            handle: context.handle, prefix: context.tablePrefix, keyed: order.keyed, layout: ViewLayout(),
            caching: true)
        store = tree
        pending = [:]
        rebuildMembers = ViewRebuildMembers()
        rebuildValues = []
        try tree.removeEverything()
    }

    func feedRebuild(_ collection: String, _ key: String, _ stored: StoredValue) throws(DatabaseError) {
        let item = ViewItem(collection: collection, key: key)
        let value = try order.decode(stored, item)
        guard let group = order.group(collection, key, value) else { return }
        if order.keyed {
            rebuildMembers.add(item, group: group, key: order.sortKey(item, value))
        } else {
            let index = rebuildMembers.add(item, group: group, key: nil)
            if index == rebuildValues.count { rebuildValues.append([]) }
            rebuildValues[index].append(value)
        }
    }

    /// Adds `item` to `members` with what orders it.
    private func add(_ item: ViewItem, _ value: Value, to members: inout Members) {
        members.items.append(item)
        if order.keyed {
            members.keys.append(order.sortKey(item, value))
        } else {
            members.values.append(value)
        }
    }

    func endRebuild() throws(DatabaseError) {
        let tree = try pages()
        var members = rebuildMembers
        rebuildMembers = ViewRebuildMembers()
        let values = rebuildValues
        rebuildValues = []
        for index in members.groups.indices {
            let (items, keys, positions) = sorted(
                items: members.groups[index].items, keys: members.groups[index].keys,
                values: order.keyed ? [] : values[index])
            let (pages, fill) = try tree.build(
                group: members.groups[index].name, items: items, keys: keys, recordingMap: false)
            members.groups[index].pages = [Int64](unsafeUninitializedCapacity: positions.count) {
                buffer, count in
                for (sorted, position) in positions.enumerated() {
                    buffer.initializeElement(at: position, to: pages[sorted / fill])
                }
                count = positions.count
            }
            // The keys are not needed any more (the items are, for the map rows): freed group by
            // group, not all at the end.
            members.groups[index].keys = []
        }
        try members.writeMap(to: tree)
        try tree.flush()
        touched = [:]
    }

    /// `items` in the view's order, ordered by their sort `keys` in a keyed view or their
    /// `values` in a closure view (the other array is empty), with their sort keys in a keyed
    /// view, and where each came from (`positions[i]` is the index in `items` of the `i`th).
    ///
    /// Sorts positions over plain arrays, not (item, value) pairs: in this generic code a pair
    /// with a `Value` is copied through runtime metadata at every access, which made the sort
    /// most of a rebuild.
    private func sorted(items: [ViewItem], keys: [[UInt8]], values: [Value]) -> (
        items: [ViewItem], keys: [[UInt8]]?, positions: [Int]
    ) {
        if order.keyed {
            let positions = Self.keyedOrder(keys, items)
            return (positions.map { items[$0] }, positions.map { keys[$0] }, positions)
        }
        var positions = Array(0..<items.count)
        // Read through buffers: `Array`'s subscript is not specialized in this generic code and
        // cost about 18 instructions a read beside the value's copy (callgrind, 50,000 notes:
        // the sort 470M → 421M instructions). Each value is still copied for the call: the
        // optimizer keeps the temporary around a call to an opaque closure.
        let isBefore = order.areInIncreasingOrder
        values.withUnsafeBufferPointer { values in
            items.withUnsafeBufferPointer { items in
                positions.sort { a, b in
                    if isBefore(values[a], values[b]) { return true }
                    if isBefore(values[b], values[a]) { return false }
                    return items[a] < items[b]
                }
            }
        }
        return (positions.map { items[$0] }, nil, positions)
    }

    /// The order of items with encoded sort `keys` in a keyed view: `result[i]` is the index of
    /// the `i`th item (the keys' bytes, then the items, as ``SortKey/less(keyOrder:_:_:)``).
    ///
    /// Sorts pairs of eight bytes of each key (as one big-endian integer, zero-padded) and the
    /// key's index, side by side in one array; then each run of equal pairs by the next eight
    /// bytes, and so on, to at most 72 bytes; keys with no bytes left, or still equal there, are
    /// ordered by `memcmp` (which puts the shorter first, as the zero padding does) and then by
    /// item. A sort of indices that read each key's prefix from another array fetched two random
    /// cache lines per comparison: a million keys of nine digits sorted in 0.27–0.30 s that way,
    /// and in 0.14 s this way (with a six-byte prefix shared by all, 0.48–0.64 s against 0.25 s).
    static func keyedOrder(_ keys: [[UInt8]], _ items: [ViewItem]) -> [Int] {
        var entries = keys.indices.map { KeyedOrderEntry(prefix: 0, index: $0) }
        entries.withUnsafeMutableBufferPointer { sortKeyed($0, at: 0, keys, items) }
        return entries.map(\.index)
    }

    /// Sorts `entries` whose keys agree before byte `offset` (see ``keyedOrder(_:_:)``).
    private static func sortKeyed(
        _ entries: UnsafeMutableBufferPointer<KeyedOrderEntry>, at offset: Int, _ keys: [[UInt8]],
        _ items: [ViewItem]
    ) {
        var entries = entries
        var longer = false
        for position in entries.indices {
            keys[entries[position].index].withUnsafeBufferPointer { bytes in
                var prefix: UInt64 = 0
                for index in offset..<offset + 8 {
                    prefix = prefix << 8 | UInt64(index < bytes.count ? bytes[index] : 0)
                }
                entries[position].prefix = prefix
                if bytes.count > offset + 8 { longer = true }
            }
        }
        entries.sort { $0.prefix < $1.prefix }
        var start = 0
        while start < entries.count {
            var end = start + 1
            while end < entries.count, entries[end].prefix == entries[start].prefix { end += 1 }
            if end - start > 1 {
                var run = UnsafeMutableBufferPointer(rebasing: entries[start..<end])
                // Past 64 bytes shared the whole keys are compared: the recursion stays shallow
                // however long the keys an app sorts by (a note's body).
                if longer, offset < 64, run.contains(where: { keys[$0.index].count > offset + 8 }) {
                    sortKeyed(run, at: offset + 8, keys, items)
                } else {
                    run.sort { a, b in
                        SortKey.less(keys[a.index], items[a.index], keys[b.index], items[b.index])
                    }
                }
            }
            start = end
        }
    }

    /// Places the items waiting in ``pending``. A group that gets few is searched once per
    /// item; one that gets at least ``bulkMinimum`` and an eighth of what it holds is built
    /// again: the new items sorted once, merged with the group's items in order (whose values
    /// are decoded once each, or whose keys are read from their pages in a keyed view), and
    /// written as new pages, as a rebuild writes them.
    private func applyPending() throws(DatabaseError) {
        guard !pending.isEmpty else { return }
        let pages = try pages()
        var byGroup: [String: Members] = [:]
        for (item, entry) in pending { add(item, entry.value, to: &byGroup[entry.group, default: Members()]) }
        pending = [:]
        var built = false
        for (group, members) in byGroup {
            let held = pages.layout.groups[group]?.count ?? 0
            guard members.items.count >= Self.bulkMinimum, members.items.count * 8 >= held else {
                for index in members.items.indices {
                    let item = members.items[index]
                    let probe =
                        order.keyed
                        ? ViewOrder<Value>.probe(item, key: members.keys[index])
                        : order.probe(item, at: members.values[index])
                    try pages.insert(item, group: group, probe: probe)
                }
                continue
            }
            var (merged, mergedKeys, _) = sorted(
                items: members.items, keys: members.keys, values: members.values)
            if held > 0 {
                (merged, mergedKeys) = try mergeWithGroup(group, merged, mergedKeys, members: members)
                try pages.removeGroup(group)
            }
            try pages.build(group: group, items: merged, keys: mergedKeys)
            built = true
        }
        if built { try pages.writeBuiltMap() }
    }

    /// The items of `group` merged in order with `new` (sorted, with their keys in a keyed view;
    /// `members` holds their values otherwise).
    private func mergeWithGroup(_ group: String, _ new: [ViewItem], _ newKeys: [[UInt8]]?, members: Members)
        throws(DatabaseError) -> (items: [ViewItem], keys: [[UInt8]]?)
    {
        let pages = try pages()
        // Whether new item `n` sorts before current item `c`: by keys read from the pages, or by
        // values (the current ones decoded once each, in order).
        let current: [ViewItem]
        let currentKeys: [[UInt8]]?
        let newBeforeCurrent: (Int, Int) throws(DatabaseError) -> Bool
        if let newKeys {
            (current, currentKeys) = try pages.keyedItems(inGroup: group)
            newBeforeCurrent = { n, c in
                SortKey.less(newKeys[n], new[n], currentKeys![c], current[c])
            }
        } else {
            current = try pages.items(inGroup: group)
            currentKeys = nil
            var newValues: [ViewItem: Value] = [:]
            for (item, value) in zip(members.items, members.values) { newValues[item] = value }
            let order = order
            newBeforeCurrent = { (n, c) throws(DatabaseError) in
                order.less(newValues[new[n]]!, new[n], try order.value(current[c]), current[c])
            }
        }
        var result: [ViewItem] = []
        var resultKeys: [[UInt8]]? = newKeys == nil ? nil : []
        result.reserveCapacity(current.count + new.count)
        resultKeys?.reserveCapacity(current.count + new.count)
        var next = 0
        for index in current.indices {
            while next < new.count, try newBeforeCurrent(next, index) {
                result.append(new[next])
                resultKeys?.append(newKeys![next])
                next += 1
            }
            result.append(current[index])
            resultKeys?.append(currentKeys![index])
        }
        result += new[next...]
        resultKeys? += newKeys![next...]
        return (result, resultKeys)
    }

    func flush() throws(DatabaseError) {
        try applyPending()
        try store?.flush()
    }

    func finish() throws(DatabaseError) -> (any ExtensionRecord)? {
        try applyPending()
        try store?.flush()
        return touched.isEmpty ? nil : ViewCommitRecord(touched: touched)
    }
}

/// What a view's rebuild collects from its scan of the values, by group, until it sorts them:
/// each group's items in the order the scan fed them, with their sort keys in a keyed view, and
/// for each item fed, its group and its index there.
///
/// The scan's order is the map's key order (see ``ViewPages/writeMap(count:row:)``), so the map
/// rows are written by walking ``fed`` once: each group's items are read in their own order, a
/// few streams through memory. The rebuild used to record each map row beside its page, in the
/// view's order, and write the rows in the scan's order from there: a random read of a large
/// array per row, a cache miss each (a tenth of a million-item build in `perf`).
///
/// Not generic over the view's value type, unlike the writer: a writer's generic code runs
/// unspecialized, and a dictionary of a generic type in it looked up its type metadata twice
/// per value fed (about 700 instructions, callgrind).
struct ViewRebuildMembers {
    struct Group {
        let name: String
        var items: [ViewItem] = []
        /// In a keyed view, each item's sort key; empty in a closure view.
        var keys: [[UInt8]] = []
        /// Each item's page, once built.
        var pages: [Int64] = []
    }

    var groups: [Group] = []
    /// Each item fed, in order: its group's index in ``groups``, and its index in that group.
    private var fed: [(group: Int32, index: Int32)] = []
    private var groupIndex: [String: Int] = [:]

    /// The index of `group` in ``groups``: compared with each while there are few (most views
    /// have a handful of groups, and two short strings compare in a few instructions where a
    /// dictionary hashes), looked up by hash past that.
    private func index(of group: String) -> Int? {
        guard groups.count > 8 else { return groups.firstIndex { $0.name == group } }
        return groupIndex[group]
    }

    /// Adds `item` to `group` with its sort `key` (keyed views), and returns the group's index.
    @discardableResult
    mutating func add(_ item: ViewItem, group: String, key: [UInt8]?) -> Int {
        let index: Int
        if let known = self.index(of: group) {
            index = known
        } else {
            index = groups.count
            groups.append(Group(name: group))
            groupIndex[group] = index
        }
        fed.append((Int32(index), Int32(groups[index].items.count)))
        groups[index].items.append(item)
        if let key { groups[index].keys.append(key) }
        return index
    }

    /// Writes the map rows, in the order the items were fed (every group built).
    func writeMap(to pages: ViewPages) throws(DatabaseError) {
        try fed.withUnsafeBufferPointer { fed throws(DatabaseError) in
            try groups.withUnsafeBufferPointer { groups throws(DatabaseError) in
                try pages.writeMap(count: fed.count) { row in
                    let (group, index) = (Int(fed[row].group), Int(fed[row].index))
                    return (groups[group].items[index], groups[group].name, groups[group].pages[index])
                }
            }
        }
    }
}
