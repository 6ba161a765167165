/// A checkpoint run on a database file from outside any ``Database``, on purpose: the
/// `snapshotdb checkpoint` tool's, through the library's SQLite layer.
package enum ExternalCheckpoint {
    /// What SQLite answered, as it answered it.
    package struct Outcome: Sendable {
        /// `sqlite3_wal_checkpoint_v2`'s result code: `SQLITE_OK` (0) or `SQLITE_BUSY` (5).
        package var resultCode: Int32
        /// Whether readers or a writer kept the checkpoint from completing.
        package var isBusy: Bool
        /// `PRAGMA journal_mode`, lowercased; only `wal` databases are checkpointed.
        package var journalMode: String
        /// Frames in the WAL (`pnLog`); -1 when nothing was checkpointed (not WAL).
        package var walFrames: Int32
        /// Frames checkpointed (`pnCkpt`); -1 when nothing was checkpointed (not WAL).
        package var checkpointedFrames: Int32
    }

    /// Opens `path` read-write without creating it, as every handle of the library opens it
    /// (the `snapshotdb` VFS, which differs from the default one only in how a WAL grows, and a
    /// checkpoint writes no WAL frame), runs `sqlite3_wal_checkpoint_v2` in `mode` when the file
    /// is in WAL mode, and closes it without the checkpoint-on-close
    /// (`SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE`), so that closing neither checkpoints again nor
    /// deletes the `-wal` behind the caller's back.
    ///
    /// - Throws: a ``DatabaseError`` whose ``DatabaseError/sqliteCode`` is SQLite's result
    ///   code when opening, reading the journal mode or checkpointing fails (`SQLITE_BUSY`
    ///   from the checkpoint is a result, not an error).
    package static func run(
        path: String, mode: CheckpointMode, busyTimeoutMilliseconds: Int32
    ) throws(DatabaseError) -> Outcome {
        let handle = try SQLiteHandle(path: path)
        handle.setCheckpointsOnClose(false)
        handle.setBusyTimeout(milliseconds: busyTimeoutMilliseconds)
        // The pager opens the WAL on the first read; until then SQLite answers "not WAL" (-1).
        guard let journalMode = try handle.string("PRAGMA journal_mode")?.lowercased() else {
            throw DatabaseError(.sqlite, "PRAGMA journal_mode returned no row")
        }
        guard journalMode == "wal" else {
            return Outcome(
                resultCode: SQLiteResult.ok, isBusy: false, journalMode: journalMode, walFrames: -1,
                checkpointedFrames: -1)
        }
        let answer = try handle.walCheckpoint(mode)
        return Outcome(
            resultCode: answer.resultCode, isBusy: SQLiteResult.isBusy(answer.resultCode),
            journalMode: journalMode, walFrames: answer.walFrames,
            checkpointedFrames: answer.checkpointedFrames)
    }
}
