internal import Foundation

/// A key's eight bytes at some offset and its index, in ``ViewWriter/keyedOrder(_:_:)``.
struct KeyedOrderEntry {
    var prefix: UInt64
    var index: Int
}

/// A view writer's rebuild and merges: every item placed again from a scan of the values, and
/// new items placed together into their groups (a sort and a merge) instead of one search each.
extension ViewWriter {
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

    /// Items of one group with what orders them: `values` for a closure view, `keys` for a
    /// keyed one.
    struct Members {
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
    func add(_ item: ViewItem, _ value: Value, to members: inout Members) {
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
    func sorted(items: [ViewItem], keys: [[UInt8]], values: [Value]) -> (
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
    static func sortKeyed(
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
    func applyPending() throws(DatabaseError) {
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
    func mergeWithGroup(_ group: String, _ new: [ViewItem], _ newKeys: [[UInt8]]?, members: Members)
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
        return touched.isEmpty || recordsReload ? nil : ViewCommitRecord(touched: touched)
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
