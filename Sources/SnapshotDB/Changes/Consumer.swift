internal import Foundation

/// A named, durable position in the history, shared by every process that opens the file: a
/// search indexer, a sync uploader, anything that must see every commit exactly once, across
/// crashes and restarts.
///
/// A consumer reads the changesets after its position, does its work, and acknowledges them
/// **inside the read-write transaction that writes its results**, so its position moves in the
/// same SQLite commit as its own writes: a crash before that commit leaves both undone (the
/// changesets are read again), a crash after it leaves both done. Nothing is missed and
/// nothing is applied twice in the database; effects outside it (a file, a network call) are
/// not in that transaction and happen at least once, so make them idempotent.
///
/// ```swift
/// let indexer = try db.consumer(named: "search-indexer")
/// for try await batch in indexer.batches(on: db.newConnection(name: "indexer")) {
///     try writer.readWrite { txn in
///         for changeset in batch.changesets { try index(changeset, in: txn) }
///         try indexer.acknowledge(batch, in: txn)
///     }
/// }
/// ```
///
/// Run one loop per consumer. If two runners (two processes, a loop started twice) read the
/// same batch, ``acknowledge(_:in:)`` lets only the first commit: the second throws
/// ``DatabaseError/Code/consumerConflict`` and its transaction, with its writes, rolls back.
/// (``acknowledge(through:in:)`` cannot tell: it knows where a batch ends, not where it began.)
///
/// A consumer that falls past ``Configuration/historyRetention`` is expired when the history it
/// needs is purged: every read then throws ``DatabaseError/Code/consumerExpired`` until
/// ``reset(in:)`` starts it again at the transaction's commit (after a full rescan, say).
public final class Consumer: Sendable {
    /// The consumer's name, unique in the file.
    public let name: String
    private let database: Database

    init(name: String, database: Database) {
        self.name = name
        self.database = database
    }

    /// The commit the consumer acknowledged last, as `transaction` reads it.
    ///
    /// - Throws: ``DatabaseError/Code/consumerExpired`` when the consumer was expired;
    ///   `corrupt` when its row is gone (a foreign client deleted it).
    public func position(in transaction: ReadTransaction) throws(DatabaseError) -> UInt64 {
        try transaction.checkActive()
        let row = try Self.row(name, handle: try transaction.core.handle(), path: database.path)
        if row.expired { throw expiredError() }
        return row.position
    }

    /// The changesets after the consumer's position up to `transaction`'s commit, at most
    /// `limit` of them, oldest first.
    ///
    /// - Throws: ``DatabaseError/Code/consumerExpired``; `misuse` for a negative `limit`; what
    ///   ``ReadTransaction/changes(after:)-(UInt64)`` throws.
    public func pending(in transaction: ReadTransaction, limit: Int = .max) throws(DatabaseError)
        -> [Changeset]
    {
        // As index queries and searches: a negative count is the caller's mistake, not "none".
        guard limit >= 0 else {
            throw DatabaseError(.misuse, "a consumer's limit must not be negative (\(limit))")
        }
        return try transaction.changes(after: try position(in: transaction), limit: limit)
    }

    /// Moves the consumer's position to `commit`, as part of `transaction`: committed with the
    /// transaction's own writes, or not at all. A transaction that changes no value and only
    /// acknowledges still commits (without a commit number).
    ///
    /// - Throws: ``DatabaseError/Code/consumerExpired``; ``DatabaseError/Code/misuse`` when
    ///   `commit` is after the transaction's commit (it cannot have been seen) or before the
    ///   consumer's position (positions only move forward).
    public func acknowledge(through commit: UInt64, in transaction: ReadWriteTransaction)
        throws(DatabaseError)
    {
        try transaction.checkActive()
        let handle = try transaction.core.handle()
        let row = try Self.row(name, handle: handle, path: database.path)
        if row.expired { throw expiredError() }
        guard commit <= transaction.commit else {
            throw DatabaseError(
                .misuse,
                "consumer '\(name)' cannot acknowledge commit \(commit) in a transaction that starts at commit "
                    + "\(transaction.commit): it has not been read")
        }
        guard commit >= row.position else {
            throw DatabaseError(
                .misuse,
                "consumer '\(name)' is at commit \(row.position); acknowledging \(commit) would move it back")
        }
        try Self.move(name, to: commit, expired: false, handle: handle)
        transaction.wroteBookkeeping = true
    }

