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
                + "2 s with a changes() subscriber and nothing written. h-wake-view: the same commits, each a value "
                + "of a view both processes register, to the update of a live view (db.observe(view:)) that holds "
                + "it: the value's stamp (its time just before COMMIT) to the update's arrival.",
            "h-turns: this process commits one row every 10 ms for 4 s while another process (the benchmark "
                + "binary again) commits one-row transactions without a pause, both with writer turns and both "
                + "without (SQLite's busy handler alone, which is what GRDB and C get); synchronous FULL, a 60 s "
                + "busy timeout. h-share: both processes commit without a pause; this process's share of the "
                + "commits, and the commits per second of both together, with turns against without.",
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
    if context.wants("h-wake-view") {
        context.progress("(h-wake-view) commits of another process reaching a live view")
        let commits = context.quick ? 100 : 400
        let latencies = try viewWakeLatencies(directory: directory, commits: commits)
        let p50 = percentile(latencies, 0.5)
        let p99 = percentile(latencies, 0.99)
        row(
            "h-wake-view", "COMMIT in another process → observe(view:) update", n: latencies.count,
            ["p50": format(seconds: p50), "p99": format(seconds: p99)], target: ("p99 ≤ 50 ms", p99 <= 0.050))
    }
    if context.wants("h-turns") {
        context.progress("(h-turns) a writer beside a process that writes flat out")
        let seconds = context.quick ? 2.0 : 4.0
        let on = try writersBeside(directory: directory, seconds: seconds, turns: true, occasional: true)
        let off = try writersBeside(directory: directory, seconds: seconds, turns: false, occasional: true)
        row(
            "h-turns", "one-row commit every 10 ms beside a writer process that never pauses",
            n: on.latencies.count,
            [
                "SnapshotDB": "p99 \(format(seconds: on.p99)), max \(format(seconds: on.max))",
                "p50": format(seconds: on.p50), "p99": format(seconds: on.p99),
                "note":
                    "without turns (SQLite's busy handler, as GRDB and C): p50 \(format(seconds: off.p50)), "
                    + "p99 \(format(seconds: off.p99)), max \(format(seconds: off.max)), "
                    + "\(off.latencies.count) commits; the other process: "
                    + "\(grouped(Int(on.otherRate)))/s with turns, \(grouped(Int(off.otherRate)))/s without",
            ], target: ("p99 ≤ 50 ms", on.p99 <= 0.050))
        let both = try writersBeside(directory: directory, seconds: seconds, turns: true, occasional: false)
        let bothOff = try writersBeside(
            directory: directory, seconds: seconds, turns: false, occasional: false)
        let share = both.ownRate / (both.ownRate + both.otherRate)
        let shareOff = bothOff.ownRate / (bothOff.ownRate + bothOff.otherRate)
        let total = both.ownRate + both.otherRate
        let totalOff = bothOff.ownRate + bothOff.otherRate
        row(
            "h-share", "two processes commit one-row transactions flat out", n: both.latencies.count,
            [
                "SnapshotDB":
                    "this process's share \(String(format: "%.0f%%", share * 100)), max \(format(seconds: both.max))",
                "p50": format(seconds: both.p50), "p99": format(seconds: both.p99),
                "note":
                    "without turns: share \(String(format: "%.0f%%", shareOff * 100)), max \(format(seconds: bothOff.max)); "
                    + "commits per second in all, with turns / without: \(format(ratio: total / totalOff))",
            ], target: ("share 35–65%", share >= 0.35 && share <= 0.65))
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
    // "view": each commit is a value of the live view's collection, stamped with its time.
    let viewed = parts.count > 2 && parts[2] == "view"
    if viewed { try db.register(ScalingBench.watched) }
    let writer = db.newConnection(name: "wake-writer")
    for index in 0..<(Int(parts[1]) ?? 100) {
        try writer.readWrite { txn in
            if viewed {
                let entry = ScalingBench.Entry(
                    title: "t\(index)", stamp: Int(Date().timeIntervalSince1970 * 1_000_000))
                try txn.set(entry, forKey: "k\(index)", inCollection: "watched")
            } else {
                try txn.setData(
                    benchmarkPayload(stamp: UInt32(index)), forKey: benchmarkKey(index % 100),
                    inCollection: "bench")
            }
        }
        Thread.sleep(forTimeInterval: 0.02)
    }
    try db.close()
}

/// The environment variable that makes the benchmark binary a flat-out writer child of
/// h-turns and h-share ("PATH|SECONDS|TURNS").
let flatOutWriterKey = "SNAPSHOTDB_BENCH_FLAT_OUT_WRITER"

/// The child of h-turns and h-share: one-row commits without a pause for `SECONDS` after its
/// first, then prints "commits N seconds S".
func runFlatOutWriter(_ value: String) throws {
    let parts = value.split(separator: "|")
    var configuration = Configuration()
    configuration.writerTurns = parts[2] == "1"
    let db = try Database(path: String(parts[0]), configuration: configuration)
    let writer = db.newConnection(name: "flat-out-writer")
    let seconds = Double(parts[1]) ?? 2
    var commits = 0
    let start = Date()
    while Date().timeIntervalSince(start) < seconds {
        try writer.readWrite { txn in
            try txn.setData(
                benchmarkPayload(stamp: UInt32(commits)), forKey: benchmarkKey(commits % 100),
                inCollection: "bench")
        }
        commits += 1
        if commits == 1 { FileHandle.standardOutput.write(Data("started\n".utf8)) }
    }
    let elapsed = Date().timeIntervalSince(start)
    FileHandle.standardOutput.write(Data("commits \(commits) seconds \(elapsed)\n".utf8))
    try db.close()
}

