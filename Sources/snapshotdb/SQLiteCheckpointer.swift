import CSQLite
import SnapshotDB

/// A SQLite failure while checkpointing: the result code and SQLite's message.
struct SQLiteFailure: Error {
    var code: Int32
    var message: String
}

/// The tool's only use of SQLite: open, checkpoint, close. Every `sqlite3_*` call is here.
enum SQLiteCheckpointer {
    /// Opens `path` read-write without creating it, runs `sqlite3_wal_checkpoint_v2` on `main`
    /// and closes the connection with `SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE`, so that closing does not
    /// checkpoint again or delete the `-wal` behind the caller's back.
    static func checkpoint(
        path: String, mode: CheckpointMode, busyTimeoutMilliseconds: Int32
    ) throws(SQLiteFailure) -> CheckpointResult {
        var handle: OpaquePointer?
        let openResult = sqlite3_open_v2(path, &handle, SQLITE_OPEN_READWRITE, nil)
        defer { sqlite3_close_v2(handle) }
        guard openResult == SQLITE_OK, let handle else {
            throw failure(openResult, handle)
        }
        sqlite3_extended_result_codes(handle, 1)
        _ = snapshotdb_db_config_no_ckpt_on_close(handle, 1)
        sqlite3_busy_timeout(handle, busyTimeoutMilliseconds)

        // The pager opens the WAL on the first read; until then SQLite answers "not WAL" (-1).
        let journalMode = try readJournalMode(handle)
        guard journalMode == "wal" else {
            return CheckpointResult(
                mode: mode, resultCode: SQLITE_OK, isBusy: false, journalMode: journalMode, logFrames: -1,
                checkpointedFrames: -1)
        }

        var logFrames: Int32 = -1
        var checkpointedFrames: Int32 = -1
        let result = sqlite3_wal_checkpoint_v2(
            handle, "main", sqliteMode(mode), &logFrames, &checkpointedFrames)
        let primary = result & 0xff
        guard primary == SQLITE_OK || primary == SQLITE_BUSY else {
            throw failure(result, handle)
        }
        return CheckpointResult(
            mode: mode, resultCode: result, isBusy: primary == SQLITE_BUSY, journalMode: journalMode,
            logFrames: logFrames, checkpointedFrames: checkpointedFrames)
    }

    /// `PRAGMA journal_mode`, which also makes the pager open the WAL.
    private static func readJournalMode(_ handle: OpaquePointer) throws(SQLiteFailure) -> String {
        var statement: OpaquePointer?
        let prepared = sqlite3_prepare_v2(handle, "PRAGMA journal_mode", -1, &statement, nil)
        defer { sqlite3_finalize(statement) }
        guard prepared == SQLITE_OK, let statement else { throw failure(prepared, handle) }
        let stepped = sqlite3_step(statement)
        guard stepped == SQLITE_ROW, let text = sqlite3_column_text(statement, 0) else {
            throw failure(stepped, handle)
        }
        return String(cString: text).lowercased()
    }

    private static func sqliteMode(_ mode: CheckpointMode) -> Int32 {
        switch mode {
        case .passive: SQLITE_CHECKPOINT_PASSIVE
        case .full: SQLITE_CHECKPOINT_FULL
        case .restart: SQLITE_CHECKPOINT_RESTART
        case .truncate: SQLITE_CHECKPOINT_TRUNCATE
        }
    }

    private static func failure(_ code: Int32, _ handle: OpaquePointer?) -> SQLiteFailure {
        let message =
            handle.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(code))
        return SQLiteFailure(code: code, message: "SQLite error \(code): \(message)")
    }
}
