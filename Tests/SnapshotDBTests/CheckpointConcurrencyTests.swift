import Foundation
import SnapshotDBLocking
import Testing

@testable import SnapshotDB

/// A flag one task raises and another polls.
final class Flag: Sendable {
    private let value = Mutex(false)
    func raise() { value.withLock { $0 = true } }
    var isRaised: Bool { value.withLock { $0 } }
}

@Suite("Checkpoints under concurrent writers and bookmarks")
struct CheckpointConcurrencyTests {
    /// Timeline (two threads, the checkpoint queue in between):
    ///
    /// ```
    /// writer  ── commit ── commit ── … ──────────── (waits for the reset) ── commit ── …
    /// ui      ── bookmark c ─ read ─ read ─ advance to c' ─ read ─ …
    /// ckpt                 PASSIVE ─ [writer lock · BEGIN IMMEDIATE · ui re-takes c' · TRUNCATE]
    /// ```
    ///
    /// Whenever the checkpointer re-takes the ui's bookmark, every read must still see exactly
    /// the bookmarked commit, and every advance must return exactly the jumped changesets.
    @Test func bookmarksKeepTheirSnapshotWhileCheckpointsRetakeThem() throws {
        var configuration = CheckpointTests.smallConfiguration()
        configuration.checkpointThresholdPages = 32
        try withTemporaryDatabase(configuration: configuration) { db throws in
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            try writer.readWrite { try $0.set(0, forKey: "counter", inCollection: "state") }
            let base = db.latestCommit
            try ui.beginLongLivedReadTransaction()
            let finished = Flag()
            let commits = 1_500
            let writing = DispatchGroup()
            let failure = Mutex<(any Error)?>(nil)
            DispatchQueue.global().async(group: writing) {
                defer { finished.raise() }
                do {
                    for number in 1...commits {
                        try writer.readWrite { txn in
                            try txn.set(number, forKey: "counter", inCollection: "state")
                            try txn.set(
                                String(repeating: "v", count: 2_000), forKey: "\(number % 50)",
                                inCollection: "filler")
                        }
                    }
                } catch {
                    failure.withLock { $0 = error }
                }
            }
            var bookmark = ui.snapshot
            var reads = 0
            var advances = 0
            var largestWAL: Int64 = 0
            while !finished.isRaised {
                try ui.read { txn in
                    #expect(txn.commit == bookmark)
                    let counter = try txn.value(forKey: "counter", inCollection: "state", as: Int.self)
                    #expect(counter == Int(bookmark - base))
                }
                reads += 1
                if reads % 3 == 0 {
                    let changes = try ui.beginLongLivedReadTransaction()
                    let now = ui.snapshot
                    #expect(changes.map(\.commit) == Array((bookmark + 1)..<(now + 1)))
                    bookmark = now
                    advances += 1
                    largestWAL = max(largestWAL, fileSize(db.path + "-wal"))
                }
            }
            writing.wait()
            if let error = failure.withLock({ $0 }) { throw error }
            db.waitForCheckpoints()
            let reseats = db.checkpointer.state.withLock { $0.reseatedBookmarks }
            let measured =
                "\(reads) reads, \(advances) advances, \(reseats) re-takes by the checkpointer, "
                + "largest WAL \(largestWAL) bytes"
            // 32 pages is 132 KiB; 1,500 commits write ~14 MiB of WAL. A ui that keeps up lets
            // the WAL be reset along the way (by re-taking its bookmark) whenever a checkpoint
            // finds it at the newest commit: 2 to 6.5 MiB seen with this writer, which commits
            // back to back (a bookmark a few commits behind pins the WAL in between).
            #expect(largestWAL < 10 << 20, "\(measured)")
            #expect(db.latestCommit == base + UInt64(commits), "\(measured)")
            #expect(
                try ui.read { try $0.value(forKey: "counter", inCollection: "state", as: Int.self) }
                    == Int(bookmark - base))
        }
    }
}
