internal import Dispatch
internal import Foundation
internal import Logging
internal import Synchronization

/// Runs the database's checkpoints on its own SQLite handle, off the committing threads, and
/// keeps the facts the checkpoint monitor reports.
///
/// SQLite's auto-checkpoint is off on every connection. Instead every commit reports the WAL
/// size through `sqlite3_wal_hook` (``walDidGrow(pages:)``) and its commit number
/// (``didCommit(_:)``); past ``Configuration/checkpointThresholdPages`` a PASSIVE checkpoint is
/// queued here. Requests are merged: at most one runs and at most one more is queued, however
/// many commits ask. When the PASSIVE checkpoint copied every frame and no snapshot is older
/// than the newest commit, the WAL is reset (RESTART, or TRUNCATE when the file outgrew the
/// journal size limit: see ``resetMode``) waiting at most a few milliseconds for the writer
/// lock and for readers, so a writer is never held up longer.
///
/// Lock order: the database's writer lock, then `state`, then the database's state. `handle`
/// is only locked on `queue` (and once at open, before the database is shared).
final class Checkpointer: Sendable {
    struct State {
        var database: WeakDatabase?
        var isQueued = false
        var isRunning = false
        var isClosed = false
        /// Frames in the WAL (SQLite's `mxFrame`) as last seen by a commit or a checkpoint.
        var walFrames = 0
        /// Frames the last checkpoint of the current generation copied back (`nBackfill`).
        var checkpointedFrames = 0
        /// The WAL size, in frames, at which the next automatic checkpoint is due.
        var nextCheckpointFrames: Int
        /// The WAL header's generation, as last read by a commit; `nil` after a reset.
        var generation: UInt64?
        /// Incremented at every WAL reset or restart seen, so that a checkpoint result of an
        /// older generation is not mistaken for the current one.
        var generationCount = 0
        var restartPending = false
        /// The frame count reported by the hook of the commit being completed.
        var pendingEndFrame: Int?
        var frameMap = WALFrameMap()
        /// The newest commit made through this database's connections.
        var lastLocalCommit: UInt64 = 0
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
        var subscribers: [Int: AsyncStream<CheckpointEvent>.Continuation] = [:]
        var nextSubscriberID = 0
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
    /// The checkpoint handle: the database's setup handle, used only on `queue`.
    private let handle: Mutex<SQLiteHandle?>
    let walGeneration: WALGenerationReader
    let configuration: Configuration
    let path: String
    let pageSize: Int
    let metrics: CheckpointMetrics
    let logger: Logger

