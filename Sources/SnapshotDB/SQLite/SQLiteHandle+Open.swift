internal import CSQLite

extension SQLiteHandle {
    /// Whether closing the handle, when it is the last one of the process on the file,
    /// checkpoints the `-wal` into the main file and deletes the `-wal` and `-shm`
    /// (`SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE`, inverted).
    ///
    /// Off while an open is still checking the file: a refused open must leave a damaged
    /// database and its `-wal` exactly as they were, and SQLite's close would otherwise copy the
    /// `-wal` over the main file and delete it.
    func setCheckpointsOnClose(_ enabled: Bool) {
        _ = snapshotdb_db_config_no_ckpt_on_close(pointer, enabled ? 0 : 1)
    }

    /// Whether SQLite opened the main database read-only (`sqlite3_db_readonly`): the file or
    /// its file system cannot be written.
    var isReadOnly: Bool { sqlite3_db_readonly(pointer, "main") == 1 }
}
