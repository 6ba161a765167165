internal import Foundation

/// One page of a view, as the in-memory layout knows it: its row id, its place among its
/// group's pages (`position`, increasing in view order, with gaps), how many items it holds,
/// and its first item (for the binary searches of an insertion and of a rank).
///
/// `firstValue` is the first item's value at the layout's commit, decoded, once the writer has
/// compared with it: the searches then compare without reading or decoding it. The writer
/// forgets it whenever the page's first item or that item's value changes, so a layout never
/// holds a value of another commit; `nil` means "read it". In a keyed view it is the first
/// item's ``SortKey``, always there: it is read with the page.
///
/// The first item and its value sit in one immutable object, so that copying an entry (every
/// change of a page copies its chunk's entries, and the chunk it replaced is freed at the end of
/// the transaction) retains one reference: an entry with the item's two strings and a separate
/// box for the value cost three, and copying and freeing chunks was 6.5% of a one-row move into
/// a keyed view (callgrind, 50,000 items). Before the box, copying the value's existential
/// through its type's value witnesses cost about 200 instructions per entry.
struct ViewPageEntry: Sendable {
    var id: Int64
    var position: Int64
    var count: Int
    private var head: Head

    init(id: Int64, position: Int64, count: Int, first: ViewItem, firstKey: [UInt8]? = nil) {
        self.id = id
        self.position = position
        self.count = count
        head = Head(first, value: firstKey.map { SortKey(bytes: $0) }, key: firstKey)
    }

    var first: ViewItem { head.item }

    var firstValue: (any Sendable)? {
        get { head.value }
        set { head = Head(head.item, value: newValue, key: (newValue as? SortKey)?.bytes) }
    }

    /// The first item's sort key in a keyed view: ``firstValue``'s bytes, with no dynamic cast.
    var firstKey: [UInt8]? { head.key }

    /// Takes `other`'s first value (the same object; `other` has the same first item).
    mutating func keepFirstValue(of other: ViewPageEntry) { head = other.head }

    private final class Head: Sendable {
        let item: ViewItem
        let value: (any Sendable)?
        /// `value`'s bytes when it is a ``SortKey``.
        let key: [UInt8]?

        init(_ item: ViewItem, value: (any Sendable)?, key: [UInt8]?) {
            self.item = item
            self.value = value
            self.key = key
        }
    }
}

/// How a binary search compares items with the key it places or ranks.
struct ViewProbe {
    /// Whether the item at an index of a page, with its value as the transaction reads it now
    /// (or, in a keyed view, its sort key stored in the page), sorts before the key.
    let isBefore: (PageItems, Int) throws(DatabaseError) -> Bool
    /// Whether `item` sorts before the key, its value (or sort key) given; `nil` when the value
    /// is not of the view's type.
    let isValueBefore: (ViewItem, any Sendable) -> Bool?
    /// The value of `item` as the transaction reads it now (what ``isValueBefore`` takes).
    let value: (ViewItem) throws(DatabaseError) -> any Sendable
    /// The sort key to store with the item placed at the probe's key, in a keyed view.
    let storedKey: [UInt8]?
    /// The item the probe places or ranks.
    let item: ViewItem
}

/// One group's pages in view order, with their counts: the order-statistic part of a view,
/// kept in memory (what YapDatabase calls its page metadata) so that a write changes only page
/// rows, never a chain of counts up a tree.
///
/// Pages sit in immutable chunks of at most ``chunkCapacity`` entries. A change copies one
/// chunk and the chunk array, so a copy of the list (the writer's, a savepoint's, the one
/// published to readers) costs O(1) and a change O(pages / capacity + capacity): about 400
/// references and 64 entries at a million items. Positions answer `index(ofKey:)`: a page row
/// holds its position, found here by binary search.
struct ViewPageList: Sendable {
    static let chunkCapacity = 64

    final class Chunk: Sendable {
        let pages: [ViewPageEntry]
        let count: Int

