public import Foundation

/// A read-write transaction: reads see its own writes; everything commits together when the
/// closure returns, or nothing does.
///
/// Keys and collection names are any strings (empty, NUL, SQL-looking); they are always bound
/// as parameters. Valid only inside the closure that received it.
public final class ReadWriteTransaction: ReadTransaction {
    /// What every scope of one read-write transaction shares: the transaction itself and each
    /// savepoint get their own `ReadWriteTransaction`, so that each can end with its closure,
    /// but they change one set of values.
    final class SharedState {
        /// What the transaction changed so far; restored when a savepoint rolls back.
        var changes = ChangesetBuilder()
        /// The extensions' writers (views, indexes), which update their tables before each
        /// value changes.
        let extensions: ExtensionWriters

        init(core: ConnectionCore) { extensions = ExtensionWriters(core: core) }
        /// The changeset's `info`; restored when a savepoint rolls back.
        var info: [String: String] = [:]
        /// One flag per open scope: the transaction itself, then each nested savepoint.
        var rollbackRequests = [false]
        /// The error of a `ROLLBACK TO` that failed: what the savepoint did may still be in
        /// the transaction, so the transaction must not commit.
        var failure: DatabaseError?
        /// Whether the transaction wrote bookkeeping that is not a value (a consumer's
        /// acknowledgement): committed even when no value changed, with no commit number.
        var wroteBookkeeping = false
        /// A write that failed after extension hooks had changed rows for it, or another error
        /// the transaction must not commit past, and the scope it failed in (see
        /// ``ReadWriteTransaction/keepingExtensionsInStep(_:_:)`` and
        /// ``ReadWriteTransaction/refuseCommit(_:)``).
        var outOfStep: (error: DatabaseError, depth: Int)?
        /// Counts the writes of values and the savepoint rollbacks: only grows, so a reader made
        /// before a change sees another count (``ViewReader``), whatever the change undid.
        var generation = 0
        /// What to undo in memory if the transaction does not commit, newest first (see
        /// ``ReadWriteTransaction/onRollback(_:)``).
        var rollbackActions: [() -> Void] = []
    }

    private let shared: SharedState
    /// This scope's index in `shared.rollbackRequests`: 0 for the transaction, then one more
    /// per enclosing savepoint.
    private let depth: Int

    init(core: ConnectionCore, commit: UInt64) {
        shared = SharedState(core: core)
        depth = 0
        super.init(core: core, commit: commit, hasUnnumberedForeignWrites: false)
        shared.extensions.transaction = self
    }

    /// A savepoint scope nested in whatever scope is innermost now.
    private init(savepointIn transaction: ReadWriteTransaction) {
        shared = transaction.shared
        depth = transaction.shared.rollbackRequests.count
        super.init(core: transaction.core, commit: transaction.commit)
    }

    /// What the transaction changed so far (read-only: writes mutate `shared.changes` in place,
    /// since going through a setter copied the whole change log on every write).
    var changes: ChangesetBuilder { shared.changes }

    /// The writers of the registered extensions for this transaction.
    var extensionWriters: ExtensionWriters { shared.extensions }

    /// Whether the transaction wrote bookkeeping that must be committed even without a value
    /// change (see ``Consumer/acknowledge(through:in:)``).
    var wroteBookkeeping: Bool {
        get { shared.wroteBookkeeping }
        set { shared.wroteBookkeeping = newValue }
    }

    /// Free-form information published with this transaction's ``Changeset`` (for example who
    /// or what made the change).
    ///
    /// Savepoints share their transaction's `info`; what a savepoint sets is undone when it
    /// rolls back. Setting it after the closure returned does nothing.
    public var info: [String: String] {
        get { shared.info }
        set {
            guard isActive else { return }
            shared.info = newValue
        }
    }

    var isRollbackRequested: Bool { shared.rollbackRequests[0] }

    /// The error that keeps this transaction from committing, if any (a savepoint that could
    /// not be rolled back).
    var failure: DatabaseError? { shared.failure ?? shared.outOfStep?.error }

    /// Changes whenever the transaction writes a value or rolls a savepoint back.
    var writeGeneration: Int { shared.generation }

    /// Runs `action` if the transaction ends without committing, under the writer lock (the
    /// registry of extensions is put back this way).
    func onRollback(_ action: @escaping () -> Void) {
        shared.rollbackActions.append(action)
    }

