import Foundation
import SnapshotDBLocking
import SnapshotDBTestSupport
import Testing

import struct Synchronization.Atomic

@testable import SnapshotDB

/// Named durable consumers and the history's retention bound.
@Suite("Consumers and retention", .hangLimit)
struct ConsumerTests {
    static let childKey = "SNAPSHOTDB_CONSUMER_CHILD"

    /// Applies one changeset the way the test's "indexer" does: a marker per commit in the
    /// collection "applied", and a failure recorded if a marker was already there (a commit
    /// applied twice).
    static func apply(_ changeset: Changeset, in txn: ReadWriteTransaction) throws {
        // The indexer's own commits are changesets too; it skips them.
        guard changeset.changedCollections.contains("source") else { return }
        let key = "\(changeset.commit)"
        if try txn.hasValue(forKey: key, inCollection: "applied") {
            try txn.set("twice", forKey: key, inCollection: "doubles")
        }
        try txn.set(changeset.setKeys["source"]?.sorted() ?? [], forKey: key, inCollection: "applied")
    }

    /// The child: takes one batch, applies it, says so, and waits inside the transaction for
    /// the parent, which kills it there, before the acknowledgement commits.
    @Test(.enabled(if: ProcessInfo.processInfo.environment[childKey] != nil))
    func childConsumerKilledBeforeItsAcknowledgementCommits() async throws {
        let path = try #require(ProcessInfo.processInfo.environment[Self.childKey])
        let db = try Database(path: path)
        let indexer = try db.consumer(named: "indexer")
        let writer = db.newConnection(name: "indexer-writer")
        var batches = indexer.batches(on: db.newConnection(name: "indexer-reader"), limit: 5)
            .makeAsyncIterator()
        let batch = try #require(try await batches.next())
        try Self.applyAndWait(batch, indexer: indexer, writer: writer)
    }

    static func applyAndWait(_ batch: ConsumerBatch, indexer: Consumer, writer: Connection) throws {
        try writer.readWrite { txn in
            for changeset in batch.changesets { try Self.apply(changeset, in: txn) }
            try indexer.acknowledge(through: batch.commit, in: txn)
            FileHandle.standardOutput.write(Data("INSIDE \(batch.commit)\n".utf8))
            _ = Swift.readLine()  // killed here
        }
    }

