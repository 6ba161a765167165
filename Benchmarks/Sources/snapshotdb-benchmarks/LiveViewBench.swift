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
    /// returned tasks end them when cancelled.
    private func observe(
        _ db: SnapshotDB.Database, view: String, count: Int, onUpdate: @escaping @Sendable () -> Void = {}
    )
        -> [Task<Void, Never>]
    {
        let started = DispatchSemaphore(value: 0)
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
                } catch {}
            }
        }
        for _ in 0..<count { started.wait() }
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
        let tasks = observe(db, view: "watched", count: observations)
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
        let tasks = observe(db, view: "watched", count: 1, onUpdate: { updated.signal() })
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

/// Runs `body` on a task of its own and waits for it on this thread (the suites are synchronous).
func waitFor<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) throws -> T {
    let result = Mutex<Result<T, any Error>?>(nil)
    let done = DispatchSemaphore(value: 0)
    Task.detached {
        do {
            let value = try await body()
            result.withLock { $0 = .success(value) }
        } catch {
            result.withLock { $0 = .failure(error) }
        }
        done.signal()
    }
    done.wait()
    return try result.withLock { $0! }.get()
}
