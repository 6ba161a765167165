import Foundation
import Logging
import MetricsTestKit
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDB

/// Leaving the WAL to an external replicator (Litestream), and real Litestream beside
/// bookmarks and views.
@Suite("Replication with Litestream")
struct ReplicationTests {
    /// How many RESTART and TRUNCATE checkpoints SnapshotDB ran, by its metrics. (The WAL's
    /// salts are no proof: SQLite's next writer restarts a WAL that a PASSIVE checkpoint copied
    /// whole when no reader holds it; Litestream's own read transaction is what prevents that.)
    static func resets(_ metrics: TestMetrics, label: String) -> Double {
        var total = 0.0
        for mode in ["restart", "truncate"] {
            for result in ["complete", "incomplete", "failed"] {
                let counter = try? metrics.expectCounter(
                    "snapshotdb_checkpoints_total", [("database", label), ("mode", mode), ("result", result)])
                total += Double(counter?.totalValue ?? 0)
            }
        }
        return total
    }

    static func configuration(_ metrics: TestMetrics, label: String, logs: LogCapture? = nil) -> Configuration
    {
        var configuration = CheckpointTests.smallConfiguration(logs: logs)
        configuration.metricsFactory = metrics
        configuration.metricsLabel = label
        return configuration
    }

    @Test func theExternalModeNeverResetsTheWALNorDoesClose() throws {
        let metrics = TestMetrics()
        var configuration = Self.configuration(metrics, label: "external")
        configuration.checkpointing = .external(replicator: "litestream")
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("external.sqlite").path
            let db = try Database(path: path, configuration: configuration)
            #expect(db.checkpointing == .external(replicator: "litestream"))
            let writer = db.newConnection(name: "writer")
            // Hundreds of commits past the checkpoint threshold: PASSIVE passes copy the WAL
            // back, and SnapshotDB never resets it (in automatic mode it does, below).
            try writeCommits(writer, count: 300)
            db.checkpointer.waitForIdle()
            let passive = try metrics.expectCounter(
                "snapshotdb_checkpoints_total",
                [("database", "external"), ("mode", "passive"), ("result", "complete")])
            #expect(passive.totalValue > 0)
            let error = expectError(.misuse) { try db.checkpoint(.truncate) }
            #expect(error?.message.contains("litestream") == true)
            expectError(.misuse) { try db.checkpoint(.restart) }
            try db.vacuum()
            db.checkpointer.waitForIdle()
            try db.close()
            #expect(Self.resets(metrics, label: "external") == 0)
            // Closing neither truncated nor deleted the WAL (SQLite's own checkpoint on the last
            // close is turned off too).
            #expect(fileSize(path + "-wal") > 0)
        }
        let automatic = TestMetrics()
        try withTemporaryDatabase(configuration: Self.configuration(automatic, label: "automatic")) {
            db throws in
            try writeCommits(db.newConnection(name: "writer"), count: 300)
            db.checkpointer.waitForIdle()
            #expect(Self.resets(automatic, label: "automatic") > 0)
        }
    }

    @Test func aFileLitestreamReplicatesIsRecognizedAtOpenAndSaidOnce() throws {
        let logs = LogCapture()
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("replicated.sqlite").path
            do {
                let db = try Database(path: path)
                #expect(db.checkpointing == .automatic)
                try db.newConnection().readWrite { try $0.set(1, forKey: "k", inCollection: "c") }
            }
            // Litestream's own table, as it creates it.
            try run(
                "/usr/bin/sqlite3",
                [path, "CREATE TABLE _litestream_seq (id INTEGER PRIMARY KEY, seq INTEGER);"])
            let db = try Database(path: path, configuration: CheckpointTests.smallConfiguration(logs: logs))
            #expect(db.checkpointing == .external(replicator: "litestream"))
            try writeCommits(db.newConnection(name: "writer"), count: 200)
            db.checkpointer.waitForIdle()
            let notices = logs.messages(at: .notice).filter { $0.contains("Litestream replicates this file") }
            #expect(notices.count == 1, "\(logs.messages(at: .notice))")
        }
    }

    @Test func aLitestreamStartedAfterTheOpenIsRecognizedBeforeAnyReset() throws {
        let logs = LogCapture()
        let metrics = TestMetrics()
        try withTemporaryDatabase(configuration: Self.configuration(metrics, label: "later", logs: logs)) {
            db throws in
            let writer = db.newConnection(name: "writer")
            try writeCommits(writer, count: 5)
            db.checkpointer.waitForIdle()
            let before = Self.resets(metrics, label: "later")
            try run(
                "/usr/bin/sqlite3",
                [db.path, "CREATE TABLE _litestream_seq (id INTEGER PRIMARY KEY, seq INTEGER);"])
            try writeCommits(writer, count: 300)
            db.checkpointer.waitForIdle()
            #expect(db.checkpointing == .external(replicator: "litestream"))
            #expect(Self.resets(metrics, label: "later") == before)
            #expect(logs.messages(at: .notice).filter { $0.contains("Litestream replicates") }.count == 1)
        }
    }
}
