/// What a batch of changesets changed, folded once, so that each question costs O(1) however
/// many commits the batch spans.
///
/// `hasChange(forKey:inCollection:)` on `[Changeset]` asks every changeset in turn; a UI that
/// advanced past thousands of commits and then asks about each of its rows pays commits × rows.
/// Fold the batch first:
///
/// ```swift
/// let summary = try ui.beginLongLivedReadTransaction().summary
/// for row in visibleRows where summary.hasChange(forKey: row.id, inCollection: "items") { reload(row) }
/// if let keys = summary.changedKeys(inCollection: "items") { refresh(keys) } else { reloadAll() }
/// ```
///
/// A batch that holds an external changeset (commits whose keys are unknown: history purged
/// before this process read it, older contents put back from outside) or a
/// `removeAllCollections()` may have changed anything: every question answers `true`, and
/// ``changedKeys(inCollection:)`` answers `nil` ("reload the collection"), as it does for a
/// collection that `removeAll(inCollection:)` cleared.
public struct ChangeSummary: Sendable, Hashable {
    /// The commit numbers the batch spans, or `nil` for an empty batch.
    public let commits: ClosedRange<UInt64>?
    /// Whether anything may have changed: an external commit, or every collection cleared.
    public let changedEverything: Bool
    private let keys: [String: Set<String>]
    private let clearedCollections: Set<String>

    /// Folds `changesets` (in any order): O(keys they changed).
    public init<Changesets: Sequence<Changeset>>(_ changesets: Changesets) {
        var keys: [String: Set<String>] = [:]
        var cleared: Set<String> = []
        var everything = false
        var low = UInt64.max
        var high = UInt64.min
        for changeset in changesets {
            low = min(low, changeset.commits.lowerBound)
            high = max(high, changeset.commits.upperBound)
            if changeset.isExternal || changeset.clearedAllCollections { everything = true }
            guard !everything else { continue }
            changeset.visitChanges(
                key: { collection, key in keys[collection, default: []].insert(key) },
                cleared: { cleared.insert($0) })
        }
        self.commits = low <= high ? low...high : nil
        self.changedEverything = everything
        self.keys = everything ? [:] : keys
        self.clearedCollections = everything ? [] : cleared
    }

    /// Whether the batch may have changed the value of `key` in `collection`.
    public func hasChange(forKey key: String, inCollection collection: String) -> Bool {
        changedEverything || clearedCollections.contains(collection)
            || keys[collection]?.contains(key) == true
    }

    /// Whether the batch may have changed any of `keys` in `collection`.
    public func hasChange<Keys: Sequence<String>>(forAnyKeys keys: Keys, inCollection collection: String)
        -> Bool
    {
        if changedEverything || clearedCollections.contains(collection) { return true }
        guard let changed = self.keys[collection] else { return false }
        return keys.contains { changed.contains($0) }
    }

    /// Whether the batch may have changed anything in `collection`.
    public func hasChange(inCollection collection: String) -> Bool {
        changedEverything || clearedCollections.contains(collection) || keys[collection] != nil
    }

    /// The keys of `collection` the batch set or removed; `nil` when the whole collection must be
    /// reloaded (it was cleared, or the batch may have changed anything); empty when the
    /// collection is untouched.
    public func changedKeys(inCollection collection: String) -> Set<String>? {
        if changedEverything || clearedCollections.contains(collection) { return nil }
        return keys[collection] ?? []
    }

    /// The collections the batch touched by name; `nil` when it may have changed anything.
    public var changedCollections: Set<String>? {
        changedEverything ? nil : clearedCollections.union(keys.keys)
    }
}

extension Sequence<Changeset> {
    /// The batch folded into a ``ChangeSummary``, which answers each `hasChange` question in
    /// O(1); fold once, then ask many questions.
    public var summary: ChangeSummary { ChangeSummary(self) }
}
