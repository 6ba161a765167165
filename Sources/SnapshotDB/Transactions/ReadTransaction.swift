public import Foundation

/// A read transaction: a consistent view of one commit, valid only inside the closure that
/// received it.
///
/// Every read sees exactly ``commit``, whatever other connections commit meanwhile. Values are
/// served from the connection's cache when it holds them as of this commit, else read from
/// SQLite and decoded with the collection's codec. Not `Sendable`: a transaction belongs to
/// the thread running its closure. Any use after the closure returned throws
/// ``DatabaseError/Code/transactionEnded``.
public class ReadTransaction {
    let core: ConnectionCore
    /// The commit this transaction reads.
    public let commit: UInt64
    /// Whether the snapshot also holds writes of a foreign client (the `sqlite3` shell, another
    /// library) that have no commit number yet: it then reads ``commit`` plus those writes.
    ///
    /// A foreign client's writes are numbered by the next SnapshotDB commit, or by the first
    /// reader that finds them when the writer lock and SQLite's write lock are both free. A
    /// reader never waits for a writer, so one that finds them while a writer (of any process,
    /// foreign clients included) holds the lock reads them unnumbered; so does every reader of
    /// a read-only file, and of a read replica until its primary numbers them. They then arrive
    /// as a commit of their own with their keys, once numbered (older contents put back from
    /// outside, such as the `sqlite3` shell's `.restore`, count too, and arrive as an external
    /// commit: their keys are unknown); an advance to such a snapshot reports them before that as
    /// an external changeset under ``commit``, a number it may have reported already (see
    /// ``Connection/beginLongLivedReadTransaction()``). Always `false` in a read-write
    /// transaction, which numbers them first, and for a read replica's snapshot of its primary
    /// put back to an older commit, which is a whole commit of the primary.
    public let hasUnnumberedForeignWrites: Bool
    private(set) var isActive = true
    /// Extensions (name and version) this transaction found in its snapshot's catalog: the
    /// catalog of a snapshot does not change, so each is looked up once.
    var installedExtensions: Set<String> = []
    /// An error a non-throwing read (a view's position questions) met; thrown by the next
    /// throwing call, so that it is never lost.
    private var failure: DatabaseError?

    /// Keeps `error` for the transaction's next throwing call (or the end of its closure).
    func recordFailure(_ error: DatabaseError) {
        if failure == nil { failure = error }
    }

    /// The error a non-throwing read recorded that no throwing call has thrown yet, taken: the
    /// transaction's closure returned, and the call that ran it throws it.
    func takeRecordedFailure() -> DatabaseError? {
        defer { failure = nil }
        return failure
    }

    init(core: ConnectionCore, commit: UInt64, hasUnnumberedForeignWrites: Bool = false) {
        self.core = core
        self.commit = commit
        self.hasUnnumberedForeignWrites = hasUnnumberedForeignWrites
    }

    func end() {
        isActive = false
        let actions = endActions
        endActions = []
        for entry in actions where entry.owner != nil { entry.action() }
    }

    /// What to do when the transaction ends (its closure returned), for an owner that may be
    /// released before: readers made from it let go of the SQLite handle, so that one kept past
    /// its closure keeps no handle open after ``Database/close()``.
    private struct EndAction {
        weak var owner: AnyObject?
        let action: () -> Void
    }

    private var endActions: [EndAction] = []
    /// When ``endActions`` next drops the entries of released owners: a loop that makes a
    /// reader per iteration in one long transaction kept one entry per reader before.
    private var pruneAt = 64

    /// How many end actions are kept (for tests).
    var endActionCount: Int { endActions.count }

    /// Runs `action` when the transaction ends, unless `owner` was released by then; at once
    /// when it has ended.
    func onEnd(for owner: AnyObject, _ action: @escaping () -> Void) {
        guard isActive else { return action() }
        endActions.append(EndAction(owner: owner, action: action))
        if endActions.count >= pruneAt {
            endActions.removeAll { $0.owner == nil }
            pruneAt = max(64, 2 * endActions.count)
        }
    }

