internal import Foundation

/// A view's storage: its items in pages of at most ``pageCapacity`` item ids, one row each, and
/// a map from each item to its page; which pages a group has, in which order and with how many
/// items, is the in-memory ``ViewLayout``.
///
/// Tables (`P` is the view's table prefix):
/// - `P_page(id, grp, position, data)`: one row per page: its group, its place among the
///   group's pages (increasing in view order, with gaps so that a split rarely renumbers), and
///   its items in view order.
/// - `P_map(collection, key, grp, page)`: each item's group and page, for `index(ofKey:)` and
///   for removals without a search.
///
/// This is YapDatabase's layout. Counts live in the page rows and in memory, not in a tree of
/// rows, so moving one item writes its old page, its new page and its map row: three rows,
/// where a counted B+tree in rows also rewrites every ancestor of both leaves (the counts) and
/// its root. Under synchronous FULL each page SQLite writes is a WAL frame to sync, so the
/// number of rows a move writes is what a one-row commit into a view costs.
///
/// Positions: inserting an item binary-searches the group's pages by their first items (in
/// memory), then the page's items; each comparison decodes a value (kept decoded for the
/// transaction), or in a keyed view compares the sort key stored beside the item in its page
/// (and the page's first key, which the layout holds). `item(at:)` finds its page
/// by counts in memory and reads one row; `index(ofKey:)` reads the map row and the page row,
/// whose position the layout finds by binary search. Pages split when full and are removed when
/// empty; they are not merged.
///
/// A store made for a write transaction caches the pages it reads and writes changed ones back
/// only on ``flush()`` (at the end of the transaction, before a savepoint begins, and before the
/// transaction reads the view): a bulk commit writes each page once, not once per item. After a
/// savepoint rolls back, SQLite has undone the rows and ``discardCache()`` drops the cache with
/// them (the writer restores the layout it saved when the savepoint began).
final class ViewPages {
    /// YapDatabase's page size is 50. Pages of 32 were measured (callgrind, one-row moves into
    /// a 50,000-item view): the in-page search decodes one value fewer, but more splits and
    /// page loads made the upkeep 3% dearer.
    static let pageCapacity = 64
    /// Past this many cached pages the cache is written back and emptied, so that a rebuild or a
    /// bulk commit over a large view does not hold the whole view in memory.
    static let cacheLimit = 4_096
    /// The distance between the positions of consecutive pages when positions are handed out.
    static let positionStep: Int64 = 1 << 32
    /// The format tag of a view's tables (see ``ExtensionDefinition/tableFormat``): t7, pages
    /// of items with their counts in memory, no tree of rows, ties in the items' byte order
    /// (``ViewItem/<(_:_:)``). t5 had the same tables with ties in Swift's `String` order.
    static let tableFormat = "t7"
    /// The format tag of a keyed view's tables: t7's, with each item's sort key in its page
    /// (``PageItems``). t6 was t5's with sort keys.
    static let keyedTableFormat = "t8"
    /// The tag a view's tables had before ties were broken by bytes, for each tag since.
    static let formerTableFormats = [tableFormat: "t5", keyedTableFormat: "t6"]

    struct Page: Equatable {
        let id: Int64
        let group: String
        var position: Int64
        var items: PageItems

        var entry: ViewPageEntry {
            ViewPageEntry(
                id: id, position: position, count: items.count, first: items.first,
                firstKey: items.keyed ? items.sortKey(at: 0) : nil)
        }
    }

    let handle: SQLiteHandle
    let prefix: String
    /// Whether the view is keyed: its pages hold each item's sort key.
    let keyed: Bool
    /// Every group's pages, in step with the page rows (and ahead of them until ``flush()``).
    var layout: ViewLayout
    /// Pages read or written since the last ``discardCache()``, by id (write transactions only).
    var cache: [Int64: Page] = [:]
    /// The cached pages whose rows are not written yet.
    var dirty: Set<Int64> = []
    let caches: Bool
    let statements: StatementSet<Statement>
    /// The map rows of a bulk placement, written together (see ``writeBuiltMap()``).
    var builtMap: [(item: ViewItem, group: String, page: Int64)] = []

    /// A store over the tables named with `prefix` whose pages `layout` describes (with sort
    /// keys when `keyed`); `caching` for a write transaction's writer (see the type's notes),
    /// not for readers.
    init(handle: SQLiteHandle, prefix: String, keyed: Bool, layout: ViewLayout, caching: Bool = false) {
        self.handle = handle
        self.prefix = prefix
        self.keyed = keyed
        self.layout = layout
        self.caches = caching
        statements = handle.statementSet("view|" + prefix) { Self.sql($0, prefix: prefix) }
    }

