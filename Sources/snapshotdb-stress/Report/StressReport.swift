internal import Foundation

/// Everything a run measured and every invariant it found broken, printed as text or JSON.
struct StressReport: Codable, Sendable {
    /// Percentiles of one kind of latency, in milliseconds.
    struct Latency: Codable, Sendable {
        var count: UInt64
        var p50Milliseconds: Double
        var p99Milliseconds: Double
        var maxMilliseconds: Double

        init(_ histogram: LatencyHistogram) {
            count = histogram.count
            p50Milliseconds = Double(histogram.percentile(0.50)) / 1e6
            p99Milliseconds = Double(histogram.percentile(0.99)) / 1e6
            maxMilliseconds = Double(histogram.max) / 1e6
        }
    }

    var seed: UInt64
    var directory: String
    var durationSeconds: Double
    var elapsedSeconds: Double
    var writers: Int
    /// Worker processes beside the main one, each with one writer and one reader.
    var processes = 0
    var readers: Int
    var accounts: Int

    var commits: Int
    /// With worker processes: this process's commits, then each worker's; empty without.
    var commitsByProcess: [Int]
    var commitsPerSecond: Double
    var rolledBackTransactions: Int
    var failedSavepoints: Int
    var commitLatency: Latency
    var reads: Int
    var readsPerSecond: Double
    var advances: Int
    var readLatency: Latency
    /// Changesets received through `Database.changes()`.
    var changesReceived: Int

    var peakWALBytes: Int64
    var walBoundBytes: Int64
    var laggard: LaggardReport
    /// Every message at warning level or above the checkpoint monitor logged.
    var warnings: [CapturedWarning]
    /// Every event `Database.checkpointEvents()` sent.
    var checkpointEvents: [RecordedCheckpointEvent]
    var crash: CrashReport
    /// What Litestream did and what its restores held (`--litestream`), or `nil` without it.
    var litestream: LitestreamReport?
    var integrityChecker: String

    var violationCount: Int
    var violations: [String]
    var passed: Bool

