internal import Foundation
internal import Logging
internal import SnapshotDBLocking

internal import struct Synchronization.Atomic

/// The state of one connection, touched only on the connection's serial queue: its SQLite
/// handle, its snapshots (ordinary read transactions and the bookmark) and its value cache.
/// Commits are the ``Writer``'s.
///
/// `@unchecked Sendable` is sound because ``Connection`` is the only owner of a core and runs
/// every method of it inside `queue.sync` or `queue.async` on its own serial queue; the core is
/// never reachable from another thread.
final class ConnectionCore: @unchecked Sendable {
    let database: Database
    let name: String
    /// Where this connection's snapshot and bookmark are recorded (the one place).
    let record: ConnectionRecord
    let cache: ValueCache
    var openedHandle: SQLiteHandle?
    var codecs: [String: any ValueCodec]?
    let defaultCodec = JSONValueCodec()
    /// Whether the record holds a snapshot (this connection is the only one that sets or
    /// clears it), so that ending an ended snapshot takes no lock.
    var hasRecordedSnapshot = false
    /// Whether the record may hold a bookmark or an unreported lost bookmark. Both are only
    /// ever set on this connection's queue (a bookmark by an advance; `bookmarkLost` by a
    /// reseat, which acts only on a recorded bookmark), so while this is `false` a transaction
    /// asks the record nothing (one lock less per transaction).
    var mayHoldBookmark = false
    /// On a read replica, whether the handle still follows the replica.
    var replicaFollowing = ReplicaHandleFollowing(marksAtOpen: 0)

    var id: Int { record.id }

    init(database: Database, name: String, record: ConnectionRecord) {
        self.database = database
        self.name = name
        self.record = record
        self.cache = ValueCache(limit: database.configuration.cacheLimit)
    }

    deinit {
        guard record.bookmark != nil else { return }
        // Close the handle first, so that the bookmark no longer pins the WAL when the
        // checkpointer looks.
        openedHandle = nil
        database.checkpointer.snapshotReleased(commit: 0, wasBookmark: true)
    }

    /// The SQLite handle, opened and configured on first use, and opened again after a
    /// `ROLLBACK` failed on it (closing a handle rolls back what it had open).
    func handle() throws(DatabaseError) -> SQLiteHandle {
        if let openedHandle, !openedHandle.isBroken { return openedHandle }
        openedHandle = nil
        try database.checkOpen()
        if database.role.handlesMayStopFollowing {
            replicaFollowing = ReplicaHandleFollowing(
                marksAtOpen: database.commitLog.foreignHistoryMarks.count)
        }
        let handle = try database.openHandle()
        handle.recordCommitFrames()
        openedHandle = handle
        return handle
    }

    /// On a read replica, whether the handle may no longer follow the replica (see
    /// ``ReplicaHandleFollowing``), before a snapshot or with the commit of the one it took.
    func replicaHandleStalled(snapshot: UInt64? = nil) -> Bool {
        guard database.role.handlesMayStopFollowing, openedHandle != nil else { return false }
        return replicaFollowing.isStalled(
            marks: database.commitLog.foreignHistoryMarks, snapshot: snapshot,
            latest: database.commitLog.latestCommit, now: .now)
    }

    /// Replaces a read replica's stalled handle (``replicaHandleStalled(snapshot:)``) with a new
    /// one, ending the old one's transaction; returns the new handle, or `nil` when the VFS
    /// cannot open one now (Litestream's VFS fails opens while its replica is being rewritten,
    /// as during a put-back): the old handle stays, and a later snapshot tries again. (Reads on
    /// a new handle can still fail while the VFS catches up: the caller's error, as any read's.)
    func replaceStalledReplicaHandle() -> SQLiteHandle? {
        guard let stalled = openedHandle else { return nil }
        let fresh: SQLiteHandle
        do {
            fresh = try database.openHandle()
        } catch {
            database.logger.debug(
                "connection '\(name)' keeps its replica handle, which may have stopped following: no new one opens now (\(error.message))"
            )
            return nil
        }
        fresh.recordCommitFrames()
        if !stalled.isAutocommit {
            stalled.rollback(
                after: "a read transaction on a stalled replica handle of connection '\(name)'",
                logger: database.logger)
        }
        // (Its `replicaFollowing` starts after its first snapshot: see `beginReadSnapshot`.)
        openedHandle = fresh
        replicaHandlesReopened.add(1, ordering: .relaxed)
        database.logger.debug(
            "connection '\(name)' opened a new replica handle: its last one may have stopped following (the primary put back, or a snapshot behind another handle's)"
        )
        return fresh
    }