    /// Runs the rollback actions, newest first; the ``Writer`` calls this, holding its lock,
    /// when the transaction did not commit.
    func runRollbackActions() {
        let actions = shared.rollbackActions
        shared.rollbackActions = []
        for action in actions.reversed() { action() }
    }

    /// Runs the extension hooks of a write, then the write. An error once a hook changed an
    /// extension's rows (a later extension that cannot decode the value, the write itself
    /// failing) would leave the extensions out of step with the values if the transaction
    /// committed: the transaction then fails at its end with that error (catching it does not
    /// let it commit), unless a savepoint around the write is rolled back, which undoes the
    /// hooks' rows too. A value the first extension refuses to decode changed nothing, and
    /// leaves the transaction free to go on.
    private func keepingExtensionsInStep<T>(
        _ hooks: () throws(ExtensionWriters.HookFailure) -> Bool, _ write: () throws(DatabaseError) -> T
    ) throws(DatabaseError) -> T {
        shared.generation += 1
        let ran: Bool
        do {
            ran = try hooks()
        } catch {
            if error.changedRows { markOutOfStep(error.error) }
            throw error.error
        }
        do {
            return try write()
        } catch {
            if ran { markOutOfStep(error) }
            throw error
        }
    }

    /// Makes the transaction fail at its end with `error` (the first such error wins), unless a
    /// savepoint around the call that found it rolls back: for an error that a caller must not
    /// be able to catch and commit past (a consumer's batch another runner applied).
    func refuseCommit(_ error: DatabaseError) {
        guard shared.outOfStep == nil else { return }
        shared.outOfStep = (error, shared.rollbackRequests.count - 1)
    }

    private func markOutOfStep(_ error: DatabaseError) {
        guard shared.outOfStep == nil else { return }
        let wrapped = DatabaseError(
            error.code,
            "\(error.message); the transaction cannot commit: extensions had already been updated for that "
                + "write (roll back a savepoint around it to go on without it)",
            sqliteCode: error.sqliteCode, cause: error)
        shared.outOfStep = (wrapped, shared.rollbackRequests.count - 1)
    }

    override func cacheIsValid(for key: CacheKey) -> Bool {
        // The cache holds values as of the commit this transaction started from; anything the
        // transaction touched must be read from SQLite, which sees the transaction's writes.
        !shared.changes.mayHaveChanged(key)
    }

    // MARK: Writing values

    /// Stores `value` under `key` in `collection`, encoded with the collection's codec,
    /// replacing any previous value. Storing `nil` (an `Optional` that is `nil`) removes the
    /// key, as `removeValue(forKey:inCollection:)` does, rather than storing a JSON `null`.
    ///
    /// - Throws: `encodingFailed` when the codec refuses the value, `valueTooLarge`, `diskFull`
    ///   or another ``DatabaseError`` from SQLite; `transactionEnded` after the closure returned.
    public func set<T: Encodable>(_ value: T, forKey key: String, inCollection collection: String)
        throws(DatabaseError)
    {
        try checkActive()
        if let optional = value as? any OptionalValue, optional.isNone {
            try removeValue(forKey: key, inCollection: collection)
            return
        }
        try storeData(
            try encode(value, key: key, collection: collection), forKey: key, inCollection: collection)
    }

    /// `value` encoded with the collection's codec.
    func encode<T: Encodable>(_ value: T, key: String, collection: String) throws(DatabaseError) -> Data {
        do {
            return try core.codec(for: collection).encode(value)
        } catch {
            throw DatabaseError(
                .encodingFailed,
                "cannot encode \(T.self) for key '\(key)' in collection '\(collection)': \(error)",
                collection: collection, key: key, typeName: String(describing: T.self), cause: error)
        }
    }

    /// Records that the metadata of `key` changed (a change of the key in the changeset).
    func recordMetadataChange(forKey key: String, inCollection collection: String) {
        shared.changes.recordSet(key, in: collection)
    }

    /// Stores raw bytes under `key` in `collection`, bypassing the codec.
    public func setData(_ data: Data, forKey key: String, inCollection collection: String)
        throws(DatabaseError)
    {
        try checkActive()
        try storeData(data, forKey: key, inCollection: collection)
    }

