import Foundation
import SnapshotDBLocking
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDB

/// Queries whose cost comes from their input are bounded, typed and stoppable: every FTS5
/// syntax error is `invalidQuery` with a short message, long searches are refused before SQLite
/// sees them, a read past its time limit is `interrupted`, and cancelling an `async` read stops
/// SQLite mid-statement; neither harms the connection or its bookmark.
@Suite("Bounded and cancellable queries")
struct QueryBoundsTests {
    static func articles(_ db: Database, count: Int = 50) throws -> Connection {
        try db.register(IndexTests.articles)
        let writer = db.newConnection(name: "writer")
        try writer.readWrite { txn in
            for index in 0..<count {
                try txn.set(
                    Article(title: "paris \(index)", body: "london word\(index) body"), forKey: "a\(index)",
                    inCollection: "articles")
            }
        }
        return writer
    }

    @Test func everyFTS5SyntaxErrorIsAnInvalidQueryWithAShortMessage() throws {
        try withTemporaryDatabase { db throws in
            let writer = try Self.articles(db)
            try writer.read { txn throws in
                let search = try txn.search(named: "articles")
                let bad = [
                    "\"paris", "paris\"", "\"", "*", "-paris", "nosuch:paris", "paris AND", "(paris",
                    "NEAR(a b",
                    "a:b:c", "^", "paris OR", "NOT paris", "", "   ", "+", "x NEAR/ y",
                ]
                for query in bad {
                    let error = expectError(.invalidQuery) { try search.keys(matching: query) }
                    #expect(
                        error?.message.contains("not a valid FTS5 query") == true,
                        "\(query): \(String(describing: error))")
                    expectError(.invalidQuery) { try search.snippets(matching: query, column: "body") }
                }
                // Valid ones still work: a prefix, a phrase, a column filter, NEAR.
                #expect(try search.keys(matching: "par*").count == 50)
                #expect(try search.keys(matching: "\"paris 7\"").map(\.key) == ["a7"])
                #expect(try search.keys(matching: "body:word7").map(\.key) == ["a7"])
                #expect(try search.keys(matching: "paris NEAR/2 7").map(\.key) == ["a7"])
            }
        }
    }

    @Test func longSearchesAreRefusedBeforeSQLiteSeesThemAndTheMessageStaysShort() throws {
        try withTemporaryDatabase { db throws in
            let writer = try Self.articles(db)
            try writer.read { txn throws in
                let search = try txn.search(named: "articles")
                let huge = String(repeating: "paris ", count: 100_000 / 6)
                let tooLong = expectError(.invalidQuery) { try search.keys(matching: huge) }
                #expect(tooLong?.message.contains("a search takes at most 1024") == true)
                #expect((tooLong?.message.utf8.count ?? .max) < 400, "the message grew with the query")
                let manyTerms = Array(repeating: "a", count: SearchReader.maximumQueryTerms + 1).joined(
                    separator: " ")
                let terms = expectError(.invalidQuery) { try search.keys(matching: manyTerms) }
                #expect(terms?.message.contains("65 terms") == true)
                let atTheBound = Array(repeating: "paris", count: SearchReader.maximumQueryTerms).joined(
                    separator: " ")
                #expect(try search.keys(matching: atTheBound).count == 50)
                // A bad query's message quotes a bounded prefix too.
                let badLong = "\"" + String(repeating: "x", count: 900)
                let message = expectError(.invalidQuery) { try search.keys(matching: badLong) }?.message ?? ""
                #expect(message.utf8.count < 400 && message.contains("(901 bytes)"), "\(message)")
            }
            // A search-results view's query is held to the same bounds at registration.
            let view = View<Article>(
                name: "byTitle", version: "1", collections: ["articles"], group: { _, _, _ in "all" },
                areInIncreasingOrder: { $0.title < $1.title })
            try db.register(view)
            let results = SearchResultsView(
                name: "found", parent: view, search: IndexTests.articles, version: "1",
                query: String(repeating: "x ", count: 600))
            expectError(.invalidQuery) { try db.register(results) }
            #expect(!db.registeredExtensions.contains("found"))
        }
    }

    /// An index fragment that names the row id says so, in the user's words; a long fragment
    /// is refused before SQLite compiles it, and messages quote a bounded prefix.
    @Test func indexFragmentsGetTypedErrorsInTheUsersTermsAndAreBounded() throws {
        try withTemporaryDatabase { db throws in
            let writer = try Self.people(db)
            try writer.read { txn throws in
                let index = try txn.index(named: "people")
                for fragment in ["rowid > 0", "oid = 1", "_rowid_ < 5"] {
                    let error = expectError(.invalidQuery) { try index.count(where: fragment) }
                    let message = error?.message ?? ""
                    #expect(message.contains("the row id") && message.contains("rowid"), "\(message)")
                    #expect(!message.contains("column id"), "\(message)")
                }
                let long = "age > 0" + String(repeating: " AND age > 0", count: 400)
                let tooLong = expectError(.invalidQuery) { try index.count(where: long) }
                #expect(tooLong?.message.contains("at most 4096") == true)
                #expect((tooLong?.message.utf8.count ?? .max) < 400)
                let wrong = "nosuch = 1 AND " + String(repeating: "age > 0 AND ", count: 200) + "age > 0"
                let refused = expectError(.invalidQuery) { try index.count(where: wrong) }
                #expect((refused?.message.utf8.count ?? .max) < 400, "\(String(describing: refused))")
                // The same index answers a well-formed query afterwards.
                #expect(try index.count(where: "age < ?", [.integer(10)]) == 10)
            }
        }
    }

    /// A query that takes seconds: a secondary index fragment that lengthens a string nine
    /// times for every row. About 5 s of work without a limit on this machine's kind (1.1 s with one level fewer; six
    /// levels once took 78 ms here, less than the 100 ms limit the tests set): each level of
    /// `replace` makes the string about four times longer.
    static let slowFragment =
        "length("
        + (0..<9).reduce("city") { inner, _ in "replace(\(inner), 'a', city || city)" } + ") > 0"

    static func people(_ db: Database) throws -> Connection {
        try db.register(IndexTests.people)
        let writer = db.newConnection(name: "writer")
        try writer.readWrite { txn in
            for index in 0..<2_000 {
                try txn.set(
                    Person(city: "amsterdam-\(index)", age: index, score: nil), forKey: "p\(index)",
                    inCollection: "people")
            }
        }
        return writer
    }

    @Test func aReadPastItsTimeLimitIsInterruptedAndHarmsNeitherTheConnectionNorItsBookmark() throws {
        try withTemporaryDatabase { db throws in
            let writer = try Self.people(db)
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            let bookmark = ui.snapshot
            try writer.readWrite {
                try $0.set(Person(city: "x", age: 1, score: nil), forKey: "new", inCollection: "people")
            }

            let started = ContinuousClock.now
            let error = expectError(.interrupted) {
                try ui.read(timeLimit: .milliseconds(100)) { txn in
                    try txn.index(named: "people").count(where: Self.slowFragment)
                }
            }
            #expect(ContinuousClock.now - started < .seconds(30), "the limit did not stop the query")
            #expect(
                error?.message.contains("time limit of 0.1 seconds") == true, "\(String(describing: error))")
            // The bookmark still reads its commit, and the connection reads on.
            #expect(ui.snapshot == bookmark)
            #expect(try ui.read { try $0.count(inCollection: "people") } == 2_000)
            #expect(
                try ui.read { try $0.index(named: "people").count(where: "age < ?", [.integer(10)]) } == 10)
            // Work that fits the limit is untouched by it.
            #expect(try ui.read(timeLimit: .seconds(30)) { try $0.count(inCollection: "people") } == 2_000)
            try ui.beginLongLivedReadTransaction()
            #expect(try ui.read { try $0.count(inCollection: "people") } == 2_001)
        }
        // The configuration's limit applies to every read; a read-write transaction is never
        // interrupted.
        var configuration = Configuration()
        configuration.readTimeLimit = .milliseconds(100)
        try withTemporaryDatabase(configuration: configuration) { db throws in
            let writer = try Self.people(db)
            expectError(.interrupted) {
                try writer.read { try $0.index(named: "people").count(where: Self.slowFragment) }
            }
            #expect(try writer.read { try $0.count(inCollection: "people") } == 2_000)
            // A closure that swallows the interrupt still does not return as if it finished:
            // some reads (a view's items) record their error and answer empty.
            expectError(.interrupted) {
                try writer.read { txn in
                    _ = try? txn.index(named: "people").count(where: Self.slowFragment)
                    return 0
                }
            }
        }
    }

    @Test func aNegativeTimeLimitIsMisuseAndTheBodyNeverRuns() async throws {
        try await withTemporaryDatabase { db async throws in
            let ui = db.newConnection(name: "ui")
            var ran = false
            let error = expectError(.misuse) { try ui.read(timeLimit: .milliseconds(-1)) { _ in ran = true } }
            #expect(error?.message.contains("zero or more") == true, "\(String(describing: error))")
            #expect(!ran)
            do {
                _ = try await ui.read(timeLimit: .seconds(-3)) { _ in Issue.record("the body ran") }
                Issue.record("a negative limit was accepted")
            } catch let error as DatabaseError {
                #expect(error.code == .misuse, "\(error)")
            }
            // Zero is a limit, not misuse: the connection reads on.
            #expect(try await ui.read(timeLimit: .zero) { $0.commit } == db.latestCommit)
        }
    }

    @Test func cancellingAnAsyncReadStopsSQLiteMidStatement() async throws {
        try await withTemporaryDirectory { directory in
            let db = try Database(path: directory.appendingPathComponent("cancel.sqlite").path)
            _ = try Self.people(db)
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            let bookmark = ui.snapshot
            // Cancelled from a thread of its own as soon as the closure runs, so that the cancel
            // does not wait for a thread of the cooperative pool (which other tests may hold).
            let started = DispatchSemaphore(value: 0)
            let task = Task {
                try await ui.read { txn in
                    started.signal()
                    return try txn.index(named: "people").count(where: Self.slowFragment)
                }
            }
            let cancelled = Mutex<ContinuousClock.Instant?>(nil)
            let canceller = Thread {
                started.wait()
                cancelled.withLock { $0 = .now }
                task.cancel()
            }
            canceller.start()
            // `CancellationError` once the closure ran means SQLite's progress handler stopped the
            // statement (a statement that ran to its end returns its count); the bound only keeps
            // a broken cancel from passing after the whole query, and is loose for TSan's pace.
            await #expect(throws: CancellationError.self) { try await task.value }
            let cancelledAt = try #require(cancelled.withLock { $0 })
            #expect(ContinuousClock.now - cancelledAt < .seconds(30), "the cancel did not stop the query")
            #expect(ui.snapshot == bookmark)
            #expect(try await ui.read { try $0.count(inCollection: "people") } == 2_000)
        }
    }
}
