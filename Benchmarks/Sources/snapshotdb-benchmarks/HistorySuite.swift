import Foundation
import SnapshotDB

#if canImport(Glibc)
    import Glibc
#endif

/// The `history` suite (see ``SuiteName/history``): what the durable history costs and gives.
/// The commit cost with history is row c and c-normal of the core suite (every SnapshotDB
/// commit writes its history row); this suite measures what only the history does.
func runHistorySuite(_ context: SuiteContext) throws -> SuiteReport {
    var report = SuiteReport(
        title: "durable history (issue 24)",
        columns: ["SnapshotDB", "p50", "p99", "per changeset", "note"],
        notes: [
            "h-wake: from a COMMIT in another process (the benchmark binary again, one one-row commit every "
                + "20 ms) to the changes() yield in this one, which begins no transaction: the watcher of the "
                + "-wal wakes on inotify. The latency is the yield's time minus the commit's date (its history row, "
                + "stamped just before COMMIT; one clock). h-idle: this process's CPU time (user + system) over "
                + "2 s with a changes() subscriber and nothing written.",
            "h-after: txn.changes(after: latest − K) with 1, 100 and 10,000 commits after the position in a "
                + "history of 20,000 one-row commits; per changeset returned. h-bytes: the history's bytes per "
                + "one-row commit (its info and changes columns plus 48 bytes of row). h-purge: one purge step of "
                + "1,000 rows (a write transaction of its own, off the commit path).",
        ])
    let directory = context.directory
    func row(_ id: String, _ title: String, n: Int, _ cells: [String: String], target: (String, Bool)? = nil)
    {
        var row = SuiteRow(id: id, title: title, n: n, cells: cells)
        if let (text, met) = target {
            report.verdict(text, met, to: &row)
        } else {
            row.verdicts = ["no target"]
        }
        report.rows.append(row)
    }

    if context.wants("h-wake") {
        context.progress("(h-wake) commits of another process")
        let commits = context.quick ? 100 : 400
        let latencies = try wakeLatencies(directory: directory, commits: commits)
        let p50 = percentile(latencies, 0.5)
        let p99 = percentile(latencies, 0.99)
        row(
            "h-wake", "COMMIT in another process → changes() yield", n: latencies.count,
            ["p50": format(seconds: p50), "p99": format(seconds: p99)], target: ("p99 ≤ 50 ms", p99 <= 0.050))
    }
    if context.wants("h-idle") {
        context.progress("(h-idle) CPU while idle with a subscriber")
        let cpu = try idleCPU(directory: directory, subscribed: true)
        let baseline = try idleCPU(directory: directory, subscribed: false)
        row(
            "h-idle", "CPU time over 2 s idle, a changes() subscriber", n: 1,
            [
                "SnapshotDB": format(seconds: cpu),
                "note": "no subscriber (no watcher): \(format(seconds: baseline))",
            ],
            target: ("≤ 1 ms", cpu <= 0.001))
    }
    if context.wants("h-after") {
        context.progress("(h-after) changes(after:) in a history of 20,000 commits")
        let path = context.freshPath("after.sqlite")
        var configuration = Configuration()
        configuration.synchronous = .normal
        configuration.historyRetention = HistoryRetention(commits: 100_000, bytes: 1 << 30)
        let db = try Database(path: path, configuration: configuration)
        let writer = db.newConnection(name: "writer")
        let total = context.quick ? 12_000 : 20_000
        for index in 0..<total {
            try writer.readWrite { txn in
                try txn.setData(
                    benchmarkPayload(stamp: UInt32(index)), forKey: benchmarkKey(index % 1_000),
                    inCollection: "bench")
            }
        }
        let reader = db.newConnection(name: "reader")
        var perChangeset: [Double] = []
        for count in [1, 100, 10_000] {
            var times: [Duration] = []
            for _ in 0..<max(3, context.rounds) {
                try reader.read { txn in
                    var returned = 0
                    times.append(
                        try timed { returned = try txn.changes(after: txn.commit - UInt64(count)).count })
                    guard returned == count else {
                        throw BenchmarkCheckFailed(
                            description: "h-after returned \(returned), expected \(count)")
                    }
                }
            }
            perChangeset.append(median(times).seconds / Double(count))
        }
        let growth = perChangeset.last! / perChangeset.first!
        row(
            "h-after", "changes(after:) returning 1 / 100 / 10,000 changesets", n: total,
            [
                "per changeset": perChangeset.map { format(seconds: $0) }.joined(separator: " / "),
                "note": "10,000 vs 1: \(format(ratio: growth)) per changeset",
            ], target: ("O(changes returned): per changeset ≤ 1.5× from 1 to 10,000", growth <= 1.5))
        try db.close()
        let perCommit = try historyBytesPerCommit(path)
        row(
            "h-bytes", "history bytes per one-row commit", n: total,
            ["SnapshotDB": String(format: "%.1f B", perCommit)])

        context.progress("(h-purge) purge steps")
        var purgeConfiguration = configuration
        purgeConfiguration.historyRetention = HistoryRetention(commits: 1_000, bytes: 1 << 30)
        let purging = try Database(path: path, configuration: purgeConfiguration)
        var purged = 0
        let elapsed = try timed { purged = try purging.purgeHistory() }
        try purging.close()
        guard purged > 0 else { throw BenchmarkCheckFailed(description: "h-purge purged nothing") }
        row(
            "h-purge", "one purge step (1,000 rows)", n: purged,
            [
                "SnapshotDB": format(seconds: elapsed.seconds / (Double(purged) / 1_000)),
                "note": "\(grouped(purged)) rows purged",
            ])
    }
    return report
}