    /// Stores `data` under `key`; with `metadata` (`.some(nil)` clears it) replaces the metadata
    /// too, else keeps it.
    func storeData(_ data: Data, forKey key: String, inCollection collection: String, metadata: Data?? = nil)
        throws(DatabaseError)
    {
        try checkNotEnumerating(collection)
        let handle = try core.handle()
        try handle.checkLength(data.count)
        try keepingExtensionsInStep {
            () throws(ExtensionWriters.HookFailure) in
            try shared.extensions.willSet(data, forKey: key, inCollection: collection)
        } _: { () throws(DatabaseError) in
            if let metadata {
                let statement = try handle.statement(.upsertWithMetadata)
                defer { statement.reset() }
                try statement.bind(collection, at: 1)
                try statement.bind(key, at: 2)
                try statement.bind(data, at: 3)
                if let metadata { try statement.bind(metadata, at: 4) } else { try statement.bindNull(at: 4) }
                _ = try statement.step()
            } else {
                try handle.statement(.upsert).run(collection, key, data)
            }
        }
        shared.changes.recordSet(key, in: collection)
    }

    /// Reports `key` in `collection` as changed in this commit's changeset without rewriting its
    /// value (YapDatabase's `touch`): connections and `changes()` subscribers see it changed
    /// (``Database/observe(forKey:inCollection:as:)`` yields only when the bytes differ), and views
    /// report its row as updated. Does nothing when there is no value under the key.
    public func touch(forKey key: String, inCollection collection: String) throws(DatabaseError) {
        try checkActive()
        try checkNotEnumerating(collection)
        guard let data = try core.handle().statement(.getData).fetchBlob(collection, key) else { return }
        try keepingExtensionsInStep {
            () throws(ExtensionWriters.HookFailure) in
            try shared.extensions.willSet(data, forKey: key, inCollection: collection)
        } _: {
        }
        shared.changes.recordSet(key, in: collection)
    }

    /// Removes the value under `key` in `collection`; removing an absent key changes nothing.
    public func removeValue(forKey key: String, inCollection collection: String) throws(DatabaseError) {
        try checkActive()
        try checkNotEnumerating(collection)
        let handle = try core.handle()
        try keepingExtensionsInStep {
            () throws(ExtensionWriters.HookFailure) in
            try shared.extensions.willRemove(forKey: key, inCollection: collection)
        } _: { () throws(DatabaseError) in
            try handle.statement(.delete).withBindings(collection, key) { statement throws(DatabaseError) in
                _ = try statement.step()
            }
        }
        if handle.changes > 0 { shared.changes.recordRemove(key, in: collection) }
    }

    /// Removes the values under `keys` in `collection`.
    public func removeValues<Keys: Sequence<String>>(forKeys keys: Keys, inCollection collection: String)
        throws(DatabaseError)
    {
        for key in keys { try removeValue(forKey: key, inCollection: collection) }
    }

    /// Removes every value of `collection`.
    public func removeAll(inCollection collection: String) throws(DatabaseError) {
        try checkActive()
        try checkNotEnumerating(collection)
        let handle = try core.handle()
        try keepingExtensionsInStep {
            () throws(ExtensionWriters.HookFailure) in
            try shared.extensions.willRemoveAll(inCollection: collection)
        } _: { () throws(DatabaseError) in
            let statement = try handle.statement(.deleteCollection)
            defer { statement.reset() }
            try statement.bind(collection, at: 1)
            _ = try statement.step()
        }
        if handle.changes > 0 { shared.changes.recordClear(collection) }
    }

    /// Removes every value of every collection.
    public func removeAllCollections() throws(DatabaseError) {
        try checkActive()
        try checkNotEnumerating(nil)
        let handle = try core.handle()
        try keepingExtensionsInStep {
            () throws(ExtensionWriters.HookFailure) in
            try shared.extensions.willRemoveAllCollections()
        } _: { () throws(DatabaseError) in
            try handle.statement(.deleteAll).execute()
        }
        if handle.changes > 0 { shared.changes.recordClearAll() }
    }

    // MARK: Savepoints and rollback

