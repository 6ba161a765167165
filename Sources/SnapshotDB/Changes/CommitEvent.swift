/// One commit, as everything that reacts to commits hears of it: built once, after SQLite's
/// `COMMIT` returned (or once a reader published commits it found), and handed once to the
/// database's ``CommitDispatcher``.
///
/// A commit of this process carries its changeset, what its extension writers hand on to the
/// next write transaction, where it ended in the WAL and the WAL-index header it left. Commits of
/// another process are found by whoever reads a counter the log does not reach yet (a reader's
/// `BEGIN`, a writer's `BEGIN IMMEDIATE`, the foreign-commit watcher) and arrive as the same
/// event, with the changesets their history rows gave and no WAL position (the reader reports
/// what it saw of the WAL separately, see ``Checkpointer/didSeeCommit(_:frames:)``).
struct CommitEvent {
    enum Origin {
        /// A read-write transaction of this process, on `writer`, with the operations it made
        /// in order (the changeset's keys are their summary).
        case transaction(
            writer: ConnectionCore, operations: [ChangesetBuilder.Operation], changeset: Changeset)
        /// This process numbered writes of a foreign client (``Writer``'s seal).
        case seal(Changeset)
        /// Commits of another process, with the changesets the commit log published for them, in
        /// order (one per commit, or per stretch of commits whose history was not there).
        case found([Changeset])
    }

    let origin: Origin
    /// The newest commit of the event.
    let commit: UInt64
    /// Where a commit of this process ended in the WAL (what `sqlite3_wal_hook` reported).
    var walFrames: WALCommitFrames?
    /// The WAL-index header a commit of this process left, when it was the next one after the
    /// header its transaction began on (no other client committed in between).
    var walHeader: WALIndexHeader?
    /// The WAL-index change counter of a commit of this process (writer turns tell this
    /// process's commits from others' by it).
    var walChange: UInt32?
    /// For a read-write transaction: the commit it started from, and the caches its extension
    /// writers leave for the next write transaction.
    var extensionCaches: (start: UInt64, written: [ExtensionCaches.Written])?

    /// A commit of this process (`origin` is a transaction or a seal) or commits found.
    init(_ origin: Origin, commit: UInt64) {
        self.origin = origin
        self.commit = commit
    }

    /// Whether this process made the commit.
    var isLocal: Bool {
        if case .found = origin { return false }
        return true
    }
}

/// What reacts to commits: told of each ``CommitEvent`` once, in the dispatcher's order, on the
/// thread that made or found the commit. A commit of this process is dispatched with the writer
/// lock held, so what a subscriber does with it is ordered with the next write transaction.
protocol CommitSubscriber: AnyObject, Sendable {
    func commitDidHappen(_ event: CommitEvent, in database: Database)
}

/// The one dispatcher of commits: the commit log publishes first (to bookmarks and `changes()`
/// subscribers, see ``Database/announce(_:)``), then each subscriber hears of the event, in this
/// order:
/// 1. ``KnownSnapshot``: the header a local commit left is known before the next transaction
///    begins;
/// 2. ``WriterTurns``: a local commit's change counter is this process's own;
/// 3. ``WritingConnection``: the writing connection's value cache moves to its commit;
/// 4. ``ExtensionCaches``: what the extension writers leave goes to the next write transaction
///    and to readers of the commit;
/// 5. ``Checkpointer``: the WAL's new end, and a checkpoint when one is due (it judges the WAL
///    against the newest commit, published by now);
/// 6. ``HistoryPurger``: a purge when one is due;
/// 7. ``CommitNotification`` (Darwin only): the other processes' watchers wake.
///
/// The subscribers are fixed at open, each a concrete type called directly (no existential per
/// call on the commit path). A commit of this process is announced here and nowhere else; so are
/// commits found from other processes, once each: the log's publication decides what is new,
/// and a reader that finds commits another thread published already makes no event.
final class CommitDispatcher: Sendable {
    private let knownSnapshot: KnownSnapshot
    private let writerTurns: WriterTurns
    private let writingConnection = WritingConnection()
    private let extensionCaches: ExtensionCaches
    private let checkpointer: Checkpointer
    private let historyPurger: HistoryPurger
    #if canImport(Darwin)
        private let notification = CommitNotification()
    #endif

    init(
        knownSnapshot: KnownSnapshot, writerTurns: WriterTurns, extensionCaches: ExtensionCaches,
        checkpointer: Checkpointer, historyPurger: HistoryPurger
    ) {
        self.knownSnapshot = knownSnapshot
        self.writerTurns = writerTurns
        self.extensionCaches = extensionCaches
        self.checkpointer = checkpointer
        self.historyPurger = historyPurger
    }

    /// Hands `event` to every subscriber, in order.
    func dispatch(_ event: CommitEvent, in database: Database) {
        database.debugCounters.count(.commitEventsDispatched)
        knownSnapshot.commitDidHappen(event, in: database)
        writerTurns.commitDidHappen(event, in: database)
        writingConnection.commitDidHappen(event, in: database)
        extensionCaches.commitDidHappen(event, in: database)
        checkpointer.commitDidHappen(event, in: database)
        historyPurger.commitDidHappen(event, in: database)
        #if canImport(Darwin)
            notification.commitDidHappen(event, in: database)
        #endif
    }
}