/// The bytes of history per row, as the retention bound counts them.
private func historyBytesPerCommit(_ path: String) throws -> Double {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/sqlite3")
    process.arguments = [
        path,
        "SELECT avg(coalesce(length(info), 0) + coalesce(length(changes), 0) + 48) FROM snapshotdb_history WHERE kind = 0",
    ]
    let pipe = Pipe()
    process.standardOutput = pipe
    try process.run()
    process.waitUntilExit()
    let text = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    return Double(text.trimmingCharacters(in: .whitespacesAndNewlines)) ?? .nan
}

private func percentile(_ values: [Double], _ fraction: Double) -> Double {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return .nan }
    return sorted[min(sorted.count - 1, Int((Double(sorted.count - 1) * fraction).rounded()))]
}

/// The environment variable that makes the benchmark binary a writer child of h-wake.
let wakeWriterKey = "SNAPSHOTDB_BENCH_WAKE_WRITER"

/// The child of h-wake: one one-row commit every 20 ms, `commits` of them, on the database at
/// the path in ``wakeWriterKey`` ("PATH|COMMITS").
func runWakeWriter(_ value: String) throws {
    let parts = value.split(separator: "|")
    let db = try Database(path: String(parts[0]))
    let writer = db.newConnection(name: "wake-writer")
    for index in 0..<(Int(parts[1]) ?? 100) {
        try writer.readWrite { txn in
            try txn.setData(
                benchmarkPayload(stamp: UInt32(index)), forKey: benchmarkKey(index % 100),
                inCollection: "bench")
        }
        Thread.sleep(forTimeInterval: 0.02)
    }
    try db.close()
}

/// Seconds from each commit of a writer process to its yield by `changes()` here.
private func wakeLatencies(directory: URL, commits: Int) throws -> [Double] {
    let path = directory.appendingPathComponent("wake.sqlite").path
    for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
    let db = try Database(path: path)
    try db.newConnection(name: "setup").readWrite {
        try $0.setData(benchmarkPayload(), forKey: "k", inCollection: "bench")
    }
    let stream = db.changes()
    let child = Process()
    child.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    child.environment = ProcessInfo.processInfo.environment.merging([wakeWriterKey: "\(path)|\(commits)"]) {
        $1
    }
    child.standardOutput = FileHandle.nullDevice
    try child.run()
    let collected = LatencyBox()
    let done = DispatchSemaphore(value: 0)
    Task.detached {
        var received: [Double] = []
        for await changeset in stream where changeset.connectionName == "wake-writer" {
            received.append(Date().timeIntervalSince(changeset.date))
            if received.count == commits { break }
        }
        collected.set(received)
        done.signal()
    }
    child.waitUntilExit()
    guard done.wait(timeout: .now() + 30) == .success else {
        throw BenchmarkCheckFailed(
            description: "h-wake: changes() did not yield every commit of the other process")
    }
    try db.close()
    return collected.get()
}

/// Seconds of CPU (user + system) this process spends over 2 s with a subscriber and no writes.
private func idleCPU(directory: URL, subscribed: Bool) throws -> Double {
    let path = directory.appendingPathComponent("idle-\(subscribed).sqlite").path
    for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
    let db = try Database(path: path)
    try db.newConnection(name: "setup").readWrite {
        try $0.setData(benchmarkPayload(), forKey: "k", inCollection: "bench")
    }
    let stream = subscribed ? db.changes() : nil
    _ = stream
    Thread.sleep(forTimeInterval: 0.5)  // the watcher settles after the setup commit
    func cpu() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec)
            + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
    }
    let before = cpu()
    Thread.sleep(forTimeInterval: 2)
    let spent = cpu() - before
    try db.close()
    return spent
}

/// A result handed from the collecting task to the benchmark thread.
private final class LatencyBox: @unchecked Sendable {
    // @unchecked: written once by the collecting task before it signals, read after the wait.
    private var values: [Double] = []
    func set(_ values: [Double]) { self.values = values }
    func get() -> [Double] { values }
}