    /// Runs `body` in a savepoint: when `body` throws, or calls ``rollback()``, only what it did
    /// is undone and the enclosing transaction goes on. Savepoints nest.
    ///
    /// ```swift
    /// try writer.readWrite { txn in
    ///     try txn.set(order, forKey: order.id, inCollection: "orders")
    ///     try? txn.savepoint { txn in
    ///         try txn.set(try reserveStock(order), forKey: order.id, inCollection: "stock")
    ///     }   // a failed reservation leaves the order in place
    /// }
    /// ```
    ///
    /// `body` receives a transaction of its own, valid only until `body` returns, like the one
    /// of ``Connection/readWrite(_:)-8zuku``.
    ///
    /// - Throws: what `body` throws (after rolling the savepoint back), or ``DatabaseError``;
    ///   `transactionEnded` when this transaction's closure already returned.
    public func savepoint<T>(_ body: (ReadWriteTransaction) throws -> T) throws -> T {
        try checkActive()
        let handle = try core.handle()
        let scope = ReadWriteTransaction(savepointIn: self)
        let name = "snapshotdb_savepoint_\(scope.depth)"
        // What extension writers hold back must be in the rows the savepoint can roll back to.
        try shared.extensions.beginSavepoint()
        do {
            try handle.execute("SAVEPOINT \(name)")
        } catch {
            shared.extensions.endSavepoint(rolledBack: false)
            throw error
        }
        let saved = (shared.changes, shared.info)
        shared.rollbackRequests.append(false)
        let result: T
        do {
            result = try body(scope)
        } catch {
            scope.end()
            shared.rollbackRequests.removeLast()
            rollBack(to: name, depth: scope.depth, handle: handle)
            (shared.changes, shared.info) = saved
            throw error
        }
        scope.end()
        if let error = core.transactionEndedBySQLite() {
            // `body` caught the error that ended the transaction: its savepoint is gone too.
            shared.rollbackRequests.removeLast()
            shared.extensions.endSavepoint(rolledBack: true)
            throw error
        }
        if shared.rollbackRequests.removeLast() {
            rollBack(to: name, depth: scope.depth, handle: handle)
            (shared.changes, shared.info) = saved
            if let failure = shared.failure { throw failure }
        } else {
            shared.extensions.endSavepoint(rolledBack: false)
            try handle.execute("RELEASE \(name)")
        }
        return result
    }

    /// Rolls a savepoint back. One that fails leaves what the savepoint did in the transaction:
    /// the transaction then fails at its end instead of committing it (the first error wins).
    private func rollBack(to savepoint: String, depth: Int, handle: SQLiteHandle) {
        // Whether or not SQLite rolls back, the savepoint ends (a failed rollback fails the
        // transaction, so what the writers then hold is never committed).
        defer { shared.extensions.endSavepoint(rolledBack: true) }
        shared.generation += 1
        do throws(DatabaseError) {
            if core.database.faults.shouldFail(.savepointRollback) {
                throw FaultInjector.error(.savepointRollback)
            }
            try handle.execute("ROLLBACK TO \(savepoint); RELEASE \(savepoint)")
            // What a write left out of step inside the savepoint is undone with it.
            if let outOfStep = shared.outOfStep, outOfStep.depth >= depth { shared.outOfStep = nil }
        } catch {
            if shared.failure == nil {
                shared.failure = DatabaseError(
                    error.code,
                    "a savepoint could not be rolled back, so the transaction cannot commit: \(error.message)",
                    sqliteCode: error.sqliteCode, cause: error)
            }
        }
    }

    /// Refuses a write into `collection` (any collection for `nil`) while this connection
    /// enumerates it: SQLite would hand the enumeration rows the write moved or added, or not,
    /// depending on where they land.
    private func checkNotEnumerating(_ collection: String?) throws(DatabaseError) {
        try checkNotLendingBytes(collection)
        guard core.isEnumerating(collection) else { return }
        throw DatabaseError(
            .misuse,
            "a write into collection '\(collection ?? "*")' inside an enumeration of it; collect the keys first "
                + "(for example with keys(inCollection:)), then write")
    }

    /// Throws `misuse` inside a ``ReadTransaction/withUnsafeBytes(forKey:inCollection:_:)``
    /// closure: a write to the values table could move the bytes it was lent.
    func checkNotLendingBytes(_ collection: String?) throws(DatabaseError) {
        guard core.bytesLent > 0 else { return }
        throw DatabaseError(
            .misuse,
            "a write into collection '\(collection ?? "*")' inside withUnsafeBytes(forKey:inCollection:); "
                + "copy the bytes it needs (for example Data(bytes)) and write after its closure returns")
    }

    /// Marks this scope (this savepoint's, or the whole transaction's) to be rolled back,
    /// without error, when its closure returns. Does not throw; writes made after the call are
    /// rolled back too.
    ///
    /// Called on the transaction from inside one of its savepoints, it rolls back the whole
    /// transaction. Called after the closure returned, it does nothing.
    public func rollback() {
        guard isActive else { return }
        shared.rollbackRequests[depth] = true
    }
}

/// Lets `set` recognise an `Optional` that is `nil` whatever its wrapped type.
private protocol OptionalValue {
    var isNone: Bool { get }
}

extension Optional: OptionalValue {
    fileprivate var isNone: Bool { self == nil }
}
