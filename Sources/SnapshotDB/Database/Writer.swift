internal import Dispatch
internal import Foundation
internal import Logging
internal import SnapshotDBLocking

internal import struct Synchronization.Atomic

/// The database's single writer: every commit this process makes is made here, in the order
/// this file reads.
///
/// A read-write transaction (``write(on:_:)``):
/// 1. **Lock.** One writer at a time in this process (``WriterLock``): writers queue here
///    instead of spinning on `SQLITE_BUSY`, and the checkpointer can take the lock with
///    priority for a WAL reset.
/// 2. **Begin.** `BEGIN IMMEDIATE` takes SQLite's write lock, so the snapshot is the newest
///    commit and stays the transaction's own until `COMMIT` (``begin(_:database:)``). Its
///    commit counter is known from the WAL-index header when a transaction of this database
///    already read that header's counter, and read from the newest row of `snapshotdb_history`
///    otherwise. Commits of other processes found here are published with their history rows;
///    the extension catalog is compared with this process's registry (``ExtensionUpkeep``).
/// 3. **Seal.** Values changed by foreign clients (the `sqlite3` shell) carry no commit number;
///    the schema's triggers count them and note their keys. Found here, they are committed
///    first as a commit of their own, with a changeset of those keys (``seal(_:on:database:)``).
/// 4. **Run the caller's closure.** Reads see the transaction's own writes; savepoints nest.
///    A closure that throws, rolls back or changes nothing ends with `ROLLBACK` and makes no
///    commit.
/// 5. **Commit** (``commit(_:history:sealing:on:database:writer:)``): the counter goes up by
///    one in the same SQLite transaction; the changeset is registered as *pending* just before
///    `COMMIT` (a reader that sees the new counter before step 6 takes it from there, so no
///    reader ever sees a commit without its exact changeset); `COMMIT`.
/// 6. **Announce.** One ``CommitEvent`` (the changeset, what the extension writers hand on,
///    where the commit ended in the WAL, the header it left) goes to the database once
///    (``Database/announce(_:)``): the commit log publishes it to bookmarks and `changes()`
///    subscribers, then the ``CommitDispatcher`` hands it to every subscriber.
///
/// Readers never wait here: a reader that finds foreign writes not yet sealed seals them only
/// if the lock and SQLite's write lock are free at once (one commit, bounded by one `fsync`),
/// and otherwise reads them unsealed and asks for them to be sealed off its path
/// (``sealWithoutWaiting(on:database:)``, ``requestSeal(_:attempt:)``).
final class Writer: Sendable {
    /// One writer at a time in this process, held across the caller's closure.
    let lock = WriterLock()
    /// Whether a seal of foreign writes is queued on the checkpoint queue.
    let sealQueued = Atomic<Bool>(false)

    // MARK: Read-write transactions

