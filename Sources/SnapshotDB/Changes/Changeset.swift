public import Foundation
internal import SnapshotDBLocking

/// What one commit changed: an immutable value delivered to bookmarked connections and
/// `Database.changes()` subscribers.
///
/// A changeset lists the keys set and removed per collection and the collections cleared,
/// whichever process made the commit: every commit writes its changeset into the file's
/// durable history in the same SQLite transaction as its values, and a commit of another
/// process is read from there, in the snapshot that holds its values. Writes by a foreign
/// client (the `sqlite3` shell) get the keys the schema's triggers noted. Only a commit whose
/// history is gone (purged before this process read it, or a backup put back from outside), and
/// a foreign client's writes a bookmark reads before they are numbered, are delivered with
/// ``isExternal`` set: their keys are unknown, so every `hasChange` question answers `true`.
public struct Changeset: Sendable, Hashable {
    /// The commit number this changeset produced: the last of ``commits``.
    public var commit: UInt64 { commits.upperBound }
    /// The commit numbers this changeset stands for: one number for a commit of this process;
    /// for commits found made by another process, every number the commit counter jumped, so
    /// that a jump of any size costs one changeset.
    public var commits: ClosedRange<UInt64> { storage.commits }
    /// Keys written (inserted or replaced) per collection.
    public var setKeys: [String: Set<String>] { keys.sets.setKeys }
    /// Keys removed per collection.
    public var removedKeys: [String: Set<String>] { keys.sets.removedKeys }
    /// Collections emptied by `removeAll(inCollection:)`.
    public var clearedCollections: Set<String> { keys.sets.clearedCollections }
    /// Whether `removeAllCollections()` ran in this commit.
    public var clearedAllCollections: Bool { storage.clearedAllCollections }
    /// The name of the connection that wrote the commit; `nil` for a foreign client's writes
    /// and an external commit.
    public var connectionName: String? { storage.connectionName }
    /// The process id of the process that made the commit; `nil` for a foreign client's writes
    /// and an external commit.
    public var processID: Int32? { storage.processID }
    /// When the commit was made (as its history records it, the same in every process); for an
    /// external commit, when this process learnt of it.
    public var date: Date { storage.date }
    /// Free-form information the writing transaction attached (``ReadWriteTransaction/info``).
    public var info: [String: String] { storage.info }
    /// Whether the commit's keys are unknown (its history was purged before it was read, or
    /// older contents were put back from outside, or a bookmark's snapshot holds a foreign
    /// client's writes that have no number yet: see
    /// ``ReadTransaction/hasUnnumberedForeignWrites``); then the key sets are empty and every
    /// `hasChange` answers `true`: read what you need again rather than act on the answer.
    public var isExternal: Bool { storage.isExternal }
    /// The key sets, shared by every copy of the changeset and built from the transaction's
    /// log the first time anything asks (see ``ChangedKeys``).
    private var keys: ChangedKeys { storage.keys }
    /// What extensions (views, indexes) recorded of the commit; not part of equality.
    var extensionChanges: ExtensionChanges { storage.extensionChanges }

    /// Every property, behind one reference: a changeset is copied many times on its way (the
    /// pending commit, the log, each subscriber, each advance that returns it), and a copy of
    /// one reference costs one retain where a copy of every property cost one per property.
    private final class Storage: Sendable {
        let commits: ClosedRange<UInt64>
        let clearedAllCollections: Bool
        let connectionName: String?
        let processID: Int32?
        let date: Date
        let info: [String: String]
        let isExternal: Bool
        let keys: ChangedKeys
        let extensionChanges: ExtensionChanges

        init(
            commits: ClosedRange<UInt64>, clearedAllCollections: Bool, connectionName: String?,
            processID: Int32?,
            date: Date, info: [String: String], isExternal: Bool, keys: ChangedKeys,
            extensionChanges: ExtensionChanges
        ) {
            self.commits = commits
            self.clearedAllCollections = clearedAllCollections
            self.connectionName = connectionName
            self.processID = processID
            self.date = date
            self.info = info
            self.isExternal = isExternal
            self.keys = keys
            self.extensionChanges = extensionChanges
        }
    }

    private let storage: Storage

