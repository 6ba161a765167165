/// One item of a view: the collection and key of a value.
public struct ViewItem: Hashable, Sendable, Comparable, CustomStringConvertible {
    /// The collection of the value.
    public let collection: String
    /// The key of the value.
    public let key: String

    /// An item for `key` in `collection`.
    public init(collection: String, key: String) {
        self.collection = collection
        self.key = key
    }

    /// Orders items by collection, then key, each by its UTF-8 bytes as SQLite's `BINARY`
    /// collation compares them (a shorter prefix first).
    ///
    /// This is a strict total order, which Swift's `String` `<` is not: in Swift 6.3
    /// `"A\u{30A}" == "Å"` and `"Å" < "Åa"`, yet neither of `"A\u{30A}"` and `"Åa"` is before the
    /// other. A view whose ties were broken that way would hold such keys in the order they
    /// arrived, so an upkeep and a rebuild could disagree and a binary search could miss. The
    /// bytes are also the order of an index query without `orderBy` (`ORDER BY collection, key`
    /// in SQLite). For keys in Unicode's NFC form (most text typed on a keyboard) the two orders
    /// agree; decomposed keys (macOS file names) sort by their bytes.
    public static func < (lhs: ViewItem, rhs: ViewItem) -> Bool {
        let collections = compareUTF8(lhs.collection, rhs.collection)
        return collections != 0 ? collections < 0 : compareUTF8(lhs.key, rhs.key) < 0
    }

    /// The same value in the database: the same UTF-8 bytes of collection and key, as SQLite
    /// compares them. (Swift's `String` equality would make `"é"` and `"e\u{301}"` one item.)
    public static func == (lhs: ViewItem, rhs: ViewItem) -> Bool {
        sameUTF8(lhs.key, rhs.key) && sameUTF8(lhs.collection, rhs.collection)
    }

    /// Hashes collection and key as `String` does (equal bytes always hash alike).
    public func hash(into hasher: inout Hasher) {
        hasher.combine(collection)
        hasher.combine(key)
    }

    /// `collection/key`.
    public var description: String { "\(collection)/\(key)" }
}

/// A position in a view: a group and an index in it.
public struct ViewIndex: Hashable, Sendable, CustomStringConvertible {
    /// The group.
    public let group: String
    /// The index in the group, from 0.
    public let index: Int

    /// The position `index` in `group`.
    public init(group: String, index: Int) {
        self.group = group
        self.index = index
    }

    /// `group[index]`.
    public var description: String { "\(group)[\(index)]" }
}

/// How one row of a view changed between two commits, with the batch-update semantics of list
/// UIs: a `delete`'s and a `move`'s `from` index are positions in the view *before* the
/// changes, an `insert`'s and a `move`'s `to` index positions *after*.
///
/// Removing every deleted or moved-away item from the old rows (at their old indexes), then
/// inserting every inserted or moved-in item (at their new indexes, ascending) gives exactly the
/// new rows. An item whose value changed but whose place among the others did not is an
/// `update` at its new index.
public enum ViewRowChange: Hashable, Sendable {
    /// `item` entered the view at `at` (new index).
    case insert(ViewItem, at: ViewIndex)
    /// `item` left the view from `at` (old index).
    case delete(ViewItem, at: ViewIndex)
    /// `item` moved from `from` (old index) to `to` (new index), perhaps to another group.
    case move(ViewItem, from: ViewIndex, to: ViewIndex)
    /// `item` changed in place; `at` is its new index.
    case update(ViewItem, at: ViewIndex)

    /// The item the change is about.
    public var item: ViewItem {
        switch self {
        case .insert(let item, _), .delete(let item, _), .move(let item, _, _), .update(let item, _): item
        }
    }

    /// Applies a batch of row changes to `rows` (items per group) the way a list UI does:
    /// removes deleted and moved-away items at their old indexes, then inserts inserted and
    /// moved-in items at their new indexes, ascending. Returns `nil` when the changes do not fit
    /// `rows` (an index out of range, negative ones included, or another item at a removal's
    /// index). Groups left empty are dropped.
    ///
    /// For a model kept beside a list, and for tests: applied to the rows of the commit before,
    /// the changes ``ViewReader/changes(for:)`` returns give the rows of the commit after.
    public static func apply(_ changes: [ViewRowChange], to rows: [String: [ViewItem]]) -> [String:
        [ViewItem]]?
    {
        var rows = rows
        var removals: [String: [(index: Int, item: ViewItem)]] = [:]
        var insertions: [String: [(index: Int, item: ViewItem)]] = [:]
        for change in changes {
            switch change {
            case .delete(let item, let at): removals[at.group, default: []].append((at.index, item))
            case .insert(let item, let at): insertions[at.group, default: []].append((at.index, item))
            case .move(let item, let from, let to):
                removals[from.group, default: []].append((from.index, item))
                insertions[to.group, default: []].append((to.index, item))
            case .update: break
            }
        }
        for (group, entries) in removals {
            var list = rows[group] ?? []
            for entry in entries.sorted(by: { $0.index > $1.index }) {
                guard list.indices.contains(entry.index), list[entry.index] == entry.item else { return nil }
                list.remove(at: entry.index)
            }
            rows[group] = list
        }
        for (group, entries) in insertions {
            var list = rows[group] ?? []
            for entry in entries.sorted(by: { $0.index < $1.index }) {
                guard (0...list.count).contains(entry.index) else { return nil }
                list.insert(entry.item, at: entry.index)
            }
            rows[group] = list
        }
        return rows.filter { !$0.value.isEmpty }
    }
}

/// How a view's groups (a list's sections) changed between two commits.
public enum ViewSectionChange: Hashable, Sendable {
    /// The group was not in the view before and is now; `index` is its place in the new groups.
    case insert(group: String, index: Int)
    /// The group was in the view before and is not now; `index` was its place in the old groups.
    case delete(group: String, index: Int)
}

/// Everything a list showing a view needs to move from one commit to another: the section
/// changes, the row changes, or that it must reload.
public struct ViewChanges: Hashable, Sendable {
    /// Whether the view must be reloaded whole: the changesets hold a commit made outside this
    /// database (whose changes are unknown) or one that rebuilt the view (a new version, a
    /// new filter). Then ``rows`` and ``sections`` are empty.
    public let isReload: Bool
    /// Groups that appeared or disappeared, deletions (old indexes, descending) first.
    public let sections: [ViewSectionChange]
    /// Row changes: deletions and moves-away are at old indexes, insertions and moves-in at new
    /// ones; see ``ViewRowChange``.
    public let rows: [ViewRowChange]

    /// Whether nothing in the view changed (and no reload is needed).
    public var isEmpty: Bool { !isReload && rows.isEmpty && sections.isEmpty }
}
