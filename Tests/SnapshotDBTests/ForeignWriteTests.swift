import Foundation
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDB

/// Writes of foreign clients (the `sqlite3` shell, Python) in every form SQL offers: each
/// succeeds as it would in any SQLite file, and reaches SnapshotDB's readers as a commit with
/// exactly its keys.
@Suite("Foreign clients' writes")
struct ForeignWriteTests {
    /// One foreign statement and the keys of collection `c` its commit must set and remove.
    struct Case: CustomStringConvertible {
        let sql: String
        let set: Set<String>
        let removed: Set<String>
        var description: String { sql }
    }

    /// Each statement's conflict policy is the one SQLite gives the statements of the triggers
    /// it fires: an UPSERT's `DO UPDATE` runs as `ABORT`, and so must find nothing to conflict
    /// with when it notes a key.
    static let cases: [Case] = [
        Case(
            sql: """
                INSERT INTO snapshotdb_values(collection, key, data) VALUES ('c', 'a', '"upsert"')
                ON CONFLICT(collection, key) DO UPDATE SET data = excluded.data;
                """,
            set: ["a"], removed: []),
        Case(
            sql: """
                INSERT INTO snapshotdb_values(collection, key, data) VALUES ('c', 'new', '"upsert"')
                ON CONFLICT(collection, key) DO UPDATE SET data = excluded.data;
                """,
            set: ["new"], removed: []),
        Case(
            sql: #"UPDATE OR ABORT snapshotdb_values SET data = '"abort"' WHERE key = 'a';"#, set: ["a"],
            removed: []),
        Case(
            sql: #"UPDATE OR FAIL snapshotdb_values SET data = '"fail"' WHERE key IN ('a', 'b');"#,
            set: ["a", "b"], removed: []),
        Case(
            sql: "UPDATE OR ROLLBACK snapshotdb_values SET key = 'renamed' WHERE key = 'b';",
            set: ["renamed"], removed: ["b"]),
        Case(
            sql:
                #"INSERT OR FAIL INTO snapshotdb_values(collection, key, data) VALUES ('c', 'f', '"fail"');"#,
            set: ["f"], removed: []),
        // Two statements of one foreign transaction on one key: the second notes a key the
        // first noted.
        Case(
            sql: """
                BEGIN;
                UPDATE snapshotdb_values SET data = '"one"' WHERE key = 'a';
                INSERT OR ABORT INTO snapshotdb_values(collection, key, data) VALUES ('c', 'g', '"abort"');
                UPDATE OR ABORT snapshotdb_values SET data = '"two"' WHERE key IN ('a', 'g');
                COMMIT;
                """,
            set: ["a", "g"], removed: []),
        Case(
            sql: #"REPLACE INTO snapshotdb_values(collection, key, data) VALUES ('c', 'a', '"replace"');"#,
            set: ["a"], removed: []),
        Case(
            sql: "UPDATE OR REPLACE snapshotdb_values SET key = 'a' WHERE key = 'renamed';", set: ["a"],
            removed: ["renamed"]),
        Case(sql: "DELETE FROM snapshotdb_values WHERE key IN ('f', 'g');", set: [], removed: ["f", "g"]),
    ]

