internal import Dispatch
internal import Foundation
internal import SnapshotDBLocking

internal import struct Synchronization.Atomic

/// A connection to a ``Database``: one SQLite handle with its statement cache, its value cache
/// and, optionally, a bookmarked snapshot.
///
/// Connections are `Sendable`; calls from many threads or tasks are serialized on the
/// connection. Give each independent line of work its own connection: a UI connection that
/// bookmarks snapshots, one or more writer connections.
///
/// ```swift
/// let ui = db.newConnection(name: "ui")
/// try ui.beginLongLivedReadTransaction()           // bookmark the current commit
/// let title = try ui.read { try $0.value(forKey: "1", inCollection: "items", as: Item.self)?.title }
/// let changes = try ui.beginLongLivedReadTransaction()   // advance, with what changed
/// ```
public final class Connection: Sendable {
    /// The connection's name, used in changesets and checkpoint warnings.
    public let name: String
    /// The database this connection belongs to.
    public let database: Database
    let id: Int
    private let queue: DispatchQueue
    private let core: ConnectionCore
    private let record: ConnectionRecord
    #if DEBUG
        /// How many `async` calls were handed to the queue (for tests: a call queued behind a
        /// running one, see ``QueuedCallCount``; debug builds only).
        let queuedAsyncCalls = QueuedCallCount()
    #endif

    init(database: Database, name: String) {
        self.name = name
        self.database = database
        self.record = database.registerConnection(name: name)
        self.id = record.id
        self.queue = DispatchQueue(label: "snapshotdb.connection.\(name)")
        self.core = ConnectionCore(database: database, name: name, record: record)
        record.update { $0.connection = self }
    }

    /// Releases the bookmark's snapshot but keeps its place in the commits: see
    /// ``ConnectionCore/parkBookmark()``.
    func parkBookmark() throws {
        try serialized { $0.parkBookmark() }
    }

    /// Sets SQLite's length limit on this connection's handle (``SQLiteHandle/setLengthLimit(_:)``):
    /// tests lower it instead of writing a gigabyte.
    func setSQLiteLengthLimit(_ bytes: Int) throws {
        try serialized { try $0.handle().setLengthLimit(bytes) }
    }

    /// Makes this connection's bookmark leave the commit log free to drop changesets it has not
    /// been given yet: an advance past what the log still holds returns one external changeset
    /// (a reload) instead of every changeset. For a live view's connection, whose consumer may
    /// sleep for ever: its memory stays bounded (``Database/observe(view:range:)``).
    func stopsPinningCommitLog() {
        record.update { $0.pinsCommitLog = false }
    }

    /// Asks the connection to take its bookmark at `commit` again (see
    /// ``ConnectionCore/reseatBookmark(at:)``) on its queue; the caller waits for the returned
    /// attempt, which says `.skipped` when the connection stayed busy past the deadline or its
    /// bookmark moved. Requests to many connections run at once, each on its own queue.
    func requestReseat(at commit: UInt64) -> ReseatAttempt {
        let attempt = ReseatAttempt()
        queue.async { [core] in
            guard attempt.start() else { return }
            attempt.finish(core.reseatBookmark(at: commit))
        }
        return attempt
    }

    deinit {
        database.unregisterConnection(id)
    }

    /// Waits for the connection's running call, then ends its bookmark and closes its handle;
    /// called by ``Database/close()`` once new calls are refused.
    func closeForDatabase() {
        queue.sync { [core] in core.close() }
    }

    private func serialized<T>(_ body: (ConnectionCore) throws -> T) throws -> T {
        // Also through other connections (`a.read { b.read { a.read { } } }`): this thread
        // holds the queue, and waiting for it would trap in libdispatch.
        if ActiveConnections.contains(id) {
            throw DatabaseError(
                .misuse,
                "connection '\(name)' was used from inside one of its own transactions; "
                    + "use the transaction you were given, or another connection")
        }
        // The result crosses the queue hop in uninitialized storage, through the non-generic
        // `sync(execute: () -> Void)`. `read<T>` and `readWrite<T>` run unspecialized when called
        // from another module, and any `Optional<T>` or `Result<T, _>` on this path (the Dispatch
        // overlay's generic `sync<T>` keeps one) had its type metadata looked up at run time on
        // every call, which cost more than the rest of the hop.
        let result = UnsafeMutablePointer<T>.allocate(capacity: 1)
        defer { result.deallocate() }
        var failure: (any Error)?
        queue.sync { [core, id, database] in
            do {
                try database.checkOpen()
                result.initialize(to: try ActiveConnections.running(id) { try body(core) })
            } catch {
                failure = error
            }
        }
        if let failure { throw failure }
        return result.move()
    }

