import CSQLiteBench
import Dispatch
import Foundation
import SnapshotDB
import Synchronization

/// The live-view rows of the scaling suite (issue 46).
extension ScalingBench {
    struct Entry: Codable, Sendable {
        var title: String
        var stamp: Int
    }

    static let watched = View<Entry>(
        name: "watched", version: "1", collections: ["watched"], group: { _, _, _ in "all" },
        areInIncreasingOrder: { $0.title < $1.title })
    static let other = View<Entry>(
        name: "other", version: "1", collections: ["other"], group: { _, _, _ in "all" },
        areInIncreasingOrder: { $0.title < $1.title })

    /// Starts `count` observations of `view` and waits until each had its first update; the
    /// returned tasks end them when cancelled, and throw what ended one otherwise.
    private func observe(
        _ db: SnapshotDB.Database, view: String, count: Int, onUpdate: @escaping @Sendable () -> Void = {}
    ) throws -> [Task<Void, any Error>] {
        let started = DispatchSemaphore(value: 0)
        let failure = FirstFailure()
        let tasks = (0..<count).map { _ in
            Task.detached {
                var first = true
                do {
                    for try await _ in db.observe(view: view) {
                        if first {
                            first = false
                            started.signal()
                        } else {
                            onUpdate()
                        }
                    }
                } catch {
                    // Reported to the benchmark thread, which would otherwise wait for ever.
                    failure.error.withLock { $0 = $0 ?? error }
                    if first { started.signal() }
                    throw error
                }
            }
        }
        for _ in 0..<count { started.wait() }
        if let error = failure.error.withLock({ $0 }) {
            for task in tasks { task.cancel() }
            throw error
        }
        return tasks
    }

    /// One-row commits of `other`'s values beside `observations` live observations of `watched`:
    /// (median, p99) seconds.
    func commitBesideLiveObservations(_ observations: Int, commits: Int) throws -> (
        median: Double, p99: Double
    ) {
        let db = try open(newPath("live-commit"))
        defer { try? db.close() }
        try db.register(Self.watched, Self.other)
        let writer = db.newConnection(name: "writer")
        try writer.readWrite { try $0.set(Entry(title: "w", stamp: 0), forKey: "w", inCollection: "watched") }
        let tasks = try observe(db, view: "watched", count: observations)
        defer { for task in tasks { task.cancel() } }
        var latencies: [Duration] = []
        latencies.reserveCapacity(commits)
        for index in 0..<commits {
            latencies.append(
                try timed {
                    try writer.readWrite { txn in
                        try txn.set(
                            Entry(title: "o\(index % 100)", stamp: index), forKey: "k\(index % 100)",
                            inCollection: "other")
                    }
                })
        }
        return (median(latencies).seconds, percentile(latencies, 0.99).seconds)
    }

    /// From a one-row commit's start to the update of a live observation of its view: (median,
    /// p99) seconds, and the median of the commits alone.
    func commitToUpdate(commits: Int) throws -> (Double, Double, Double) {
        let db = try open(newPath("live-yield"))
        defer { try? db.close() }
        try db.register(Self.watched)
        let writer = db.newConnection(name: "writer")
        try writer.readWrite { try $0.set(Entry(title: "w", stamp: 0), forKey: "w", inCollection: "watched") }
        let updated = DispatchSemaphore(value: 0)
        let tasks = try observe(db, view: "watched", count: 1, onUpdate: { updated.signal() })
        defer { for task in tasks { task.cancel() } }
        var toUpdate: [Duration] = []
        var commitOnly: [Duration] = []
        for index in 0..<commits {
            let start = ContinuousClock.now
            // A new item each time: every commit changes the rows.
            try writer.readWrite { txn in
                try txn.set(
                    Entry(title: "t\(index)", stamp: index), forKey: "k\(index)", inCollection: "watched")
            }
            commitOnly.append(ContinuousClock.now - start)
            updated.wait()
            toUpdate.append(ContinuousClock.now - start)
        }
        return (median(toUpdate).seconds, percentile(toUpdate, 0.99).seconds, median(commitOnly).seconds)
    }

    /// Resident memory before, while a live view's consumer has not asked for an update over
    /// `commits` commits of its view, and after it asked once.
    func memoryWithIdleObservation(commits: Int) throws -> (Double, Double, Double) {
        let db = try open(newPath("live-mem"))
        defer { try? db.close() }
        try db.register(Self.watched)
        let writer = db.newConnection(name: "writer")
        try writer.readWrite { try $0.set(Entry(title: "w", stamp: 0), forKey: "w", inCollection: "watched") }
        let updates = db.observe(view: "watched").makeAsyncIterator()
        _ = try waitFor {
            var updates = updates
            return try await updates.next()
        }
        let baseline = residentBytes()
        for index in 0..<commits {
            try writer.readWrite { txn in
                try txn.set(
                    Entry(title: "t\(index % 1_000)", stamp: index), forKey: "k\(index % 1_000)",
                    inCollection: "watched")
            }
        }
        let lagging = residentBytes()
        guard
            let update = try waitFor({
                var updates = updates
                return try await updates.next()
            }),
            update.commit == db.latestCommit
        else {
            throw BenchmarkCheckFailed(description: "live-mem: the update is not at the newest commit")
        }
        let after = residentBytes()
        return (baseline, lagging, after)
    }
}

/// The WAL rows of the scaling suite (issue 45, item 2).
extension ScalingBench {
    struct Big: Codable, Sendable {
        var title: String
        var body: String
    }

