internal import Dispatch
internal import Foundation
internal import Logging
internal import SnapshotDBLocking

internal import struct Synchronization.Atomic

/// Sealing writes of foreign clients (the `sqlite3` shell): numbering them as a commit of their
/// own, with the extensions kept key by key or rebuilt (see ``Writer``, step 3).
extension Writer {
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
                let record = try writer.finish()
                if writer.recordsReload {
                    changes.reset.insert(definition.name)
                } else if let record {
                    changes.byName[definition.name] = record
                }
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
    func seal(_ state: CommitState, on handle: SQLiteHandle, database: Database) throws(DatabaseError) {
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
        guard database.role.writesTheFile else { return false }
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
        guard database.role.writesTheFile else { return }
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
}
