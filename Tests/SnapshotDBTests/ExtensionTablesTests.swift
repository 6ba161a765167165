import Foundation
import Logging
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDB

/// Each extension's tables are its own: names that start alike (`notes`, `notes_x`) never share
/// tables, and tables of the first format are replaced when their extension is registered again.
@Suite("Extension tables")
struct ExtensionTablesTests {
    static func view(_ name: String, version: String) -> View<Note> {
        View<Note>(
            name: name, version: version, collections: ["notes"], group: { _, _, note in note.folder },
            areInIncreasingOrder: { $0.title < $1.title })
    }

    @Test func rebuildingOneExtensionLeavesAnotherWhoseNameItStartsUntouched() throws {
        try withTemporaryDatabase { db throws in
            try db.register(Self.view("notes", version: "1"))
            try db.register(Self.view("notes_x", version: "1"))
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                for index in 0..<50 {
                    try txn.set(
                        Note(title: "\(index)", folder: "f\(index % 3)", archived: false),
                        forKey: "n\(index)",
                        inCollection: "notes")
                }
            }
            try db.register(Self.view("notes", version: "2"))
            try db.unregister("notes")
            try writer.readWrite { txn in
                try txn.set(
                    Note(title: "new", folder: "f0", archived: false), forKey: "n0", inCollection: "notes")
            }
            try writer.read { txn in
                let rows = ViewTests.rows(try txn.view(named: "notes_x"))
                #expect(rows["f0"]?.count == 17)
                let titles = try rows["f0"]!.map {
                    try txn.value(forKey: $0.key, inCollection: "notes", as: Note.self)!.title
                }
                #expect(titles == titles.sorted())
            }
        }
    }

    /// The catalog records each extension's version behind its table format: a view's pages are
    /// t7, an index's and a full-text index's tables t4. A change of tag rebuilds what is in a
    /// file, so these strings are part of the file format.
    @Test func theCatalogRecordsEachKindsTableFormat() throws {
        try withTemporaryDatabase { db throws in
            try db.register(SearchResultsViewTests.byTitle)
            try db.register(SearchResultsViewTests.text)
            try db.register(SearchResultsViewTests.found)
            try db.register(IndexTests.people)
            let catalog = try sqlite3(
                db.path, "SELECT name, version FROM snapshotdb_extensions ORDER BY name")
            #expect(
                catalog == """
                    articleText|t4:1/title,body
                    articlesByTitle|t7:1
                    found|t7:\(SearchResultsViewTests.found.version)
                    people|t4:1/city:TEXT,age:INTEGER,score:REAL

                    """)
        }
    }

    /// Only an extension the snapshot does not hold is `unknownExtension`: an error reading the
    /// catalog (here a table another client dropped) is thrown as SQLite reported it in a read
    /// transaction, and a write transaction finds the schema damaged (`corrupt`, naming it).
    @Test func anErrorReadingTheCatalogIsNotAMissingExtension() throws {
        try withTemporaryDatabase { db throws in
            try db.register(ViewTests.byTitle)
            let reader = db.newConnection(name: "reader")
            try reader.read { txn in _ = try txn.view(named: "byTitle") }
            try sqlite3(db.path, "DROP TABLE snapshotdb_extension_state")
            let fresh = db.newConnection(name: "fresh")
            let read = expectError(.sqlite) { try fresh.read { try $0.view(named: "byTitle") } }
            #expect(
                read?.message.contains("snapshotdb_extension_state") == true, "\(String(describing: read))")
            let write = expectError(.corrupt) { try fresh.readWrite { try $0.view(named: "byTitle") } }
            #expect(
                write?.message.contains("snapshotdb_extension_state") == true, "\(String(describing: write))")
        }
    }

    @Test func tablesOfTheFirstFormatAreReplacedOnRegistration() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("legacy.sqlite").path
            do {
                let db = try Database(path: path)
                try db.register(ViewTests.byTitle)
                try db.newConnection().readWrite { txn in
                    for index in 0..<30 {
                        try txn.set(
                            Note(title: "\(100 - index)", folder: "inbox", archived: false),
                            forKey: "n\(index)",
                            inCollection: "notes")
                    }
                }
                try db.close()
            }
            // What the first format left: tables named snapshotdb_ext_<name>_*, a version without a tag.
            _ = try sqlite3(
                path,
                """
                ALTER TABLE snapshotdb_x7_byTitle_page RENAME TO snapshotdb_ext_byTitle_page;
                ALTER TABLE snapshotdb_x7_byTitle_map RENAME TO snapshotdb_ext_byTitle_map;
                UPDATE snapshotdb_extensions SET version = '1' WHERE name = 'byTitle';
                """)
            let db = try Database(path: path)
            try db.register(ViewTests.byTitle)
            try db.newConnection().read { txn in
                let view = try txn.view(named: "byTitle")
                #expect(ViewTests.rows(view) == (try ViewTests.expectedRows(txn)))
                #expect(view.count(inGroup: "inbox") == 30)
            }
            let legacy = try sqlite3(
                path, "SELECT count(*) FROM sqlite_schema WHERE substr(name, 1, 15) = 'snapshotdb_ext_';")
            #expect(legacy.trimmingCharacters(in: .whitespacesAndNewlines) == "0")
        }
    }

    /// The view's writer keeps its layout and decoded values from one write transaction to the next
    /// only while nothing else committed: a foreign write in between (sealed and rebuilt) and a
    /// rolled-back transaction must not leave it reusing what no longer holds.
    @Test func keptWriterStateIsDroppedWhenAnotherCommitComesBetween() throws {
        try withTemporaryDatabase { db throws in
            try db.register(ViewTests.byTitle)
            let writer = db.newConnection(name: "writer")
            func note(_ title: String, _ folder: String = "inbox") -> Note {
                Note(title: title, folder: folder, archived: false)
            }
            try writer.readWrite { txn in
                for index in 0..<300 {
                    try txn.set(
                        note(String(format: "%04d", index * 7 % 300)), forKey: "n\(index)",
                        inCollection: "notes")
                }
            }
            // The writer now holds the view's layout and decoded titles. A foreign client moves
            // notes and removes one; SnapshotDB seals that write and rebuilds the view.
            try sqlite3(
                db.path,
                """
                UPDATE snapshotdb_values SET data = CAST('{"archived":false,"folder":"inbox","title":"9999"}' AS BLOB)
                WHERE collection = 'notes' AND key IN ('n1', 'n2', 'n3');
                DELETE FROM snapshotdb_values WHERE collection = 'notes' AND key = 'n4';
                """)
            try writer.readWrite { txn in
                try txn.set(note("0001"), forKey: "n5", inCollection: "notes")
                try txn.set(note("9998"), forKey: "n6", inCollection: "notes")
            }
            try writer.read { txn throws in
                let rows = ViewTests.rows(try txn.view(named: "byTitle"))
                #expect(rows == (try ViewTests.expectedRows(txn)))
            }
            // A transaction that moves notes and then fails leaves nothing behind either.
            struct Abandon: Error {}
            #expect(throws: Abandon.self) {
                try writer.readWrite { txn in
                    for index in 10..<60 {
                        try txn.set(note("5000", "work"), forKey: "n\(index)", inCollection: "notes")
                    }
                    throw Abandon()
                }
            }
            try writer.readWrite { txn in
                for index in 60..<70 { try txn.set(note("0002"), forKey: "n\(index)", inCollection: "notes") }
            }
            try writer.read { txn throws in
                let rows = ViewTests.rows(try txn.view(named: "byTitle"))
                #expect(rows == (try ViewTests.expectedRows(txn)))
            }
        }
    }

    /// A commit that does not touch a view's collections leaves its tables as they were, so the
    /// writer's kept state moves to that commit; one that rebuilds or drops the view does not.
    @Test func keptWriterStateFollowsCommitsThatDoNotTouchTheView() throws {
        try withTemporaryDatabase { db throws in
            try db.register(ViewTests.byTitle)
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                for index in 0..<100 {
                    try txn.set(
                        Note(title: "\(index)", folder: "inbox", archived: false), forKey: "n\(index)",
                        inCollection: "notes")
                }
            }
            try writer.readWrite { try $0.setData(Data([1]), forKey: "x", inCollection: "other") }
            #expect(db.extensionCaches.take("byTitle", at: db.latestCommit) != nil)

            // Taken above, so the next write starts without it, and gives it back.
            try writer.readWrite { txn in
                try txn.set(
                    Note(title: "zz", folder: "inbox", archived: false), forKey: "n1", inCollection: "notes")
            }
            try writer.readWrite { try $0.setData(Data([2]), forKey: "x", inCollection: "other") }
            try writer.read { txn in
                let rows = ViewTests.rows(try txn.view(named: "byTitle"))
                #expect(rows == (try ViewTests.expectedRows(txn)))
            }
            try db.register(
                View<Note>(
                    name: "byTitle", version: "2", collections: ["notes"],
                    group: { _, _, note in note.folder },
                    areInIncreasingOrder: { $0.title < $1.title }))
            #expect(db.extensionCaches.take("byTitle", at: db.latestCommit) == nil)
        }
    }
}

