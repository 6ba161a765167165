import Foundation
import Logging
import Testing

@testable import SnapshotDB

/// The commit path's contract at its edges: failures that must leave no gap, foreign writes
/// that must never make a reader wait, and the API's defined answers to misuse. Faults that
/// release code cannot reach on demand are injected (debug builds).
@Suite("The writer's contract")
struct WriterContractTests {
    struct Refused: Error {}

    static func write(_ connection: Connection, _ key: String, _ title: String = "v") throws {
        try connection.readWrite { try $0.set(Item(title: title), forKey: key, inCollection: "c") }
    }

    @Test func aFailedAdvanceLeavesNoGap() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            try Self.write(writer, "a")
            try ui.beginLongLivedReadTransaction()
            try Self.write(writer, "b")
            try Self.write(writer, "c")
            db.faults.arm(.beginRead)
            expectError(.ioError) { try ui.beginLongLivedReadTransaction() }
            #expect(!ui.isInLongLivedReadTransaction)
            try Self.write(writer, "d")
            let changes = try ui.beginLongLivedReadTransaction()
            #expect(changes.map(\.commit) == [2, 3, 4], "every commit after the last one returned")
            #expect(changes.hasChange(forKey: "b", inCollection: "c"))
            #expect(changes.hasChange(forKey: "d", inCollection: "c"))
        }
    }

    @Test func aFailedCommitPublishesNothingAndTheNumberIsReused() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            try Self.write(writer, "a")
            try ui.beginLongLivedReadTransaction()
            db.faults.arm(.commit)
            expectError(.ioError) { try Self.write(writer, "lost") }
            #expect(db.latestCommit == 1)
            #expect(try writer.read { try $0.hasValue(forKey: "lost", inCollection: "c") } == false)
            try Self.write(writer, "b")
            let changes = try ui.beginLongLivedReadTransaction()
            #expect(changes.map(\.commit) == [2])
            #expect(!changes.hasChange(forKey: "lost", inCollection: "c"))
        }
    }

    @Test func aSavepointThatCannotRollBackKeepsTheTransactionFromCommitting() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            db.faults.arm(.savepointRollback)
            let error = expectError(.ioError) {
                try writer.readWrite { txn in
                    try txn.set(Item(title: "outer"), forKey: "outer", inCollection: "c")
                    try? txn.savepoint { txn in
                        try txn.set(Item(title: "inner"), forKey: "inner", inCollection: "c")
                        throw Refused()
                    }
                }
            }
            #expect(error?.message.contains("savepoint") == true)
            let causeIsSQLite = error?.cause.map { $0 is DatabaseError } ?? false
            #expect(causeIsSQLite)
            #expect(db.latestCommit == 0)
            #expect(try writer.read { try $0.count(inCollection: "c") } == 0)
        }
    }

    /// A `ROLLBACK` that fails after the transaction's own error leaves that error the one
    /// thrown, is logged rather than lost, and the connection goes on with a new SQLite handle
    /// (closing the old one rolls back what it held).
    @Test func aRollbackThatFailsAfterAnErrorIsLoggedAndTheConnectionGoesOn() throws {
        let logs = LogCapture()
        var configuration = Configuration()
        configuration.checkpointLogger = logs.logger
        try withTemporaryDatabase(configuration: configuration) { db throws in
            let writer = db.newConnection(name: "writer")
            try Self.write(writer, "a")
            db.faults.arm(.rollback)
            #expect(throws: Refused.self) {
                try writer.readWrite { txn in
                    try txn.set(Item(title: "lost"), forKey: "lost", inCollection: "c")
                    throw Refused()
                }
            }
            let errors = logs.messages(at: .error)
            #expect(
                errors.contains {
                    $0.contains(
                        "ROLLBACK after an error in a write transaction on connection 'writer' failed")
                        && $0.contains("injected fault: rollback")
                }, "\(errors)")
            try Self.write(writer, "b")
            #expect(db.latestCommit == 2)
            #expect(try writer.read { try $0.hasValue(forKey: "lost", inCollection: "c") } == false)
            #expect(try db.newConnection().read { try $0.count(inCollection: "c") } == 2)
        }
    }

    @Test func aBookmarkLostOnReseatIsReportedToItsConnection() throws {
        let logs = LogCapture()
        var configuration = Configuration()
        configuration.checkpointLogger = logs.logger
        try withTemporaryDatabase(configuration: configuration) { db throws in
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            try Self.write(writer, "a")
            try ui.beginLongLivedReadTransaction()
            db.faults.arm(.reseat)
            // A WAL reset has bookmarks at the newest commit take their snapshot again.
            try db.checkpoint(.truncate)
            #expect(!ui.isInLongLivedReadTransaction)
            #expect(
                logs.messages(at: .error).contains { $0.contains("could not be taken again at commit 1") })
            let error = expectError(.bookmarkLost) { try ui.read { try $0.count(inCollection: "c") } }
            #expect(error?.message.contains("ui") == true)
            // Told once; the connection reads the newest commit afterwards.
            #expect(try ui.read { try $0.count(inCollection: "c") } == 1)
            try Self.write(writer, "b")
            let changes = try ui.beginLongLivedReadTransaction()
            #expect(changes.map(\.commit) == [2], "the next advance returns every commit since the last one")
        }
    }

    /// After some errors SQLite ends a transaction on its own (an I/O error or out of memory
    /// mid-read): a bookmark whose read transaction is gone cannot read its commit, and says so.
    /// The test ends it the way SQLite does, with the transaction's handle left in autocommit.
    @Test func aBookmarkWhoseReadTransactionSQLiteEndedIsLost() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            try Self.write(writer, "a")
            try ui.beginLongLivedReadTransaction()
            try Self.write(writer, "b")
            // Inside the read that sees it happen, the next use throws.
            let inside = expectError(.bookmarkLost) {
                try ui.read { txn in
                    try txn.core.handle().execute("ROLLBACK")
                    return try txn.count(inCollection: "c")
                }
            }
            #expect(inside?.message.contains("connection 'ui'") == true, "\(String(describing: inside))")
            #expect(!ui.isInLongLivedReadTransaction)
            // Told once; the connection reads the newest commit afterwards.
            #expect(try ui.read { try $0.count(inCollection: "c") } == 2)
            #expect(try ui.beginLongLivedReadTransaction().map(\.commit) == [2])

            // Found by the next read, when it ended between reads.
            try Self.write(writer, "c")
            try ui.read { txn in try txn.core.handle().execute("ROLLBACK") }
            expectError(.bookmarkLost) { try ui.read { try $0.count(inCollection: "c") } }
            #expect(!ui.isInLongLivedReadTransaction)
            #expect(try ui.read { try $0.count(inCollection: "c") } == 3)
            #expect(try ui.beginLongLivedReadTransaction().map(\.commit) == [3])
        }
    }

    @Test func aForeignCounterJumpIsOneChangeset() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            try Self.write(writer, "a")
            try ui.beginLongLivedReadTransaction()
            let logBefore = db.commitLogCount
            // A foreign client that writes a history row of unknown keys a million commits on
            // (the counter is the newest history row).
            _ = try sqlite3(
                db.path,
                "INSERT INTO snapshotdb_history(number, kind, date, token) "
                    + "SELECT max(number) + 1000000, 3, 0, 0 FROM snapshotdb_history;")
            let changes = try ui.beginLongLivedReadTransaction()
            #expect(changes.count == 1)
            #expect(changes.first?.commits == 2...1_000_001)
            #expect(changes.first?.isExternal == true)
            #expect(db.latestCommit == 1_000_001)
            #expect(db.commitLogCount == logBefore + 1)
            try Self.write(writer, "b")
            #expect(try ui.beginLongLivedReadTransaction().map(\.commit) == [1_000_002])
        }
    }

    /// Timeline: python3 inserts a value (a foreign write, unsealed), then holds SQLite's write
    /// lock | the bookmark advances without waiting, reading the write unsealed, and reports it
    /// as external | python3 releases | the queued seal commits it with a number of its own.
    @Test func readersNeverWaitToSealForeignWrites() async throws {
        var configuration = Configuration()
        configuration.busyTimeout = .seconds(30)
        try await withTemporaryDatabase(configuration: configuration) { db in
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            try Self.write(writer, "a")
            try ui.beginLongLivedReadTransaction()
            #expect(try await ui.read { ($0.commit, $0.hasUnnumberedForeignWrites) } == (1, false))
            let commits = db.changes()
            let child = try SQLiteChild(
                path: db.path,
                statements: [
                    "INSERT INTO snapshotdb_values(collection, key, data) VALUES ('c', 'foreign', x'7B227469746C65223A2266227D')",
                    "BEGIN IMMEDIATE",
                ])
            let clock = ContinuousClock()
            let start = clock.now
            let changes = try ui.beginLongLivedReadTransaction()
            #expect(clock.now - start < .seconds(10), "the advance waited for the foreign writer")
            #expect(changes.count == 1)
            #expect(changes.first?.isExternal == true)
            // Under the bookmark's commit, which the first bookmark already saw: the writes
            // have no number of their own yet, and the transactions say so.
            #expect(changes.first?.commit == 1)
            #expect(changes.hasChange(forKey: "foreign", inCollection: "c"))
            #expect(try await ui.read { try $0.hasValue(forKey: "foreign", inCollection: "c") })
            #expect(try await ui.read { ($0.commit, $0.hasUnnumberedForeignWrites) } == (1, true))
            let plain = db.newConnection(name: "plain")
            #expect(try await plain.read { ($0.commit, $0.hasUnnumberedForeignWrites) } == (1, true))
            try child.release()
            // The seal queued by the reader gives the foreign write its number (a guard of a
            // minute fails the test rather than hang it, should the seal never come).
            let sealed =
                await withinTimeLimit { () -> Changeset? in
                    for await changeset in commits where changeset.commit >= 2 { return changeset }
                    return nil
                } ?? nil
            #expect(sealed?.commit == 2)
            let next = try ui.beginLongLivedReadTransaction()
            #expect(next.map(\.commit) == [2])
            #expect(try await ui.read { ($0.commit, $0.hasUnnumberedForeignWrites) } == (2, false))
            #expect(try await plain.read { ($0.commit, $0.hasUnnumberedForeignWrites) } == (2, false))
            try ui.endLongLivedReadTransaction()
            #expect(try await ui.read { $0.hasUnnumberedForeignWrites } == false)
            // Sealed, the write has its exact keys (noted by the schema's triggers).
            #expect(next.first?.isExternal == false)
            #expect(next.first?.setKeys == ["c": ["foreign"]])
            #expect(next.first?.hasChange(forKey: "other", inCollection: "c") == false)
        }
    }

    @Test func settingNilRemovesTheKey() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            try Self.write(writer, "a")
            try ui.beginLongLivedReadTransaction()
            try writer.readWrite { txn in
                let none: Item? = nil
                try txn.set(none, forKey: "a", inCollection: "c")
            }
            let changes = try ui.beginLongLivedReadTransaction()
            #expect(changes.first?.removedKeys["c"] == ["a"])
            #expect(try ui.read { try $0.data(forKey: "a", inCollection: "c") } == nil)
        }
    }

    @Test func writingIntoTheCollectionBeingEnumeratedIsMisuse() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                for key in ["a", "b", "c"] { try txn.set(Item(title: key), forKey: key, inCollection: "c") }
            }
            var visited: [String] = []
            try writer.readWrite { txn in
                try txn.enumerate(inCollection: "c", as: Item.self) { key, _, _ in
                    visited.append(key)
                    expectError(.misuse) {
                        try txn.set(Item(title: "new"), forKey: key + "x", inCollection: "c")
                    }
                    expectError(.misuse) { try txn.removeValue(forKey: key, inCollection: "c") }
                    expectError(.misuse) { try txn.removeAllCollections() }
                    // Other collections may be written.
                    try txn.set(Item(title: key), forKey: key, inCollection: "other")
                }
                // Once the enumeration ended, the collection may be written again.
                try txn.set(Item(title: "after"), forKey: "after", inCollection: "c")
            }
            #expect(visited == ["a", "b", "c"])
            #expect(try writer.read { try $0.keys(inCollection: "c") } == ["a", "after", "b", "c"])
        }
    }

    @Test func codecErrorsKeepTheirCause() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { try $0.setData(Data("not json".utf8), forKey: "k", inCollection: "c") }
            let error = expectError(.decodingFailed) {
                try writer.read { try $0.value(forKey: "k", inCollection: "c", as: Item.self) }
            }
            let causeIsDecoding = error?.cause.map { $0 is DecodingError } ?? false
            #expect(causeIsDecoding)
        }
    }

    @Test func aChangesetIsDatedWhenItIsPublished() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            var closureEnded = Date.distantPast
            try writer.readWrite { txn in
                try txn.set(Item(title: "a"), forKey: "a", inCollection: "c")
                closureEnded = Date()
            }
            let published = Date()
            let changeset = try #require(try ui.beginLongLivedReadTransaction().first)
            #expect(changeset.date >= closureEnded && changeset.date <= published)
        }
    }
}

