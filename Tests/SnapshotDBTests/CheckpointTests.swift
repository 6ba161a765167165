import Foundation
import Logging
import MetricsTestKit
import SnapshotDBLocking
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDB

@Suite("Checkpoints and the monitor", .hangLimit)
struct CheckpointTests {
    /// A configuration with small thresholds, so that a test reaches them in a few hundred commits.
    static func smallConfiguration(logs: LogCapture? = nil) -> Configuration {
        var configuration = Configuration()
        configuration.synchronous = .normal
        configuration.checkpointThresholdPages = 64
        configuration.walWarningBytes = 256 << 10
        configuration.journalSizeLimit = 64 << 10
        if let logs { configuration.checkpointLogger = logs.logger }
        return configuration
    }

    @Test func walStaysSmallOverThousandsOfCommitsWithoutLaggard() throws {
        let configuration = Self.smallConfiguration()
        try withTemporaryDatabase(configuration: configuration) { db throws in
            let writer = db.newConnection(name: "writer")
            let reader = db.newConnection(name: "reader")
            let walPath = db.path + "-wal"
            var largestFile: Int64 = 0
            var largestInUse: Int64 = 0
            for commit in 0..<3_000 {
                try writeCommits(writer, count: 1, valuesPerCommit: 2, valueBytes: 200, offset: commit)
                if commit % 7 == 0 {
                    // Short reads come and go, as in an app; they must not make the WAL grow.
                    _ = try reader.read { try $0.count(inCollection: "items") }
                }
                largestFile = max(largestFile, fileSize(walPath))
                largestInUse = max(largestInUse, db.checkpointer.knownWALBytes)
            }
            db.waitForCheckpoints()
            let status = db.checkpointStatus()
            // 64 pages is 264 KiB of frames. The checkpoint runs beside a writer that commits
            // as fast as it can (thousands of commits a second); past four thresholds the
            // writer waits for it: about 4 thresholds and the commit in flight are seen (6 allows
            // for scheduling). Nothing like the ~25 MiB of 3,000 unchecked commits.
            let frame = Int64(status.pageSize + 24)
            #expect(largestInUse <= 6 * 64 * frame, "largest WAL in use: \(largestInUse) bytes")
            #expect(largestFile <= 6 * 64 * frame, "largest -wal file: \(largestFile) bytes")
            #expect(!status.isStalled)
            #expect(status.laggingSnapshots.isEmpty)
        }
    }