    func json() throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        return String(decoding: try encoder.encode(self), as: UTF8.self)
    }

    var text: String {
        var lines: [String] = []
        func add(_ label: String, _ value: String) {
            lines.append(label.padding(toLength: 14, withPad: " ", startingAt: 0) + value)
        }
        func latency(_ latency: Latency) -> String {
            "p50 \(milliseconds(latency.p50Milliseconds))  p99 \(milliseconds(latency.p99Milliseconds))  "
                + "max \(milliseconds(latency.maxMilliseconds))"
        }
        lines.append(
            "snapshotdb-stress: \(formatSeconds(elapsedSeconds)) of \(formatSeconds(durationSeconds)), "
                + "\(writers) writers, \(readers) readers, \(accounts) accounts, seed \(seed)"
                + (processes > 0 ? ", \(processes) worker processes" : ""))
        add(
            "commits",
            "\(commits) (\(rate(commitsPerSecond))/s), \(rolledBackTransactions) rolled back, "
                + "\(failedSavepoints) with a failed savepoint")
        if commitsByProcess.count > 1 {
            let shares = commitsByProcess.enumerated().map { index, count in
                (index == 0 ? "this process " : "worker \(index) ") + "\(count)"
            }
            add(
                "",
                "by process: " + shares.joined(separator: ", ")
                    + " (\(writers) writers here, 1 in each worker)")
        }
        add("commit time", latency(commitLatency))
        add("reads", "\(reads) (\(rate(readsPerSecond))/s), \(advances) bookmark advances")
        add("read time", latency(readLatency))
        add("changes()", "\(changesReceived) changesets received in order")
        add("peak WAL", "\(bytes(peakWALBytes)) (bound \(bytes(walBoundBytes)))")
        for (index, line) in laggardSummary.enumerated() { add(index == 0 ? "laggard" : "", line) }
        add("warnings", "\(warnings.count)" + (warnings.isEmpty ? "" : ":"))
        for warning in warnings.prefix(10) {
            // The message alone: the metadata repeats it (the JSON report has both).
            lines.append("    [\(formatSeconds(warning.seconds))] \(warning.level): \(warning.message)")
        }
        if warnings.count > 10 { lines.append("    ... \(warnings.count - 10) more") }
        add("events", eventSummary)
        add(
            "crash rounds",
            "\(crash.survived) of \(crash.rounds) survived (\(crash.killedBeforeReady) killed before the "
                + "database was open), \(crash.acknowledgedCommits) acknowledged commits verified, "
                + "last commit \(crash.lastCommit)")
        if let litestream {
            let final =
                litestream.finalRestoreSeconds.map {
                    "commit \(litestream.finalCommit) restored \(formatSeconds($0)) after the end"
                } ?? "commit \(litestream.finalCommit) never restored"
            add(
                "litestream",
                "\(litestream.stops) stops, \(litestream.kills) kills, \(litestream.probeCommits.count) restores "
                    + "checked during the run; \(final)")
            if let first = litestream.tornRestores.first {
                add(
                    "",
                    "\(litestream.tornRestores.count) torn restores (Litestream's replica, not the database; "
                        + "see the manual's Litestream article): \(first.prefix(200))")
            }
            if litestream.replicaStayedTorn {
                add(
                    "",
                    "TORN REPLICA: the replica was still torn a minute after the end, so the last commit was "
                        + "never restored intact (Litestream's issues #1164, #1309; the database passed every check)"
                )
            }
        }
        add("integrity", "checked with \(integrityChecker)")
        add("violations", violationCount == 0 ? "none" : "\(violationCount):")
        for violation in violations { lines.append("    \(violation)") }
        if violationCount > violations.count {
            lines.append("    ... \(violationCount - violations.count) more")
        }
        lines.append(passed ? "PASS" : "FAIL")
        return lines.joined(separator: "\n")
    }

    private var eventSummary: String {
        let kinds: [RecordedCheckpointEvent.Kind] = [.checkpointStalled, .walOverWarning, .recovered]
        let counts = kinds.map { kind in
            "\(checkpointEvents.filter { $0.kind == kind }.count) \(kind.rawValue)"
        }
        return counts.joined(separator: ", ") + " (checkpointEvents())"
    }

    private var laggardSummary: [String] {
        guard laggard.bookmarkCommit > 0 else { return ["did not run"] }
        var recovery =
            laggard.backUnderBoundAfterSeconds.map { "WAL back under bound after \(formatSeconds($0))" }
            ?? "WAL never back under bound"
        if let size = laggard.walBytesAfterRecovery { recovery += " (\(bytes(size)))" }
        recovery +=
            laggard.recoveredEventAfterSeconds.map { ", recovered event after \(formatSeconds($0))" }
            ?? ", no recovered event"
        if let reason = laggard.recoveryNotChecked { recovery = "recovery not checked (\(reason))" }
        return [
            "held commit \(laggard.bookmarkCommit) for \(formatSeconds(laggard.heldSeconds)), WAL "
                + "\(bytes(laggard.walBytesAtBookmark)) -> \(bytes(laggard.peakWALBytesWhileHeld))",
            "named by \(laggard.warningsNamingLaggard) logged warnings and \(laggard.eventsNamingLaggard) "
                + "walOverWarning events; checkpointStatus(): pins "
                + "\(bytes(laggard.pinnedBytesBeforeAdvance)), "
                + "\(laggard.commitsBehindBeforeAdvance) commits behind",
            "advanced \(laggard.commitsJumped) commits at once; " + recovery,
        ]
    }

    private func milliseconds(_ value: Double) -> String { fixed(value, digits: value < 10 ? 2 : 1) + " ms" }

    private func rate(_ value: Double) -> String { fixed(value, digits: 0) }

    private func bytes(_ count: Int64) -> String {
        count < 1 << 20
            ? fixed(Double(count) / 1024, digits: 1) + " KiB"
            : fixed(Double(count) / 1_048_576, digits: 2) + " MiB"
    }

    private func fixed(_ value: Double, digits: Int) -> String {
        let scale = (0..<digits).reduce(1.0) { result, _ in result * 10 }
        let scaled = (value * scale).rounded()
        guard digits > 0 else { return String(Int64(scaled)) }
        let whole = Int64(scaled) / Int64(scale)
        let fraction = String(Int64(abs(scaled)) % Int64(scale))
        return "\(whole)." + String(repeating: "0", count: digits - fraction.count) + fraction
    }
}
