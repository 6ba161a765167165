internal import Dispatch
internal import Foundation
internal import SnapshotDBLocking

internal import struct Synchronization.Atomic

/// What a `Database` knows about its commits, its connections and its subscribers; guarded by
/// `Database.state`.
/// The values of `Database.oldestPinCache` that are not a commit number.
enum OldestPin {
    /// Unknown: the next trim scans the connections.
    static let invalid = UInt64.max
    /// A trim is scanning; a pin that moves meanwhile stores `invalid`.
    static let scanning = UInt64.max - 1
    /// No connection pins the log.
    static let noPins = UInt64.max - 2
}

struct DatabaseState {
    /// The newest commit published to the commit log.
    var latestCommit: UInt64
    /// Changesets in commit order, their ranges contiguous, ending at `latestCommit` when not
    /// empty.
    var commitLog: [Changeset] = []
    /// The sum of the log's ``Changeset/approximateBytes``.
    var commitLogBytes = 0
    /// The local commit registered just before its SQLite `COMMIT`, until it is published.
    /// There is at most one: commits of this process are made one at a time by the ``Writer``.
    var pending: Changeset?
    /// The history token of the pending commit's row.
    var pendingToken: UInt64?
    /// The newest published commit and the token of its history row, when known: a snapshot
    /// whose row under that number has another token (or none) is another history (older
    /// contents were put back, and other commits made since), whose rows must not be taken
    /// for the commits this process missed.
    var latestToken: (commit: UInt64, token: UInt64)?
    /// Every connection's record, by id (see ``ConnectionRecord``).
    var connections: [Int: ConnectionRecord] = [:]
    var subscribers = Subscribers<Changeset>(finishesOverflowingStreams: true)
    var codecs: [String: any ValueCodec] = [:]
    var codecsFrozen = false
    /// The registered extensions, by name (see ``Database/register(_:)``).
    var extensions: [String: any ExtensionDefinition] = [:]

    init(latestCommit: UInt64, latestToken: UInt64? = nil) {
        self.latestCommit = latestCommit
        self.latestToken = latestToken.map { (latestCommit, $0) }
    }
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
    func registerPending(_ changeset: Changeset, token: UInt64) {
        state.withLock { state in
            state.pending = changeset
            state.pendingToken = token
        }
    }

    /// Forgets the pending commit whose SQLite `COMMIT` failed.
    func discardPending() {
        state.withLock { $0.pending = nil }
    }

    /// Publishes every commit up to `commit`: the pending local one with its changeset, the
    /// others with the changesets their history rows hold when `handle` (in a transaction whose
    /// snapshot reaches `commit`) is given, and as one external changeset per stretch of numbers
    /// whose history is not there (purged, or no handle to read it).
    ///
    /// Called by the writer after its `COMMIT`, and by any connection that observed a counter
    /// the log does not reach yet. Idempotent and ordered: all callers go through the state
    /// lock. Without a handle it costs the same for a jump of one commit or of a million; with
    /// one, it reads the history rows it publishes (and never more than
    /// ``Configuration/commitLogRetention`` of them: older ones would be trimmed at once).
    func publishCommits(through commit: UInt64, reading handle: SQLiteHandle? = nil) {
        let published = publishedCommit.load(ordering: .acquiring)
        guard commit > published else { return }
        var loaded: [History.Entry] = []
        if let handle, !isAnotherHistory(handle, published: published) {
            // A damaged row (written by a foreign client) is published as external: a reader
            // must never stop at it. `ReadTransaction.changes(after:)` reports it as `corrupt`.
            let from = max(published, commit - min(commit, UInt64(configuration.commitLogRetention)))
            loaded = (try? History.entries(after: from, through: commit, on: handle, path: path)) ?? []
        }
        let overflowed = state.withLock { publish(through: commit, loaded: loaded, in: &$0) }
        // Finishing runs the stream's termination handler, which takes the state lock.
        for continuation in overflowed { continuation.finish() }
    }

    /// Whether the snapshot on `handle` holds another history than the one this process
    /// published up to `published`: the row of that commit has another token, or none.
    private func isAnotherHistory(_ handle: SQLiteHandle, published: UInt64) -> Bool {
        guard let known = state.withLock({ $0.latestToken }), known.commit == published else { return false }
        return (try? History.token(of: published, on: handle)) != known.token
    }

    /// Appends every commit up to `commit` to the log and delivers it; returns the streams that
    /// overflowed, for the caller to finish once the state lock is released.
    private func publish(
        through commit: UInt64, loaded entries: [History.Entry], in state: inout DatabaseState
    ) -> [AsyncStream<Changeset>.Continuation] {
        guard commit > state.latestCommit else { return [] }
        // The common publish: this process's own commit, the next number, nothing loaded.
        if entries.isEmpty, let pending = state.pending, pending.commits == state.latestCommit + 1...commit {
            state.pending = nil
            state.latestToken = state.pendingToken.map { (commit, $0) }
            return appendToLog([pending], through: commit, in: &state)
        }
        let loaded = entries.compactMap(\.changeset)
        let tokens = Dictionary(entries.map { ($0.number, $0.token) }, uniquingKeysWith: { $1 })
        let now = Date()
        var published: [Changeset] = []
        var next = state.latestCommit + 1
        var known = loaded[...]
        var tokenOf = tokens
        if let pending = state.pending, pending.commit >= next, pending.commit <= commit {
            tokenOf[pending.commit] = state.pendingToken
            // The local commit's own changeset wins over its history row (the same content).
            known =
                loaded.isEmpty
                ? [pending][...]
                : (loaded.filter { $0.commit != pending.commit } + [pending]).sorted {
                    $0.commit < $1.commit
                }[...]
            state.pending = nil
        }
        // Unknown stretches next to each other are one external changeset: a jump of any size
        // costs one.
        func append(_ changeset: Changeset) {
            if changeset.isExternal, let last = published.last, last.isExternal {
                published[published.count - 1] = .external(
                    last.commits.lowerBound...changeset.commit, date: now)
            } else {
                published.append(changeset)
            }
        }
        for changeset in known where changeset.commit >= next && changeset.commit <= commit {
            if changeset.commits.lowerBound > next {
                append(.external(next...changeset.commits.lowerBound - 1, date: now))
            }
            append(changeset)
            next = changeset.commit + 1
        }
        if next <= commit { append(.external(next...commit, date: now)) }
        state.latestToken = tokenOf[commit].map { (commit, $0) }
        return appendToLog(published, through: commit, in: &state)
    }

