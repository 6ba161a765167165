internal import Dispatch
internal import Foundation
internal import Synchronization

/// What a `Database` knows about its commits, its connections and its subscribers; guarded by
/// `Database.state`.
struct DatabaseState {
    /// The newest commit published to the commit log.
    var latestCommit: UInt64
    /// Changesets in commit order, their ranges contiguous, ending at `latestCommit` when not
    /// empty.
    var commitLog: [Changeset] = []
    /// The local commit registered just before its SQLite `COMMIT`, until it is published.
    /// There is at most one: commits of this process are made one at a time by the ``Writer``.
    var pending: Changeset?
    /// Every connection's record, by id (see ``ConnectionRecord``).
    var connections: [Int: ConnectionRecord] = [:]
    var subscribers = Subscribers<Changeset>(finishesOverflowingStreams: true)
    var codecs: [String: any ValueCodec] = [:]
    var codecsFrozen = false
    var nextConnectionID = 1

    init(latestCommit: UInt64) { self.latestCommit = latestCommit }
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
        state.withLock { $0.pending = changeset }
    }

    /// Forgets the pending commit whose SQLite `COMMIT` failed.
    func discardPending() {
        state.withLock { $0.pending = nil }
    }

    /// Publishes every commit up to `commit`: the pending local one with its changeset, the
    /// others as one external changeset per stretch of numbers (made by another process).
    ///
    /// Called by the writer after its `COMMIT`, and by any connection that observed a counter
    /// the log does not reach yet. Idempotent and ordered: all callers go through the state
    /// lock. Costs the same for a jump of one commit or of a million.
    func observe(commit: UInt64) {
        guard commit > publishedCommit.load(ordering: .acquiring) else { return }
        let overflowed = state.withLock { publish(through: commit, in: &$0) }
        // Finishing runs the stream's termination handler, which takes the state lock.
        for continuation in overflowed { continuation.finish() }
    }

    /// Appends every commit up to `commit` to the log and delivers it; returns the streams that
    /// overflowed, for the caller to finish once the state lock is released.
    private func publish(
        through commit: UInt64, in state: inout DatabaseState
    ) -> [AsyncStream<Changeset>.Continuation] {
        guard commit > state.latestCommit else { return [] }
        let now = Date()
        var published: [Changeset] = []
        var next = state.latestCommit + 1
        if let pending = state.pending, pending.commit >= next, pending.commit <= commit {
            if pending.commit > next { published.append(.external(next...pending.commit - 1, date: now)) }
            published.append(pending.published(at: now))
            state.pending = nil
            next = pending.commit + 1
        }
        if next <= commit { published.append(.external(next...commit, date: now)) }
        var overflowed: [AsyncStream<Changeset>.Continuation] = []
        for changeset in published {
            state.commitLog.append(changeset)
            overflowed += state.subscribers.deliver(changeset)
        }
        state.latestCommit = commit
        trimCommitLog(&state)
        publishedCommit.store(commit, ordering: .releasing)
        return overflowed
    }

    /// The changesets of the commits in `(after, through]`, in order, or `nil` when the log no
    /// longer holds all of them. An external changeset that also covers commits at or before
    /// `after` is included whole (it says only that anything may have changed).
    func changesets(after: UInt64, through: UInt64) -> [Changeset]? {
        guard through > after else { return [] }
        observe(commit: through)
        return state.withLock { state in
            let log = state.commitLog
            guard let first = log.first, first.commits.lowerBound <= after + 1, state.latestCommit >= through
            else { return nil }
            let start = Self.firstIndex(in: log, endingAfter: after)
            let end = Self.firstIndex(in: log, endingAfter: through - 1)
            return Array(log[start...end])
        }
    }

    /// The index of the first changeset of `log` whose last commit is after `commit` (binary
    /// search: the log is ordered and its ranges do not overlap).
    private static func firstIndex(in log: [Changeset], endingAfter commit: UInt64) -> Int {
        var low = 0
        var high = log.count
        while low < high {
            let middle = (low + high) / 2
            if log[middle].commit <= commit { low = middle + 1 } else { high = middle }
        }
        return low
    }

    /// Drops changesets that no connection can ask for again, keeping at least the most recent
    /// `commitLogRetention` for idle connections' cache invalidation.
    private func trimCommitLog(_ state: inout DatabaseState) {
        let excess = state.commitLog.count - configuration.commitLogRetention
        // In batches of a quarter of the retention: removing from the front of an array moves
        // every element left, and doing that for one changeset per commit, once the log was
        // full, cost as much as the rest of the commit.
        let batch = max(1, configuration.commitLogRetention / 4)
        guard excess >= batch else { return }
        let oldestPinned =
            state.connections.values.compactMap { $0.current.commitLogPin }.min() ?? state.latestCommit
        // Keep every changeset after the oldest pin: that connection will ask for them.
        let removable = Self.firstIndex(in: state.commitLog, endingAfter: oldestPinned)
        let count = min(excess, removable)
        if count >= batch { state.commitLog.removeFirst(count) }
    }

    /// How many changesets the commit log holds (for tests and the monitor).
    public var commitLogCount: Int { state.withLock { $0.commitLog.count } }
}
