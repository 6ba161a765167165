import Foundation
import Testing

@testable import SnapshotDB

struct Person: Codable, Sendable, Equatable {
    var city: String
    var age: Int
    var score: Double?
}

struct Article: Codable, Sendable {
    var title: String
    var body: String
}

/// Secondary indexes and full-text search, kept by every commit and queried at a snapshot.
@Suite("Secondary indexes and full-text search")
struct IndexTests {
    static let people = SecondaryIndex<Person>(
        name: "people", version: "1", collections: ["people"],
        columns: [.text("city"), .integer("age"), .real("score")],
        extract: { _, _, person in
            var columns: [String: IndexValue] = ["city": .text(person.city), "age": .integer(person.age)]
            if let score = person.score { columns["score"] = .real(score) }
            return columns
        })

    @Test func queriesSeeTheTransactionsCommit() throws {
        try withTemporaryDatabase { db throws in
            try db.register(Self.people)
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            try writer.readWrite { txn in
                try txn.set(Person(city: "Oslo", age: 30, score: 1.5), forKey: "ada", inCollection: "people")
                try txn.set(Person(city: "Oslo", age: 41, score: nil), forKey: "bo", inCollection: "people")
                try txn.set(Person(city: "Bergen", age: 35, score: 2.5), forKey: "cy", inCollection: "people")
                try txn.set(Person(city: "Oslo", age: 17, score: nil), forKey: "di", inCollection: "people")
            }
            try ui.beginLongLivedReadTransaction()
            try writer.readWrite { try $0.removeValue(forKey: "bo", inCollection: "people") }
            try ui.read { txn throws in
                let index = try txn.index(named: "people")
                let keys = try index.keys(
                    where: "city = ? AND age >= ?", ["Oslo", 30], orderBy: "age DESC", limit: 20)
                #expect(keys.map(\.key) == ["bo", "ada"], "the bookmark still sees bo")
                #expect(try index.count(where: "age < ?", [18]) == 1)
                #expect(try index.count(where: "score IS NULL") == 2)
                #expect(try index.keys(where: "age > ?", [0], orderBy: "age", limit: 1).map(\.key) == ["di"])
                let plan = try index.explain(where: "city = ?", orderBy: "city")
                #expect(plan.contains("INDEX"), "\(plan)")
            }
            try ui.beginLongLivedReadTransaction()
            #expect(try ui.read { try $0.index(named: "people").count(where: "city = ?", ["Oslo"]) } == 2)
        }
    }

    @Test(arguments: [
        "1; DROP TABLE snapshotdb_values", "key = ?", "x IN (SELECT key FROM snapshotdb_values)",
        "city = ? -- and the rest", "age > 1 /* comment */", "random() > 0", "age >",
    ])
    func hostileFragmentsAreRefusedAndChangeNothing(_ fragment: String) throws {
        try withTemporaryDatabase { db throws in
            try db.register(Self.people)
            let writer = db.newConnection(name: "writer")
            try writer.readWrite {
                try $0.set(Person(city: "Oslo", age: 30), forKey: "ada", inCollection: "people")
            }
            let before = db.latestCommit
            try writer.read { txn throws in
                expectError(.invalidQuery) { try txn.index(named: "people").keys(where: fragment, ["x"]) }
                expectError(.invalidQuery) {
                    try txn.index(named: "people").keys(where: "age > ?", [1], orderBy: fragment)
                }
            }
            #expect(db.latestCommit == before)
            #expect(try writer.read { try $0.count(inCollection: "people") } == 1)
            expectError(.invalidQuery) {
                try writer.read { try $0.index(named: "people").count(where: "age > ?", [1, 2]) }
            }
        }
    }