    /// Runs `body` in a read-write transaction on `connection` and commits what it changed.
    func write<T>(on connection: ConnectionCore, _ body: (ReadWriteTransaction) throws -> T) throws -> T {
        let database = connection.database
        try connection.checkCanWrite()
        try database.checkWritable("a read-write transaction")
        try database.checkWriteAllowed()
        if lock.isHeldByCurrentThread {
            throw DatabaseError(
                .misuse,
                "connection '\(connection.name)' began a read-write transaction inside another read-write "
                    + "transaction of the same database on this thread, which would wait for itself; "
                    + "write through the transaction you were given")
        }
        let handle = try connection.handle()
        lock.lock()
        defer { lock.unlock() }
        // Writers of other processes take turns with this one (``WriterTurns``).
        let turns = database.writerTurns
        let busyTimeout = database.configuration.busyTimeout
        let waitStarted = ContinuousClock.now
        // (None while a replicator keeps the WAL: see ``Configuration/Checkpointing/writersTakeTurns``.)
        let turn: WriterTurns.Outcome =
            turns.takeCarried()
            ? .held
            : !database.checkpointer.checkpointing.writersTakeTurns
                ? .unavailable
                : turns.acquireIfOthersWrite(
                    headerChange: handle.walIndexHeader()?.change, within: busyTimeout)
        defer { if turn == .held { turns.finish(othersOfThisProcessWait: lock.hasWaitingWriters) } }
        let start = try begin(handle, database: database, after: turn, waitingSince: waitStarted)
        let upkeep: ExtensionUpkeep
        do {
            upkeep = try database.extensionUpkeep(on: handle)
        } catch {
            connection.rollback(handle)
            throw error
        }
        connection.beginWrite(at: start)
        defer { connection.endWrite() }
        let transaction = ReadWriteTransaction(core: connection, commit: start)
        transaction.extensionWriters.keep(upkeep)
        // Declared after the lock's `defer`, so it runs first: still under the lock.
        var committed = false
        defer { if !committed { transaction.runRollbackActions() } }
        let result: T
        do {
            result = try body(transaction)
            // SQLite may have ended the transaction after an error `body` caught: nothing more is
            // written then (it would commit on its own, outside any transaction). A view's
            // non-throwing read may have recorded an error no throwing call met since.
            if let error = connection.transactionEndedBySQLite() ?? transaction.takeRecordedFailure()
                ?? transaction.failure
            {
                throw error
            }
            // Extension writers place what they hold back (a view's new items, placed together)
            // while the transaction still reads.
            if !transaction.isRollbackRequested { try transaction.extensionWriters.flush() }
            transaction.end()
            // And what the flush itself may have recorded.
            if let error = connection.transactionEndedBySQLite() ?? transaction.failure { throw error }
        } catch {
            transaction.end()
            // The first error wins; a failed ROLLBACK closes the handle, which rolls back.
            connection.rollback(handle)
            throw error
        }
        guard !transaction.isRollbackRequested,
            !transaction.changes.isEmpty || transaction.extensionWriters.hasChanges
        else {
            if !transaction.isRollbackRequested && transaction.wroteBookkeeping {
                // Only bookkeeping (a consumer's acknowledgement): committed, but it changes no
                // value, so it is not a commit of the database and gets no number.
                let before = handle.walIndexHeader()
                do throws(DatabaseError) {
                    try handle.statement(.commit).execute()
                } catch {
                    connection.rollback(handle)
                    throw error
                }
                turns.didCommit(on: handle, headerBefore: before)
                committed = true
                return result
            }
            // Nothing to commit: what the transaction did in memory stands (a registration of an
            // extension the file already holds changes no row), unless it asked to roll back.
            committed = !transaction.isRollbackRequested
            try connection.rollbackOrThrow(handle)
            return result
        }
        // Extensions (views, indexes) updated their tables with every write; what they report
        // of this commit travels in its changeset.
        var extensionChanges: ExtensionChanges
        var newlyStale: [String] = []
        do {
            extensionChanges = try transaction.extensionWriters.finish()
            // Extensions of the file this process does not keep, whose values changed: marked
            // stale in this commit, so that no reader takes their rows for current.
            let stale = try markStale(
                upkeep, changes: transaction.changes, commit: start + 1, connection: connection.name,
                handle: handle, rebuilt: extensionChanges.reset)
            extensionChanges.reset.formUnion(stale.marked)
            newlyStale = stale.newlyStale
        } catch {
            connection.rollback(handle)
            throw error
        }
        let changeset = transaction.changes.build(
            commit: start + 1, connectionName: connection.name, info: transaction.info,
            extensionChanges: extensionChanges)
        let source = CommitLog.Source.transaction(
            connection: connection.name, operations: transaction.changes.operations,
            clearedAll: transaction.changes.clearedAllCollections)
        let caches = transaction.extensionWriters.handOff().map { (start: start, written: $0) }
        try commit(
            changeset, from: source, sealing: false, on: handle, database: database, writer: connection,
            extensionCaches: caches)
        committed = true
        if !newlyStale.isEmpty {
            // Once per extension (until it is rebuilt): every process's reads of it now throw
            // `extensionStale`, which the process that caused it should hear of.
            let names = newlyStale.sorted()
            let message =
                "commit \(changeset.commit) of connection '\(connection.name)' changed values of extensions "
                + "this process does not keep (it did not register them, or registered another version), now "
                + "stale for every process until one that keeps them rebuilds them: \(names) (register the "
                + "file's extensions in every process that writes)"
            database.logger.warning(
                "\(message)", metadata: ["stale_extensions": "\(names.joined(separator: ","))"])
        }
        return result
    }

    /// ``begin(_:database:)`` after waiting for a turn since `waitingSince`: SQLite's busy
    /// handler gets what is left of the busy timeout (nothing after a turn that timed out).
    private func begin(
        _ handle: SQLiteHandle, database: Database, after turn: WriterTurns.Outcome,
        waitingSince: ContinuousClock.Instant
    ) throws(DatabaseError) -> UInt64 {
        let configured = database.configuration.busyTimeout
        switch turn {
        case .unavailable:
            return try begin(handle, database: database)
        case .timedOut:
            return try handle.withBusyTimeout(.zero, restoring: configured) { () throws(DatabaseError) in
                try begin(handle, database: database)
            }
        case .held:
            let waited = ContinuousClock.now - waitingSince
            guard waited > .milliseconds(1) && configured > .zero else {
                return try begin(handle, database: database)
            }
            return try handle.withBusyTimeout(max(.zero, configured - waited), restoring: configured) {
                () throws(DatabaseError) in try begin(handle, database: database)
            }
        }
    }