    /// Timeline: 30 source commits | a child consumer applies a batch and is SIGKILLed inside
    /// the transaction that also acknowledges it | a consumer of this process resumes from the
    /// durable position: every source commit is applied exactly once.
    @Test func aConsumerKilledBetweenItsWritesAndItsAcknowledgementMissesNothingAndRepeatsNothing()
        async throws
    {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("consumer.sqlite").path
            do {
                let db = try Database(path: path)
                _ = try db.consumer(named: "indexer")
                let source = db.newConnection(name: "source")
                for index in 0..<30 {
                    try await source.readWrite {
                        try $0.set(index, forKey: "k\(index)", inCollection: "source")
                    }
                }
                try db.close()
            }
            let child = try startChildTest(
                "childConsumerKilledBeforeItsAcknowledgementCommits", environmentKey: Self.childKey,
                value: path)
            let line = try child.readLine()
            #expect(line.hasPrefix("INSIDE "), "child said: \(line) \(child.standardError)")
            child.kill()

            let db = try Database(path: path)
            let indexer = try db.consumer(named: "indexer")
            let reader = db.newConnection(name: "reader")
            #expect(
                try await reader.read { try indexer.position(in: $0) } == 0,
                "the killed acknowledgement was lost")
            #expect(try await reader.read { try $0.count(inCollection: "applied") } == 0)
            let writer = db.newConnection(name: "writer")
            var applied = 0
            for try await batch in indexer.batches(on: reader, limit: 7) {
                try await writer.readWrite { txn in
                    for changeset in batch.changesets { try Self.apply(changeset, in: txn) }
                    try indexer.acknowledge(batch, in: txn)
                }
                applied += batch.changesets.count
                // The indexer's own commits are changesets too: stop at the source's last one.
                if batch.changesets.contains(where: { $0.commit == 30 }) { break }
            }
            let markers = try await reader.read { txn in
                try txn.keys(inCollection: "applied").compactMap(UInt64.init).sorted()
            }
            #expect(markers == Array(1...30))
            #expect(try await reader.read { try $0.count(inCollection: "doubles") } == 0)
            #expect(try await reader.read { try indexer.position(in: $0) } >= 30)
        }
    }

    /// An acknowledgement alone commits (the position survives) but is not a commit of the
    /// database; acknowledging the unseen or going back is misuse.
    /// A process that resumes a consumer asks for an existing one: a misspelled name is an
    /// error naming the consumers the file has, not a new consumer that skips the backlog.
    @Test func anExistingConsumerIsFoundByItsNameAndAMisspelledOneIsAnError() throws {
        try withTemporaryDatabase { db throws in
            let none = expectError(.unknownConsumer) { try db.existingConsumer(named: "indexer") }
            #expect(none?.message.contains("it has: none") == true, "\(String(describing: none))")
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { try $0.set(1, forKey: "a", inCollection: "c") }
            _ = try db.consumer(named: "indexer")
            _ = try db.consumer(named: "mailer")
            try writer.readWrite { try $0.set(2, forKey: "b", inCollection: "c") }
            #expect(try db.consumerNames() == ["indexer", "mailer"])
            let before = db.latestCommit
            let typo = expectError(.unknownConsumer) { try db.existingConsumer(named: "indexr") }
            #expect(typo?.message.contains("'indexer', 'mailer'") == true, "\(String(describing: typo))")
            // Nothing was registered by the failed lookup, and nothing committed.
            #expect(try db.consumerNames() == ["indexer", "mailer"])
            #expect(db.latestCommit == before)
            // The one found resumes where the file has it: its backlog is the commit after it.
            let indexer = try db.existingConsumer(named: "indexer")
            let pending = try writer.read { try indexer.pending(in: $0) }
            #expect(pending.map(\.commit) == [before])
        }
    }

    @Test func anAcknowledgementAloneIsDurableButIsNoCommit() throws {
        try withTemporaryDatabase { db throws in
            let consumer = try db.consumer(named: "uploader")
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { try $0.set(1, forKey: "a", inCollection: "c") }
            try writer.readWrite { try $0.set(2, forKey: "b", inCollection: "c") }
            #expect(try writer.read { try consumer.pending(in: $0) }.map(\.commit) == [1, 2])
            #expect(try writer.read { try consumer.pending(in: $0, limit: 1) }.map(\.commit) == [1])
            #expect(try writer.read { try consumer.pending(in: $0, limit: 0) }.isEmpty)
            expectError(.misuse) { try writer.read { try consumer.pending(in: $0, limit: -1) } }
            let logged = db.commitLogCount
            try writer.readWrite { try consumer.acknowledge(through: 1, in: $0) }
            #expect(db.latestCommit == 2)
            #expect(db.commitLogCount == logged, "the acknowledgement published nothing")
            #expect(
                try sqlite3(db.path, "SELECT position FROM snapshotdb_consumers WHERE name = 'uploader'")
                    == "1\n")
            #expect(try writer.read { try consumer.pending(in: $0) }.map(\.commit) == [2])
            expectError(.misuse) { try writer.readWrite { try consumer.acknowledge(through: 3, in: $0) } }
            expectError(.misuse) { try writer.readWrite { try consumer.acknowledge(through: 0, in: $0) } }
            // A rolled-back transaction acknowledges nothing.
            try writer.readWrite { txn in
                try consumer.acknowledge(through: 2, in: txn)
                txn.rollback()
            }
            #expect(try writer.read { try consumer.position(in: $0) } == 1)
            try writer.readWrite { try $0.set(3, forKey: "c", inCollection: "c") }
            #expect(db.latestCommit == 3)
        }
    }

    /// Past the retention bound, history is purged in steps; a consumer behind it is expired in
    /// the purge's own transaction and says so, while one within it keeps its place; a position
    /// past it is `historyUnavailable` naming the range.
    @Test func thePurgeExpiresALaggingConsumerAndKeepsTheOthersPlace() throws {
        var configuration = Configuration()
        configuration.historyRetention = HistoryRetention(commits: 20)
        try withTemporaryDatabase(configuration: configuration) { db throws in
            let lagging = try db.consumer(named: "lagging")
            let writer = db.newConnection(name: "writer")
            for index in 0..<100 {
                try writer.readWrite { try $0.set(index, forKey: "k\(index % 7)", inCollection: "c") }
            }
            let current = try db.consumer(named: "current")  // registered at 100
            db.historyPurger.purgeNow(db)
            let floor = try writer.read { txn in try History.floor(on: try txn.core.handle()) }
            #expect(floor == 80)
            #expect(try sqlite3(db.path, "SELECT count(*) FROM snapshotdb_history") == "21\n")
            expectError(.consumerExpired) { try writer.read { try lagging.pending(in: $0) } }
            #expect(try writer.read { try current.pending(in: $0) } == [])
            let error = expectError(.historyUnavailable) { try writer.read { try $0.changes(after: 50) } }
            #expect(error?.message.contains("51...80") == true, "\(String(describing: error))")
            #expect(try writer.read { try $0.changes(after: 80) }.count == 20)
            // Reset after a rescan: the consumer goes on from the newest commit.
            try writer.readWrite { try lagging.reset(in: $0) }
            #expect(try writer.read { try lagging.position(in: $0) } == 100)
            // The purge also runs by itself, off the commit path (asked for every 2 commits with
            // this bound): once the checkpoint queue ran what the commits queued, the history is
            // back within a request's reach of the bound, with no explicit purge.
            let stepsBefore = db.historyPurger.steps.load(ordering: .relaxed)
            for index in 0..<60 {
                try writer.readWrite { try $0.set(index, forKey: "k\(index % 7)", inCollection: "c") }
            }
            while db.historyPurger.isQueued { db.checkpointer.queue.sync {} }
            #expect(db.historyPurger.steps.load(ordering: .relaxed) > stepsBefore)
            let rows = try #require(
                Int(try sqlite3(db.path, "SELECT count(*) FROM snapshotdb_history").dropLast()))
            #expect(rows >= 21 && rows <= 23, "\(rows) rows")
        }
    }
}

