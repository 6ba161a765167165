public import Foundation

/// What one commit changed: an immutable value delivered to bookmarked connections and
/// `Database.changes()` subscribers.
///
/// A changeset made by this process lists the keys set and removed per collection and the
/// collections cleared. A commit made outside this `Database` (another process, the `sqlite3`
/// shell) is delivered with ``isExternal`` set: its keys are unknown, so every `hasChange`
/// question answers `true`.
public struct Changeset: Sendable, Hashable {
    /// The commit number this changeset produced.
    public let commit: UInt64
    /// Keys written (inserted or replaced) per collection.
    public let setKeys: [String: Set<String>]
    /// Keys removed per collection.
    public let removedKeys: [String: Set<String>]
    /// Collections emptied by `removeAll(inCollection:)`.
    public let clearedCollections: Set<String>
    /// Whether `removeAllCollections()` ran in this commit.
    public let clearedAllCollections: Bool
    /// The name of the connection that wrote the commit; `nil` for an external commit.
    public let connectionName: String?
    /// When the commit was published.
    public let date: Date
    /// Free-form information the writing transaction attached (``ReadWriteTransaction/info``).
    public let info: [String: String]
    /// Whether the commit came from outside this `Database`; then the key sets are empty and
    /// every `hasChange` answers `true`.
    public let isExternal: Bool

    /// Creates a changeset; SnapshotDB creates these, tests and previews may too.
    public init(
        commit: UInt64, setKeys: [String: Set<String>] = [:], removedKeys: [String: Set<String>] = [:],
        clearedCollections: Set<String> = [], clearedAllCollections: Bool = false,
        connectionName: String? = nil, date: Date = Date(), info: [String: String] = [:],
        isExternal: Bool = false
    ) {
        self.commit = commit
        self.setKeys = setKeys
        self.removedKeys = removedKeys
        self.clearedCollections = clearedCollections
        self.clearedAllCollections = clearedAllCollections
        self.connectionName = connectionName
        self.date = date
        self.info = info
        self.isExternal = isExternal
    }

    /// Whether this commit may have changed the value of `key` in `collection`.
    ///
    /// True when the key was set or removed, its collection (or every collection) was cleared,
    /// or the commit is external.
    public func hasChange(forKey key: String, inCollection collection: String) -> Bool {
        isExternal || clearedAllCollections || clearedCollections.contains(collection)
            || setKeys[collection]?.contains(key) == true
            || removedKeys[collection]?.contains(key) == true
    }

    /// Whether this commit may have changed anything in `collection`.
    public func hasChange(inCollection collection: String) -> Bool {
        isExternal || clearedAllCollections || clearedCollections.contains(collection)
            || setKeys[collection] != nil || removedKeys[collection] != nil
    }

    /// Every collection this commit touched by name (empty for external or clear-all commits,
    /// which touch every collection).
    public var changedCollections: Set<String> {
        clearedCollections.union(setKeys.keys).union(removedKeys.keys)
    }

    /// Whether the changeset says nothing changed (never true for a published changeset).
    var isEmpty: Bool {
        !isExternal && !clearedAllCollections && clearedCollections.isEmpty && setKeys.isEmpty
            && removedKeys.isEmpty
    }
}

extension Sequence<Changeset> {
    /// Whether any changeset of the sequence may have changed `key` in `collection`.
    ///
    /// ```swift
    /// let changes = try ui.beginLongLivedReadTransaction()
    /// if changes.hasChange(forKey: productID, inCollection: "products") { reloadProduct() }
    /// ```
    public func hasChange(forKey key: String, inCollection collection: String) -> Bool {
        contains { $0.hasChange(forKey: key, inCollection: collection) }
    }

    /// Whether any changeset of the sequence may have changed anything in `collection`.
    public func hasChange(inCollection collection: String) -> Bool {
        contains { $0.hasChange(inCollection: collection) }
    }
}

/// Accumulates what a read-write transaction changes; a value type so a savepoint can restore
/// it by assignment.
struct ChangesetBuilder {
    var setKeys: [String: Set<String>] = [:]
    var removedKeys: [String: Set<String>] = [:]
    var clearedCollections: Set<String> = []
    var clearedAllCollections = false

    var isEmpty: Bool {
        setKeys.isEmpty && removedKeys.isEmpty && clearedCollections.isEmpty && !clearedAllCollections
    }

    mutating func recordSet(_ key: String, in collection: String) {
        if let index = setKeys.index(forKey: collection) {
            setKeys.values[index].insert(key)
        } else {
            setKeys[collection] = [key]
        }
        // Most transactions remove nothing: skip hashing the collection again.
        if !removedKeys.isEmpty { removedKeys[collection]?.remove(key) }
    }

    mutating func recordRemove(_ key: String, in collection: String) {
        removedKeys[collection, default: []].insert(key)
        setKeys[collection]?.remove(key)
        if setKeys[collection]?.isEmpty == true { setKeys[collection] = nil }
    }

    mutating func recordClear(_ collection: String) {
        clearedCollections.insert(collection)
        setKeys[collection] = nil
        removedKeys[collection] = nil
    }

    mutating func recordClearAll() {
        self = ChangesetBuilder()
        clearedAllCollections = true
    }

    func build(commit: UInt64, connectionName: String, info: [String: String]) -> Changeset {
        Changeset(
            commit: commit, setKeys: setKeys, removedKeys: removedKeys,
            clearedCollections: clearedCollections, clearedAllCollections: clearedAllCollections,
            connectionName: connectionName, date: Date(), info: info)
    }
}
