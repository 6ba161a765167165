internal import struct Synchronization.Atomic

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

extension Database {
    /// The commit state of the transaction just begun on `handle`, whose snapshot the
    /// WAL-index header `header` identifies (`nil` when unknown).
    ///
    /// When a transaction of this database already read or made that header's counter, the
    /// metadata table is not read at all (debug builds check the shortcut against it).
    /// Otherwise the counter is read, and learnt for `header`.
    ///
    /// A counter below a commit this process already published (`published`, loaded before
    /// the transaction began) means another client put older contents back (the `sqlite3`
    /// shell's `.restore` of a backup, which fires no trigger): it is treated as an unsealed
    /// foreign write, so that sealing numbers it after the newest commit published, and its
    /// external changeset drops caches.
    func commitState(of handle: SQLiteHandle, header: WALIndexHeader?, published: UInt64)
        throws(DatabaseError)
        -> CommitState
    {
        // (Not where snapshots are told apart by their history tokens: a read replica's.)
        if let header, !role.comparesHistoryTokens, let commit = knownCommit(at: header) {
            #if DEBUG
                let read = try handle.readCommitState()
                assert(read.isSealed(at: commit), "wrong commit for a known header")
            #endif
            return CommitState(commit: commit, unsealed: 0)
        }
        var state = try handle.readCommitState()
        role.judge(&state, published: published, in: self)
        if state.unsealed == 0, let header {
            learnCommit(state.commit, at: header)
            role.sawSnapshot(state, header: header, in: self)
        }
        return state
    }
}

extension Database {
    /// Whether the snapshot whose commit state is `state` holds another history than the one
    /// this process published up to `published`: at that same counter, its history row has
    /// another token (a backup with as many commits put back, another database's file restored
    /// over this one). Whatever the file's own unsealed count: a restored file may carry foreign
    /// writes of its own, which do not say what changed either.
    func holdsAnotherHistory(_ state: CommitState, published: UInt64) -> Bool {
        guard state.commit == published, let token = state.token, let known = commitLog.latestToken,
            known.commit == published
        else { return false }
        return known.token != token
    }
}
