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
        case transaction(writer: ConnectionCore, operations: [ChangesetBuilder.Operation])
        /// This process numbered writes of a foreign client (``Writer``'s seal).
        case seal
        /// Commits of another process, published by whoever found them.
        case found
    }

    let origin: Origin
    /// The changesets the commit log published for it, in order: one for a commit of this
    /// process; for commits found, one per commit or stretch of commits. (Set by the publishing
    /// step, which runs first.)
    var changesets: [Changeset]
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

    /// The newest commit of the event.
    var commit: UInt64 { changesets.last?.commit ?? 0 }

    init(origin: Origin, changesets: [Changeset]) {
        self.origin = origin
        self.changesets = changesets
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
/// subscribers), then each subscriber hears of the event, in the order they were given at open.
///
/// A commit of this process is announced here and nowhere else; so are commits found from other
/// processes, once each: the log's publication decides what is new, and a reader that finds
/// commits another thread published already makes no event.
final class CommitDispatcher: Sendable {
    private let subscribers: [any CommitSubscriber]

    init(_ subscribers: [any CommitSubscriber]) {
        self.subscribers = subscribers
    }

    /// Hands `event` to every subscriber, in order.
    func dispatch(_ event: CommitEvent, in database: Database) {
        database.debugCounters.count(.commitEventsDispatched)
        for subscriber in subscribers { subscriber.commitDidHappen(event, in: database) }
    }
}
