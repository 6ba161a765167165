internal import Dispatch
internal import Foundation
internal import Synchronization

/// What a `Database` knows about its connections, its commits and its subscribers; guarded by
/// `Database.state`.
struct DatabaseState {
    /// The newest commit published to the commit log.
    var latestCommit: UInt64
    /// Changesets in commit order, contiguous, ending at `latestCommit` when not empty.
    var commitLog: [Changeset] = []
    /// Local commits registered just before their SQLite `COMMIT`; published once committed.
    var pending: [UInt64: Changeset] = [:]
    var connections: [Int: ConnectionRecord] = [:]
    var subscribers: [Int: ChangeSubscriber] = [:]
    var codecs: [String: any ValueCodec] = [:]
    var codecsFrozen = false
    var nextID = 1

    init(latestCommit: UInt64) { self.latestCommit = latestCommit }

    mutating func makeID() -> Int {
        defer { nextID += 1 }
        return nextID
    }
}

/// What the database knows about one connection's snapshot, for the commit log's retention and
/// for the checkpoint monitor.
struct ConnectionRecord: Sendable {
    let name: String
    /// The commit the connection's open read transaction (bookmark or ordinary) sees.
    var snapshot: UInt64?
    /// The commit of the connection's last transaction or bookmark.
    var lastSnapshot: UInt64 = 0
    var isBookmark = false
    /// When the current snapshot was taken.
    var since: ContinuousClock.Instant?
    /// The connection, so that the checkpointer can ask a bookmark to re-take its snapshot.
    weak var connection: Connection?
}

/// A receiver of published changesets.
enum ChangeSubscriber: Sendable {
    case stream(AsyncStream<Changeset>.Continuation)
    case observer(DispatchQueue, @Sendable (Changeset) -> Void)
}

extension Database {
    /// The commit counter of the snapshot that `header` identifies, when a transaction of this
    /// database read it (with no unsealed foreign write) or committed it.
    ///
    /// A transaction whose snapshot has this header can skip reading `snapshotdb_meta`. That
    /// read is the largest cost of starting a transaction after another connection committed:
    /// the metadata page is rewritten by every commit, and SQLite's WAL-index lookup of a page
    /// walks every frame of it in the WAL, so without this the cost grows with the WAL.
    func knownCommit(at header: WALIndexHeader) -> UInt64? {
        knownSnapshot.withLock { known in
            guard let known, known.header == header else { return nil }
            return known.commit
        }
    }

    /// Records that the snapshot `header` identifies has commit counter `commit` and no
    /// unsealed foreign write. The newest record wins; an older one only costs a later reader
    /// one read of the counter.
    func learnCommit(_ commit: UInt64, at header: WALIndexHeader) {
        knownSnapshot.withLock { $0 = (header, commit) }
    }

    /// Records a local commit about to be made, so that a reader who sees its counter before the
    /// writer publishes it still gets the exact changeset.
    func registerPending(_ changeset: Changeset) {
        state.withLock { $0.pending[changeset.commit] = changeset }
    }

    /// Forgets a pending commit whose SQLite `COMMIT` failed.
    func discardPending(_ commit: UInt64) {
        _ = state.withLock { $0.pending.removeValue(forKey: commit) }
    }

    /// Publishes every commit up to `commit`: registered local ones with their changesets, the
    /// others as external changesets (made by another process).
    ///
    /// Called by a writer after its `COMMIT`, and by any connection that observed a counter the
    /// log does not reach yet. Idempotent and ordered: all callers go through the state lock
    /// and publish strictly consecutive commit numbers.
    func observe(commit: UInt64) {
        let overflowed = state.withLock { publish(through: commit, in: &$0) }
        // Finishing runs the stream's termination handler, which takes the state lock.
        for continuation in overflowed { continuation.finish() }
    }

    /// ``observe(commit:)`` for the writer of `commit`, which also records it as the
    /// connection's last snapshot: one turn of the state lock after every commit.
    func publish(commit: UInt64, committedBy connection: Int) {
        let overflowed = state.withLock { state in
            if let index = state.connections.index(forKey: connection) {
                state.connections.values[index].lastSnapshot = commit
            }
            return publish(through: commit, in: &state)
        }
        for continuation in overflowed { continuation.finish() }
    }

