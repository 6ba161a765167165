internal import Foundation
internal import Logging
internal import SnapshotDBLocking

internal import struct Synchronization.Atomic

#if canImport(Glibc)
    internal import Glibc
#elseif canImport(Darwin)
    internal import Darwin
#endif

extension Database {
    /// Whether ``close()`` was called.
    public var isClosed: Bool { closed.load(ordering: .acquiring) }

    func checkOpen() throws(DatabaseError) {
        guard isClosed else { return }
        throw DatabaseError(.databaseClosed, "the database \(path) was closed")
    }

    /// Counts an operation that runs on a SQLite handle of its own (`vacuum()`, `backup(to:)`),
    /// which ``close()`` waits for; throws `databaseClosed` once the close began.
    func enterOperation() throws(DatabaseError) {
        guard operations.enter() else {
            throw DatabaseError(.databaseClosed, "the database \(path) was closed")
        }
    }

    /// Closes the database: refuses new transactions, waits for the running ones, ends every
    /// bookmark, checkpoints and truncates the WAL when nothing outside this process reads or
    /// writes it (waiting a few milliseconds at most: closing never holds another process's
    /// writers back), and closes every SQLite handle.
    ///
    /// Afterwards every call on the database or its connections throws
    /// ``DatabaseError/Code/databaseClosed``, `changes()` streams and checkpoint event streams
    /// finish, and the file may be opened again at once, in this process or another. Calling
    /// it again does nothing. Releasing the database without closing it still closes it (when
    /// its last connection is released).
    ///
    /// ```swift
    /// try db.close()    // at shutdown, e.g. in a swift-service-lifecycle Service
    /// ```
    ///
    /// - Throws: `misuse` when called from inside a transaction of this database, which would
    ///   wait for itself.
    public func close() throws(DatabaseError) {
        let connections = state.withLock { state in
            state.connections.values.compactMap { $0.current.connection }
        }
        if writer.lock.isHeldByCurrentThread
            || connections.contains(where: { ActiveConnections.contains($0.id) })
        {
            throw DatabaseError(
                .misuse,
                "close() was called from inside a transaction of this database, which would wait for itself")
        }
        guard
            closed.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged
        else { return }
        // A `vacuum()` or `backup(to:)` running on a handle of its own ends first: its handle's
        // locks must not outlive the close (a reopen in this process would drop them).
        operations.closeAndWait()
        foreignCommitWatcher.stop()
        // New calls are refused from here on; each queue's running call finishes first. The list
        // is read again once the flag is set: a connection made (or a call begun) since the first
        // look is in it, and any call after the flag is refused.
        let open = state.withLock { state in state.connections.values.compactMap { $0.current.connection } }
        for connection in open { connection.closeForDatabase() }
        // With no reader of this process left, the WAL can be copied back and truncated; a
        // reader of another process keeps it (SQLite then leaves the files for that process).
        // Closing never waits on other processes: while one reads the WAL, a truncating
        // checkpoint would wait for it (up to the busy timeout), so it gets a PASSIVE one. (With
        // an external replicator, PASSIVE too: the WAL is the replicator's.) The look for readers
        // can miss one that begins just after it, and a writer of another process holds the lock
        // a TRUNCATE needs: so the TRUNCATE waits a few milliseconds at most, like the automatic
        // reset. Waiting the busy timeout held every other process's writers back for that long
        // (the stress run across processes saw a 60 s stall end in `busy`), since a checkpoint
        // that waits for readers holds SQLite's write lock while it waits.
        let ownProcess = getpid()
        let foreignReaders =
            role.hasWAL
            ? (ReadMarkProbe.holders(databasePath: path) ?? []).filter {
                $0.slot > 0 && $0.processID != ownProcess
            }
            : []
        if checkpointing.resetsWAL, let reader = foreignReaders.first {
            // What processes sharing a file do: debug (the default logger prints info).
            checkpointer.logger.debug(
                "closing while process \(reader.processID) reads the WAL: checkpointed (PASSIVE) and left to it",
                metadata: ["reader_pid": "\(reader.processID)"])
        }
        let mode = checkpointing.closingCheckpoint(withForeignReaders: !foreignReaders.isEmpty)
        // A read replica has no WAL of its own to checkpoint; a read-only open checkpoints none.
        if role.hasWAL && checkpointer.checkpoints {
            do {
                _ = try checkpointer.runExplicitly(mode, database: self, patience: Checkpointer.resetWait)
            } catch {
                // A checkpoint that failed was logged as an error where it ran; this says what the
                // close made of it (a close must not fail for it: the WAL is the next open's).
                checkpointer.logger.debug(
                    "closing without a \(mode) checkpoint (\(error)): the WAL stays as it is for the next open",
                    metadata: ["checkpoint_mode": "\(mode)"])
            }
        }
        finishSubscribers()
        checkpointer.close()
        writerTurns.close()
        OpenFiles.release(path)
    }