    /// Runs `body` on the connection's queue for an `async` caller.
    ///
    /// `body` receives the caller's cancellation state, to check once its transaction has begun
    /// and before the caller's closure runs: a task cancelled while it waited (for the queue,
    /// the writer lock or another process's lock) then ends with `CancellationError` without
    /// running anything, and one cancelled later is not interrupted.
    private func serializedAsync<T: Sendable>(
        _ body: @escaping @Sendable (ConnectionCore, TaskCancellation) throws -> T
    ) async throws -> T {
        try Task.checkCancellation()
        let cancellation = TaskCancellation()
        let handoff = ResultHandoff<T>()
        return try await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let lease = CoreLease(core)
                queue.async { [id] in
                    // The caller may release the connection and the database as soon as it
                    // resumes: the last reference must not be the one this block drops later
                    // (the core and the result are out of scope before the resumption).
                    do {
                        let core = lease.take()
                        handoff.put(
                            Result {
                                try core.database.checkOpen()
                                return try ActiveConnections.running(id) { try body(core, cancellation) }
                            })
                    }
                    continuation.resume()
                }
                #if DEBUG
                    queuedAsyncCalls.increment()
                #endif
            }
            return try handoff.take().get()
        } onCancel: {
            cancellation.cancel()
        }
    }

    // MARK: Transactions

    /// Runs `body` in a read transaction and returns its result.
    ///
    /// With a bookmark, `body` reads the bookmarked commit; otherwise it reads the newest commit
    /// at the moment the transaction starts, and keeps reading that commit until it returns.
    /// The transaction is valid only inside `body`.
    ///
    /// - Throws: what `body` throws; ``DatabaseError`` when SQLite fails, or `misuse` when
    ///   called from inside another transaction of this connection.
    public func read<T>(_ body: (ReadTransaction) throws -> T) throws -> T {
        try serialized {
            try $0.read(
                interruption: .make(limit: $0.database.configuration.readTimeLimit, cancellation: nil), body)
        }
    }

    /// ``read(_:)-735p6`` with its own time limit in place of ``Configuration/readTimeLimit``: SQLite's
    /// work inside `body` past `timeLimit` is stopped with ``DatabaseError/Code/interrupted``
    /// (see ``Configuration/readTimeLimit``); `nil` for no limit.
    ///
    /// - Throws: `misuse` for a negative `timeLimit` (`body` does not run), and what
    ///   ``read(_:)-735p6`` throws.
    public func read<T>(timeLimit: Duration?, _ body: (ReadTransaction) throws -> T) throws -> T {
        try ReadInterruption.check(timeLimit)
        return try serialized { try $0.read(interruption: .make(limit: timeLimit, cancellation: nil), body) }
    }

    /// Runs `body` in a read-write transaction: it commits when `body` returns and rolls back
    /// when `body` throws (rethrowing) or calls ``ReadWriteTransaction/rollback()``.
    ///
    /// Read-write transactions of one database run one at a time (`BEGIN IMMEDIATE` behind the
    /// database's writer lock). A transaction that changes at least one value produces exactly
    /// one commit and one ``Changeset``; one that changes nothing produces neither.
    ///
    /// - Throws: ``DatabaseError/Code/longLivedReadTransactionActive`` when this connection
    ///   holds a bookmark (nothing is changed), `walLimitExceeded` when the configured WAL hard
    ///   limit is passed, `diskFull` and other ``DatabaseError``s from SQLite (nothing is
    ///   committed), and what `body` throws.
    public func readWrite<T>(_ body: (ReadWriteTransaction) throws -> T) throws -> T {
        try serialized { try $0.readWrite(body) }
    }

    /// The `async` form of ``read(_:)-735p6``: runs on the connection's queue, off the caller's
    /// thread.
    ///
    /// Cancelling the task stops the read: before the transaction begins, `body` never runs;
    /// while `body` runs, the SQLite statement it is running stops within microseconds (SQLite's
    /// progress handler) and the call throws `CancellationError` (Swift code of `body` between
    /// statements runs on; `Task.isCancelled` is always `false` there, as `body` runs on the
    /// connection's queue). The read transaction, the connection and its bookmark are unharmed.
    ///
    /// - Throws: `CancellationError`, ``DatabaseError/Code/interrupted`` past
    ///   ``Configuration/readTimeLimit``, and what ``read(_:)-735p6`` throws.
    public func read<T: Sendable>(
        _ body: @escaping @Sendable (ReadTransaction) throws -> T
    ) async throws -> T {
        try await read(limit: nil, useConfiguration: true, body)
    }

    /// The `async` form of ``read(timeLimit:_:)-7pp46``.
    public func read<T: Sendable>(
        timeLimit: Duration?, _ body: @escaping @Sendable (ReadTransaction) throws -> T
    ) async throws -> T {
        try ReadInterruption.check(timeLimit)
        return try await read(limit: timeLimit, useConfiguration: false, body)
    }

    private func read<T: Sendable>(
        limit: Duration?, useConfiguration: Bool, _ body: @escaping @Sendable (ReadTransaction) throws -> T
    ) async throws -> T {
        try await serializedAsync { core, cancellation in
            let interruption = ReadInterruption.make(
                limit: useConfiguration ? core.database.configuration.readTimeLimit : limit,
                cancellation: cancellation)
            return try core.read(interruption: interruption) { transaction in
                try cancellation.check()
                return try body(transaction)
            }
        }
    }

    /// The `async` form of ``readWrite(_:)-8zuku``: runs on the connection's queue, off the caller's
    /// thread.
    ///
    /// Cancellation is all-or-nothing. A task cancelled before its transaction begins (while it
    /// waits for the connection, for the database's writer or for another process's lock) gets
    /// `CancellationError` and `body` never runs. Once `body` runs, cancellation does not
    /// interrupt it: the transaction commits or rolls back as `body` decides and the call
    /// returns `body`'s result, so a cancelled task never has to guess whether its write
    /// happened. (`body` runs on the connection's queue, outside the task, so
    /// `Task.isCancelled` inside it is always `false`.)
    ///
    /// - Throws: `CancellationError` as described above, and what ``readWrite(_:)-8zuku`` throws.
    public func readWrite<T: Sendable>(
        _ body: @escaping @Sendable (ReadWriteTransaction) throws -> T
    ) async throws -> T {
        try await serializedAsync { core, cancellation in
            try core.readWrite { transaction in
                try cancellation.check()
                return try body(transaction)
            }
        }
    }

    // MARK: Long-lived read transactions

    /// Bookmarks the newest commit, ending the current bookmark if any, and returns the
    /// changesets of every commit between the two, in order, each exactly once.
    ///
    /// The advance is atomic: no read on this connection observes a state between the old and
    /// the new snapshot. The first call returns `[]`, and so does a call when nothing was
    /// committed since the last one. Until the next call or
    /// ``endLongLivedReadTransaction()``, every ``read(_:)-735p6`` sees exactly the bookmarked commit,
    /// however many commits other connections make. A bookmark pins the WAL: advance it when
    /// you can (the checkpoint monitor names connections that lag).
    ///
    /// One exception to "each exactly once": writes of a foreign client (the `sqlite3` shell)
    /// that were not numbered yet when the bookmark was taken (a writer held the lock; see
    /// ``ReadTransaction/hasUnnumberedForeignWrites``) are reported as an external changeset
    /// under the bookmark's commit, which may be a number already reported, and again, with
    /// their keys, as the commit that numbers them.
    ///
    /// - Throws: ``DatabaseError`` when SQLite cannot begin the read transaction; then the
    ///   connection holds no bookmark.
    @discardableResult
    public func beginLongLivedReadTransaction() throws -> [Changeset] {
        try serialized { try $0.beginLongLivedReadTransaction() }
    }

    /// ``beginLongLivedReadTransaction()`` run through the `async` path (see ``advance()``).
    func serializedAdvance() async throws -> [Changeset] {
        try await serializedAsync { core, _ in try core.beginLongLivedReadTransaction() }
    }

    /// Releases the bookmark, if any; later reads see the newest commit again.
    public func endLongLivedReadTransaction() throws {
        try serialized { try $0.endLongLivedReadTransaction() }
    }

    /// Whether the connection holds a bookmark.
    public var isInLongLivedReadTransaction: Bool {
        record.bookmark != nil
    }

    /// The commit this connection's bookmark sees, or else the commit its last transaction saw.
    ///
    /// Right after ``readWrite(_:)-8zuku`` returns, the number of the commit it made (or, when it
    /// changed nothing, the commit it read), whatever other connections and processes commit
    /// meanwhile: the number to key an effect outside the database by, or to wait for a read
    /// replica to reach.
    public var snapshot: UInt64 {
        let current = record.current
        return current.snapshot ?? current.lastSnapshot
    }
}

