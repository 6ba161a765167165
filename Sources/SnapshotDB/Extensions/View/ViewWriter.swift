internal import Foundation

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
    let context: ExtensionContext
    let order: ViewOrder<Value>
    let collections: Set<String>?
    let membership: ViewMembership?
    /// The layout the writer starts from when the previous transaction left it one.
    var keptLayout: ViewLayout?
    /// The pages, made on first use (their layout may have to be read).
    var store: ViewPages?
    /// The layout as each open savepoint began (`nil`: as the transaction began, before the
    /// writer read it).
    var savepoints: [ViewLayout?] = []
    /// Where each item the transaction touched was before it (first touch wins: a savepoint
    /// that rolls back does not change what an item was before the transaction).
    var touched: [ViewItem: ViewCommitRecord.Before?] = [:]
    /// About how many bytes `touched` holds (strings, values or sort keys).
    var touchedBytes = 0
    /// Set once `touched` outgrew ``recordLimit``: it is dropped, nothing more is recorded, and
    /// the commit records a reload of the view (``ExtensionWriter/recordsReload``).
    var recordsReload = false
    /// ``Configuration/viewRecordLimitBytes`` of the transaction's database (the default when
    /// the writer keeps the view outside a transaction, sealing foreign writes).
    let recordLimit: Int
    /// Items new to the view, not yet placed: placed together when the pages are next written
    /// (``applyPending()``), so that a bulk load sorts them once and builds pages, instead of
    /// searching the view for each.
    var pending: [ViewItem: (group: String, value: Value)] = [:]

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
        // Within an eighth of SQLite's length limit too: the commit's history row holds every
        // view's record and the keys, and must stay under that limit (a gigabyte by default,
        // far above the configured bound; a handle with a lower limit lowers the bound with it).
        recordLimit = min(
            context.transaction?.core.database.configuration.viewRecordLimitBytes
                ?? Configuration.defaultViewRecordLimitBytes,
            context.handle.lengthLimit / 8)
        if let transaction = context.transaction,
            let cache = transaction.core.database.extensionCaches.take(context.name, at: transaction.commit)
                as? ViewWriterCache<Value>
        {
            keptLayout = cache.layout
            order.decoded = cache.decoded
        }
    }

    /// The view's pages, with the layout of the transaction's start.
    func pages() throws(DatabaseError) -> ViewPages {
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
    func recordBefore(_ item: ViewItem, location: (group: String, page: Int64)?) throws(DatabaseError) {
        guard !recordsReload, touched[item] == nil else { return }
        touchedBytes +=
            item.collection.utf8.count + item.key.utf8.count + (location?.group.utf8.count ?? 0) + 32
        guard let location else {
            touched[item] = .some(nil)
            return dropRecordPastLimit()
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
        switch stored {
        case .value(let data): touchedBytes += data.count
        case .sortKey(let key): touchedBytes += key.count
        }
        touched[item] = ViewCommitRecord.Before(group: location.group, stored: stored)
        dropRecordPastLimit()
    }

    /// Past ``recordLimit``, the record gives way to a reload of the view: its memory is given
    /// back at once, and no more old values are read for it.
    private func dropRecordPastLimit() {
        guard touchedBytes > recordLimit else { return }
        recordsReload = true
        touched = [:]
        touchedBytes = 0
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

    /// The members a rebuild collects, by group, until ``endRebuild()`` sorts them (see
    /// ``ViewRebuildMembers``); in a closure view their values too, by group and index in it.
    var rebuildMembers = ViewRebuildMembers()
    var rebuildValues: [[Value]] = []
}
