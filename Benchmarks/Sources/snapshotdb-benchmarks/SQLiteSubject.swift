import CSQLiteBench
import Foundation

/// Raw SQLite through its C API: the baseline a careful programmer writes by hand.
///
/// Statements are prepared once (`SQLITE_PREPARE_PERSISTENT`); transactions are prepared
/// `BEGIN`/`COMMIT` statements; keys are bound without a copy (`SQLITE_STATIC`, stepped while
/// the string's bytes are pinned); reads look at the blob in place without copying it out. A
/// write transaction is `BEGIN IMMEDIATE`, one upsert, `COMMIT`; a read in a transaction of
/// its own is the `SELECT` alone in autocommit mode (SQLite's implicit read transaction).
final class SQLiteSubject: Subject {
    static let engineName = "SQLite C"

    /// The version of the SQLite library all three engines link (`sqlite3_libversion`).
    static var sqliteVersion: String { String(cString: sqlite3_libversion()) }

    private let path: String
    private let sync: SyncMode
    private let checkpoints: CheckpointPolicy
    private let connection: RawConnection

    init(path: String, sync: SyncMode, checkpoints: CheckpointPolicy) throws {
        self.path = path
        self.sync = sync
        self.checkpoints = checkpoints
        connection = try RawConnection(path: path, sync: sync, checkpoints: checkpoints)
        try connection.execute(
            """
            CREATE TABLE bench_values(
                collection TEXT NOT NULL, key TEXT NOT NULL, data BLOB NOT NULL,
                PRIMARY KEY (collection, key)
            ) WITHOUT ROWID;
            \(SQLiteSubjectSQL.createCounter)
            """)
    }

    private func openAnother() throws -> RawConnection {
        try RawConnection(path: path, sync: sync, checkpoints: checkpoints)
    }

    func load(keys: [String], payload: Data) throws {
        try insertRows(keys: keys, payload: payload)
        try connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    }

    func loadItems(keys: [String], items: [Item]) throws {
        try insertItemRows(keys: keys, items: items)
        try connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    }

    func insert(keys: [String], payload: Data) throws -> Duration {
        try timed { try insertRows(keys: keys, payload: payload) }
    }

    private func insertRows(keys: [String], payload: Data) throws {
        try connection.beginImmediate.run()
        try payload.withUnsafeBytes { bytes in
            for key in keys { try connection.upsert(key: key, bytes: bytes) }
        }
        try connection.commit.run()
    }

    func readInOneTransaction(keys: [String]) throws -> (time: Duration, found: Int) {
        var found = 0
        let time = try timed { found = try read(keys) }
        return (time, found)
    }

    private func read(_ keys: [String]) throws -> Int {
        var found = 0
        try connection.begin.run()
        for key in keys {
            try connection.read(key: key) { bytes in found += bytes.isEmpty ? 0 : 1 }
        }
        try connection.commit.run()
        return found
    }

    func readBytesInOneTransaction(keys: [String]) throws -> (time: Duration, found: Int) {
        // Row b already reads each blob in place.
        try readInOneTransaction(keys: keys)
    }

    func readOneTransactionEach(keys: [String]) throws -> (time: Duration, found: Int) {
        var found = 0
        let time = try timed {
            for key in keys {
                try connection.read(key: key) { bytes in found += bytes.isEmpty ? 0 : 1 }
            }
        }
        return (time, found)
    }

    func writeTransactions(keys: [String], payloads: [Data], laggardAfter: Int?, bumpingCounter: Bool)
        throws -> [Duration]
    {
        let laggard = try openAnother()
        var latencies: [Duration] = []
        latencies.reserveCapacity(keys.count)
        for (index, key) in keys.enumerated() {
            if index == laggardAfter {
                try laggard.begin.run()
                try laggard.read(key: keys[0]) { _ in }
            }
            latencies.append(
                try timed {
                    try payloads[index].withUnsafeBytes { bytes in
                        try connection.beginImmediate.run()
                        try connection.upsert(key: key, bytes: bytes)
                        if bumpingCounter { try connection.bumpCounter.run() }
                        try connection.commit.run()
                    }
                })
        }
        if !laggard.isAutocommit { try laggard.commit.run() }
        return latencies
    }