    /// How many times a stalled replica handle was replaced (for tests and diagnostics).
    let replicaHandlesReopened = Atomic<Int>(0)

    // MARK: Writes

    /// This connection's write transaction begins at `start`: its cache moves there and its
    /// record shows the snapshot (the writer's, which pins nothing: it is the newest).
    func beginWrite(at start: UInt64) {
        moveCache(to: start)
        recordSnapshot(start)
    }

    /// The write transaction's snapshot is released (before its `COMMIT`, or as it ends). The
    /// checkpointer is not told: a writer's snapshot is the newest by construction (`BEGIN
    /// IMMEDIATE`) and pinned nothing it could now reclaim.
    ///
    /// `committing` is the commit the transaction is about to make: the record shows it as the
    /// connection's last snapshot in the same update (``commitFailed(startedFrom:)`` takes it
    /// back if the `COMMIT` fails).
    func endWrite(committing commit: UInt64? = nil) {
        recordSnapshot(nil, tellingCheckpointer: false, lastSnapshot: commit)
    }

    /// The `COMMIT` of a transaction that started from `start` failed: the record's last
    /// snapshot is `start` again.
    func commitFailed(startedFrom start: UInt64) {
        record.update { $0.lastSnapshot = start }
    }

    /// This connection's transaction made `changeset`'s commit with `operations`: the cache
    /// moves to it, dropping exactly what the commit changed (the record says so already, see
    /// ``endWrite(committing:)``).
    func didCommit(_ changeset: Changeset, operations: [ChangesetBuilder.Operation]) {
        cache.invalidate(with: changeset, operations: operations)
        cache.commit = changeset.commit
    }

    /// The codec of `collection`; the registry is frozen at the connection's first use.
    func codec(for collection: String) -> any ValueCodec {
        if codecs == nil { codecs = database.frozenCodecs() }
        // Most databases register no codec: no hash of the collection per value then.
        guard let codecs, !codecs.isEmpty else { return defaultCodec }
        return codecs[collection] ?? defaultCodec
    }

    /// The JSON codec when `collection` uses it (the default), whose decoder reads stored bytes
    /// in place (``JSONValueCodec/decode(_:fromBytes:)``); `nil` for another codec.
    func jsonCodec(for collection: String) -> JSONValueCodec? {
        codec(for: collection) as? JSONValueCodec
    }

    // MARK: Snapshots

    /// A read snapshot just begun: the commit it sees, the foreign writes in it not yet
    /// sealed, the commit the cache moved from, and the changesets it moved by (`nil` when the
    /// cache was dropped instead).
    struct ReadSnapshot {
        var commit: UInt64
        var unsealed: Int64
        /// Whether the snapshot holds foreign writes not numbered yet (`unsealed` also counts
        /// a read replica's snapshot of another history, which is a whole commit).
        var unnumbered: Bool
        var cacheMovedFrom: UInt64
        var changesets: [Changeset]?
    }

