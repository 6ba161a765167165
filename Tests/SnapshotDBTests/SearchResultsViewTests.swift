import Foundation
import Testing

@testable import SnapshotDB

/// Search-results views: the items a full-text query matches, in a parent view's order, with
/// row changes on advance.
@Suite("Search-results views")
struct SearchResultsViewTests {
    static let byTitle = View<Article>(
        name: "articlesByTitle", version: "1", collections: ["articles"],
        group: { _, _, article in article.title.hasPrefix("draft") ? nil : "all" },
        areInIncreasingOrder: { $0.title < $1.title })

    static let text = FullTextSearch<Article>(
        name: "articleText", version: "1", collections: ["articles"], columns: ["title", "body"],
        extract: { _, _, article in ["title": article.title, "body": article.body] })

    static let found = SearchResultsView(
        name: "found", parent: byTitle, search: text, version: "1", query: "swift")

    /// The rows the view must hold: the parent's rows (brute force) whose text the index
    /// matches (the index itself is checked against a brute force in ``IndexTests``).
    static func expected(_ txn: ReadTransaction, query: String) throws -> [String: [ViewItem]] {
        let hits = Set(try txn.search(named: "articleText").keys(matching: query, limit: 1_000_000))
        var members: [(ViewItem, Article)] = []
        for (key, article) in try txn.values(inCollection: "articles", as: Article.self)
        where !article.title.hasPrefix("draft") {
            let item = ViewItem(collection: "articles", key: key)
            if hits.contains(item) { members.append((item, article)) }
        }
        guard !members.isEmpty else { return [:] }
        let sorted = members.sorted { lhs, rhs in
            lhs.1.title != rhs.1.title ? lhs.1.title < rhs.1.title : lhs.0 < rhs.0
        }
        return ["all": sorted.map(\.0)]
    }

    static let words = ["swift", "sqlite", "snapshot", "view", "tree", "page", "commit", "garden"]

    static func article(_ random: inout SeededGenerator) -> Article {
        let title =
            (Int.random(in: 0..<8, using: &random) == 0 ? "draft " : "")
            + String(format: "%04d", Int.random(in: 0..<10_000, using: &random))
        let body = (0..<3).map { _ in words.randomElement(using: &random)! }.joined(separator: " ")
        return Article(title: title, body: body)
    }

    /// Random commits (sets that make items match or stop matching, removals, a savepoint that
    /// rolls back); after each advance the view equals the brute force and its row changes turn
    /// the previous rows into the new ones.
    @Test(arguments: [3, 4]) func rowsFollowTheQueryAcrossCommits(seed: UInt64) throws {
        var random = SeededGenerator(state: seed)
        try withTemporaryDatabase { db throws in
            try db.register(Self.text)
            try db.register(Self.found)
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            var previous: [String: [ViewItem]] = [:]
            for round in 0..<25 {
                try writer.readWrite { txn in
                    for _ in 0..<12 {
                        let key = "a\(Int.random(in: 0..<80, using: &random))"
                        if Int.random(in: 0..<5, using: &random) == 0 {
                            try txn.removeValue(forKey: key, inCollection: "articles")
                        } else {
                            try txn.set(Self.article(&random), forKey: key, inCollection: "articles")
                        }
                    }
                    try txn.savepoint { txn in
                        try txn.set(Self.article(&random), forKey: "a0", inCollection: "articles")
                        txn.rollback()
                    }
                }
                let changes = try ui.beginLongLivedReadTransaction()
                try ui.read { txn throws in
                    let view = try txn.view(named: "found")
                    let now = ViewTests.rows(view)
                    #expect(now == (try Self.expected(txn, query: "swift")), "seed \(seed) round \(round)")
                    let rows = try view.changes(for: changes)
                    #expect(ViewRowChange.apply(rows, to: previous) == now, "seed \(seed) round \(round)")
                    previous = now
                }
            }
            #expect(!previous.isEmpty)
        }
    }

