internal import Foundation
internal import SnapshotDBLocking

extension Database {
    /// Runs a checkpoint now, on the database's checkpoint connection, and returns the WAL's
    /// frames and the frames checkpointed.
    ///
    /// `passive` never waits. `full`, `restart` and `truncate` first take the database's writer
    /// lock (this process's writers then wait for the checkpoint instead of failing), then wait
    /// up to ``Configuration/busyTimeout`` for readers and writers of other processes.
    /// Snapshots held by this process's connections keep the checkpoint from completing
    /// (``CheckpointResult/isComplete`` is then `false`); those modes then wait only a few
    /// milliseconds. Called from inside a read-write transaction of this database, a mode other
    /// than `passive` would wait for a lock its own thread holds: it throws `misuse` instead.
    ///
    /// While such a checkpoint waits for another process's readers, it holds SQLite's write lock
    /// (that is SQLite's checkpoint, not a choice of this library): writers of every process wait
    /// for it, up to their own busy timeouts. Give it a short ``Configuration/busyTimeout`` or
    /// use `passive` where other processes read for long; ``close()`` waits a few milliseconds
    /// at most for the same reason.
    ///
    /// ```swift
    /// let result = try db.checkpoint(.truncate)
    /// if !result.isComplete { print(db.checkpointStatus().laggingSnapshots) }
    /// ```
    ///
    /// - Throws: ``DatabaseError`` when SQLite fails for a reason other than a busy reader,
    ///   `databaseClosed` after ``close()``, or `misuse` when called from a checkpoint monitor
    ///   callback, or with a mode other than `passive` from inside a read-write transaction.
    @discardableResult
    public func checkpoint(_ mode: CheckpointMode) throws(DatabaseError) -> CheckpointResult {
        try checkOpen()
        try checkWritable("checkpoint(.\(mode))")
        if mode != .passive && writer.lock.isHeldByCurrentThread {
            throw DatabaseError(
                .misuse,
                "checkpoint(.\(mode)) was called inside a read-write transaction of this database, "
                    + "whose writer lock it needs; call it after the transaction, or use .passive")
        }
        return try checkpointer.runExplicitly(mode, database: self)
    }

    /// The WAL's size and progress and every snapshot that pins it, named.
    ///
    /// Lists each connection of this process holding a read snapshot (its name, commit, commits
    /// behind, seconds held, whether it is a bookmark, and the WAL bytes it pins) and the
    /// readers of other processes found through the `-shm` lock bytes, with their process ids.
    /// WAL frames are as this process last saw them: after its own commits and checkpoints.
    /// Cheap enough to poll for a status screen (it reads `/proc/locks` once).
    public func checkpointStatus() -> CheckpointStatus {
        let status = checkpointer.status(of: self, probingLocks: true)
        checkpointer.metrics.recordLag(status)
        return status
    }

    /// A stream of the checkpoint monitor's events: stalls, warnings about a WAL that snapshots
    /// pin (naming them) and recoveries.
    ///
    /// Events are sent from the checkpoint queue after checkpoints; a slow consumer loses the
    /// oldest of more than 256 buffered events. The stream ends when the database is released
    /// or the consuming task is cancelled.
    ///
    /// ```swift
    /// for await event in db.checkpointEvents() {
    ///     if case .walOverWarning(let status) = event { show(status.laggingSnapshots) }
    /// }
    /// ```
    public func checkpointEvents() -> AsyncStream<CheckpointEvent> {
        checkpointer.events()
    }

    /// Waits until every checkpoint queued so far has run (for tests).
    func waitForCheckpoints() {
        checkpointer.waitForIdle()
    }

    /// Throws `walLimitExceeded` when the configured hard WAL limit is passed and snapshots
    /// still pin the WAL; called before every read-write transaction, which it first holds
    /// back while writers outrun a checkpoint in progress.
    ///
    /// Only the pins decide: once they are released, writes are allowed again at once (the WAL
    /// is then reset by the checkpoint this queues), and nothing already committed is touched.
    /// The replicator's reader (Litestream's) is no pin here: the WAL is its to checkpoint and
    /// reset, it holds its read lock for as long as it runs, and the WAL's size it leaves (its
    /// checkpoint restarts the WAL at the next write) would never reach this process's count.
    ///
    /// `vacuum()` passes the bytes it is about to write (about the whole database): it is
    /// refused while pinned snapshots keep the WAL from being reset, when those bytes would take
    /// the WAL past the limit.
    func checkWriteAllowed(vacuuming bytes: Int64? = nil) throws(DatabaseError) {
        checkpointer.waitIfWritersOutrunCheckpoints()
        guard let limit = configuration.walHardLimitBytes,
            checkpointer.knownWALBytes + (bytes ?? 0) > limit
        else { return }
        let status = checkpointer.status(of: self, probingLocks: true)
        checkpointer.requestCheckpoint()
        // A vacuum makes no commit: a bookmark at the newest commit pins what it writes too. (A
        // transaction under way on another thread is no pin: the vacuum waits for the writer
        // lock, and a read of the newest commit ends by itself.)
        let lagging =
            bytes == nil
            ? status.laggingSnapshots : status.snapshots.filter { $0.commitsBehind > 0 || $0.isBookmark }
        let readers = status.externalReaders.filter { !$0.isReplicator }
        guard !lagging.isEmpty || !readers.isEmpty else { return }
        let pins = Checkpointer.culpritList(Checkpointer.culpritNames(lagging, readers))
        if let bytes {
            throw DatabaseError(
                .walLimitExceeded,
                "vacuum() would write about \(ByteCount(bytes)) into the WAL, which is \(ByteCount(status.walBytes)) "
                    + "and cannot be checkpointed: pinned by \(pins); with the hard limit of \(ByteCount(limit)), "
                    + "vacuum once these snapshots are released")
        }
        throw DatabaseError(
            .walLimitExceeded,
            "the WAL is \(ByteCount(status.walBytes)), past the hard limit of \(ByteCount(limit)), "
                + "and cannot be checkpointed: pinned by \(pins); writes resume once these snapshots are released"
        )
    }
}