    /// The latency of each one-row commit (a counter row bumped, as SnapshotDB's) while
    /// `readers` connections, each on a thread of its own, advance (`COMMIT; BEGIN`) and read
    /// the row after every commit: the writer wakes them and goes on without waiting.
    func commitsWithLiveReaders(_ readers: Int, keys: [String], payloads: [Data]) throws -> [Duration] {
        let connections = try (0..<readers).map { _ in OwnedByOneThread(try openAnother()) }
        for reader in connections {
            try reader.connection.begin.run()
            try reader.connection.read(key: keys[0]) { _ in }
        }
        let live = LiveReaders(count: readers) { index, key in
            let reader = connections[index].connection
            try reader.commit.run()
            try reader.begin.run()
            try reader.read(key: key) { _ in }
        }
        var latencies: [Duration] = []
        latencies.reserveCapacity(keys.count)
        for (index, key) in keys.enumerated() {
            latencies.append(
                try timed {
                    try payloads[index].withUnsafeBytes { bytes in
                        try connection.beginImmediate.run()
                        try connection.upsert(key: key, bytes: bytes)
                        try connection.bumpCounter.run()
                        try connection.commit.run()
                    }
                })
            live.wake(reading: key)
        }
        try live.stop()
        for reader in connections where !reader.connection.isAutocommit { try reader.connection.commit.run() }
        return latencies
    }

    func advanceAndRead(keys: [String], iterations: Int, writes: Bool) throws -> Duration {
        let reader = try openAnother()
        try reader.begin.run()
        try reader.read(key: keys[0]) { _ in }
        var total = Duration.zero
        for iteration in 0..<(advanceWarmUp + iterations) {
            let key = writes ? keys[iteration % keys.count] : keys[0]
            if writes {
                try benchmarkPayload(stamp: UInt32(truncatingIfNeeded: iteration + 1)).withUnsafeBytes {
                    bytes in
                    try connection.beginImmediate.run()
                    try connection.upsert(key: key, bytes: bytes)
                    try connection.commit.run()
                }
            }
            var stamped = false
            total += try timed(unless: iteration < advanceWarmUp) {
                try reader.commit.run()
                try reader.begin.run()
                try reader.read(key: key) { bytes in
                    stamped = !writes || payloadStamp(bytes) == UInt32(truncatingIfNeeded: iteration + 1)
                }
            }
            guard stamped else {
                throw BenchmarkCheckFailed(
                    description: "\(Self.engineName): advance \(iteration) read an older version of the row")
            }
        }
        try reader.commit.run()
        return total
    }

    func insertItems(keys: [String], items: [Item]) throws -> Duration {
        try timed { try insertItemRows(keys: keys, items: items) }
    }

    private func insertItemRows(keys: [String], items: [Item]) throws {
        let encoder = makeItemEncoder()
        try connection.beginImmediate.run()
        for (key, item) in zip(keys, items) {
            try encoder.encode(item).withUnsafeBytes { bytes in try connection.upsert(key: key, bytes: bytes)
            }
        }
        try connection.commit.run()
    }

    func readItems(keys: [String]) throws -> (time: Duration, found: Int) {
        var found = 0
        let time = try timed {
            let decoder = JSONDecoder()
            try connection.begin.run()
            for key in keys {
                var data: Data?
                try connection.read(key: key) { bytes in data = Data(bytes) }
                if let data {
                    let item = try decoder.decode(Item.self, from: data)
                    found += item.tags.isEmpty ? 0 : 1
                }
            }
            try connection.commit.run()
        }
        return (time, found)
    }

    func warm(keys: [String]) throws {
        _ = try read(keys + keys)
    }

    func close() throws {}
}

/// One `sqlite3 *` with the statements the C side runs.
private final class RawConnection {
    let handle: OpaquePointer
    let begin: RawStatement
    let beginImmediate: RawStatement
    let commit: RawStatement
    /// Adds one to the counter row, like SnapshotDB's commit counter.
    let bumpCounter: RawStatement
    private let upsertStatement: RawStatement
    private let selectStatement: RawStatement

    init(path: String, sync: SyncMode, checkpoints: CheckpointPolicy) throws {
        var handle: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let result = sqlite3_open_v2(path, &handle, flags, nil)
        guard result == SQLITE_OK, let handle else {
            if let handle { sqlite3_close_v2(handle) }
            throw RawSQLiteError(code: result, message: "open \(path)")
        }
        self.handle = handle
        sqlite3_busy_timeout(handle, 5_000)
        let autocheckpoint = checkpoints == .never ? 0 : 1_000
        let pragmas =
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = \(sync.rawValue);"
            + " PRAGMA wal_autocheckpoint = \(autocheckpoint);"
        if sqlite3_exec(handle, pragmas, nil, nil, nil) != SQLITE_OK {
            throw RawSQLiteError(handle, "pragmas")
        }
        begin = try RawStatement(handle, "BEGIN DEFERRED")
        beginImmediate = try RawStatement(handle, "BEGIN IMMEDIATE")
        commit = try RawStatement(handle, "COMMIT")
        // The table may not exist yet: the first connection creates it, then prepares lazily.
        upsertStatement = RawStatement(lazy: handle, SQLiteSubjectSQL.upsert)
        selectStatement = RawStatement(lazy: handle, SQLiteSubjectSQL.select)
        bumpCounter = RawStatement(lazy: handle, SQLiteSubjectSQL.bumpCounter)
    }

