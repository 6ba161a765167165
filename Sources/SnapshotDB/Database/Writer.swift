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
    private let sealQueued = Atomic<Bool>(false)

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
        // None while a replicator holds the WAL: Litestream takes SQLite's write lock for its
        // own checkpoints through the busy handler, and turns leave it fewer moments to.
        let turn: WriterTurns.Outcome =
            turns.takeCarried()
            ? .held
            : database.checkpointer.replicator != nil
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
    private func markStale(
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

    // MARK: Sealing foreign writes

    /// Up to this many keys changed by foreign clients, the extensions are kept item by item
    /// when the writes are sealed (``keepAfterForeignWrites(_:_:handle:excluding:)``); past it
    /// they are rebuilt. An item costs about what a one-row move into a view costs (about 180k
    /// instructions in a keyed view); a rebuild costs a scan of every value and its decoding.
    static var foreignKeysKeptOneByOne: Int { 4_096 }

    /// Keeps the extensions this process keeps up to date with the keys foreign clients changed
    /// (`operations`), in the open write transaction on `handle`, one item at a time as a write
    /// transaction keeps them: the values are the new ones already, and each extension finds
    /// what it held of an item in its own tables (a keyed view's map and pages, an index's row,
    /// a full-text index's map). Returns what they add to the changeset (a keyed view's record
    /// of the items it moved, whose places before come from its pages, so that readers get exact
    /// row changes), and the names of the extensions it left for a rebuild: closure-ordered
    /// views. Those compare an item with its neighbours' values, and the neighbours the foreign
    /// client changed too still stand where their old values put them, so a search among them
    /// could go astray; and their record would hold the values before, which are gone.
    ///
    /// Returns `nil`, having changed nothing, when an extension cannot keep an item: it cannot
    /// decode a value, or its tables cannot be read (a page row a foreign client damaged). The
    /// caller then rebuilds everything, as the seal always did: that drops and refills damaged
    /// tables, and marks what cannot decode stale, so that neither keeps every write from
    /// starting. (An error SQLite meets again in the rebuild, a full disk, is thrown from there.)
    private static func keepAfterForeignWrites(
        _ operations: [ChangesetBuilder.Operation], _ database: Database, handle: SQLiteHandle,
        excluding excluded: Set<String>
    ) throws(DatabaseError) -> (changes: ExtensionChanges, rebuild: Set<String>)? {
        guard database.extensionCount.load(ordering: .acquiring) > 0 else { return (ExtensionChanges(), []) }
        let codecs = database.frozenCodecs()
        let json = JSONValueCodec()
        // Dependents last (``Database/extensionDefinitions()``): a search-results view asks its
        // full-text index about an item after the index took the item's new text.
        var writers: [(definition: any ExtensionDefinition, writer: any ExtensionWriter)] = []
        var rebuild: Set<String> = []
        for definition in database.extensionDefinitions() where !excluded.contains(definition.name) {
            let context = ExtensionContext(handle: handle, name: definition.name, memo: nil) {
                codecs[$0] ?? json
            }
            if !definition.keepsItemsAfterForeignWrites(context) {
                rebuild.insert(definition.name)
                continue
            }
            writers.append((definition, definition.makeWriter(context)))
        }
        guard !writers.isEmpty else { return (ExtensionChanges(), rebuild) }
        try handle.execute("SAVEPOINT snapshotdb_seal_keep")
        do {
            let read = try handle.statement(.getData)
            for operation in operations {
                let data =
                    operation.kind == .set ? try read.fetchBlob(operation.collection, operation.key) : nil
                for (definition, writer) in writers where definition.observes(operation.collection) {
                    if let data {
                        try writer.willSet(data, forKey: operation.key, inCollection: operation.collection)
                    } else {
                        try writer.willRemove(forKey: operation.key, inCollection: operation.collection)
                    }
                }
            }
            var changes = ExtensionChanges()
            for (definition, writer) in writers {
                if let record = try writer.finish() { changes.byName[definition.name] = record }
            }
            try handle.execute("RELEASE snapshotdb_seal_keep")
            return (changes, rebuild)
        } catch {
            try handle.execute("ROLLBACK TO snapshotdb_seal_keep; RELEASE snapshotdb_seal_keep")
            return nil
        }
    }

    /// Rebuilds the extensions this process keeps, after foreign writes, in the open write
    /// transaction on `handle`; returns those that could not decode a value a foreign client
    /// wrote, left as they were, for the caller to mark stale.
    ///
    /// A value no extension can read must not keep every write of the database from starting
    /// (the write that would remove it included): its extensions are marked stale instead, and
    /// registering them again (once the value is fixed or removed) rebuilds them. All are first
    /// rebuilt together in one pass; only when that meets such a value is each rebuilt on its
    /// own, in a savepoint that a failure rolls back.
    private static func rebuildAfterForeignWrites(
        _ database: Database, handle: SQLiteHandle, excluding excluded: Set<String>
    ) throws(DatabaseError) -> [String] {
        try handle.execute("SAVEPOINT snapshotdb_seal_rebuild")
        do {
            try ExtensionWriters.rebuildAll(database, handle: handle, excluding: excluded)
            try handle.execute("RELEASE snapshotdb_seal_rebuild")
            return []
        } catch {
            guard error.code == .decodingFailed else { throw error }
            try handle.execute("ROLLBACK TO snapshotdb_seal_rebuild")
        }
        let definitions = database.extensionDefinitions().filter { !excluded.contains($0.name) }
        let names = definitions.map(\.name)
        var undecodable: [String] = []
        // Dependencies first (``Database/extensionDefinitions()``): an extension that reads one
        // left stale (a search-results view its full-text index) is left stale with it.
        for definition in definitions {
            let name = definition.name
            if definition.dependencies.contains(where: undecodable.contains) {
                undecodable.append(name)
                continue
            }
            try handle.execute("SAVEPOINT snapshotdb_seal_rebuild_one")
            do {
                try ExtensionWriters.rebuildAll(
                    database, handle: handle, excluding: excluded.union(names.filter { $0 != name }))
                try handle.execute("RELEASE snapshotdb_seal_rebuild_one")
            } catch {
                guard error.code == .decodingFailed else { throw error }
                try handle.execute(
                    "ROLLBACK TO snapshotdb_seal_rebuild_one; RELEASE snapshotdb_seal_rebuild_one")
                undecodable.append(name)
            }
        }
        try handle.execute("RELEASE snapshotdb_seal_rebuild")
        return undecodable
    }

    /// Gives the foreign writes of the open `BEGIN IMMEDIATE` transaction a commit number of
    /// their own and commits them, with a changeset of the keys the schema's triggers noted
    /// (an external one when none were noted: a backup put back from outside fires no trigger).
    ///
    /// They are numbered after every commit this process published: the file's counter is
    /// lower than that after a foreign restore of a backup, and numbers must never repeat.
    private func seal(_ state: CommitState, on handle: SQLiteHandle, database: Database) throws(DatabaseError)
    {
        database.publishCommits(through: state.commit, reading: handle)
        let sealed = max(state.commit, database.latestCommit) + 1
        // A counter below what this process published, or another history at the same counter,
        // is older contents put back from outside: the keys the triggers noted (perhaps in the
        // backup) do not say what changed.
        let isRestore = state.isAnotherHistory || state.commit < database.latestCommit
        var operations: [ChangesetBuilder.Operation] = []
        do throws(DatabaseError) {
            let noted = try handle.idleStatement(.foreignChanges)
            defer { noted.reset() }
            while !isRestore, try noted.step() {
                operations.append(
                    .init(
                        kind: noted.int64(at: 2) != 0 ? .set : .remove, collection: noted.string(at: 0),
                        key: noted.string(at: 1)))
            }
            try handle.statement(.clearForeignChanges).execute()
        } catch {
            handle.rollback(after: "an error reading foreign writes to seal", logger: database.logger)
            throw error
        }
        // Foreign clients changed values without the extensions' upkeep. With the keys known
        // (and not too many), the extensions this process keeps are kept item by item, as a
        // write transaction keeps them, and record what they changed; otherwise (or when one of
        // them cannot decode a value) they are rebuilt, and the changeset resets every
        // extension, so their readers reload. The file's others are marked stale.
        let upkeep = try database.extensionUpkeep(on: handle)
        var extensions = ExtensionChanges(resetsAll: true)
        var undecodable: [String] = []
        if !operations.isEmpty, operations.count <= Self.foreignKeysKeptOneByOne,
            let kept = try Self.keepAfterForeignWrites(
                operations, database, handle: handle, excluding: upkeep.excluded)
        {
            extensions = kept.changes
            if !kept.rebuild.isEmpty {
                // Only those left for a rebuild (and after the others: a search-results view
                // reads its full-text index as it is now).
                let others = Set(database.extensionDefinitions().map(\.name)).subtracting(kept.rebuild)
                undecodable = try Self.rebuildAfterForeignWrites(
                    database, handle: handle, excluding: upkeep.excluded.union(others))
                extensions.reset.formUnion(kept.rebuild)
            }
        } else {
            undecodable = try Self.rebuildAfterForeignWrites(
                database, handle: handle, excluding: upkeep.excluded)
        }
        // Those marked stale now are named too, as a write transaction names them: their readers
        // must not take the commit for one that left them as they were.
        let marked = try markStale(upkeep, changes: nil, commit: sealed, connection: nil, handle: handle)
        extensions.reset.formUnion(marked.marked)
        for name in undecodable {
            try ExtensionCatalog.markStale(name, commit: sealed, connection: nil, handle: handle)
        }
        let date = Date()
        guard !operations.isEmpty else {
            try commit(
                .external(sealed...sealed, date: date),
                from: .unknown,
                sealing: true, on: handle, database: database, writer: nil)
            return
        }
        let changeset = Changeset(
            commits: sealed...sealed, keys: ChangedKeys(log: operations), clearedAllCollections: false,
            connectionName: nil, date: date, info: [:], isExternal: false, extensionChanges: extensions)
        try commit(
            changeset, from: .foreign(operations: operations), sealing: true, on: handle, database: database,
            writer: nil)
    }

    /// For a reader that found foreign writes unsealed in its snapshot: seals them now if this
    /// costs no waiting (the writer lock free, SQLite's write lock free), else asks for them
    /// to be sealed off the reader's path. Returns whether they were sealed; `handle` must
    /// have no open transaction.
    ///
    /// A reader never waits for a writer here: at worst it makes one commit (one `fsync`).
    func sealWithoutWaiting(on handle: SQLiteHandle, database: Database) -> Bool {
        guard database.replica == nil else { return false }
        guard lock.tryLock() else {
            requestSeal(database)
            return false
        }
        defer { lock.unlock() }
        do {
            try sealNow(on: handle, database: database, busyTimeout: .zero)
            return true
        } catch {
            // Busy (another process writes: its commit is sealed by the next transaction) or
            // impossible (a read-only file): the reader reads the writes unsealed.
            if error.code == .busy { requestSeal(database) }
            return false
        }
    }

    /// Queues a seal of foreign writes on the checkpoint queue, with the checkpoint handle,
    /// unless one is queued already. It waits a few milliseconds at most for the writer lock
    /// and for another process's write lock at a time, and tries again later (backing off to
    /// every 50 ms) rather than hold up the checkpoint queue, until the writes are sealed, the
    /// seal turns out impossible (a read-only file), or the database is released.
    func requestSeal(_ database: Database, attempt: Int = 0) {
        // A read replica cannot seal: its writes are the primary's to make.
        guard database.replica == nil else { return }
        guard
            attempt > 0
                || sealQueued.compareExchange(
                    expected: false, desired: true, ordering: .acquiringAndReleasing
                ).exchanged
        else { return }
        let weakDatabase = WeakDatabase(database)
        let work: @Sendable () -> Void = { [self] in
            guard let database = weakDatabase.database else {
                sealQueued.store(false, ordering: .releasing)
                return
            }
            let outcome = database.checkpointer.withCheckpointHandle { handle in
                sealQueuedWrites(on: handle, database: database)
            }
            if outcome == .retry {
                requestSeal(database, attempt: attempt + 1)
            } else {
                sealQueued.store(false, ordering: .releasing)
            }
        }
        let delay: Duration = attempt == 0 ? .zero : .milliseconds(min(50, 1 << min(attempt, 6)))
        database.checkpointer.queue.asyncAfter(deadline: .now() + delay.dispatchInterval, execute: work)
    }

    private enum SealOutcome {
        case done
        case retry
    }

    private func sealQueuedWrites(on handle: SQLiteHandle?, database: Database) -> SealOutcome {
        guard let handle else { return .done }
        let deadline = Date(timeIntervalSinceNow: Checkpointer.resetWait.timeInterval)
        guard lock.lockWithPriority(before: deadline) else { return .retry }
        defer { lock.unlock() }
        do {
            try sealNow(on: handle, database: database, busyTimeout: Checkpointer.resetWait)
            return .done
        } catch {
            return error.code == .busy ? .retry : .done
        }
    }

    /// With the lock held: begins on `handle`, waiting at most `busyTimeout` for SQLite's
    /// write lock, and seals what it finds unsealed.
    private func sealNow(on handle: SQLiteHandle, database: Database, busyTimeout: Duration)
        throws(DatabaseError)
    {
        let published = database.commitLog.publishedCommit.load(ordering: .acquiring)
        try handle.withBusyTimeout(busyTimeout, restoring: database.configuration.busyTimeout) {
            () throws(DatabaseError) in
            try handle.statement(.beginImmediate).execute()
        }
        defer { handle.rollback(after: "sealing foreign writes", logger: database.logger) }
        let state = try database.commitState(of: handle, header: nil, published: published)
        database.publishCommits(through: state.commit, reading: handle)
        if state.unsealed != 0 { try seal(state, on: handle, database: database) }
    }

    // MARK: Committing

    /// Commits the open `BEGIN IMMEDIATE` transaction as `changeset.commit`: its history row
    /// (which is the counter), the pending changeset, `COMMIT`, publishing, and the one report
    /// to the checkpointer.
    ///
    /// `sealing` also marks every foreign write as sealed. `writer` is the connection whose
    /// transaction this is (`nil` for a seal), whose snapshot is released before `COMMIT`.
    /// On failure the transaction is rolled back and nothing is published.
    private func commit(
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
        // (Not on a read replica, whose reader compares each snapshot's history token.)
        if let header, replica == nil, let commit = knownCommit(at: header) {
            #if DEBUG
                let read = try handle.readCommitState()
                assert(read.isSealed(at: commit), "wrong commit for a known header")
            #endif
            return CommitState(commit: commit, unsealed: 0)
        }
        var state = try handle.readCommitState()
        // On a read replica each connection follows the replica on its own (Litestream's VFS
        // polls it per connection): a snapshot behind another connection's is not older contents
        // put back, only a connection that has not caught up yet.
        if state.unsealed == 0 && state.commit < published && replica == nil { state.unsealed = 1 }
        state.hasUnnumberedForeignWrites = state.unsealed != 0
        // At the commit this process published last, another token is another history at the
        // same counter (a backup with as many commits put back, another database's file
        // restored over this one): the same, so that its external changeset drops caches and
        // advances see a change (on a replica, where nothing can be sealed, the reader reads
        // it unsealed, with its cache dropped).
        // (Whatever the file's own unsealed count: a restored file may carry foreign writes of
        // its own, which do not say what changed either.)
        if state.commit == published, let token = state.token, let known = commitLog.latestToken,
            known.commit == published, known.token != token
        {
            if replica != nil { markForeignHistory(at: state.commit) }
            state.unsealed = max(state.unsealed, 1)
            state.isAnotherHistory = true
            // On a primary, older contents put back from outside: not numbered yet.
            if replica == nil { state.hasUnnumberedForeignWrites = true }
        }
        // On a read replica, a snapshot whose row has another token than the one published
        // under its number is the primary put back to an older commit (a point-in-time restore)
        // that went on, or not, with other commits: the log's changesets are perhaps another
        // history's. They are marked so (no reader moves its cache or reports an advance by
        // them), and this snapshot is read unsealed, with its cache dropped, and reported as
        // external even when the bookmark moved back to it. (Whatever `published`, loaded before
        // the transaction began: the log's tokens are read now.)
        if replica != nil, let token = state.token, let known = commitLog.token(of: state.commit),
            known != token
        {
            markForeignHistory(at: state.commit)
            state.unsealed = max(state.unsealed, 1)
            state.isAnotherHistory = true
        }
        if state.unsealed == 0, let header {
            learnCommit(state.commit, at: header)
            // (A replica's frames are its VFS's, not a WAL this process checkpoints.)
            if replica == nil {
                checkpointer.didSeeCommit(state.commit, frames: header.commitFrames) {
                    commitLog.publishedCommit.load(ordering: .sequentiallyConsistent)
                }
            }
        }
        return state
    }
}