    /// Begins a deferred read transaction, fixes its snapshot, and moves the cache to it.
    ///
    /// The WAL-index header is read before `BEGIN` and again once the snapshot is fixed: the
    /// same header both times is the snapshot's header (headers never repeat), which lets
    /// ``Database/commitState(of:header:published:)`` skip reading the counter.
    ///
    /// Foreign writes found unsealed are sealed by the ``Writer`` when that costs no waiting;
    /// otherwise they are read unsealed, with the cache dropped (always safe), and sealed off
    /// this path. A reader never waits for a writer.
    func beginReadSnapshot() throws(DatabaseError) -> ReadSnapshot {
        // A handle opened for this snapshot: marks its own snapshot makes (it found the put-back)
        // are not against it.
        var freshHandle = openedHandle == nil
        if replicaHandleStalled(), replaceStalledReplicaHandle() != nil { freshHandle = true }
        var handle = try handle()
        var triedSealing = false
        var triedAnotherHandle = false
        while true {
            let before = handle.walIndexHeader()
            let published = database.commitLog.publishedCommit.load(ordering: .acquiring)
            if database.faults.shouldFail(.beginRead) { throw FaultInjector.error(.beginRead) }
            try handle.statement(.begin).execute()
            let state: CommitState
            var unnumbered = false
            do throws(DatabaseError) {
                let fix = try handle.statement(.fixSnapshot)
                defer { fix.reset() }
                _ = try fix.step()
                handle.lookUpWALIndex()
                let header = before.flatMap { handle.walIndexHeader() == $0 ? $0 : nil }
                var read = try database.commitState(of: handle, header: header, published: published)
                unnumbered = read.hasUnnumberedForeignWrites
                if database.role.comparesHistoryTokens,
                    Self.isAnotherHistory(read, cachedAt: cache.commit, token: cache.token)
                {
                    database.markForeignHistory(at: read.commit)
                    read.unsealed = max(read.unsealed, 1)
                }
                state = read
                // Commits of other processes: published with their history, read in this snapshot.
                database.publishCommits(through: state.commit, reading: handle)
                if freshHandle, database.role.handlesMayStopFollowing {
                    replicaFollowing = ReplicaHandleFollowing(
                        marksAtOpen: database.commitLog.foreignHistoryMarks.count)
                }
            } catch {
                handle.rollback(
                    after: "an error beginning a read transaction on connection '\(name)'",
                    logger: database.logger)
                throw error
            }
            // A read replica's handle may have stopped following: the snapshot is taken again,
            // once, on a new handle.
            if !triedAnotherHandle, replicaHandleStalled(snapshot: state.commit) {
                triedAnotherHandle = true
                if let fresh = replaceStalledReplicaHandle() {
                    handle = fresh
                    freshHandle = true
                    continue
                }
            }
            let movedFrom = cache.commit
            guard state.unsealed != 0 else {
                let changesets = moveCache(to: state.commit)
                cache.token = state.token
                return ReadSnapshot(
                    commit: state.commit, unsealed: 0, unnumbered: false, cacheMovedFrom: movedFrom,
                    changesets: changesets)
            }
            // (A read replica cannot seal: the writes are its primary's to number.)
            if !triedSealing, database.role.writesTheFile {
                triedSealing = true
                handle.rollback(
                    after: "a read transaction on connection '\(name)' found unsealed foreign writes",
                    logger: database.logger)
                _ = database.writer.sealWithoutWaiting(on: handle, database: database)
                continue
            }
            // The unsealed changes have no changeset: the cache must not answer for anything.
            database.publishCommits(through: state.commit)
            cache.removeAll()
            cache.commit = state.commit
            cache.token = state.token
            return ReadSnapshot(
                commit: state.commit, unsealed: state.unsealed, unnumbered: unnumbered,
                cacheMovedFrom: movedFrom,
                changesets: nil)
        }
    }

    /// The history token of the open snapshot's commit, when its row was read (always on a read
    /// replica, where transactions read it); the value cache's, which moves with the snapshot.
    var snapshotToken: UInt64? { cache.token }

    /// Whether a read replica's snapshot `state` holds another history than the cache, which
    /// holds commit `cached` with history token `token`: the same number with another token, or
    /// a lower number (a connection follows its replica forward only, so the primary was put
    /// back to an older commit).
    static func isAnotherHistory(_ state: CommitState, cachedAt cached: UInt64, token: UInt64?)
        -> Bool
    {
        if state.commit < cached { return true }
        guard state.commit == cached, let token, let current = state.token else { return false }
        return token != current
    }