    @Test func everyConflictPolicyOfAForeignWriteSucceedsAndArrivesWithItsKeys() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                for key in ["a", "b"] { try txn.set("start", forKey: key, inCollection: "c") }
            }
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            for foreign in Self.cases {
                _ = try sqlite3(db.path, foreign.sql)
                let changes = try ui.beginLongLivedReadTransaction()
                #expect(changes.count == 1, "\(foreign)")
                #expect(changes.allSatisfy { !$0.isExternal }, "\(foreign)")
                #expect(Set(changes.first?.setKeys["c"] ?? []) == foreign.set, "\(foreign)")
                #expect(Set(changes.first?.removedKeys["c"] ?? []) == foreign.removed, "\(foreign)")
            }
            #expect(
                try ui.read { try $0.keys(inCollection: "c") }.sorted() == ["a", "new"],
                "every statement wrote what it said")
            // The rename replaced "a" with the renamed row, which held "b"'s value.
            #expect(try ui.read { try $0.value(forKey: "a", inCollection: "c", as: String.self) } == "fail")
            #expect(try isIntact(db.path))
        }
    }

    /// Python's `sqlite3` module, the other foreign client on every machine, with the UPSERT an
    /// application would write.
    @Test func aPythonUpsertArrivesWithItsKey() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { try $0.set(Item(title: "mine"), forKey: "k", inCollection: "c") }
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            let script = """
                import sqlite3, sys
                connection = sqlite3.connect(sys.argv[1])
                with connection:
                    connection.execute(
                        "INSERT INTO snapshotdb_values(collection, key, data) VALUES (?, ?, ?) "
                        "ON CONFLICT(collection, key) DO UPDATE SET data = excluded.data",
                        ("c", "k", b'{"title":"python","count":1}'))
                connection.close()
                """
            _ = try run("/usr/bin/python3", ["-c", script, db.path])
            let changes = try ui.beginLongLivedReadTransaction()
            #expect(changes.map { $0.setKeys["c"] ?? [] } == [["k"]])
            #expect(
                try ui.read { try $0.value(forKey: "k", inCollection: "c", as: Item.self) }
                    == Item(title: "python", count: 1))
        }
    }

    /// A file written before 0.2 has triggers that noted keys with `INSERT OR IGNORE`, which a
    /// foreign UPSERT's policy overrode. Opening it replaces them and keeps its schema version
    /// (earlier versions of the library still read it).
    @Test func anOlderFileGetsTriggersThatTakeAnUpsertAndKeepsItsVersion() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("old.sqlite").path
            do {
                let db = try Database(path: path)
                try db.newConnection().readWrite { try $0.set("start", forKey: "a", inCollection: "c") }
                try db.close()
            }
            // The triggers as 0.1 wrote them.
            let older = Schema.foreignWriteTriggers.replacingOccurrences(
                of:
                    #"INSERT INTO snapshotdb_foreign_changes SELECT (\w+)\.collection, \1\.key WHERE NOT EXISTS\s*\(SELECT 1 FROM snapshotdb_foreign_changes WHERE collection = \1\.collection AND key = \1\.key\);"#,
                with: "INSERT OR IGNORE INTO snapshotdb_foreign_changes VALUES ($1.collection, $1.key);",
                options: .regularExpression)
            #expect(older.contains(Schema.conflictingTriggerText))
            #expect(!older.contains("NOT EXISTS"))
            _ = try sqlite3(
                path,
                """
                BEGIN;
                DROP TRIGGER snapshotdb_external_insert;
                DROP TRIGGER snapshotdb_external_update;
                DROP TRIGGER snapshotdb_external_delete;
                \(older)
                COMMIT;
                """)
            let upsert = """
                INSERT INTO snapshotdb_values(collection, key, data) VALUES ('c', 'a', '"upsert"')
                ON CONFLICT(collection, key) DO UPDATE SET data = excluded.data;
                """
            #expect(throws: ChildProcessFailed.self, "the old triggers refuse it") {
                try sqlite3(path, upsert)
            }

            let db = try Database(path: path)
            let triggers = try sqlite3(
                path, "SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' AND sql LIKE '%OR IGNORE%'")
            #expect(triggers == "0\n")
            #expect(try sqlite3(path, "PRAGMA user_version") == "3\n")
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            _ = try sqlite3(path, upsert)
            let changes = try ui.beginLongLivedReadTransaction()
            #expect(changes.map { $0.setKeys["c"] ?? [] } == [["a"]])
            #expect(try ui.read { try $0.value(forKey: "a", inCollection: "c", as: String.self) } == "upsert")
            #expect(try isIntact(path))
        }
    }

    /// A foreign write made while no SnapshotDB process had the file open: the next launch
    /// numbers it, with its keys, before any extension is registered there, so the extensions it
    /// bypassed are marked stale in that commit; registering the view rebuilds it, with the
    /// foreign value, in a commit of its own.
    @Test func aForeignWriteWhileClosedIsNumberedAtTheOpenAndTheViewRebuiltAtRegister() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("closed.sqlite").path
            let written: UInt64
            do {
                let db = try Database(path: path)
                try db.register(ViewTests.byTitle)
                try db.newConnection().readWrite { txn throws in
                    try txn.set(
                        Note(title: "a", folder: "inbox", archived: false), forKey: "n1",
                        inCollection: "notes")
                }
                written = db.latestCommit
                try db.close()
            }
            try sqlite3(
                path,
                #"INSERT INTO snapshotdb_values(collection, key, data) VALUES ('notes', 'n2', '{"title":"b","folder":"inbox","archived":false}')"#
            )
            let db = try Database(path: path)
            // The first reader numbers it (nothing holds the writer lock).
            let reader = db.newConnection(name: "reader")
            let sealed = try reader.read { try $0.changes(after: written) }
            #expect(sealed.map(\.commit) == [written + 1])
            #expect(sealed.first?.setKeys == ["notes": ["n2"]])
            #expect(db.latestCommit == written + 1)
            try db.register(ViewTests.byTitle)
            #expect(db.latestCommit == written + 2)
            try reader.read { txn throws in
                #expect(try txn.view(named: "byTitle").items(inGroup: "inbox").map(\.key) == ["n1", "n2"])
            }
        }
    }
}