    /// Random commits; after each, every query equals a brute-force filter of the values at the
    /// same snapshot, also for a bookmark held across several commits.
    @Test(arguments: [11, 12]) func queriesEqualABruteForceFilter(seed: UInt64) throws {
        var random = SeededGenerator(state: seed)
        try withTemporaryDatabase { db throws in
            try db.register(Self.people)
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            let cities = ["Oslo", "Bergen", "Tromsø"]
            try ui.beginLongLivedReadTransaction()
            for round in 0..<40 {
                try writer.readWrite { txn in
                    for _ in 0..<Int.random(in: 1...5, using: &random) {
                        let key = "p\(Int.random(in: 0..<30, using: &random))"
                        if Int.random(in: 0..<4, using: &random) == 0 {
                            try txn.removeValue(forKey: key, inCollection: "people")
                        } else {
                            try txn.set(
                                Person(
                                    city: cities.randomElement(using: &random)!,
                                    age: Int.random(in: 10..<70, using: &random),
                                    score: nil), forKey: key, inCollection: "people")
                        }
                    }
                    if round == 25 { try txn.removeAll(inCollection: "people") }
                }
                if round % 3 == 0 { try ui.beginLongLivedReadTransaction() }
                try ui.read { txn throws in
                    let people = try txn.values(inCollection: "people", as: Person.self)
                    let index = try txn.index(named: "people")
                    let matching = people.filter { $0.value.city == "Oslo" && $0.value.age >= 40 }
                    let found = try index.keys(where: "city = ? AND age >= ?", ["Oslo", 40], orderBy: "age")
                    #expect(Set(found.map(\.key)) == Set(matching.map(\.key)), "seed \(seed) round \(round)")
                    let ages = Dictionary(uniqueKeysWithValues: matching.map { ($0.key, $0.value.age) })
                    let foundAges = found.compactMap { ages[$0.key] }
                    #expect(foundAges == foundAges.sorted(), "ordered by age")
                    #expect(
                        try index.count(where: "age < ?", [30]) == people.filter { $0.value.age < 30 }.count)
                }
            }
        }
    }

    @Test func aNewVersionRebuildsTheIndex() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            try writer.readWrite {
                try $0.set(Person(city: "Oslo", age: 30), forKey: "ada", inCollection: "people")
            }
            try db.register(Self.people)
            // The writer's handle keeps the statements of the index's first columns.
            try writer.readWrite {
                try $0.set(Person(city: "Bergen", age: 52), forKey: "bo", inCollection: "people")
            }
            let byAge = SecondaryIndex<Person>(
                name: "people", version: "2", collections: ["people"], columns: [.integer("decade")],
                extract: { _, _, person in ["decade": .integer(person.age / 10)] })
            try db.register(byAge)
            #expect(
                try writer.read { try $0.index(named: "people").keys(where: "decade = ?", [3]).map(\.key) }
                    == ["ada"])
            // Its writes now fill the new columns, not the old ones.
            try writer.readWrite {
                try $0.set(Person(city: "Oslo", age: 38), forKey: "cy", inCollection: "people")
                try $0.set(Person(city: "Bergen", age: 61), forKey: "bo", inCollection: "people")
            }
            #expect(
                try writer.read { try $0.index(named: "people").keys(where: "decade = ?", [3]).map(\.key) }
                    == ["ada", "cy"])
            #expect(
                try writer.read { try $0.index(named: "people").keys(where: "decade > ?", [4]).map(\.key) }
                    == ["bo"])
        }
    }

    static let articles = FullTextSearch<Article>(
        name: "articles", version: "1", collections: ["articles"], columns: ["title", "body"],
        extract: { _, _, article in ["title": article.title, "body": article.body] })

    struct Chore: Codable, Sendable {
        var title: String
        var done: Bool
        var due: Date?
        var estimate: Double?
    }

    /// Booleans, dates and optionals from properties and variables: `.bool`, `.date` and the
    /// optional initializers store what literals do, `nil` as `NULL`, and query arguments built
    /// the same way find them.
    @Test func booleansDatesAndOptionalsFromVariables() throws {
        let chores = SecondaryIndex<Chore>(
            name: "chores", version: "1", collections: ["chores"],
            columns: [.integer("done"), .real("due"), .real("estimate"), .text("title")],
            extract: { _, _, chore in
                [
                    "done": .bool(chore.done), "due": .date(chore.due),
                    "estimate": IndexValue(chore.estimate),
                    "title": IndexValue(chore.title),
                ]
            })
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        try withTemporaryDatabase { db throws in
            try db.register(chores)
            try db.newConnection(name: "writer").readWrite { txn in
                try txn.set(
                    Chore(title: "a", done: false, due: now, estimate: 1.5), forKey: "a",
                    inCollection: "chores")
                try txn.set(
                    Chore(title: "b", done: false, due: now.addingTimeInterval(3_600), estimate: nil),
                    forKey: "b",
                    inCollection: "chores")
                try txn.set(
                    Chore(title: "c", done: true, due: nil, estimate: 2), forKey: "c", inCollection: "chores")
            }
            try db.newConnection(name: "reader").read { txn throws in
                let index = try txn.index(named: "chores")
                let showDone = false
                let before: Date? = now.addingTimeInterval(60)
                #expect(
                    try index.keys(where: "done = ? AND due < ?", [.bool(showDone), .date(before)]).map(\.key)
                        == ["a"])
                #expect(try index.keys(where: "due IS NULL").map(\.key) == ["c"])
                #expect(try index.keys(where: "estimate IS NULL").map(\.key) == ["b"])
                #expect(try index.keys(where: "done = ?", [true]).map(\.key) == ["c"])
                let missing: String? = nil
                #expect(try index.keys(where: "title IS ?", [IndexValue(missing)]).isEmpty)
            }
        }
    }

    /// Text typed into a search box, with FTS5's punctuation and operators in it, is searched as
    /// words through `query(forText:)`; raw, the same text is refused as `invalidQuery`.
    @Test func searchBoxTextIsSearchedAsWords() throws {
        try withTemporaryDatabase { db throws in
            try db.register(Self.articles)
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                try txn.set(
                    Article(
                        title: "Mail", body: "send an e-mail about C++, don't stop: swift NOT OR \"quoted\""),
                    forKey: "a1", inCollection: "articles")
                try txn.set(
                    Article(title: "Other", body: "nothing here"), forKey: "a2", inCollection: "articles")
            }
            try writer.read { txn throws in
                let search = try txn.search(named: "articles")
                for typed in [
                    "e-mail", "C++", "don't", "swift:", "NOT", "stop OR", "\"quoted", "about  C++ ",
                ] {
                    expectError(.invalidQuery) { try search.keys(matching: typed) }
                    let query = SearchReader.query(forText: typed)
                    #expect(try search.keys(matching: query).map(\.key) == ["a1"], "\(typed) as \(query)")
                }
                #expect(try search.keys(matching: SearchReader.query(forText: "   ")) == [])
                #expect(
                    try search.keys(matching: SearchReader.query(forText: "e-mail\0C++")).map(\.key) == ["a1"]
                )
                #expect(try search.keys(matching: SearchReader.query(forText: "e-mail nothing")) == [])
                #expect(
                    try search.keys(matching: SearchReader.query(forText: "sen", prefix: true)).map(\.key)
                        == ["a1"])
                #expect(try search.keys(matching: SearchReader.query(forText: "sen")) == [])
            }
        }
    }

    /// An indexed text whose value changes only in Unicode normalization ("Café" composed, then
    /// decomposed: equal under Swift's `==`, two strings to SQLite) is written again, in a
    /// secondary index and in a full-text index: the indexes hold the new bytes.
    @Test func textThatChangesOnlyInNormalizationIsWrittenAgain() throws {
        let composed = "Caf\u{E9}"
        let decomposed = "Cafe\u{301}"
        try withTemporaryDatabase { db throws in
            try db.register(Self.people)
            try db.register(Self.articles)
            let writer = db.newConnection(name: "writer")
            for city in [composed, decomposed] {
                try writer.readWrite { txn in
                    try txn.set(
                        Person(city: city, age: 30, score: nil), forKey: "ada", inCollection: "people")
                    try txn.set(Article(title: city, body: "menu"), forKey: "a", inCollection: "articles")
                }
            }
            try writer.read { txn throws in
                let people = try txn.index(named: "people")
                #expect(try people.keys(where: "city = ?", [.text(decomposed)]).map(\.key) == ["ada"])
                #expect(try people.keys(where: "city = ?", [.text(composed)]).isEmpty)
            }
            let titles = try sqlite3(db.path, "SELECT hex(title) FROM snapshotdb_x8_articles_fts;")
            #expect(titles == Array(decomposed.utf8).map { String(format: "%02X", $0) }.joined() + "\n")
        }
    }

    @Test func fullTextSearchRanksSnippetsAndRefusesBadQueries() throws {
        try withTemporaryDatabase { db throws in
            try db.register(Self.articles)
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                try txn.set(
                    Article(title: "Swift and SQLite", body: "Using SQLite from Swift with snapshots"),
                    forKey: "a", inCollection: "articles")
                try txn.set(
                    Article(title: "Gardening", body: "Tomatoes like the sun; swift birds do not"),
                    forKey: "b", inCollection: "articles")
                try txn.set(
                    Article(title: "Other", body: "nothing here"), forKey: "c", inCollection: "articles")
            }
            try writer.read { txn throws in
                let search = try txn.search(named: "articles")
                #expect(try search.keys(matching: "swift").map(\.key) == ["a", "b"])
                #expect(try search.keys(matching: "swift NEAR/5 sqlite").map(\.key) == ["a"])
                let snippets = try search.snippets(matching: "tomatoes", column: "body")
                #expect(snippets.first?.item.key == "b")
                #expect(snippets.first?.text.contains("[Tomatoes]") == true)
                expectError(.invalidQuery) { try search.keys(matching: "swift AND (") }
                expectError(.invalidQuery) { try search.snippets(matching: "swift", column: "nope") }
            }
            try writer.readWrite { txn in
                try txn.removeValue(forKey: "a", inCollection: "articles")
                try txn.set(Article(title: "Swift", body: "again"), forKey: "c", inCollection: "articles")
            }
            #expect(
                try writer.read { try $0.search(named: "articles").keys(matching: "swift").map(\.key) }
                    .sorted() == ["b", "c"])
        }
    }

    /// Values take their column's type by SQLite's affinity, as the README says: numbers and
    /// numeric text become the column's number, an integer becomes text in a text column, text
    /// that is not a number stays text in a numeric column and sorts above every number, and a
    /// NaN real is stored as NULL. Fragments take numbered and named parameters too.
    @Test func columnValuesFollowSQLiteAffinity() throws {
        try withTemporaryDatabase { db throws in
            let extracted: [String: [String: IndexValue]] = [
                "a": ["n": .text("42"), "r": .integer(7), "t": .integer(5)],
                "b": ["n": .real(3.0), "r": .real(.nan), "t": .text("x")],
                "c": ["n": .text("abc"), "r": .real(1.5), "t": .null],
            ]
            let mixed = SecondaryIndex<Person>(
                name: "mixed", version: "1", collections: ["people"],
                columns: [.integer("n"), .real("r"), .text("t")],
                extract: { _, key, _ in extracted[key] ?? [:] })
            try db.register(mixed)
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                for key in ["a", "b", "c"] {
                    try txn.set(Person(city: "Oslo", age: 1), forKey: key, inCollection: "people")
                }
            }
            try writer.read { txn throws in
                let index = try txn.index(named: "mixed")
                #expect(try index.keys(where: "n = ?", [42]).map(\.key) == ["a"], "numeric text became 42")
                #expect(try index.keys(where: "n = ?", [3]).map(\.key) == ["b"], "3.0 became 3")
                #expect(
                    try index.keys(where: "n > ?", [1_000_000]).map(\.key) == ["c"],
                    "text sorts above numbers")
                #expect(try index.keys(where: "r IS NULL").map(\.key) == ["b"], "NaN is stored as NULL")
                #expect(try index.keys(where: "r > ?", [5]).map(\.key) == ["a"])
                #expect(try index.keys(where: "t = ?", ["5"]).map(\.key) == ["a"], "5 became '5'")
                #expect(try index.keys(where: "n >= ?2 AND r < ?1", [2, 3]).map(\.key) == ["c"])
                #expect(try index.keys(where: "r >= ?2 AND r < ?1", [8, 1]).map(\.key) == ["a", "c"])
                #expect(try index.keys(where: "t = :t", ["x"]).map(\.key) == ["b"])
            }
        }
    }

    /// A column named like one the index's tables have already is refused with `misuse` before
    /// anything is created (it was SQLite's `duplicate column name: id`, or FTS5's `reserved
    /// fts5 column name: rank`), and an empty `where:` fragment is `invalidQuery` saying what to
    /// pass instead (it was SQLite's `near ")": syntax error`).
    @Test func reservedColumnNamesAndAnEmptyFragmentAreRefused() throws {
        try withTemporaryDatabase { db throws in
            let before = db.latestCommit
            for name in ["id", "ID", "key", "collection"] {
                let index = SecondaryIndex<Person>(
                    name: "people", version: "1", collections: ["people"], columns: [.text(name)],
                    extract: { _, _, person in [name: .text(person.city)] })
                let error = expectError(.misuse) { try db.register(index) }
                #expect(
                    error?.message.hasPrefix("index column \"\(name)\" must be") == true, "\(error as Any)")
                #expect(error?.message.contains("'id'") == true)
            }
            for name in ["rank", "rowid", "RANK"] {
                let search = FullTextSearch<Article>(
                    name: "articles", version: "1", collections: ["articles"], columns: [name],
                    extract: { _, _, article in [name: article.title] })
                let error = expectError(.misuse) { try db.register(search) }
                #expect(
                    error?.message.hasPrefix("full-text column \"\(name)\" must be") == true,
                    "\(error as Any)")
            }
            #expect(db.latestCommit == before)
            #expect(db.registeredExtensions.isEmpty)
            let ages = SecondaryIndex<Person>(
                name: "ages", version: "1", collections: ["people"], columns: [.integer("age")],
                extract: { _, _, person in ["age": .integer(person.age)] })
            try db.register(ages)
            try db.newConnection(name: "reader").read { txn in
                let index = try txn.index(named: "ages")
                for fragment in ["", "  \n"] {
                    let error = expectError(.invalidQuery) { try index.keys(where: fragment) }
                    #expect(error?.message.contains("pass \"1\"") == true, "\(error as Any)")
                }
                #expect(try index.keys(where: "1").isEmpty)
            }
        }
    }

    /// A view registered under the name of an index this process keeps is `misuse` (it replaced
    /// the index, dropping its tables); after `unregister` the name is free. The index stays,
    /// with its rows.
    @Test func anotherKindUnderARegisteredNameIsRefused() throws {
        try withTemporaryDatabase { db throws in
            let people = SecondaryIndex<Person>(
                name: "people", version: "1", collections: ["people"], columns: [.text("city")],
                extract: { _, _, person in ["city": .text(person.city)] })
            try db.register(people)
            let writer = db.newConnection(name: "writer")
            try writer.readWrite {
                try $0.set(Person(city: "Oslo", age: 30), forKey: "p1", inCollection: "people")
            }
            let commit = db.latestCommit
            let view = View<Person>(
                name: "people", version: "1", collections: ["people"], group: { _, _, person in person.city },
                areInIncreasingOrder: { $0.age < $1.age })
            let error = expectError(.misuse) { try db.register(view) }
            #expect(
                error?.message
                    == "extension 'people' is registered in this process as a secondary index; unregister it "
                    + "before registering a view under its name", "\(error as Any)")
            #expect(db.latestCommit == commit)
            #expect(
                try writer.read { try $0.index(named: "people").keys(where: "city = ?", ["Oslo"]).count } == 1
            )
            try db.unregister("people")
            try db.register(view)
            #expect(
                try writer.read { try $0.view(named: "people").items(inGroup: "Oslo").map(\.key) } == ["p1"])
        }
    }

    /// An index or a full-text index of no columns is refused before anything is created (it
    /// was a raw SQL error, or an index whose every query found nothing).
    @Test func indexesOfNoColumnsAreRefused() throws {
        try withTemporaryDatabase { db throws in
            let before = db.latestCommit
            let index = SecondaryIndex<Person>(
                name: "none", version: "1", collections: ["people"], columns: [], extract: { _, _, _ in [:] })
            let indexError = expectError(.misuse) { try db.register(index) }
            #expect(
                indexError?.message == "a secondary index needs at least one column", "\(indexError as Any)")
            let search = FullTextSearch<Article>(
                name: "none", version: "1", collections: ["articles"], columns: [],
                extract: { _, _, _ in [:] })
            let searchError = expectError(.misuse) { try db.register(search) }
            #expect(
                searchError?.message == "a full-text index needs at least one column", "\(searchError as Any)"
            )
            #expect(db.latestCommit == before)
        }
    }

    /// Registers ``people`` and a full-text index "articles" of titles, writes one person
    /// ("ada", of Oslo, 30) and an article per title (by key), and returns the writer.
    static func peopleAndTitles(_ db: Database, titles: [String: String]) throws -> Connection {
        try db.register(people)
        try db.register(
            FullTextSearch<Article>(
                name: "articles", version: "1", collections: ["articles"], columns: ["title"],
                extract: { _, _, article in ["title": article.title] }))
        let writer = db.newConnection(name: "writer")
        try writer.readWrite { txn in
            try txn.set(Person(city: "Oslo", age: 30), forKey: "ada", inCollection: "people")
            for (key, title) in titles {
                try txn.set(Article(title: title, body: ""), forKey: key, inCollection: "articles")
            }
        }
        return writer
    }

    /// SQLite reads a negative `LIMIT` as no limit; a negative limit was silently no rows. It is
    /// `misuse` now, for index queries and searches alike.
    @Test func negativeLimitsAreRefused() throws {
        try withTemporaryDatabase { db throws in
            let writer = try Self.peopleAndTitles(db, titles: ["a": "Swift"])
            try writer.read { txn throws in
                let index = try txn.index(named: "people")
                expectError(.misuse) { try index.keys(where: "age > ?", [0], limit: -1) }
                #expect(try index.keys(where: "age > ?", [0], limit: 0).isEmpty)
                #expect(try index.keys(where: "age > ?", [0], limit: nil).map(\.key) == ["ada"])
                let articles = try txn.search(named: "articles")
                expectError(.misuse) { try articles.keys(matching: "swift", limit: -1) }
                expectError(.misuse) { try articles.snippets(matching: "swift", column: "title", limit: -5) }
                #expect(try articles.keys(matching: "swift", limit: .max).map(\.key) == ["a"])
            }
        }
    }

    /// A bookmark taken before this process unregistered an index still finds it in its
    /// snapshot of the file: the error said another process had registered it.
    @Test func aBookmarkOlderThanAnUnregistrationIsToldWhatHappened() throws {
        try withTemporaryDatabase { db throws in
            try db.register(Self.people)
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            try db.unregister("people")
            let error = expectError(.unknownExtension) { try ui.read { try $0.index(named: "people") } }
            #expect(
                error?.message.contains("this process unregistered it after the snapshot") == true,
                "\(error as Any)")
            try ui.beginLongLivedReadTransaction()
            let after = expectError(.unknownExtension) { try ui.read { try $0.index(named: "people") } }
            #expect(after?.message == "no secondary index named 'people' is registered", "\(after as Any)")
        }
    }

    /// SQLite reads SQL text and FTS5 a query up to the first NUL: `"urg\0ent"` searched for
    /// "urg" and a fragment lost what followed its NUL, unseen. Both are `invalidQuery` now.
    @Test func queriesHoldingNULAreRefused() throws {
        try withTemporaryDatabase { db throws in
            let writer = try Self.peopleAndTitles(db, titles: ["a": "urgent", "b": "urg"])
            try writer.read { txn throws in
                let index = try txn.index(named: "people")
                expectError(.invalidQuery) { try index.keys(where: "age > ?\u{0} OR 1", [40]) }
                expectError(.invalidQuery) {
                    try index.keys(where: "age > ?", [0], orderBy: "age\u{0}, city")
                }
                let articles = try txn.search(named: "articles")
                let error = expectError(.invalidQuery) { try articles.keys(matching: "urg\u{0}ent") }
                #expect(error?.message.contains("NUL") == true, "\(error as Any)")
                #expect(try articles.keys(matching: "urgent").map(\.key) == ["a"])
            }
        }
    }
}
