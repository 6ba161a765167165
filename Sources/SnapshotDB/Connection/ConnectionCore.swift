internal import Foundation
internal import Synchronization

/// The state of one connection, touched only on the connection's serial queue.
///
/// `@unchecked Sendable` is sound because ``Connection`` is the only owner of a core and runs
/// every method of it inside `queue.sync` or `queue.async` on its own serial queue; the core is
/// never reachable from another thread.
final class ConnectionCore: @unchecked Sendable {
    let database: Database
    let name: String
    let id: Int
    let cache: ValueCache
    private var openedHandle: SQLiteHandle?
    private var codecs: [String: any ValueCodec]?
    private let defaultCodec = JSONValueCodec()
    /// The bookmarked commit while a long-lived read transaction is open.
    private(set) var bookmark: UInt64?
    /// Whether the database's record of this connection holds a snapshot (this connection is
    /// the only one that sets or clears it).
    private var hasRecordedSnapshot = false

    init(database: Database, name: String, id: Int) {
        self.database = database
        self.name = name
        self.id = id
        self.cache = ValueCache(limit: database.configuration.cacheLimit)
    }

    deinit {
        guard bookmark != nil else { return }
        // Close the handle first, so that the bookmark no longer pins the WAL when the
        // checkpointer looks.
        openedHandle = nil
        database.checkpointer.snapshotReleased(commit: 0, wasBookmark: true)
    }

    /// The SQLite handle, opened and configured on first use.
    func handle() throws(DatabaseError) -> SQLiteHandle {
        if let openedHandle { return openedHandle }
        let configuration = database.configuration
        let handle = try SQLiteHandle(path: database.path)
        handle.setBusyTimeout(milliseconds: configuration.busyTimeoutMilliseconds)
        try handle.configureForSnapshotDB(
            synchronous: configuration.synchronous, journalSizeLimit: configuration.journalSizeLimit)
        handle.setWALHook(database.checkpointer)
        openedHandle = handle
        return handle
    }

    /// The codec of `collection`; the registry is frozen at the connection's first use.
    func codec(for collection: String) -> any ValueCodec {
        if codecs == nil { codecs = database.frozenCodecs() }
        return codecs?[collection] ?? defaultCodec
    }

    // MARK: Snapshots

    /// Reads the commit counter and the count of unsealed foreign writes in the open
    /// transaction; the first read of a deferred transaction also fixes its snapshot.
    /// `published` is ``Database/publishedCommit`` as loaded before the transaction began.
    private func readState(_ handle: SQLiteHandle, published: UInt64) throws(DatabaseError) -> (
        commit: UInt64, unsealed: Int64
    ) {
        let statement = try handle.statement(.readState)
        defer { statement.reset() }
        // The scalar subqueries always give a row; NULLs mean another client deleted rows of
        // snapshotdb_meta, without which commits would be numbered wrong or not at all.
        guard try statement.step(), !statement.isNull(at: 0), !statement.isNull(at: 1) else {
            throw Schema.damagedMetadata(path: handle.path)
        }
        let commit = UInt64(max(0, statement.int64(at: 0)))
        let unsealed = statement.int64(at: 1)
        // A counter below a commit this process already published: another client put older
        // contents back (the `sqlite3` shell's `.restore` of a backup, which fires no trigger).
        // Treated as an unsealed foreign write: sealing numbers it after the newest commit
        // published, so commit numbers never repeat, and its external changeset drops caches.
        if unsealed == 0 && commit < published { return (commit, 1) }
        return (commit, unsealed)
    }

    /// Fixes the snapshot of the read transaction just begun and returns its state.
    ///
    /// `before` is the WAL-index header read just before `BEGIN`. When the header is the same
    /// once the snapshot is fixed, it is the snapshot's header (headers never repeat), and if a
    /// transaction of this database already knows that header's commit counter, the metadata
    /// table is not read at all. Otherwise the counter is read, and learnt for that header.
    private func readSnapshotState(
        _ handle: SQLiteHandle, headerBefore before: WALIndexHeader?, published: UInt64
    ) throws(DatabaseError) -> (commit: UInt64, unsealed: Int64) {
        if let before, let commit = database.knownCommit(at: before) {
            let fix = try handle.statement(.fixSnapshot)
            defer { fix.reset() }
            _ = try fix.step()
            guard handle.walIndexHeader() == before else {
                return try readState(handle, published: published)
            }
            #if DEBUG
                let read = try readState(handle, published: published)
                assert(read.commit == commit && read.unsealed == 0, "wrong commit for a known header")
            #endif
            return (commit, 0)
        }
        let state = try readState(handle, published: published)
        handle.lookUpWALIndex()
        if state.unsealed == 0, let before, handle.walIndexHeader() == before {
            database.learnCommit(state.commit, at: before)
        }
        return state
    }