    /// Copies the database, as of one commit, to a new file at `destination` while writers go
    /// on, and returns that commit.
    ///
    /// The copy is made with SQLite's `VACUUM INTO` in one read transaction (so it is
    /// consistent and compact), written under a temporary name in the destination's directory
    /// with ``Configuration/fileMode``, synced, and linked into place (never over a file that
    /// appeared under the name meanwhile): a crash leaves either
    /// no file or a whole one. The copy opens as a SnapshotDB database at the returned commit,
    /// with its commit counter. It costs a read of every page and a write of the copy; readers
    /// and writers of this database are not held back (the read transaction pins the WAL while
    /// it runs).
    ///
    /// - Throws: `cannotOpen` when `destination` exists, its directory cannot be written, or its
    ///   name leaves no room for SQLite's `-journal` (the copy could not be opened),
    ///   `diskFull`, `databaseClosed`, and other ``DatabaseError``s from SQLite. Nothing is
    ///   left at `destination` on failure.
    @discardableResult
    public func backup(to destination: String) throws(DatabaseError) -> UInt64 {
        try checkOpen()
        let target = try Self.resolve(destination)
        guard access(target, F_OK) != 0 else {
            throw DatabaseError(.cannotOpen, "cannot back up to \(target): the file exists")
        }
        // A `-wal` or `-journal` left there by a database deleted without it would be applied to
        // the copy by the first SQLite that opens it.
        try Schema.refuseOrphanedSideFiles(of: target)
        let directory = (target as NSString).deletingLastPathComponent
        // The copy is in rollback-journal mode until a SnapshotDB opens it, and SQLite cannot
        // open such a file without room for its `-journal` name.
        let nameMax = Schema.nameLimit(in: directory)
        let nameBytes = (target as NSString).lastPathComponent.utf8.count
        if nameBytes + "-journal".utf8.count > nameMax, nameBytes <= nameMax {
            throw DatabaseError(
                .cannotOpen,
                "cannot back up to \(target): its name is \(nameBytes) bytes, and SQLite could not open the "
                    + "copy, which needs \(nameBytes + 8) for its -journal, more than the \(nameMax) this file system allows"
            )
        }
        let temporary =
            directory + "/"
            + Schema.temporaryName(
                for: (target as NSString).lastPathComponent, tag: "backup", nameMax: nameMax)
        let descriptor = open(
            temporary, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, mode_t(configuration.fileMode))
        guard descriptor >= 0 else {
            throw DatabaseError(
                .cannotOpen, "cannot create \(temporary): \(String(cString: strerror(errno)))")
        }
        fchmod(descriptor, mode_t(configuration.fileMode))
        closeDescriptor(descriptor)
        do throws(DatabaseError) {
            try enterOperation()
            defer { operations.leave() }
            let source = try SQLiteHandle(path: fileName, readOnly: true, vfs: vfsName)
            let statement = try SQLiteStatement(handle: source, sql: "VACUUM INTO ?1", persistent: false)
            // A replica's VFS would write the copy too: a URI names the local file and VFS.
            try statement.bind(localFileURI(temporary), at: 1)
            _ = try statement.step()
            statement.reset()
            let copy = try SQLiteHandle(path: temporary, readOnly: true)
            let commit = try copy.readCommitState().commit
            try Self.syncFile(temporary)
            // Never over a file that appeared under the name during the copy (another backup).
            guard try Schema.linkNew(temporary, as: target) else {
                throw DatabaseError(.cannotOpen, "cannot back up to \(target): the file exists")
            }
            unlink(temporary)
            try Self.syncFile(directory)
            return commit
        } catch {
            unlink(temporary)
            throw error
        }
    }

