internal import Foundation
internal import SnapshotDBLocking

internal import struct Synchronization.Atomic

/// The commit log of one database: the changesets of recent commits in order, the newest commit
/// number, the local commit about to be made, and the `changes()` subscribers.
///
/// One type, one lock, owning the pending changeset, the history row, publishing and the
/// subscribers. A commit crosses the log twice: the ``Writer`` registers its changeset before
/// its SQLite `COMMIT` (``prepare(_:from:on:)``), so that a reader who sees the new counter first
/// takes the exact changeset from here; then the commit's ``CommitEvent`` is announced
/// (``Database/announce(_:)``), whose first step publishes it (``publish(through:loaded:)``):
/// appended and handed to every subscriber under the same lock, so a subscriber added before a
/// bookmark misses no commit after it. The ``CommitDispatcher`` then tells everything else
/// (`CommitEventTests` counts one event, one publishing step and one word to the checkpointer
/// per one-row commit). Readers take changesets from here to move their value caches
/// (``changesets(after:through:)``).
///
/// The log keeps what connections may still ask for: trimming (``trim(oldestPinned:)``) needs
/// the oldest commit any connection pins, which it asks the database's ``CommitLogPins`` for,
/// only when the log is past its retention (the pins' lock is taken inside this log's, and
/// never the other way round).
final class CommitLog: Sendable {
    struct State {
        /// The newest commit published.
        var latestCommit: UInt64
        /// Changesets in commit order, their ranges contiguous, ending at `latestCommit` when
        /// not empty.
        var entries: [Changeset] = []
        /// The sum of the entries' ``Changeset/approximateBytes``.
        var bytes = 0
        /// The local commit registered just before its SQLite `COMMIT`, until it is published.
        /// There is at most one: commits of this process are made one at a time.
        var pending: Changeset?
        /// The history token of the pending commit's row.
        var pendingToken: UInt64?
        /// The newest published commit and the token of its history row, when known (see
        /// ``Database/isAnotherHistory(_:published:)``).
        var latestToken: (commit: UInt64, token: UInt64)?
        /// The history token of each published commit whose row was read (a read replica's log
        /// only, see ``tokensKept``), for the commits the entries cover.
        var tokens: [UInt64: UInt64] = [:]
        /// The entries through this commit may belong to a history the file no longer holds (a
        /// read replica whose primary was put back to an older commit): no changeset after an
        /// earlier commit is answered from them (see ``markForeignHistory()``).
        var foreignThrough: UInt64 = 0
        /// Set by a mark: the next publish is one external changeset, which tells subscribers
        /// that anything may have changed (they heard the old history's commits).
        var announcesForeignHistory = false
        /// The commit whose streams were last ended for the mark (see ``streamsForReusedNumber(_:)``).
        var lastForeignWake: UInt64 = 0
        /// How many times the log was marked (see ``foreignHistoryMarks``).
        var foreignMarks = 0
        var subscribers = Subscribers<Changeset>(finishesOverflowingStreams: true)
        /// Observers of single extensions (live views), woken by the commits that change them.
        var extensionWakers = ExtensionWakers()
        /// Set when the database closed (``unsubscribeAll()``): no subscriber is taken after.
        var closedToSubscribers = false
    }

    private let state: Mutex<State>
    /// Purges the durable history past the retention bound, off the commit path.
    let purger = HistoryPurger()
    /// `latestCommit`, readable without the lock: stored after each commit is published, which
    /// is after SQLite committed it. A transaction that loads it before it begins sees a counter
    /// at least this high, unless older contents were put back from outside.
    let publishedCommit: Atomic<UInt64>
    /// At least this many of the most recent changesets are kept (``Configuration/commitLogRetention``).
    private let retention: Int
    /// And at most about this many bytes of them (``Configuration/commitLogRetentionBytes``).
    private let retentionBytes: Int

    /// Whether the log keeps each published commit's history token (``token(of:)``): on a read
    /// replica, where a snapshot behind the newest commit published is either a connection
    /// that has not caught up yet or the primary put back to an older commit, and only the
    /// token tells the two apart. (A primary needs no such map: a counter below the one it
    /// published is always contents put back, sealed as a new commit.)
    let tokensKept: Bool

    init(
        latestCommit: UInt64, latestToken: UInt64?, retention: Int, retentionBytes: Int,
        keepingTokens: Bool = false
    ) {
        var initial = State(latestCommit: latestCommit, latestToken: latestToken.map { (latestCommit, $0) })
        if keepingTokens, let latestToken { initial.tokens[latestCommit] = latestToken }
        state = Mutex(initial)
        publishedCommit = Atomic(latestCommit)
        self.retention = retention
        self.retentionBytes = retentionBytes
        self.tokensKept = keepingTokens
    }

