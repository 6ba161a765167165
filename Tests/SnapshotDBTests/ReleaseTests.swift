import Foundation
import SnapshotDB
import SnapshotDBTestSupport
import Testing

/// Releasing the last reference to a `Database` frees its path before the release returns, so
/// the file can be opened again at once.
@Suite("Release on last reference")
struct ReleaseTests {
    /// Every commit asks for a checkpoint (threshold of one page), so the checkpoint queue is
    /// usually at work, holding the database, when the test drops its references. Before, the
    /// last reference was then dropped on that queue a moment later, and the reopen right after
    /// the release threw `alreadyOpen` in about one round of ten.
    @Test func reopeningRightAfterTheLastReleaseAlwaysSucceeds() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("reopen.sqlite").path
            var configuration = Configuration()
            configuration.checkpointThresholdPages = 1
            configuration.synchronous = .normal
            for round in 0..<300 {
                let db = try Database(path: path, configuration: configuration)
                try db.newConnection(name: "writer").readWrite { txn in
                    try txn.set(Item(title: "round \(round)"), forKey: "\(round % 7)", inCollection: "c")
                }
                #expect(db.latestCommit == UInt64(round + 1))
            }
        }
    }

    /// The same through the `async` transactions, whose closures run on the connection's queue.
    @Test func reopeningRightAfterAnAsyncTransactionAlwaysSucceeds() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("reopen.sqlite").path
            var configuration = Configuration()
            configuration.checkpointThresholdPages = 1
            configuration.synchronous = .normal
            for round in 0..<300 {
                let db = try Database(path: path, configuration: configuration)
                try await db.newConnection(name: "writer").readWrite { txn in
                    try txn.set(Item(title: "round \(round)"), forKey: "\(round % 7)", inCollection: "c")
                }
                #expect(try await db.newConnection(name: "reader").read { $0.commit } == UInt64(round + 1))
            }
        }
    }

    /// A second open while the first `Database` is still held by its user stays refused.
    @Test func aDatabaseStillHeldStaysOpen() throws {
        try withTemporaryDatabase { db in
            try db.newConnection().readWrite { try $0.set(Item(title: "a"), forKey: "a", inCollection: "c") }
            expectError(.alreadyOpen) { try Database(path: db.path) }
        }
    }
}
