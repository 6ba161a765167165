import Foundation
import GRDB

/// GRDB 7.10.0 with a `DatabasePool`, used the fast way: cached statements
/// (`Database.cachedStatement(sql:)`), `Data.fetchOne`, `DatabasePool.write` (`BEGIN
/// IMMEDIATE` … `COMMIT`) and `DatabasePool.read` (a pooled reader, `BEGIN DEFERRED` …
/// `COMMIT`). GRDB switches WAL databases to `synchronous = NORMAL`; the writer is set back to
/// the benchmark's mode after opening. The Codable workloads encode with a `JSONEncoder` like
/// the C side and bind the bytes.
final class GRDBSubject: Subject {
    static let engineName = "GRDB"

    private let pool: DatabasePool
    private let path: String

    init(path: String, sync: SyncMode, checkpoints: CheckpointPolicy) throws {
        self.path = path
        var configuration = GRDB.Configuration()
        if checkpoints == .never {
            configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA wal_autocheckpoint = 0") }
        }
        pool = try DatabasePool(path: path, configuration: configuration)
        try pool.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA synchronous = \(sync.rawValue)")
            let mode = try Int.fetchOne(db, sql: "PRAGMA synchronous")
            guard mode == (sync == .full ? 2 : 1) else {
                throw BenchmarkCheckFailed(description: "GRDB: synchronous is \(mode ?? -1)")
            }
            try db.execute(
                sql: """
                    CREATE TABLE bench_values(
                        collection TEXT NOT NULL, key TEXT NOT NULL, data BLOB NOT NULL,
                        PRIMARY KEY (collection, key)
                    ) WITHOUT ROWID;
                    CREATE TABLE bench_meta(name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL);
                    INSERT INTO bench_meta(name, value) VALUES ('commit', 0);
                    """)
        }
    }

    private static let upsertSQL = """
        INSERT INTO bench_values(collection, key, data) VALUES (?, ?, ?)
        ON CONFLICT(collection, key) DO UPDATE SET data = excluded.data
        """
    private static let bumpCounterSQL = "UPDATE bench_meta SET value = value + 1 WHERE name = 'commit'"
    private static let selectSQL = "SELECT data FROM bench_values WHERE collection = ? AND key = ?"

    private static func fetch(_ db: GRDB.Database, key: String) throws -> Data? {
        try Data.fetchOne(db.cachedStatement(sql: selectSQL), arguments: [benchmarkCollection, key])
    }

    private static func upsert(_ db: GRDB.Database, key: String, data: Data) throws {
        try db.cachedStatement(sql: upsertSQL).execute(arguments: [benchmarkCollection, key, data])
    }

    func load(keys: [String], payload: Data) throws {
        try insertRows(keys: keys, payload: payload)
        _ = try pool.writeWithoutTransaction { db in try db.checkpoint(.truncate) }
    }

    func loadItems(keys: [String], items: [Item]) throws {
        try insertItemRows(keys: keys, items: items)
        _ = try pool.writeWithoutTransaction { db in try db.checkpoint(.truncate) }
    }

    func insert(keys: [String], payload: Data) throws -> Duration {
        try timed { try insertRows(keys: keys, payload: payload) }
    }

    private func insertRows(keys: [String], payload: Data) throws {
        try pool.write { db in
            for key in keys { try Self.upsert(db, key: key, data: payload) }
        }
    }

    func readInOneTransaction(keys: [String]) throws -> (time: Duration, found: Int) {
        var found = 0
        let time = try timed { found = try read(keys) }
        return (time, found)
    }

    private func read(_ keys: [String]) throws -> Int {
        try pool.read { db in
            var found = 0
            for key in keys {
                if let data = try Self.fetch(db, key: key) { found += data.isEmpty ? 0 : 1 }
            }
            return found
        }
    }

    func readBytesInOneTransaction(keys: [String]) throws -> (time: Duration, found: Int) {
        var found = 0
        let time = try timed {
            found = try pool.read { db in
                let statement = try db.cachedStatement(sql: Self.selectSQL)
                var found = 0
                for key in keys {
                    let rows = try Row.fetchCursor(statement, arguments: [benchmarkCollection, key])
                    if let row = try rows.next() {
                        found += try row.withUnsafeData(atIndex: 0) { ($0?.isEmpty ?? true) ? 0 : 1 }
                    }
                }
                return found
            }
        }
        return (time, found)
    }

    func readOneTransactionEach(keys: [String]) throws -> (time: Duration, found: Int) {
        var found = 0
        let time = try timed {
            for key in keys {
                let data = try pool.read { db in try Self.fetch(db, key: key) }
                if let data, !data.isEmpty { found += 1 }
            }
        }
        return (time, found)
    }

    func writeTransactions(keys: [String], payloads: [Data], laggardAfter: Int?, bumpingCounter: Bool)
        throws -> [Duration]
    {
        var laggard: DatabaseSnapshot?
        var latencies: [Duration] = []
        latencies.reserveCapacity(keys.count)
        for (index, key) in keys.enumerated() {
            if index == laggardAfter { laggard = try pool.makeSnapshot() }
            latencies.append(
                try timed {
                    try pool.write { db in
                        try Self.upsert(db, key: key, data: payloads[index])
                        if bumpingCounter { try db.cachedStatement(sql: Self.bumpCounterSQL).execute() }
                    }
                })
        }
        withExtendedLifetime(laggard) {}
        return latencies
    }

    func advanceAndRead(keys: [String], iterations: Int, writes: Bool) throws -> Duration {
        // GRDB cannot advance a snapshot in place; its way is a new `DatabaseSnapshot`.
        var snapshot = try pool.makeSnapshot()
        var total = Duration.zero
        for iteration in 0..<(advanceWarmUp + iterations) {
            let key = writes ? keys[iteration % keys.count] : keys[0]
            if writes {
                let payload = benchmarkPayload(stamp: UInt32(truncatingIfNeeded: iteration + 1))
                try pool.write { db in try Self.upsert(db, key: key, data: payload) }
            }
            var data: Data?
            total += try timed(unless: iteration < advanceWarmUp) {
                snapshot = try pool.makeSnapshot()
                data = try snapshot.read { db in try Self.fetch(db, key: key) }
            }
            if writes {
                try (data ?? Data()).withUnsafeBytes {
                    try checkStamp($0, iteration + 1, engine: Self.engineName)
                }
            }
        }
        return total
    }

    func insertItems(keys: [String], items: [Item]) throws -> Duration {
        try timed { try insertItemRows(keys: keys, items: items) }
    }

    private func insertItemRows(keys: [String], items: [Item]) throws {
        let encoder = makeItemEncoder()
        try pool.write { db in
            for (key, item) in zip(keys, items) {
                try Self.upsert(db, key: key, data: encoder.encode(item))
            }
        }
    }

    func readItems(keys: [String]) throws -> (time: Duration, found: Int) {
        var found = 0
        let time = try timed {
            let decoder = JSONDecoder()
            found = try pool.read { db in
                var found = 0
                for key in keys {
                    if let data = try Self.fetch(db, key: key) {
                        let item = try decoder.decode(Item.self, from: data)
                        found += item.tags.isEmpty ? 0 : 1
                    }
                }
                return found
            }
        }
        return (time, found)
    }

    func warm(keys: [String]) throws {
        _ = try read(keys + keys)
    }

    func close() throws {
        try pool.close()
    }
}
