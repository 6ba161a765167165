internal import Dispatch
internal import Foundation
internal import Logging
internal import SnapshotDBLocking

internal import struct Synchronization.Atomic

/// Runs the database's checkpoints on its own SQLite handle, off the committing threads, and
/// keeps the facts the checkpoint monitor reports.
///
/// SQLite's auto-checkpoint is off on every connection. Instead the ``Writer`` reports each
/// commit once, with its number and where it ended in the WAL (what `sqlite3_wal_hook` recorded
/// on the committing handle: ``didCommit(_:frames:)``); past
/// ``Configuration/checkpointThresholdPages`` a PASSIVE checkpoint is queued here. Requests are merged: at most one runs and at most one more is queued, however
/// many commits ask. When the PASSIVE checkpoint copied every frame and no snapshot is older
/// than the newest commit, the WAL is reset (RESTART, or TRUNCATE when the file outgrew the
/// journal size limit: see ``resetMode``) waiting at most a few milliseconds for the writer
/// lock and for readers, so a writer is never held up longer.
///
/// Lock order: the database's writer lock, then `state`, then the database's state. No lock is
/// held across SQLite I/O or while waiting for another queue: the checkpoint handle belongs to
/// `queue` and is used only there.
final class Checkpointer: Sendable {
    struct State {
        var database: WeakDatabase?
        var isQueued = false
        var isRunning = false
        var isClosed = false
        /// The WAL's size, progress, generation and commit end frames.
        var wal: WALProgress
        /// Whether the last checkpoint stopped short because snapshots pin the WAL.
        var isStalled = false
        /// Frames the last checkpoint could not copy that no local snapshot explains.
        var externallyPinnedFrames = 0
        var walBytesAtOpen: Int64 = 0
        /// How many bookmarks were taken again off the WAL (for tests).
        var reseatedBookmarks = 0
        /// Consecutive resets that found nothing pinning the WAL and still did not complete.
        var failedResets = 0
        var monitor = MonitorState()
        var subscribers = Subscribers<CheckpointEvent>(finishesOverflowingStreams: false)

        /// Whether a commit taken in with `outcome` calls for a checkpoint: one is due, or the
        /// WAL restarted while the monitor waits to announce its recovery.
        func wantsCheckpoint(after outcome: WALProgress.CommitOutcome) -> Bool {
            let monitorWaits = monitor.announcedStall || monitor.lastWarning != nil
            return outcome.checkpointDue || (outcome.restarted && monitorWaits)
        }
    }

    /// What the monitor told its listeners, for throttling and for the all-clear.
    struct MonitorState {
        /// A stalled event was sent and no recovered event since.
        var announcedStall = false
        /// The last warning logged, while the WAL has not recovered since.
        var lastWarning: (bytes: Int64, at: ContinuousClock.Instant)?
        /// Whether the previous checkpoint stopped short too.
        var wasStalled = false
    }

    /// How long a WAL reset waits for the database's writer lock and, through SQLite's busy
    /// handler, for readers and writers of other processes.
    static let resetWait: Duration = .milliseconds(5)

    private static let queueKey = DispatchSpecificKey<ObjectIdentifier>()

    let queue = DispatchQueue(label: "snapshotdb.checkpoint")
    /// Entered for every queued automatic checkpoint (delayed retries included), left when it
    /// ran: the barrier of ``waitForIdle()``, and what a writer that outran the checkpoints
    /// waits for.
    private let pending = DispatchGroup()
    let state: Mutex<State>
    /// A commit seen in a snapshot made a checkpoint due; it is queued once published.
    private let dueOncePublished = Atomic<Bool>(false)
    /// Whether the WAL was past the back-pressure limit when a commit last recorded it (see
    /// ``waitIfWritersOutrunCheckpoints()``): until it is, a write transaction takes no lock
    /// here. A reset leaves it set until the next commit records the WAL again: one lock more.
    private let walPastBackPressure = Atomic<Bool>(false)
    /// The checkpoint handle: the database's setup handle, used only on `queue`.
    let checkpointHandle: QueueConfinedHandle
    let walGeneration: WALGenerationReader
    let configuration: Configuration
    /// The external replicator that resets the WAL (``Configuration/Checkpointing/external(replicator:)``),
    /// or `nil` while this checkpointer does; set once, at open or when Litestream is found.
    private let replicatorName: Mutex<String?>
    var replicator: String? {
        // Most files have none: no lock for them, in every write transaction.
        guard hasReplicator.load(ordering: .acquiring) else { return nil }
        return replicatorName.withLock { $0 }
    }
    /// Whether ``replicator`` is set (it is only ever set, never cleared).
    private let hasReplicator: Atomic<Bool>
    /// Who keeps the WAL, as in force: the mode whose decisions the code that differs by it asks
    /// (``Configuration/Checkpointing/resetsWAL`` and the others).
    var checkpointing: Configuration.Checkpointing {
        replicator.map { .external(replicator: $0) } ?? .automatic
    }
    let path: String
    /// Whether the database has a `-wal` of its own beside `path` (not a read replica, whose
    /// `path` names no file).
    let hasWAL: Bool
    /// Whether this process may checkpoint the WAL at all: not when the database was opened
    /// with ``Configuration/readOnly`` (no checkpoint is queued, and the close runs none).
    let checkpoints: Bool
    let pageSize: Int
    let metrics: CheckpointMetrics
    let logger: Logger