        init(_ pages: [ViewPageEntry]) {
            self.pages = pages
            // By index: `reduce` handed its closure a copy of every entry.
            var count = 0
            for index in pages.indices { count += pages[index].count }
            self.count = count
        }
    }

    /// A page's place: its chunk and its index in that chunk.
    struct Slot: Equatable {
        var chunk: Int
        var index: Int
    }

    private(set) var chunks: [Chunk] = []
    /// The items of every page.
    private(set) var count = 0

    /// The list of `pages`, already in view order, in chunks filled to three quarters.
    init(pages: [ViewPageEntry]) {
        let fill = Self.chunkCapacity * 3 / 4
        var start = 0
        while start < pages.count {
            let chunk = Chunk(Array(pages[start..<min(start + fill, pages.count)]))
            chunks.append(chunk)
            count += chunk.count
            start += fill
        }
    }

    var isEmpty: Bool { chunks.isEmpty }

    var pageCount: Int { chunks.reduce(0) { $0 + $1.pages.count } }

    subscript(slot: Slot) -> ViewPageEntry { chunks[slot.chunk].pages[slot.index] }

    var firstSlot: Slot? { chunks.isEmpty ? nil : Slot(chunk: 0, index: 0) }

    var lastSlot: Slot? {
        chunks.isEmpty ? nil : Slot(chunk: chunks.count - 1, index: chunks[chunks.count - 1].pages.count - 1)
    }

    func slot(after slot: Slot) -> Slot? {
        if slot.index + 1 < chunks[slot.chunk].pages.count {
            return Slot(chunk: slot.chunk, index: slot.index + 1)
        }
        return slot.chunk + 1 < chunks.count ? Slot(chunk: slot.chunk + 1, index: 0) : nil
    }

    /// Every page, in order.
    var pages: [ViewPageEntry] { chunks.flatMap(\.pages) }

    /// The slot of the page at `position`, by binary search.
    func slot(ofPosition position: Int64) -> Slot? {
        guard
            let chunk = Self.lastIndex(in: chunks.count, { chunks[$0].pages[0].position <= position })
        else { return nil }
        let pages = chunks[chunk].pages
        guard let index = Self.lastIndex(in: pages.count, { pages[$0].position <= position }),
            pages[index].position == position
        else { return nil }
        return Slot(chunk: chunk, index: index)
    }

    /// How many items the pages before `slot` hold.
    func itemsBefore(_ slot: Slot) -> Int {
        var total = 0
        for chunk in chunks[..<slot.chunk] { total += chunk.count }
        for page in chunks[slot.chunk].pages[..<slot.index] { total += page.count }
        return total
    }

    /// The page that holds the item at `index`, and the item's offset in it.
    func locate(_ index: Int) -> (slot: Slot, offset: Int)? {
        guard index >= 0, index < count else { return nil }
        var remaining = index
        for (c, chunk) in chunks.enumerated() {
            guard remaining < chunk.count else {
                remaining -= chunk.count
                continue
            }
            for (i, page) in chunk.pages.enumerated() {
                if remaining < page.count { return (Slot(chunk: c, index: i), remaining) }
                remaining -= page.count
            }
        }
        return nil
    }

    /// The last page whose first item sorts before the key `probe` compares with, when that
    /// holds for a prefix of the pages: O(log pages) comparisons, with the first values the
    /// entries keep. Also returns the first values it had to read (`fills`), for a writer to
    /// keep.
    func lastSlot(_ probe: ViewProbe) throws(DatabaseError) -> (slot: Slot?, fills: [(Slot, any Sendable)]) {
        var fills: [(Slot, any Sendable)] = []
        let chunk = try Self.lastIndex(in: chunks.count) { (c) throws(DatabaseError) in
            try firstSortsBefore(Slot(chunk: c, index: 0), probe, fills: &fills)
        }
        guard let chunk else { return (nil, fills) }
        let index = try Self.lastIndex(in: chunks[chunk].pages.count) { (i) throws(DatabaseError) in
            try firstSortsBefore(Slot(chunk: chunk, index: i), probe, fills: &fills)
        }
        return (Slot(chunk: chunk, index: index ?? 0), fills)
    }

