import Foundation
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDB

/// Live views (`db.observe(view:range:)`): the first update is a reload with the rows, then one
/// update per commit that changes the rows, whose changes take the previous rows to the rows
/// `update.read` sees at exactly `update.commit`; commits of another process count; a slow
/// consumer gets coalesced updates; ranges keep their length; cancelling releases the bookmark.
@Suite("Live views")
struct LiveViewTests {
    static let childKey = "SNAPSHOTDB_LIVE_VIEW_CHILD"

    /// Notes by folder, by title: a closure view, and the same order keyed.
    static let byTitle = ViewTests.byTitle

    static func note(_ random: inout SeededGenerator) -> Note {
        Note(
            title: String(UnicodeScalar(UInt8(97 + Int.random(in: 0..<26, using: &random)))),
            folder: ["inbox", "work", "later"].randomElement(using: &random)!,
            archived: Int.random(in: 0..<5, using: &random) == 0)
    }

    /// One random commit of notes (and sometimes of another collection only, which the view
    /// does not observe).
    static func randomCommit(_ txn: ReadWriteTransaction, _ random: inout SeededGenerator, prefix: String)
        throws
    {
        if Int.random(in: 0..<6, using: &random) == 0 {
            try txn.set(Item(title: "elsewhere"), forKey: "x", inCollection: "other")
            return
        }
        for _ in 0..<Int.random(in: 1...6, using: &random) {
            let key = "\(prefix)\(Int.random(in: 0..<40, using: &random))"
            if Int.random(in: 0..<4, using: &random) == 0 {
                try txn.removeValue(forKey: key, inCollection: "notes")
            } else {
                try txn.set(Self.note(&random), forKey: key, inCollection: "notes")
            }
        }
    }

    /// The blocking forms, from `async` code (where the `async` overloads would be chosen).
    static func write(_ connection: Connection, _ body: (ReadWriteTransaction) throws -> Void) throws {
        try connection.readWrite(body)
    }

    static func read<T>(_ connection: Connection, _ body: (ReadTransaction) throws -> T) throws -> T {
        try connection.read(body)
    }

    struct TimedOut: Error, CustomStringConvertible {
        let description: String
    }

