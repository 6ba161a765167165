internal import Synchronization

/// What extension writers keep in memory from one write transaction to the next (a view's
/// nodes and decoded values), each entry stamped with the commit it describes.
///
/// A writer takes its entry when a write transaction starting from exactly that commit makes
/// it, and gives it back stamped with the commit that transaction made. Any other commit in
/// between (another process's, a sealed foreign write, a rebuild, a transaction that rolled
/// back after taking it) leaves the stamp behind, and the entry is dropped: a cache is only
/// ever used on the state it was made from. Commits that did not touch an extension restamp
/// its entry, since its tables did not change.
///
/// Entries move between write transactions, which the writer lock serializes; the lock here
/// only keeps the Swift access checked.
final class ExtensionCaches: Sendable {
    /// A cache object, handed from one write transaction to the next under the writer lock.
    private struct Entry: @unchecked Sendable {
        var commit: UInt64
        var cache: AnyObject
    }

    private let entries = Mutex<[String: Entry]>([:])

    /// Removes the entry of `name` and returns its cache when it describes `commit`.
    func take(_ name: String, at commit: UInt64) -> AnyObject? {
        let entry = entries.withLock { $0.removeValue(forKey: name) }
        guard let entry, entry.commit == commit else { return nil }
        return entry.cache
    }

    /// A write transaction that started from `start` made `commit`: stores the caches its
    /// writers kept, and restamps the entries of extensions it did not write to (their tables
    /// are as they were).
    func didCommit(_ commit: UInt64, from start: UInt64, kept: [String: AnyObject], written: Set<String>) {
        entries.withLock { entries in
            for (name, entry) in entries where !written.contains(name) && entry.commit == start {
                entries[name]?.commit = commit
            }
            for name in written { entries[name] = nil }
            for (name, cache) in kept { entries[name] = Entry(commit: commit, cache: cache) }
        }
    }
}
