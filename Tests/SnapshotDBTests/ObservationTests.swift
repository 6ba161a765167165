import Foundation
import Testing

@testable import SnapshotDB

/// Observing a key or a collection, `touch`, and the async advance.
@Suite("Observation", .hangLimit)
struct ObservationTests {
    @Test func observingAKeyYieldsTheCurrentValueThenEachChange() async throws {
        try await withTemporaryDatabase { db in
            let writer = db.newConnection(name: "writer")
            try await writer.readWrite { try $0.set(Item(title: "first"), forKey: "k", inCollection: "c") }
            var values = db.observe(forKey: "k", inCollection: "c", as: Item.self).makeAsyncIterator()
            #expect(try await values.next() == Item(title: "first"))
            // Another key, and the same bytes again: nothing to yield. Then a real change.
            try await writer.readWrite {
                try $0.set(Item(title: "other"), forKey: "other", inCollection: "c")
            }
            try await writer.readWrite { try $0.set(Item(title: "first"), forKey: "k", inCollection: "c") }
            try await writer.readWrite { try $0.set(Item(title: "second"), forKey: "k", inCollection: "c") }
            #expect(try await values.next() == Item(title: "second"))
            // A foreign client's write is seen too (numbered by the next transaction of this process).
            _ = try sqlite3(
                db.path,
                #"UPDATE snapshotdb_values SET data = '{"title":"shell","count":0}' WHERE collection = 'c' AND key = 'k';"#
            )
            try await writer.readWrite {
                try $0.set(Item(title: "x"), forKey: "unrelated", inCollection: "d")
            }
            #expect(try await values.next() == Item(title: "shell"))
            try await writer.readWrite { try $0.removeValue(forKey: "k", inCollection: "c") }
            #expect(try await values.next() == .some(nil))
            try db.close()
            #expect(try await values.next() == nil, "closing the database ends the sequence")
        }
    }

    @Test func observingACollectionYieldsItsValuesByKey() async throws {
        try await withTemporaryDatabase { db in
            let writer = db.newConnection(name: "writer")
            var snapshots = db.observe(collection: "c", as: Item.self).makeAsyncIterator()
            #expect(try await snapshots.next() == [:])
            try await writer.readWrite { txn in
                try txn.set(Item(title: "a"), forKey: "a", inCollection: "c")
                try txn.set(Item(title: "b"), forKey: "b", inCollection: "c")
            }
            #expect(try await snapshots.next() == ["a": Item(title: "a"), "b": Item(title: "b")])
            try await writer.readWrite { try $0.removeValue(forKey: "a", inCollection: "c") }
            #expect(try await snapshots.next() == ["b": Item(title: "b")])
        }
    }

    @Test func touchReportsAKeyWithoutRewritingIt() throws {
        try withTemporaryDatabase { db throws in
            try db.register(ViewTests.byTitle)
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            try writer.readWrite {
                try $0.set(
                    Note(title: "t", folder: "inbox", archived: false), forKey: "n", inCollection: "notes")
            }
            try ui.beginLongLivedReadTransaction()
            try writer.readWrite { txn in
                try txn.touch(forKey: "n", inCollection: "notes")
                try txn.touch(forKey: "absent", inCollection: "notes")
            }
            let changes = try ui.beginLongLivedReadTransaction()
            #expect(changes.count == 1)
            #expect(changes.hasChange(forKey: "n", inCollection: "notes"))
            #expect(!changes.hasChange(forKey: "absent", inCollection: "notes"))
            let rows = try ui.read { try $0.view(named: "byTitle").changes(for: changes) }
            #expect(
                rows == [
                    .update(ViewItem(collection: "notes", key: "n"), at: ViewIndex(group: "inbox", index: 0))
                ])
            // Touching nothing that exists makes no commit.
            let before = db.latestCommit
            try writer.readWrite { try $0.touch(forKey: "absent", inCollection: "notes") }
            #expect(db.latestCommit == before)
        }
    }

    @Test func theAsyncAdvanceReturnsTheJumpedCommits() async throws {
        try await withTemporaryDatabase { db in
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            #expect(try await ui.advance() == [])
            try await writer.readWrite { try $0.set(Item(title: "a"), forKey: "a", inCollection: "c") }
            let changes = try await ui.advance()
            #expect(changes.map(\.commit) == [1])
            #expect(ui.isInLongLivedReadTransaction)
        }
    }
}

/// The README's forms compile where users write them: the synchronous calls in synchronous
/// code, the `async` ones (with `await`) inside `async` functions.
@Suite("README forms")
struct ReadmeFormTests {
    static func synchronousForms(_ ui: Connection, _ writer: Connection) throws -> [Changeset] {
        try writer.readWrite { try $0.set(Item(title: "a"), forKey: "1", inCollection: "items") }
        _ = try ui.read { try $0.value(forKey: "1", inCollection: "items", as: Item.self) }
        return try ui.beginLongLivedReadTransaction()
    }

    static func asynchronousForms(_ ui: Connection, _ writer: Connection) async throws -> [Changeset] {
        let item = try await ui.read { try $0.value(forKey: "1", inCollection: "items", as: Item.self) }
        try await writer.readWrite { try $0.set(Item(title: "b"), forKey: "2", inCollection: "items") }
        #expect(item == Item(title: "a"))
        return try await ui.advance()
    }