    static func big(_ index: Int, round: Int) -> Big {
        Big(
            title: String(format: "%06d-%04d", (index * 7_919 + round * 104_729) % 1_000_000, round),
            // A new body each round: SQLite leaves overflow pages whose bytes did not change alone.
            body: String(repeating: String(UnicodeScalar(UInt8(97 + round % 26))), count: 10_000))
    }

    static func view(_ kind: String) -> View<Big>? {
        switch kind {
        case "closure":
            View<Big>(
                name: "big", version: "1", collections: ["big"], group: { _, _, _ in "all" },
                areInIncreasingOrder: { $0.title < $1.title })
        case "keyed":
            View<Big>(
                name: "big", version: "1", collections: ["big"], group: { _, _, _ in "all" },
                sortKey: { _, _, value in SortKey(value.title) })
        default: nil
        }
    }

    /// Bytes the `-wal` grows by per one-row update of a 10 KB value (no checkpoint), with the
    /// view `kind` ("none", "closure", "keyed").
    func walBytesPerUpdate(view kind: String, commits: Int) throws -> Double {
        let path = newPath("wal-\(kind)")
        let db = try open(path) { $0.checkpointThresholdPages = .max }
        defer { try? db.close() }
        if let view = Self.view(kind) { try db.register(view) }
        let writer = db.newConnection(name: "writer")
        try writer.readWrite { txn in
            for index in 0..<1_000 {
                try txn.set(Self.big(index, round: 0), forKey: "k\(index)", inCollection: "big")
            }
        }
        try db.checkpoint(.truncate)
        let before = db.checkpointStatus().walBytes
        for round in 1...commits {
            let index = (round * 37) % 1_000
            try writer.readWrite {
                try $0.set(Self.big(index, round: round), forKey: "k\(index)", inCollection: "big")
            }
        }
        return Double(db.checkpointStatus().walBytes - before) / Double(commits)
    }

    /// The history row and the WAL growth of one commit that updates all 1,000 values of 10 KB
    /// under a closure view whose record is bounded by `recordLimit`.
    func bulkUpdateBytes(recordLimit: Int) throws -> (row: Double, wal: Double) {
        let path = newPath("wal-bulk")
        let db = try open(path) {
            $0.checkpointThresholdPages = .max
            $0.viewRecordLimitBytes = recordLimit
        }
        defer { try? db.close() }
        try db.register(Self.view("closure")!)
        let writer = db.newConnection(name: "writer")
        try writer.readWrite { txn in
            for index in 0..<1_000 {
                try txn.set(Self.big(index, round: 0), forKey: "k\(index)", inCollection: "big")
            }
        }
        try db.checkpoint(.truncate)
        let before = db.checkpointStatus().walBytes
        try writer.readWrite { txn in
            for index in 0..<1_000 {
                try txn.set(Self.big(index, round: 1), forKey: "k\(index)", inCollection: "big")
            }
        }
        let wal = Double(db.checkpointStatus().walBytes - before)
        let commit = db.latestCommit
        return (try historyRowBytes(path, commit: commit), wal)
    }

    /// The length of commit `commit`'s history row, read with SQLite's C API.
    private func historyRowBytes(_ path: String, commit: UInt64) throws -> Double {
        var handle: OpaquePointer?
        guard sqlite3_open_v2(path, &handle, SQLITE_OPEN_READONLY, nil) == SQLITE_OK else {
            throw BenchmarkCheckFailed(description: "wal-bulk-10k: cannot open \(path)")
        }
        defer { sqlite3_close(handle) }
        var statement: OpaquePointer?
        sqlite3_prepare_v2(
            handle, "SELECT length(changes) FROM snapshotdb_history WHERE number = ?1", -1, &statement, nil)
        defer { sqlite3_finalize(statement) }
        sqlite3_bind_int64(statement, 1, Int64(commit))
        guard sqlite3_step(statement) == SQLITE_ROW else {
            throw BenchmarkCheckFailed(description: "wal-bulk-10k: no history row for commit \(commit)")
        }
        return Double(sqlite3_column_int64(statement, 0))
    }
}

/// The first error of several tasks, for the thread that waits for them.
final class FirstFailure: Sendable {
    let error = Mutex<(any Error)?>(nil)
}

/// Runs `body` on a task of its own and waits for it on this thread (the suites are
/// synchronous).
func waitFor<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) throws -> T {
    // (Without a time limit `nil` is never returned.)
    try waitFor(timeLimit: nil, body)!
}

/// ``waitFor(_:)`` for at most `timeLimit`: `nil` past it (the task is cancelled).
func waitFor<T: Sendable>(timeLimit: Duration?, _ body: @escaping @Sendable () async throws -> T) throws -> T?
{
    let result = Mutex<Result<T, any Error>?>(nil)
    let done = DispatchSemaphore(value: 0)
    let task = Task.detached {
        do {
            let value = try await body()
            result.withLock { $0 = .success(value) }
        } catch {
            result.withLock { $0 = .failure(error) }
        }
        done.signal()
    }
    if let timeLimit {
        let seconds = Double(timeLimit.components.seconds) + Double(timeLimit.components.attoseconds) / 1e18
        guard done.wait(timeout: .now() + seconds) == .success else {
            task.cancel()
            return nil
        }
    } else {
        done.wait()
    }
    return try result.withLock { $0! }.get()
}
