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
/// write costs O(log n) comparisons per changed value, each decoding a value, and writes the
/// pages it changed. `group` and `areInIncreasingOrder` must be pure: the same values must
/// always give the same groups and order (change the `version` when they change).
public struct View<Value: Decodable & Sendable>: ExtensionDefinition {
    /// The name the view is registered and read under.
    public let name: String
    /// The view's version: registering another version rebuilds it.
    public let version: String
    /// The collections whose values the view lists; `nil` for every collection.
    public let collections: Set<String>?
    let group: @Sendable (_ collection: String, _ key: String, _ value: Value) -> String?
    let areInIncreasingOrder: @Sendable (Value, Value) -> Bool

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
        self.name = name
        self.version = version
        self.collections = collections
        self.group = group
        self.areInIncreasingOrder = areInIncreasingOrder
    }

    var kind: String { "view" }
    var tableFormat: String { ViewPages.tableFormat }

    func createTables(_ context: ExtensionContext) throws(DatabaseError) {
        try ViewPages.createTables(prefix: context.tablePrefix, handle: context.handle)
    }

    func makeWriter(_ context: ExtensionContext) -> any ExtensionWriter {
        ViewWriter(context: context, order: makeOrder(context), collections: collections)
    }

    func makeOrder(_ context: ExtensionContext) -> ViewOrder<Value> {
        ViewOrder(context: context, group: group, areInIncreasingOrder: areInIncreasingOrder)
    }
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
            }, areInIncreasingOrder: parent.areInIncreasingOrder)
    }

    var kind: String { "view" }
    var tableFormat: String { ViewPages.tableFormat }

    func createTables(_ context: ExtensionContext) throws(DatabaseError) { try view.createTables(context) }

    func makeWriter(_ context: ExtensionContext) -> any ExtensionWriter { view.makeWriter(context) }

    func makeOrder(_ context: ExtensionContext) -> ViewOrder<Value> { view.makeOrder(context) }
}

/// What ``ReadTransaction/view(named:)`` needs of a view or filtered view, whatever its value
/// type.
protocol ViewDefinition: ExtensionDefinition {
    func ranking(_ context: ExtensionContext) -> any ViewRanking
}

extension View: ViewDefinition {
    func ranking(_ context: ExtensionContext) -> any ViewRanking { makeOrder(context) }
}

extension FilteredView: ViewDefinition {
    func ranking(_ context: ExtensionContext) -> any ViewRanking { makeOrder(context) }
}

/// A view item with its decoded value, for comparisons.
struct ViewSortKey {
    let item: ViewItem
    let value: any Sendable
}

/// Comparisons in a view's order, whatever its value type.
protocol ViewRanking: AnyObject {
    /// The key of `item` with its value as the transaction reads it now.
    func currentKey(_ item: ViewItem) throws(DatabaseError) -> ViewSortKey
    /// The key of `item` with the stored value `data`.
    func key(_ item: ViewItem, data: Data) throws(DatabaseError) -> ViewSortKey
    /// Whether `lhs` sorts before `rhs`.
    func less(_ lhs: ViewSortKey, _ rhs: ViewSortKey) -> Bool
    /// Compares items with `key`, for a binary search.
    func probe(for key: ViewSortKey) -> ViewProbe
}

/// A view's grouping and order over decoded values, with the values it decoded kept for the
/// comparisons of one transaction.
final class ViewOrder<Value: Decodable & Sendable>: ViewRanking {
    let context: ExtensionContext
    let group: @Sendable (String, String, Value) -> String?
    let areInIncreasingOrder: @Sendable (Value, Value) -> Bool
    /// Values decoded for comparisons, kept from one write transaction to the next (see
    /// ``ViewWriterCache``).
    var decoded: [ViewItem: Value] = [:]

    init(
        context: ExtensionContext, group: @escaping @Sendable (String, String, Value) -> String?,
        areInIncreasingOrder: @escaping @Sendable (Value, Value) -> Bool
    ) {
        self.context = context
        self.group = group
        self.areInIncreasingOrder = areInIncreasingOrder
    }

