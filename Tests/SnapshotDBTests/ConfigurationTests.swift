import Foundation
import Logging
import SnapshotDBLocking
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDB

/// The bounds of ``Configuration``: the largest values mean "effectively never" or "no limit",
/// and values that make no sense are refused when the database opens.
@Suite("Configuration bounds", .hangLimit)
struct ConfigurationTests {
    /// A configuration with every number at its largest value.
    static func largestConfiguration() -> Configuration {
        var configuration = Configuration()
        configuration.synchronous = .normal
        configuration.checkpointThresholdPages = .max
        configuration.walWarningBytes = .max
        configuration.walHardLimitBytes = .max
        configuration.journalSizeLimit = .max
        configuration.commitLogRetention = .max
        configuration.commitLogRetentionBytes = .max
        configuration.changesBufferLimit = .max
        configuration.cacheLimit = .max
        configuration.warningInterval = .seconds(Int64.max)
        configuration.readTimeLimit = .seconds(Int64.max)
        configuration.historyRetention = HistoryRetention(
            commits: .max, age: .seconds(Int64.max), bytes: .max)
        return configuration
    }

    @Test func theLargestCheckpointThresholdMeansNoAutomaticCheckpoint() async throws {
        try await withTemporaryDatabase(configuration: Self.largestConfiguration()) { db in
            let writer = db.newConnection(name: "writer")
            let reader = db.newConnection(name: "reader")
            let commits = db.changes()
            try reader.beginLongLivedReadTransaction()
            // Past the default threshold (1000 pages), and past the history purge's request
            // interval (256 commits).
            try writeCommits(writer, count: 400)
            db.waitForCheckpoints()
            let status = db.checkpointStatus()
            #expect(status.walFrames > 1_000)
            #expect(status.checkpointedFrames == 0, "no automatic checkpoint ran")
            #expect(status.laggingSnapshots.map(\.connectionName) == ["reader"])
            #expect(try db.purgeHistory() == 0)
            #expect(try reader.beginLongLivedReadTransaction().count == 400)
            #expect(try await reader.read { try $0.count(inCollection: "items") } == 3_200)
            try reader.endLongLivedReadTransaction()
            // An explicit checkpoint runs the monitor's evaluation, and resets the WAL.
            let passive = try db.checkpoint(.passive)
            #expect(passive.isComplete)
            #expect(passive.checkpointedFrames == status.walFrames)
            #expect(try db.checkpoint(.truncate).isComplete)
            #expect(fileSize(db.path + "-wal") == 0)
            try db.close()
            var delivered = 0
            for await _ in commits { delivered += 1 }
            #expect(delivered == 400)
        }
    }

    @Test func theLargestJournalSizeLimitKeepsTheAutomaticResets() throws {
        var configuration = Configuration()
        configuration.synchronous = .normal
        configuration.checkpointThresholdPages = 64
        configuration.journalSizeLimit = .max
        try withTemporaryDatabase(configuration: configuration) { db throws in
            let writer = db.newConnection(name: "writer")
            try writeCommits(writer, count: 200)
            db.waitForCheckpoints()
            // Each automatic reset chose RESTART or TRUNCATE by comparing the file with twice
            // the limit.
            #expect(db.checkpointer.state.withLock { $0.wal.generationCount } > 0, "the WAL was reset")
            let status = db.checkpointStatus()
            #expect(status.walBytes <= 6 * 64 * Int64(status.pageSize + 24))
        }
    }

    @Test func theLongestBusyTimeoutWaitsForTheWriterLock() throws {
        var configuration = Configuration()
        configuration.busyTimeout = .seconds(Int64.max)
        try withTemporaryDatabase(configuration: configuration) { db throws in
            let writer = db.newConnection(name: "writer")
            let outcome = Mutex<Result<CheckpointResult, DatabaseError>?>(nil)
            let finished = DispatchSemaphore(value: 0)
            try writer.readWrite { txn in
                try txn.set("v", forKey: "k", inCollection: "c")
                DispatchQueue.global().async {
                    let result = Result { () throws(DatabaseError) in try db.checkpoint(.full) }
                    outcome.withLock { $0 = result }
                    finished.signal()
                }
                // The checkpoint waits for this transaction's writer lock, up to the busy timeout.
                db.writer.lock.waitForPriorityRequest()
            }
            finished.wait()
            let checkpoint = try #require(outcome.withLock { $0 }).get()
            #expect(checkpoint.isComplete)
            #expect(checkpoint.walFrames > 0)
            #expect(try writer.read { try $0.value(forKey: "k", inCollection: "c", as: String.self) } == "v")
        }
    }