    /// Rebuilds the database file compactly (SQLite's `VACUUM`), giving the space of deleted
    /// values back to the file system.
    ///
    /// Holds the writer lock while it runs: it rewrites every page, so it costs about a write of
    /// the whole database into the WAL (and that much free disk), which the next checkpoint
    /// copies back. Readers go on, and bookmarks keep their snapshots. Values and the commit
    /// counter are unchanged, so it makes no commit and no changeset.
    ///
    /// - Throws: `misuse` inside a read-write transaction of this database, `databaseClosed`,
    ///   `walLimitExceeded` when ``Configuration/walHardLimitBytes`` is set and the rewrite would
    ///   take the WAL past it while snapshots pin it (nothing is changed), `diskFull` and other
    ///   ``DatabaseError``s from SQLite.
    public func vacuum() throws(DatabaseError) {
        try checkOpen()
        if writer.lock.isHeldByCurrentThread {
            throw DatabaseError(
                .misuse, "vacuum() was called inside a read-write transaction of this database")
        }
        try checkWritable("vacuum()")
        try enterOperation()
        defer { operations.leave() }
        let handle = try openHandle()
        // It rewrites every page in use: about that much goes into the WAL.
        let pages = try handle.int64("PRAGMA page_count") ?? 0
        let free = try handle.int64("PRAGMA freelist_count") ?? 0
        try checkWriteAllowed(vacuuming: max(0, pages - free) * Int64(try handle.pageSize()))
        handle.recordCommitFrames()
        writer.lock.lock()
        defer { writer.lock.unlock() }
        try handle.execute("VACUUM")
        // The VACUUM's commit is this process's: its change counter must not pass for another
        // writer's (which would make this process take turns, see `WriterTurns`).
        handle.lookUpWALIndex()
        if let header = handle.walIndexHeader() { writerTurns.didCommit(change: header.change) }
        checkpointer.didCommit(latestCommit, frames: handle.takeCommitFrames())
        checkpointer.requestCheckpoint()
    }

    /// `fsync` of a file or directory.
    static func syncFile(_ path: String) throws(DatabaseError) {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw DatabaseError(
                .cannotOpen, "cannot open \(path) to sync it: \(String(cString: strerror(errno)))")
        }
        defer { closeDescriptor(descriptor) }
        guard fsync(descriptor) == 0 else {
            let code: DatabaseError.Code = errno == ENOSPC ? .diskFull : .ioError
            throw DatabaseError(code, "cannot sync \(path): \(String(cString: strerror(errno)))")
        }
    }
}

/// The C library's `close(2)`, which `Database.close()` hides inside the type's own methods:
/// there the function needs its module's name, which differs by platform.
private func closeDescriptor(_ descriptor: Int32) {
    #if canImport(Glibc)
        _ = Glibc.close(descriptor)
    #elseif canImport(Darwin)
        _ = Darwin.close(descriptor)
    #endif
}

/// The operations of a database that run on SQLite handles of their own (``Database/vacuum()``,
/// ``Database/backup(to:)``): ``Database/close()`` refuses new ones and waits for the running
/// ones. An `NSCondition` (a pthread mutex and condition), which the thread sanitizer sees.
final class InFlightOperations: @unchecked Sendable {
    private let condition = NSCondition()
    private var running = 0
    /// How many ever began (for tests, see ``waitForBegun(_:)``).
    private var begun = 0
    /// How many ever ended (for tests, see ``finishedCount``).
    private var finished = 0
    private var closing = false

    /// Counts one more running operation; `false` once the close began.
    func enter() -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !closing else { return false }
        running += 1
        begun += 1
        condition.broadcast()
        return true
    }

    func leave() {
        condition.lock()
        defer { condition.unlock() }
        running -= 1
        finished += 1
        if running == 0 { condition.broadcast() }
    }

    /// How many operations ended so far (for tests): counted before ``closeAndWait()`` can
    /// return, so a test that reads it right after ``Database/close()`` needs no other wait.
    var finishedCount: Int {
        condition.lock()
        defer { condition.unlock() }
        return finished
    }

    /// Waits until `count` operations began, running or not (for tests).
    func waitForBegun(_ count: Int) {
        condition.lock()
        defer { condition.unlock() }
        while begun < count { condition.wait() }
    }

    /// Refuses new operations and waits until the running ones ended.
    func closeAndWait() {
        condition.lock()
        defer { condition.unlock() }
        closing = true
        while running > 0 { condition.wait() }
    }
}