    /// The history token of published commit `commit` (when ``tokensKept`` and its row was read).
    func token(of commit: UInt64) -> UInt64? {
        state.withLock { $0.tokens[commit] }
    }

    /// Marks every entry published so far as perhaps another history's than the file's: a read
    /// replica found its primary put back to an older commit. Where the histories part is not
    /// known (the file's rows before the point it went back to may be another history's too),
    /// so ``changesets(after:through:)`` answers `nil` for any span that starts before the
    /// newest commit published: a reader drops its cache and reports the span as external. The
    /// tokens are forgotten with them.
    ///
    /// A mark that is new (commits were published since the last one) also ends every
    /// ``Database/changes()`` stream, whose numbers would otherwise go on past the old
    /// history's with nothing for the commits the file now holds under them: a stream that
    /// ends is the documented call to subscribe again and advance. Observers get an external
    /// changeset numbered `commit`, the replica's commit now. Returns the streams to finish
    /// once no lock is held.
    func markForeignHistory(at commit: UInt64) -> [AsyncStream<Changeset>.Continuation] {
        state.withLock { state in
            let isNew = state.latestCommit > state.foreignThrough
            Self.markForeignHistory(in: &state)
            guard isNew else { return [] }
            state.lastForeignWake = commit
            state.extensionWakers.wakeAll()
            return state.subscribers.removeStreams(notifyingObservers: .external(commit...commit))
        }
    }

    /// A read replica's watcher saw a new commit `commit` of the file under a number the marked
    /// log published already (the put-back primary going on): nothing will be published for it,
    /// so the streams are ended again (once per commit), and observers get an external
    /// changeset numbered `commit`. Returns the streams to finish once no lock is held; none when
    /// the log is not marked through `commit`.
    func streamsForReusedNumber(_ commit: UInt64) -> [AsyncStream<Changeset>.Continuation] {
        state.withLock { state in
            guard commit <= state.foreignThrough, commit != state.lastForeignWake else { return [] }
            state.lastForeignWake = commit
            state.extensionWakers.wakeAll()
            return state.subscribers.removeStreams(notifyingObservers: .external(commit...commit))
        }
    }

    private static func markForeignHistory(in state: inout State) {
        // Counted when it marks entries not marked yet: every snapshot of the new history below
        // the old numbers marks again, and each count makes the connections open new handles.
        if state.latestCommit > state.foreignThrough { state.foreignMarks += 1 }
        state.foreignThrough = max(state.foreignThrough, state.latestCommit)
        state.tokens = [:]
        state.announcesForeignHistory = true
    }

    var latestCommit: UInt64 { publishedCommit.load(ordering: .acquiring) }

    var latestToken: (commit: UInt64, token: UInt64)? { state.withLock { $0.latestToken } }

    /// How many times a read replica's log was newly marked for another history (marks of
    /// entries already marked do not count), and whether the
    /// newest commit published lies within the marked entries: a replica's connections open
    /// their handles again after a mark, and take a handle behind the newest commit published
    /// for a stalled one only past the marked entries (see ``ConnectionCore``).
    var foreignHistoryMarks: (count: Int, coversLatest: Bool) {
        state.withLock { ($0.foreignMarks, $0.foreignThrough >= $0.latestCommit) }
    }

    /// How many changesets the log holds.
    var count: Int { state.withLock { $0.entries.count } }

    // MARK: Commits

    /// What a commit's history row records of it.
    enum Source {
        /// A read-write transaction of this process: its connection, and its operations in
        /// order (the changeset's keys are their summary).
        case transaction(connection: String?, operations: [ChangesetBuilder.Operation], clearedAll: Bool)
        /// Foreign writes sealed with the keys the triggers noted.
        case foreign(operations: [ChangesetBuilder.Operation])
        /// Foreign writes whose keys are unknown (a restore put older contents back).
        case unknown
    }

    /// The writer's commit about to be made, inside its SQLite transaction: writes its history
    /// row (which is the commit counter) and registers its changeset as pending, so that a
    /// reader who sees the new counter before the writer publishes it gets the exact changeset.
    func prepare(_ changeset: Changeset, from source: Source, on handle: SQLiteHandle) throws(DatabaseError) {
        let extensions = changeset.extensionChanges
        let row: History.Row
        switch source {
        case .transaction(let connection, let operations, let clearedAll):
            row = History.Row(
                number: changeset.commit, kind: .commit, date: changeset.date, connection: connection,
                info: changeset.info,
                changes: HistoryCoding.encode(
                    operations: operations, clearedAll: clearedAll, extensions: extensions))
        case .foreign(let operations):
            row = History.Row(
                number: changeset.commit, kind: .foreign, date: changeset.date, info: [:],
                changes: HistoryCoding.encode(
                    operations: operations, clearedAll: false, extensions: extensions))
        case .unknown:
            row = History.Row(number: changeset.commit, kind: .unknown, date: changeset.date, info: [:])
        }
        let token = try History.write(row, on: handle)
        registerPending(changeset, token: token)
    }