/// The checkpointer's WAL bookkeeping, without SQLite.
@Suite("WAL bookkeeping")
struct WALProgressTests {
    @Test func commitsGrowTheWALUntilACheckpointIsDue() {
        var wal = WALProgress(threshold: 10)
        #expect(wal.recordCommit(1, frames: WALCommitFrames(endFrame: 4, generation: 7)) == .init())
        let due = wal.recordCommit(2, frames: WALCommitFrames(endFrame: 11, generation: 7))
        #expect(due == .init(restarted: false, checkpointDue: true))
        #expect(wal.walFrames == 11)
        #expect(wal.pinnedFrames(bySnapshot: 1, latest: 2) == 7)
        #expect(wal.pinnedFrames(bySnapshot: 2, latest: 2) == 0)
    }

    @Test func newSaltsMeanTheWALRestarted() {
        var wal = WALProgress(threshold: 10)
        _ = wal.recordCommit(1, frames: WALCommitFrames(endFrame: 4, generation: 7))
        // A commit larger than the whole previous WAL: only the salts tell it restarted.
        let outcome = wal.recordCommit(2, frames: WALCommitFrames(endFrame: 9, generation: 8))
        #expect(outcome.restarted)
        #expect(wal.generationCount == 1)
        #expect(
            wal.pinnedFrames(bySnapshot: 1, latest: 2) == 9, "a snapshot from before the restart pins it all")
        // Without salts, a WAL that shrank restarted.
        let shrunk = wal.recordCommit(3, frames: WALCommitFrames(endFrame: 2, generation: nil))
        #expect(shrunk.restarted)
    }

    @Test func aCheckpointOfAnOlderGenerationIsIgnored() {
        var wal = WALProgress(threshold: 10)
        _ = wal.recordCommit(1, frames: WALCommitFrames(endFrame: 12, generation: 7))
        let generation = wal.generationCount
        _ = wal.recordCommit(2, frames: WALCommitFrames(endFrame: 3, generation: 8))
        wal.absorb(
            CheckpointResult(mode: .passive, walFrames: 12, checkpointedFrames: 12, isComplete: true),
            generationBefore: generation)
        #expect(wal.walFrames == 3)
        #expect(wal.checkpointedFrames == 0)
        wal.absorb(
            CheckpointResult(mode: .passive, walFrames: 3, checkpointedFrames: 3, isComplete: true),
            generationBefore: wal.generationCount)
        #expect(wal.checkpointedFrames == 3)
        #expect(wal.nextCheckpointFrames == 13)
    }

    @Test func theLargestThresholdNeverMakesACheckpointDue() {
        var wal = WALProgress(threshold: .max)
        wal.start(latestCommit: 3, frames: 40, checkpointed: 10, generation: 7)
        #expect(wal.nextCheckpointFrames == .max)
        #expect(!wal.recordCommit(4, frames: WALCommitFrames(endFrame: 50, generation: 7)).checkpointDue)
        wal.absorb(
            CheckpointResult(mode: .passive, walFrames: 50, checkpointedFrames: 50, isComplete: true),
            generationBefore: wal.generationCount)
        #expect(wal.nextCheckpointFrames == .max)
    }

    /// Commits of other processes arrive from the headers of the snapshots that read them, in
    /// any order with this process's own: each is taken once, and only when newer than every
    /// commit taken.
    @Test func commitsSeenInSnapshotsMoveTheWALOnlyForward() {
        var wal = WALProgress(threshold: 10)
        wal.start(latestCommit: 3, frames: 4, checkpointed: 0, generation: 7)
        // Commits 4 to 6 by another process, seen at 6: the bookmark at 3 pins what they wrote.
        #expect(wal.recordSnapshot(6, frames: WALCommitFrames(endFrame: 9, generation: 7)) == .init())
        #expect(wal.walFrames == 9)
        #expect(wal.pinnedFrames(bySnapshot: 3, latest: 6) == 5)
        #expect(wal.pinnedFrames(bySnapshot: 6, latest: 6) == 0)
        // A slower reader's snapshot at 5, older, with the same generation: ignored.
        #expect(wal.recordSnapshot(5, frames: WALCommitFrames(endFrame: 7, generation: 7)) == .init())
        #expect(wal.walFrames == 9)
        #expect(wal.pinnedFrames(bySnapshot: 5, latest: 6) == 5, "5 is not mapped: it pins from 3's end")
        // This process's own commit 6, reported after a reader saw it: nothing new; it is still
        // this process's newest commit.
        #expect(wal.recordCommit(6, frames: WALCommitFrames(endFrame: 9, generation: 7)) == .init())
        #expect(wal.lastLocalCommit == 6)
        // Past the threshold: due, whoever wrote it.
        let due = wal.recordSnapshot(8, frames: WALCommitFrames(endFrame: 15, generation: 7))
        #expect(due == .init(restarted: false, checkpointDue: true))
        // Another process restarted the WAL: every snapshot before the seen commit pins all of it.
        let restarted = wal.recordSnapshot(9, frames: WALCommitFrames(endFrame: 2, generation: 8))
        #expect(restarted.restarted)
        #expect(wal.walFrames == 2)
        #expect(wal.pinnedFrames(bySnapshot: 3, latest: 9) == 2)
        // A snapshot of the old generation seen late changes nothing.
        #expect(wal.recordSnapshot(8, frames: WALCommitFrames(endFrame: 15, generation: 7)) == .init())
        #expect(wal.generationCount == 1)
    }

    /// This process's reset (a RESTART) leaves the WAL-index header as it was until the next
    /// write: another process's commit first seen then carries the retired salts and the old
    /// frame count, and ends at frame 0 of the WAL to come, not at that count.
    @Test func aCommitSeenAfterAResetUnderTheRetiredSaltsIsInTheDatabaseFile() {
        var wal = WALProgress(threshold: 10)
        wal.start(latestCommit: 3, frames: 4, checkpointed: 0, generation: 7)
        _ = wal.recordCommit(5, frames: WALCommitFrames(endFrame: 10, generation: 7))
        // Commits 6 to 8 of another process, not seen yet, were copied back by the reset too.
        wal.absorbReset(latestCommit: 5, frames: 20, generationBefore: wal.generationCount)
        #expect(wal.recordSnapshot(8, frames: WALCommitFrames(endFrame: 20, generation: 7)) == .init())
        #expect(wal.walFrames == 0)
        #expect(wal.pinnedFrames(bySnapshot: 5, latest: 8) == 0)
        // The next commit writes the new WAL: no restart beyond the reset already counted.
        let generations = wal.generationCount
        #expect(wal.recordSnapshot(9, frames: WALCommitFrames(endFrame: 2, generation: 8)) == .init())
        #expect(wal.generationCount == generations)
        #expect(wal.walFrames == 2)
        #expect(wal.pinnedFrames(bySnapshot: 8, latest: 9) == 2)
    }

    /// SQLite skips the restart while a reader holds a read mark: the writer after this
    /// process's reset may append to the retired WAL instead. Its commit is taken in under that
    /// WAL, after the frames the reset copied back; the monitor does not stay at 0 frames.
    @Test func aWALNotRestartedAfterTheResetGoesOn() {
        var wal = WALProgress(threshold: 10)
        wal.start(latestCommit: 3, frames: 4, checkpointed: 0, generation: 7)
        _ = wal.recordCommit(5, frames: WALCommitFrames(endFrame: 10, generation: 7))
        wal.absorbReset(latestCommit: 5, frames: 20, generationBefore: wal.generationCount)
        _ = wal.recordSnapshot(8, frames: WALCommitFrames(endFrame: 20, generation: 7))
        let generations = wal.generationCount
        let outcome = wal.recordSnapshot(9, frames: WALCommitFrames(endFrame: 23, generation: 7))
        #expect(!outcome.restarted)
        #expect(wal.generationCount == generations)
        #expect(wal.generation == 7)
        #expect(wal.walFrames == 23)
        #expect(wal.checkpointedFrames == 20)
        #expect(wal.pinnedFrames(bySnapshot: 8, latest: 9) == 3)
        #expect(wal.pinnedFrames(bySnapshot: 5, latest: 9) == 3, "everything before was copied back")
        // And on: later commits grow it.
        _ = wal.recordCommit(10, frames: WALCommitFrames(endFrame: 40, generation: 7))
        #expect(wal.pinnedFrames(bySnapshot: 9, latest: 10) == 17)
    }

    /// A checkpoint between this process's reset and the next write sees the retired WAL: it
    /// says nothing of the WAL to come.
    @Test func aCheckpointOfTheRetiredWALIsIgnored() {
        var wal = WALProgress(threshold: 10)
        _ = wal.recordCommit(5, frames: WALCommitFrames(endFrame: 20, generation: 7))
        wal.absorbReset(latestCommit: 5, frames: 20, generationBefore: wal.generationCount)
        wal.absorb(
            CheckpointResult(mode: .passive, walFrames: 20, checkpointedFrames: 20, isComplete: true),
            generationBefore: wal.generationCount)
        #expect(wal.walFrames == 0)
        let generations = wal.generationCount
        #expect(!wal.recordCommit(6, frames: WALCommitFrames(endFrame: 2, generation: 8)).restarted)
        #expect(wal.generationCount == generations)
        #expect(wal.pinnedFrames(bySnapshot: 5, latest: 6) == 2)
    }

    /// `vacuum()` reports its frames under the newest commit: taken in, though mapped already.
    @Test func aLocalReportUnderTheNewestCommitIsTakenAgain() {
        var wal = WALProgress(threshold: 10)
        wal.start(latestCommit: 3, frames: 4, checkpointed: 0, generation: 7)
        #expect(wal.recordSnapshot(6, frames: WALCommitFrames(endFrame: 8, generation: 7)) == .init())
        let vacuum = wal.recordCommit(6, frames: WALCommitFrames(endFrame: 30, generation: 7))
        #expect(vacuum.checkpointDue)
        #expect(wal.walFrames == 30)
        #expect(wal.pinnedFrames(bySnapshot: 6, latest: 7) == 22, "a reader from before the vacuum")
        // A snapshot's header under that commit is not taken again.
        #expect(wal.recordSnapshot(6, frames: WALCommitFrames(endFrame: 8, generation: 6)) == .init())
        #expect(wal.generationCount == 0)
    }

    /// A checkpoint that saw more of the WAL than the commits taken so far: a commit seen later
    /// that ends before that never makes the WAL look smaller.
    @Test func aCheckpointSeesFramesOfCommitsNotSeenYet() {
        var wal = WALProgress(threshold: 10)
        wal.start(latestCommit: 3, frames: 4, checkpointed: 0, generation: 7)
        wal.absorb(
            CheckpointResult(mode: .passive, walFrames: 20, checkpointedFrames: 20, isComplete: true),
            generationBefore: wal.generationCount)
        #expect(wal.recordSnapshot(5, frames: WALCommitFrames(endFrame: 12, generation: 7)) == .init())
        #expect(wal.walFrames == 20)
        #expect(wal.pinnedFrames(bySnapshot: 5, latest: 7) == 8)
    }

    @Test func aResetStartsTheWALOver() {
        var wal = WALProgress(threshold: 10)
        _ = wal.recordCommit(5, frames: WALCommitFrames(endFrame: 20, generation: 7))
        wal.absorbReset(latestCommit: 5, frames: 20, generationBefore: wal.generationCount)
        #expect(wal.walFrames == 0)
        #expect(wal.generation == nil)
        let next = wal.recordCommit(6, frames: WALCommitFrames(endFrame: 2, generation: 9))
        #expect(!next.restarted, "the reset was already counted")
        #expect(wal.pinnedFrames(bySnapshot: 5, latest: 6) == 2)
    }
}

