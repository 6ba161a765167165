internal import CSQLite
internal import CSnapshotDBVFS
internal import Foundation

/// One SQLite database handle (`sqlite3 *`) and its statement cache.
///
/// Every SQLite call of SnapshotDB goes through this type or ``SQLiteStatement``, so that
/// error mapping, statement lifetime and handle configuration live in one place. A handle is
/// not thread-safe; its owner (a connection, the checkpointer) serializes every use.
final class SQLiteHandle {
    /// The raw handle. Internal so that the few C calls that need it stay in this layer's files.
    let pointer: OpaquePointer
    let path: String
    /// Prepared statements indexed by `SQL.rawValue`, so that the hot paths fetch a statement
    /// without hashing: a slot per statement the storage layer defines (``SQL``, in
    /// `Database/SQL.swift`, with every SQL text of SnapshotDB's own tables), which this layer
    /// prepares and keeps without reading; a buffer rather than a stored array, which would pay Swift's dynamic
    /// exclusivity check on every fetch. Sound because a handle's owner serializes every use.
    private let statements: UnsafeMutableBufferPointer<SQLiteStatement?>
    /// The last error a call on this handle reported: the cause to name when SQLite turns out
    /// to have rolled back a transaction on its own after an error.
    private(set) var lastError: DatabaseError?
    /// SQLite's own mapping of the WAL index (see ``walIndexHeader()``), looked up once, inside
    /// a transaction; `nil` until then, and for read-only handles.
    private var walIndex: UnsafeRawPointer?
    private var walIndexLookedUp: Bool
    /// Where the last commit on this handle ended in the WAL, as `sqlite3_wal_hook` reported it
    /// (see ``recordCommitFrames()``); taken by the ``Writer`` after its `COMMIT`.
    private var lastCommitFrames: WALCommitFrames?
    /// Statements of ``cachedStatement(_:)``, by SQL text.
    private var dynamicStatements: [String: SQLiteStatement] = [:]
    /// The sets of ``statementSet(_:sql:)``, by key.
    private var statementSets: [String: AnyObject] = [:]
    /// A slot for what a higher layer keeps per handle (the extensions' cache of layouts and
    /// checked queries): opaque here, typed and owned by that layer, released with the handle.
    var attachedState: AnyObject?