    /// Begins a deferred read transaction, fixes its snapshot and returns the commit it sees,
    /// with the cache moved to that commit.
    ///
    /// Foreign writes found unsealed are sealed first (given a commit number and an external
    /// changeset) through the writer path; if that is impossible (a read-only file), the read
    /// goes on with the cache dropped, which is always safe.
    private func beginReadSnapshot() throws(DatabaseError) -> UInt64 {
        try beginReadSnapshotMovingCache().commit
    }

    /// ``beginReadSnapshot()``, also returning the commit the cache moved from and the
    /// changesets it moved by (`nil` when it was dropped instead), so that an advance does not
    /// fetch them from the commit log twice.
    private func beginReadSnapshotMovingCache() throws(DatabaseError) -> (
        commit: UInt64, cacheMovedFrom: UInt64, changesets: [Changeset]?
    ) {
        let handle = try handle()
        var attempts = 0
        while true {
            let before = handle.walIndexHeader()
            let published = database.publishedCommit.load(ordering: .acquiring)
            try handle.statement(.begin).execute()
            let state: (commit: UInt64, unsealed: Int64)
            do throws(DatabaseError) {
                state = try readSnapshotState(handle, headerBefore: before, published: published)
            } catch {
                endTransaction(handle)
                throw error
            }
            guard state.unsealed != 0 else {
                let movedFrom = cache.commit
                let changesets = moveCache(to: state.commit)
                return (state.commit, movedFrom, changesets)
            }
            attempts += 1
            // Sealing takes the writer lock. When this thread holds it (a read inside another
            // connection's write transaction), waiting would be for itself: read unsealed.
            if attempts > 2 || database.writerLock.isHeldByCurrentThread {
                database.observe(commit: state.commit)
                let movedFrom = cache.commit
                cache.removeAll()
                cache.commit = state.commit
                return (state.commit, movedFrom, nil)
            }
            endTransaction(handle)
            database.writerLock.lock()
            defer { database.writerLock.unlock() }
            do {
                _ = try beginWriteTransaction(handle)
                endTransaction(handle)
            } catch {
                attempts = 3
            }
        }
    }

    /// Begins `BEGIN IMMEDIATE` (the caller holds the writer lock), sealing foreign writes
    /// first, and returns the commit the transaction starts from.
    private func beginWriteTransaction(_ handle: SQLiteHandle) throws(DatabaseError) -> UInt64 {
        while true {
            let published = database.publishedCommit.load(ordering: .acquiring)
            try handle.statement(.beginImmediate).execute()
            do throws(DatabaseError) {
                // BEGIN IMMEDIATE holds SQLite's WAL write lock: the WAL-index header cannot
                // change before this transaction ends, and it is this transaction's snapshot.
                handle.lookUpWALIndex()
                let header = handle.walIndexHeader()
                let state: (commit: UInt64, unsealed: Int64)
                if let header, let commit = database.knownCommit(at: header) {
                    state = (commit, 0)
                    #if DEBUG
                        let read = try readState(handle, published: published)
                        assert(read.commit == commit && read.unsealed == 0, "wrong commit for a known header")
                    #endif
                } else {
                    state = try readState(handle, published: published)
                    if state.unsealed == 0, let header { database.learnCommit(state.commit, at: header) }
                }
                guard state.unsealed != 0 else {
                    moveCache(to: state.commit)
                    return state.commit
                }
                // Foreign clients changed values without a commit number: give their changes
                // one commit of their own before this transaction's, after every number this
                // process has published (the file's counter is lower after a foreign restore).
                database.observe(commit: state.commit)
                let sealed = max(state.commit, database.latestCommit) + 1
                let update = try handle.statement(.writeCommit)
                try update.bind(Int64(sealed), at: 1)
                try update.execute()
                try handle.statement(.sealExternal).execute()
                database.registerPending(Changeset(commit: sealed, isExternal: true))
                do throws(DatabaseError) {
                    try handle.statement(.commit).execute()
                } catch {
                    database.discardPending(sealed)
                    throw error
                }
                database.observe(commit: sealed)
                database.checkpointer.didCommit(sealed)
            } catch {
                endTransaction(handle)
                throw error
            }
        }
    }