    /// Moves the consumer's position to the end of `batch`, as part of `transaction`, after
    /// checking that no other runner of this consumer acknowledged past the batch's start since
    /// it was read: the check and the move are in the transaction that writes the batch's
    /// results, under SQLite's write lock, so of two runners that applied the same batch only
    /// the first commits.
    ///
    /// - Throws: ``DatabaseError/Code/consumerConflict`` when the consumer's position is past
    ///   the position the batch was read after: the transaction then fails at its end even if
    ///   the error is caught, unless a savepoint around the batch's writes and this call rolls
    ///   back; what ``acknowledge(through:in:)`` throws.
    public func acknowledge(_ batch: ConsumerBatch, in transaction: ReadWriteTransaction)
        throws(DatabaseError)
    {
        try transaction.checkActive()
        let row = try Self.row(name, handle: try transaction.core.handle(), path: database.path)
        if row.expired { throw expiredError() }
        guard row.position <= batch.after else {
            let error = DatabaseError(
                .consumerConflict,
                "consumer '\(name)' is at commit \(row.position), past commit \(batch.after) that this batch "
                    + "was read after: another runner of the consumer applied it; this transaction must not commit"
            )
            // Caught or not, the transaction fails at its end (a savepoint around the batch's
            // writes and this call may roll them back and go on).
            transaction.refuseCommit(error)
            throw error
        }
        try acknowledge(through: batch.commit, in: transaction)
    }

    /// Starts the consumer again at `transaction`'s commit, expired or not: what it had not
    /// acknowledged is given up (use it after a full rescan of the values it derives from).
    public func reset(in transaction: ReadWriteTransaction) throws(DatabaseError) {
        try transaction.checkActive()
        try Self.move(name, to: transaction.commit, expired: false, handle: try transaction.core.handle())
        transaction.wroteBookkeeping = true
    }

    /// The batches of changesets after the consumer's position, as commits arrive (from this
    /// process or another), read on `connection`, each at most `limit` changesets.
    ///
    /// A batch is read when the loop asks for the next one, after the changesets of the last
    /// batch it yielded: acknowledge each batch in the transaction that applies it. After a
    /// crash, the batches not acknowledged are given again. The sequence throws the error a read
    /// throws (``DatabaseError/Code/consumerExpired``, or `databaseClosed` for a read after
    /// ``Database/close()``), and ends (`nil`) when the database closes while it waits for a
    /// commit, or when the task is cancelled.
    ///
    /// The consumer's own commits are changesets too, and come back in the next batch: skip
    /// those that touch none of the collections it derives from (`changeset.hasChange(
    /// inCollection:)`), or a consumer that writes for every changeset feeds itself forever. A
    /// transaction that only acknowledges makes no commit.
    ///
    /// A batch whose transaction failed is not given again by the same sequence, which has moved
    /// past it (so that a loop may acknowledge several batches at once): let the error end the
    /// loop, or make a new sequence, which starts from the consumer's acknowledged position.
    /// A `limit` below 1 reads as 1 (a batch holds at least one changeset).
    public func batches(on connection: Connection, limit: Int = 100) -> ConsumerBatches {
        ConsumerBatches(consumer: self, database: database, connection: connection, limit: max(1, limit))
    }

    private func expiredError() -> DatabaseError {
        DatabaseError(
            .consumerExpired,
            "consumer '\(name)' fell behind the history's retention bound and was expired: the changes it had "
                + "not acknowledged were purged; rescan and call reset(in:) to go on")
    }

    // MARK: The table

    struct Row {
        var position: UInt64
        var expired: Bool
    }

    static func row(_ name: String, handle: SQLiteHandle, path: String) throws(DatabaseError) -> Row {
        let statement = try handle.cachedStatement(
            "SELECT position, expired FROM snapshotdb_consumers WHERE name = ?1")
        defer { statement.reset() }
        try statement.bind(name, at: 1)
        guard try statement.step() else {
            throw DatabaseError(
                .corrupt, "\(path): the row of consumer '\(name)' is gone (deleted by another client)")
        }
        return Row(position: UInt64(bitPattern: statement.int64(at: 0)), expired: statement.int64(at: 1) != 0)
    }

    static func move(_ name: String, to commit: UInt64, expired: Bool, handle: SQLiteHandle)
        throws(DatabaseError)
    {
        let statement = try handle.cachedStatement(
            """
            INSERT INTO snapshotdb_consumers(name, position, expired, updated) VALUES (?1, ?2, ?3, ?4)
            ON CONFLICT(name) DO UPDATE SET position = excluded.position, expired = excluded.expired,
                updated = excluded.updated
            """)
        try statement.bind(name, at: 1)
        try statement.bind(Int64(bitPattern: commit), at: 2)
        try statement.bind(Int64(expired ? 1 : 0), at: 3)
        try statement.bind(Date().timeIntervalSince1970, at: 4)
        try statement.execute()
    }
}