    /// Opens `path` (`sqlite3_open_v2`) read-write without creating it: SnapshotDB creates new
    /// files itself so that it controls their mode. Handles use the `snapshotdb` VFS, the
    /// process's default VFS with WAL preallocation under `synchronous = FULL`
    /// (`Sources/CSnapshotDBVFS/snapshotdb_vfs.c` gives the measurements and the reasoning).
    ///
    /// With `vfs`, the handle opens `path` through that registered VFS instead, read-only: a
    /// read replica (``Database/init(replica:vfs:configuration:)``). Such a file has no WAL
    /// index of ours to map, so the handle never looks for one.
    init(path: String, readOnly: Bool = false, vfs: String? = nil) throws(DatabaseError) {
        var handle: OpaquePointer?
        let flags =
            (readOnly || vfs != nil ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE) | SQLITE_OPEN_NOMUTEX
            | SQLITE_OPEN_EXRESCODE | (vfs != nil ? SQLITE_OPEN_URI : 0)
        // SnapshotDB's VFS: the default one with WAL preallocation (see snapshotdb_vfs.c).
        let result =
            if let vfs {
                sqlite3_open_v2(path, &handle, flags, vfs)
            } else {
                sqlite3_open_v2(path, &handle, flags, snapshotdb_vfs_name())
            }
        guard result == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            let errno = handle.map { sqlite3_system_errno($0) } ?? 0
            if let handle { sqlite3_close_v2(handle) }
            throw DatabaseError.sqlite(result, message: message, systemErrno: errno, context: "open \(path)")
        }
        self.pointer = handle
        self.path = path
        walIndexLookedUp = readOnly || vfs != nil
        statements = .allocate(capacity: SQL.allCases.count)
        statements.initialize(repeating: nil)
        sqlite3_extended_result_codes(handle, 1)
    }

    deinit {
        // Statements are finalized (released) before the handle closes.
        statements.deinitialize().deallocate()
        dynamicStatements = [:]
        statementSets = [:]
        attachedState = nil
        sqlite3_close_v2(pointer)
    }

    /// A typed error for `result`, with the handle's current message and system errno.
    func error(_ result: Int32, context: String?) -> DatabaseError {
        let error = DatabaseError.sqlite(
            result, message: String(cString: sqlite3_errmsg(pointer)),
            systemErrno: sqlite3_system_errno(pointer), context: context)
        lastError = error
        return error
    }

    /// Runs one or more SQL statements that return no rows (`sqlite3_exec`).
    func execute(_ sql: String) throws(DatabaseError) {
        let result = sqlite3_exec(pointer, sql, nil, nil, nil)
        if result != SQLITE_OK { throw error(result, context: sql) }
    }

    /// Runs a query that returns one integer (a pragma or a scalar `SELECT`).
    func int64(_ sql: String) throws(DatabaseError) -> Int64? {
        let statement = try SQLiteStatement(handle: self, sql: sql, persistent: false)
        defer { statement.reset() }
        return try statement.step() ? statement.int64(at: 0) : nil
    }

    /// Steps the cached statement `sql` once and returns the integer of its first column (a
    /// pragma prepared once per handle).
    func int64Statement(_ sql: SQL) throws(DatabaseError) -> Int64 {
        let statement = try statement(sql)
        defer { statement.reset() }
        return try statement.step() ? statement.int64(at: 0) : 0
    }

    /// Runs a query that returns one string.
    func string(_ sql: String) throws(DatabaseError) -> String? {
        let statement = try SQLiteStatement(handle: self, sql: sql, persistent: false)
        defer { statement.reset() }
        return try statement.step() ? statement.string(at: 0) : nil
    }

    /// The cached statement for `sql`, prepared on first use with `SQLITE_PREPARE_PERSISTENT`.
    func statement(_ sql: SQL) throws(DatabaseError) -> SQLiteStatement {
        if let cached = statements[sql.rawValue] { return cached }
        let statement = try SQLiteStatement(handle: self, sql: sql.text, persistent: true)
        statements[sql.rawValue] = statement
        return statement
    }

    /// The statement for `sql` text built at run time (an extension's tables have names of
    /// their own), prepared once with `SQLITE_PREPARE_PERSISTENT` and kept for the handle's life.
    func cachedStatement(_ sql: String) throws(DatabaseError) -> SQLiteStatement {
        if let cached = dynamicStatements[sql] { return cached }
        // Queries built from an app's fragments may be many: keep the cache bounded.
        if dynamicStatements.count >= 256 { dynamicStatements = dynamicStatements.filter { $0.value.isBusy } }
        let statement = try SQLiteStatement(handle: self, sql: sql, persistent: true)
        dynamicStatements[sql] = statement
        return statement
    }

    /// The handle's ``StatementSet`` for `key`, made on first use with `sql`. The key names
    /// everything the texts depend on (the extension's table prefix, and its columns where the
    /// texts list them), so that a set never runs another layout's text.
    func statementSet<Name>(_ key: String, sql: @escaping (Name) -> String) -> StatementSet<Name> {
        if let set = statementSets[key] as? StatementSet<Name> { return set }
        // Keys of extensions registered again with other columns accumulate: keep them bounded.
        if statementSets.count >= 64 { statementSets = [:] }
        let set = StatementSet(handle: self, sql: sql)
        statementSets[key] = set
        return set
    }

    /// Forgets every statement of ``cachedStatement(_:)`` and ``statementSet(_:sql:)`` (after
    /// the tables they name were dropped or created again).
    func clearCachedStatements() {
        dynamicStatements = [:]
        statementSets = [:]
    }

    /// The cached statement for `sql` unless it is part way through its rows, else a new one
    /// for this use only: for statements whose rows are handed to the caller's code one by
    /// one, which may run the same statement again (an enumeration inside an enumeration).
    func idleStatement(_ sql: SQL) throws(DatabaseError) -> SQLiteStatement {
        let cached = try statement(sql)
        guard cached.isBusy else { return cached }
        return try SQLiteStatement(handle: self, sql: sql.text, persistent: false)
    }

    /// The WAL-index header as it is now, or `nil` when it cannot be read consistently (a writer
    /// is updating it) or the handle has not yet found SQLite's mapping of it.
    ///
    /// Call ``lookUpWALIndex()`` once inside a transaction first. The pointer is SQLite's own
    /// mapping of the `-shm` file for this handle, which stays mapped while the handle is open
    /// in WAL mode (SnapshotDB handles never leave it, and while they are open no other client
    /// can take the exclusive lock that leaving WAL mode needs).
    func walIndexHeader() -> WALIndexHeader? {
        guard let walIndex else { return nil }
        var header = snapshotdb_wal_index_header()
        guard snapshotdb_read_wal_index_header(walIndex, &header) != 0 else { return nil }
        return WALIndexHeader(raw: header)
    }

    /// Finds SQLite's mapping of the WAL index; call inside a transaction, when SQLite has
    /// mapped it. Does nothing after the first call.
    func lookUpWALIndex() {
        guard !walIndexLookedUp else { return }
        walIndexLookedUp = true
        walIndex = snapshotdb_wal_index(pointer).map { UnsafeRawPointer($0) }
    }

    /// Whether a `ROLLBACK` failed on this handle: it may still be inside a transaction it
    /// cannot end, and its owner replaces it (closing a handle rolls back what it had open).
    private(set) var isBroken = false

    #if DEBUG
        /// The faults tests inject into a connection's handle (``FaultInjector/Fault/rollback``).
        var faults: FaultInjector?
    #endif

    /// Ends the open transaction, if any, without committing.
    ///
    /// - Throws: the error of a `ROLLBACK` that failed; the handle is then ``isBroken``.
    func rollback() throws(DatabaseError) {
        guard !isAutocommit else { return }
        do throws(DatabaseError) {
            #if DEBUG
                if faults?.shouldFail(.rollback) == true { throw FaultInjector.error(.rollback) }
            #endif
            try statement(.rollback).execute()
        } catch {
            isBroken = true
            throw error
        }
    }

    /// Whether the handle is outside any transaction (`sqlite3_get_autocommit`).
    var isAutocommit: Bool { sqlite3_get_autocommit(pointer) != 0 }

    /// The rowid of the last row inserted (`sqlite3_last_insert_rowid`).
    var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(pointer) }

    /// Rows changed by the last statement (`sqlite3_changes64`).
    var changes: Int64 { sqlite3_changes64(pointer) }

    /// Sets how long SQLite retries a lock held by another process (`sqlite3_busy_timeout`).
    func setBusyTimeout(milliseconds: Int32) { sqlite3_busy_timeout(pointer, milliseconds) }

    /// Configures the handle the way every SnapshotDB connection runs.
    ///
    /// - Auto-checkpoint off (`sqlite3_wal_autocheckpoint(0)`): the checkpointer decides.
    /// - Triggers off (`SQLITE_DBCONFIG_ENABLE_TRIGGER`): the schema's triggers exist to mark
    ///   writes by *foreign* clients, which have triggers on; our own writes must not fire them.
    func configureForSnapshotDB(synchronous: Configuration.Synchronous, journalSizeLimit: Int64)
        throws(DatabaseError)
    {
        sqlite3_wal_autocheckpoint(pointer, 0)
        _ = snapshotdb_db_config_enable_trigger(pointer, 0)
        _ = snapshotdb_db_config_defensive(pointer, 1)
        try execute(
            "PRAGMA synchronous = \(synchronous == .full ? "FULL" : "NORMAL");"
                + " PRAGMA journal_size_limit = \(journalSizeLimit);")
    }
}