    /// Records a local commit about to be made (see ``prepare(_:from:on:)``).
    private func registerPending(_ changeset: Changeset, token: UInt64) {
        state.withLock { state in
            state.pending = changeset
            state.pendingToken = token
        }
    }

    /// Forgets the pending commit whose SQLite `COMMIT` failed.
    func discardPending() {
        state.withLock { $0.pending = nil }
    }

    /// What a publish did: the streams that overflowed (to finish once no lock is held: a
    /// stream's termination handler calls back in), and whether the log outgrew its retention.
    struct Published {
        /// The changesets appended of commits this process did not make (found), in order. This
        /// process's pending commit, which a reader may publish before its writer does, is not
        /// among them: its event is its writer's to dispatch.
        var found: [Changeset] = []
        var overflowed: [AsyncStream<Changeset>.Continuation] = []
        var needsTrim = false
        /// How many live-view observations the changesets woke (see ``ExtensionWakers``).
        var woken = 0
    }

    /// Appends every commit up to `commit` to the log and delivers it: the pending local one
    /// with its changeset, those of `entries` (history rows read in a snapshot that reaches
    /// `commit`) with theirs, and one external changeset per stretch of numbers with neither.
    /// Idempotent and ordered: a commit already published is not published again.
    func publish(through commit: UInt64, loaded entries: [History.Entry]) -> Published {
        state.withLock { state in
            guard commit > state.latestCommit else { return Published() }
            // The common publish: this process's own commit, the next number, nothing loaded.
            if entries.isEmpty, let pending = state.pending,
                pending.commits == state.latestCommit + 1...commit
            {
                state.pending = nil
                state.latestToken = state.pendingToken.map { (commit, $0) }
                return append([pending], through: commit, in: &state)
            }
            let pendingCommit = state.pending?.commit
            var entries = entries
            if tokensKept {
                // Rows read at or before the newest commit published (a replica's publish reads
                // from the row of the commit it last saw published): another token than the one
                // published under that number is another history. The log's entries are marked;
                // after any mark the new commits are published as one external changeset, which
                // tells subscribers (who heard the old history's commits) that anything may have
                // changed.
                let another = entries.contains { entry in
                    entry.number <= state.latestCommit
                        && state.tokens[entry.number].map { $0 != entry.token } == true
                }
                if another { Self.markForeignHistory(in: &state) }
                // Kept even when published as external: a later publish compares its rows with
                // them (a lagging connection may publish the old history's rows after a mark).
                for entry in entries where entry.number > state.latestCommit && entry.number <= commit {
                    state.tokens[entry.number] = entry.token
                }
                if state.announcesForeignHistory {
                    state.announcesForeignHistory = false
                    entries = []
                }
            }
            let (changesets, token) = Self.changesets(through: commit, loaded: entries, in: &state)
            state.latestToken = token.map { (commit, $0) }
            var published = append(changesets, through: commit, in: &state)
            let local = state.pending == nil ? pendingCommit : nil
            published.found = changesets.filter { $0.commit != local }
            return published
        }
    }

    /// The changesets that publish the commits after the log's newest through `commit`, and the
    /// history token of `commit`'s row when known; takes the pending commit when it is one.
    private static func changesets(
        through commit: UInt64, loaded entries: [History.Entry], in state: inout State
    ) -> ([Changeset], UInt64?) {
        let loaded = entries.compactMap(\.changeset)
        var tokenOf = Dictionary(entries.map { ($0.number, $0.token) }, uniquingKeysWith: { $1 })
        let now = Date()
        var published: [Changeset] = []
        var next = state.latestCommit + 1
        var known = loaded[...]
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
        return (published, tokenOf[commit])
    }

    /// Appends `published` (the changesets through `commit`, in order) and delivers them.
    private func append(_ published: [Changeset], through commit: UInt64, in state: inout State) -> Published
    {
        var result = Published()
        for changeset in published {
            state.entries.append(changeset)
            state.bytes += changeset.approximateBytes
            result.overflowed += state.subscribers.deliver(changeset)
            result.woken += state.extensionWakers.wake(for: changeset)
        }
        state.latestCommit = commit
        publishedCommit.store(commit, ordering: .sequentiallyConsistent)
        result.needsTrim = Self.excess(state, retention: retention, retentionBytes: retentionBytes)
        return result
    }