extension ConsumerTests {
    /// A smaller bound at the next open is applied by `purgeHistory()` at once, and says how
    /// many rows it removed.
    @Test func purgeHistoryAppliesANewBoundAtOnce() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("purge.sqlite").path
            do {
                let db = try Database(path: path)
                let writer = db.newConnection(name: "writer")
                for index in 0..<300 {
                    try writer.readWrite { try $0.set(index, forKey: "k", inCollection: "c") }
                }
                #expect(try db.purgeHistory() == 0)
                try db.close()
            }
            var configuration = Configuration()
            configuration.historyRetention = HistoryRetention(commits: 100)
            let db = try Database(path: path, configuration: configuration)
            let purged = try db.purgeHistory()
            #expect(purged == 200)
            #expect(
                try sqlite3(path, "SELECT min(number), max(number) FROM snapshotdb_history") == "200|300\n")
            try db.close()
            expectError(.databaseClosed) { try db.purgeHistory() }
        }
    }
}

extension ConsumerTests {
    /// A bookmark of this process is served from memory: the history purged under it does not
    /// make its changesets external; a position taken at its commit is past the bound.
    @Test func aBookmarkOfThisProcessNeverSeesThePurge() throws {
        var configuration = Configuration()
        configuration.historyRetention = HistoryRetention(commits: 10)
        try withTemporaryDatabase(configuration: configuration) { db throws in
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { try $0.set(0, forKey: "k0", inCollection: "c") }
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            let position = try ui.read { try $0.position() }
            for index in 1...50 {
                try writer.readWrite { try $0.set(index, forKey: "k\(index)", inCollection: "c") }
            }
            _ = try db.purgeHistory()
            let floor = try writer.read { txn in try History.floor(on: try txn.core.handle()) }
            #expect(floor > 2, "the history after commit \(floor) only")
            expectError(.historyUnavailable) { try writer.read { try $0.changes(after: position) } }
            let changes = try ui.beginLongLivedReadTransaction()
            #expect(changes.map(\.commit) == Array(2...51))
            #expect(changes.allSatisfy { !$0.isExternal })
            #expect(changes.last?.setKeys["c"] == ["k50"])
        }
    }
}