    /// Waits for background work (the observation's task, the checkpointer's queue) to make
    /// `condition` true, looking every 10 ms for at most 20 s.
    static func eventually(_ what: String, _ condition: () throws -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(20)
        while try !condition() {
            guard ContinuousClock.now < deadline else {
                throw TimedOut(description: "timed out waiting for \(what)")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    /// Registers the view, writes note `n1` ("b", in the inbox), and returns the writer.
    static func viewWithOneNote(_ db: Database) throws -> Connection {
        try db.register(byTitle)
        let writer = db.newConnection(name: "writer")
        try write(writer) {
            try $0.set(
                Note(title: "b", folder: "inbox", archived: false), forKey: "n1", inCollection: "notes")
        }
        return writer
    }

    static func rows(_ txn: ReadTransaction) throws -> [String: [ViewItem]] {
        ViewTests.rows(try txn.view(named: "byTitle"))
    }

    @Test func theFirstUpdateIsTheRowsAndEachLaterOneTheChangesOfACommitThatChangedThem() async throws {
        try await withTemporaryDatabase { db async throws in
            let writer = try Self.viewWithOneNote(db)
            let start = db.latestCommit
            var updates = db.observe(view: "byTitle").makeAsyncIterator()
            let first = try #require(try await updates.next())
            #expect(first.isReload && first.commit == start && first.changes.isEmpty)
            #expect(first.rows == ["inbox": [ViewItem(collection: "notes", key: "n1")]])
            #expect(try first.read { try Self.rows($0) } == first.rows)
            // A commit outside the view's values yields nothing; the next commit that changes
            // the rows yields their changes.
            try Self.write(writer) { try $0.set(Item(title: "x"), forKey: "x", inCollection: "other") }
            try Self.write(writer) {
                try $0.set(
                    Note(title: "a", folder: "inbox", archived: false), forKey: "n2", inCollection: "notes")
            }
            let second = try #require(try await updates.next())
            #expect(second.commit == start + 2 && !second.isReload && second.rows == nil)
            #expect(
                second.changes == [
                    .insert(ViewItem(collection: "notes", key: "n2"), at: ViewIndex(group: "inbox", index: 0))
                ])
            #expect(try second.read { $0.commit } == start + 2)
            // An update read after the next was asked for is misuse, not a read of another commit.
            try Self.write(writer) { try $0.removeValue(forKey: "n1", inCollection: "notes") }
            let third = try #require(try await updates.next())
            #expect(
                third.changes == [
                    .delete(ViewItem(collection: "notes", key: "n1"), at: ViewIndex(group: "inbox", index: 1))
                ])
            expectError(.misuse) { try second.read { _ in () } }
        }
    }

    /// The property of the issue: a consumer that pauses at random between reads, over random
    /// commits of this process and of a child process that keeps the same view. Applying each
    /// update's changes to the previous rows gives the rows `update.read` sees at its commit,
    /// and the updates end at the newest commit.
    @Test(arguments: [1, 2] as [UInt64])
    func aSlowConsumerOverTwoProcessesAppliesEveryUpdateExactly(seed: UInt64) async throws {
        try await withTemporaryDatabase { db async throws in
            try db.register(Self.byTitle)
            var random = SeededGenerator(state: seed)
            let writer = db.newConnection(name: "writer")
            var updates = db.observe(view: "byTitle").makeAsyncIterator()
            let first = try #require(try await updates.next())
            var rows = try #require(first.rows)
            let child = try startChildTest(
                "childWritesRandomNotes", environmentKey: Self.childKey, value: "\(db.path)|\(seed)|60")
            var reloads = 0
            var seen = 0
            for round in 0..<60 {
                try Self.write(writer) { try Self.randomCommit($0, &random, prefix: "p") }
                guard Int.random(in: 0..<3, using: &random) == 0 || round == 59 else { continue }
                // An update comes when the rows changed since the last one (commits that left
                // them as they were yield nothing, and asking would wait for the next change).
                guard try Self.read(writer, { try Self.rows($0) }) != rows else { continue }
                // The consumer is slow: other work runs between its reads.
                for _ in 0..<Int.random(in: 0..<200, using: &random) { await Task.yield() }
                let update = try #require(try await updates.next())
                if update.isReload {
                    reloads += 1
                    rows = try #require(update.rows)
                } else {
                    rows = try #require(
                        ViewTests.apply(update.changes, to: rows), "seed \(seed) round \(round)")
                }
                #expect(try update.read { try Self.rows($0) } == rows, "seed \(seed) commit \(update.commit)")
                seen = Int(update.commit)
            }
            #expect(child.finish() == 0, "\(child.standardError)")
            // Follow until the newest commit (of either process) has been seen.
            let newest = try Self.read(writer) { txn in txn.commit }
            let rowsThen = try Self.read(writer) { try Self.rows($0) }
            if rows != rowsThen {
                while true {
                    let update = try #require(try await updates.next())
                    rows = try #require(
                        update.isReload ? update.rows : ViewTests.apply(update.changes, to: rows))
                    #expect(try update.read { try Self.rows($0) } == rows)
                    seen = Int(update.commit)
                    if rows == rowsThen { break }
                }
            }
            #expect(rows == rowsThen && UInt64(seen) <= newest)
            // Both processes committed while the consumer followed.
            let history = try Self.read(writer) { try $0.changes(after: first.commit) }
            #expect(history.contains { $0.processID == getpid() })
            #expect(history.filter { $0.connectionName == "child" }.count > 10)
            #expect(reloads == 0, "no commit here needs a reload")
        }
    }

    /// The child of the property test: registers the same view (every process that writes
    /// keeps it), then makes random commits.
    @Test(.enabled(if: ProcessInfo.processInfo.environment[childKey] != nil))
    func childWritesRandomNotes() throws {
        let parts = try #require(ProcessInfo.processInfo.environment[Self.childKey]).split(separator: "|")
        let db = try Database(path: String(parts[0]))
        try db.register(Self.byTitle)
        var random = SeededGenerator(state: UInt64(parts[1])! &+ 1_000)
        let writer = db.newConnection(name: "child")
        for _ in 0..<Int(parts[2])! {
            try Self.write(writer) { try Self.randomCommit($0, &random, prefix: "c") }
        }
    }

    /// Ranges keep their length as items move in and out, and carry only the changes inside
    /// them, with indexes into the window.
    @Test(arguments: [
        ViewRange.first(5, inGroup: "inbox"), .last(5, inGroup: "inbox"),
        .window(offset: 3, length: 4, inGroup: "inbox"),
    ])
    func aRangeKeepsItsLengthAndCarriesOnlyItsChanges(range: ViewRange) async throws {
        try await withTemporaryDatabase { db async throws in
            try db.register(Self.byTitle)
            var random = SeededGenerator(state: 99)
            let writer = db.newConnection(name: "writer")
            try Self.write(writer) { txn in
                for index in 0..<12 {
                    try txn.set(
                        Note(title: "m\(index)", folder: "inbox", archived: false), forKey: "n\(index)",
                        inCollection: "notes")
                }
            }
            @Sendable func window(_ txn: ReadTransaction) throws -> [ViewItem] {
                let items = try txn.view(named: "byTitle").items(inGroup: "inbox")
                return Array(items[range.indexes(inGroupOf: items.count)])
            }
            var updates = db.observe(view: "byTitle", range: range).makeAsyncIterator()
            let first = try #require(try await updates.next())
            var rows = try #require(first.rows?["inbox"])
            #expect(rows.count == min(range.length, 12))
            for round in 0..<40 {
                try Self.write(writer) { txn in
                    let key = "n\(Int.random(in: 0..<16, using: &random))"
                    if Int.random(in: 0..<3, using: &random) == 0 {
                        try txn.removeValue(forKey: key, inCollection: "notes")
                    } else {
                        let title = String(UnicodeScalar(UInt8(97 + Int.random(in: 0..<26, using: &random))))
                        try txn.set(
                            Note(title: title, folder: "inbox", archived: false), forKey: key,
                            inCollection: "notes")
                    }
                }
                let expected = try Self.read(writer) { try window($0) }
                guard expected != rows else { continue }
                let update = try #require(try await updates.next())
                #expect(!update.isReload)
                #expect(
                    update.changes.allSatisfy { change in
                        switch change {
                        case .insert(_, let at), .update(_, let at): at.index < range.length
                        case .delete(_, let at): at.index < range.length
                        case .move(_, let from, let to): from.index < range.length && to.index < range.length
                        }
                    })
                rows = try #require(
                    ViewTests.apply(update.changes, to: ["inbox": rows])?["inbox"] ?? [], "round \(round)")
                #expect(rows == expected, "round \(round)")
                #expect(try update.read { try window($0) } == rows)
            }
        }
    }

    /// Re-registering the view (a rebuild) yields a reload; unregistering it throws the typed
    /// error a read of it throws.
    @Test func aRebuildIsAReloadAndAnUnregisteredViewThrows() async throws {
        try await withTemporaryDatabase { db async throws in
            _ = try Self.viewWithOneNote(db)
            var updates = db.observe(view: "byTitle").makeAsyncIterator()
            _ = try await updates.next()
            let reversed = View<Note>(
                name: "byTitle", version: "2", collections: ["notes"],
                group: { _, _, note in note.archived ? nil : note.folder },
                areInIncreasingOrder: { $0.title > $1.title })
            try db.register(reversed)
            let reload = try #require(try await updates.next())
            #expect(reload.isReload && reload.rows == ["inbox": [ViewItem(collection: "notes", key: "n1")]])
            try db.unregister("byTitle")
            await #expect(throws: DatabaseError.self) { _ = try await updates.next() }
        }
    }

    /// A consumer that never reads holds no backlog: the observation does not pin the commit
    /// log, which stays within its retention, and the consumer's next update is a reload with
    /// the rows as they are now.
    @Test func aConsumerThatStopsReadingHoldsNoBacklogAndGetsAReload() async throws {
        var configuration = Configuration()
        configuration.commitLogRetention = 8
        try await withTemporaryDatabase(configuration: configuration) { db async throws in
            try db.register(Self.byTitle)
            let writer = db.newConnection(name: "writer")
            var updates = db.observe(view: "byTitle").makeAsyncIterator()
            _ = try await updates.next()
            var random = SeededGenerator(state: 5)
            for _ in 0..<200 {
                try Self.write(writer) { txn in
                    try txn.set(
                        Self.note(&random), forKey: "n\(Int.random(in: 0..<50, using: &random))",
                        inCollection: "notes")
                }
            }
            #expect(db.commitLogCount <= 8 + 8 / 4 + 1, "\(db.commitLogCount) changesets kept")
            let update = try #require(try await updates.next())
            #expect(update.isReload && update.commit == db.latestCommit)
            #expect(update.rows == (try Self.read(writer) { try Self.rows($0) }))
        }
    }

    /// An index query's keys are yielded first, then again only after a commit that changed
    /// them: commits of values outside the result, or of another collection, yield nothing.
    @Test func anIndexQueryYieldsOnlyWhenItsKeysChange() async throws {
        try await withTemporaryDatabase { db async throws in
            try db.register(IndexTests.people)
            let writer = db.newConnection(name: "writer")
            try Self.write(writer) {
                try $0.set(Person(city: "Oslo", age: 40), forKey: "ann", inCollection: "people")
            }
            // A consumer that waits all along, so that a yield of unchanged keys would be seen.
            let (yields, yielded) = AsyncStream<[String]>.makeStream()
            let consumer = Task {
                for try await keys in db.observe(index: "people", where: "age >= ?", [18], orderBy: "age") {
                    yielded.yield(keys.map(\.key))
                }
            }
            defer { consumer.cancel() }
            var results = yields.makeAsyncIterator()
            #expect(await results.next() == ["ann"])
            // Neither a minor, nor another collection, nor a change that keeps the order
            // changes the keys.
            try Self.write(writer) {
                try $0.set(Person(city: "Oslo", age: 9), forKey: "kid", inCollection: "people")
            }
            try Self.write(writer) { try $0.set(Item(title: "x"), forKey: "x", inCollection: "other") }
            try Self.write(writer) {
                try $0.set(Person(city: "Rome", age: 41), forKey: "ann", inCollection: "people")
            }
            try Self.write(writer) {
                try $0.set(Person(city: "Oslo", age: 30), forKey: "bob", inCollection: "people")
            }
            #expect(await results.next() == ["bob", "ann"])
            try Self.write(writer) { try $0.removeValue(forKey: "ann", inCollection: "people") }
            #expect(await results.next() == ["bob"])
        }
    }

    /// A full-text search's keys, the same way.
    @Test func aSearchYieldsOnlyWhenItsKeysChange() async throws {
        try await withTemporaryDatabase { db async throws in
            try db.register(SearchResultsViewTests.text)
            let writer = db.newConnection(name: "writer")
            try Self.write(writer) {
                try $0.set(Article(title: "Swift", body: "actors"), forKey: "a1", inCollection: "articles")
            }
            var results = db.observe(search: "articleText", matching: "swift").makeAsyncIterator()
            #expect(try await results.next()?.map(\.key) == ["a1"])
            try Self.write(writer) {
                try $0.set(Article(title: "Rust", body: "borrowing"), forKey: "a2", inCollection: "articles")
            }
            try Self.write(writer) {
                try $0.set(
                    Article(title: "Go", body: "swift goroutines"), forKey: "a3", inCollection: "articles")
            }
            #expect(try await results.next().map { Set($0.map(\.key)) } == ["a1", "a3"])
        }
    }

    /// Observations of a view a commit does not touch cost that commit nothing per
    /// observation: 1,000 of them, and 100 commits of another view's values, wake none (and a
    /// commit of the observed view wakes each once).
    @Test func commitsWakeOnlyTheObservationsOfTheViewsTheyChange() async throws {
        try await withTemporaryDatabase { db async throws in
            let other = View<Item>(
                name: "items", version: "1", collections: ["items"], group: { _, _, _ in "all" },
                areInIncreasingOrder: { $0.title < $1.title })
            try db.register(Self.byTitle, other)
            let writer = db.newConnection(name: "writer")
            var observations: [ViewObservation.Iterator] = []
            for _ in 0..<1_000 {
                var iterator = db.observe(view: "byTitle").makeAsyncIterator()
                _ = try await iterator.next()
                observations.append(iterator)
            }
            let before = db.debugCounters.value(.observationsWoken)
            for index in 0..<100 {
                try Self.write(writer) {
                    try $0.set(Item(title: "\(index)"), forKey: "\(index)", inCollection: "items")
                }
            }
            #expect(db.debugCounters.value(.observationsWoken) == before)
            try Self.write(writer) {
                try $0.set(
                    Note(title: "a", folder: "inbox", archived: false), forKey: "n", inCollection: "notes")
            }
            #expect(db.debugCounters.value(.observationsWoken) == before + 1_000)
            observations.removeAll()
        }
    }

    /// An observation waiting for its next update holds no snapshot: a view that commits do not
    /// touch does not keep checkpoints from completing, nor the WAL from being reset.
    @Test func anObservationWaitingForAnUpdatePinsNothing() async throws {
        try await withTemporaryDatabase { db async throws in
            let writer = try Self.viewWithOneNote(db)
            var updates = db.observe(view: "byTitle").makeAsyncIterator()
            let first = try #require(try await updates.next())
            // While the consumer holds its update, the update's snapshot is held.
            #expect(
                db.snapshotRecords().records.contains { $0.name == "observe(view: byTitle)" && $0.isBookmark }
            )
            // Asking for the next one releases it: the next commit of the view wakes it.
            let waiting = Task { [updates] in
                var updates = updates
                return try await updates.next()?.commit
            }
            try await Self.eventually("the observation's snapshot released") {
                !db.snapshotRecords().records.contains {
                    $0.name == "observe(view: byTitle)" && $0.snapshot != nil
                }
            }
            for index in 0..<20 {
                try Self.write(writer) {
                    try $0.set(Item(title: "\(index)"), forKey: "\(index)", inCollection: "other")
                }
            }
            #expect(try db.checkpoint(.truncate).isComplete)
            try Self.write(writer) {
                try $0.set(
                    Note(title: "c", folder: "inbox", archived: false), forKey: "n2", inCollection: "notes")
            }
            #expect(try await waiting.value == db.latestCommit)
            #expect(first.commit < db.latestCommit)
        }
    }

    /// Cancelling the task that iterates ends the observation and releases its bookmark: the
    /// WAL can be reset again. A commit that touches no observed view wakes no observation.
    @Test func cancellingReleasesTheBookmarkAndUntouchedViewsAreNotWoken() async throws {
        try await withTemporaryDatabase { db async throws in
            let writer = try Self.viewWithOneNote(db)
            let started = AsyncStream<Void>.makeStream()
            let task = Task {
                var count = 0
                for try await _ in db.observe(view: "byTitle") {
                    count += 1
                    started.continuation.yield()
                }
                return count
            }
            var iterator = started.stream.makeAsyncIterator()
            await iterator.next()
            #expect(db.snapshotRecords().records.contains { $0.name == "observe(view: byTitle)" })
            for index in 0..<5 {
                try Self.write(writer) {
                    try $0.set(Item(title: "\(index)"), forKey: "x\(index)", inCollection: "other")
                }
            }
            task.cancel()
            #expect(try await task.value == 1)
            // Its connection is gone with it.
            try await Self.eventually("the observation's connection released") {
                !db.snapshotRecords().records.contains { $0.name == "observe(view: byTitle)" }
            }
            #expect(try db.checkpoint(.truncate).isComplete)
        }
    }
}