    @Test func bothFormsRun() async throws {
        try await withTemporaryDatabase { db in
            let ui = db.newConnection(name: "ui")
            let writer = db.newConnection(name: "writer")
            #expect(try Self.synchronousForms(ui, writer) == [])
            let changes = try await Self.asynchronousForms(ui, writer)
            #expect(changes.map(\.commit) == [2])
        }
    }
}

extension ObservationTests {
    /// A collection's contents that another commit spells with the same bytes once key and value
    /// are run together (`"a1" 0 "5" "a2" 0 "6"` both times): the observer still sees the change.
    @Test func aCollectionWhoseBytesRunTogetherAlikeIsStillSeenToChange() async throws {
        try await withTemporaryDatabase { db in
            let writer = db.newConnection(name: "writer")
            try await writer.readWrite { txn in
                try txn.set(5, forKey: "a1", inCollection: "c")
                try txn.set(6, forKey: "a2", inCollection: "c")
            }
            var contents = db.observe(collection: "c", as: Int.self).makeAsyncIterator()
            // The current contents first (the observer subscribed before reading them).
            #expect(try await contents.next() == ["a1": 5, "a2": 6])
            try await writer.readWrite { txn in
                try txn.removeAll(inCollection: "c")
                try txn.set(6, forKey: "a1\u{0}5a2", inCollection: "c")
            }
            // An observer that took the new bytes for the old ones would yield nothing here: the
            // suite's time limit ends the wait, and `next()` returns nil.
            #expect(try await contents.next() == ["a1\u{0}5a2": 6])
        }
    }

    /// A `changes()` stream asked for after `close()` has ended, as does an observer's.
    @Test func changesAfterCloseEndAtOnce() async throws {
        try await withTemporaryDatabase { db in
            try db.close()
            var commits = db.changes().makeAsyncIterator()
            #expect(await commits.next() == nil)
            var values = db.observe(forKey: "k", inCollection: "c", as: Int.self).makeAsyncIterator()
            #expect(try await values.next() == nil)
        }
    }
}

/// The observer is pulled: it reads when its consumer asks, so a slow consumer gets the newest
/// value and no backlog.
@Suite("Observation, pulled", .hangLimit)
struct PulledObservationTests {
    @Test func aSlowConsumerGetsTheNewestValueNotEachOneItMissed() async throws {
        try await withTemporaryDatabase { db in
            let writer = db.newConnection(name: "writer")
            var values = db.observe(forKey: "k", inCollection: "c", as: Int.self).makeAsyncIterator()
            #expect(try await values.next() == .some(nil))
            for value in 1...50 {
                try await writer.readWrite { try $0.set(value, forKey: "k", inCollection: "c") }
            }
            // All 50 commits landed before the consumer asked: one element, the newest.
            #expect(try await values.next() == 50)
            try await writer.readWrite { try $0.set(51, forKey: "k", inCollection: "c") }
            #expect(try await values.next() == 51)
        }
    }

    @Test func aValueThatCameBackBeforeTheConsumerAskedYieldsNothing() async throws {
        try await withTemporaryDatabase { db in
            let writer = db.newConnection(name: "writer")
            try await writer.readWrite { try $0.set("a", forKey: "k", inCollection: "c") }
            var values = db.observe(forKey: "k", inCollection: "c", as: String.self).makeAsyncIterator()
            #expect(try await values.next() == "a")
            try await writer.readWrite { try $0.set("b", forKey: "k", inCollection: "c") }
            try await writer.readWrite { try $0.set("a", forKey: "k", inCollection: "c") }
            try await writer.readWrite { try $0.set("c", forKey: "k", inCollection: "c") }
            // "a" again would tell the consumer nothing it did not have.
            #expect(try await values.next() == "c")
        }
    }

    /// More commits than the `changes()` buffer holds: its stream ends, the observer subscribes
    /// again and reads again, and misses nothing.
    @Test func anObserverThatFellBehindItsChangesBufferCatchesUp() async throws {
        var configuration = Configuration()
        configuration.changesBufferLimit = 2
        try await withTemporaryDatabase(configuration: configuration) { db in
            let writer = db.newConnection(name: "writer")
            var contents = db.observe(collection: "c", as: Int.self).makeAsyncIterator()
            #expect(try await contents.next() == [:])
            for value in 1...10 {
                try await writer.readWrite { try $0.set(value, forKey: "k\(value)", inCollection: "c") }
            }
            let all = Dictionary(uniqueKeysWithValues: (1...10).map { ("k\($0)", $0) })
            #expect(try await contents.next() == all)
            // Subscribed again: the commits after the catch-up are seen (the unrelated one yields
            // nothing of its own).
            try await writer.readWrite { try $0.removeValue(forKey: "k1", inCollection: "c") }
            try await writer.readWrite { try $0.set(0, forKey: "other", inCollection: "d") }
            try await writer.readWrite { try $0.set(11, forKey: "k11", inCollection: "c") }
            var expected = all
            expected["k1"] = nil
            expected["k11"] = 11
            #expect(try await contents.next() == expected)
        }
    }

    @Test func cancellingTheConsumingTaskEndsTheSequence() async throws {
        try await withTemporaryDatabase { db in
            let (started, startedContinuation) = AsyncStream<Void>.makeStream()
            let consumer = Task {
                var count = 0
                for try await _ in db.observe(forKey: "k", inCollection: "c", as: Int.self) {
                    count += 1
                    startedContinuation.yield()
                }
                return count
            }
            // The first element arrived; the consumer now waits for a commit that never comes.
            for await _ in started { break }
            consumer.cancel()
            let count = try await consumer.value
            #expect(count == 1)
        }
    }
}
