internal import Foundation

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