    init(path: String, configuration: Configuration, pageSize: Int, handle: sending SQLiteHandle) {
        self.path = path
        self.configuration = configuration
        self.pageSize = pageSize
        self.state = Mutex(State(nextCheckpointFrames: configuration.checkpointThresholdPages))
        self.handle = Mutex(handle)
        self.walGeneration = WALGenerationReader(walPath: path + "-wal")
        self.metrics = CheckpointMetrics(
            label: configuration.metricsLabel ?? path, factory: configuration.metricsFactory)
        var logger = configuration.checkpointLogger
        logger[metadataKey: "snapshotdb.path"] = .string(path)
        self.logger = logger
        queue.setSpecific(key: Self.queueKey, value: ObjectIdentifier(self))
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
    var knownWALBytes: Int64 { walBytes(frames: state.withLock { $0.walFrames }) }

    var isOnQueue: Bool { DispatchQueue.getSpecific(key: Self.queueKey) == ObjectIdentifier(self) }

    // MARK: The commit path

    /// Called by `sqlite3_wal_hook` on the committing thread, inside the writer lock, with the
    /// WAL's size in frames once the commit is in it (the commit's end frame) and the WAL's
    /// generation as the WAL-index header gives it (`nil`: read from the `-wal` file instead).
    func walDidGrow(pages: Int, generation fromIndex: UInt64? = nil) {
        let generation = fromIndex ?? walGeneration.read()
        let threshold = configuration.checkpointThresholdPages
        let shouldRequest = state.withLock { state in
            let restarted: Bool
            if let generation, let known = state.generation {
                restarted = generation != known
            } else {
                restarted = pages < state.walFrames
            }
            if restarted {
                state.generationCount += 1
                state.restartPending = true
                state.checkpointedFrames = 0
                state.nextCheckpointFrames = threshold
            }
            if let generation { state.generation = generation }
            state.walFrames = pages
            state.pendingEndFrame = pages
            let monitorWaits = state.monitor.announcedStall || state.monitor.lastWarning != nil
            return pages >= state.nextCheckpointFrames || (restarted && monitorWaits)
        }
        metrics.recordWALBytes(walBytes(frames: pages))
        if shouldRequest { requestCheckpoint() }
    }

    /// Called on the committing thread, inside the writer lock, once `commit` is durable:
    /// maps it to the end frame its WAL hook reported.
    func didCommit(_ commit: UInt64) {
        state.withLock { state in
            state.lastLocalCommit = max(state.lastLocalCommit, commit)
            guard let frame = state.pendingEndFrame else { return }
            state.pendingEndFrame = nil
            if state.restartPending {
                state.restartPending = false
                state.frameMap.reset(commit: commit &- 1, endFrame: 0)
            }
            state.frameMap.record(commit: commit, endFrame: frame)
        }
    }

    /// Called when a connection ends or advances a snapshot (or closes with a bookmark): if
    /// that snapshot may have pinned a large WAL, a checkpoint is queued to reclaim it.
    func snapshotReleased(commit: UInt64, wasBookmark: Bool) {
        let threshold = configuration.checkpointThresholdPages
        let shouldRequest = state.withLock { state in
            state.walFrames >= threshold && (wasBookmark || commit < state.lastLocalCommit)
        }
        if shouldRequest { requestCheckpoint() }
    }

    // MARK: Scheduling

    /// Queues one automatic checkpoint unless one is already queued.
    func requestCheckpoint(after delay: Duration? = nil) {
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
            let nanoseconds = Int(delay / .nanoseconds(1))
            queue.asyncAfter(deadline: .now() + .nanoseconds(nanoseconds), execute: work)
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
        let limit = Self.backPressureThresholds * max(1, configuration.checkpointThresholdPages)
        let behind = state.withLock { state in
            // A stall announced by the monitor has a culprit: writers are not held back for it
            // (that is the hard limit's business). A brief stall (a reader that began on the
            // database file alone blocks one checkpoint) does not lift the back-pressure.
            (state.isQueued || state.isRunning) && !state.monitor.announcedStall && state.walFrames >= limit
        }
        guard behind, !isOnQueue else { return }
        _ = pending.wait(timeout: .now() + .seconds(1))
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

    // MARK: Running checkpoints

    /// A PASSIVE checkpoint, then a reset of the WAL when nothing pins it.
    private func runAutomatic(_ database: Database) {
        let startedAt = ContinuousClock.now
        let before = database.snapshotRecords()
        var final: CheckpointResult?
        // Writers keep appending while a checkpoint copies. The reset holds them back while it
        // copies what is left and syncs the database file, so further, shorter passes first
        // bring that backlog down to what one short pass lets writers append: each commit
        // waits at most for a few dozen pages and one `fsync`, not for the pages of a whole
        // pass (which made the commit that met the first reset of a run its slowest).
        var previousBacklog = Int.max
        for _ in 0..<Self.maximumPassivePasses {
            let generationBefore = state.withLock { $0.generationCount }
            guard let passive = try? perform(.passive) else { break }
            absorb(passive, generationBefore: generationBefore)
            final = passive
            let backlog = state.withLock { $0.walFrames } - passive.checkpointedFrames
            if !passive.isComplete || backlog <= resetBacklogFrames || backlog * 2 > previousBacklog {
                break
            }
            previousBacklog = backlog
        }
        if let passive = final, passive.isComplete, passive.walFrames > 0, canReset(before) {
            switch resetWAL(database) {
            case .reset(let result):
                final = result
                state.withLock { $0.failedResets = 0 }
            case .writerBusy:
                // A write transaction held the lock past the reset's patience: try again shortly.
                requestCheckpoint(after: .milliseconds(10))
            case .notReset:
                // Nothing pinned the WAL, yet the reset did not complete: a bookmark's connection
                // was busy (or not scheduled) within the few milliseconds a reset may hold
                // writers back. Without another commit nothing would ask again, so retry a
                // bounded number of times, backing off.
                let attempt = state.withLock { state in
                    state.failedResets += 1
                    return state.failedResets
                }
                if attempt <= Self.maximumResetRetries {
                    requestCheckpoint(after: .milliseconds(10 * attempt))
                }
            }
        }
        evaluate(database, before: before, startedAt: startedAt, result: final)
    }

    /// At most this many PASSIVE passes run before a reset.
    static let maximumPassivePasses = 5

    /// The backlog, in frames, a reset may be left to copy under the writer lock: a thirty-second
    /// of the threshold (31 frames by default), at least 16.
    private var resetBacklogFrames: Int { max(16, configuration.checkpointThresholdPages / 32) }

    /// How many times in a row a reset that nothing pinned is retried before waiting for the
    /// next commit to ask again.
    static let maximumResetRetries = 20

    private enum ResetOutcome {
        case reset(CheckpointResult)
        case writerBusy
        case notReset
    }

    /// Whether a reset can succeed: no snapshot of this process is behind the newest commit,
    /// and no reader of another process holds a read mark other than slot 0 (this process's
    /// bookmarks are taken again, and its other readers are brief).
    private func canReset(_ snapshots: (latest: UInt64, records: [ConnectionRecord])) -> Bool {
        let lagging = snapshots.records.contains { record in
            record.snapshot.map { $0 < snapshots.latest } ?? false
        }
        guard !lagging else { return false }
        let ownProcess = getpid()
        if let holders = ReadMarkProbe.holders(databasePath: path),
            holders.contains(where: { $0.slot > 0 && $0.processID != ownProcess })
        {
            return false
        }
        return true
    }

    /// Resets the WAL holding the database's writer lock (taken with priority, waiting a few
    /// milliseconds at most), so that this process's writers wait on that lock, woken the moment
    /// it is free, instead of polling SQLite's busy handler; and so that nothing is appended
    /// between the last copy and the reset.
    private func resetWAL(_ database: Database) -> ResetOutcome {
        let deadline = Date(timeIntervalSinceNow: Self.seconds(Self.resetWait))
        guard database.writerLock.lockWithPriority(before: deadline) else { return .writerBusy }
        defer { database.writerLock.unlock() }
        let generationBefore = state.withLock { $0.generationCount }
        let latest = database.latestCommit
        prepareReset(database, latestCommit: latest)
        guard let result = try? perform(resetMode, busyTimeout: Self.resetWait) else { return .notReset }
        if result.isComplete {
            absorbReset(latestCommit: latest, generationBefore: generationBefore)
            return .reset(result)
        }
        absorb(result, generationBefore: generationBefore)
        return .notReset
    }

    /// How an automatic reset ends: RESTART, which has the next commit write the WAL from its
    /// start again and leaves the file in place (SQLite trims it to `journal_size_limit` at that
    /// commit), unless a pinned snapshot let the file grow past twice that limit: then
    /// TRUNCATE gives the space back at once.
    ///
    /// Truncating after every reset made each commit until the next one grow the file, and
    /// with `synchronous = FULL` every such commit's `fdatasync` then also had to write the
    /// file's new size: one-row commits with the default checkpoints took 1.58 times as long
    /// as SQLite's own auto-checkpoint (which restarts), 1.08 times with RESTART. The default
    /// limit is twice the WAL at the default threshold, so steady writing stays on the RESTART
    /// path and is never trimmed.
    private var resetMode: CheckpointMode {
        var info = stat()
        guard stat(path + "-wal", &info) == 0 else { return .restart }
        return Int64(info.st_size) > 2 * configuration.journalSizeLimit ? .truncate : .restart
    }

    /// With the writer lock held: copies what is left, then has this process's bookmarks at
    /// the newest commit take their snapshot again, so that they read the database file alone
    /// (read mark 0) and no longer keep the WAL from being reset.
    ///
    /// The bookmarks re-begin while the checkpoint handle holds the WAL write lock
    /// (`BEGIN IMMEDIATE`), after checking that the newest commit in the file is theirs with no
    /// unsealed foreign write: no connection of any process can commit in between, so each
    /// bookmark sees exactly what it saw.
    private func prepareReset(_ database: Database, latestCommit latest: UInt64) {
        let bookmarks = database.snapshotRecords().records.compactMap { record in
            record.isBookmark && record.snapshot == latest ? record.connection : nil
        }
        guard !bookmarks.isEmpty else { return }
        let generationBefore = state.withLock { $0.generationCount }
        guard let passive = try? perform(.passive), passive.isComplete else { return }
        absorb(passive, generationBefore: generationBefore)
        let outcomes = handle.withLock { handle -> [BookmarkReseat] in
            guard let handle else { return [] }
            handle.setBusyTimeout(milliseconds: Self.milliseconds(Self.resetWait))
            defer { handle.setBusyTimeout(milliseconds: Self.milliseconds(configuration.busyTimeout)) }
            guard (try? handle.statement(.beginImmediate).execute()) != nil else { return [] }
            defer { try? handle.statement(.rollback).execute() }
            guard let current = try? Self.readCommitState(handle), current.commit == latest,
                current.unsealed == 0
            else { return [] }
            let deadline = ContinuousClock.now + Self.resetWait
            return bookmarks.map { connection in
                connection.reseatBookmark(
                    at: latest, waitingAtMost: max(.zero, deadline - ContinuousClock.now))
            }
        }
        let reseated = outcomes.filter { if case .reseated = $0 { true } else { false } }.count
        state.withLock { $0.reseatedBookmarks += reseated }
        if outcomes.contains(where: { if case .lost = $0 { true } else { false } }) {
            logger.error("a bookmark could not be taken again at commit \(latest) and was released")
        }
    }

    /// The commit counter and the count of unsealed foreign writes, read in the open
    /// transaction of `handle`.
    private static func readCommitState(_ handle: SQLiteHandle) throws(DatabaseError) -> (
        commit: UInt64, unsealed: Int64
    ) {
        let statement = try handle.statement(.readState)
        defer { statement.reset() }
        guard try statement.step() else { throw DatabaseError(.corrupt, "no commit counter") }
        return (UInt64(max(0, statement.int64(at: 0))), statement.int64(at: 1))
    }

    /// Runs one checkpoint on the checkpoint handle and counts it; `busyTimeout` replaces the
    /// configured one for this run.
    func perform(_ mode: CheckpointMode, busyTimeout: Duration? = nil) throws(DatabaseError)
        -> CheckpointResult
    {
        let configured = configuration.busyTimeout
        do {
            let result = try handle.withLock { handle throws(DatabaseError) -> CheckpointResult in
                guard let handle else { throw DatabaseError(.misuse, "the database is closed") }
                if let busyTimeout { handle.setBusyTimeout(milliseconds: Self.milliseconds(busyTimeout)) }
                defer {
                    if busyTimeout != nil {
                        handle.setBusyTimeout(milliseconds: Self.milliseconds(configured))
                    }
                }
                return try handle.checkpoint(mode)
            }
            metrics.countCheckpoint(mode, result.isComplete ? .complete : .incomplete)
            return result
        } catch {
            metrics.countCheckpoint(mode, .failed)
            logger.error("checkpoint \(mode) failed: \(error)")
            throw error
        }
    }

    /// Takes in what a checkpoint that did not reset the WAL saw.
    private func absorb(_ result: CheckpointResult, generationBefore: Int) {
        let threshold = configuration.checkpointThresholdPages
        state.withLock { state in
            // A checkpoint that could not start (another process was checkpointing) reports
            // nothing; one of an older generation describes a WAL that is gone.
            guard state.generationCount == generationBefore, result.walFrames > 0 || result.isComplete else {
                return
            }
            state.walFrames = max(state.walFrames, result.walFrames)
            state.checkpointedFrames = result.checkpointedFrames
            state.nextCheckpointFrames = state.walFrames + threshold
        }
        metrics.recordCheckpointedFrames(result.checkpointedFrames)
    }

    /// Takes in a completed reset (RESTART or TRUNCATE), run while no commit of this process
    /// could interleave. Either leaves no frame a reader needs: the next commit writes the WAL
    /// from its start.
    private func absorbReset(latestCommit: UInt64, generationBefore: Int) {
        let threshold = configuration.checkpointThresholdPages
        state.withLock { state in
            guard state.generationCount == generationBefore else { return }
            state.generationCount += 1
            state.generation = nil
            state.restartPending = false
            state.walFrames = 0
            state.checkpointedFrames = 0
            state.nextCheckpointFrames = threshold
            state.frameMap.reset(commit: latestCommit, endFrame: 0)
        }
        metrics.recordWALBytes(0)
        metrics.recordCheckpointedFrames(0)
    }

    /// Runs a checkpoint on behalf of a caller of ``Database/checkpoint(_:)``.
    ///
    /// FULL, RESTART and TRUNCATE take the database's writer lock first (waiting up to the busy
    /// timeout), so this process's writers queue behind the checkpoint instead of failing with
    /// `busy`. When snapshots of this process pin the WAL they cannot complete, so they wait only
    /// briefly.
    func runExplicitly(_ mode: CheckpointMode, database: Database) throws(DatabaseError) -> CheckpointResult {
        if isOnQueue {
            throw DatabaseError(.misuse, "checkpoint(_:) was called from a checkpoint monitor callback")
        }
        let outcome = queue.sync { () -> Result<CheckpointResult, DatabaseError> in
            let startedAt = ContinuousClock.now
            let before = database.snapshotRecords()
            let generationBefore = state.withLock { $0.generationCount }
            if mode == .passive {
                let result = Result { () throws(DatabaseError) in try perform(.passive) }
                if case .success(let checkpoint) = result {
                    absorb(checkpoint, generationBefore: generationBefore)
                }
                evaluate(database, before: before, startedAt: startedAt, result: try? result.get())
                return result
            }
            let pinned = before.records.contains { $0.snapshot.map { $0 < before.latest } ?? false }
            let wait = pinned ? Self.resetWait : configuration.busyTimeout
            let locked = database.writerLock.lockWithPriority(
                before: Date(timeIntervalSinceNow: Self.seconds(wait)))
            defer { if locked { database.writerLock.unlock() } }
            let latest = database.latestCommit
            if locked && !pinned && mode != .full {
                prepareReset(database, latestCommit: latest)
            }
            let result = Result { () throws(DatabaseError) in
                try perform(mode, busyTimeout: locked ? wait : .zero)
            }
            if case .success(let checkpoint) = result {
                if mode == .truncate && checkpoint.isComplete && locked {
                    absorbReset(latestCommit: latest, generationBefore: generationBefore)
                } else {
                    absorb(checkpoint, generationBefore: generationBefore)
                }
            }
            evaluate(database, before: before, startedAt: startedAt, result: try? result.get())
            return result
        }
        return try outcome.get()
    }

    /// Finishes the event streams and closes the checkpoint handle after any queued checkpoint.
    func close() {
        let subscribers = state.withLock { state in
            state.isClosed = true
            defer { state.subscribers = [:] }
            return state.subscribers
        }
        for continuation in subscribers.values { continuation.finish() }
        if !isOnQueue { queue.sync {} }
        handle.withLock { $0 = nil }
        walGeneration.closeDescriptor()
    }

    // MARK: Helpers

    static func milliseconds(_ duration: Duration) -> Int32 {
        duration.sqliteMilliseconds
    }

    static func seconds(_ duration: Duration) -> TimeInterval {
        TimeInterval(duration.components.seconds) + TimeInterval(duration.components.attoseconds) * 1e-18
    }

    /// The size of the file at `path`, or 0 when it does not exist.
    static func fileSize(_ path: String) -> Int64 {
        var info = stat()
        guard stat(path, &info) == 0 else { return 0 }
        return Int64(info.st_size)
    }
}