/// What one run of h-turns or h-share measured.
private struct WritersBeside {
    var latencies: [Double]
    var ownRate: Double
    var otherRate: Double
    var p50: Double { percentile(latencies, 0.5) }
    var p99: Double { percentile(latencies, 0.99) }
    var max: Double { latencies.max() ?? .nan }
}

/// This process commits one-row transactions (every 10 ms when `occasional`, else without a
/// pause) for `seconds` while a child process commits without a pause, both with writer turns
/// on or off; returns this process's commit latencies and both commit rates.
private func writersBeside(directory: URL, seconds: Double, turns: Bool, occasional: Bool) throws
    -> WritersBeside
{
    let path = directory.appendingPathComponent("turns-\(turns)-\(occasional).sqlite").path
    for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
    var configuration = Configuration()
    configuration.writerTurns = turns
    configuration.busyTimeout = .seconds(60)
    let db = try Database(path: path, configuration: configuration)
    let writer = db.newConnection(name: "writer")
    try writer.readWrite { try $0.setData(benchmarkPayload(), forKey: "k", inCollection: "bench") }
    let child = Process()
    child.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    // The child runs half a second longer on each side of this process's window.
    child.environment = ProcessInfo.processInfo.environment.merging([
        flatOutWriterKey: "\(path)|\(seconds + 1)|\(turns ? 1 : 0)"
    ]) { $1 }
    let output = Pipe()
    child.standardOutput = output
    try child.run()
    let reader = output.fileHandleForReading
    var buffered = Data()
    func line() -> String? {
        while true {
            if let newline = buffered.firstIndex(of: UInt8(ascii: "\n")) {
                defer { buffered.removeSubrange(...newline) }
                return String(decoding: buffered[..<newline], as: UTF8.self)
            }
            let chunk = reader.availableData
            if chunk.isEmpty { return nil }
            buffered.append(chunk)
        }
    }
    guard line() == "started" else {
        throw BenchmarkCheckFailed(description: "h-turns: the writer child did not start")
    }
    Thread.sleep(forTimeInterval: 0.5)
    var latencies: [Double] = []
    let start = Date()
    var index = 0
    while Date().timeIntervalSince(start) < seconds {
        let began = Date()
        try writer.readWrite { txn in
            try txn.setData(
                benchmarkPayload(stamp: UInt32(index)), forKey: benchmarkKey(index % 100),
                inCollection: "mine")
        }
        latencies.append(Date().timeIntervalSince(began))
        index += 1
        if occasional { Thread.sleep(forTimeInterval: 0.01) }
    }
    let elapsed = Date().timeIntervalSince(start)
    let summary = line() ?? ""
    child.waitUntilExit()
    let fields = summary.split(separator: " ")
    guard child.terminationStatus == 0, fields.count == 4, let commits = Double(fields[1]),
        let childSeconds = Double(fields[3])
    else {
        throw BenchmarkCheckFailed(description: "h-turns: the writer child failed: \(summary)")
    }
    try db.close()
    return WritersBeside(
        latencies: latencies, ownRate: Double(latencies.count) / elapsed, otherRate: commits / childSeconds)
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
    let received = try whileAWakeWriterCommits(path: path, commits: commits, mode: "bench", row: "h-wake") {
        var received: [Double] = []
        for await changeset in stream where changeset.connectionName == "wake-writer" {
            received.append(Date().timeIntervalSince(changeset.date))
            if received.count == commits { break }
        }
        return received
    }
    try db.close()
    return received
}

/// Seconds from a commit in another process (its value's stamp) to the live view update that
/// holds it, for each commit of the child.
private func viewWakeLatencies(directory: URL, commits: Int) throws -> [Double] {
    let path = directory.appendingPathComponent("wake-view.sqlite").path
    for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
    let db = try Database(path: path)
    try db.register(ScalingBench.watched)
    let updates = db.observe(view: "watched").makeAsyncIterator()
    _ = try waitFor {
        var updates = updates
        return try await updates.next()
    }
    let received = try whileAWakeWriterCommits(path: path, commits: commits, mode: "view", row: "h-wake-view")
    {
        var updates = updates
        var received: [Double] = []
        while received.count < commits, let update = try await updates.next() {
            let now = Date().timeIntervalSince1970
            // Every commit the update holds (one, unless the consumer fell behind).
            let stamps = try update.read { txn in
                try update.changes.compactMap { change -> Int? in
                    guard case .insert(let item, _) = change else { return nil }
                    return try txn.value(
                        forKey: item.key, inCollection: "watched", as: ScalingBench.Entry.self)?
                        .stamp
                }
            }
            received += stamps.map { now - Double($0) / 1_000_000 }
        }
        return received
    }
    try db.close()
    return received
}

/// Runs the benchmark binary again as the wake writer (``runWakeWriter(_:)``: `commits`
/// commits on `path`, of `mode` "bench" or "view") while `collect` gathers a latency per commit
/// on a task of its own; throws unless it got one for each commit.
private func whileAWakeWriterCommits(
    path: String, commits: Int, mode: String, row: String,
    _ collect: @escaping @Sendable () async throws -> [Double]
) throws -> [Double] {
    let child = Process()
    child.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    child.environment = ProcessInfo.processInfo.environment.merging([
        wakeWriterKey: "\(path)|\(commits)|\(mode)"
    ]) { $1 }
    child.standardOutput = FileHandle.nullDevice
    try child.run()
    defer { child.waitUntilExit() }
    // The child commits every 20 ms: far less than a minute, however loaded the machine.
    guard let received = try waitFor(timeLimit: .seconds(60), collect), received.count == commits else {
        if child.isRunning { child.terminate() }
        throw BenchmarkCheckFailed(description: "\(row): not every commit of the other process arrived")
    }
    return received
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