/// Where a commit ended in the WAL: its end frame (the WAL's size in frames once the commit is
/// in it) and the WAL's generation (its header's salts; `nil` when the WAL-index header was
/// being rewritten).
struct WALCommitFrames: Equatable, Sendable {
    var endFrame: Int
    var generation: UInt64?
}

/// A copy of the WAL-index header: it identifies the commit of the WAL a read transaction
/// sees. Headers never repeat: every commit increments the change counter, and every WAL
/// reset draws new salts.
struct WALIndexHeader: Equatable, Sendable {
    fileprivate var raw: snapshotdb_wal_index_header

    /// SQLite's change counter: one more on every commit, unchanged by anything else.
    var change: UInt32 { withUnsafePointer(to: raw) { snapshotdb_wal_index_change($0) } }

    /// Where the snapshot's commit ends in the WAL: the header's frame count (`mxFrame`, bytes
    /// 16..<20, native byte order) and the WAL's salts (bytes 32..<40, as the `-wal` file holds
    /// them).
    var commitFrames: WALCommitFrames {
        withUnsafeBytes(of: raw.bytes) { bytes in
            WALCommitFrames(
                endFrame: Int(bytes.loadUnaligned(fromByteOffset: 16, as: UInt32.self)),
                generation: bytes.loadUnaligned(fromByteOffset: 32, as: UInt64.self))
        }
    }

    static func == (lhs: Self, rhs: Self) -> Bool {
        withUnsafePointer(to: lhs.raw) { left in
            withUnsafePointer(to: rhs.raw) { right in snapshotdb_wal_index_headers_equal(left, right) != 0 }
        }
    }
}

extension SQLiteHandle {
    /// Runs `sqlite3_wal_checkpoint_v2` in `mode`.
    ///
    /// `SQLITE_BUSY` is not an error here: it means readers or a writer kept the checkpoint from
    /// finishing, which the result reports with `isComplete == false`.
    func checkpoint(_ mode: CheckpointMode) throws(DatabaseError) -> CheckpointResult {
        let answer = try walCheckpoint(mode)
        let busy = answer.resultCode != SQLITE_OK
        return CheckpointResult(
            mode: mode, walFrames: Int(max(0, answer.walFrames)),
            checkpointedFrames: Int(max(0, answer.checkpointedFrames)),
            isComplete: !busy && answer.walFrames == answer.checkpointedFrames)
    }