extension ConsumerTests {
    /// Two runners of one consumer read the same batch: only the first applies it; the
    /// second's acknowledgement throws `consumerConflict` and its writes roll back with it.
    /// One runner acknowledging two batches of its sequence at once is not a conflict.
    @Test func twoRunnersOfOneConsumerApplyABatchOnce() async throws {
        try await withTemporaryDatabase { db async throws in
            let indexer = try db.consumer(named: "indexer")
            let source = db.newConnection(name: "source")
            for index in 0..<6 {
                try await source.readWrite { try $0.set(index, forKey: "k\(index)", inCollection: "source") }
            }
            var first = indexer.batches(on: db.newConnection(name: "first"), limit: 3).makeAsyncIterator()
            var second = indexer.batches(on: db.newConnection(name: "second"), limit: 3).makeAsyncIterator()
            let firstBatch = try #require(try await first.next())
            let secondBatch = try #require(try await second.next())
            #expect(firstBatch.changesets.map(\.commit) == secondBatch.changesets.map(\.commit))
            #expect(firstBatch.after == secondBatch.after)
            let writer = db.newConnection(name: "writer")
            try await writer.readWrite { txn in
                for changeset in firstBatch.changesets { try Self.apply(changeset, in: txn) }
                try indexer.acknowledge(firstBatch, in: txn)
            }
            do {
                try await writer.readWrite { txn in
                    for changeset in secondBatch.changesets { try Self.apply(changeset, in: txn) }
                    try indexer.acknowledge(secondBatch, in: txn)
                }
                Issue.record("the second runner's acknowledgement committed")
            } catch let error as DatabaseError {
                #expect(error.code == .consumerConflict, "\(error)")
                #expect(error.message.contains("another runner"), "\(error)")
            }
            #expect(try await writer.read { try $0.count(inCollection: "doubles") } == 0)
            #expect(try await writer.read { try $0.count(inCollection: "applied") } == 3)
            // Caught, the conflict still fails the transaction at its end.
            do {
                try await writer.readWrite { txn in
                    for changeset in secondBatch.changesets { try Self.apply(changeset, in: txn) }
                    try? indexer.acknowledge(secondBatch, in: txn)
                }
                Issue.record("a transaction that caught the conflict committed")
            } catch let error as DatabaseError {
                #expect(error.code == .consumerConflict, "\(error)")
            }
            #expect(try await writer.read { try $0.count(inCollection: "doubles") } == 0)

            // The second runner's next batch starts where it left off, which the first runner's
            // acknowledgement passed: refused too. The first runner goes on with two batches
            // acknowledged at once.
            let secondNext = try #require(try await second.next())
            let firstNext = try #require(try await first.next())
            let firstThird = try #require(try await first.next())
            try await writer.readWrite { txn in
                for changeset in firstNext.changesets + firstThird.changesets {
                    try Self.apply(changeset, in: txn)
                }
                try indexer.acknowledge(firstThird, in: txn)
            }
            #expect(try await writer.read { try indexer.position(in: $0) } == firstThird.commit)
            do {
                try await writer.readWrite { txn in try indexer.acknowledge(secondNext, in: txn) }
                Issue.record("a batch behind the position was acknowledged")
            } catch let error as DatabaseError {
                #expect(error.code == .consumerConflict, "\(error)")
            }
            #expect(try await writer.read { try $0.count(inCollection: "doubles") } == 0)
        }
    }
}