/// One batch of a consumer's changesets (``Consumer/batches(on:limit:)``).
public struct ConsumerBatch: Sendable {
    /// The changesets, oldest first.
    public let changesets: [Changeset]
    /// The commit the batch was read after: the consumer's position then, or the end of the
    /// batch the same sequence gave before it (when that one was not acknowledged yet).
    public let after: UInt64
    /// The last commit of the batch: what to acknowledge once it is applied.
    public var commit: UInt64 { changesets.last?.commit ?? 0 }
}

/// The batches of a consumer, as an async sequence (``Consumer/batches(on:limit:)``).
public struct ConsumerBatches: AsyncSequence, Sendable {
    /// A batch of changesets.
    public typealias Element = ConsumerBatch
    let consumer: Consumer
    let database: Database
    let connection: Connection
    let limit: Int

    /// The iterator: it subscribes to `changes()` before its first read, so that no commit is
    /// missed between a read that found nothing and the wait for the next commit.
    public struct AsyncIterator: AsyncIteratorProtocol {
        let batches: ConsumerBatches
        var commits: AsyncStream<Changeset>.AsyncIterator?
        var lastYielded: UInt64?

        /// The next batch, once there is one; `nil` when the database closed or the task was
        /// cancelled.
        public mutating func next() async throws -> ConsumerBatch? {
            if batches.connection.isInLongLivedReadTransaction {
                throw DatabaseError(
                    .misuse,
                    "consumer batches read on connection '\(batches.connection.name)', which holds a bookmark and "
                        + "would never see a new commit; use a connection without one")
            }
            while !Task.isCancelled {
                if commits == nil { commits = batches.database.changes().makeAsyncIterator() }
                let consumer = batches.consumer
                let limit = batches.limit
                let after = lastYielded
                let (start, changesets) = try await batches.connection.read { txn in
                    let start = Swift.max(try consumer.position(in: txn), after ?? 0)
                    return (start, try txn.changes(after: start, limit: limit))
                }
                if let last = changesets.last {
                    lastYielded = last.commit
                    return ConsumerBatch(changesets: changesets, after: start)
                }
                // Nothing new: wait for the next commit (a finished stream is subscribed again).
                if await commits?.next() == nil {
                    commits = nil
                    if batches.database.isClosed { return nil }
                }
            }
            return nil
        }
    }

    /// An iterator that reads the batches on the sequence's connection.
    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(batches: self) }
}

extension Database {
    /// The named consumer, registered at the newest commit if the file has no consumer of that
    /// name yet (a write that is not a commit): its first batch holds the commits made after
    /// this call. To start earlier, see ``consumer(named:startingAfter:)``; see ``Consumer``.
    ///
    /// - Throws: what a read-write transaction throws (`readOnly`, `busy`, `databaseClosed`).
    public func consumer(named name: String) throws -> Consumer {
        try consumer(named: name, startingAt: nil)
    }

    /// The named consumer, registered after commit `commit` if the file has no consumer of that
    /// name yet (a write that is not a commit): its first batch starts with commit `commit + 1`,
    /// for a consumer that must see what was written before it existed (a search index, an
    /// outbox). `startingAfter: 0` feeds it every commit while the history still reaches back
    /// to the file's creation; once it no longer does, start after the oldest commit it keeps,
    /// which the `historyUnavailable` error names. A consumer the file already has keeps its
    /// position.
    ///
    /// A consumer is held to the history's retention as any other: one that falls behind it is
    /// expired (``DatabaseError/Code/consumerExpired``), so start it where it can catch up.
    ///
    /// - Throws: `historyUnavailable` when the history no longer keeps the commits after
    ///   `commit` (past its retention, purged or about to be, or before the file's upgrade),
    ///   naming the oldest it keeps; `misuse` for a commit after the newest; what a read-write transaction throws
    ///   (`readOnly`, `busy`, `databaseClosed`).
    public func consumer(named name: String, startingAfter commit: UInt64) throws -> Consumer {
        try consumer(named: name, startingAt: commit)
    }