extension WriterContractTests {
    /// An unregistration or registration whose commit fails leaves the registry as it was, put
    /// back under the writer lock: the next writes keep the extension up to date, and it is not
    /// marked stale for want of a writer.
    @Test func aRegistrationChangeWhoseCommitFailsLeavesTheRegistryAsItWas() throws {
        try withTemporaryDatabase { db throws in
            try db.register(ViewTests.byTitle)
            let writer = db.newConnection(name: "writer")
            try writer.readWrite {
                try $0.set(
                    Note(title: "a", folder: "inbox", archived: false), forKey: "n1", inCollection: "notes")
            }
            db.faults.arm(.commit)
            expectError(.ioError) { try db.unregister("byTitle") }
            #expect(db.registeredExtensions == ["byTitle"])
            db.faults.arm(.commit)
            let other = View<Note>(
                name: "byTitle", version: "2", collections: ["notes"], group: { _, _, note in note.folder },
                areInIncreasingOrder: { $0.title > $1.title })
            expectError(.ioError) { try db.register(other) }
            #expect(db.registeredExtensions == ["byTitle"])
            try writer.readWrite {
                try $0.set(
                    Note(title: "b", folder: "inbox", archived: false), forKey: "n2", inCollection: "notes")
            }
            try writer.read { txn throws in
                let view = try txn.view(named: "byTitle")
                #expect(view.items(inGroup: "inbox").map(\.key) == ["n1", "n2"])
                #expect(ViewTests.rows(view) == (try ViewTests.expectedRows(txn)))
            }
        }
    }
}
