import Foundation
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDB

struct Stamp: Codable, Sendable, Equatable {
    var modified: Int
}

/// Metadata beside each value, and the schema migration that added it.
@Suite("Metadata")
struct MetadataTests {
    @Test func metadataIsReadAndWrittenBesideTheValue() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            try writer.readWrite { txn in
                try txn.set(Item(title: "a"), forKey: "a", inCollection: "c", metadata: Stamp(modified: 1))
                try txn.set(Item(title: "b"), forKey: "b", inCollection: "c")
            }
            try ui.beginLongLivedReadTransaction()
            let stored = try writer.readWrite { txn in
                // Setting the value alone keeps its metadata; metadata alone keeps the value.
                try txn.set(Item(title: "a2"), forKey: "a", inCollection: "c")
                let kept = try txn.metadata(forKey: "a", inCollection: "c", as: Stamp.self)
                #expect(try txn.setMetadata(Stamp(modified: 2), forKey: "b", inCollection: "c"))
                #expect(try !txn.setMetadata(Stamp(modified: 3), forKey: "absent", inCollection: "c"))
                return kept
            }
            #expect(stored == Stamp(modified: 1))
            try ui.read { txn throws in
                // The bookmark still reads its commit's metadata.
                #expect(try txn.metadata(forKey: "b", inCollection: "c", as: Stamp.self) == nil)
            }
            let changes = try ui.beginLongLivedReadTransaction()
            #expect(
                changes.hasChange(forKey: "b", inCollection: "c"), "a metadata change is a change of the key")
            try ui.read { txn throws in
                #expect(
                    try txn.metadata(forKey: "b", inCollection: "c", as: Stamp.self) == Stamp(modified: 2))
                #expect(try txn.value(forKey: "b", inCollection: "c", as: Item.self) == Item(title: "b"))
                #expect(try txn.metadata(forKey: "absent", inCollection: "c", as: Stamp.self) == nil)
            }
            try writer.readWrite { txn in
                try txn.removeValue(forKey: "a", inCollection: "c")
                try txn.set(Item(title: "a3"), forKey: "a", inCollection: "c")
                let none: Stamp? = nil
                try txn.setMetadata(none, forKey: "b", inCollection: "c")
            }
            try writer.read { txn throws in
                #expect(
                    try txn.metadata(forKey: "a", inCollection: "c", as: Stamp.self) == nil,
                    "removed with the value")
                #expect(try txn.metadata(forKey: "b", inCollection: "c", as: Stamp.self) == nil)
            }
        }
    }

    @Test func removeMetadataKeepsTheValueAndIsAChangeOfTheKeyAsSetMetadataIs() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            try writer.readWrite { txn in
                try txn.set(Item(title: "a"), forKey: "a", inCollection: "c", metadata: Stamp(modified: 1))
                try txn.set(Item(title: "b"), forKey: "b", inCollection: "c", metadata: Stamp(modified: 2))
            }
            try ui.beginLongLivedReadTransaction()
            let before = ui.snapshot
            try writer.readWrite { txn throws in
                #expect(try txn.removeMetadata(forKey: "a", inCollection: "c"))
                #expect(try txn.metadata(forKey: "a", inCollection: "c", as: Stamp.self) == nil)
                #expect(try !txn.removeMetadata(forKey: "absent", inCollection: "c"), "no value there")
            }
            try writer.readWrite { txn throws in
                #expect(try txn.setMetadata(Stamp(modified: 3), forKey: "b", inCollection: "c"))
            }
            try ui.read { txn throws in
                // The bookmark still reads its commit's metadata.
                #expect(
                    try txn.metadata(forKey: "a", inCollection: "c", as: Stamp.self) == Stamp(modified: 1))
            }
            let changes = try ui.beginLongLivedReadTransaction()
            #expect(changes.map(\.commit) == [before + 1, before + 2])
            // Removing metadata is listed as setting it is: the key as set, nothing removed.
            #expect(changes.first?.setKeys == ["c": ["a"]])
            #expect(changes.last?.setKeys == ["c": ["b"]])
            #expect(changes.allSatisfy { $0.removedKeys.isEmpty })
            #expect(changes.first?.hasChange(forKey: "a", inCollection: "c") == true)
            #expect(changes.first?.hasChange(forKey: "absent", inCollection: "c") == false)
            try ui.read { txn throws in
                #expect(try txn.metadata(forKey: "a", inCollection: "c", as: Stamp.self) == nil)
                #expect(try txn.value(forKey: "a", inCollection: "c", as: Item.self) == Item(title: "a"))
                #expect(
                    try txn.metadata(forKey: "b", inCollection: "c", as: Stamp.self) == Stamp(modified: 3))
                // The durable history lists the same.
                let durable = try txn.changes(after: before)
                #expect(durable.map(\.setKeys) == changes.map(\.setKeys))
                #expect(durable.allSatisfy { $0.removedKeys.isEmpty })
            }
        }
    }

    /// A bare `nil` literal compiles where metadata goes (a new user's `metadata: nil` and
    /// `setMetadata(nil, …)` did not: `nil` names no metadata type) and removes the metadata.
    @Test func aNilLiteralRemovesMetadata() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                try txn.set(Item(title: "a"), forKey: "a", inCollection: "c", metadata: Stamp(modified: 1))
                try txn.set(Item(title: "b"), forKey: "b", inCollection: "c", metadata: Stamp(modified: 2))
            }
            let before = writer.snapshot
            try writer.readWrite { txn throws in
                try txn.set(Item(title: "a2"), forKey: "a", inCollection: "c", metadata: nil)
                #expect(try txn.setMetadata(nil, forKey: "b", inCollection: "c"))
                #expect(try !txn.setMetadata(nil, forKey: "absent", inCollection: "c"), "no value there")
            }
            try writer.read { txn throws in
                #expect(try txn.value(forKey: "a", inCollection: "c", as: Item.self) == Item(title: "a2"))
                #expect(try txn.metadata(forKey: "a", inCollection: "c", as: Stamp.self) == nil)
                #expect(try txn.value(forKey: "b", inCollection: "c", as: Item.self) == Item(title: "b"))
                #expect(try txn.metadata(forKey: "b", inCollection: "c", as: Stamp.self) == nil)
                let changes = try txn.changes(after: before)
                #expect(changes.map(\.setKeys) == [["c": ["a", "b"]]])
                #expect(changes.allSatisfy { $0.removedKeys.isEmpty })
            }
        }
    }

    @Test func aVersionOneFileIsMigratedWithItsValues() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("v1.sqlite").path
            // The version-1 schema, as the first release wrote it.
            let v1 = OlderSchemas.version2
                .replacingOccurrences(of: "    metadata BLOB,\n", with: "")
                .replacingOccurrences(of: "PRAGMA user_version = 2;", with: "PRAGMA user_version = 1;")
            #expect(!v1.contains("metadata"))
            try run("/usr/bin/sqlite3", [path, v1 + " PRAGMA journal_mode = WAL;"])
            try run(
                "/usr/bin/sqlite3",
                [
                    path,
                    #"INSERT INTO snapshotdb_values VALUES ('c', 'k', '{"title":"old","count":0}'); UPDATE snapshotdb_meta SET value = 1 WHERE name IN ('commit', 'external_sealed');"#,
                ])
            let db = try Database(path: path)
            #expect(try run("/usr/bin/sqlite3", [path, "PRAGMA user_version"]) == "3\n")
            let writer = db.newConnection(name: "writer")
            #expect(
                try writer.read { try $0.value(forKey: "k", inCollection: "c", as: Item.self) }
                    == Item(title: "old"))
            _ = try writer.readWrite {
                try $0.setMetadata(Stamp(modified: 5), forKey: "k", inCollection: "c")
            }
            #expect(
                try writer.read { try $0.metadata(forKey: "k", inCollection: "c", as: Stamp.self) }
                    == Stamp(modified: 5))
            #expect(try isIntact(path))
        }
    }
}