    func checkActive() throws(DatabaseError) {
        if let failure {
            self.failure = nil
            throw failure
        }
        guard isActive else {
            throw DatabaseError(
                .transactionEnded,
                "a transaction of connection '\(core.name)' was used after its closure returned")
        }
        if let error = core.transactionEndedBySQLite() { throw error }
    }

    /// Whether reads of `key` may be served from the connection's cache (overridden by
    /// read-write transactions for keys they changed).
    func cacheIsValid(for key: CacheKey) -> Bool { true }

    /// The stored bytes and cached object of a value, or `nil` when absent.
    func entry(for key: CacheKey) throws(DatabaseError) -> CacheEntry? {
        let cacheable = cacheIsValid(for: key)
        if cacheable, let entry = core.cache.entry(for: key) { return entry }
        guard let data = try core.fetchData(key) else { return nil }
        let entry = CacheEntry(data: data, object: nil)
        if cacheable, core.cache.admitsRawValue(for: key) { core.cache.insert(entry, for: key) }
        return entry
    }

    // MARK: Reading values

    /// The value stored under `key` in `collection`, decoded as `T`, or `nil` when there is none.
    ///
    /// - Throws: ``DatabaseError/Code/decodingFailed`` (naming collection, key and type) when the
    ///   stored value is not a `T`; `transactionEnded` after the closure returned.
    public func value<T: Decodable>(
        forKey key: String, inCollection collection: String, as type: T.Type = T.self
    ) throws(DatabaseError) -> T? {
        try checkActive()
        let cacheKey = CacheKey(collection: collection, key: key)
        let cacheable = cacheIsValid(for: cacheKey)
        if cacheable, var entry = core.cache.entry(for: cacheKey) {
            if let object = entry.object as? T { return object }
            let value = try decode(T.self, from: entry.data, key: key, collection: collection)
            if Self.mayShare(T.self) {
                entry.object = value
                core.cache.insert(entry, for: cacheKey)
            }
            return value
        }
        // A miss is cached once, with its decoded value.
        guard let data = try core.fetchData(cacheKey) else { return nil }
        let value = try decode(T.self, from: data, key: key, collection: collection)
        if cacheable {
            core.cache.insert(
                CacheEntry(data: data, object: Self.mayShare(T.self) ? value : nil), for: cacheKey)
        }
        return value
    }

    /// Whether one decoded `T` may be handed to every reader of the same commit: not for a
    /// class, whose instances a caller can change in place (a form editing the object it was
    /// given must not change what the next read of that commit returns). Classes are decoded
    /// again from the cached bytes on every read. Class instances inside a value type (a struct's
    /// class property, an array of class instances) are shared, as <doc:Design> says: Swift gives
    /// no cheap way to tell, and YapDatabase's object cache shares objects the same way.
    static func mayShare<T>(_ type: T.Type) -> Bool { !(type is AnyObject.Type) }

    /// The raw bytes stored under `key` in `collection`, or `nil` when there is none.
    public func data(forKey key: String, inCollection collection: String) throws(DatabaseError) -> Data? {
        try checkActive()
        return try entry(for: CacheKey(collection: collection, key: key))?.data
    }

    /// Calls `body` with the raw bytes stored under `key` in `collection`, without copying them,
    /// and returns what it returns; returns `nil` without calling it when there is no value.
    ///
    /// ``data(forKey:inCollection:)`` copies a value into a new `Data` (two allocations); this
    /// read hands the bytes where they are: in SQLite's buffer for a value read from the file,
    /// or in the connection's cache. Use it to parse a format of your own in place, or to hash,
    /// compare or checksum values without keeping them.
    ///
    /// ```swift
    /// let checksum = try txn.withUnsafeBytes(forKey: "blob", inCollection: "files") { bytes in
    ///     bytes.reduce(0) { $0 &+ UInt32($1) }
    /// }
    /// ```
    ///
    /// The buffer is valid only inside `body`: do not keep it or a pointer into it. Reads inside
    /// `body` are allowed (including another `withUnsafeBytes`); a write is not, since it could
    /// move the bytes. In a read-write transaction it throws ``DatabaseError/Code/misuse`` and
    /// changes nothing.
    ///
    /// - Throws: what `body` throws; `transactionEnded` after the transaction's closure returned.
    @inlinable
    public func withUnsafeBytes<R>(
        forKey key: String, inCollection collection: String, _ body: (UnsafeRawBufferPointer) throws -> R
    ) throws -> R? {
        // Generic only here, inlined into the caller: the read itself is not generic, which
        // spares every call the type-metadata lookups of unspecialized generic code.
        var result: R?
        try lendBytes(forKey: key, inCollection: collection) { result = try body($0) }
        return result
    }

