import Foundation
import SnapshotDB
import Testing

@Suite("Value cache")
struct ValueCacheTests {
    /// A commit that changes more keys than a cache holds is applied by walking the cache
    /// instead of the changed keys; the result must be the same.
    @Test func largeCommitsInvalidateExactlyWhatTheyChanged() throws {
        var configuration = Configuration()
        configuration.cacheLimit = 4
        try withTemporaryDatabase(configuration: configuration) { db throws in
            let writer = db.newConnection(name: "writer")
            let reader = db.newConnection(name: "reader")
            try writer.readWrite { txn in
                for key in ["a", "b", "c"] {
                    try txn.setData(Data(key.utf8), forKey: key, inCollection: "items")
                }
            }
            // Both connections cache "a", "b" and "c".
            for connection in [writer, reader] {
                try connection.read { txn throws in
                    for key in ["a", "b", "c"] {
                        #expect(try txn.data(forKey: key, inCollection: "items") == Data(key.utf8))
                    }
                }
            }
            try writer.readWrite { txn in
                try txn.setData(Data("A".utf8), forKey: "a", inCollection: "items")
                try txn.removeValue(forKey: "c", inCollection: "items")
                for index in 0..<20 {
                    try txn.setData(Data([1]), forKey: "new\(index)", inCollection: "items")
                }
            }
            for connection in [writer, reader] {
                try connection.read { txn throws in
                    #expect(try txn.data(forKey: "a", inCollection: "items") == Data("A".utf8))
                    #expect(try txn.data(forKey: "b", inCollection: "items") == Data("b".utf8))
                    #expect(try txn.data(forKey: "c", inCollection: "items") == nil)
                    #expect(try txn.data(forKey: "new7", inCollection: "items") == Data([1]))
                }
            }
        }
    }