extension ConsumerTests {
    /// A history row a foreign client numbered far below zero is purged like any old row, and the
    /// bound's arithmetic does not overflow on it (it trapped, at every process's first purge).
    @Test func aForeignRowNumberedBelowZeroIsPurgedWithoutOverflow() throws {
        var configuration = Configuration()
        configuration.historyRetention = HistoryRetention(commits: 10)
        try withTemporaryDatabase(configuration: configuration) { db throws in
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { try $0.set(0, forKey: "k", inCollection: "c") }
            _ = try sqlite3(
                db.path,
                "INSERT INTO snapshotdb_history(number, kind, date, token) VALUES (-9223372036854775808, 2, 0, 0)"
            )
            // Before any purge, the history reads as it did: the row is no commit.
            #expect(try writer.read { try $0.changes(after: 0) }.map(\.commit) == [1])
            for index in 1...30 {
                try writer.readWrite { try $0.set(index, forKey: "k", inCollection: "c") }
            }
            _ = try db.purgeHistory()
            #expect(
                try sqlite3(db.path, "SELECT min(number), max(number) FROM snapshotdb_history") == "21|31\n")
            #expect(db.latestCommit == 31)
        }
    }

    /// `purgeHistory()` reports a step that failed for a reason other than a busy writer; it
    /// returned 0 as if the history were within its bound.
    @Test func purgeHistoryThrowsTheErrorOfAFailedStep() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            for index in 0..<30 {
                try writer.readWrite { try $0.set(index, forKey: "k", inCollection: "c") }
            }
            try db.close()
            var configuration = Configuration()
            configuration.historyRetention = HistoryRetention(commits: 10)
            let reopened = try Database(path: db.path, configuration: configuration)
            // The first step fails as a full disk would: its error is thrown, nothing is purged.
            reopened.faults.arm(.purge)
            let error = expectError(.ioError) { try reopened.purgeHistory() }
            #expect(error?.message.contains("injected fault: purge") == true, "\(String(describing: error))")
            let rows = try sqlite3(db.path, "SELECT count(*) FROM snapshotdb_history")
            #expect(rows == "31\n", "\(rows)")
            #expect(try reopened.purgeHistory() == 20)
        }
    }
}

extension ConsumerTests {
    /// The age bound: rows older than `age` are purged (here, rows whose dates a foreign client
    /// moved eight days back), whatever the other bounds allow; the rows after them stay.
    @Test func theAgeBoundPurgesTheRowsOlderThanIt() throws {
        var configuration = Configuration()
        configuration.historyRetention = HistoryRetention(commits: 10_000, age: .seconds(7 * 24 * 3600))
        try withTemporaryDatabase(configuration: configuration) { db throws in
            let writer = db.newConnection(name: "writer")
            for index in 0..<100 {
                try writer.readWrite { try $0.set(index, forKey: "k\(index % 7)", inCollection: "c") }
            }
            #expect(try db.purgeHistory() == 0, "nothing is a week old yet")
            _ = try sqlite3(
                db.path, "UPDATE snapshotdb_history SET date = date - 8 * 86400 WHERE number <= 40")
            #expect(try db.purgeHistory() > 0)
            let error = expectError(.historyUnavailable) { try writer.read { try $0.changes(after: 39) } }
            #expect(error?.message.contains("after 40") == true, "\(String(describing: error))")
            #expect(try writer.read { try $0.changes(after: 40) }.map(\.commit) == Array(41...100))
        }
    }

    /// The bytes bound: the history keeps about `bytes` of rows (their `info` and `changes` plus
    /// 48 bytes each), the newest ones.
    @Test func theBytesBoundKeepsAboutThatManyBytesOfTheNewestRows() throws {
        var configuration = Configuration()
        configuration.historyRetention = HistoryRetention(commits: 10_000, bytes: 8_192)
        try withTemporaryDatabase(configuration: configuration) { db throws in
            let writer = db.newConnection(name: "writer")
            for index in 0..<100 {
                try writer.readWrite { txn in
                    try txn.set(index, forKey: "k\(index % 7)", inCollection: "c")
                    txn.info = ["note": String(repeating: "x", count: 400)]
                }
            }
            _ = try db.purgeHistory()
            let floor = try writer.read { txn in try History.floor(on: try txn.core.handle()) }
            let kept = try #require(
                Int(
                    try sqlite3(
                        db.path,
                        """
                        SELECT sum(coalesce(length(info), 0) + coalesce(length(changes), 0) + 48)
                        FROM snapshotdb_history WHERE number > \(floor)
                        """
                    ).dropLast()))
            #expect(floor > 50, "most of 100 rows of about 480 bytes are past 8 KiB")
            #expect(kept <= 8_192 && kept > 8_192 / 2, "\(kept) bytes kept after commit \(floor)")
            #expect(try writer.read { try $0.changes(after: floor) }.count == Int(100 - floor))
        }
    }
}