    /// Whether the first item of the page at `slot` sorts before the key `probe` compares
    /// with, by the first value the entry keeps; a value it had to read is appended to `fills`,
    /// for a writer to keep.
    func firstSortsBefore(_ slot: Slot, _ probe: ViewProbe, fills: inout [(Slot, any Sendable)])
        throws(DatabaseError) -> Bool
    {
        let entry = self[slot]
        // A keyed view compares the bytes where they lie: through `isValueBefore` each step of
        // a binary search cost a dynamic cast and an existential copy (about 900 instructions,
        // a tenth of them in the comparison itself).
        if let key = probe.storedKey, let firstKey = entry.firstKey {
            return SortKey.less(firstKey, entry.first, key, probe.item)
        }
        if let known = entry.firstValue, let answer = probe.isValueBefore(entry.first, known) {
            return answer
        }
        let value = try probe.value(entry.first)
        fills.append((slot, value))
        guard let answer = probe.isValueBefore(entry.first, value) else {
            throw DatabaseError(.corrupt, "a view compared \(entry.first) with a value of another type")
        }
        return answer
    }

    /// Keeps `values` as the first values of their pages (see ``ViewPageEntry/firstValue``).
    mutating func keepFirstValues(_ values: [(Slot, any Sendable)]) {
        guard !values.isEmpty else { return }
        var byChunk: [Int: [(Int, any Sendable)]] = [:]
        for (slot, value) in values { byChunk[slot.chunk, default: []].append((slot.index, value)) }
        for (chunk, changes) in byChunk {
            var pages = chunks[chunk].pages
            for (index, value) in changes { pages[index].firstValue = value }
            chunks[chunk] = Chunk(pages)
        }
    }

    mutating func replace(_ slot: Slot, with entry: ViewPageEntry) {
        var pages = chunks[slot.chunk].pages
        count += entry.count - pages[slot.index].count
        pages[slot.index] = entry
        chunks[slot.chunk] = Chunk(pages)
    }

    mutating func remove(_ slot: Slot) {
        var pages = chunks[slot.chunk].pages
        count -= pages[slot.index].count
        pages.remove(at: slot.index)
        if pages.isEmpty {
            chunks.remove(at: slot.chunk)
        } else {
            chunks[slot.chunk] = Chunk(pages)
        }
    }

    /// Inserts `entry` right after `slot`; a full chunk splits in two.
    mutating func insert(_ entry: ViewPageEntry, after slot: Slot) {
        var pages = chunks[slot.chunk].pages
        pages.insert(entry, at: slot.index + 1)
        count += entry.count
        guard pages.count > Self.chunkCapacity else {
            chunks[slot.chunk] = Chunk(pages)
            return
        }
        let half = pages.count / 2
        chunks[slot.chunk] = Chunk(Array(pages[..<half]))
        chunks.insert(Chunk(Array(pages[half...])), at: slot.chunk + 1)
    }

    /// Gives every page a new position (`positions[i]` for the i-th page), same order.
    mutating func renumber(_ positions: [Int64]) {
        var next = 0
        chunks = chunks.map { chunk in
            Chunk(
                chunk.pages.map { page in
                    var page = page
                    page.position = positions[next]
                    next += 1
                    return page
                })
        }
    }

    /// The last index in `0..<count` for which `isBefore` holds, when it holds for a prefix.
    static func lastIndex<E: Error>(in count: Int, _ isBefore: (Int) throws(E) -> Bool) throws(E) -> Int? {
        var low = 0
        var high = count
        while low < high {
            let middle = (low + high) / 2
            if try isBefore(middle) { low = middle + 1 } else { high = middle }
        }
        return low == 0 ? nil : low - 1
    }
}

