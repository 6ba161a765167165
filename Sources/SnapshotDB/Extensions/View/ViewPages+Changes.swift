internal import Foundation

/// Changing a view's pages: items placed, moved and removed, pages split and merged.
extension ViewPages {
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
    func firstSortsBefore(_ slot: ViewPageList.Slot, group: String, probe: ViewProbe)
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
    func positionAfter(_ slot: ViewPageList.Slot, inGroup group: String) throws(DatabaseError)
        -> Int64
    {
        if let position = Self.freePosition(after: slot, in: layout.groups[group]!) { return position }
        try renumber(group)
        return Self.freePosition(after: slot, in: layout.groups[group]!)!
    }

    static func freePosition(after slot: ViewPageList.Slot, in list: ViewPageList) -> Int64? {
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
    func renumber(_ group: String) throws(DatabaseError) {
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