    init(
        path: String, configuration: Configuration, pageSize: Int, handle: sending SQLiteHandle,
        replicator: String? = nil, hasWAL: Bool = true, checkpoints: Bool = true
    ) {
        self.checkpoints = checkpoints
        self.replicatorName = Mutex(replicator)
        self.hasReplicator = Atomic(replicator != nil)
        self.path = path
        self.hasWAL = hasWAL
        self.configuration = configuration
        self.pageSize = pageSize
        self.state = Mutex(State(wal: WALProgress(threshold: configuration.checkpointThresholdPages)))
        handle.recordCommitFrames()
        self.checkpointHandle = QueueConfinedHandle(handle, queue: queue)
        self.walGeneration = WALGenerationReader(walPath: path + "-wal")
        self.metrics = CheckpointMetrics(
            label: configuration.metricsLabel ?? path, factory: configuration.metricsFactory)
        var logger = configuration.checkpointLogger
        // Metadata keys are snake_case throughout (`snapshotdb_path`, `wal_bytes`, ...).
        logger[metadataKey: "snapshotdb_path"] = .string(path)
        self.logger = logger
        queue.setSpecific(key: Self.queueKey, value: ObjectIdentifier(self))
    }

    /// Leaves the WAL to Litestream from now on, if this file is replicated by it (its
    /// `_litestream_seq` table appeared since the open) and the configuration lets SnapshotDB
    /// choose; returns whether the WAL is left to a replicator. Runs on the queue, before a
    /// reset: a Litestream started after the open is recognized before anything resets the WAL.
    func leavesWALToReplicator() -> Bool {
        if !checkpointing.resetsWAL { return true }
        guard configuration.checkpointing == .automatic else { return false }
        let found = checkpointHandle.use(on: queue) { handle -> Bool in
            do {
                return try handle?.int64(Self.litestreamQuery) == 1
            } catch {
                // Asked again at the next automatic run; meanwhile Litestream's read lock (if it
                // is there) keeps the passes from completing, so no reset follows.
                logger.debug(
                    "could not look for Litestream's table (\(error)): taken as not replicated until the next look"
                )
                return false
            }
        }
        guard found else { return false }
        replicatorName.withLock { $0 = "litestream" }
        hasReplicator.store(true, ordering: .releasing)
        announceLitestream()
        return true
    }

    /// Whether a file is replicated by Litestream: its own table is there.
    static let litestreamQuery =
        "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = '_litestream_seq'"

    /// The one log line that says the WAL is left to Litestream.
    ///
    /// What SnapshotDB sees is Litestream's tables, not Litestream: a copy restored from a
    /// replica carries them too, with nothing replicating it. The line says what is known, and
    /// how to take the WAL back.
    func announceLitestream() {
        logger.notice(
            """
            \(path) carries Litestream's tables (_litestream_seq is here): the WAL is left to Litestream; \
            SnapshotDB runs PASSIVE checkpoints only and never resets the WAL. If nothing replicates the file \
            (a restored copy), drop _litestream_seq and _litestream_lock to let SnapshotDB reset it
            """, metadata: ["replicator": "litestream"])
    }

    var database: WeakDatabase? {
        get { state.withLock { $0.database } }
        set { state.withLock { $0.database = newValue } }
    }

    /// The bytes of one WAL frame: a page and its 24-byte frame header.
    var frameBytes: Int64 { Int64(pageSize) + 24 }

    /// The bytes a WAL of `frames` frames uses, with its 32-byte header.
    func walBytes(frames: Int) -> Int64 {
        frames > 0 ? 32 + Int64(frames) * frameBytes : 0
    }

    /// The WAL bytes in use as this process last saw them.
    var knownWALBytes: Int64 { walBytes(frames: state.withLock { $0.wal.walFrames }) }

    var isOnQueue: Bool { DispatchQueue.getSpecific(key: Self.queueKey) == ObjectIdentifier(self) }

    // MARK: The commit path