    /// The error to throw when SQLite ended the open transaction on its own, or `nil` while it
    /// is open.
    ///
    /// After some errors (a full disk or an I/O error while the page cache spills to the WAL,
    /// out of memory) SQLite rolls back the whole transaction, and the next statement would run
    /// in autocommit mode: a caller that caught the error and went on would write outside any
    /// transaction, with no commit number. Transactions check this before every use and before
    /// committing, and fail with the code of the error that ended the transaction.
    func transactionEndedBySQLite() -> DatabaseError? {
        guard let openedHandle, openedHandle.isAutocommit else { return nil }
        let cause = openedHandle.lastError
        var message = "SQLite rolled back the transaction after an error; nothing of it can be committed"
        if let cause { message += " (\(cause.message))" }
        return DatabaseError(cause?.code ?? .sqlite, message, sqliteCode: cause?.sqliteCode)
    }

    /// Ends the open transaction without committing anything (reads end this way too).
    private func endTransaction(_ handle: SQLiteHandle) {
        if !handle.isAutocommit { try? handle.statement(.rollback).execute() }
    }

    /// Moves the cache to `commit`, dropping exactly what the commits in between changed, or
    /// everything when the commit log no longer reaches back to the cache's commit.
    ///
    /// Returns the changesets it moved by, or `nil` when it dropped the cache.
    @discardableResult
    private func moveCache(to commit: UInt64) -> [Changeset]? {
        guard cache.commit != commit else {
            database.observe(commit: commit)
            return []
        }
        // `changesets(after:through:)` publishes the commits up to `commit` first.
        if commit > cache.commit, let changesets = database.changesets(after: cache.commit, through: commit) {
            for changeset in changesets { cache.invalidate(with: changeset) }
            cache.commit = commit
            return changesets
        }
        database.observe(commit: commit)
        cache.removeAll()
        cache.commit = commit
        return nil
    }

    private func recordSnapshot(_ commit: UInt64?, bookmark isBookmark: Bool = false) {
        // Ending a snapshot already ended (a writer releases its own before COMMIT) is free.
        guard commit != nil || hasRecordedSnapshot else { return }
        hasRecordedSnapshot = commit != nil
        let now = commit != nil ? ContinuousClock.now : nil
        var released: (commit: UInt64, wasBookmark: Bool)?
        defer {
            if let released {
                database.checkpointer.snapshotReleased(
                    commit: released.commit, wasBookmark: released.wasBookmark)
            }
        }
        database.updateConnection(id) { record in
            released = record.snapshot.map { ($0, record.isBookmark) }
            record.snapshot = commit
            record.isBookmark = isBookmark && commit != nil
            if let commit {
                record.lastSnapshot = commit
                record.since = now
            } else {
                record.since = nil
            }
        }
    }

    // MARK: Transactions

    func read<T>(_ body: (ReadTransaction) throws -> T) throws -> T {
        if let bookmark {
            let transaction = ReadTransaction(core: self, commit: bookmark)
            defer { transaction.end() }
            return try body(transaction)
        }
        let commit = try beginReadSnapshot()
        let handle = try handle()
        recordSnapshot(commit)
        let transaction = ReadTransaction(core: self, commit: commit)
        defer {
            transaction.end()
            endTransaction(handle)
            recordSnapshot(nil)
        }
        return try body(transaction)
    }

    func readWrite<T>(_ body: (ReadWriteTransaction) throws -> T) throws -> T {
        if bookmark != nil {
            throw DatabaseError(
                .longLivedReadTransactionActive,
                "connection '\(name)' holds a long-lived read transaction; write through another connection")
        }
        try database.checkWriteAllowed()
        if database.writerLock.isHeldByCurrentThread {
            throw DatabaseError(
                .misuse,
                "connection '\(name)' began a read-write transaction inside another read-write "
                    + "transaction of the same database on this thread, which would wait for itself; "
                    + "write through the transaction you were given")
        }
        let handle = try handle()
        database.writerLock.lock()
        defer { database.writerLock.unlock() }
        let start = try beginWriteTransaction(handle)
        recordSnapshot(start)
        defer { recordSnapshot(nil) }
        let transaction = ReadWriteTransaction(core: self, commit: start)
        do {
            let result = try body(transaction)
            transaction.end()
            if let error = transactionEndedBySQLite() { throw error }
            guard !transaction.isRollbackRequested, !transaction.changes.isEmpty else {
                endTransaction(handle)
                return result
            }
            try commit(transaction, from: start, handle: handle)
            return result
        } catch {
            transaction.end()
            endTransaction(handle)
            throw error
        }
    }