    func decode(_ data: Data, _ item: ViewItem) throws(DatabaseError) -> Value {
        try context.decode(Value.self, data, key: item.key, collection: item.collection)
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

    /// Whether (`lhs`, `lhsItem`) sorts before (`rhs`, `rhsItem`): the view's order, then the
    /// items' (collection, key).
    func less(_ lhs: Value, _ lhsItem: ViewItem, _ rhs: Value, _ rhsItem: ViewItem) -> Bool {
        if areInIncreasingOrder(lhs, rhs) { return true }
        if areInIncreasingOrder(rhs, lhs) { return false }
        return lhsItem < rhsItem
    }

    func currentKey(_ item: ViewItem) throws(DatabaseError) -> ViewSortKey {
        ViewSortKey(item: item, value: try value(item))
    }

    func key(_ item: ViewItem, data: Data) throws(DatabaseError) -> ViewSortKey {
        ViewSortKey(item: item, value: try decode(data, item))
    }

    func less(_ lhs: ViewSortKey, _ rhs: ViewSortKey) -> Bool {
        // The keys were made by this order from `Value`s.
        less(lhs.value as! Value, lhs.item, rhs.value as! Value, rhs.item)
    }

    /// Compares items with `item` at `value`, for a binary search.
    func probe(_ item: ViewItem, at value: Value) -> ViewProbe {
        ViewProbe(
            isBefore: { (other) throws(DatabaseError) in self.less(try self.value(other), other, value, item)
            },
            isValueBefore: { other, known in (known as? Value).map { self.less($0, other, value, item) } },
            value: { (other) throws(DatabaseError) in try self.value(other) })
    }

    func probe(for key: ViewSortKey) -> ViewProbe { probe(key.item, at: key.value as! Value) }
}

/// What a view records of one commit: for each item the commit touched, where it was before
/// (its group and stored value), or `nil` when it was not in the view.
struct ViewCommitRecord: Sendable {
    struct Before: Sendable, Equatable {
        let group: String
        let data: Data
    }

    var touched: [ViewItem: Before?]
}

/// A view's record in the durable history: each touched item with its group and stored value
/// before the commit, so that a reader in another process computes the same row changes.
extension ViewCommitRecord: DurableExtensionRecord {
    static var historyTag: UInt8 { 1 }

    func encode(into writer: inout HistoryWriter) {
        writer.varint(UInt64(touched.count))
        for (item, before) in touched {
            writer.string(item.collection)
            writer.string(item.key)
            if let before {
                writer.byte(1)
                writer.string(before.group)
                writer.data(before.data)
            } else {
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
            case 1: touched[item] = Before(group: try reader.string(), data: try reader.data())
            case let flag: throw HistoryReader.Failure("a view item has flag \(flag)")
            }
        }
        return ViewCommitRecord(touched: touched)
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
            layout = try ViewLayout.committed(name: context.name, context: context, transaction: transaction)
        } else {
            layout = try ViewLayout.load(handle: context.handle, prefix: context.tablePrefix)
        }
        let store = ViewPages(
            handle: context.handle, prefix: context.tablePrefix, layout: layout, caching: true)
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

    /// Records where `item` is before the transaction changes it, the first time.
    private func recordBefore(_ item: ViewItem, location: (group: String, page: Int64)?) throws(DatabaseError)
    {
        guard touched[item] == nil else { return }
        guard let location else {
            touched[item] = .some(nil)
            return
        }
        let data = try context.handle.statement(.getData).fetchBlob(item.collection, item.key) ?? Data()
        touched[item] = ViewCommitRecord.Before(group: location.group, data: data)
    }

    func willSet(_ data: Data, forKey key: String, inCollection collection: String) throws(DatabaseError) {
        let item = ViewItem(collection: collection, key: key)
        let value = try order.decode(data, item)
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
            let stays = try pages.keepsPlace(item, page: location.page) {
                (neighbour, isBefore) throws(DatabaseError) in
                let other = try order.value(neighbour)
                return isBefore
                    ? order.less(other, neighbour, value, item) : order.less(value, item, other, neighbour)
            }
            if stays {
                // Its page may keep its old value as the page's first.
                try pages.valueChanged(item, page: location.page)
                return
            }
            let moved = try pages.moveWithinPage(item, page: location.page) { (other) throws(DatabaseError) in
                order.less(try order.value(other), other, value, item)
            }
            if moved { return }
        }
        if let location { try pages.remove(item, group: location.group, page: location.page) }
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
        for item in try membership.all() where collections?.contains(item.collection) ?? true {
            guard let data = try read.fetchBlob(item.collection, item.key) else { continue }
            try feedRebuild(item.collection, item.key, data)
        }
        try endRebuild()
    }

