/// What a transaction's snapshot says of the commit counter.
struct CommitState: Equatable, Sendable {
    /// The persisted commit counter.
    var commit: UInt64
    /// How many foreign writes (rows changed by clients that fire the schema's triggers) are not
    /// yet sealed with a commit number of their own; 0 when every change has a number.
    var unsealed: Int64
    /// The token of the newest history row (the counter's row), when it was read: another
    /// history at the same counter (older contents put back) has another token.
    var token: UInt64? = nil
    /// Whether the snapshot holds another history than the one this process published at the
    /// same counter (set by ``Database/commitState(of:header:published:)``).
    var isAnotherHistory = false
    /// Whether the snapshot holds changes of a foreign client that have no commit number yet:
    /// writes the triggers noted, or (on a primary) older contents put back from outside;
    /// unlike ``unsealed``, not a read replica's snapshot of another history, which is a whole
    /// commit of its primary (``ReadTransaction/hasUnnumberedForeignWrites``).
    var hasUnnumberedForeignWrites = false

    /// Whether this is `commit` with every foreign write sealed.
    func isSealed(at commit: UInt64) -> Bool { self.commit == commit && unsealed == 0 }
}

extension SQLiteHandle {
    /// The commit counter and the number of foreign writes not yet sealed, read in the open
    /// transaction (the first read of a deferred transaction also fixes its snapshot).
    ///
    /// - Throws: `corrupt` when rows of `snapshotdb_meta` or every row of `snapshotdb_history`
    ///   are missing (another client deleted them): without them commits would be numbered
    ///   wrong or not at all.
    func readCommitState() throws(DatabaseError) -> CommitState {
        let statement = try statement(.readState)
        defer { statement.reset() }
        // No row (an empty history) or NULLs (no meta rows) mean rows were deleted.
        guard try statement.step(), !statement.isNull(at: 0), !statement.isNull(at: 1) else {
            throw Schema.damagedMetadata(path: path)
        }
        return CommitState(
            commit: UInt64(max(0, statement.int64(at: 0))), unsealed: statement.int64(at: 1),
            token: statement.isNull(at: 2) ? nil : UInt64(bitPattern: statement.int64(at: 2)))
    }
}