    /// Bumps the counter, registers the changeset, commits and publishes.
    private func commit(_ transaction: ReadWriteTransaction, from start: UInt64, handle: SQLiteHandle)
        throws(DatabaseError)
    {
        let commit = start + 1
        let update = try handle.statement(.writeCommit)
        try update.bind(Int64(commit), at: 1)
        try update.execute()
        let changeset = transaction.changes.build(
            commit: commit, connectionName: name, info: transaction.info)
        database.registerPending(changeset)
        // Release the writer's snapshot before `COMMIT`: once SQLite commits, a reader may
        // publish this commit from the pending changeset before this thread runs again, and the
        // monitor must never see a writer's start commit as lagging behind its own commit. A
        // writer's snapshot is the newest by construction (`BEGIN IMMEDIATE`); it pins nothing.
        recordSnapshot(nil)
        // The header cannot change before COMMIT (this transaction holds the WAL write lock).
        let before = handle.walIndexHeader()
        do throws(DatabaseError) {
            try handle.statement(.commit).execute()
        } catch {
            database.discardPending(commit)
            throw error
        }
        // SQLite adds one to the header's change counter per commit: one more than before, the
        // header is this commit's (perhaps with the WAL reset since, which changes no content);
        // more, another client committed too, and the next transaction reads the counter.
        if let before, let after = handle.walIndexHeader(), after.change == before.change &+ 1 {
            database.learnCommit(commit, at: after)
        }
        database.publish(commit: commit, committedBy: id)
        database.checkpointer.didCommit(commit)
        cache.invalidate(with: changeset)
        cache.commit = commit
    }

    // MARK: Long-lived read transactions

    func beginLongLivedReadTransaction() throws -> [Changeset] {
        let previous = bookmark
        if previous != nil {
            // End the old SQLite read transaction but keep the old bookmark registered until
            // the new one is: it pins the commit log entries this advance must return.
            bookmark = nil
            if let openedHandle { endTransaction(openedHandle) }
        }
        let snapshot: (commit: UInt64, cacheMovedFrom: UInt64, changesets: [Changeset]?)
        do {
            snapshot = try beginReadSnapshotMovingCache()
        } catch {
            recordSnapshot(nil)
            throw error
        }
        let commit = snapshot.commit
        var changesets: [Changeset] = []
        if let previous, commit > previous {
            if snapshot.cacheMovedFrom == previous, let moved = snapshot.changesets {
                // The cache moved by exactly the commits this advance reports.
                changesets = moved
            } else {
                // The old bookmark pinned the log since `previous`, so it holds every changeset;
                // the fallback only guards against a trimmed log, and never skips a commit
                // silently.
                changesets =
                    database.changesets(after: previous, through: commit)
                    ?? (previous + 1...commit).map { Changeset(commit: $0, isExternal: true) }
            }
        }
        bookmark = commit
        recordSnapshot(commit, bookmark: true)
        return changesets
    }

    /// Ends the bookmark's SQLite read transaction and begins a new one at the same commit.
    ///
    /// A read transaction holds a WAL read mark, and while any reader holds one (other than
    /// slot 0) SQLite cannot reset the WAL, even when that reader is at the newest commit and
    /// pins no frame. Begun again while every frame is checkpointed, the transaction reads the
    /// database file only (slot 0) and lets the WAL be reset. The checkpointer calls this while
    /// it holds the WAL write lock, having checked that the newest commit in the file is
    /// `commit` with no unsealed foreign write, so the new transaction sees exactly the
    /// bookmarked state.
    func reseatBookmark(at commit: UInt64) -> BookmarkReseat {
        guard bookmark == commit, let handle = openedHandle else { return .skipped }
        endTransaction(handle)
        do {
            let published = database.publishedCommit.load(ordering: .acquiring)
            try handle.statement(.begin).execute()
            let state = try readState(handle, published: published)
            if state.commit == commit && state.unsealed == 0 { return .reseated }
        } catch {}
        // Unreachable while the checkpointer holds the write lock; never let reads see another
        // commit under the bookmark's name: release it instead.
        endTransaction(handle)
        bookmark = nil
        recordSnapshot(nil)
        return .lost
    }

    func endLongLivedReadTransaction() throws {
        guard bookmark != nil else { return }
        bookmark = nil
        if let openedHandle { endTransaction(openedHandle) }
        recordSnapshot(nil)
    }

    // MARK: Value access for transactions

    func fetchData(_ key: CacheKey) throws(DatabaseError) -> Data? {
        try handle().statement(.getData).fetchBlob(key.collection, key.key)
    }
}
