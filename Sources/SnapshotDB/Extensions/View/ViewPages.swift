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
    /// The format tag of a view's tables (see ``ExtensionDefinition/tableFormat``): t5,
    /// pages of items with their counts in memory, no tree of rows.
    static let tableFormat = "t5"
    /// The format tag of a keyed view's tables: t5's, with each item's sort key in its page
    /// (``PageItems``).
    static let keyedTableFormat = "t6"

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
    private(set) var layout: ViewLayout
    /// Pages read or written since the last ``discardCache()``, by id (write transactions only).
    private var cache: [Int64: Page] = [:]
    /// The cached pages whose rows are not written yet.
    private var dirty: Set<Int64> = []
    private let caches: Bool
    private let statements: StatementSet<Statement>
    /// The map rows of a bulk placement, written together (see ``writeBuiltMap()``).
    private var builtMap: [(item: ViewItem, group: String, page: Int64)] = []

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

    private func remember(_ page: Page) throws(DatabaseError) {
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

    private func save(_ page: Page) throws(DatabaseError) {
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
    private func newPage(group: String, position: Int64, items: PageItems) throws(DatabaseError) -> Page {
        let insert = try statements[.insertPage]
        try insert.bind(group, at: 1)
        try insert.bind(position, at: 2)
        try insert.bind(bytes: items.bytes, at: 3)
        try insert.execute()
        let page = Page(id: handle.lastInsertRowID, group: group, position: position, items: items)
        if caches { try remember(page) }
        return page
    }

    private func deletePage(_ id: Int64) throws(DatabaseError) {
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

    private func setLocation(of item: ViewItem, group: String, page: Int64) throws(DatabaseError) {
        try statements[.setLocation].run(item.collection, item.key, group, page)
    }

    private func removeLocation(of item: ViewItem) throws(DatabaseError) {
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
    private func slot(of page: Page) throws(DatabaseError) -> ViewPageList.Slot {
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
    private func search(_ group: String, _ probe: ViewProbe) throws(DatabaseError) -> ViewPageList.Slot? {
        guard let list = layout.groups[group] else { return nil }
        let (slot, fills) = try list.lastSlot(probe)
        if caches, !fills.isEmpty { layout.groups[group]!.keepFirstValues(fills) }
        return slot
    }

    /// Puts `page`'s entry at `slot` in step with the page after `changed` moved, arrived or
    /// left, or changed value: the entry keeps its first value only while its first item is the
    /// same and is not `changed`.
    private func updateEntry(_ slot: ViewPageList.Slot, of page: Page, changed: ViewItem) {
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

    // MARK: Changing the view

    /// Whether `item`, in `page`, surely leaves the page for the place `probe` gives (whether an
    /// item sorts before the item at its new value): the place is before the page's first item
    /// (and the page is not its group's first) or after the next page's first item.
    ///
    /// Asks the pages' first values, which the layout keeps (reading and keeping the ones it
    /// lacks: the insertion's search over the pages then finds them): a random move into a
    /// large view leaves its page almost always, and learning that from the neighbours in the
    /// page (``keepsPlace(_:page:inOrder:)``) decoded two values that nothing kept.
    func leavesPage(_ item: ViewItem, page id: Int64, probe: ViewProbe) throws(DatabaseError) -> Bool {
        let page = try self.page(id)
        let slot = try self.slot(of: page)
        let list = layout.groups[page.group]!
        if slot != list.firstSlot, list[slot].first != item,
            try !firstSortsBefore(slot, group: page.group, probe: probe)
        {
            return true
        }
        guard let next = list.slot(after: slot) else { return false }
        return try firstSortsBefore(next, group: page.group, probe: probe)
    }

    /// Whether the first item of the page at `slot` sorts before `probe`'s key; a writer keeps
    /// the first value it had to read, as after ``search(_:_:)``.
    private func firstSortsBefore(_ slot: ViewPageList.Slot, group: String, probe: ViewProbe)
        throws(DatabaseError) -> Bool
    {
        var fills: [(ViewPageList.Slot, any Sendable)] = []
        let answer = try layout.groups[group]!.firstSortsBefore(slot, probe, fills: &fills)
        if caches, !fills.isEmpty { layout.groups[group]!.keepFirstValues(fills) }
        return answer
    }

    /// Whether `item`, in `page`, would stay where it is at the key `probe` compares with: the
    /// item before it still sorts before that key and the item after it does not. Answers
    /// `false` (move it) when a neighbour is in another page.
    func keepsPlace(_ item: ViewItem, page id: Int64, probe: ViewProbe) throws(DatabaseError) -> Bool {
        let page = try self.page(id)
        guard let position = page.items.firstIndex(of: item) else { return false }
        let slot = try self.slot(of: page)
        let list = layout.groups[page.group]!
        if position > 0 {
            guard try probe.isBefore(page.items, position - 1) else { return false }
        } else if slot != list.firstSlot {
            return false
        }
        if position + 1 < page.items.count {
            guard try !probe.isBefore(page.items, position + 1) else { return false }
        } else if slot != list.lastSlot {
            return false
        }
        return true
    }

    /// Moves `item`, in `page`, to the place `probe` gives when that place is inside the same
    /// page (at its ends only when the page is the group's first or last): one row changes.
    /// Returns `false` and changes nothing otherwise.
    func moveWithinPage(_ item: ViewItem, page id: Int64, probe: ViewProbe) throws(DatabaseError) -> Bool {
        var page = try self.page(id)
        let count = page.items.count
        guard count > 1, let from = page.items.firstIndex(of: item) else { return false }
        let slot = try self.slot(of: page)
        let list = layout.groups[page.group]!
        let isFirst = slot == list.firstSlot
        let isLast = slot == list.lastSlot
        // Most moves leave the page: two comparisons with the other items at its ends say so
        // before the page is copied and searched.
        if !isLast, try probe.isBefore(page.items, from == count - 1 ? count - 2 : count - 1) { return false }
        if !isFirst, try !probe.isBefore(page.items, from == 0 ? 1 : 0) { return false }
        var others = page.items
        others.remove(at: from)
        let position =
            (try ViewPageList.lastIndex(in: others.count) { (i) throws(DatabaseError) in
                try probe.isBefore(others, i)
            })
            .map { $0 + 1 } ?? 0
        others.insert(item, key: probe.storedKey, at: position)
        page.items = others
        try save(page)
        updateEntry(slot, of: page, changed: item)
        return true
    }

    /// Inserts `item` into `group` at the place `probe` (whether an item sorts before the new
    /// one) gives.
    func insert(_ item: ViewItem, group: String, probe: ViewProbe) throws(DatabaseError) {
        guard let list = layout.groups[group], !list.isEmpty else {
            let page = try newPage(
                group: group, position: Self.positionStep,
                items: PageItems([item], keys: probe.storedKey.map { [$0] }))
            try setLocation(of: item, group: group, page: page.id)
            layout.groups[group] = ViewPageList(pages: [page.entry])
            return
        }
        let slot = try search(group, probe) ?? list.firstSlot!
        var page = try self.page(list[slot].id)
        let position =
            (try ViewPageList.lastIndex(in: page.items.count) { (i) throws(DatabaseError) in
                try probe.isBefore(page.items, i)
            })
            .map { $0 + 1 } ?? 0
        page.items.insert(item, key: probe.storedKey, at: position)
        guard page.items.count > Self.pageCapacity else {
            try setLocation(of: item, group: group, page: page.id)
            try save(page)
            updateEntry(slot, of: page, changed: item)
            return
        }
        // Split: the right half goes to a new page placed between this one and the next.
        let half = page.items.count / 2
        let right = page.items.split(at: half)
        if position < half { try setLocation(of: item, group: group, page: page.id) }
        try save(page)
        updateEntry(slot, of: page, changed: item)
        let rightPosition = try positionAfter(slot, inGroup: group)
        let newPage = try newPage(group: group, position: rightPosition, items: right)
        for moved in right.all { try setLocation(of: moved, group: group, page: newPage.id) }
        layout.groups[group]!.insert(newPage.entry, after: slot)
    }

    /// A free position between the page at `slot` and the next one (or past the last one);
    /// renumbers the group's pages when there is none (slots stay as they are).
    private func positionAfter(_ slot: ViewPageList.Slot, inGroup group: String) throws(DatabaseError)
        -> Int64
    {
        if let position = Self.freePosition(after: slot, in: layout.groups[group]!) { return position }
        try renumber(group)
        return Self.freePosition(after: slot, in: layout.groups[group]!)!
    }

    private static func freePosition(after slot: ViewPageList.Slot, in list: ViewPageList) -> Int64? {
        let here = list[slot].position
        guard let next = list.slot(after: slot) else {
            return here <= Int64.max - positionStep ? here + positionStep : nil
        }
        // Positions come from the file: a gap past Int64 (a damaged or foreign-edited page row)
        // is no free position, and renumbering writes sound ones.
        let (gap, overflow) = list[next].position.subtractingReportingOverflow(here)
        return !overflow && gap > 1 ? here + gap / 2 : nil
    }

    /// Spreads `group`'s page positions `positionStep` apart again (rare: it takes about 32
    /// splits at one place, or 2^31 pages appended at the end).
    private func renumber(_ group: String) throws(DatabaseError) {
        let pages = layout.groups[group]!.pages
        let positions = (0..<pages.count).map { Int64($0 + 1) * Self.positionStep }
        let update = try statements[.updatePosition]
        for (entry, position) in zip(pages, positions) {
            if var cached = cache[entry.id] {
                cached.position = position
                cache[entry.id] = cached
            }
            try update.bind(entry.id, at: 1)
            try update.bind(position, at: 2)
            try update.execute()
        }
        layout.groups[group]!.renumber(positions)
    }

    /// Removes `item`, which is in `group` at `page`; an emptied page is removed. With
    /// `keepingLocation` its map row stays, for an ``insert(_:group:probe:)`` of the item that
    /// follows at once and replaces the row.
    func remove(_ item: ViewItem, group: String, page id: Int64, keepingLocation: Bool = false)
        throws(DatabaseError)
    {
        var page = try self.page(id)
        guard page.group == group, let offset = page.items.firstIndex(of: item) else {
            throw Self.damaged(prefix, "\(item) is not in its page \(id)")
        }
        let slot = try self.slot(of: page)
        page.items.remove(at: offset)
        if !keepingLocation { try removeLocation(of: item) }
        if page.items.isEmpty {
            try deletePage(id)
            layout.groups[group]!.remove(slot)
            if layout.groups[group]!.isEmpty { layout.groups[group] = nil }
        } else {
            try save(page)
            updateEntry(slot, of: page, changed: item)
        }
    }

    /// Builds a group from items already in view order (with their sort keys in a keyed view),
    /// in pages filled to three quarters (room for inserts without splitting at once), and
    /// returns each item's page: item `i` is on page `pages[i / fill]`. The items' map rows wait
    /// for ``writeBuiltMap()`` when `recordingMap`; a rebuild writes them itself, in the map's
    /// order, with ``writeMap(count:row:)``.
    @discardableResult
    func build(group: String, items: [ViewItem], keys: [[UInt8]]?, recordingMap: Bool = true)
        throws(DatabaseError) -> (pages: [Int64], fill: Int)
    {
        let fill = Self.pageCapacity * 3 / 4
        guard !items.isEmpty else { return ([], fill) }
        var entries: [ViewPageEntry] = []
        var ids: [Int64] = []
        ids.reserveCapacity((items.count + fill - 1) / fill)
        var start = 0
        let insert = try statements[.insertPage]
        while start < items.count {
            let range = start..<min(start + fill, items.count)
            let slice = items[range]
            let sliceKeys = keys?[range]
            let position = Int64(entries.count + 1) * Self.positionStep
            try insert.bind(group, at: 1)
            try insert.bind(position, at: 2)
            try insert.bind(bytes: PageItems(slice, keys: sliceKeys).bytes, at: 3)
            try insert.execute()
            let id = handle.lastInsertRowID
            ids.append(id)
            if recordingMap { for item in slice { builtMap.append((item, group, id)) } }
            entries.append(
                ViewPageEntry(
                    id: id, position: position, count: slice.count, first: slice[range.lowerBound],
                    firstKey: sliceKeys?[range.lowerBound]))
            start += fill
        }
        layout.groups[group] = ViewPageList(pages: entries)
        return (ids, fill)
    }

    /// Writes the map rows of the groups ``build(group:items:keys:recordingMap:)`` built (a bulk
    /// placement of new items), in key order: the map is keyed by (collection, key), so rows in
    /// that order are appended, where rows in view order would land all over the map's B-tree.
    func writeBuiltMap() throws(DatabaseError) {
        defer { builtMap = [] }
        builtMap.sort { $0.item < $1.item }
        try writeMap(count: builtMap.count) { builtMap[$0] }
    }

    /// Writes `count` map rows, `row(i)` the `i`th, best in the map's key order (see
    /// ``writeBuiltMap()``).
    ///
    /// The rows go in statements of ``mapRowsPerStatement`` rows each, which halves SQLite's
    /// cost per row (see ``SQLiteStatement/run(rows:textsPerRow:integers:)``).
    func writeMap(count: Int, row: (Int) -> (item: ViewItem, group: String, page: Int64))
        throws(DatabaseError)
    {
        // Whole statements of rows first, then the rest one by one.
        let batched = count - count % Self.mapRowsPerStatement
        if batched > 0 {
            let insert = try statements[.setLocations]
            var texts = PackedTexts()
            var pages: [Int64] = []
            pages.reserveCapacity(Self.mapRowsPerStatement)
            for start in stride(from: 0, to: batched, by: Self.mapRowsPerStatement) {
                texts.removeAll()
                pages.removeAll(keepingCapacity: true)
                for index in start..<start + Self.mapRowsPerStatement {
                    let (item, group, page) = row(index)
                    texts.append(item.collection)
                    texts.append(item.key)
                    texts.append(group)
                    pages.append(page)
                }
                try insert.run(rows: texts, textsPerRow: 3, integers: pages)
            }
        }
        let insert = try statements[.setLocation]
        for index in batched..<count {
            let (item, group, page) = row(index)
            try insert.run(item.collection, item.key, group, page)
        }
    }

    static func damaged(_ prefix: String, _ detail: String) -> DatabaseError {
        DatabaseError(
            .corrupt,
            "the view's tables (\(prefix)*) are damaged: \(detail); register the view with a new version to rebuild it"
        )
    }
}