    /// Appends every commit up to `commit` to the log and delivers it; returns the streams that
    /// overflowed, for the caller to finish once the state lock is released.
    private func publish(
        through commit: UInt64, in state: inout DatabaseState
    ) -> [AsyncStream<Changeset>.Continuation] {
        guard commit > state.latestCommit else { return [] }
        var overflowed: [AsyncStream<Changeset>.Continuation] = []
        for number in (state.latestCommit + 1)...commit {
            let changeset =
                state.pending.removeValue(forKey: number)
                ?? Changeset(commit: number, isExternal: true)
            state.commitLog.append(changeset)
            state.latestCommit = number
            overflowed += deliver(changeset, in: &state)
        }
        trimCommitLog(&state)
        publishedCommit.store(commit, ordering: .releasing)
        return overflowed
    }

    /// The changesets of the commits in `(after, through]`, in order, or `nil` when the log no
    /// longer holds all of them.
    func changesets(after: UInt64, through: UInt64) -> [Changeset]? {
        guard through > after else { return [] }
        observe(commit: through)
        return state.withLock { state in
            guard let first = state.commitLog.first, first.commit <= after + 1,
                state.latestCommit >= through
            else { return nil }
            let start = Int(after + 1 - first.commit)
            let end = Int(through - first.commit)
            return Array(state.commitLog[start...end])
        }
    }

    /// Hands `changeset` to every subscriber; returns the streams that overflowed, already
    /// unsubscribed, for the caller to finish once the state lock is released.
    private func deliver(
        _ changeset: Changeset, in state: inout DatabaseState
    ) -> [AsyncStream<Changeset>.Continuation] {
        var overflowed: [AsyncStream<Changeset>.Continuation] = []
        for (id, subscriber) in state.subscribers {
            switch subscriber {
            case .stream(let continuation):
                if case .dropped = continuation.yield(changeset) {
                    // The subscriber fell more than `changesBufferLimit` behind: end its stream
                    // rather than let it miss a commit silently.
                    state.subscribers[id] = nil
                    overflowed.append(continuation)
                }
            case .observer(let queue, let body):
                queue.async { body(changeset) }
            }
        }
        return overflowed
    }

    /// Drops changesets that no bookmark can ask for again, keeping at least the most recent
    /// `commitLogRetention` for idle connections' cache invalidation.
    private func trimCommitLog(_ state: inout DatabaseState) {
        let excess = state.commitLog.count - configuration.commitLogRetention
        // In batches of a quarter of the retention: removing from the front of an array moves
        // every element left, and doing that for one changeset per commit, once the log was
        // full, cost as much as the rest of the commit.
        let batch = max(1, configuration.commitLogRetention / 4)
        guard excess >= batch else { return }
        let oldestPinned =
            state.connections.values.compactMap { $0.isBookmark ? $0.snapshot : nil }.min()
            ?? state.latestCommit
        let first = state.commitLog[0].commit
        // Keep every changeset after the oldest bookmark: that bookmark will ask for them.
        let removable = oldestPinned >= first ? Int(oldestPinned - first + 1) : 0
        let count = min(excess, removable)
        if count >= batch { state.commitLog.removeFirst(count) }
    }

    /// How many changesets the commit log holds (for tests and the monitor).
    public var commitLogCount: Int { state.withLock { $0.commitLog.count } }

    func registerConnection(name: String) -> Int {
        state.withLock { state in
            let id = state.makeID()
            state.connections[id] = ConnectionRecord(name: name)
            return id
        }
    }

    func unregisterConnection(_ id: Int) {
        _ = state.withLock { $0.connections.removeValue(forKey: id) }
    }

    func updateConnection(_ id: Int, _ update: (inout ConnectionRecord) -> Void) {
        state.withLock { state in
            // In place: one lookup, and no copy of the record (whose weak reference costs
            // runtime calls to copy) on every transaction's begin and end.
            guard let index = state.connections.index(forKey: id) else { return }
            update(&state.connections.values[index])
        }
    }

    func connectionRecord(_ id: Int) -> ConnectionRecord? {
        state.withLock { $0.connections[id] }
    }
}
