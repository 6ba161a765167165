import Foundation
import SnapshotDBLocking
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDB

/// A commit is one event, dispatched once (issue 43), counted with the library's debug counters
/// rather than believed: the events handed to the dispatcher, the publishing step, the
/// checkpointer's word of the commit, and the locks the committing thread takes.
@Suite("One commit, one event", .hangLimit)
struct CommitEventTests {
    /// No automatic checkpoint: its runs take locks on a queue of their own, and are counted in
    /// the checkpoint tests.
    static var configuration: Configuration {
        var configuration = Configuration()
        configuration.checkpointThresholdPages = 1 << 40
        return configuration
    }

    struct Counts: Equatable, CustomStringConvertible {
        var events = 0
        var publishSteps = 0
        var checkpointer = 0

        init(_ db: Database) {
            events = db.debugCounters.value(.commitEventsDispatched)
            publishSteps = db.debugCounters.value(.publishSteps)
            checkpointer = db.debugCounters.value(.checkpointerToldOfCommits)
        }

        static func - (after: Counts, before: Counts) -> Counts {
            var difference = after
            difference.events -= before.events
            difference.publishSteps -= before.publishSteps
            difference.checkpointer -= before.checkpointer
            return difference
        }

        var description: String {
            "\(events) events, \(publishSteps) publishing steps, checkpointer told \(checkpointer) times"
        }
    }

    /// The most locks a one-row commit may take on its thread (the library's mutexes and the
    /// writer lock): half of the 26 it took before the commit event (27 in debug builds, with
    /// the fault injector's).
    static let lockBudget = 13

    /// Runs `body` on this thread, synchronously (the synchronous overloads), and returns how
    /// many locks it took.
    @discardableResult
    static func synchronously(_ body: () throws -> Void) rethrows -> Int {
        let before = LockAcquisitions.onThisThread
        try body()
        return LockAcquisitions.onThisThread - before
    }

    /// A synchronous read on `connection`.
    static func read<T>(_ connection: Connection, _ body: (ReadTransaction) throws -> T) throws -> T {
        try connection.read(body)
    }

    @Test func aOneRowCommitBesideASubscriberAViewAndABookmarkIsOneEvent() async throws {
        try await withTemporaryDatabase(configuration: Self.configuration) { db in
            try db.register(ViewTests.byTitle)
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            let changes = db.changes()
            try Self.synchronously {
                try writer.readWrite {
                    try $0.set(
                        Note(title: "a", folder: "inbox", archived: false), forKey: "1", inCollection: "notes"
                    )
                }
            }
            try ui.beginLongLivedReadTransaction()
            let first = db.latestCommit
            let before = Counts(db)
            let locks = try Self.synchronously {
                try writer.readWrite {
                    try $0.set(
                        Note(title: "b", folder: "inbox", archived: false), forKey: "2", inCollection: "notes"
                    )
                }
            }
            let counted = Counts(db) - before
            #expect(counted.events == 1, "\(counted)")
            #expect(counted.publishSteps == 1, "\(counted)")
            #expect(counted.checkpointer == 1, "\(counted)")
            #expect(locks <= Self.lockBudget, "a one-row commit took \(locks) locks")
            // And it reached everything it is for: the subscriber, the bookmark, the view.
            var iterator = changes.makeAsyncIterator()
            #expect(await iterator.next()?.commit == first)
            let changeset = await iterator.next()
            #expect(changeset?.commit == first + 1)
            #expect(changeset?.setKeys["notes"] == ["2"])
            let jumped = try ui.beginLongLivedReadTransaction()
            #expect(jumped.map(\.commit) == [first + 1])
            let inbox = try Self.read(ui) { try $0.view(named: "byTitle").count(inGroup: "inbox") }
            #expect(inbox == 2)
            // An advance publishes nothing new: no event.
            #expect(Counts(db) - before == counted)
        }
    }

    /// Commits of another process (a real child process) reach this one as one event of
    /// commits found, dispatched by the reader that published them, and by no one else.
    @Test func commitsOfAnotherProcessAreOneEventOfCommitsFound() throws {
        try withTemporaryDatabase(configuration: Self.configuration) { db throws in
            try db.register([ViewTests.byTitle, HistoryTests.keyedByTitle])
            let writer = db.newConnection(name: "writer")
            try writer.readWrite {
                try $0.set(
                    Note(title: "a", folder: "inbox", archived: false), forKey: "n0", inCollection: "notes")
            }
            let ui = db.newConnection(name: "ui")
            let other = db.newConnection(name: "other")
            try ui.beginLongLivedReadTransaction()
            let start = db.latestCommit
            let plan = HistoryTests.plan(seed: 5, commits: 6)
            let expected = HistoryTests.expectedCommits(plan)
            let before = Counts(db)
            _ = try HistoryTests.runWriterProcess(path: db.path, seed: 5, commits: plan.count)
            #expect((Counts(db) - before).events == 0, "nothing is found here before a read")
            let changesets = try ui.beginLongLivedReadTransaction()
            #expect(changesets.map(\.commit) == Array(start + 1...start + UInt64(expected.count)))
            #expect(changesets.allSatisfy { !$0.isExternal })
            var counted = Counts(db) - before
            #expect(counted.events == 1, "\(counted)")
            #expect(counted.publishSteps == 1, "\(counted)")
            #expect(counted.checkpointer == 1, "\(counted)")
            // Another connection that reads the same commits finds them published: no event.
            _ = try other.read { try $0.count(inCollection: "notes") }
            counted = Counts(db) - before
            #expect(counted.events == 1, "\(counted)")
        }
    }
}