extension ExtensionTablesTests {
    /// A view registered again under the same version but over more collections is rebuilt: the
    /// values already in the new collection were never fed to it.
    @Test func aViewWhoseCollectionsChangedUnderTheSameVersionIsRebuilt() throws {
        func byTitle(_ collections: Set<String>?) -> View<Note> {
            View<Note>(
                name: "byTitle", version: "1", collections: collections, group: { _, _, note in note.folder },
                areInIncreasingOrder: { $0.title < $1.title })
        }
        try withTemporaryDatabase { db throws in
            try db.register(byTitle(["notes"]))
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                try txn.set(
                    Note(title: "a", folder: "inbox", archived: false), forKey: "n", inCollection: "notes")
                try txn.set(
                    Note(title: "b", folder: "inbox", archived: false), forKey: "m", inCollection: "more")
            }
            try db.register(byTitle(["notes", "more"]))
            try writer.read { txn throws in
                #expect(try txn.view(named: "byTitle").items(inGroup: "inbox").map(\.key) == ["n", "m"])
            }
            // Narrowing from every collection to one drops the values of the others, and widening
            // back feeds them again: the catalog tells "every collection" from a set.
            try db.register(byTitle(nil))
            try writer.read { txn throws in
                #expect(try txn.view(named: "byTitle").items(inGroup: "inbox").map(\.key) == ["n", "m"])
            }
            try db.register(byTitle(["notes"]))
            try writer.read { txn throws in
                #expect(try txn.view(named: "byTitle").items(inGroup: "inbox").map(\.key) == ["n"])
            }
            try db.register(byTitle(nil))
            try writer.read { txn throws in
                #expect(try txn.view(named: "byTitle").items(inGroup: "inbox").map(\.key) == ["n", "m"])
            }
        }
    }
}