    /// Creates a changeset; SnapshotDB creates these, tests and previews may too.
    public init(
        commit: UInt64, setKeys: [String: Set<String>] = [:], removedKeys: [String: Set<String>] = [:],
        clearedCollections: Set<String> = [], clearedAllCollections: Bool = false,
        connectionName: String? = nil, date: Date = Date(), info: [String: String] = [:],
        isExternal: Bool = false, processID: Int32? = nil
    ) {
        self.init(
            commits: commit...commit,
            keys: ChangedKeys(
                KeySets(setKeys: setKeys, removedKeys: removedKeys, clearedCollections: clearedCollections)),
            clearedAllCollections: clearedAllCollections, connectionName: connectionName,
            processID: processID,
            date: date, info: info, isExternal: isExternal)
    }

    init(
        commits: ClosedRange<UInt64>, keys: ChangedKeys, clearedAllCollections: Bool, connectionName: String?,
        processID: Int32? = nil, date: Date, info: [String: String], isExternal: Bool,
        extensionChanges: ExtensionChanges = ExtensionChanges()
    ) {
        storage = Storage(
            commits: commits, clearedAllCollections: clearedAllCollections, connectionName: connectionName,
            processID: processID, date: date, info: info, isExternal: isExternal, keys: keys,
            extensionChanges: extensionChanges)
    }

    /// The external changeset of the commits `commits`, whose keys are unknown.
    static func external(_ commits: ClosedRange<UInt64>, date: Date = Date()) -> Changeset {
        Changeset(
            commits: commits, keys: ChangedKeys(KeySets()), clearedAllCollections: false, connectionName: nil,
            date: date, info: [:], isExternal: true)
    }

    /// Whether two changesets are equal in every property, key sets included.
    public static func == (lhs: Changeset, rhs: Changeset) -> Bool {
        lhs.commits == rhs.commits && lhs.clearedAllCollections == rhs.clearedAllCollections
            && lhs.connectionName == rhs.connectionName && lhs.processID == rhs.processID
            && lhs.date == rhs.date
            && lhs.info == rhs.info
            && lhs.isExternal == rhs.isExternal && lhs.keys.sets == rhs.keys.sets
    }

    /// Hashes every property, key sets included.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(commits.lowerBound)
        hasher.combine(commits.upperBound)
        hasher.combine(clearedAllCollections)
        hasher.combine(connectionName)
        hasher.combine(processID)
        hasher.combine(date)
        hasher.combine(info)
        hasher.combine(isExternal)
        hasher.combine(keys.sets)
    }

    /// Whether this commit may have changed the value of `key` in `collection`.
    ///
    /// True when the key was set or removed, its collection (or every collection) was cleared,
    /// or the commit is external.
    public func hasChange(forKey key: String, inCollection collection: String) -> Bool {
        if isExternal || clearedAllCollections { return true }
        return keys.sets.contains(key, inCollection: collection)
    }

    /// Whether this commit may have changed anything in `collection`.
    public func hasChange(inCollection collection: String) -> Bool {
        if isExternal || clearedAllCollections { return true }
        let sets = keys.sets
        return sets.clearedCollections.contains(collection) || sets.setKeys[collection] != nil
            || sets.removedKeys[collection] != nil
    }

    /// Every collection this commit touched by name (empty for external or clear-all commits,
    /// which touch every collection).
    public var changedCollections: Set<String> {
        let sets = keys.sets
        return sets.clearedCollections.union(sets.setKeys.keys).union(sets.removedKeys.keys)
    }

    /// The key sets at once, for callers that ask many questions of one changeset.
    var keySets: KeySets { keys.sets }

    /// Calls `key` for every key the changeset sets or removes and `cleared` for every
    /// collection it clears, without folding the transaction's log into sets: what the value
    /// cache needs to invalidate, at the cost of the changes themselves (a key written twice
    /// is visited twice).
    func visitChanges(key: (_ collection: String, _ key: String) -> Void, cleared: (String) -> Void) {
        keys.visit(key: key, cleared: cleared)
    }

    /// An upper bound of the keys ``visitChanges(key:cleared:)`` visits.
    var changeCount: Int { keys.changeCount }

    /// What the changeset's key sets and log cost in memory, roughly: what the commit log
    /// counts against ``Configuration/commitLogRetentionBytes``.
    var approximateBytes: Int { keys.approximateBytes }
}

