internal import struct Synchronization.Atomic

/// What a database is to the file it opened, given at open: the primary that writes it
/// (``PrimaryRole``), or a read replica that follows another process's primary through a VFS
/// (``ReplicaRole``, in `Database+Replica.swift`).
///
/// Code that differs by role asks the role, by what it needs to know (whether the file has a WAL
/// of this process's own, whether a handle may stop following its file, how a snapshot's commit
/// state is judged), and never which role it is: outside the roles' files nothing tests for a
/// replica (`Scripts/check-structure.sh` holds it).
protocol DatabaseRole: Sendable {
    /// Whether the file has a WAL this process writes, checkpoints and watches (a replica's
    /// pages are its VFS's): writer turns, the checkpointer, the close's checkpoint and the
    /// watcher's notifications need one.
    var hasWAL: Bool { get }
    /// Whether this process writes the file: seals foreign writes, builds extensions. A replica's
    /// writes are its primary's to make.
    var writesTheFile: Bool { get }
    /// Why an open that does not write the file cannot make a write, and where to make it.
    var cannotWriteReason: String { get }
    /// Whether a snapshot is told apart from another history's by the token of its history row
    /// (a replica, whose primary may be put back to an older commit), rather than by its counter
    /// and WAL-index header alone. The commit log then keeps each commit's token.
    var comparesHistoryTokens: Bool { get }
    /// Whether a handle may stop following its file while it stays open (Litestream's VFS after
    /// its primary was put back): connections and the watcher then open new ones.
    var handlesMayStopFollowing: Bool { get }
    /// How often, in milliseconds, the watcher looks for other processes' commits when nothing
    /// notifies it.
    var watcherPollInterval: Int32 { get }

    /// Completes the commit state just read in a snapshot whose newest commit this process
    /// published is `published`: whether it holds writes not numbered yet, or another history.
    func judge(_ state: inout CommitState, published: UInt64, in database: Database)
    /// Whether the history rows of the snapshot on `handle` may be published as they are: not
    /// when they are another history's than the one published up to `published`.
    func publishesHistory(of handle: SQLiteHandle, published: UInt64, in database: Database) -> Bool
    /// A snapshot whose commit state was read, and whose WAL-index header is `header`.
    func sawSnapshot(_ state: CommitState, header: WALIndexHeader, in database: Database)
}

/// The primary: this process writes the file, numbers foreign writes, checkpoints its WAL.
struct PrimaryRole: DatabaseRole {
    /// `false` when opened with ``Configuration/readOnly``: the file is read as a replica reads
    /// its own (extensions adopted, foreign writes left unsealed).
    var writesTheFile = true
    var hasWAL: Bool { true }
    var cannotWriteReason: String {
        "it was opened with Configuration.readOnly; register it in an open that writes the file"
    }
    var comparesHistoryTokens: Bool { false }
    var handlesMayStopFollowing: Bool { false }
    var watcherPollInterval: Int32 { ForeignCommitWatcher.pollInterval }

    func judge(_ state: inout CommitState, published: UInt64, in database: Database) {
        // A counter below a commit this process published is older contents put back from
        // outside (the `sqlite3` shell's `.restore`): an unsealed foreign write, numbered after
        // the newest commit published when sealed.
        if state.unsealed == 0 && state.commit < published { state.unsealed = 1 }
        state.hasUnnumberedForeignWrites = state.unsealed != 0
        if database.holdsAnotherHistory(state, published: published) {
            state.unsealed = max(state.unsealed, 1)
            state.isAnotherHistory = true
            // Older contents put back from outside: not numbered yet.
            state.hasUnnumberedForeignWrites = true
        }
    }

    func publishesHistory(of handle: SQLiteHandle, published: UInt64, in database: Database) -> Bool {
        !database.isAnotherHistory(handle, published: published)
    }

    func sawSnapshot(_ state: CommitState, header: WALIndexHeader, in database: Database) {
        database.checkpointer.didSeeCommit(state.commit, frames: header.commitFrames) {
            database.commitLog.publishedCommit.load(ordering: .sequentiallyConsistent)
        }
    }
}