    static func createTables(prefix: String, handle: SQLiteHandle) throws(DatabaseError) {
        try handle.execute(
            """
            CREATE TABLE \(prefix)page(id INTEGER PRIMARY KEY, grp TEXT NOT NULL, position INTEGER NOT NULL,
                data BLOB NOT NULL);
            CREATE TABLE \(prefix)map(collection TEXT NOT NULL, key TEXT NOT NULL, grp TEXT NOT NULL,
                page INTEGER NOT NULL, PRIMARY KEY (collection, key)) WITHOUT ROWID;
            """)
    }

    /// Writes the changed pages to their rows.
    func flush() throws(DatabaseError) {
        guard !dirty.isEmpty else { return }
        let update = try statements[.updatePage]
        for id in dirty.sorted() {
            guard let page = cache[id] else { continue }
            try update.bind(id, at: 1)
            try update.bind(page.position, at: 2)
            try update.bind(bytes: page.items.bytes, at: 3)
            try update.execute()
        }
        dirty.removeAll(keepingCapacity: true)
    }

    /// Forgets every cached page, written or not: after a savepoint rolled the rows back.
    func discardCache() {
        cache.removeAll()
        dirty.removeAll()
    }

    /// Puts back the layout of an earlier point of the transaction (a savepoint's start).
    func restore(_ layout: ViewLayout) {
        self.layout = layout
    }

    func remember(_ page: Page) throws(DatabaseError) {
        if cache.count >= Self.cacheLimit, cache[page.id] == nil {
            try flush()
            cache.removeAll(keepingCapacity: true)
        }
        cache[page.id] = page
    }

    // MARK: Rows

    /// The statements on the view's rows.
    enum Statement: Int, CaseIterable {
        case readPage, updatePage, updatePosition, insertPage, deletePage
        case readLocation, setLocation, removeLocation, itemsInCollection, allItems
        /// ``mapRowsPerStatement`` rows of ``setLocation`` in one statement (see
        /// ``writeBuiltMap()``).
        case setLocations
    }

    /// How many map rows a build writes per statement. Past 8 rows a statement, more saved
    /// nothing measurable (SQLite's C API, a million rows); 32 rows bind 128 parameters.
    static let mapRowsPerStatement = 32

    /// The SQL text of `statement` on the tables named with `prefix`.
    static func sql(_ statement: Statement, prefix: String) -> String {
        switch statement {
        case .readPage: "SELECT grp, position, data FROM \(prefix)page WHERE id = ?1"
        case .updatePage: "UPDATE \(prefix)page SET position = ?2, data = ?3 WHERE id = ?1"
        case .updatePosition: "UPDATE \(prefix)page SET position = ?2 WHERE id = ?1"
        case .insertPage: "INSERT INTO \(prefix)page(grp, position, data) VALUES (?1, ?2, ?3)"
        case .deletePage: "DELETE FROM \(prefix)page WHERE id = ?1"
        case .readLocation: "SELECT grp, page FROM \(prefix)map WHERE collection = ?1 AND key = ?2"
        case .setLocation:
            "INSERT OR REPLACE INTO \(prefix)map(collection, key, grp, page) VALUES (?1, ?2, ?3, ?4)"
        case .setLocations:
            "INSERT OR REPLACE INTO \(prefix)map(collection, key, grp, page) VALUES "
                + Array(repeating: "(?, ?, ?, ?)", count: mapRowsPerStatement).joined(separator: ", ")
        case .removeLocation: "DELETE FROM \(prefix)map WHERE collection = ?1 AND key = ?2"
        case .itemsInCollection: "SELECT key FROM \(prefix)map WHERE collection = ?1"
        case .allItems: "SELECT collection, key FROM \(prefix)map"
        }
    }

    func page(_ id: Int64) throws(DatabaseError) -> Page {
        if caches, let page = cache[id] { return page }
        let select = try statements[.readPage]
        defer { select.reset() }
        try select.bind(id, at: 1)
        guard try select.step() else { throw Self.damaged(prefix, "page \(id) is missing") }
        guard let items = PageItems(bytes: select.bytes(at: 2), keyed: keyed), !items.isEmpty else {
            throw Self.damaged(prefix, "page \(id) cannot be read")
        }
        let page = Page(id: id, group: select.string(at: 0), position: select.int64(at: 1), items: items)
        if caches { try remember(page) }
        return page
    }

