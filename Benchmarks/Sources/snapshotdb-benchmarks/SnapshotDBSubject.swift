import Foundation
import Logging
import SnapshotDB

/// SnapshotDB through its public API, with its default configuration but `synchronous` (and,
/// for rows a–f, no automatic checkpoints: see ``CheckpointPolicy/never``).
///
/// Per operation it does what its documentation promises: a write transaction takes the
/// writer lock, runs `BEGIN IMMEDIATE`, finds the commit counter (from the WAL-index header
/// when the database knows it, else from `snapshotdb_meta`), upserts, bumps the counter (one
/// more row updated) and commits; a read transaction runs `BEGIN`, fixes its snapshot and
/// finds its commit the same way, reads through the connection's value cache, and ends with
/// `ROLLBACK`.
final class SnapshotDBSubject: Subject {
    static let engineName = "SnapshotDB"

    private let database: Database
    private let connection: Connection

    init(path: String, sync: SyncMode, checkpoints: CheckpointPolicy) throws {
        var configuration = Configuration()
        configuration.synchronous = sync == .full ? .full : .normal
        if checkpoints == .never { configuration.checkpointThresholdPages = 1 << 40 }
        // (g) pins the WAL on purpose: keep the monitor's warnings out of the table.
        configuration.checkpointLogger = Logger(label: "snapshotdb.checkpoint") { _ in
            SwiftLogNoOpLogHandler()
        }
        database = try Database(path: path, configuration: configuration)
        connection = database.newConnection(name: "benchmark")
    }

    func load(keys: [String], payload: Data) throws {
        try connection.readWrite { txn in
            for key in keys { try txn.setData(payload, forKey: key, inCollection: benchmarkCollection) }
        }
        try database.checkpoint(.truncate)
    }

    func loadItems(keys: [String], items: [Item]) throws {
        try connection.readWrite { txn in
            for (key, item) in zip(keys, items) {
                try txn.set(item, forKey: key, inCollection: benchmarkCollection)
            }
        }
        try database.checkpoint(.truncate)
    }

    func insert(keys: [String], payload: Data) throws -> Duration {
        try timed {
            try connection.readWrite { txn in
                for key in keys { try txn.setData(payload, forKey: key, inCollection: benchmarkCollection) }
            }
        }
    }

    func readInOneTransaction(keys: [String]) throws -> (time: Duration, found: Int) {
        var found = 0
        let time = try timed { found = try read(keys) }
        return (time, found)
    }

    private func read(_ keys: [String]) throws -> Int {
        try connection.read { txn in
            var found = 0
            for key in keys {
                if let data = try txn.data(forKey: key, inCollection: benchmarkCollection) {
                    found += data.isEmpty ? 0 : 1
                }
            }
            return found
        }
    }

    func readBytesInOneTransaction(keys: [String]) throws -> (time: Duration, found: Int) {
        var found = 0
        let time = try timed {
            found = try connection.read { txn in
                var found = 0
                for key in keys {
                    found +=
                        try txn.withUnsafeBytes(forKey: key, inCollection: benchmarkCollection) {
                            $0.isEmpty ? 0 : 1
                        } ?? 0
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
                let data = try connection.read { txn in
                    try txn.data(forKey: key, inCollection: benchmarkCollection)
                }
                if let data, !data.isEmpty { found += 1 }
            }
        }
        return (time, found)
    }

    func writeTransactions(keys: [String], payloads: [Data], laggardAfter: Int?, bumpingCounter: Bool)
        throws -> [Duration]
    {
        // SnapshotDB bumps its commit counter in every write transaction anyway.
        let laggard = database.newConnection(name: "laggard")
        var latencies: [Duration] = []
        latencies.reserveCapacity(keys.count)
        for (index, key) in keys.enumerated() {
            if index == laggardAfter { try laggard.beginLongLivedReadTransaction() }
            latencies.append(
                try timed {
                    try connection.readWrite { txn in
                        try txn.setData(payloads[index], forKey: key, inCollection: benchmarkCollection)
                    }
                })
        }
        try laggard.endLongLivedReadTransaction()
        return latencies
    }

    func advanceAndRead(keys: [String], iterations: Int, writes: Bool) throws -> Duration {
        let reader = database.newConnection(name: "reader")
        try reader.beginLongLivedReadTransaction()
        var total = Duration.zero
        for iteration in 0..<(advanceWarmUp + iterations) {
            let key = writes ? keys[iteration % keys.count] : keys[0]
            if writes {
                let payload = benchmarkPayload(stamp: UInt32(truncatingIfNeeded: iteration + 1))
                try connection.readWrite { txn in
                    try txn.setData(payload, forKey: key, inCollection: benchmarkCollection)
                }
            }
            var data: Data?
            total += try timed(unless: iteration < advanceWarmUp) {
                try reader.beginLongLivedReadTransaction()
                data = try reader.read { txn in try txn.data(forKey: key, inCollection: benchmarkCollection) }
            }
            if writes {
                try (data ?? Data()).withUnsafeBytes {
                    try checkStamp($0, iteration + 1, engine: Self.engineName)
                }
            }
        }
        try reader.endLongLivedReadTransaction()
        return total
    }

    func insertItems(keys: [String], items: [Item]) throws -> Duration {
        try timed {
            try connection.readWrite { txn in
                for (key, item) in zip(keys, items) {
                    try txn.set(item, forKey: key, inCollection: benchmarkCollection)
                }
            }
        }
    }

    func readItems(keys: [String]) throws -> (time: Duration, found: Int) {
        var found = 0
        let time = try timed {
            try connection.read { txn in
                for key in keys {
                    if let item = try txn.value(forKey: key, inCollection: benchmarkCollection, as: Item.self)
                    {
                        found += item.tags.isEmpty ? 0 : 1
                    }
                }
            }
        }
        return (time, found)
    }

    func warm(keys: [String]) throws {
        _ = try read(keys + keys)
    }

    func close() throws {}
}