extension ConsumerTests {
    struct ApplyFailed: Error {}

    /// A batch whose transaction failed is given again by a new sequence, which starts from the
    /// consumer's acknowledged position; the failed sequence itself has moved past it.
    @Test func aNewSequenceGivesAgainTheBatchWhoseTransactionFailed() async throws {
        try await withTemporaryDatabase { db in
            let indexer = try db.consumer(named: "indexer")
            let source = db.newConnection(name: "source")
            for index in 0..<6 {
                try await source.readWrite { try $0.set(index, forKey: "k\(index)", inCollection: "source") }
            }
            let reader = db.newConnection(name: "indexer-reader")
            let writer = db.newConnection(name: "indexer-writer")
            var first = indexer.batches(on: reader, limit: 3).makeAsyncIterator()
            let failed = try #require(try await first.next())
            #expect(throws: ApplyFailed.self) {
                try writer.readWrite { txn in
                    try indexer.acknowledge(through: failed.commit, in: txn)
                    throw ApplyFailed()
                }
            }
            let moved = try #require(try await first.next())
            #expect(moved.changesets.first?.commit == failed.commit + 1, "the same sequence moved past it")

            var second = indexer.batches(on: reader, limit: 3).makeAsyncIterator()
            let again = try #require(try await second.next())
            #expect(again.changesets.map(\.commit) == failed.changesets.map(\.commit))
            try await writer.readWrite { try indexer.acknowledge(through: again.commit, in: $0) }
            #expect(try await second.next()?.changesets.map(\.commit) == moved.changesets.map(\.commit))
        }
    }
}

