import Foundation
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDB

/// Extensions after a foreign client's writes (the `sqlite3` shell): kept item by item when the
/// writes are sealed, so that a keyed view's readers get exact row changes across them instead
/// of reloading, and every extension equals a brute force over the values.
@Suite("Extensions kept across foreign writes")
struct ForeignUpkeepTests {
    static let byFolder = SecondaryIndex<Note>(
        name: "byFolder", version: "1", collections: ["notes"], columns: [.text("folder"), .text("title")],
        extract: { _, _, note in
            note.archived ? [:] : ["folder": .text(note.folder), "title": .text(note.title)]
        })
    static let titles = FullTextSearch<Note>(
        name: "titles", version: "1", collections: ["notes"], columns: ["title"],
        extract: { _, _, note in ["title": note.title] })
    /// `ViewTests.byTitle`'s order by its closure, beside the keyed one.
    static let byTitleClosure = View<Note>(
        name: "byTitleClosure", version: "1", collections: ["notes"],
        group: { _, _, note in note.archived ? nil : note.folder },
        areInIncreasingOrder: { $0.title < $1.title })

    /// Over the keyed view: the notes whose title has "apple", and those in "work".
    static let apples = SearchResultsView(
        name: "apples", parent: ViewTests.byTitleKeyed, search: titles, version: "1", query: "apple")
    static let atWork = FilteredView(name: "atWork", parent: ViewTests.byTitleKeyed, version: "1") {
        _, _, note in
        note.folder == "work"
    }

    /// The keyed and closure views over the titles, the index and the full-text index.
    static let extensions: [any DatabaseExtension] = [
        ViewTests.byTitleKeyed, byTitleClosure, byFolder, titles,
    ]

    /// Makes the next SnapshotDB write, which seals the foreign writes before it in a commit of
    /// their own (and writes nothing any extension reads).
    static func sealForeignWrites(_ writer: Connection, _ tag: String) throws {
        try writer.readWrite {
            try $0.set(Note(title: "x", folder: "x", archived: true), forKey: tag, inCollection: "other")
        }
    }

    static let words = ["apple", "banana", "cherry", "damson"]
    static let folders = ["inbox", "work", "home"]

    /// A note as JSON text for the shell.
    static func json(_ note: Note) -> String {
        #"{"title":"\#(note.title)","folder":"\#(note.folder)","archived":\#(note.archived)}"#
    }

    static func randomNote(_ random: inout SeededGenerator) -> Note {
        Note(
            title: "\(words[Int(random.next() % 4)]) \(String(format: "%03d", Int(random.next() % 1000)))",
            folder: folders[Int(random.next() % 3)], archived: random.next() % 10 == 0)
    }

    /// Checks every extension against the values at `txn`'s snapshot.
    static func checkAgainstValues(_ txn: ReadTransaction) throws {
        let expected = try ViewTests.expectedRows(txn)
        #expect(ViewTests.rows(try txn.view(named: "byTitle")) == expected)
        #expect(ViewTests.rows(try txn.view(named: "byTitleClosure")) == expected)
        let notes = try txn.values(inCollection: "notes", as: Note.self)
        let index = try txn.index(named: "byFolder")
        for folder in folders {
            let keys = Set(notes.filter { !$0.value.archived && $0.value.folder == folder }.map(\.key))
            #expect(Set(try index.keys(where: "folder = ?", [.text(folder)]).map(\.key)) == keys, "\(folder)")
        }
        let search = try txn.search(named: "titles")
        for word in words {
            let keys = Set(notes.filter { $0.value.title.hasPrefix(word + " ") }.map(\.key))
            #expect(Set(try search.keys(matching: word, limit: 100_000).map(\.key)) == keys, "\(word)")
        }
    }

