import Foundation
import SnapshotDBLocking
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDB

/// The bounds of ``Configuration``: the largest values mean "effectively never" or "no limit",
/// and values that make no sense are refused when the database opens.
@Suite("Configuration bounds")
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
}