extension Connection {
    /// How many times this read replica connection found its handle stalled and opened another
    /// (see ``ReplicaHandleFollowing``; for tests and diagnostics).
    var replicaHandlesReopened: Int { core.replicaHandlesReopened.load(ordering: .relaxed) }

    /// How many values the connection's cache holds (for tests and diagnostics); 0 once the
    /// database is closed, and when asked from inside one of the connection's own transactions.
    public var cachedValueCount: Int {
        // Its errors are `databaseClosed` and `misuse` (inside its own transaction), which a
        // diagnostic count answers with 0 rather than throw, as documented above.
        (try? serialized { $0.cache.count }) ?? 0
    }
}

/// Whether the task that called an `async` transaction was cancelled; set from the task's
/// cancellation handler, read on the connection's queue (and by SQLite's progress handler while
/// a read runs: see ``ReadInterruption``).
final class TaskCancellation: Sendable {
    private let cancelled = Atomic<Bool>(false)

    func cancel() { cancelled.store(true, ordering: .relaxed) }

    var isCancelled: Bool { cancelled.load(ordering: .relaxed) }

    /// Throws `CancellationError` once the task was cancelled.
    func check() throws(CancellationError) {
        if isCancelled { throw CancellationError() }
    }
}

/// How many `async` calls a connection handed to its queue, and a wait for a number of them
/// (for tests: a task cancelled while its call waits behind another of the connection).
///
/// `@unchecked Sendable`: `count` is only read and written with `condition` locked.
final class QueuedCallCount: @unchecked Sendable {
    private let condition = NSCondition()
    private var count = 0