    /// A search-results view reads its full-text index to rebuild: it rebuilds on its own,
    /// after the pass that fills that index.
    var feedsRebuild: Bool { membership == nil }

    var rebuildCollections: Set<String>? { collections }

    var rebuildMemo: DecodeMemo? { context.memo }

    /// The members a rebuild collects, by group, until ``endRebuild()`` sorts them.
    private var rebuildGroups: [String: (items: [ViewItem], values: [Value])] = [:]

    func beginRebuild() throws(DatabaseError) {
        // New, empty tables: nothing to read.
        let tree = ViewPages(
            handle: context.handle, prefix: context.tablePrefix, layout: ViewLayout(), caching: true)
        store = tree
        pending = [:]
        rebuildGroups = [:]
        try tree.removeEverything()
    }

    func feedRebuild(_ collection: String, _ key: String, _ data: Data) throws(DatabaseError) {
        let value = try order.decode(data, ViewItem(collection: collection, key: key))
        if let group = order.group(collection, key, value) {
            rebuildGroups[group, default: ([], [])].items.append(ViewItem(collection: collection, key: key))
            rebuildGroups[group]!.values.append(value)
        }
    }

    func endRebuild() throws(DatabaseError) {
        let tree = try pages()
        for (group, members) in rebuildGroups {
            try tree.build(group: group, items: sorted(members.items, members.values))
        }
        rebuildGroups = [:]
        try tree.writeBuiltMap()
        try tree.flush()
        touched = [:]
    }

    /// `items` (whose values are `values`) in the view's order.
    ///
    /// Sorts positions over two plain arrays, not (item, value) pairs: in this generic code a
    /// pair with a `Value` is copied through runtime metadata at every access, which made the
    /// sort most of a rebuild.
    private func sorted(_ items: [ViewItem], _ values: [Value]) -> [ViewItem] {
        let isBefore = order.areInIncreasingOrder
        var positions = Array(0..<items.count)
        positions.sort { a, b in
            if isBefore(values[a], values[b]) { return true }
            if isBefore(values[b], values[a]) { return false }
            return items[a] < items[b]
        }
        return positions.map { items[$0] }
    }

    /// Places the items waiting in ``pending``. A group that gets few is searched once per
    /// item; one that gets at least ``bulkMinimum`` and an eighth of what it holds is built
    /// again: the new items sorted once, merged with the group's items in order (whose values
    /// are decoded once each), and written as new pages, as a rebuild writes them.
    private func applyPending() throws(DatabaseError) {
        guard !pending.isEmpty else { return }
        let pages = try pages()
        var byGroup: [String: (items: [ViewItem], values: [Value])] = [:]
        for (item, entry) in pending {
            byGroup[entry.group, default: ([], [])].items.append(item)
            byGroup[entry.group]!.values.append(entry.value)
        }
        pending = [:]
        var built = false
        for (group, members) in byGroup {
            let held = pages.layout.groups[group]?.count ?? 0
            guard members.items.count >= Self.bulkMinimum, members.items.count * 8 >= held else {
                for (item, value) in zip(members.items, members.values) {
                    try pages.insert(item, group: group, probe: order.probe(item, at: value))
                }
                continue
            }
            var merged = sorted(members.items, members.values)
            if held > 0 {
                var newValues: [ViewItem: Value] = [:]
                for (item, value) in zip(members.items, members.values) { newValues[item] = value }
                let current = try pages.items(inGroup: group)
                var result: [ViewItem] = []
                result.reserveCapacity(current.count + merged.count)
                var next = 0
                for item in current {
                    let value = try order.value(item)
                    while next < merged.count, order.less(newValues[merged[next]]!, merged[next], value, item)
                    {
                        result.append(merged[next])
                        next += 1
                    }
                    result.append(item)
                }
                result += merged[next...]
                merged = result
                try pages.removeGroup(group)
            }
            try pages.build(group: group, items: merged)
            built = true
        }
        if built { try pages.writeBuiltMap() }
    }

    func flush() throws(DatabaseError) {
        try applyPending()
        try store?.flush()
    }

    func finish() throws(DatabaseError) -> (any Sendable)? {
        try applyPending()
        try store?.flush()
        return touched.isEmpty ? nil : ViewCommitRecord(touched: touched)
    }
}