/// Every group's pages of one view at one commit: the part of the view that lives in memory
/// (the items live in page rows, see ``ViewPages``).
///
/// A layout is a value and cheap to copy, so one commit's layout is shared: the writer
/// publishes the layout of each commit it makes (``ExtensionCaches``), a reader at that commit
/// takes it, a bookmarked connection keeps the one of its commit, and any other reader loads
/// it once from the page rows (O(pages), about 20k rows at a million items).
struct ViewLayout: Sendable {
    var groups: [String: ViewPageList] = [:]

    /// The groups that hold items, sorted.
    var groupNames: [String] { groups.keys.sorted() }

    /// The layout the page rows of `prefix` hold, read on `handle` (with each page's first sort
    /// key when `keyed`).
    static func load(handle: SQLiteHandle, prefix: String, keyed: Bool) throws(DatabaseError) -> ViewLayout {
        let select = try handle.cachedStatement("SELECT id, grp, position, data FROM \(prefix)page")
        defer { select.reset() }
        var byGroup: [String: [ViewPageEntry]] = [:]
        while try select.step() {
            let id = select.int64(at: 0)
            guard
                let (count, first, firstKey) = select.withBlob(at: 3, { PageItems.header($0, keyed: keyed) }),
                count > 0
            else {
                throw ViewPages.damaged(prefix, "page \(id) cannot be read")
            }
            byGroup[select.string(at: 1), default: []].append(
                ViewPageEntry(
                    id: id, position: select.int64(at: 2), count: count, first: first, firstKey: firstKey))
        }
        var layout = ViewLayout()
        for (group, pages) in byGroup {
            layout.groups[group] = ViewPageList(pages: pages.sorted { $0.position < $1.position })
        }
        return layout
    }

    /// The layout of the view `name` at `transaction`'s commit: the writer's own in a write
    /// transaction that changed the view, else the connection's or the published one of that
    /// commit, else loaded from the page rows (and kept for the next reader of that commit).
    static func current(
        name: String, context: ExtensionContext, transaction: ReadTransaction, keyed: Bool
    ) throws(DatabaseError) -> ViewLayout {
        if let write = transaction as? ReadWriteTransaction,
            let writer = write.extensionWriters.existingWriter(named: name) as? any ViewLayoutSource
        {
            return try writer.currentLayout()
        }
        return try committed(name: name, context: context, transaction: transaction, keyed: keyed)
    }

    /// The layout of the view `name` as `transaction`'s commit left it (what a write
    /// transaction's writer starts from).
    static func committed(
        name: String, context: ExtensionContext, transaction: ReadTransaction, keyed: Bool
    ) throws(DatabaseError) -> ViewLayout {
        let commit = transaction.commit
        let handle = context.handle
        let handleCache = ExtensionHandleCache.of(handle)
        // On a read replica a commit number can name two states (its primary put back to an
        // older commit went on under the same numbers): a layout is used only for the history
        // token it was loaded at.
        let database = transaction.core.database
        let token = database.role.comparesHistoryTokens ? transaction.core.snapshotToken : nil
        if let kept = handleCache.viewLayouts[name], kept.commit == commit, kept.layout.token == token {
            return kept.layout.layout
        }
        let caches = database.extensionCaches
        let box: ViewLayoutBox
        if let published = caches.published(name, at: commit) as? ViewLayoutBox, published.token == token {
            box = published
        } else {
            box = ViewLayoutBox(
                try load(handle: handle, prefix: context.tablePrefix, keyed: keyed), token: token)
            caches.offer(name, at: commit, box)
        }
        handleCache.viewLayouts[name] = (commit, box)
        return box.layout
    }
}

/// A layout shared between connections.
final class ViewLayoutBox: Sendable {
    let layout: ViewLayout
    /// On a read replica, the history token of the commit it describes (see
    /// ``ViewLayout/committed(name:context:transaction:keyed:)``); `nil` on a primary.
    let token: UInt64?

    init(_ layout: ViewLayout, token: UInt64? = nil) {
        self.layout = layout
        self.token = token
    }
}

/// A view writer, whose layout a read inside its transaction uses.
protocol ViewLayoutSource: AnyObject {
    func currentLayout() throws(DatabaseError) -> ViewLayout
}