extension ConsumerTests {
    /// A consumer that will not run again is removed from the file; a reader of it then says its
    /// row is gone, and registering the name again starts it at the newest commit.
    @Test func aRemovedConsumerIsGoneAndCanStartAgain() throws {
        try withTemporaryDatabase { db throws in
            let old = try db.consumer(named: "old")
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { try $0.set(1, forKey: "k", inCollection: "c") }
            let commits = db.latestCommit
            #expect(try db.removeConsumer(named: "old"))
            #expect(try db.removeConsumer(named: "old") == false)
            #expect(db.latestCommit == commits, "a removal is no commit")
            #expect(
                try sqlite3(db.path, "SELECT count(*) FROM snapshotdb_consumers WHERE name = 'old'") == "0\n")
            let gone = expectError(.corrupt) { try writer.read { try old.position(in: $0) } }
            #expect(gone?.message.contains("is gone") == true, "\(String(describing: gone))")
            let again = try db.consumer(named: "old")
            #expect(try writer.read { try again.position(in: $0) } == commits)
        }
    }

    /// A consumer registered with `startingAfter:` sees the commits made before it existed, as far
    /// back as the history holds; one registered plainly starts at the newest commit; one the file
    /// has keeps its place.
    @Test func aConsumerCanStartAfterAnEarlierCommit() throws {
        var configuration = Configuration()
        configuration.historyRetention = HistoryRetention(commits: 10)
        try withTemporaryDatabase(configuration: configuration) { db throws in
            let writer = db.newConnection(name: "writer")
            for index in 0..<5 {
                try writer.readWrite { try $0.set(index, forKey: "k\(index)", inCollection: "c") }
            }
            let late = try db.consumer(named: "late")
            let outbox = try db.consumer(named: "outbox", startingAfter: 0)
            let reader = db.newConnection(name: "reader")
            #expect(try reader.read { try late.pending(in: $0) }.isEmpty)
            let pending = try reader.read { try outbox.pending(in: $0) }
            #expect(pending.map(\.commit) == Array(1...5))
            #expect(pending.map { $0.setKeys["c"] } == (0..<5).map { ["k\($0)"] })
            let middle = try db.consumer(named: "middle", startingAfter: 3)
            #expect(try reader.read { try middle.pending(in: $0) }.map(\.commit) == [4, 5])
            // Registered already: the place stays.
            try writer.readWrite { try outbox.acknowledge(through: 2, in: $0) }
            _ = try db.consumer(named: "outbox", startingAfter: 0)
            #expect(try reader.read { try outbox.position(in: $0) } == 2)

            let ahead = expectError(.misuse) { _ = try db.consumer(named: "ahead", startingAfter: 6) }
            #expect(ahead?.message.contains("the newest commit is 5") == true, "\(String(describing: ahead))")
            // Past the retention bound: the history keeps the newest 10 commits only.
            for index in 5..<20 {
                try writer.readWrite { try $0.set(index, forKey: "k\(index)", inCollection: "c") }
            }
            try db.removeConsumer(named: "outbox")
            try db.removeConsumer(named: "middle")
            try db.removeConsumer(named: "late")
            _ = try db.purgeHistory()
            let purged = expectError(.historyUnavailable) {
                _ = try db.consumer(named: "new", startingAfter: 9)
            }
            #expect(purged?.message.contains("after 10 only") == true, "\(String(describing: purged))")
            #expect(try sqlite3(db.path, "SELECT count(*) FROM snapshotdb_consumers") == "0\n")
            let recent = try db.consumer(named: "new", startingAfter: 15)
            #expect(try reader.read { try recent.pending(in: $0) }.map(\.commit) == Array(16...20))
        }
    }

    /// A start the purge has not reached yet but is past the retention bound is refused too: the
    /// next purge step would expire the consumer before it read anything.
    @Test func aConsumerCannotStartPastTheRetentionBoundBeforeThePurge() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("db.sqlite").path
            do {
                let db = try Database(path: path)
                let writer = db.newConnection(name: "writer")
                for index in 0..<20 {
                    try writer.readWrite { try $0.set(index, forKey: "k\(index)", inCollection: "c") }
                }
                try db.close()
            }
            var configuration = Configuration()
            configuration.historyRetention = HistoryRetention(commits: 10)
            let db = try Database(path: path, configuration: configuration)
            // Not purged yet:
            #expect(try sqlite3(path, "SELECT min(number) FROM snapshotdb_history") == "0\n")
            let early = expectError(.historyUnavailable) {
                _ = try db.consumer(named: "early", startingAfter: 9)
            }
            #expect(early?.message.contains("after 10 only") == true, "\(String(describing: early))")
            let kept = try db.consumer(named: "kept", startingAfter: 10)
            _ = try db.purgeHistory()
            #expect(try db.newConnection().read { try kept.pending(in: $0) }.map(\.commit) == Array(11...20))
            try db.close()
        }
    }

    /// The age bound counts too, beyond the rows the purge's next step weighs: a start whose
    /// first commit is older than the retention's age is refused (the purge would expire the
    /// consumer before it read anything), and one after it is taken.
    @Test func aConsumerCannotStartAtCommitsOlderThanTheAgeBound() throws {
        var configuration = Configuration()
        configuration.synchronous = .normal
        try withTemporaryDatabase(configuration: configuration) { db throws in
            let writer = db.newConnection(name: "writer")
            for index in 0..<1_100 {
                try writer.readWrite { try $0.set(index, forKey: "k\(index % 10)", inCollection: "c") }
            }
            try db.close()
            // The first 1,060 commits made long ago (dates grow with numbers, as the purge assumes).
            _ = try sqlite3(db.path, "UPDATE snapshotdb_history SET date = number WHERE number <= 1060")
            configuration.historyRetention = HistoryRetention(age: .seconds(24 * 3600))
            let aged = try Database(path: db.path, configuration: configuration)
            let old = expectError(.historyUnavailable) {
                _ = try aged.consumer(named: "old", startingAfter: 1_030)
            }
            #expect(old?.message.contains("commit 1031 is older than") == true, "\(String(describing: old))")
            let recent = try aged.consumer(named: "recent", startingAfter: 1_060)
            #expect(
                try aged.newConnection().read { try recent.pending(in: $0, limit: 1) }.map(\.commit) == [
                    1_061
                ])
            try aged.close()
        }
    }
}