    /// Rounds of random foreign updates, moves between folders, archivings, removals and
    /// insertions, each sealed by the next SnapshotDB write: a bookmark that advances across
    /// them gets the keyed view's row changes (no reload), which turn its old rows into its new
    /// ones; the closure view is rebuilt and reloads; all equal a brute force over the values.
    @Test(arguments: [1, 2, 3] as [UInt64])
    func aKeyedViewGetsExactRowChangesAcrossForeignWrites(seed: UInt64) throws {
        try withTemporaryDatabase { db throws in
            try db.register(Self.extensions + [Self.apples, Self.atWork])
            var random = SeededGenerator(state: seed)
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                for index in 0..<300 {
                    try txn.set(Self.randomNote(&random), forKey: "n\(index)", inCollection: "notes")
                }
            }
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            var next = 300
            for round in 0..<4 {
                let keyedViews = ["byTitle", "apples", "atWork"]
                let before = try ui.read { txn in
                    try keyedViews.map { ViewTests.rows(try txn.view(named: $0)) }
                }
                var statements: [String] = []
                for _ in 0..<(5 + Int(random.next() % 30)) {
                    let key = "n\(random.next() % UInt64(next))"
                    switch random.next() % 6 {
                    case 0:
                        statements.append(
                            "DELETE FROM snapshotdb_values WHERE collection = 'notes' AND key = '\(key)';")
                    case 1:
                        statements.append(
                            "INSERT INTO snapshotdb_values(collection, key, data) VALUES ('notes', 'n\(next)', "
                                + "CAST('\(Self.json(Self.randomNote(&random)))' AS BLOB));")
                        next += 1
                    default:
                        statements.append(
                            "UPDATE snapshotdb_values SET data = CAST('\(Self.json(Self.randomNote(&random)))' AS BLOB) "
                                + "WHERE collection = 'notes' AND key = '\(key)';")
                    }
                }
                if round == 1 {
                    // A key removed and written again in one batch: noted once, as set.
                    statements.append(
                        "DELETE FROM snapshotdb_values WHERE collection = 'notes' AND key = 'n7';")
                    statements.append(
                        "INSERT INTO snapshotdb_values(collection, key, data) VALUES ('notes', 'n7', "
                            + "CAST('\(Self.json(Self.randomNote(&random)))' AS BLOB));")
                }
                if round == 2 {
                    // Enough new items in one group for the view's bulk merge.
                    statements.append(
                        """
                        INSERT INTO snapshotdb_values(collection, key, data)
                        SELECT 'notes', 'bulk' || value, CAST(json_object('title', 'cherry ' || printf('%03d', value),
                            'folder', 'home', 'archived', json('false')) AS BLOB) FROM generate_series(1, 100);
                        """)
                }
                _ = try sqlite3(db.path, statements.joined(separator: "\n"))
                try Self.sealForeignWrites(writer, "r\(round)")
                let changesets = try ui.beginLongLivedReadTransaction()
                try ui.read { txn throws in
                    for (name, old) in zip(keyedViews, before) {
                        let view = try txn.view(named: name)
                        #expect(!view.requiresReload(for: changesets), "\(name), round \(round)")
                        let after = ViewTests.rows(view)
                        #expect(
                            ViewTests.apply(try view.changes(for: changesets), to: old) == after,
                            "\(name), round \(round)")
                    }
                    let expected = try ViewTests.expectedRows(txn)
                    let notes = Dictionary(
                        uniqueKeysWithValues: try txn.values(inCollection: "notes", as: Note.self).map {
                            ($0.key, $0.value)
                        })
                    let apples = expected.mapValues { items in
                        items.filter { notes[$0.key]?.title.hasPrefix("apple ") == true }
                    }.filter { !$0.value.isEmpty }
                    #expect(ViewTests.rows(try txn.view(named: "apples")) == apples, "round \(round)")
                    #expect(
                        ViewTests.rows(try txn.view(named: "atWork")) == expected.filter { $0.key == "work" },
                        "round \(round)")
                    #expect(try txn.view(named: "byTitleClosure").requiresReload(for: changesets))
                    try Self.checkAgainstValues(txn)
                }
            }
        }
    }

    /// A keyed view whose page row a foreign client damaged cannot keep an item: the seal
    /// rebuilds every extension instead (as it always did), so the damage keeps no write from
    /// starting; the rebuilt view equals a brute force, and its readers reload.
    @Test func aDamagedKeyedViewIsRebuiltBySealingInsteadOfBlockingWrites() throws {
        try withTemporaryDatabase { db throws in
            try db.register(Self.extensions)
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                for index in 0..<200 {
                    try txn.set(
                        Note(title: String(format: "apple %03d", index), folder: "inbox", archived: false),
                        forKey: "n\(index)", inCollection: "notes")
                }
            }
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            _ = try sqlite3(
                db.path,
                """
                UPDATE snapshotdb_x7_byTitle_page SET data = x'0500' WHERE id = (SELECT min(id) FROM snapshotdb_x7_byTitle_page);
                UPDATE snapshotdb_values SET data = CAST('{"title":"banana 001","folder":"work","archived":false}' AS BLOB)
                WHERE collection = 'notes' AND key = 'n5';
                """)
            try Self.sealForeignWrites(writer, "r")
            let changesets = try ui.beginLongLivedReadTransaction()
            try ui.read { txn throws in
                #expect(try txn.view(named: "byTitle").requiresReload(for: changesets))
                #expect(try txn.view(named: "byTitle").items(inGroup: "work").map(\.key) == ["n5"])
                try Self.checkAgainstValues(txn)
            }
        }
    }

    /// Past ``Writer/foreignKeysKeptOneByOne`` keys the extensions are rebuilt instead, and
    /// their readers reload; the views still equal a brute force.
    @Test func manyForeignKeysRebuildTheExtensions() throws {
        try withTemporaryDatabase { db throws in
            try db.register(Self.extensions)
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                try txn.set(
                    Note(title: "apple 001", folder: "inbox", archived: false), forKey: "a",
                    inCollection: "notes")
            }
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            let count = Writer.foreignKeysKeptOneByOne + 1
            _ = try sqlite3(
                db.path,
                """
                INSERT INTO snapshotdb_values(collection, key, data)
                SELECT 'notes', 'bulk' || value, CAST(json_object('title', 'banana ' || value, 'folder', 'work',
                    'archived', json('false')) AS BLOB) FROM generate_series(1, \(count));
                """)
            try Self.sealForeignWrites(writer, "r")
            let changesets = try ui.beginLongLivedReadTransaction()
            try ui.read { txn throws in
                #expect(try txn.view(named: "byTitle").requiresReload(for: changesets))
                #expect(try txn.view(named: "byTitle").count(inGroup: "work") == count)
                try Self.checkAgainstValues(txn)
            }
        }
    }
}