/// The keys and collections a changeset names.
struct KeySets: Sendable, Hashable {
    var setKeys: [String: Set<String>] = [:]
    var removedKeys: [String: Set<String>] = [:]
    var clearedCollections: Set<String> = []

    func contains(_ key: String, inCollection collection: String) -> Bool {
        clearedCollections.contains(collection) || setKeys[collection]?.contains(key) == true
            || removedKeys[collection]?.contains(key) == true
    }
}

/// A changeset's key sets, folded from the writing transaction's log of operations the first
/// time anything asks, then kept; shared by every copy of the changeset.
///
/// Folding hashes every key into a set: for a transaction that writes 100,000 rows, about a
/// twentieth of the whole transaction. Done at commit, it delayed every bulk write even when
/// nothing would ever ask (the writer's cache empty, no bookmark or subscriber); done here,
/// the first reader that moves past the commit, or the first subscriber that looks, pays it
/// once for everyone.
final class ChangedKeys: Sendable {
    private enum Storage: Sendable {
        case log([ChangesetBuilder.Operation])
        case folded(KeySets)
    }

    private let storage: Mutex<Storage>
    /// Operations in the log (or keys in the sets), for sizing and for the cache's choice of
    /// how to invalidate.
    let changeCount: Int
    let approximateBytes: Int

    init(_ sets: KeySets) {
        storage = Mutex(.folded(sets))
        var count = sets.clearedCollections.count
        var bytes = 64
        for (collection, keys) in sets.setKeys.merging(sets.removedKeys, uniquingKeysWith: { $0.union($1) }) {
            count += keys.count
            bytes += collection.utf8.count + 64
            for key in keys { bytes += key.utf8.count + 32 }
        }
        changeCount = count
        approximateBytes = bytes
    }

    init(log: [ChangesetBuilder.Operation]) {
        storage = Mutex(.log(log))
        changeCount = log.count
        // An operation is a kind and two strings (16 bytes each, inline up to 15 UTF-8 bytes);
        // folding adds about as much again in sets.
        var bytes = 64
        for operation in log {
            bytes += 96 + Self.heapBytes(operation.key) + Self.heapBytes(operation.collection)
        }
        approximateBytes = bytes
    }

    private static func heapBytes(_ string: String) -> Int {
        let count = string.utf8.count
        return count > 15 ? 2 * (count + 32) : 0
    }

    func visit(key: (String, String) -> Void, cleared: (String) -> Void) {
        storage.withLock { storage in
            switch storage {
            case .log(let operations):
                for operation in operations {
                    if operation.kind == .clear {
                        cleared(operation.collection)
                    } else {
                        key(operation.collection, operation.key)
                    }
                }
            case .folded(let sets):
                for (collection, keys) in sets.setKeys { for name in keys { key(collection, name) } }
                for (collection, keys) in sets.removedKeys { for name in keys { key(collection, name) } }
                for collection in sets.clearedCollections { cleared(collection) }
            }
        }
    }