    @Test func aNumberOutOfItsRangeIsRefusedAtOpenNamingIt() throws {
        let cases: [(name: String, range: String, change: (inout Configuration) -> Void)] = [
            ("fileMode", "0o0...0o7777", { $0.fileMode = 0o10600 }),
            ("cacheLimit", "0 or more", { $0.cacheLimit = -1 }),
            ("changesBufferLimit", "0 or more", { $0.changesBufferLimit = -1 }),
            ("readTimeLimit", "zero or more", { $0.readTimeLimit = .milliseconds(-1) }),
            ("historyRetention.commits", "0 or more", { $0.historyRetention.commits = -1 }),
            ("historyRetention.age", "zero or more", { $0.historyRetention.age = .seconds(-1) }),
            ("historyRetention.bytes", "0 or more", { $0.historyRetention.bytes = .min }),
            ("commitLogRetention", "0 or more", { $0.commitLogRetention = -1 }),
            ("commitLogRetentionBytes", "0 or more", { $0.commitLogRetentionBytes = -1 }),
            ("checkpointThresholdPages", "0 or more", { $0.checkpointThresholdPages = .min }),
            ("walWarningBytes", "0 or more", { $0.walWarningBytes = -1 }),
            ("warningInterval", "zero or more", { $0.warningInterval = .seconds(-60) }),
            ("walHardLimitBytes", "0 or more", { $0.walHardLimitBytes = -1 }),
            ("journalSizeLimit", "Int64.max for no limit", { $0.journalSizeLimit = -1 }),
        ]
        try withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("bounds.sqlite").path
            for (name, range, change) in cases {
                var configuration = Configuration()
                change(&configuration)
                for open in [
                    { _ = try Database(path: path, configuration: configuration) },
                    { _ = try Database(replica: "bounds.sqlite", vfs: "unix", configuration: configuration) },
                ] {
                    let error = expectError(.misuse) { try open() }
                    #expect(
                        error?.message.contains("Configuration.\(name) is ") == true,
                        "\(String(describing: error))")
                    #expect(error?.message.contains(range) == true, "\(String(describing: error))")
                }
            }
            // Refused before the file was touched or the path claimed.
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty)
            var zeros = Configuration()
            zeros.cacheLimit = 0
            zeros.commitLogRetention = 0
            zeros.commitLogRetentionBytes = 0
            zeros.historyRetention = HistoryRetention(commits: 0, age: .zero, bytes: 0)
            zeros.busyTimeout = .seconds(-1)  // documented: does not wait
            let db = try Database(path: path, configuration: zeros)
            let writer = db.newConnection(name: "writer")
            let reader = db.newConnection(name: "reader")
            try reader.beginLongLivedReadTransaction()
            try writer.readWrite { try $0.set("v", forKey: "k", inCollection: "c") }
            #expect(try reader.beginLongLivedReadTransaction().map(\.commit) == [1])
        }
    }
}

extension ConfigurationTests {
    static let loggingChildKey = "SNAPSHOTDB_LOGGING_CHILD_DB"

    /// The child: makes its configuration, then bootstraps logging (as an app that sets up
    /// logging after its configuration does), then opens and logs an error through the default
    /// checkpoint logger. Runs alone in its process: the bootstrap is once per process.
    @Test(.enabled(if: ProcessInfo.processInfo.environment[loggingChildKey] != nil))
    func childBootstrapsLoggingAfterMakingItsConfiguration() throws {
        let path = try #require(ProcessInfo.processInfo.environment[Self.loggingChildKey])
        let configuration = Configuration()
        let logs = LogCapture()
        LoggingSystem.bootstrap { _ in logs.handler }
        let db = try Database(path: path, configuration: configuration)
        let writer = db.newConnection(name: "writer")
        db.faults.arm(.rollback)
        struct Refused: Error {}
        _ = try? writer.readWrite { txn in
            try txn.set(1, forKey: "lost", inCollection: "c")
            throw Refused()
        }
        let logged = logs.messages(at: .error).contains { $0.contains("ROLLBACK after an error") }
        reportResult("logged", logged ? "yes" : "no")
        try db.close()
    }

    /// The default checkpoint logger takes the handler bootstrapped before the open, not the
    /// one there was when the configuration was made.
    @Test func theDefaultLoggerTakesTheHandlerBootstrappedBeforeTheOpen() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("logging.sqlite").path
            let child = try runChildTest(
                "childBootstrapsLoggingAfterMakingItsConfiguration", environmentKey: Self.loggingChildKey,
                path: path)
            #expect(child.results["logged"] == "yes", "child said: \(child.output)")
            #expect(child.terminationStatus == 0)
        }
    }
}