    /// Raw bytes enter the cache on their second read, decoded values on their first.
    @Test func rawValuesAreCachedOnTheirSecondRead() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            let reader = db.newConnection(name: "reader")
            try writer.readWrite { txn in
                try txn.setData(Data([1]), forKey: "raw", inCollection: "c")
                try txn.set(Item(title: "a"), forKey: "decoded", inCollection: "c")
            }
            try reader.read { txn throws in _ = try txn.data(forKey: "raw", inCollection: "c") }
            #expect(reader.cachedValueCount == 0)
            try reader.read { txn throws in _ = try txn.data(forKey: "raw", inCollection: "c") }
            #expect(reader.cachedValueCount == 1)
            try reader.read { txn throws in
                _ = try txn.value(forKey: "decoded", inCollection: "c", as: Item.self)
            }
            #expect(reader.cachedValueCount == 2)
            try writer.readWrite { txn in try txn.setData(Data([2]), forKey: "raw", inCollection: "c") }
            #expect(try reader.read { try $0.data(forKey: "raw", inCollection: "c") } == Data([2]))
        }
    }

    /// A commit by a foreign client drops every cached value; reads go on from SQLite.
    @Test func foreignCommitsDropTheCache() throws {
        try withTemporaryDatabase { db throws in
            let connection = db.newConnection(name: "connection")
            try connection.readWrite { try $0.setData(Data([1]), forKey: "a", inCollection: "c") }
            for _ in 0..<2 {
                #expect(try connection.read { try $0.data(forKey: "a", inCollection: "c") } == Data([1]))
            }
            #expect(connection.cachedValueCount == 1)
            try run(
                "/usr/bin/sqlite3", [db.path, "UPDATE snapshotdb_values SET data = x'02' WHERE key = 'a'"])
            for _ in 0..<2 {
                #expect(try connection.read { try $0.data(forKey: "a", inCollection: "c") } == Data([2]))
            }
        }
    }

    /// Values of another collection with the same key stay cached and correct.
    /// Keys (and collections) that Swift's `String` equality holds equal but whose UTF-8 bytes
    /// differ, such as `"é"` (U+00E9) and `"e\u{301}"`, are two rows in SQLite and two entries
    /// in the cache: neither answers for the other, through a bookmark, a plain read, a read
    /// inside a write, or a decode; and a commit that changes one leaves the other's cached
    /// value in place.
    @Test func canonicallyEquivalentKeysAreDistinctRows() throws {
        struct Named: Codable, Equatable { var name: String }
        let composed = "\u{E9}"
        let decomposed = "e\u{301}"
        #expect(composed == decomposed && Array(composed.utf8) != Array(decomposed.utf8))
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            let reader = db.newConnection(name: "reader")
            try writer.readWrite { txn in
                try txn.setData(Data("composed".utf8), forKey: composed, inCollection: "items")
                try txn.setData(Data("decomposed".utf8), forKey: decomposed, inCollection: "items")
                try txn.set(Named(name: "composed"), forKey: "k", inCollection: composed)
                try txn.set(Named(name: "decomposed"), forKey: "k", inCollection: decomposed)
                #expect(try txn.data(forKey: composed, inCollection: "items") == Data("composed".utf8))
                #expect(try txn.data(forKey: decomposed, inCollection: "items") == Data("decomposed".utf8))
            }
            try reader.beginLongLivedReadTransaction()
            func check(_ connection: Connection, composedValue: String) throws {
                try connection.read { txn throws in
                    // Each read twice, the other key in between: the second comes from the cache.
                    for _ in 0..<2 {
                        for (key, expected) in [(decomposed, "decomposed"), (composed, composedValue)] {
                            #expect(try txn.data(forKey: key, inCollection: "items") == Data(expected.utf8))
                        }
                        for (collection, expected) in [(decomposed, "decomposed"), (composed, "composed")] {
                            #expect(
                                try txn.value(forKey: "k", inCollection: collection, as: Named.self)
                                    == Named(name: expected))
                        }
                    }
                    #expect(Set(try txn.keys(inCollection: "items").map { Array($0.utf8) }).count == 2)
                }
            }
            try check(reader, composedValue: "composed")
            try check(writer, composedValue: "composed")
            try writer.readWrite { txn in
                try txn.setData(Data("composed 2".utf8), forKey: composed, inCollection: "items")
            }
            try reader.beginLongLivedReadTransaction()
            try check(reader, composedValue: "composed 2")
            try check(writer, composedValue: "composed 2")
        }
    }

    /// A commit that sets `"é"` and removes `"e\u{301}"` (equal in Swift, two keys in the
    /// database) lists the one as set and the other as removed, by their bytes: in the advance's
    /// changeset and in the durable history.
    @Test func aChangesetKeepsASetAndARemovalOfCanonicallyEquivalentKeys() throws {
        let composed = "\u{E9}"
        let decomposed = "e\u{301}"
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            let reader = db.newConnection(name: "reader")
            try writer.readWrite { try $0.setData(Data([1]), forKey: decomposed, inCollection: "items") }
            try reader.beginLongLivedReadTransaction()
            let before = db.latestCommit
            try writer.readWrite { txn in
                try txn.setData(Data([2]), forKey: composed, inCollection: "items")
                try txn.removeValue(forKey: decomposed, inCollection: "items")
            }
            let advanced = try reader.beginLongLivedReadTransaction()
            let logged = try reader.read { try $0.changes(after: before) }
            for changes in [advanced, logged] {
                #expect(changes.count == 1)
                #expect(
                    changes.first?.setKeys["items"].map { $0.map { Array($0.utf8) } } == [
                        Array(composed.utf8)
                    ])
                #expect(
                    changes.first?.removedKeys["items"].map { $0.map { Array($0.utf8) } } == [
                        Array(decomposed.utf8)
                    ])
            }
        }
    }

    @Test func keysAreScopedByCollection() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            let reader = db.newConnection(name: "reader")
            try writer.readWrite { txn in
                try txn.setData(Data("1".utf8), forKey: "k", inCollection: "one")
                try txn.setData(Data("2".utf8), forKey: "k", inCollection: "two")
            }
            try reader.read { txn throws in
                #expect(try txn.data(forKey: "k", inCollection: "one") == Data("1".utf8))
                #expect(try txn.data(forKey: "k", inCollection: "two") == Data("2".utf8))
            }
            try writer.readWrite { txn in try txn.setData(Data("3".utf8), forKey: "k", inCollection: "two") }
            try reader.read { txn throws in
                #expect(try txn.data(forKey: "k", inCollection: "one") == Data("1".utf8))
                #expect(try txn.data(forKey: "k", inCollection: "two") == Data("3".utf8))
            }
        }
    }

    final class Note: Codable, @unchecked Sendable {
        var title: String
        init(title: String) { self.title = title }
    }

    /// A decoded class instance is the caller's to change: the next read of the same commit
    /// still returns what is stored, while decoded structs are shared from the cache.
    @Test func classValuesAreNotSharedBetweenReads() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            try writer.readWrite { txn in
                try txn.set(Note(title: "stored"), forKey: "n", inCollection: "notes")
                try txn.set(Item(title: "stored"), forKey: "i", inCollection: "items")
            }
            try ui.beginLongLivedReadTransaction()
            for _ in 0..<2 {  // the first read fills the cache, the second is served from it
                let note = try #require(
                    try ui.read { try $0.value(forKey: "n", inCollection: "notes", as: Note.self) })
                #expect(note.title == "stored")
                note.title = "edited in memory, never written"
            }
            let first = try ui.read { try $0.value(forKey: "n", inCollection: "notes", as: Note.self) }
            let second = try ui.read { try $0.value(forKey: "n", inCollection: "notes", as: Note.self) }
            #expect(first !== second)
            #expect(
                try ui.read { try $0.value(forKey: "i", inCollection: "items", as: Item.self) }?.title
                    == "stored")
            #expect(ui.cachedValueCount == 2)
        }
    }

    /// A cache limit beyond what memory holds is a bound, not an allocation: the miss filter
    /// is capped, and `Int.max` neither traps nor allocates.
    @Test func hugeCacheLimitIsABoundNotAnAllocation() throws {
        var configuration = Configuration()
        configuration.cacheLimit = .max
        try withTemporaryDatabase(configuration: configuration) { db throws in
            let connection = db.newConnection(name: "app")
            try connection.readWrite { try $0.set(Item(title: "t"), forKey: "k", inCollection: "c") }
            #expect(
                try connection.read { try $0.value(forKey: "k", inCollection: "c", as: Item.self) }?.title
                    == "t")
        }
    }
}