    /// A commit of this process, inside the writer lock, once the commit is durable (through
    /// its ``CommitEvent``, and for a `VACUUM`): `frames` says where it ended in the WAL (what
    /// `sqlite3_wal_hook` reported on the committing handle). Queues a checkpoint when one is due.
    func didCommit(_ commit: UInt64, frames: WALCommitFrames?) {
        var frames = frames
        // The WAL-index header was being rewritten: read the salts from the file instead.
        if frames != nil, frames?.generation == nil { frames?.generation = walGeneration.read() }
        let shouldRequest = state.withLock { state in
            // Two statements: `state.wantsCheckpoint(after: state.wal.recordCommit(…))` loads
            // `state` for the call before the argument mutates it, and that copy made the frame
            // map copy all its entries at every commit (one per commit since the last reset).
            let outcome = state.wal.recordCommit(commit, frames: frames)
            noteBackPressure(walFrames: state.wal.walFrames)
            return state.wantsCheckpoint(after: outcome)
        }
        if let frames { metrics.recordWALBytes(walBytes(frames: frames.endFrame)) }
        if shouldRequest { requestCheckpoint() }
    }

    /// Called when a transaction of this process read the commit counter of its snapshot,
    /// `commit`, whose WAL-index header says where it ends in the WAL: how the commits of other
    /// processes reach the monitor. A process whose own writers wait while others write (or
    /// that only reads) still sees its bookmarks' pins grow, and checkpoints when the WAL
    /// passes the threshold, which is when the monitor warns.
    ///
    /// A checkpoint this makes due is queued when the commit is published (by the checkpointer's
    /// word of the next ``CommitEvent``, ``commitDidHappen(_:in:)``): the monitor must not judge the bookmarks against an older newest
    /// commit (a bookmark at the last published commit would seem to lag behind nothing).
    ///
    /// `publishedThrough` reads the newest commit published: when it reaches `commit` already
    /// (another thread published it, and its event may have come before this), the checkpoint
    /// is queued at once.
    func didSeeCommit(_ commit: UInt64, frames: WALCommitFrames, publishedThrough: () -> UInt64) {
        let shouldRequest = state.withLock { state in
            let outcome = state.wal.recordSnapshot(commit, frames: frames)  // (see `didCommit`)
            noteBackPressure(walFrames: state.wal.walFrames)
            return state.wantsCheckpoint(after: outcome)
        }
        guard shouldRequest else { return }
        // Flag first, then look: either the event that publishes `commit` sees the flag, or this
        // sees its publication (both sides sequentially consistent).
        dueOncePublished.store(true, ordering: .sequentiallyConsistent)
        if publishedThrough() >= commit { queueCheckpointDueOncePublished() }
    }

    /// Queues the checkpoint a commit seen in a snapshot made due (see
    /// ``didSeeCommit(_:frames:publishedThrough:)``), once commits were published.
    private func queueCheckpointDueOncePublished() {
        guard dueOncePublished.load(ordering: .sequentiallyConsistent),
            dueOncePublished.exchange(false, ordering: .sequentiallyConsistent)
        else { return }
        requestCheckpoint()
    }

    /// Called when a connection ends or advances a snapshot (or closes with a bookmark): if
    /// that snapshot may have pinned a large WAL, a checkpoint is queued to reclaim it.
    func snapshotReleased(commit: UInt64, wasBookmark: Bool) {
        let threshold = configuration.checkpointThresholdPages
        let shouldRequest = state.withLock { state in
            state.wal.walFrames >= threshold && (wasBookmark || commit < state.wal.lastLocalCommit)
        }
        if shouldRequest { requestCheckpoint() }
    }

    // MARK: Scheduling

    /// Queues one automatic checkpoint unless one is already queued.
    func requestCheckpoint(after delay: Duration? = nil) {
        guard checkpoints else { return }
        let shouldQueue = state.withLock { state in
            guard !state.isQueued, !state.isClosed else { return false }
            state.isQueued = true
            return true
        }
        guard shouldQueue else { return }
        pending.enter()
        let work: @Sendable () -> Void = { [weak self, pending] in
            defer { pending.leave() }
            self?.runQueued()
        }
        if let delay {
            queue.asyncAfter(deadline: .now() + delay.dispatchInterval, execute: work)
        } else {
            queue.async(execute: work)
        }
    }

    /// How far, in thresholds, writers may run ahead of a checkpoint in progress before they
    /// wait for it.
    static let backPressureThresholds = 4

    /// Called before every read-write transaction: when the WAL is past four checkpoint
    /// thresholds, not because snapshots pin it but because writers outran the checkpoint in
    /// progress, waits for that checkpoint (at most a second), as SQLite's own auto-checkpoint
    /// would make the committing thread do. Keeps the WAL bounded under a writer that commits
    /// as fast as it can.
    func waitIfWritersOutrunCheckpoints() {
        // Below the limit as last recorded: no lock (the WAL only grows by the commits that
        // record it).
        guard walPastBackPressure.load(ordering: .relaxed) else { return }
        let limit = backPressureLimit
        let behind = state.withLock { state in
            // A stall announced by the monitor has a culprit: writers are not held back for it
            // (that is the hard limit's business). A brief stall (a reader that began on the
            // database file alone blocks one checkpoint) does not lift the back-pressure.
            (state.isQueued || state.isRunning) && !state.monitor.announcedStall
                && state.wal.walFrames >= limit
        }
        guard behind, !isOnQueue else { return }
        _ = pending.wait(timeout: .now() + .seconds(1))
    }