    /// The read of ``withUnsafeBytes(forKey:inCollection:_:)``: calls `body` with the bytes,
    /// unless there is no value.
    @usableFromInline
    func lendBytes(
        forKey key: String, inCollection collection: String, _ body: (UnsafeRawBufferPointer) throws -> Void
    ) throws {
        try checkActive()
        let cacheKey = CacheKey(collection: collection, key: key)
        let cacheable = cacheIsValid(for: cacheKey)
        // A cached value, or one read often enough to be cached now (the admission filter of
        // `data(forKey:)`, asked here before the read, so that a value not admitted is never
        // copied), is lent from its cached `Data`; any other is lent in place.
        if cacheable, let entry = core.cache.entry(for: cacheKey) {
            return try core.lendingBytes { try entry.data.withUnsafeBytes(body) }
        }
        if cacheable, core.cache.admitsRawValue(for: cacheKey) {
            guard let data = try core.fetchData(cacheKey) else { return }
            core.cache.insert(CacheEntry(data: data, object: nil), for: cacheKey)
            return try core.lendingBytes { try data.withUnsafeBytes(body) }
        }
        // A body that reads the same way runs on a statement of its own (`idleStatement`).
        let statement = try core.handle().idleStatement(.getDataInPlace)
        try core.lendingBytes { try statement.withBlob(collection, key, body) }
    }

    /// Whether a value is stored under `key` in `collection`.
    public func hasValue(forKey key: String, inCollection collection: String) throws(DatabaseError) -> Bool {
        try checkActive()
        let cacheKey = CacheKey(collection: collection, key: key)
        if cacheIsValid(for: cacheKey), core.cache.entry(for: cacheKey) != nil { return true }
        return try core.handle().statement(.exists).withBindings(collection, key) {
            statement throws(DatabaseError) in
            try statement.step()
        }
    }

    /// Every key of `collection`, in ascending (binary) order.
    public func keys(inCollection collection: String) throws(DatabaseError) -> [String] {
        try checkActive()
        let statement = try core.handle().statement(.keys)
        defer { statement.reset() }
        try statement.bind(collection, at: 1)
        var keys: [String] = []
        while try statement.step() { keys.append(statement.string(at: 0)) }
        return keys
    }

    /// How many values `collection` holds.
    public func count(inCollection collection: String) throws(DatabaseError) -> Int {
        try checkActive()
        let statement = try core.handle().statement(.count)
        defer { statement.reset() }
        try statement.bind(collection, at: 1)
        return try statement.step() ? Int(statement.int64(at: 0)) : 0
    }

    /// The names of every collection that holds at least one value, in ascending order.
    public func collections() throws(DatabaseError) -> [String] {
        try checkActive()
        let statement = try core.handle().statement(.collections)
        defer { statement.reset() }
        var names: [String] = []
        while try statement.step() { names.append(statement.string(at: 0)) }
        return names
    }