extension ExtensionTablesTests {
    /// A process that did not register an extension the file has is told that registering it is
    /// all it takes; one the file does not have is plainly unknown.
    @Test func anUnregisteredExtensionTheFileHasSaysToRegisterIt() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("unregistered.sqlite").path
            do {
                let db = try Database(path: path)
                try db.register([ViewTests.byTitle, IndexTests.people, IndexTests.articles])
                try db.close()
            }
            let db = try Database(path: path)
            try db.newConnection(name: "reader").read { txn in
                for (what, read) in [
                    ("view", { _ = try txn.view(named: "byTitle") }),
                    ("secondary index", { _ = try txn.index(named: "people") }),
                    ("full-text index", { _ = try txn.search(named: "articles") }),
                ] as [(String, () throws -> Void)] {
                    let error = expectError(.unknownExtension) { try read() }
                    #expect(
                        error?.message.contains("no \(what) named") == true
                            && error?.message.contains("register it in this process") == true,
                        "\(String(describing: error))")
                    // The version as the app gave it, not as the catalog stores it (`t5:1`).
                    #expect(error?.message.contains(":1'") == false, "\(String(describing: error))")
                }
                let unknown = expectError(.unknownExtension) { try txn.view(named: "nothing") }
                #expect(unknown?.message == "no view named 'nothing' is registered")
                // The file's "people" is an index: no advice to register it as a view.
                let otherKind = expectError(.unknownExtension) { try txn.view(named: "people") }
                #expect(otherKind?.message == "no view named 'people' is registered")
            }
            try db.close()
        }
    }
}

extension ExtensionTablesTests {
    /// A process that writes values of an extension it did not register leaves the extension
    /// stale for every process: it is warned, once per extension, naming it.
    @Test func writingValuesOfAnUnregisteredExtensionWarnsOnce() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("unregistered.sqlite").path
            do {
                let db = try Database(path: path)
                try db.register(ViewTests.byTitle)
                try db.close()
            }
            let logs = LogCapture()
            var configuration = Configuration()
            configuration.checkpointLogger = logs.logger
            let db = try Database(path: path, configuration: configuration)
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { try $0.set(Item(title: "x"), forKey: "i", inCollection: "other") }
            #expect(logs.messages(at: .warning) == [], "a collection the view does not observe")
            for index in 0..<2 {
                try writer.readWrite {
                    try $0.set(
                        Note(title: "\(index)", folder: "inbox", archived: false), forKey: "n\(index)",
                        inCollection: "notes")
                }
            }
            let warnings = logs.messages(at: .warning)
            #expect(warnings.count == 1, "\(warnings)")
            #expect(
                warnings.first?.contains("this process does not keep") == true
                    && warnings.first?.contains(#"["byTitle"]"#) == true,
                "\(warnings)")
            try db.close()
        }
    }
}