    /// The WAL frames past which writers may wait for a checkpoint in progress.
    private var backPressureLimit: Int {
        max(1, configuration.checkpointThresholdPages).saturatingMultiplied(by: Self.backPressureThresholds)
    }

    /// Records, for ``waitIfWritersOutrunCheckpoints()``, whether the WAL is past the
    /// back-pressure limit; called with `state` locked wherever the WAL grows.
    private func noteBackPressure(walFrames: Int) {
        walPastBackPressure.store(walFrames >= backPressureLimit, ordering: .relaxed)
    }

    /// Waits until no automatic checkpoint is queued or running, including the retries they
    /// schedule (for tests), and until any explicit checkpoint in progress has finished.
    func waitForIdle() {
        guard !isOnQueue else { return }
        pending.wait()
        queue.sync {}
    }

    private func runQueued() {
        let database = state.withLock { state -> Database? in
            state.isQueued = false
            state.isRunning = true
            return state.isClosed ? nil : state.database?.database
        }
        defer { state.withLock { $0.isRunning = false } }
        // If this is the last reference, the database is released here, on the queue; `close`
        // knows not to wait for the queue then.
        guard let database else { return }
        runAutomatic(database)
    }

    /// Finishes the event streams and closes the checkpoint handle after any queued checkpoint.
    func close() {
        let streams = state.withLock { state in
            state.isClosed = true
            return state.subscribers.removeAll()
        }
        for continuation in streams { continuation.finish() }
        if isOnQueue {
            checkpointHandle.close(on: queue)
        } else {
            queue.sync { checkpointHandle.close(on: queue) }
        }
        walGeneration.closeDescriptor()
    }

    // MARK: Helpers

    /// Runs `body` on the checkpoint queue with the checkpoint handle (`nil` once closed).
    func withCheckpointHandle<T>(_ body: (SQLiteHandle?) -> T) -> T {
        checkpointHandle.use(on: queue, body)
    }

    /// The size of the file at `path`, or 0 when it does not exist.
    static func fileSize(_ path: String) -> Int64 {
        var info = stat()
        guard stat(path, &info) == 0 else { return 0 }
        return Int64(info.st_size)
    }
}

/// The checkpoint handle, confined to the checkpoint queue: every use runs there, so no lock
/// is held across its SQLite I/O (a `Mutex` around it was held across checkpoints, and across
/// the wait for bookmarks' connections during a WAL reset).
///
/// `@unchecked Sendable`: `handle` is only read or written inside ``use(on:_:)`` and
/// ``close(on:)``, which run on the queue (checked by `dispatchPrecondition`), one at a time.
final class QueueConfinedHandle: @unchecked Sendable {
    private var handle: SQLiteHandle?
    /// Set on the queue, so that a use can tell whether it already runs there.
    private let onQueueKey = DispatchSpecificKey<Bool>()

    init(_ handle: sending SQLiteHandle, queue: DispatchQueue) {
        self.handle = handle
        queue.setSpecific(key: onQueueKey, value: true)
    }

    /// Runs `body` with the handle on `queue`: directly when already on it, else `queue.sync`.
    func use<T, E: Error>(on queue: DispatchQueue, _ body: (SQLiteHandle?) throws(E) -> T) throws(E) -> T {
        guard DispatchQueue.getSpecific(key: onQueueKey) == true else {
            let result: Result<T, E> = queue.sync { Result { () throws(E) -> T in try body(handle) } }
            return try result.get()
        }
        return try body(handle)
    }

    /// Closes the handle; call on `queue`.
    func close(on queue: DispatchQueue) {
        dispatchPrecondition(condition: .onQueue(queue))
        handle = nil
    }
}

extension Checkpointer: CommitSubscriber {
    /// The checkpointer's one word of each commit: a commit of this process records where the
    /// WAL now ends and queues a checkpoint when one is due (``didCommit(_:frames:)``); for
    /// either kind, a checkpoint that a reader's look at a snapshot made due is queued now that
    /// its commits are published.
    func commitDidHappen(_ event: CommitEvent, in database: Database) {
        database.debugCounters.count(.checkpointerToldOfCommits)
        if event.isLocal { didCommit(event.commit, frames: event.walFrames) }
        queueCheckpointDueOncePublished()
    }
}