    // MARK: Reading

    /// The changesets of the commits in `(after, through]`, in order, or `nil` when the log no
    /// longer holds all of them. An external changeset that also covers commits at or before
    /// `after` is included whole (it says only that anything may have changed).
    func changesets(after: UInt64, through: UInt64) -> [Changeset]? {
        guard through > after else { return [] }
        return state.withLock { state in
            let log = state.entries
            guard let first = log.first, first.commits.lowerBound <= after + 1, state.latestCommit >= through
            else { return nil }
            if after < state.foreignThrough { return nil }
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

    // MARK: Trimming

    /// Whether the log holds a batch more than its retention, or more bytes than it may.
    private static func excess(_ state: State, retention: Int, retentionBytes: Int) -> Bool {
        state.entries.count - retention >= max(1, retention / 4) || state.bytes > retentionBytes
    }

    /// Drops changesets that no connection can ask for again (those up to `oldestPinned`, the
    /// oldest commit a connection pins, or the newest commit when none does), keeping at least
    /// the most recent ``retention`` (and at most about ``retentionBytes`` of them) for idle
    /// connections' cache invalidation.
    ///
    /// In batches of a quarter of the retention: removing from the front of an array moves every
    /// element left, and doing that for one changeset per commit, once the log was full, cost as
    /// much as the rest of the commit.
    func trim(oldestPinned: () -> UInt64?) {
        state.withLock { state in
            let excess = state.entries.count - retention
            let batch = max(1, retention / 4)
            let overBytes = state.bytes > retentionBytes
            guard excess >= batch || overBytes else { return }
            let oldestPinned = oldestPinned()
            // Keep every changeset after the oldest pin: that connection will ask for them.
            let removable = Self.firstIndex(
                in: state.entries, endingAfter: oldestPinned ?? state.latestCommit)
            var count = min(max(0, excess), removable)
            var removedBytes = state.entries[..<count].reduce(0) { $0 + $1.approximateBytes }
            while count < removable, count < state.entries.count - 1,
                state.bytes - removedBytes > retentionBytes
            {
                removedBytes += state.entries[count].approximateBytes
                count += 1
            }
            guard count >= batch || (overBytes && count > 0) else { return }
            if !state.tokens.isEmpty {
                let kept = count < state.entries.count ? state.entries[count].commits.lowerBound : .max
                state.tokens = state.tokens.filter { $0.key >= kept }
            }
            state.entries.removeFirst(count)
            state.bytes -= removedBytes
            // An array keeps its peak capacity: after a laggard released a long log, give the
            // memory back.
            if state.entries.capacity > 4 * max(64, state.entries.count) {
                var shrunk: [Changeset] = []
                shrunk.reserveCapacity(state.entries.count)
                shrunk.append(contentsOf: state.entries)
                state.entries = shrunk
            }
        }
    }

    // MARK: Subscribers

    /// Adds `subscriber`, which hears of every commit published after this call; `nil` once the
    /// database closed (its streams were finished already).
    func subscribe(_ subscriber: Subscribers<Changeset>.Subscriber) -> Int? {
        state.withLock { $0.closedToSubscribers ? nil : $0.subscribers.add(subscriber) }
    }

    /// Removes the subscriber `id`, and returns it.
    func unsubscribe(_ id: Int) -> Subscribers<Changeset>.Subscriber? {
        state.withLock { $0.subscribers.remove(id) }
    }

    /// Removes every subscriber and returns their streams, to finish once no lock is held.
    func unsubscribeAll() -> [AsyncStream<Changeset>.Continuation] {
        let (streams, wakers) = state.withLock { state in
            state.closedToSubscribers = true
            return (state.subscribers.removeAll(), state.extensionWakers.removeAll())
        }
        for waker in wakers { waker.finish() }
        return streams
    }

    /// Adds a wake-up for the commits that change extension `name` (see ``ExtensionWakers``);
    /// `nil` once the database closed.
    func addWaker(for name: String, _ continuation: AsyncStream<Void>.Continuation) -> Int? {
        state.withLock { $0.closedToSubscribers ? nil : $0.extensionWakers.add(name, continuation) }
    }

    /// Removes the wake-up `id` of `name`.
    func removeWaker(for name: String, _ id: Int) {
        let removed = state.withLock { $0.extensionWakers.remove(name, id) }
        removed?.finish()
    }
}