    /// What `sqlite3_wal_checkpoint_v2` in `mode` answered, as it answered it: its result code
    /// (`SQLITE_OK`, or `SQLITE_BUSY` when readers or a writer kept it from finishing), the
    /// frames in the WAL (`pnLog`) and the frames checkpointed (`pnCkpt`), -1 each when the
    /// database is not in WAL mode.
    ///
    /// - Throws: any other result.
    func walCheckpoint(_ mode: CheckpointMode) throws(DatabaseError) -> (
        resultCode: Int32, walFrames: Int32, checkpointedFrames: Int32
    ) {
        var walFrames: Int32 = -1
        var checkpointedFrames: Int32 = -1
        let sqliteMode: Int32
        switch mode {
        case .passive: sqliteMode = SQLITE_CHECKPOINT_PASSIVE
        case .full: sqliteMode = SQLITE_CHECKPOINT_FULL
        case .restart: sqliteMode = SQLITE_CHECKPOINT_RESTART
        case .truncate: sqliteMode = SQLITE_CHECKPOINT_TRUNCATE
        }
        let result = sqlite3_wal_checkpoint_v2(pointer, nil, sqliteMode, &walFrames, &checkpointedFrames)
        guard result == SQLITE_OK || result & 0xFF == SQLITE_BUSY else {
            throw error(result, context: "checkpoint \(mode)")
        }
        return (result, walFrames, checkpointedFrames)
    }

    /// Records where each commit on this handle ends in the WAL (`sqlite3_wal_hook`), for the
    /// ``Writer`` to hand to the checkpointer with the commit (``takeCommitFrames()``). The hook
    /// only records: the checkpointer hears of each commit once, from the writer. Its context is
    /// the handle itself, which SQLite calls back only while it is open.
    func recordCommitFrames() {
        sqlite3_wal_hook(
            pointer,
            { context, _, _, pages in
                guard let context else { return SQLITE_OK }
                let handle = Unmanaged<SQLiteHandle>.fromOpaque(context).takeUnretainedValue()
                handle.lastCommitFrames = WALCommitFrames(
                    endFrame: Int(pages), generation: handle.walGeneration())
                return SQLITE_OK
            }, Unmanaged.passUnretained(self).toOpaque())
    }

    /// Where the last commit on this handle ended in the WAL, once; `nil` when no commit was
    /// recorded since the last call.
    func takeCommitFrames() -> WALCommitFrames? {
        defer { lastCommitFrames = nil }
        return lastCommitFrames
    }

    /// Runs `body` with the busy timeout set to `timeout`, then restores `configured`.
    func withBusyTimeout<T, E: Error>(
        _ timeout: Duration, restoring configured: Duration, _ body: () throws(E) -> T
    ) throws(E) -> T {
        setBusyTimeout(milliseconds: timeout.sqliteMilliseconds)
        defer { setBusyTimeout(milliseconds: configured.sqliteMilliseconds) }
        return try body()
    }

    /// SQLite's limit on the length of one string or blob on this handle
    /// (`SQLITE_LIMIT_LENGTH`, 1 GB by default): a history row must stay under it.
    var lengthLimit: Int { Int(sqlite3_limit(pointer, SQLITE_LIMIT_LENGTH, -1)) }

    /// Lowers (or raises, up to SQLite's compile-time bound) ``lengthLimit``: for tests, which
    /// cannot write a gigabyte.
    func setLengthLimit(_ bytes: Int) {
        sqlite3_limit(pointer, SQLITE_LIMIT_LENGTH, Int32(clamping: bytes))
    }

    /// Throws `valueTooLarge` (as SQLite's bind would) for `count` bytes past SQLite's length
    /// limit: checked before a write's extension hooks run, so that a value refused for its size
    /// leaves the extensions as they were.
    func checkLength(_ count: Int) throws(DatabaseError) {
        let limit = Int(sqlite3_limit(pointer, SQLITE_LIMIT_LENGTH, -1))
        guard count > limit else { return }
        throw DatabaseError(
            .valueTooLarge, "a value of \(count) bytes is too big for SQLite (at most \(limit) bytes)",
            sqliteCode: SQLITE_TOOBIG)
    }

    /// The WAL's generation (its header's salts) from the WAL-index header, without a system
    /// call; `nil` before the mapping is known or while the header is being rewritten.
    private func walGeneration() -> UInt64? {
        guard let walIndex else { return nil }
        var salts: UInt64 = 0
        return snapshotdb_wal_index_salts(walIndex, &salts) != 0 ? salts : nil
    }

    /// The database page size in bytes.
    func pageSize() throws(DatabaseError) -> Int {
        Int(try int64("PRAGMA page_size") ?? 4096)
    }
}