    /// Appends `published` (the changesets through `commit`, in order) to the log, delivers
    /// them, and returns the streams that overflowed.
    private func appendToLog(
        _ published: [Changeset], through commit: UInt64, in state: inout DatabaseState
    ) -> [AsyncStream<Changeset>.Continuation] {
        var overflowed: [AsyncStream<Changeset>.Continuation] = []
        for changeset in published {
            state.commitLog.append(changeset)
            state.commitLogBytes += changeset.approximateBytes
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
        publishCommits(through: through)
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
    /// `commitLogRetention` (and at most about `commitLogRetentionBytes` of them) for idle
    /// connections' cache invalidation.
    ///
    /// Costs O(1) on most commits: the oldest pin is cached until a pin that could change it
    /// moves (see ``commitLogPinMoved(from:to:)``), so a laggard that pins the log makes no
    /// commit scan every connection.
    private func trimCommitLog(_ state: inout DatabaseState) {
        let retention = configuration.commitLogRetention
        let excess = state.commitLog.count - retention
        // In batches of a quarter of the retention: removing from the front of an array moves
        // every element left, and doing that for one changeset per commit, once the log was
        // full, cost as much as the rest of the commit.
        let batch = max(1, retention / 4)
        let overBytes = state.commitLogBytes > configuration.commitLogRetentionBytes
        guard excess >= batch || overBytes else { return }
        let oldestPinned = oldestCommitLogPin(state) ?? state.latestCommit
        // Keep every changeset after the oldest pin: that connection will ask for them.
        let removable = Self.firstIndex(in: state.commitLog, endingAfter: oldestPinned)
        var count = min(max(0, excess), removable)
        var removedBytes = state.commitLog[..<count].reduce(0) { $0 + $1.approximateBytes }
        while count < removable, count < state.commitLog.count - 1,
            state.commitLogBytes - removedBytes > configuration.commitLogRetentionBytes
        {
            removedBytes += state.commitLog[count].approximateBytes
            count += 1
        }
        guard count >= batch || (overBytes && count > 0) else { return }
        state.commitLog.removeFirst(count)
        state.commitLogBytes -= removedBytes
        // An array keeps its peak capacity: after a laggard released a long log, give the
        // memory back.
        if state.commitLog.capacity > 4 * max(64, state.commitLog.count) {
            var shrunk: [Changeset] = []
            shrunk.reserveCapacity(state.commitLog.count)
            shrunk.append(contentsOf: state.commitLog)
            state.commitLog = shrunk
        }
    }

    /// The oldest commit log pin of any connection, `nil` when none pins the log: from the cache
    /// when it is valid, else by scanning every connection's record.
    private func oldestCommitLogPin(_ state: DatabaseState) -> UInt64? {
        let cached = oldestPinCache.load(ordering: .acquiring)
        if cached < OldestPin.noPins { return cached }
        if cached == OldestPin.noPins { return nil }
        // Mark the scan, so that a pin moving meanwhile (which stores `invalid`) keeps this
        // scan's result out of the cache.
        let scanning = oldestPinCache.compareExchange(
            expected: OldestPin.invalid, desired: OldestPin.scanning, ordering: .acquiringAndReleasing
        ).exchanged
        let oldest = state.connections.values.compactMap { $0.current.commitLogPin }.min()
        if scanning {
            _ = oldestPinCache.compareExchange(
                expected: OldestPin.scanning, desired: oldest ?? OldestPin.noPins,
                ordering: .acquiringAndReleasing)
        }
        return oldest
    }

    /// Called when a connection's commit log pin moved from `from` to `to`: drops the cached
    /// oldest pin when the move can change it, and then trims the log, so that the memory a
    /// laggard pinned is given back as soon as it advances or ends, not at the next commit.
    func commitLogPinMoved(from: UInt64?, to: UInt64?) {
        let cached = oldestPinCache.load(ordering: .acquiring)
        let changesOldest: Bool
        switch cached {
        case OldestPin.invalid, OldestPin.scanning: changesOldest = true
        case OldestPin.noPins: changesOldest = to != nil
        default:
            // Only the oldest pin moving, or a new pin below it, changes the oldest.
            changesOldest = (from.map { $0 <= cached } ?? false) || (to.map { $0 < cached } ?? false)
        }
        guard changesOldest else { return }
        oldestPinCache.store(OldestPin.invalid, ordering: .releasing)
        // Only a pin that moved forward or went away can let the log shrink.
        guard let from, to.map({ $0 > from }) ?? true else { return }
        state.withLock { trimCommitLog(&$0) }
    }

    /// How many changesets the commit log holds (for tests and the monitor).
    public var commitLogCount: Int { state.withLock { $0.commitLog.count } }
}