    func save(_ page: Page) throws(DatabaseError) {
        if caches {
            try remember(page)
            dirty.insert(page.id)
            return
        }
        let update = try statements[.updatePage]
        try update.bind(page.id, at: 1)
        try update.bind(page.position, at: 2)
        try update.bind(bytes: page.items.bytes, at: 3)
        try update.execute()
    }

    /// A new page row holding `items`.
    func newPage(group: String, position: Int64, items: PageItems) throws(DatabaseError) -> Page {
        let insert = try statements[.insertPage]
        try insert.bind(group, at: 1)
        try insert.bind(position, at: 2)
        try insert.bind(bytes: items.bytes, at: 3)
        try insert.execute()
        let page = Page(id: handle.lastInsertRowID, group: group, position: position, items: items)
        if caches { try remember(page) }
        return page
    }

    func deletePage(_ id: Int64) throws(DatabaseError) {
        cache[id] = nil
        dirty.remove(id)
        let delete = try statements[.deletePage]
        try delete.bind(id, at: 1)
        try delete.execute()
    }

    /// The group and page of `item`, or `nil` when it is not in the view.
    func location(of item: ViewItem) throws(DatabaseError) -> (group: String, page: Int64)? {
        // An empty view has no map rows (a bulk load into a new view asks this of every item).
        guard !layout.groups.isEmpty else { return nil }
        let select = try statements[.readLocation]
        defer { select.reset() }
        try select.bind(item.collection, at: 1)
        try select.bind(item.key, at: 2)
        guard try select.step() else { return nil }
        return (select.string(at: 0), select.int64(at: 1))
    }

    func setLocation(of item: ViewItem, group: String, page: Int64) throws(DatabaseError) {
        try statements[.setLocation].run(item.collection, item.key, group, page)
    }

    func removeLocation(of item: ViewItem) throws(DatabaseError) {
        let delete = try statements[.removeLocation]
        try delete.bind(item.collection, at: 1)
        try delete.bind(item.key, at: 2)
        try delete.execute()
    }

    /// The items of `collection` in the view (for `removeAll(inCollection:)`).
    func items(inCollection collection: String) throws(DatabaseError) -> [ViewItem] {
        let select = try statements[.itemsInCollection]
        defer { select.reset() }
        try select.bind(collection, at: 1)
        var items: [ViewItem] = []
        while try select.step() { items.append(ViewItem(collection: collection, key: select.string(at: 0))) }
        return items
    }

    /// Every item in the view.
    func allItems() throws(DatabaseError) -> [ViewItem] {
        let select = try statements[.allItems]
        defer { select.reset() }
        var items: [ViewItem] = []
        while try select.step() {
            items.append(ViewItem(collection: select.string(at: 0), key: select.string(at: 1)))
        }
        return items
    }

    /// Whether every item of the view with table prefix `prefix` is in Unicode's NFC form, in
    /// both collection and key: then the order the view's former format (``formerTableFormats``)
    /// gave its items, Swift's `String` `<`, is their byte order, and its tables can be kept.
    /// Reads the map row by row; an ASCII name costs one pass over its bytes.
    static func itemsAreNFC(prefix: String, handle: SQLiteHandle) throws(DatabaseError) -> Bool {
        let select = try SQLiteStatement(
            handle: handle, sql: sql(.allItems, prefix: prefix), persistent: false)
        defer { select.reset() }
        while try select.step() {
            for column in 0..<2 where !isNFC(select.string(at: Int32(column))) { return false }
        }
        return true
    }

    /// Whether `name` is its own NFC form.
    static func isNFC(_ name: String) -> Bool {
        name.utf8.allSatisfy { $0 < 0x80 }
            || name.precomposedStringWithCanonicalMapping.utf8.elementsEqual(name.utf8)
    }

    /// Removes every page of `group`, for a build of the group that follows: its items' map rows
    /// stay until ``writeBuiltMap()`` replaces them.
    func removeGroup(_ group: String) throws(DatabaseError) {
        guard let list = layout.groups[group] else { return }
        for entry in list.pages { try deletePage(entry.id) }
        layout.groups[group] = nil
    }

    func removeEverything() throws(DatabaseError) {
        discardCache()
        layout = ViewLayout()
        try handle.execute("DELETE FROM \(prefix)page; DELETE FROM \(prefix)map;")
    }

    // MARK: Reading positions

    /// The page of `page`'s group list, checked against the layout.
    func slot(of page: Page) throws(DatabaseError) -> ViewPageList.Slot {
        guard let list = layout.groups[page.group], let slot = list.slot(ofPosition: page.position),
            list[slot].id == page.id
        else {
            throw Self.damaged(prefix, "page \(page.id) is not where its group's pages say")
        }
        return slot
    }