    /// Calls `body` with every key and value of `collection`, in ascending key order, until it
    /// sets `stop` to `true`.
    ///
    /// ```swift
    /// try txn.enumerate(inCollection: "items", as: Item.self) { key, item, stop in
    ///     if item.isDone { stop = true }
    /// }
    /// ```
    ///
    /// - Throws: `decodingFailed` for a value that is not a `T`, and what `body` throws.
    public func enumerate<T: Decodable>(
        inCollection collection: String, as type: T.Type = T.self,
        _ body: (_ key: String, _ value: T, _ stop: inout Bool) throws -> Void
    ) throws {
        try checkActive()
        // `body` may enumerate again (for each order, its lines): the cached statement is then
        // still stepping, and binding or resetting it would end the outer enumeration.
        let statement = try core.handle().idleStatement(.enumerate)
        core.beginEnumerating(collection)
        defer {
            core.endEnumerating(collection)
            statement.reset()
        }
        try statement.bind(collection, at: 1)
        // The JSON codec decodes each value where SQLite holds it, with no `Data` made for it.
        let json = core.jsonCodec(for: collection)
        var stop = false
        while !stop, try statement.step() {
            let key = statement.string(at: 0)
            let value =
                if let json {
                    try statement.withBlob(at: 1) { bytes throws(DatabaseError) in
                        try decode(T.self, fromBytes: bytes, with: json, key: key, collection: collection)
                    }
                } else {
                    try decode(T.self, from: statement.data(at: 1), key: key, collection: collection)
                }
            try body(key, value, &stop)
        }
    }

    /// The keys and values of `collection` for which `isIncluded` returns `true`, in ascending
    /// key order.
    ///
    /// - Throws: `decodingFailed` for a value that is not a `T`, and what `isIncluded` throws.
    public func values<T: Decodable>(
        inCollection collection: String, as type: T.Type = T.self,
        where isIncluded: (_ key: String, _ value: T) throws -> Bool = { _, _ in true }
    ) throws -> [(key: String, value: T)] {
        var matches: [(key: String, value: T)] = []
        try enumerate(inCollection: collection, as: T.self) { key, value, _ in
            if try isIncluded(key, value) { matches.append((key, value)) }
        }
        return matches
    }

    func decode<T: Decodable>(_ type: T.Type, from data: Data, key: String, collection: String)
        throws(DatabaseError) -> T
    {
        do {
            return try core.codec(for: collection).decode(T.self, from: data)
        } catch {
            throw Self.decodingFailed(T.self, key: key, collection: collection, error)
        }
    }

    /// ``decode(_:from:key:collection:)`` of bytes in place, through the JSON codec.
    func decode<T: Decodable>(
        _ type: T.Type, fromBytes bytes: UnsafeRawBufferPointer, with json: JSONValueCodec, key: String,
        collection: String
    ) throws(DatabaseError) -> T {
        do {
            return try json.decode(T.self, fromBytes: bytes)
        } catch {
            throw Self.decodingFailed(T.self, key: key, collection: collection, error)
        }
    }

    private static func decodingFailed<T>(_ type: T.Type, key: String, collection: String, _ error: any Error)
        -> DatabaseError
    {
        DatabaseError(
            .decodingFailed,
            "the value for key '\(key)' in collection '\(collection)' cannot be decoded as \(T.self): \(error)",
            collection: collection, key: key, typeName: String(describing: T.self), cause: error)
    }
}

/// Transactions belong to the thread that runs their closure.
@available(*, unavailable)
extension ReadTransaction: Sendable {}

/// A reader's reference to the transaction it reads in (a view, index or full-text index
/// reader). Weak: a reader kept past its transaction's closure must not keep the transaction,
/// and through it the connection and its SQLite handle, alive; it then throws
/// `transactionEnded`.
struct ReaderTransaction {
    private weak var transaction: ReadTransaction?
    /// What reads through it, for the error (`the view 'notes'`).
    let reader: String

    init(_ transaction: ReadTransaction, reader: String) {
        self.transaction = transaction
        self.reader = reader
    }

    /// The transaction, while it exists (its activity is the caller's to check).
    func get() throws(DatabaseError) -> ReadTransaction {
        guard let transaction else { throw ended }
        return transaction
    }

    /// The transaction, or `nil` once it is gone.
    var ifAlive: ReadTransaction? { transaction }

    var ended: DatabaseError {
        DatabaseError(.transactionEnded, "\(reader) was read after its transaction's closure returned")
    }
}