    /// Counts one more call handed to the queue.
    func increment() {
        condition.lock()
        count += 1
        condition.broadcast()
        condition.unlock()
    }

    /// Waits until `target` calls were handed to the queue, at most until `deadline`; returns
    /// whether they were.
    func wait(untilAtLeast target: Int, before deadline: Date) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while count < target {
            if !condition.wait(until: deadline) { return count >= target }
        }
        return true
    }
}

/// Hands the result of a block on a connection's queue to the task that awaits it, through a
/// lock: the continuation's resumption orders the two as well, but ThreadSanitizer on Linux
/// does not see that order, and reported the caller's first read of a changeset the block had
/// made as a race (a CI run of `ConsumerTests`). The lock is what TSan sees (a pthread mutex in
/// its builds, see `SnapshotDBLocking`).
private final class ResultHandoff<T: Sendable>: Sendable {
    private let result = Mutex<Result<T, any Error>?>(nil)

    func put(_ value: Result<T, any Error>) { result.withLock { $0 = value } }

    func take() -> Result<T, any Error> {
        result.withLock { value in
            defer { value = nil }
            return value!
        }
    }
}

/// Hands a connection's core to one block on its queue, which takes it out, so that the block
/// no longer holds the core (and through it the database) once it has resumed its caller.
///
/// `@unchecked Sendable`: `core` is written once here and then read and cleared only by the one
/// block it is handed to, which runs once, after the write (`DispatchQueue.async` orders them).
private final class CoreLease: @unchecked Sendable {
    private var core: ConnectionCore?

    init(_ core: ConnectionCore) { self.core = core }

    func take() -> ConnectionCore {
        defer { core = nil }
        return core!
    }
}