    /// The item at `index` of `group`: the page from the counts in memory, then one row.
    func item(at index: Int, inGroup group: String) throws(DatabaseError) -> ViewItem? {
        guard let list = layout.groups[group], let (slot, offset) = list.locate(index) else { return nil }
        let page = try self.page(list[slot].id)
        return offset < page.items.count ? page.items[offset] : nil
    }

    /// The index of `item`, in `page`, in its group.
    func index(of item: ViewItem, page id: Int64) throws(DatabaseError) -> Int? {
        let page = try self.page(id)
        guard let offset = page.items.firstIndex(of: item) else { return nil }
        let slot = try self.slot(of: page)
        return layout.groups[page.group]!.itemsBefore(slot) + offset
    }

    /// Every item of `group`, in order.
    func items(inGroup group: String) throws(DatabaseError) -> [ViewItem] {
        guard let list = layout.groups[group] else { return [] }
        var items: [ViewItem] = []
        items.reserveCapacity(list.count)
        for entry in list.pages { items += try page(entry.id).items.all }
        return items
    }

    /// Every item of `group` with its sort key, in order (keyed views).
    func keyedItems(inGroup group: String) throws(DatabaseError) -> (items: [ViewItem], keys: [[UInt8]]) {
        guard let list = layout.groups[group] else { return ([], []) }
        var items: [ViewItem] = []
        var keys: [[UInt8]] = []
        items.reserveCapacity(list.count)
        keys.reserveCapacity(list.count)
        for entry in list.pages {
            let page = try page(entry.id).items
            items += page.all
            keys += page.allSortKeys
        }
        return (items, keys)
    }

    /// The sort key stored with `item` in `page` (keyed views), or `nil` when it is not there.
    func sortKey(of item: ViewItem, page id: Int64) throws(DatabaseError) -> [UInt8]? {
        let items = try page(id).items
        return items.firstIndex(of: item).map { items.sortKey(at: $0) }
    }

    /// How many items of `group` sort before the key `probe` compares with: a binary search
    /// of the pages' first items, then of one page.
    func rank(inGroup group: String, probe: ViewProbe) throws(DatabaseError) -> Int {
        guard let slot = try search(group, probe) else { return 0 }
        let list = layout.groups[group]!
        let page = try self.page(list[slot].id)
        let inPage = try ViewPageList.lastIndex(in: page.items.count) { (i) throws(DatabaseError) in
            try probe.isBefore(page.items, i)
        }
        return list.itemsBefore(slot) + (inPage.map { $0 + 1 } ?? 0)
    }

    /// The last page of `group` whose first item sorts before `probe`'s key; a writer keeps
    /// the first values the search read.
    func search(_ group: String, _ probe: ViewProbe) throws(DatabaseError) -> ViewPageList.Slot? {
        guard let list = layout.groups[group] else { return nil }
        let (slot, fills) = try list.lastSlot(probe)
        if caches, !fills.isEmpty { layout.groups[group]!.keepFirstValues(fills) }
        return slot
    }

    /// Puts `page`'s entry at `slot` in step with the page after `changed` moved, arrived or
    /// left, or changed value: the entry keeps its first value only while its first item is the
    /// same and is not `changed`.
    func updateEntry(_ slot: ViewPageList.Slot, of page: Page, changed: ViewItem) {
        let old = layout.groups[page.group]![slot]
        var entry = page.entry
        if old.first == entry.first && old.first != changed { entry.keepFirstValue(of: old) }
        layout.groups[page.group]!.replace(slot, with: entry)
    }

    /// `item`, in `page`, keeps its place with a new value: the page's entry forgets the old
    /// value when `item` is its first. In a keyed view the page stores the item's new sort key
    /// (`key`), when it changed.
    func valueChanged(_ item: ViewItem, page id: Int64, key: [UInt8]?) throws(DatabaseError) {
        var page = try self.page(id)
        if let key {
            guard let index = page.items.firstIndex(of: item) else {
                throw Self.damaged(prefix, "\(item) is not in its page \(id)")
            }
            guard page.items.setSortKey(key, at: index) else { return }
            try save(page)
            if index == 0 { updateEntry(try slot(of: page), of: page, changed: item) }
            return
        }
        guard page.items.first == item else { return }
        let slot = try self.slot(of: page)
        if layout.groups[page.group]![slot].firstValue != nil { updateEntry(slot, of: page, changed: item) }
    }

}