    @Test func bookmarkedLaggardGrowsTheWALAndIsNamed() throws {
        let logs = LogCapture()
        let metrics = TestMetrics()
        var configuration = Self.smallConfiguration(logs: logs)
        configuration.metricsFactory = metrics
        configuration.metricsLabel = "laggard-test"
        try withTemporaryDatabase(configuration: configuration) { db throws in
            let writer = db.newConnection(name: "writer")
            let laggard = db.newConnection(name: "laggard")
            try writeCommits(writer, count: 5)
            try laggard.beginLongLivedReadTransaction()
            let bookmark = laggard.snapshot

            let commits = try writeUntilWAL(of: db, exceeds: 1 << 20, through: writer)
            db.waitForCheckpoints()
            try db.checkpoint(.passive)  // one more evaluation with the WAL past 1 MiB

            let status = db.checkpointStatus()
            #expect(status.walBytes > 1 << 20)
            #expect(status.isStalled)
            #expect(status.checkpointedFrames < status.walFrames)
            let pin = try #require(status.laggingSnapshots.first)
            #expect(pin.connectionName == "laggard")
            #expect(pin.isBookmark)
            #expect(pin.commit == bookmark)
            #expect(pin.commitsBehind == UInt64(commits))
            // The checkpoint copied everything up to the laggard's snapshot and nothing after.
            let frame = Int64(status.pageSize + 24)
            #expect(pin.pinnedBytes == Int64(status.walFrames - status.checkpointedFrames) * frame)
            #expect(pin.pinnedBytes > status.walBytes / 2)
            #expect(status.externallyPinnedBytes == 0)

            let warnings = logs.messages(at: .warning)
            #expect(!warnings.isEmpty)
            #expect(warnings.count <= 4, "throttled: once, then at each doubling: \(warnings)")
            let warning = try #require(warnings.last)
            #expect(warning.contains("connection 'laggard'"))
            #expect(warning.contains("commits behind"))
            #expect(warning.contains("held"))
            #expect(warning.contains("pins"))
            #expect(!warning.contains("'writer'"))

            let dimensions = [("database", "laggard-test")]
            #expect(
                try metrics.expectGauge("snapshotdb_wal_bytes", dimensions).lastValue ?? 0 > Double(1 << 20))
            let lag = try metrics.expectGauge("snapshotdb_oldest_snapshot_lag_commits", dimensions)
            #expect(lag.lastValue == Double(commits))
            let incomplete = try metrics.expectCounter(
                "snapshotdb_checkpoints_total",
                dimensions + [("mode", "passive"), ("result", "incomplete")])
            #expect(incomplete.totalValue >= 1)
            #expect(
                try metrics.expectCounter("snapshotdb_checkpoint_warnings_total", dimensions).totalValue >= 1)
        }
    }

    @Test func walShrinksBackAfterTheLaggardAdvances() async throws {
        let logs = LogCapture()
        let events = try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("test.sqlite").path
            let walPath = path + "-wal"
            do {
                let db = try Database(path: path, configuration: Self.smallConfiguration(logs: logs))
                let events = db.checkpointEvents()
                let writer = db.newConnection(name: "writer")
                let laggard = db.newConnection(name: "laggard")
                try writeCommits(writer, count: 5)
                try laggard.beginLongLivedReadTransaction()
                try writeUntilWAL(of: db, exceeds: 1 << 20, through: writer)
                db.waitForCheckpoints()
                #expect(db.checkpointStatus().isStalled)
                #expect(fileSize(walPath) > 1 << 20)

                // The laggard catches up: its old snapshot no longer pins anything. The
                // checkpoint this queues copies every frame, has the bookmark (now at the newest
                // commit) take its snapshot again off the WAL, and truncates the WAL.
                let changes = try laggard.beginLongLivedReadTransaction()
                #expect(!changes.isEmpty)
                let bookmark = laggard.snapshot
                db.waitForCheckpoints()
                let caughtUp = db.checkpointStatus()
                #expect(!caughtUp.isStalled)
                #expect(caughtUp.laggingSnapshots.isEmpty)
                #expect(caughtUp.walBytes == 0)
                #expect(fileSize(walPath) == 0)
                #expect(laggard.snapshot == bookmark)
                #expect(laggard.isInLongLivedReadTransaction)
                let allClear = logs.messages(at: .notice).filter { $0.contains("back to") }
                #expect(allClear.count == 1, "\(logs.messages(at: .notice))")

                // A bookmark that keeps up, advancing after each burst of commits as a UI does on
                // change notifications, lets the WAL be reset after each burst.
                var largest: Int64 = 0
                for round in 0..<50 {
                    try writeCommits(writer, count: 10, offset: 10_000 + 10 * round)
                    largest = max(largest, fileSize(walPath))
                    try laggard.beginLongLivedReadTransaction()
                    db.waitForCheckpoints()
                }
                #expect(largest <= 1 << 20, "largest -wal file while keeping up: \(largest) bytes")
                return events
            }
        }
        // The database is released: the event stream is finished and holds every event.
        var received: [CheckpointEvent] = []
        for await event in events { received.append(event) }
        guard case .checkpointStalled(let stalled) = received.first else {
            Issue.record("expected a stall first, got \(received)")
            return
        }
        #expect(stalled.laggingSnapshots.map(\.connectionName) == ["laggard"])
        #expect(received.contains { if case .walOverWarning = $0 { true } else { false } })
        let recovery = try #require(
            received.firstIndex { if case .recovered = $0 { true } else { false } },
            "expected a recovery, got \(received)")
        #expect(received[recovery].status.walBytes < 256 << 10)
        let beforeRecovery = received[..<recovery]
        #expect(beforeRecovery.allSatisfy { $0.status.laggingSnapshots.first?.connectionName == "laggard" })
    }

    @Test func warningsAreThrottledUntilTheWALDoublesOrTheIntervalPasses() throws {
        let logs = LogCapture()
        var configuration = Self.smallConfiguration(logs: logs)
        configuration.warningInterval = .seconds(3_600)
        try withTemporaryDatabase(configuration: configuration) { db throws in
            let writer = db.newConnection(name: "writer")
            let laggard = db.newConnection(name: "laggard")
            try laggard.beginLongLivedReadTransaction()
            try writeUntilWAL(of: db, exceeds: 300 << 10, through: writer)
            db.waitForCheckpoints()
            try db.checkpoint(.passive)
            let first = logs.messages(at: .warning).count
            #expect(first >= 1)
            // The same stall, the WAL not doubled, within the interval: quiet.
            for _ in 0..<3 { try db.checkpoint(.passive) }
            #expect(logs.messages(at: .warning).count == first)
            // The WAL doubled: one more warning.
            try writeUntilWAL(of: db, exceeds: db.checkpointStatus().walBytes * 2 + 64 << 10, through: writer)
            db.waitForCheckpoints()
            try db.checkpoint(.passive)
            #expect(logs.messages(at: .warning).count > first)
        }

        let eager = LogCapture()
        var noInterval = Self.smallConfiguration(logs: eager)
        noInterval.warningInterval = .zero
        try withTemporaryDatabase(configuration: noInterval) { db throws in
            let writer = db.newConnection(name: "writer")
            let laggard = db.newConnection(name: "laggard")
            try laggard.beginLongLivedReadTransaction()
            try writeUntilWAL(of: db, exceeds: 300 << 10, through: writer)
            db.waitForCheckpoints()
            let before = eager.messages(at: .warning).count
            for _ in 0..<3 { try db.checkpoint(.passive) }
            #expect(eager.messages(at: .warning).count == before + 3, "the interval passed at each check")
        }
    }

    @Test func foreignReaderIsReportedWithItsProcessID() throws {
        let logs = LogCapture()
        try withTemporaryDatabase(configuration: Self.smallConfiguration(logs: logs)) { db throws in
            let writer = db.newConnection(name: "writer")
            try writeCommits(writer, count: 5)
            try db.checkpoint(.truncate)
            let reader = try ChildProcess(
                python: """
                    import sqlite3, sys
                    connection = sqlite3.connect(sys.argv[1], isolation_level=None)
                    connection.execute("BEGIN")
                    connection.execute("SELECT count(*) FROM snapshotdb_values").fetchall()
                    print("ready", flush=True)
                    sys.stdin.readline()
                    connection.execute("COMMIT")
                    """, [db.path])
            defer { reader.kill() }
            try reader.waitForLine("ready")

            try writeUntilWAL(of: db, exceeds: 512 << 10, through: writer)
            db.waitForCheckpoints()
            try db.checkpoint(.passive)
            let status = db.checkpointStatus()
            #expect(status.isStalled)
            #expect(status.laggingSnapshots.isEmpty)
            #expect(status.externallyPinnedBytes > 0)
            let external = try #require(status.externalReaders.first)
            #expect(external.processID == reader.processID)
            #expect(status.externalReaders.allSatisfy { $0.processID != getpid() })
            let warning = try #require(logs.messages(at: .warning).last)
            #expect(warning.contains("process \(reader.processID)"))

            try reader.send("go")
            reader.finish()
            try db.checkpoint(.passive)
            let released = db.checkpointStatus()
            #expect(released.externalReaders.isEmpty)
            #expect(!released.isStalled)
        }
    }

    @Test func hardLimitRefusesWritesAndRecovers() throws {
        var configuration = Self.smallConfiguration()
        configuration.walHardLimitBytes = 512 << 10
        try withTemporaryDatabase(configuration: configuration) { db throws in
            let writer = db.newConnection(name: "writer")
            let laggard = db.newConnection(name: "laggard")
            try writeCommits(writer, count: 5)
            try laggard.beginLongLivedReadTransaction()
            let before = db.latestCommit
            try writeUntilWAL(of: db, exceeds: 512 << 10, through: writer, limit: 2_000)
            let committed = db.latestCommit
            #expect(committed > before)

            let error = expectError(.walLimitExceeded) {
                try writeCommits(writer, count: 1, offset: 50_000)
            }
            #expect(error?.message.contains("connection 'laggard'") == true)
            #expect(error?.message.contains("commits behind") == true)
            #expect(db.latestCommit == committed, "a refused write commits nothing")
            // Reads go on, and what was committed stays readable.
            #expect(try writer.read { try $0.count(inCollection: "items") } > 0)

            try laggard.endLongLivedReadTransaction()
            try writeCommits(writer, count: 1, offset: 60_000)
            #expect(db.latestCommit == committed + 1)
            db.waitForCheckpoints()
            // The reset holds writers back a few milliseconds at most and retries a bounded
            // number of times; on a loaded machine (the whole suite in parallel) it may need the
            // next commits, each of which asks again, as an app's writes would.
            var commits = 0
            while db.checkpointer.knownWALBytes >= 512 << 10 && commits < 50 {
                try writeCommits(writer, count: 1, offset: 61_000 + commits)
                db.waitForCheckpoints()
                commits += 1
            }
            #expect(db.checkpointer.knownWALBytes < 512 << 10, "not reset after \(commits) more commits")
            try writeCommits(writer, count: 10, offset: 70_000)
        }
    }

    /// `vacuum()` writes about the whole database into the WAL: with a hard limit, it is refused
    /// while a bookmark pins the WAL and those bytes would take it past the limit (a bookmark at
    /// the newest commit pins them too: a vacuum makes no commit); nothing is written. Once the
    /// bookmark is released it runs.
    @Test func vacuumIsRefusedWhenItWouldTakeAPinnedWALPastTheHardLimit() throws {
        var configuration = Self.smallConfiguration()
        configuration.walHardLimitBytes = 512 << 10
        try withTemporaryDatabase(configuration: configuration) { db throws in
            let writer = db.newConnection(name: "writer")
            try writeCommits(writer, count: 150)
            _ = try db.checkpoint(.truncate)
            let fileBytes = try #require(
                FileManager.default.attributesOfItem(atPath: db.path)[.size] as? Int64)
            #expect(fileBytes > 512 << 10, "the database must be larger than the limit for this test")
            let laggard = db.newConnection(name: "laggard")
            try laggard.beginLongLivedReadTransaction()
            let walBefore = db.checkpointer.knownWALBytes
            let commit = db.latestCommit
            let error = expectError(.walLimitExceeded) { try db.vacuum() }
            #expect(error?.message.hasPrefix("vacuum() would write about") == true, "\(error as Any)")
            #expect(error?.message.contains("connection 'laggard'") == true, "\(error as Any)")
            #expect(db.checkpointer.knownWALBytes == walBefore, "a refused vacuum writes nothing")
            #expect(db.latestCommit == commit)
            try laggard.endLongLivedReadTransaction()
            try db.vacuum()
            #expect(try writer.read { try $0.count(inCollection: "items") } == 150 * 8)
        }
    }

    @Test func walLeftByAKilledProcessIsCleanedAtOpen() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("crash.sqlite").path
            do {
                let db = try Database(path: path)
                try writeCommits(db.newConnection(name: "setup"), count: 3)
            }
            let writer = try ChildProcess(
                python: """
                    import sqlite3, sys
                    connection = sqlite3.connect(sys.argv[1], isolation_level=None)
                    connection.execute("PRAGMA wal_autocheckpoint=0")
                    for i in range(1500):
                        connection.execute("BEGIN")
                        connection.execute(
                            "INSERT OR REPLACE INTO snapshotdb_values(collection, key, data) VALUES ('big', ?, ?)",
                            (str(i), ('"' + 'y' * 3000 + '"').encode()))
                        connection.execute("COMMIT")
                    print("ready", flush=True)
                    sys.stdin.readline()
                    """, [path])
            try writer.waitForLine("ready")
            writer.kill()
            let leftBehind = fileSize(path + "-wal")
            #expect(leftBehind > 4 << 20)

            let logs = LogCapture()
            var configuration = Configuration()
            configuration.checkpointLogger = logs.logger
            let db = try Database(path: path, configuration: configuration)
            #expect(fileSize(path + "-wal") == 0)
            let status = db.checkpointStatus()
            #expect(status.walBytesAtOpen == leftBehind)
            #expect(status.walFrames == 0)
            let report = try #require(logs.messages(at: .notice).first)
            #expect(report.contains("found a WAL of"))
            #expect(report.contains("checkpointed and truncated"))
            let reader = db.newConnection(name: "reader")
            #expect(try reader.read { try $0.count(inCollection: "big") } == 1500)
            #expect(
                try reader.read { try $0.value(forKey: "7", inCollection: "big", as: String.self) }?.count
                    == 3000)
        }
    }

    @Test func explicitCheckpointReportsFrames() throws {
        try withTemporaryDatabase(configuration: Self.smallConfiguration()) { db throws in
            let writer = db.newConnection(name: "writer")
            try writeCommits(writer, count: 3)
            let passive = try db.checkpoint(.passive)
            #expect(passive.walFrames > 0)
            #expect(passive.checkpointedFrames == passive.walFrames)
            #expect(passive.isComplete)
            let truncate = try db.checkpoint(.truncate)
            #expect(truncate.isComplete)
            #expect(truncate.walFrames == 0)
            #expect(fileSize(db.path + "-wal") == 0)
            #expect(db.checkpointStatus().walBytes == 0)

            let laggard = db.newConnection(name: "laggard")
            try laggard.beginLongLivedReadTransaction()
            try writeCommits(writer, count: 3, offset: 100)
            let started = ContinuousClock.now
            let pinned = try db.checkpoint(.truncate)
            #expect(!pinned.isComplete)
            #expect(ContinuousClock.now - started < .seconds(1), "a pinned WAL is not waited for")
            #expect(db.checkpointStatus().laggingSnapshots.map(\.connectionName) == ["laggard"])
        }
    }

    /// A WAL restarted by another process, then filled by one commit larger than the whole WAL
    /// before: the frame count alone looks like growth; the WAL header's salts tell the new
    /// generation, so a bookmark from before the restart pins every frame after it.
    @Test func bookmarkPinsAWALRestartedByAnotherProcess() throws {
        try withTemporaryDatabase(configuration: Self.smallConfiguration()) { db throws in
            let writer = db.newConnection(name: "writer")
            try writeCommits(writer, count: 2, valuesPerCommit: 1, valueBytes: 20)
            let small = db.checkpointStatus().walFrames
            #expect(small > 0)
            // The shell copies every frame back; the next writer starts the WAL from frame 1.
            try run("/usr/bin/sqlite3", [db.path, "PRAGMA wal_checkpoint(RESTART)"])
            let laggard = db.newConnection(name: "laggard")
            try laggard.beginLongLivedReadTransaction()

            // About 40 pages in one commit: far more than the WAL held before.
            try writeCommits(writer, count: 1, valuesPerCommit: 40, valueBytes: 3_000, offset: 10)
            let status = db.checkpointStatus()
            #expect(status.walFrames > 4 * small)
            #expect(status.checkpointedFrames == 0)
            let pin = try #require(status.laggingSnapshots.first)
            #expect(pin.connectionName == "laggard")
            #expect(pin.pinnedBytes == Int64(status.walFrames) * Int64(status.pageSize + 24))
        }
    }

    static let largeCommitsChildKey = "SNAPSHOTDB_LARGE_COMMITS_CHILD"

    /// The child of ``aLaggardIsNamedWhileOnlyAnotherProcessWrites()``: opens the database with
    /// the default configuration and commits large values.
    @Test(.enabled(if: ProcessInfo.processInfo.environment[largeCommitsChildKey] != nil))
    func childWritesLargeCommits() throws {
        let parts = try #require(ProcessInfo.processInfo.environment[Self.largeCommitsChildKey])
            .split(separator: "|")
        let db = try Database(path: String(parts[0]))
        let writer = db.newConnection(name: "child-writer")
        try writeCommits(writer, count: Int(parts[1])!, valuesPerCommit: 4, valueBytes: 3_000, offset: 1_000)
        reportResult("latest", "\(db.latestCommit)")
    }

    /// Timeline: this process commits twice and bookmarks `laggard` | another process commits 40
    /// large commits (about 2 MiB of WAL) | this process only reads, once. The read learns where
    /// the other process's newest commit ends in the WAL: the laggard's pin is every frame after
    /// its snapshot, a checkpoint is due, and the monitor names the laggard, although this
    /// process's own commits never passed the threshold.
    @Test func aLaggardIsNamedWhileOnlyAnotherProcessWrites() throws {
        let logs = LogCapture()
        try withTemporaryDatabase(configuration: Self.smallConfiguration(logs: logs)) { db throws in
            let writer = db.newConnection(name: "writer")
            try writeCommits(writer, count: 2, valuesPerCommit: 1, valueBytes: 20)
            let laggard = db.newConnection(name: "laggard")
            try laggard.beginLongLivedReadTransaction()
            let atBookmark = db.checkpointStatus().walFrames
            let bookmarkCommit = db.latestCommit

            let child = try runChildTest(
                "childWritesLargeCommits", environmentKey: Self.largeCommitsChildKey, path: "\(db.path)|40")
            #expect(child.terminationStatus == 0, "\(child.output)")
            #expect(child.results["latest"] == "\(bookmarkCommit + 40)")
            #expect(
                db.checkpointStatus().walFrames == atBookmark,
                "nothing of this process has seen the commits yet")

            _ = try writer.read { try $0.count(inCollection: "items") }
            db.waitForCheckpoints()
            let status = db.checkpointStatus()
            #expect(status.latestCommit == bookmarkCommit + 40)
            #expect(status.walFrames > atBookmark + 400, "about 13 frames a commit")
            let pin = try #require(status.laggingSnapshots.first)
            #expect(pin.connectionName == "laggard")
            #expect(pin.commitsBehind == 40)
            #expect(pin.pinnedBytes == Int64(status.walFrames - atBookmark) * Int64(status.pageSize + 24))
            #expect(status.isStalled)
            let warnings = logs.messages(at: .warning)
            #expect(warnings.count == 1)
            #expect(
                warnings.first?.contains(
                    "pinned by connection 'laggard' (bookmark at commit \(bookmarkCommit)") == true)
        }
    }

    /// Commits learn the WAL's generation from the WAL-index header, the database at open from
    /// the `-wal` file: both must name it with the same bytes, or a reopened database would
    /// take its first commit for a restart.
    @Test func generationFromTheWALIndexMatchesTheWALFile() throws {
        try withTemporaryDatabase(configuration: Self.smallConfiguration()) { db throws in
            let writer = db.newConnection(name: "writer")
            var seen: Set<UInt64> = []
            for round in 0..<3 {
                try writeCommits(writer, count: 2, valuesPerCommit: 1, valueBytes: 20, offset: round * 10)
                let fromIndex = try #require(db.checkpointer.state.withLock { $0.wal.generation })
                #expect(WALGenerationReader(walPath: db.path + "-wal").read() == fromIndex)
                seen.insert(fromIndex)
                try db.checkpoint(.restart)
            }
            #expect(seen.count == 3, "every restart draws new salts")
        }
    }
}
