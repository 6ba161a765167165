import Foundation
import SnapshotDB
import Testing

@Suite("Commit counter")
struct CommitCounterTests {
    /// A writer skips reading the counter when nothing was committed since its own last commit;
    /// commits by another connection, or by a foreign client, in between must still be seen.
    @Test func writersSeeCommitsMadeSinceTheirLastTransaction() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            let other = db.newConnection(name: "other")
            try writer.readWrite { try $0.setData(Data([1]), forKey: "a", inCollection: "c") }
            try writer.readWrite { try $0.setData(Data([2]), forKey: "a", inCollection: "c") }
            try other.readWrite { try $0.setData(Data([3]), forKey: "b", inCollection: "c") }
            try writer.readWrite { try $0.setData(Data([4]), forKey: "a", inCollection: "c") }
            #expect(db.latestCommit == 4)
            // A transaction that changes nothing, or rolls back, commits nothing.
            try writer.readWrite { _ in }
            try writer.readWrite { txn in
                try txn.setData(Data([9]), forKey: "a", inCollection: "c")
                txn.rollback()
            }
            try writer.readWrite { try $0.setData(Data([5]), forKey: "a", inCollection: "c") }
            #expect(db.latestCommit == 5)

            // A foreign client writes through SQLite itself: the writer's next transaction seals
            // that write as a commit of its own, then commits after it.
            try run(
                "/usr/bin/sqlite3",
                [db.path, "INSERT INTO snapshotdb_values(collection, key, data) VALUES ('c', 'x', x'00')"])
            try writer.readWrite { try $0.setData(Data([6]), forKey: "a", inCollection: "c") }
            #expect(db.latestCommit == 7)
            let counter = try run(
                "/usr/bin/sqlite3", [db.path, "SELECT max(number) FROM snapshotdb_history"])
            #expect(counter == "7\n")
            try writer.readWrite { try $0.setData(Data([7]), forKey: "a", inCollection: "c") }
            #expect(db.latestCommit == 8)
            try other.read { txn throws in
                #expect(txn.commit == 8)
                #expect(try txn.data(forKey: "x", inCollection: "c") == Data([0]))
                #expect(try txn.data(forKey: "a", inCollection: "c") == Data([7]))
            }
        }
    }

    /// Readers take a snapshot's commit from the WAL-index header when the database knows it:
    /// neither a foreign commit nor a WAL reset (which changes the header but not the data)
    /// may be answered from an older header, and a reset must not look like a commit.
    @Test func readersFindTheirCommitAcrossForeignWritesAndWALResets() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            let reader = db.newConnection(name: "reader")
            try writer.readWrite { try $0.setData(Data([1]), forKey: "a", inCollection: "c") }
            // Twice: the second read starts from a header the first one (or the writer) learnt.
            for _ in 0..<2 {
                try reader.read { txn throws in
                    #expect(txn.commit == 1)
                    #expect(try txn.data(forKey: "a", inCollection: "c") == Data([1]))
                }
            }

            try run(
                "/usr/bin/sqlite3", [db.path, "UPDATE snapshotdb_values SET data = x'02' WHERE key = 'a'"])
            try reader.read { txn throws in
                #expect(txn.commit == 2)
                #expect(try txn.data(forKey: "a", inCollection: "c") == Data([2]))
            }
            #expect(try reader.beginLongLivedReadTransaction() == [])
            try writer.readWrite { try $0.setData(Data([3]), forKey: "a", inCollection: "c") }
            let changes = try reader.beginLongLivedReadTransaction()
            #expect(changes.map(\.commit) == [3])
            #expect(changes.map(\.isExternal) == [false])
            try reader.endLongLivedReadTransaction()

            // A reset rewrites the header with no commit: the same commit, nothing new.
            let reset = try db.checkpoint(.truncate)
            #expect(reset.isComplete)
            try reader.read { txn throws in
                #expect(txn.commit == 3)
                #expect(try txn.data(forKey: "a", inCollection: "c") == Data([3]))
            }
            try writer.readWrite { try $0.setData(Data([4]), forKey: "a", inCollection: "c") }
            #expect(db.latestCommit == 4)
            try reader.read { txn throws in #expect(txn.commit == 4) }
        }
    }

    /// The `sqlite3` shell's `.restore` of an older backup puts an older counter back (the
    /// backup API fires no trigger). Commit numbers must not be given twice, the jump must be
    /// reported, and no cache may keep a value of the undone commits.
    @Test func restoredOlderBackupIsAnExternalCommitAfterTheNewest() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            try writer.readWrite { txn in
                try txn.set("v1", forKey: "k", inCollection: "c")
                try txn.set("x1", forKey: "x", inCollection: "c")
            }
            let backup = db.path + ".backup"
            try run("/usr/bin/sqlite3", [db.path, ".backup '\(backup)'"])
            try writer.readWrite { try $0.set("v2", forKey: "k", inCollection: "c") }
            try writer.readWrite { try $0.set("x3", forKey: "x", inCollection: "c") }
            try ui.beginLongLivedReadTransaction()
            #expect(try ui.read { try $0.value(forKey: "x", inCollection: "c", as: String.self) } == "x3")

            try run("/usr/bin/sqlite3", [db.path, ".restore '\(backup)'"])
            let jumped = try ui.beginLongLivedReadTransaction()
            #expect(jumped.map(\.commit) == [4])
            #expect(jumped.first?.isExternal == true)
            #expect(ui.snapshot == 4)
            #expect(try ui.read { try $0.value(forKey: "k", inCollection: "c", as: String.self) } == "v1")
            #expect(try ui.read { try $0.value(forKey: "x", inCollection: "c", as: String.self) } == "x1")

            // The next local commit is numbered after the restore's, and reported with its own
            // changeset; the bookmark's cache follows it.
            try writer.readWrite { txn in
                try txn.set("x5", forKey: "x", inCollection: "c")
                txn.info = ["who": "after restore"]
            }
            #expect(db.latestCommit == 5)
            let next = try ui.beginLongLivedReadTransaction()
            #expect(next.map(\.commit) == [5])
            #expect(next.first?.info == ["who": "after restore"])
            #expect(try ui.read { try $0.value(forKey: "x", inCollection: "c", as: String.self) } == "x5")
            let counter = try run(
                "/usr/bin/sqlite3", [db.path, "SELECT max(number) FROM snapshotdb_history"])
            #expect(counter == "5\n")
        }
    }
}