    deinit {
        upsertStatement.finalize()
        selectStatement.finalize()
        bumpCounter.finalize()
        begin.finalize()
        beginImmediate.finalize()
        commit.finalize()
        sqlite3_close_v2(handle)
    }

    var isAutocommit: Bool { sqlite3_get_autocommit(handle) != 0 }

    func execute(_ sql: String) throws {
        if sqlite3_exec(handle, sql, nil, nil, nil) != SQLITE_OK { throw RawSQLiteError(handle, sql) }
    }

    /// Binds collection and key without copying them and upserts `bytes`.
    @inline(__always)
    func upsert(key: String, bytes: UnsafeRawBufferPointer) throws {
        let statement = try upsertStatement.prepared()
        try benchmarkCollection.withCString { collection in
            try key.withCString { key in
                sqlite3_bind_text(statement, 1, collection, -1, nil)
                sqlite3_bind_text(statement, 2, key, -1, nil)
                sqlite3_bind_blob(statement, 3, bytes.baseAddress, Int32(bytes.count), nil)
                let result = sqlite3_step(statement)
                sqlite3_reset(statement)
                if result != SQLITE_DONE { throw RawSQLiteError(handle, "upsert") }
            }
        }
    }

    /// Looks `key` up and hands `body` the blob in place, if the row exists.
    @inline(__always)
    func read(key: String, _ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        let statement = try selectStatement.prepared()
        try benchmarkCollection.withCString { collection in
            try key.withCString { key in
                sqlite3_bind_text(statement, 1, collection, -1, nil)
                sqlite3_bind_text(statement, 2, key, -1, nil)
                defer { sqlite3_reset(statement) }
                switch sqlite3_step(statement) {
                case SQLITE_ROW:
                    let count = Int(sqlite3_column_bytes(statement, 0))
                    try body(UnsafeRawBufferPointer(start: sqlite3_column_blob(statement, 0), count: count))
                case SQLITE_DONE: break
                default: throw RawSQLiteError(handle, "select")
                }
            }
        }
    }
}

private enum SQLiteSubjectSQL {
    static let upsert = """
        INSERT INTO bench_values(collection, key, data) VALUES (?1, ?2, ?3)
        ON CONFLICT(collection, key) DO UPDATE SET data = excluded.data
        """
    static let select = "SELECT data FROM bench_values WHERE collection = ?1 AND key = ?2"
    /// The same shape as SnapshotDB's metadata table: a rowid table with a text primary key.
    static let createCounter = """
        CREATE TABLE bench_meta(name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL);
        INSERT INTO bench_meta(name, value) VALUES ('commit', 0);
        """
    static let bumpCounter = "UPDATE bench_meta SET value = value + 1 WHERE name = 'commit'"
}

/// A prepared statement, prepared at first use.
private final class RawStatement {
    private let handle: OpaquePointer
    private let sql: String
    private var statement: OpaquePointer?

    init(_ handle: OpaquePointer, _ sql: String) throws {
        self.handle = handle
        self.sql = sql
        statement = try Self.prepare(handle, sql)
    }

    init(lazy handle: OpaquePointer, _ sql: String) {
        self.handle = handle
        self.sql = sql
    }

    private static func prepare(_ handle: OpaquePointer, _ sql: String) throws -> OpaquePointer {
        var statement: OpaquePointer?
        let result = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard result == SQLITE_OK, let statement else { throw RawSQLiteError(handle, "prepare \(sql)") }
        return statement
    }

    @inline(__always)
    func prepared() throws -> OpaquePointer {
        if let statement { return statement }
        let prepared = try Self.prepare(handle, sql)
        statement = prepared
        return prepared
    }

    /// Steps a statement that returns no rows, then resets it.
    @inline(__always)
    func run() throws {
        let statement = try prepared()
        let result = sqlite3_step(statement)
        sqlite3_reset(statement)
        if result != SQLITE_DONE { throw RawSQLiteError(handle, sql) }
    }

    func finalize() {
        if let statement { sqlite3_finalize(statement) }
        statement = nil
    }
}

private struct RawSQLiteError: Error, CustomStringConvertible {
    let code: Int32
    let message: String

    init(code: Int32, message: String) {
        self.code = code
        self.message = message
    }

    init(_ handle: OpaquePointer, _ context: String) {
        code = sqlite3_errcode(handle)
        message = "\(context): \(String(cString: sqlite3_errmsg(handle)))"
    }

    var description: String { "SQLite error \(code): \(message)" }
}
