internal import Dispatch
internal import Foundation
internal import Logging
internal import SnapshotDBLocking

#if canImport(Glibc)
    internal import Glibc
#elseif canImport(Darwin)
    internal import Darwin
#endif

/// Running checkpoints: the automatic PASSIVE passes and WAL resets, and the checkpoints an
/// app asks for.
extension Checkpointer {
    // MARK: Running checkpoints

    /// A PASSIVE checkpoint, then a reset of the WAL when nothing pins it.
    func runAutomatic(_ database: Database) {
        let startedAt = ContinuousClock.now
        // A Litestream started after the open is recognized here, not only before a reset: its
        // read lock keeps every pass from completing, so no reset would ever ask, and until then
        // its reader would be taken for a stranger (named in warnings, counted by the hard limit).
        _ = leavesWALToReplicator()
        let before = database.snapshotRecords()
        var final: CheckpointResult?
        // Writers keep appending while a checkpoint copies. The reset holds them back while it
        // copies what is left and syncs the database file, so further, shorter passes first
        // bring that backlog down to what one short pass lets writers append: each commit
        // waits at most for a few dozen pages and one `fsync`, not for the pages of a whole
        // pass (which made the commit that met the first reset of a run its slowest).
        var previousBacklog = Int.max
        for _ in 0..<Self.maximumPassivePasses {
            let generationBefore = state.withLock { $0.wal.generationCount }
            // `perform` logged a failure (as an error) before throwing it: here it ends the passes.
            guard let passive = try? perform(.passive) else { break }
            absorb(passive, generationBefore: generationBefore)
            final = passive
            let backlog = state.withLock { $0.wal.walFrames } - passive.checkpointedFrames
            if !passive.isComplete || backlog <= resetBacklogFrames || backlog * 2 > previousBacklog {
                break
            }
            previousBacklog = backlog
        }
        // With an external replicator the WAL is its to reset: PASSIVE passes only.
        if let passive = final, passive.isComplete, passive.walFrames > 0, canReset(before),
            !leavesWALToReplicator()
        {
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
    private func canReset(_ snapshots: (latest: UInt64, records: [SnapshotRecord])) -> Bool {
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
        let deadline = Date(timeIntervalSinceNow: Self.resetWait.timeInterval)
        guard database.writer.lock.lockWithPriority(before: deadline) else { return .writerBusy }
        defer { database.writer.lock.unlock() }
        let generationBefore = state.withLock { $0.wal.generationCount }
        let latest = database.latestCommit
        prepareReset(database, latestCommit: latest)
        // `perform` logged a failure (as an error) before throwing it: the reset is retried.
        guard let result = try? perform(resetMode, busyTimeout: Self.resetWait) else { return .notReset }
        if result.isComplete {
            absorbReset(latestCommit: latest, frames: result.walFrames, generationBefore: generationBefore)
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
        return Int64(info.st_size) > configuration.journalSizeLimit.saturatingMultiplied(by: 2)
            ? .truncate : .restart
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
        let generationBefore = state.withLock { $0.wal.generationCount }
        // `perform` logged a failure (as an error) before throwing it: the bookmarks stay as they
        // are, as when the pass is incomplete.
        guard let passive = try? perform(.passive), passive.isComplete else { return }
        absorb(passive, generationBefore: generationBefore)
        // On the checkpoint queue: the handle is this queue's, and no lock is held while the
        // bookmarks' connections run their re-seats.
        let outcomes = checkpointHandle.use(on: queue) { handle -> [BookmarkReseat] in
            guard let handle else { return [] }
            let began = handle.withBusyTimeout(Self.resetWait, restoring: configuration.busyTimeout) {
                () -> Bool in
                do {
                    try handle.statement(.beginImmediate).execute()
                    return true
                } catch {
                    // Most often a writer of another process past the reset's patience (`busy`).
                    logger.debug(
                        "the bookmarks are not re-seated before a WAL reset: BEGIN IMMEDIATE failed (\(error)); the reset may not complete, and is retried"
                    )
                    return false
                }
            }
            guard began else { return [] }
            defer { handle.rollback(after: "re-seating bookmarks before a WAL reset", logger: logger) }
            let commitState: CommitState
            do {
                commitState = try handle.readCommitState()
            } catch {
                // The same error fails every transaction of the app: here it is only named.
                logger.debug(
                    "the bookmarks are not re-seated before a WAL reset: the commit state could not be read (\(error)); the reset may not complete, and is retried"
                )
                return []
            }
            guard commitState.isSealed(at: latest) else { return [] }
            // Every bookmark's connection re-begins on its own queue at once; a reset with a
            // hundred bookmarks then holds writers back for the slowest of them, not their sum.
            let deadline = ContinuousClock.now + Self.resetWait
            let attempts = bookmarks.map { $0.requestReseat(at: latest) }
            return attempts.map { $0.wait(timeout: max(.zero, deadline - ContinuousClock.now)) }
        }
        let reseated = outcomes.filter { if case .reseated = $0 { true } else { false } }.count
        state.withLock { $0.reseatedBookmarks += reseated }
        if outcomes.contains(where: { if case .lost = $0 { true } else { false } }) {
            logger.error("a bookmark could not be taken again at commit \(latest) and was released")
        }
    }

    /// Runs one checkpoint on the checkpoint handle and counts it; `busyTimeout` replaces the
    /// configured one for this run.
    func perform(_ mode: CheckpointMode, busyTimeout: Duration? = nil) throws(DatabaseError)
        -> CheckpointResult
    {
        let configured = configuration.busyTimeout
        do throws(DatabaseError) {
            let result = try checkpointHandle.use(on: queue) {
                handle throws(DatabaseError) -> CheckpointResult in
                // Closed meanwhile: a checkpoint that passed `checkOpen()` as `close()` ran.
                guard let handle else {
                    throw DatabaseError(.databaseClosed, "the database \(path) was closed")
                }
                return try handle.withBusyTimeout(busyTimeout ?? configured, restoring: configured) {
                    () throws(DatabaseError) in try handle.checkpoint(mode)
                }
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
        state.withLock { $0.wal.absorb(result, generationBefore: generationBefore) }
        metrics.recordCheckpointedFrames(result.checkpointedFrames)
    }

    /// Takes in a completed reset (RESTART or TRUNCATE), run while no commit of this process
    /// could interleave.
    private func absorbReset(latestCommit: UInt64, frames: Int, generationBefore: Int) {
        state.withLock {
            $0.wal.absorbReset(latestCommit: latestCommit, frames: frames, generationBefore: generationBefore)
        }
        metrics.recordWALBytes(0)
        metrics.recordCheckpointedFrames(0)
    }

    /// Runs a checkpoint on behalf of a caller of ``Database/checkpoint(_:)``.
    ///
    /// FULL, RESTART and TRUNCATE take the database's writer lock first (waiting up to the busy
    /// timeout, or `patience` when given), so this process's writers queue behind the checkpoint
    /// instead of failing with `busy`. When snapshots of this process pin the WAL they cannot
    /// complete, so they wait only briefly.
    func runExplicitly(_ mode: CheckpointMode, database: Database, patience: Duration? = nil)
        throws(DatabaseError) -> CheckpointResult
    {
        if isOnQueue {
            throw DatabaseError(.misuse, "checkpoint(_:) was called from a checkpoint monitor callback")
        }
        if let replicator, mode == .restart || mode == .truncate {
            throw DatabaseError(
                .misuse,
                "a \(mode) checkpoint would reset the WAL behind the external replicator '\(replicator)', which "
                    + "reads it and resets it itself; run .passive or .full")
        }
        let outcome = queue.sync { () -> Result<CheckpointResult, DatabaseError> in
            let startedAt = ContinuousClock.now
            let before = database.snapshotRecords()
            let generationBefore = state.withLock { $0.wal.generationCount }
            if mode == .passive {
                let result = Result { () throws(DatabaseError) in try perform(.passive) }
                if case .success(let checkpoint) = result {
                    absorb(checkpoint, generationBefore: generationBefore)
                }
                // A failure is thrown to the caller below, and `perform` logged it: the monitor's
                // evaluation sees no result.
                evaluate(database, before: before, startedAt: startedAt, result: try? result.get())
                return result
            }
            let pinned = before.records.contains { $0.snapshot.map { $0 < before.latest } ?? false }
            let wait = pinned ? Self.resetWait : (patience ?? configuration.busyTimeout)
            let locked = database.writer.lock.lockWithPriority(before: wait.deadlineFromNow)
            defer { if locked { database.writer.lock.unlock() } }
            let latest = database.latestCommit
            if locked && !pinned && mode != .full {
                prepareReset(database, latestCommit: latest)
            }
            let result = Result { () throws(DatabaseError) in
                try perform(mode, busyTimeout: locked ? wait : .zero)
            }
            if case .success(let checkpoint) = result {
                if mode == .truncate && checkpoint.isComplete && locked {
                    absorbReset(
                        latestCommit: latest, frames: checkpoint.walFrames, generationBefore: generationBefore
                    )
                } else {
                    absorb(checkpoint, generationBefore: generationBefore)
                }
            }
            // A failure is thrown to the caller below, and `perform` logged it: the monitor's
            // evaluation sees no result.
            evaluate(database, before: before, startedAt: startedAt, result: try? result.get())
            return result
        }
        return try outcome.get()
    }
}
