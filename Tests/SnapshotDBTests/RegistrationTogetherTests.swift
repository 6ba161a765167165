import Foundation
import SnapshotDBLocking
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDB

/// The default JSON codec, counting its decodes.
final class CountingCodec: ValueCodec {
    let decodes = Mutex(0)
    private let json = JSONValueCodec()

    func encode<T: Encodable>(_ value: T) throws -> Data { try json.encode(value) }

    func decode<T: Decodable>(_ type: T.Type, from data: Data) throws -> T {
        decodes.withLock { $0 += 1 }
        return try json.decode(type, from: data)
    }
}

/// Extensions registered together are built in one pass over the values, each decoded once, and
/// equal what registering them one by one builds.
@Suite("Registering extensions together")
struct RegistrationTogetherTests {
    static let byTitle = SearchResultsViewTests.byTitle
    static let text = SearchResultsViewTests.text
    static let found = SearchResultsViewTests.found
    static let lengths = SecondaryIndex<Article>(
        name: "articleLengths", version: "1", collections: ["articles"], columns: [.integer("length")],
        extract: { _, _, article in ["length": .integer(article.body.count)] })

    static func load(_ db: Database, count: Int) throws {
        var random = SeededGenerator(state: 9)
        try db.newConnection(name: "load").readWrite { txn in
            for index in 0..<count {
                let words = ["swift", "sqlite", "draft", "notes", "views", "index"]
                let title = (0..<2).map { _ in words.randomElement(using: &random)! }.joined(separator: " ")
                let body = (0..<Int.random(in: 1...6, using: &random)).map { _ in
                    words.randomElement(using: &random)!
                }
                .joined(separator: " ")
                try txn.set(Article(title: title, body: body), forKey: "a\(index)", inCollection: "articles")
            }
            // A value of another collection: read by none of them, decoded by none.
            try txn.set(1, forKey: "other", inCollection: "counters")
        }
    }

    /// Everything the extensions answer, to compare two databases.
    static func contents(_ db: Database) throws -> String {
        try db.newConnection(name: "check").read { txn in
            let view = try txn.view(named: "articlesByTitle")
            let results = try txn.view(named: "found")
            let index = try txn.index(named: "articleLengths")
            let hits = try txn.search(named: "articleText").keys(matching: "sqlite", limit: 1_000)
            return [
                "\(ViewTests.rows(view))", "\(ViewTests.rows(results))",
                "\(try index.keys(where: "length > ?", [.integer(10)]))", "\(hits.sorted())",
            ].joined(separator: "\n")
        }
    }

    @Test func registeringTogetherDecodesEachValueOnceAndBuildsTheSame() throws {
        try withTemporaryDirectory { directory throws in
            let count = 300
            let together = try Database(path: directory.appendingPathComponent("together.sqlite").path)
            let codec = CountingCodec()
            try together.register(codec, forCollection: "articles")
            try Self.load(together, count: count)
            let before = codec.decodes.withLock { $0 }
            // The search-results view reads the full-text index: listed first, built after it.
            // (The variadic form: one registration, as the array's.)
            try together.register(Self.found, Self.byTitle, Self.lengths, Self.text)
            let decodes = codec.decodes.withLock { $0 } - before
            // One pass: each value decoded once for the view, the index and the full-text index
            // together; the search-results view then decodes only its members.
            let matches = try together.newConnection(name: "m").read {
                try $0.search(named: "articleText").keys(matching: "swift", limit: 10_000).count
            }
            #expect(
                decodes == count + matches, "\(decodes) decodes for \(count) values and \(matches) matches")
            #expect(
                together.registeredExtensions.sorted()
                    == ["articleLengths", "articleText", "articlesByTitle", "found"])

            let separately = try Database(path: directory.appendingPathComponent("separately.sqlite").path)
            let separateCodec = CountingCodec()
            try separately.register(separateCodec, forCollection: "articles")
            try Self.load(separately, count: count)
            let separateBefore = separateCodec.decodes.withLock { $0 }
            for extensionToRegister in [Self.byTitle, Self.lengths, Self.text] as [any DatabaseExtension] {
                try separately.register(extensionToRegister)
            }
            try separately.register(Self.found)
            #expect(separateCodec.decodes.withLock { $0 } - separateBefore >= 3 * count)
            #expect(try Self.contents(together) == Self.contents(separately))

            // Registered again as they are: nothing is rebuilt (no commit); only the two views'
            // check of a sample of stored items decodes, at most two items of twice
            // `checkedPages` pages each.
            let again = codec.decodes.withLock { $0 }
            let commit = together.latestCommit
            try together.register([Self.byTitle, Self.text, Self.found, Self.lengths])
            #expect(together.latestCommit == commit)
            let checkDecodes = codec.decodes.withLock { $0 } - again
            #expect(checkDecodes > 0 && checkDecodes <= 2 * 2 * 2 * ViewOrder<Article>.checkedPages)
        }
    }

    @Test func aBadRegistrationTogetherChangesNothing() throws {
        try withTemporaryDatabase { db throws in
            try Self.load(db, count: 20)
            try db.register(Self.lengths)
            expectError(.misuse) { try db.register(Self.text, Self.text) }
            let duplicate = expectError(.misuse) { try db.register([Self.text, Self.text]) }
            #expect(duplicate?.message.contains("articleText") == true)
            // The search-results view's index is neither registered nor listed.
            expectError(.unknownExtension) { try db.register([Self.found, Self.byTitle]) }
            #expect(db.registeredExtensions == ["articleLengths"])
        }
        try withTemporaryDatabase { db throws in
            // A value the extensions cannot decode fails the whole registration.
            try Self.load(db, count: 20)
            try db.newConnection(name: "w").readWrite {
                try $0.set("not an article", forKey: "bad", inCollection: "articles")
            }
            expectError(.decodingFailed) { try db.register([Self.byTitle, Self.lengths, Self.text]) }
            #expect(db.registeredExtensions.isEmpty)
            #expect(try sqlite3(db.path, "SELECT count(*) FROM snapshotdb_extensions") == "0\n")
        }
    }
}
