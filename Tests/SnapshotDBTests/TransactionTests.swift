import Foundation
import SnapshotDB
import SnapshotDBTestSupport
import Testing

@Suite("Transactions")
struct TransactionTests {
    @Test func roundTripsEveryCall() throws {
        try withTemporaryDatabase { db throws in
            let connection = db.newConnection(name: "writer")
            try connection.readWrite { txn in
                try txn.set(Item(title: "a", count: 1), forKey: "1", inCollection: "items")
                try txn.set(Item(title: "b"), forKey: "2", inCollection: "items")
                try txn.set(Item(title: "c"), forKey: "3", inCollection: "items")
                try txn.setData(Data([0, 1, 2]), forKey: "blob", inCollection: "raw")
                // Reads inside the writing transaction see its writes.
                #expect(
                    try txn.value(forKey: "1", inCollection: "items", as: Item.self)
                        == Item(title: "a", count: 1))
                #expect(try txn.count(inCollection: "items") == 3)
            }
            try connection.read { txn throws in
                #expect(
                    try txn.value(forKey: "1", inCollection: "items", as: Item.self)
                        == Item(title: "a", count: 1))
                #expect(try txn.data(forKey: "blob", inCollection: "raw") == Data([0, 1, 2]))
                #expect(try txn.hasValue(forKey: "2", inCollection: "items"))
                #expect(try !txn.hasValue(forKey: "9", inCollection: "items"))
                #expect(try txn.value(forKey: "9", inCollection: "items", as: Item.self) == nil)
                #expect(try txn.keys(inCollection: "items") == ["1", "2", "3"])
                #expect(try txn.count(inCollection: "items") == 3)
                #expect(try txn.collections() == ["items", "raw"])
                var seen: [String] = []
                try txn.enumerate(inCollection: "items", as: Item.self) { key, _, stop in
                    seen.append(key)
                    if key == "2" { stop = true }
                }
                #expect(seen == ["1", "2"])
                let matches = try txn.values(inCollection: "items", as: Item.self) { _, item in
                    item.title != "b"
                }
                #expect(matches.map(\.key) == ["1", "3"])
            }
            try connection.readWrite { txn in
                try txn.removeValue(forKey: "1", inCollection: "items")
                try txn.removeValues(forKeys: ["2", "absent"], inCollection: "items")
                #expect(try txn.keys(inCollection: "items") == ["3"])
                try txn.removeAll(inCollection: "raw")
            }
            try connection.read { txn throws in
                #expect(try txn.keys(inCollection: "items") == ["3"])
                #expect(try txn.collections() == ["items"])
            }
            try connection.readWrite { txn in try txn.removeAllCollections() }
            #expect(try connection.read { try $0.collections() } == [])
        }
    }

    @Test func persistsAcrossReopen() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("db.sqlite").path
            do {
                let db = try Database(path: path)
                try db.newConnection().readWrite {
                    try $0.set(Item(title: "kept"), forKey: "k", inCollection: "c")
                }
                #expect(db.latestCommit == 1)
            }
            let db = try Database(path: path)
            #expect(db.latestCommit == 1)
            let item = try db.newConnection().read {
                try $0.value(forKey: "k", inCollection: "c", as: Item.self)
            }
            #expect(item == Item(title: "kept"))
        }
    }

    struct Boom: Error {}

    @Test func throwingClosureRollsBackEverything() throws {
        try withTemporaryDatabase { db throws in
            let connection = db.newConnection()
            #expect(throws: Boom.self) {
                try connection.readWrite { txn in
                    try txn.set(Item(title: "x"), forKey: "1", inCollection: "c")
                    throw Boom()
                }
            }
            #expect(try connection.read { try $0.hasValue(forKey: "1", inCollection: "c") } == false)
            #expect(db.latestCommit == 0)
        }
    }

    @Test func explicitRollbackDoesNotThrowAndKeepsNothing() throws {
        try withTemporaryDatabase { db throws in
            let connection = db.newConnection()
            let result = try connection.readWrite { txn in
                try txn.set(Item(title: "x"), forKey: "1", inCollection: "c")
                txn.rollback()
                return 42
            }
            #expect(result == 42)
            #expect(try connection.read { try $0.count(inCollection: "c") } == 0)
            #expect(db.latestCommit == 0)
        }
    }

    @Test func nestedSavepointsRollBackAlone() throws {
        try withTemporaryDatabase { db throws in
            let connection = db.newConnection()
            var changes: [Changeset] = []
            let observerQueue = DispatchQueue(label: "observer")
            let observer = db.addObserver(on: observerQueue) { _ in }
            defer { observer.cancel() }
            try connection.readWrite { txn in
                try txn.set(Item(title: "outer"), forKey: "outer", inCollection: "c")
                try txn.savepoint { txn in
                    try txn.set(Item(title: "kept"), forKey: "kept", inCollection: "c")
                    try? txn.savepoint { txn in
                        try txn.set(Item(title: "thrown"), forKey: "thrown", inCollection: "c")
                        throw Boom()
                    }
                    try txn.savepoint { txn in
                        try txn.set(Item(title: "rolled"), forKey: "rolled", inCollection: "c")
                        txn.rollback()
                    }
                    #expect(try !txn.hasValue(forKey: "thrown", inCollection: "c"))
                    #expect(try !txn.hasValue(forKey: "rolled", inCollection: "c"))
                }
            }
            #expect(try connection.read { try $0.keys(inCollection: "c") } == ["kept", "outer"])
            let reader = db.newConnection()
            try reader.beginLongLivedReadTransaction()
            try connection.readWrite { txn in
                try txn.savepoint { txn in
                    try txn.set(Item(title: "gone"), forKey: "gone", inCollection: "c")
                    txn.rollback()
                }
            }
            changes = try reader.beginLongLivedReadTransaction()
            // A transaction whose only change was rolled back by a savepoint commits nothing.
            #expect(changes.isEmpty)
            #expect(db.latestCommit == 1)
        }
    }

    @Test func commitCounterCountsOnlyChangingTransactions() throws {
        try withTemporaryDatabase { db throws in
            let connection = db.newConnection()
            try connection.readWrite { try $0.set(1, forKey: "a", inCollection: "n") }
            try connection.readWrite { _ in }  // no change
            try connection.readWrite { try $0.removeValue(forKey: "absent", inCollection: "n") }  // no change
            try connection.readWrite { try $0.removeAll(inCollection: "empty") }  // no change
            try? connection.readWrite { txn in
                try txn.set(2, forKey: "b", inCollection: "n")
                throw Boom()
            }
            try connection.readWrite { try $0.set(3, forKey: "a", inCollection: "n") }
            #expect(db.latestCommit == 2)
            #expect(connection.snapshot == 2)
            let reader = db.newConnection()
            #expect(try reader.read { $0.commit } == 2)
        }
    }

    /// A writer learns the number of the commit it made from its connection's `snapshot`, even
    /// after others committed; a write that changed nothing leaves the commit it read.
    @Test func aWritersSnapshotIsTheCommitItMade() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            let other = db.newConnection(name: "other")
            var made: [UInt64] = []
            for round in 0..<3 {
                try other.readWrite { try $0.set(round, forKey: "o\(round)", inCollection: "n") }
                try writer.readWrite { try $0.set(round, forKey: "w\(round)", inCollection: "n") }
                made.append(writer.snapshot)
                try other.readWrite { try $0.set(round, forKey: "p\(round)", inCollection: "n") }
                #expect(writer.snapshot == made.last)
            }
            #expect(made == [2, 5, 8])
            let history = try other.read { try $0.changes(after: 0) }
            for commit in made {
                #expect(history.first { $0.commit == commit }?.connectionName == "writer")
            }
            try writer.readWrite { _ in }  // no change: the commit it read
            #expect(writer.snapshot == 9)
        }
    }

    @Test(arguments: [
        "", "'; DROP TABLE snapshotdb_values; --", "a\u{0}b", "ключ", "🔑",
        "Robert'); DELETE FROM snapshotdb_meta;--",
    ])
    func keysAndCollectionsAreNeverSQL(_ name: String) throws {
        try withTemporaryDatabase { db throws in
            let connection = db.newConnection()
            try connection.readWrite { txn in
                try txn.set(Item(title: name), forKey: name, inCollection: name)
                try txn.set(Item(title: "other"), forKey: name + "x", inCollection: name)
            }
            try connection.read { txn throws in
                #expect(try txn.value(forKey: name, inCollection: name, as: Item.self) == Item(title: name))
                #expect(try txn.keys(inCollection: name) == [name, name + "x"])
                #expect(try txn.collections() == [name])
            }
            try connection.readWrite { try $0.removeValue(forKey: name, inCollection: name) }
            #expect(try connection.read { try $0.keys(inCollection: name) } == [name + "x"])
            #expect(db.latestCommit == 2)
        }
    }

    @Test func wrongTypeDecodingNamesCollectionKeyAndType() throws {
        try withTemporaryDatabase { db throws in
            let connection = db.newConnection()
            try connection.readWrite { try $0.set("text", forKey: "k", inCollection: "c") }
            let error = expectError(.decodingFailed) {
                try connection.read { try $0.value(forKey: "k", inCollection: "c", as: Item.self) }
            }
            #expect(error?.collection == "c")
            #expect(error?.key == "k")
            #expect(error?.typeName == "Item")
            // The value is intact and still readable as what it is.
            #expect(
                try connection.read { try $0.value(forKey: "k", inCollection: "c", as: String.self) }
                    == "text")
        }
    }

    @Test func transactionUsedAfterClosureThrowsTransactionEnded() throws {
        try withTemporaryDatabase { db throws in
            let connection = db.newConnection()
            let escaped = try connection.readWrite { $0 }
            expectError(.transactionEnded) {
                try escaped.set(1, forKey: "k", inCollection: "c")
            }
            let escapedRead = try connection.read { $0 }
            expectError(.transactionEnded) {
                _ = try escapedRead.keys(inCollection: "c")
            }
            #expect(db.latestCommit == 0)
        }
    }

    @Test func nestedUseOfTheSameConnectionIsMisuse() throws {
        try withTemporaryDatabase { db throws in
            let connection = db.newConnection()
            try connection.read { _ in
                _ = expectError(.misuse) { try connection.read { _ in } }
            }
        }
    }

    @Test func codecsPerCollection() throws {
        try withTemporaryDatabase { db throws in
            try db.register(PropertyListValueCodec(), forCollection: "plist")
            try db.register(RawDataCodec(), forCollection: "raw")
            let connection = db.newConnection()
            try connection.readWrite { txn in
                try txn.set(Item(title: "p"), forKey: "1", inCollection: "plist")
                try txn.set(Data("bytes".utf8), forKey: "1", inCollection: "raw")
                expectError(.encodingFailed) {
                    try txn.set(Item(title: "not data"), forKey: "2", inCollection: "raw")
                }
                try txn.set(Item(title: "j"), forKey: "1", inCollection: "json")
            }
            try connection.read { txn throws in
                #expect(try txn.value(forKey: "1", inCollection: "plist", as: Item.self) == Item(title: "p"))
                #expect(try txn.data(forKey: "1", inCollection: "plist")?.prefix(6) == Data("bplist".utf8))
                #expect(try txn.data(forKey: "1", inCollection: "raw") == Data("bytes".utf8))
                #expect(try txn.value(forKey: "1", inCollection: "raw", as: Data.self) == Data("bytes".utf8))
                let json = try #require(try txn.data(forKey: "1", inCollection: "json"))
                #expect(String(decoding: json, as: UTF8.self) == #"{"count":0,"title":"j"}"#)
            }
            expectError(.misuse) { try db.register(JSONValueCodec(), forCollection: "late") }
        }
    }

    @Test func asyncOverloadsRunOffTheCaller() async throws {
        /// Whether the calling code runs outside any task: on the connection's queue, not on the
        /// caller's task (the cooperative pool's thread it awaited on).
        @Sendable func outsideAnyTask() -> Bool { withUnsafeCurrentTask { $0 == nil } }
        try await withTemporaryDatabase { db in
            let connection = db.newConnection(name: "offcaller")
            let (commit, writeOutside) = try await connection.readWrite { txn in
                try txn.set(Item(title: "async"), forKey: "1", inCollection: "c")
                return (txn.commit, outsideAnyTask())
            }
            #expect(commit == 0)
            let (item, readOutside) = try await connection.read {
                (try $0.value(forKey: "1", inCollection: "c", as: Item.self), outsideAnyTask())
            }
            #expect(item == Item(title: "async"))
            // Both closures ran on the connection's queue, outside the caller's task.
            #expect(writeOutside)
            #expect(readOutside)
            #expect(!outsideAnyTask())
        }
    }

    /// For each order, its lines: an enumeration inside an enumeration runs the same query
    /// again while the outer one is part way through its rows.
    @Test func enumerationInsideAnEnumerationSeesEveryRowOfBoth() throws {
        try withTemporaryDatabase { db throws in
            let connection = db.newConnection(name: "app")
            try connection.readWrite { txn in
                for order in ["o1", "o2", "o3"] {
                    try txn.set(order.uppercased(), forKey: order, inCollection: "orders")
                    for line in 1...2 { try txn.set(line, forKey: "\(order)-\(line)", inCollection: "lines") }
                }
            }
            let pairs = try connection.read { txn in
                var pairs: [String] = []
                try txn.enumerate(inCollection: "orders", as: String.self) { order, _, _ in
                    let lines = try txn.values(inCollection: "lines", as: Int.self) { key, _ in
                        key.hasPrefix(order)
                    }
                    pairs += lines.map { "\(order):\($0.key)" }
                    // The same collection again, and a stop inside: the outer loop goes on.
                    try txn.enumerate(inCollection: "orders", as: String.self) { _, _, stop in stop = true }
                }
                return pairs
            }
            #expect(pairs == ["o1:o1-1", "o1:o1-2", "o2:o2-1", "o2:o2-2", "o3:o3-1", "o3:o3-2"])
            // In a write transaction too, and the cached statement still works afterwards.
            let counted = try connection.readWrite { txn in
                var count = 0
                try txn.enumerate(inCollection: "orders", as: String.self) { _, _, _ in
                    count += try txn.values(inCollection: "lines", as: Int.self).count
                }
                return count
            }
            #expect(counted == 18)
            #expect(try connection.read { try $0.values(inCollection: "orders", as: String.self).count } == 3)
        }
    }
}