    /// The error to throw when SQLite ended the open transaction on its own, or `nil` while it
    /// is open.
    ///
    /// After some errors (a full disk or an I/O error while the page cache spills to the WAL,
    /// out of memory) SQLite rolls back the whole transaction, and the next statement would run
    /// in autocommit mode: a caller that caught the error and went on would write outside any
    /// transaction, with no commit number. Transactions check this before every use and before
    /// committing, and fail with the code of the error that ended the transaction.
    ///
    /// A bookmark whose read transaction SQLite ended is released here, and the error is
    /// `bookmarkLost`: its commit can no longer be read, and the next advance returns every
    /// commit since the last one it returned, as after any lost bookmark.
    func transactionEndedBySQLite() -> DatabaseError? {
        guard let openedHandle, openedHandle.isAutocommit else { return nil }
        let cause = openedHandle.lastError
        if record.bookmark != nil { return loseBookmarkEndedBySQLite(cause: cause) }
        var message = "SQLite rolled back the transaction after an error; nothing of it can be committed"
        if let cause { message += " (\(cause.message))" }
        return DatabaseError(cause?.code ?? .sqlite, message, sqliteCode: cause?.sqliteCode, cause: cause)
    }

    /// Releases the bookmark, whose SQLite read transaction is gone (SQLite ended it after an
    /// error, or its handle was closed as broken), and returns the `bookmarkLost` to throw.
    func loseBookmarkEndedBySQLite(cause: DatabaseError?) -> DatabaseError {
        recordSnapshot(nil)
        mayHoldBookmark = false
        var reason = "SQLite ended its read transaction after an error"
        if let cause { reason += " (\(cause.message))" }
        return Self.bookmarkLostError(name, because: reason, cause: cause)
    }

    /// Moves the cache to `commit`, dropping exactly what the commits in between changed, or
    /// everything when the commit log no longer reaches back to the cache's commit.
    ///
    /// Returns the changesets it moved by, or `nil` when it dropped the cache.
    @discardableResult
    func moveCache(to commit: UInt64) -> [Changeset]? {
        guard cache.commit != commit else {
            database.publishCommits(through: commit)
            return []
        }
        // `changesets(after:through:)` publishes the commits up to `commit` first.
        if commit > cache.commit, let changesets = database.changesets(after: cache.commit, through: commit) {
            for changeset in changesets { cache.invalidate(with: changeset) }
            cache.commit = commit
            return changesets
        }
        database.publishCommits(through: commit)
        cache.removeAll()
        cache.commit = commit
        return nil
    }

    /// Records the snapshot the connection now reads (`nil`: none), and tells the checkpointer
    /// when a snapshot that may have pinned the WAL was released. `lastSnapshot` is what the
    /// record shows as the connection's last commit when `commit` is `nil` (a writer's commit
    /// about to be made).
    func recordSnapshot(
        _ commit: UInt64?, bookmark isBookmark: Bool = false, unsealed: Int64 = 0, unnumbered: Bool = false,
        tellingCheckpointer: Bool = true, lastSnapshot: UInt64? = nil
    ) {
        guard commit != nil || hasRecordedSnapshot else { return }
        hasRecordedSnapshot = commit != nil
        let now = commit != nil ? ContinuousClock.now : nil
        let released = record.update { record -> (commit: UInt64, wasBookmark: Bool)? in
            let released = record.snapshot.map { ($0, record.isBookmark) }
            record.snapshot = commit
            record.isBookmark = isBookmark && commit != nil
            record.bookmarkUnsealed = unsealed
            record.bookmarkUnnumbered = isBookmark && unnumbered
            record.since = now
            if let last = commit ?? lastSnapshot { record.lastSnapshot = last }
            return released
        }
        if isBookmark && commit != nil { mayHoldBookmark = true }
        if let released, tellingCheckpointer {
            database.checkpointer.snapshotReleased(commit: released.commit, wasBookmark: released.wasBookmark)
        }
    }

    // MARK: Transactions

    /// Runs `body` in a read transaction; with `interruption`, SQLite's work inside `body` is
    /// checked against it (``ReadInterruption``).
    func read<T>(interruption: ReadInterruption? = nil, _ body: (ReadTransaction) throws -> T) throws -> T {
        if let bookmark = try bookmarkOrLost() {
            guard let openedHandle, !openedHandle.isBroken, !openedHandle.isAutocommit else {
                throw loseBookmarkEndedBySQLite(cause: openedHandle?.lastError)
            }
            let transaction = ReadTransaction(
                core: self, commit: bookmark.commit, hasUnnumberedForeignWrites: bookmark.unsealed)
            defer { transaction.end() }
            return try run(body, in: transaction, interruption: interruption)
        }
        let snapshot = try beginReadSnapshot()
        let commit = snapshot.commit
        let handle = try handle()
        recordSnapshot(commit)
        let transaction = ReadTransaction(
            core: self, commit: commit, hasUnnumberedForeignWrites: snapshot.unnumbered)
        defer {
            transaction.end()
            handle.rollback(after: "a read transaction on connection '\(name)'", logger: database.logger)
            recordSnapshot(nil)
        }
        return try run(body, in: transaction, interruption: interruption)
    }

