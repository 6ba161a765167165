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

    /// Orders items by collection, then key: the tie-break of equal values in a view.
    public static func < (lhs: ViewItem, rhs: ViewItem) -> Bool {
        (lhs.collection, lhs.key) < (rhs.collection, rhs.key)
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
