import Foundation
import SnapshotDB
import Testing

@Suite("Long-lived read transactions", .hangLimit)
struct LongLivedReadTests {
    @Test func bookmarkStaysPutAcrossCommitsThenJumpsThemAll() throws {
        try withTemporaryDatabase { db throws in
            let ui = db.newConnection(name: "ui")
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { try $0.set(Item(title: "v1"), forKey: "k", inCollection: "items") }

            // Timeline:  writer: c1 | ui bookmarks c1 | writer: c2 c3 c4 | ui still reads c1 | ui advances to c4
            #expect(try ui.beginLongLivedReadTransaction() == [])
            #expect(ui.isInLongLivedReadTransaction)
            #expect(
                try ui.read { try $0.value(forKey: "k", inCollection: "items", as: Item.self)?.title } == "v1"
            )
            for version in 2...4 {
                try writer.readWrite { txn in
                    try txn.set(Item(title: "v\(version)"), forKey: "k", inCollection: "items")
                    try txn.set(Item(title: "other"), forKey: "o\(version)", inCollection: "other")
                    txn.info = ["version": "\(version)"]
                }
                // Every read of the bookmarked connection sees commit 1, cached or not.
                try ui.read { txn throws in
                    #expect(txn.commit == 1)
                    #expect(try txn.value(forKey: "k", inCollection: "items", as: Item.self)?.title == "v1")
                    #expect(try txn.keys(inCollection: "other") == [])
                }
                #expect(ui.snapshot == 1)
            }
            #expect(db.latestCommit == 4)

            let changes = try ui.beginLongLivedReadTransaction()
            #expect(changes.map(\.commit) == [2, 3, 4])
            #expect(changes.map { $0.info["version"] } == ["2", "3", "4"])
            #expect(changes.allSatisfy { $0.connectionName == "writer" && !$0.isExternal })
            #expect(changes.hasChange(forKey: "k", inCollection: "items"))
            #expect(changes.hasChange(forKey: "o3", inCollection: "other"))
            #expect(!changes.hasChange(forKey: "absent", inCollection: "items"))
            #expect(!changes.hasChange(inCollection: "untouched"))
            #expect(ui.snapshot == 4)
            #expect(
                try ui.read { try $0.value(forKey: "k", inCollection: "items", as: Item.self)?.title } == "v4"
            )
            #expect(try ui.read { try $0.keys(inCollection: "other") } == ["o2", "o3", "o4"])
        }
    }

    @Test func advancingWithNothingNewReturnsNothing() throws {
        try withTemporaryDatabase { db throws in
            let ui = db.newConnection(name: "ui")
            #expect(try ui.beginLongLivedReadTransaction() == [])
            #expect(try ui.beginLongLivedReadTransaction() == [])
            try db.newConnection().readWrite { try $0.set(1, forKey: "k", inCollection: "c") }
            #expect(try ui.beginLongLivedReadTransaction().map(\.commit) == [1])
            #expect(try ui.beginLongLivedReadTransaction() == [])
            try ui.endLongLivedReadTransaction()
            #expect(!ui.isInLongLivedReadTransaction)
        }
    }

    @Test func removalsAndClearsAreInChangesets() throws {
        try withTemporaryDatabase { db throws in
            let ui = db.newConnection(name: "ui")
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                for key in ["a", "b", "c"] {
                    try txn.set(key, forKey: key, inCollection: "letters")
                    try txn.set(key, forKey: key, inCollection: "other")
                }
            }
            try ui.beginLongLivedReadTransaction()
            try writer.readWrite { try $0.removeValues(forKeys: ["a", "zz"], inCollection: "letters") }
            try writer.readWrite { txn in
                try txn.removeAll(inCollection: "other")
                try txn.set("new", forKey: "n", inCollection: "other")
            }
            try writer.readWrite { try $0.removeAllCollections() }
            let changes = try ui.beginLongLivedReadTransaction()
            #expect(changes.count == 3)
            #expect(changes[0].removedKeys == ["letters": ["a"]])
            #expect(changes[0].setKeys.isEmpty)
            #expect(changes[0].hasChange(forKey: "a", inCollection: "letters"))
            #expect(!changes[0].hasChange(forKey: "b", inCollection: "letters"))
            #expect(changes[1].clearedCollections == ["other"])
            #expect(changes[1].setKeys == ["other": ["n"]])
            // A cleared collection answers true for every key in it, named or not.
            #expect(changes[1].hasChange(forKey: "anything", inCollection: "other"))
            #expect(!changes[1].hasChange(inCollection: "letters"))
            #expect(changes[2].clearedAllCollections)
            #expect(changes[2].hasChange(forKey: "x", inCollection: "never-seen"))
        }
    }

    @Test func writesAreRefusedOnABookmarkedConnection() throws {
        try withTemporaryDatabase { db throws in
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            expectError(.longLivedReadTransactionActive) {
                try ui.readWrite { try $0.set(1, forKey: "k", inCollection: "c") }
            }
            #expect(db.latestCommit == 0)
            #expect(ui.isInLongLivedReadTransaction)
            try ui.endLongLivedReadTransaction()
            try ui.readWrite { try $0.set(1, forKey: "k", inCollection: "c") }
            #expect(db.latestCommit == 1)
        }
    }

    @Test func cacheServesOnlyTheSnapshotAndDropsExactlyWhatChanged() throws {
        try withTemporaryDatabase { db throws in
            let ui = db.newConnection(name: "ui")
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                for index in 0..<10 { try txn.set(Item(title: "v0"), forKey: "\(index)", inCollection: "c") }
            }
            try ui.beginLongLivedReadTransaction()
            // Warm the cache with every key.
            try ui.read { txn throws in
                for index in 0..<10 {
                    _ = try txn.value(forKey: "\(index)", inCollection: "c", as: Item.self)
                }
            }
            #expect(ui.cachedValueCount == 10)
            try writer.readWrite { txn in
                try txn.set(Item(title: "v1"), forKey: "3", inCollection: "c")
                try txn.removeValue(forKey: "4", inCollection: "c")
            }
            // Still the bookmarked commit, from the cache.
            #expect(
                try ui.read { try $0.value(forKey: "3", inCollection: "c", as: Item.self)?.title } == "v0")
            #expect(try ui.read { try $0.hasValue(forKey: "4", inCollection: "c") })
            try ui.beginLongLivedReadTransaction()
            // Exactly the two changed keys were dropped.
            #expect(ui.cachedValueCount == 8)
            #expect(
                try ui.read { try $0.value(forKey: "3", inCollection: "c", as: Item.self)?.title } == "v1")
            #expect(try ui.read { try $0.hasValue(forKey: "4", inCollection: "c") } == false)

            // Without a bookmark, every transaction starts at the newest commit, cache included.
            try ui.endLongLivedReadTransaction()
            try writer.readWrite { try $0.set(Item(title: "v2"), forKey: "3", inCollection: "c") }
            #expect(
                try ui.read { try $0.value(forKey: "3", inCollection: "c", as: Item.self)?.title } == "v2")
            #expect(
                try writer.read { try $0.value(forKey: "3", inCollection: "c", as: Item.self)?.title } == "v2"
            )
        }
    }

    @Test func changesStreamDeliversEveryCommitInOrderUnderConcurrentWriters() async throws {
        try await withTemporaryDatabase { db in
            let stream = db.changes()
            let writers = 4
            let commitsPerWriter = 25
            try await withThrowingTaskGroup(of: Void.self) { group in
                for writer in 0..<writers {
                    let connection = db.newConnection(name: "writer-\(writer)")
                    group.addTask {
                        for index in 0..<commitsPerWriter {
                            try await connection.readWrite { txn in
                                try txn.set(index, forKey: "w\(writer)-\(index)", inCollection: "c")
                            }
                        }
                    }
                }
                try await group.waitForAll()
            }
            var received: [Changeset] = []
            for await changeset in stream {
                received.append(changeset)
                if received.count == writers * commitsPerWriter { break }
            }
            #expect(received.map(\.commit) == Array(1...UInt64(writers * commitsPerWriter)))
            #expect(Set(received.map(\.connectionName)).count == writers)
        }
    }

    @Test func observerCallbackGetsEveryCommitUntilCancelled() throws {
        try withTemporaryDatabase { db throws in
            let delivered = DispatchSemaphore(value: 0)
            let commits = LockedArray()
            let observerQueue = DispatchQueue(label: "observer")
            let observer = db.addObserver(on: observerQueue) { changeset in
                commits.append(changeset.commit)
                delivered.signal()
            }
            let writer = db.newConnection()
            for index in 0..<3 { try writer.readWrite { try $0.set(index, forKey: "k", inCollection: "c") } }
            for _ in 0..<3 { try #require(delivered.wait(timeout: .now() + .seconds(60)) == .success) }
            #expect(commits.values == [1, 2, 3])
            observer.cancel()
            try writer.readWrite { try $0.set(9, forKey: "k", inCollection: "c") }
            // Proof that nothing more arrives: a later observer sees commit 5 while the cancelled
            // one stays at three deliveries. A commit hands its changeset to each observer's queue
            // before `readWrite` returns, so once the cancelled observer's queue has run what it
            // was given, a delivery of commit 4 or 5 would be in `commits`.
            let later = DispatchSemaphore(value: 0)
            let laterObserver = db.addObserver(on: DispatchQueue(label: "later")) { _ in later.signal() }
            try writer.readWrite { try $0.set(10, forKey: "k", inCollection: "c") }
            try #require(later.wait(timeout: .now() + .seconds(60)) == .success)
            laterObserver.cancel()
            observerQueue.sync {}
            #expect(commits.values == [1, 2, 3])
        }
    }

    @Test func foreignWriterThroughTheSQLiteShellIsDetectedAndSealed() throws {
        try withTemporaryDatabase { db throws in
            let ui = db.newConnection(name: "ui")
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { try $0.set("mine", forKey: "k", inCollection: "c") }
            try ui.beginLongLivedReadTransaction()
            _ = try ui.read { try $0.value(forKey: "k", inCollection: "c", as: String.self) }  // cached

            try run(
                "/usr/bin/sqlite3",
                [db.path, "UPDATE snapshotdb_values SET data = CAST('\"theirs\"' AS BLOB) WHERE key = 'k';"])
            // The bookmark still sees its commit.
            #expect(try ui.read { try $0.value(forKey: "k", inCollection: "c", as: String.self) } == "mine")

            let changes = try ui.beginLongLivedReadTransaction()
            #expect(changes.count == 1)
            // The schema's triggers noted the key: the changeset is exact.
            #expect(changes.first?.isExternal == false)
            #expect(changes.first?.connectionName == nil)
            #expect(changes.first?.commit == 2)
            #expect(changes.first?.setKeys == ["c": ["k"]])
            #expect(!changes.hasChange(forKey: "anything", inCollection: "anywhere"))
            // The changed key left the cache: the foreign value is visible.
            #expect(try ui.read { try $0.value(forKey: "k", inCollection: "c", as: String.self) } == "theirs")
            // Sealed once: nothing more to report, and the next local commit follows it.
            #expect(try ui.beginLongLivedReadTransaction() == [])
            try writer.readWrite { try $0.set("again", forKey: "k2", inCollection: "c") }
            #expect(try ui.beginLongLivedReadTransaction().map(\.commit) == [3])

            // A foreign write seen first by a writer is sealed before the writer's own commit.
            try run("/usr/bin/sqlite3", [db.path, "DELETE FROM snapshotdb_values WHERE key = 'k2';"])
            try writer.readWrite { try $0.set("after", forKey: "k3", inCollection: "c") }
            let later = try ui.beginLongLivedReadTransaction()
            #expect(later.map(\.commit) == [4, 5])
            #expect(later.map(\.isExternal) == [false, false])
            #expect(later.first?.removedKeys == ["c": ["k2"]])
            #expect(try ui.read { try $0.keys(inCollection: "c") } == ["k", "k3"])
        }
    }

    @Test func bookmarkedReadersSeeAnExactTotalWhileWritersTransfer() throws {
        let accounts = 20
        let initial = 1_000
        try withTemporaryDatabase { db throws in
            try db.newConnection(name: "setup").readWrite { txn in
                for account in 0..<accounts {
                    try txn.set(initial, forKey: "\(account)", inCollection: "accounts")
                }
            }
            let writersDone = LockedFlag()
            let failures = LockedArray()
            let group = DispatchGroup()
            let writerCount = 3
            let transfersPerWriter = 60
            for writer in 0..<writerCount {
                let connection = db.newConnection(name: "writer-\(writer)")
                DispatchQueue.global().async(group: group) {
                    var generator = SystemRandomNumberGenerator()
                    for _ in 0..<transfersPerWriter {
                        do {
                            try connection.readWrite { txn in
                                let from = "\(Int.random(in: 0..<accounts, using: &generator))"
                                let to = "\(Int.random(in: 0..<accounts, using: &generator))"
                                let amount = Int.random(in: 1...50, using: &generator)
                                let fromBalance =
                                    try txn.value(forKey: from, inCollection: "accounts", as: Int.self) ?? 0
                                try txn.set(fromBalance - amount, forKey: from, inCollection: "accounts")
                                let toBalance =
                                    try txn.value(forKey: to, inCollection: "accounts", as: Int.self) ?? 0
                                try txn.set(toBalance + amount, forKey: to, inCollection: "accounts")
                            }
                        } catch {
                            failures.append(UInt64.max)
                        }
                    }
                }
            }
            let readerGroup = DispatchGroup()
            for reader in 0..<3 {
                let connection = db.newConnection(name: "reader-\(reader)")
                DispatchQueue.global().async(group: readerGroup) {
                    do {
                        var last =
                            try connection.beginLongLivedReadTransaction().last?.commit ?? connection.snapshot
                        var rounds = 0
                        while !writersDone.value || rounds < 3 {
                            rounds += 1
                            let totals = try (0..<2).map { _ in
                                try connection.read { txn in
                                    try (0..<accounts).reduce(0) {
                                        $0
                                            + (try txn.value(
                                                forKey: "\($1)", inCollection: "accounts", as: Int.self) ?? 0)
                                    }
                                }
                            }
                            if totals != [accounts * initial, accounts * initial] {
                                failures.append(connection.snapshot)
                            }
                            let changes = try connection.beginLongLivedReadTransaction()
                            let expected =
                                changes.isEmpty ? [] : Array(last + 1...last + UInt64(changes.count))
                            if changes.map(\.commit) != expected { failures.append(last) }
                            last = changes.last?.commit ?? last
                        }
                    } catch {
                        failures.append(UInt64.max - 1)
                    }
                }
            }
            group.wait()
            writersDone.set()
            readerGroup.wait()
            #expect(failures.values.isEmpty)
            #expect(db.latestCommit == UInt64(1 + writerCount * transfersPerWriter))
        }
    }
}

