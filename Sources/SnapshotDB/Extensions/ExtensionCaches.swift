internal import SnapshotDBLocking

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
///
/// Beside them, what readers share: per extension, the state of one commit that any reader of
/// exactly that commit may use (a view's in-memory layout). The writer publishes the state of
/// each commit it makes; a reader that had to load the state of a newer commit than the one
/// published offers it. Stamps are the file's commit numbers, which only grow, so a stamp never
/// names two states.
final class ExtensionCaches: Sendable {
    /// A cache object, handed from one write transaction to the next under the writer lock.
    private struct Entry: @unchecked Sendable {
        var commit: UInt64
        var cache: AnyObject
    }

    /// The writers' caches (`kept`), and the states readers share (`shared`): one lock for
    /// both, so that a commit hands both on at once.
    private struct State {
        var kept: [String: Entry] = [:]
        var shared: [String: Entry] = [:]
    }

    private let state = Mutex(State())

    /// The state of `name` published for `commit`, if that is the commit it describes.
    func published(_ name: String, at commit: UInt64) -> AnyObject? {
        state.withLock { state in
            guard let entry = state.shared[name], entry.commit == commit else { return nil }
            return entry.cache
        }
    }

    /// A reader loaded the state of `name` at `commit`: kept unless a newer one is published.
    func offer(_ name: String, at commit: UInt64, _ published: AnyObject) {
        state.withLock { state in
            if let entry = state.shared[name], entry.commit >= commit { return }
            state.shared[name] = Entry(commit: commit, cache: published)
        }
    }

    /// Drops everything kept for `name` (its tables were dropped or rebuilt outside a commit's
    /// bookkeeping).
    func forget(_ name: String) {
        state.withLock { state in
            state.kept.removeValue(forKey: name)
            state.shared.removeValue(forKey: name)
        }
    }

    /// Removes the entry of `name` and returns its cache when it describes `commit`.
    func take(_ name: String, at commit: UInt64) -> AnyObject? {
        let entry = state.withLock { $0.kept.removeValue(forKey: name) }
        guard let entry, entry.commit == commit else { return nil }
        return entry.cache
    }

    /// An extension a write transaction wrote to (or dropped), and the caches its writer left:
    /// `nil` for none (a dropped or rebuilt extension leaves none).
    struct Written {
        var name: String
        var kept: AnyObject?
        var published: AnyObject?
    }

    /// A write transaction that started from `start` made `commit`: stores the caches of the
    /// extensions it wrote to, and restamps the entries of the others (their tables are as they
    /// were).
    func didCommit(_ commit: UInt64, from start: UInt64, written: [Written]) {
        func apply(_ entries: inout [String: Entry], _ cache: (Written) -> AnyObject?) {
            // Through indices, changing values in place: a `for` over the dictionary would hold
            // a copy of it, and the first change would copy it whole.
            var index = entries.startIndex
            while index != entries.endIndex {
                if entries.values[index].commit == start {
                    let name = entries.keys[index]
                    if !written.contains(where: { $0.name == name }) { entries.values[index].commit = commit }
                }
                entries.formIndex(after: &index)
            }
            for extensionWritten in written {
                entries[extensionWritten.name] = cache(extensionWritten).map {
                    Entry(commit: commit, cache: $0)
                }
            }
        }
        state.withLock { state in
            apply(&state.kept, \.kept)
            apply(&state.shared, \.published)
        }
    }
}

extension ExtensionCaches: CommitSubscriber {
    /// The extensions' post-commit work: what a read-write transaction's extension writers left
    /// is handed on to the next write transaction and to readers of the new commit.
    func commitDidHappen(_ event: CommitEvent, in database: Database) {
        guard let caches = event.extensionCaches else { return }
        didCommit(event.commit, from: caches.start, written: caches.written)
    }
}