    var sets: KeySets {
        storage.withLock { storage in
            switch storage {
            case .folded(let sets): return sets
            case .log(let operations):
                let sets = ChangesetBuilder.fold(operations)
                storage = .folded(sets)
                return sets
            }
        }
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
///
/// Writes are appended to a log, which the changeset keeps and folds into its key sets once,
/// on first use (``ChangedKeys``), into sets sized in advance: a transaction that writes 100,000 rows then costs an append per row
/// instead of a hashed insert into a set that keeps growing (which cost a third of a bulk
/// insert's time). The index that tells which keys the transaction touched, for reads inside
/// it, is built from the log only when a read asks, and kept up to date from then on.
struct ChangesetBuilder {
    enum Kind: Sendable {
        case set
        case remove
        case clear
    }

    struct Operation: Sendable {
        let kind: Kind
        let collection: String
        /// Empty for `clear`.
        let key: String
    }

    private(set) var operations: [Operation] = []
    private(set) var clearedAllCollections = false
    /// The operations already folded into `touchedKeys` and `clearedCollections`.
    private var indexedCount = 0
    private var touchedKeys: Set<CacheKey> = []
    private var clearedCollections: Set<String> = []

    var isEmpty: Bool { operations.isEmpty && !clearedAllCollections }

    mutating func recordSet(_ key: String, in collection: String) {
        operations.append(Operation(kind: .set, collection: collection, key: key))
    }

    mutating func recordRemove(_ key: String, in collection: String) {
        operations.append(Operation(kind: .remove, collection: collection, key: key))
    }

    mutating func recordClear(_ collection: String) {
        operations.append(Operation(kind: .clear, collection: collection, key: ""))
    }

    mutating func recordClearAll() {
        self = ChangesetBuilder()
        clearedAllCollections = true
    }

    /// Whether the transaction wrote, removed or cleared `key` (so that the connection's cache,
    /// which holds values as of the transaction's start, must not answer for it).
    mutating func mayHaveChanged(_ key: CacheKey) -> Bool {
        if clearedAllCollections { return true }
        if indexedCount < operations.count {
            for operation in operations[indexedCount...] {
                if operation.kind == .clear {
                    clearedCollections.insert(operation.collection)
                } else {
                    touchedKeys.insert(CacheKey(collection: operation.collection, key: operation.key))
                }
            }
            indexedCount = operations.count
        }
        return clearedCollections.contains(key.collection) || touchedKeys.contains(key)
    }

    /// The changeset of this transaction; its key sets are folded from the log on first use.
    func build(
        commit: UInt64, connectionName: String, info: [String: String],
        extensionChanges: ExtensionChanges = ExtensionChanges()
    ) -> Changeset {
        Changeset(
            commits: commit...commit, keys: ChangedKeys(log: operations),
            clearedAllCollections: clearedAllCollections, connectionName: connectionName,
            processID: History.processID, date: Date(), info: info, isExternal: false,
            extensionChanges: extensionChanges)
    }

    /// Folds a log into key sets: the last operation on a key wins, and a cleared collection
    /// forgets the keys written before the clear.
    static func fold(_ operations: [Operation]) -> KeySets {
        if operations.count == 1, operations[0].kind == .set {
            // The most common transaction: one value set.
            return KeySets(setKeys: [operations[0].collection: [operations[0].key]])
        }
        var setKeys: [String: Set<String>] = [:]
        var removedKeys: [String: Set<String>] = [:]
        var clearedCollections: Set<String> = []
        var start = operations.startIndex
        // One run per stretch of consecutive operations on the same collection: its sets are
        // taken out of the dictionaries once and sized for the whole run.
        while start < operations.endIndex {
            let collection = operations[start].collection
            var end = start + 1
            while end < operations.endIndex, operations[end].collection == collection { end += 1 }
            var set = setKeys.removeValue(forKey: collection) ?? []
            var removed = removedKeys.removeValue(forKey: collection)
            set.reserveCapacity(set.count + (end - start))
            for operation in operations[start..<end] {
                switch operation.kind {
                case .set:
                    set.insert(operation.key)
                    if removed != nil { removeSameBytes(operation.key, from: &removed!) }
                case .remove:
                    if removed == nil { removed = [] }
                    removed?.insert(operation.key)
                    removeSameBytes(operation.key, from: &set)
                case .clear:
                    clearedCollections.insert(collection)
                    set = []
                    removed = nil
                }
            }
            if !set.isEmpty { setKeys[collection] = set }
            if let removed { removedKeys[collection] = removed }
            start = end
        }
        return KeySets(setKeys: setKeys, removedKeys: removedKeys, clearedCollections: clearedCollections)
    }

    /// Removes `key` from `keys` when `keys` holds it with the same UTF-8 bytes. A `Set<String>`
    /// finds `"é"` for `"e\u{301}"` (Swift's equality), which are two keys in the database: a
    /// commit that set one and removed the other must list the one as set and the other as
    /// removed. (Two such keys both set in one commit are one element of the set: see
    /// <doc:Guarantees>.)
    private static func removeSameBytes(_ key: String, from keys: inout Set<String>) {
        guard let index = keys.firstIndex(of: key), sameUTF8(keys[index], key) else { return }
        keys.remove(at: index)
    }
}