    func run<T>(
        _ body: (ReadTransaction) throws -> T, in transaction: ReadTransaction,
        interruption: ReadInterruption?
    ) throws -> T {
        let result: T
        if let interruption {
            do {
                result = try handle().checking(interruption) { try body(transaction) }
            } catch {
                throw interruption.explain(error, connection: name)
            }
            // Some reads record an error and return an empty answer (a view's `items(inGroup:)`):
            // a read SQLite stopped must not return as if it had finished.
            if let stopped = interruption.stopped(connection: name) { throw stopped }
        } else {
            result = try body(transaction)
        }
        // Nor as if a view's non-throwing reads had answered when they recorded an error.
        if let recorded = transaction.takeRecordedFailure() { throw recorded }
        return result
    }

    func readWrite<T>(_ body: (ReadWriteTransaction) throws -> T) throws -> T {
        try database.writer.write(on: self, body)
    }

    /// Throws when this connection may not begin a read-write transaction: it holds a
    /// bookmark, or its bookmark was lost and it has not been told yet.
    func checkCanWrite() throws(DatabaseError) {
        if try bookmarkOrLost() != nil {
            throw DatabaseError(
                .longLivedReadTransactionActive,
                "connection '\(name)' holds a long-lived read transaction; write through another connection")
        }
    }

    /// The commit of the connection's bookmark, and whether its snapshot holds foreign writes
    /// not numbered yet, or `nil` without one; throws `bookmarkLost` (once) when the bookmark
    /// was lost since the last call.
    func bookmarkOrLost() throws(DatabaseError) -> (commit: UInt64, unsealed: Bool)? {
        guard mayHoldBookmark else { return nil }
        let (bookmark, unsealed, wasLost) = record.update { record in
            defer { record.bookmarkLost = false }
            return (record.isBookmark ? record.snapshot : nil, record.bookmarkUnnumbered, record.bookmarkLost)
        }
        mayHoldBookmark = bookmark != nil
        if let bookmark { return (bookmark, unsealed) }
        if wasLost {
            throw Self.bookmarkLostError(
                name,
                because: "it could not be taken again at its commit during a WAL reset, and was released")
        }
        return nil
    }

    static func bookmarkLostError(_ name: String, because reason: String, cause: DatabaseError? = nil)
        -> DatabaseError
    {
        DatabaseError(
            .bookmarkLost,
            "connection '\(name)' lost its bookmark: \(reason); call beginLongLivedReadTransaction() to "
                + "bookmark the newest commit (it returns every commit since the last one it returned)",
            sqliteCode: cause?.sqliteCode, cause: cause)
    }

    /// Ends the open transaction on `handle` after an error: the caller's error wins, and a
    /// `ROLLBACK` that fails is logged and marks the handle broken, so that the next transaction
    /// opens a new one (closing a handle rolls back what it had open): the connection never goes
    /// on inside a transaction it could not end.
    func rollback(_ handle: SQLiteHandle) {
        handle.rollback(
            after: "an error in a write transaction on connection '\(name)'", logger: database.logger)
    }

    /// Ends the open transaction on `handle` when no error came first: a failed `ROLLBACK` is
    /// thrown (and the handle replaced, as in ``rollback(_:)``).
    func rollbackOrThrow(_ handle: SQLiteHandle) throws(DatabaseError) {
        try handle.rollback()
    }

    // MARK: Value access for transactions (ConnectionCore+Values.swift)

    /// The collections being enumerated now, with how many enumerations of each are open.
    var enumerations: [String: Int] = [:]

    /// How many ``ReadTransaction/withUnsafeBytes(forKey:inCollection:_:)`` bodies are running
    /// on this connection: each holds a value in SQLite's buffer, which a write could move, so
    /// writes are misuse until they return.
    /// (Changed only by ``lendingBytes(_:)``.)
    var bytesLent = 0
}