    @Test func aNewQueryRebuildsTheViewAndReadersReload() throws {
        try withTemporaryDatabase { db throws in
            try db.register(Self.text)
            try db.register(Self.found)
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                try txn.set(Article(title: "b", body: "swift sqlite"), forKey: "1", inCollection: "articles")
                try txn.set(Article(title: "a", body: "sqlite only"), forKey: "2", inCollection: "articles")
                try txn.set(Article(title: "c", body: "swift only"), forKey: "3", inCollection: "articles")
                try txn.set(Article(title: "draft d", body: "sqlite"), forKey: "4", inCollection: "articles")
            }
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            #expect(
                try ui.read { try $0.view(named: "found").items(inGroup: "all").map(\.key) } == ["1", "3"])
            try db.register(Self.found.searching("sqlite"))
            let changes = try ui.beginLongLivedReadTransaction()
            try ui.read { txn throws in
                let view = try txn.view(named: "found")
                #expect(
                    view.items(inGroup: "all").map(\.key) == ["2", "1"],
                    "in the parent's order; drafts left out")
                #expect(view.requiresReload(for: changes))
            }
            // FTS4's proximity syntax is accepted, as by the search reader.
            try db.register(Self.found.searching("swift NEAR/1 sqlite"))
            try ui.beginLongLivedReadTransaction()
            #expect(try ui.read { try $0.view(named: "found").items(inGroup: "all").map(\.key) } == ["1"])
        }
    }

    @Test func badQueriesAndMissingIndexesAreRefusedAndChangeNothing() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                try txn.set(Article(title: "b", body: "swift"), forKey: "1", inCollection: "articles")
            }
            expectError(.unknownExtension) { try db.register(Self.found) }
            try db.register(Self.text)
            let before = db.latestCommit
            expectError(.invalidQuery) { try db.register(Self.found.searching("swift AND (")) }
            #expect(db.latestCommit == before)
            expectError(.unknownExtension) { try writer.read { try $0.view(named: "found") } }
            #expect(!db.registeredExtensions.contains("found"))
            // Writes go on as if the refused view had never been registered.
            try writer.readWrite { txn in
                try txn.set(Article(title: "c", body: "swift"), forKey: "3", inCollection: "articles")
            }

            try db.register(Self.found)
            expectError(.misuse) { try db.unregister("articleText") }
            try writer.readWrite { txn in
                try txn.set(Article(title: "a", body: "swift too"), forKey: "2", inCollection: "articles")
            }
            #expect(
                try writer.read { try $0.view(named: "found").items(inGroup: "all").map(\.key) } == [
                    "2", "1", "3",
                ])
            try db.unregister("found")
            try db.unregister("articleText")
            #expect(db.registeredExtensions.isEmpty)
        }
    }
}

extension SearchResultsViewTests {
    /// A full-text index a search-results view reads is not rebuilt or replaced under it: alone,
    /// a new version (or another kind under its name) is refused naming the view; registered
    /// together with the view's new version, both follow it.
    @Test func anIndexAViewReadsIsReplacedOnlyTogetherWithTheView() throws {
        try withTemporaryDatabase { db throws in
            try db.register(Self.text)
            try db.register(Self.found)
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                try txn.set(Article(title: "shopping", body: "swift"), forKey: "a1", inCollection: "articles")
                try txn.set(Article(title: "swift", body: "notes"), forKey: "a2", inCollection: "articles")
            }
            let titleOnly = FullTextSearch<Article>(
                name: "articleText", version: "2", collections: ["articles"], columns: ["title"],
                extract: { _, _, article in ["title": article.title] })
            let error = expectError(.misuse) { try db.register(titleOnly) }
            #expect(error?.message.contains("'found'") == true, "\(String(describing: error))")
            let viewUnderItsName = View<Article>(
                name: "articleText", version: "1", collections: ["articles"], group: { _, _, _ in "all" },
                areInIncreasingOrder: { $0.title < $1.title })
            expectError(.misuse) { try db.register(viewUnderItsName) }
            try writer.read { txn throws in
                #expect(try txn.search(named: "articleText").keys(matching: "swift").count == 2)
                #expect(try txn.view(named: "found").items(inGroup: "all").map(\.key) == ["a1", "a2"])
            }
            let foundInTitles = SearchResultsView(
                name: "found", parent: Self.byTitle, search: titleOnly, version: "1", query: "swift")
            try db.register([titleOnly, foundInTitles])
            try writer.read { txn throws in
                #expect(try txn.search(named: "articleText").keys(matching: "swift").map(\.key) == ["a2"])
                #expect(try txn.view(named: "found").items(inGroup: "all").map(\.key) == ["a2"])
                #expect(
                    ViewTests.rows(try txn.view(named: "found")) == (try Self.expected(txn, query: "swift")))
            }
        }
    }
}

extension SearchResultsViewTests {
    /// A foreign value the full-text index cannot decode (in a collection only the index reads)
    /// leaves the index stale after the seal, and the search-results view that reads it stale
    /// with it: rebuilt alone, the view would follow the index's rows from before the foreign
    /// writes.
    @Test func aViewReadingAnIndexLeftStaleBySealingIsLeftStaleWithIt() throws {
        try withTemporaryDatabase { db throws in
            let wide = FullTextSearch<Article>(
                name: "wideText", version: "1", collections: ["articles", "extra"],
                columns: ["title", "body"],
                extract: { _, _, article in ["title": article.title, "body": article.body] })
            let found = SearchResultsView(
                name: "wideFound", parent: Self.byTitle, search: wide, version: "1", query: "swift")
            try db.register([wide, found])
            let writer = db.newConnection(name: "writer")
            try writer.readWrite {
                try $0.set(Article(title: "one", body: "swift"), forKey: "a1", inCollection: "articles")
            }
            try sqlite3(
                db.path,
                """
                INSERT INTO snapshotdb_values(collection, key, data) VALUES ('extra', 'bad', x'7B7D');
                INSERT INTO snapshotdb_values(collection, key, data)
                    VALUES ('articles', 'a2', '{"title":"two","body":"swift"}');
                """)
            try writer.readWrite { try $0.set(1, forKey: "k", inCollection: "other") }
            let reader = db.newConnection(name: "reader")
            expectError(.extensionStale) { try reader.read { try $0.search(named: "wideText") } }
            expectError(.extensionStale) { try reader.read { try $0.view(named: "wideFound") } }
        }
    }
}