    private func consumer(named name: String, startingAt start: UInt64?) throws -> Consumer {
        let connection = newConnection(name: "consumer \(name)")
        try connection.readWrite { txn in
            let handle = try txn.core.handle()
            let exists = try handle.cachedStatement("SELECT 1 FROM snapshotdb_consumers WHERE name = ?1")
            defer { exists.reset() }
            try exists.bind(name, at: 1)
            guard try !exists.step() else { return }
            var position = txn.commit
            if let start {
                guard start <= txn.commit else {
                    throw DatabaseError(
                        .misuse,
                        "consumer '\(name)' cannot start after commit \(start): the newest commit is \(txn.commit)"
                    )
                }
                // The oldest place the history keeps: its floor, or the retention bound when the
                // purge has not reached it yet (a consumer behind it would be expired by the
                // next purge step).
                let retention = configuration.historyRetention
                let (cutoff, floor) = try HistoryPurger.cutoff(retention, handle: handle)
                let oldest = max(floor, cutoff)
                guard start >= oldest else {
                    throw DatabaseError(
                        .historyUnavailable,
                        "consumer '\(name)' cannot start after commit \(start): the history keeps the commits "
                            + "after \(oldest) only (older ones are past its retention)")
                }
                // The cutoff weighs the age bound over the purge's next step only; commit dates
                // grow, so the first commit the consumer would read says whether it is too old.
                let first = try handle.cachedStatement(
                    "SELECT date FROM snapshotdb_history WHERE number > ?1 ORDER BY number LIMIT 1")
                defer { first.reset() }
                try first.bind(Int64(bitPattern: start), at: 1)
                let oldestDate = Date().timeIntervalSince1970 - retention.age.timeInterval
                if try first.step(), first.double(at: 0) < oldestDate {
                    throw DatabaseError(
                        .historyUnavailable,
                        "consumer '\(name)' cannot start after commit \(start): commit \(start + 1) is older than "
                            + "the history's retention (\(retention.age)) and would be purged before it is read"
                    )
                }
                position = start
            }
            try Consumer.move(name, to: position, expired: false, handle: handle)
            txn.wroteBookkeeping = true
        }
        return Consumer(name: name, database: self)
    }

    /// The named consumer, which the file must have already: for a process that resumes a
    /// consumer, where ``consumer(named:)`` would register a misspelled name at the newest commit
    /// and silently skip the backlog. Writes nothing.
    ///
    /// ```swift
    /// let indexer = try db.existingConsumer(named: "search-indexer")   // throws on a typo
    /// ```
    ///
    /// - Throws: `unknownConsumer` naming the consumers the file has; what a read throws
    ///   (`databaseClosed`, `corrupt`).
    public func existingConsumer(named name: String) throws -> Consumer {
        let names = try consumerNames()
        guard names.contains(name) else {
            let known = names.isEmpty ? "none" : names.map { "'\($0)'" }.joined(separator: ", ")
            throw DatabaseError(
                .unknownConsumer,
                "the file has no consumer named '\(name)' (it has: \(known)); consumer(named:) registers a "
                    + "new one at the newest commit")
        }
        return Consumer(name: name, database: self)
    }

    /// The names of the consumers the file has, sorted, as the newest commit holds them.
    ///
    /// - Throws: what a read throws (`databaseClosed`, `corrupt`).
    public func consumerNames() throws -> [String] {
        try newConnection(name: "consumers").read { txn in
            let list = try txn.core.handle().cachedStatement(
                "SELECT name FROM snapshotdb_consumers ORDER BY name")
            defer { list.reset() }
            var names: [String] = []
            while try list.step() { names.append(list.string(at: 0)) }
            return names
        }
    }

    /// Removes the named consumer from the file (a write that is not a commit), for one that
    /// will not run again: it no longer shows in `snapshotdb inspect` as behind. A ``Consumer`` of that
    /// name still in use throws `corrupt` ("the row of consumer … is gone") at its next read;
    /// `consumer(named:)` registers it again at the newest commit. Returns whether the file had
    /// it.
    ///
    /// - Throws: what a read-write transaction throws (`readOnly`, `busy`, `databaseClosed`).
    @discardableResult
    public func removeConsumer(named name: String) throws -> Bool {
        let connection = newConnection(name: "consumer \(name)")
        return try connection.readWrite { txn in
            let handle = try txn.core.handle()
            let remove = try handle.cachedStatement("DELETE FROM snapshotdb_consumers WHERE name = ?1")
            try remove.bind(name, at: 1)
            try remove.execute()
            let removed = handle.changes > 0
            if removed { txn.wroteBookkeeping = true }
            return removed
        }
    }
}