    /// `BEGIN IMMEDIATE` on `handle` (the caller holds ``lock``), sealing foreign writes first;
    /// returns the commit the transaction starts from.
    private func begin(_ handle: SQLiteHandle, database: Database) throws(DatabaseError) -> UInt64 {
        while true {
            let published = database.commitLog.publishedCommit.load(ordering: .acquiring)
            try handle.statement(.beginImmediate).execute()
            do throws(DatabaseError) {
                // BEGIN IMMEDIATE holds SQLite's WAL write lock: the WAL-index header cannot
                // change before this transaction ends, and it is this transaction's snapshot.
                handle.lookUpWALIndex()
                let state = try database.commitState(
                    of: handle, header: handle.walIndexHeader(), published: published)
                // Commits of other processes: published with their history, read here.
                database.publishCommits(through: state.commit, reading: handle)
                guard state.unsealed != 0 else { return state.commit }
                try seal(state, on: handle, database: database)
            } catch {
                handle.rollback(after: "an error beginning a write transaction", logger: database.logger)
                throw error
            }
        }
    }

    /// Marks stale every extension of `upkeep.unmaintained` whose collections `changes` touched
    /// (every one for `changes == nil`: foreign writes), except those this transaction rebuilt
    /// or dropped itself; returns their names.
    func markStale(
        _ upkeep: ExtensionUpkeep, changes: ChangesetBuilder?, commit: UInt64, connection: String?,
        handle: SQLiteHandle, rebuilt: Set<String> = []
    ) throws(DatabaseError) -> (marked: [String], newlyStale: [String]) {
        guard !upkeep.unmaintained.isEmpty else { return ([], []) }
        let changed = Set(changes?.operations.map(\.collection) ?? [])
        let clearedAll = changes?.clearedAllCollections ?? true
        var marked: [String] = []
        var newlyStale: [String] = []
        for entry in upkeep.unmaintained where !rebuilt.contains(entry.name) {
            guard changes == nil || entry.observesAny(of: changed, clearedAll: clearedAll) else { continue }
            if try ExtensionCatalog.markStale(
                entry.name, commit: commit, connection: connection, handle: handle)
            {
                newlyStale.append(entry.name)
            }
            marked.append(entry.name)
        }
        return (marked, newlyStale)
    }

    // MARK: Committing

    /// Commits the open `BEGIN IMMEDIATE` transaction as `changeset.commit`: its history row
    /// (which is the counter), the pending changeset, `COMMIT`, publishing, and the one report
    /// to the checkpointer.
    ///
    /// `sealing` also marks every foreign write as sealed. `writer` is the connection whose
    /// transaction this is (`nil` for a seal), whose snapshot is released before `COMMIT`.
    /// On failure the transaction is rolled back and nothing is published.
    func commit(
        _ changeset: Changeset, from source: CommitLog.Source, sealing: Bool, on handle: SQLiteHandle,
        database: Database, writer connection: ConnectionCore?,
        extensionCaches: (start: UInt64, written: [ExtensionCaches.Written])? = nil
    ) throws(DatabaseError) {
        let commit = changeset.commit
        let origin: CommitEvent.Origin
        if let connection, case .transaction(_, let operations, _) = source {
            origin = .transaction(writer: connection, operations: operations, changeset: changeset)
        } else {
            origin = .seal(changeset)
        }
        do throws(DatabaseError) {
            try database.commitLog.prepare(changeset, from: source, on: handle)
            if sealing { try handle.statement(.sealExternal).execute() }
        } catch {
            database.commitLog.discardPending()
            handle.rollback(after: "an error writing commit \(commit)'s history", logger: database.logger)
            throw error
        }
        // Release the writer's snapshot before `COMMIT`: once SQLite commits, a reader may
        // publish this commit from the pending changeset before this thread runs again, and the
        // monitor must never see a writer's start commit as lagging behind its own commit. A
        // writer's snapshot is the newest by construction (`BEGIN IMMEDIATE`); it pins nothing.
        connection?.endWrite(committing: commit)
        // The header cannot change before COMMIT (this transaction holds the WAL write lock).
        let before = handle.walIndexHeader()
        _ = handle.takeCommitFrames()
        do throws(DatabaseError) {
            if database.faults.shouldFail(.commit) { throw FaultInjector.error(.commit) }
            try handle.statement(.commit).execute()
        } catch {
            database.commitLog.discardPending()
            connection?.commitFailed(startedFrom: commit - 1)
            handle.rollback(after: "a failed COMMIT of commit \(commit)", logger: database.logger)
            throw error
        }
        // The commit, once: everything that reacts to it hears of it through its event.
        var event = CommitEvent(origin, commit: commit)
        // SQLite adds one to the header's change counter per commit: one more than before, the
        // header is this commit's (perhaps with the WAL reset since, which changes no content);
        // more, another client committed too, and the next transaction reads the counter.
        if let before, let after = handle.walIndexHeader(), after.change == before.change &+ 1 {
            event.walHeader = after
        }
        // This commit's change counter (the header could not change before COMMIT): a writer
        // that finds another one has seen a commit of another process since.
        event.walChange = before.map { $0.change &+ 1 }
        event.walFrames = handle.takeCommitFrames()
        event.extensionCaches = extensionCaches
        database.announce(event)
    }
}