/// A thread-safe array of commit numbers for tests.
final class LockedArray: @unchecked Sendable {
    private let lock = NSLock()
    private var storage: [UInt64] = []
    func append(_ value: UInt64) { lock.withLock { storage.append(value) } }
    var values: [UInt64] { lock.withLock { storage } }
}

/// A thread-safe flag for tests.
final class LockedFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var storage = false
    func set() { lock.withLock { storage = true } }
    var value: Bool { lock.withLock { storage } }
}

@Suite("Change delivery limits", .hangLimit)
struct ChangeDeliveryLimitTests {
    @Test func aSubscriberThatFallsBehindIsFinishedNotSkipped() async throws {
        var configuration = Configuration()
        configuration.changesBufferLimit = 3
        try await withTemporaryDatabase(configuration: configuration) { db in
            let stream = db.changes()
            let writer = db.newConnection()
            for index in 0..<10 {
                try await writer.readWrite { try $0.set(index, forKey: "k", inCollection: "c") }
            }
            var received: [UInt64] = []
            for await changeset in stream { received.append(changeset.commit) }
            // The stream delivered a gap-free prefix and then ended: the consumer knows it must
            // catch up (for example with a bookmark) instead of believing it saw everything.
            #expect(received == [1, 2, 3])
        }
    }

    @Test func releasingABookmarkedConnectionUnpinsTheWAL() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { try $0.set(0, forKey: "k", inCollection: "c") }
            var laggard: Connection? = db.newConnection(name: "laggard")
            try laggard?.beginLongLivedReadTransaction()
            try writer.readWrite { try $0.set(1, forKey: "k", inCollection: "c") }
            #expect(try db.checkpoint(.passive).isComplete == false)
            laggard = nil
            let result = try db.checkpoint(.truncate)
            #expect(result.isComplete)
            #expect(result.walFrames == 0)
        }
    }
}
