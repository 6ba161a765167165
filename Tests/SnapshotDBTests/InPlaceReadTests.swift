import Foundation
import SnapshotDB
import Testing

/// `withUnsafeBytes(forKey:inCollection:_:)`: the read that lends a value's bytes in place.
@Suite("In-place reads")
struct InPlaceReadTests {
    /// A value larger than a page (SQLite keeps it in overflow pages) and small ones, an empty
    /// one, and a key that is absent: the lent bytes are what `data(forKey:)` copies.
    @Test func lendsTheStoredBytes() throws {
        try withTemporaryDatabase { db throws in
            let values: [String: Data] = [
                "small": Data("hello".utf8), "empty": Data(),
                "large": Data((0..<20_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }),
            ]
            try db.newConnection(name: "writer").readWrite { txn in
                for (key, value) in values { try txn.setData(value, forKey: key, inCollection: "c") }
            }
            let reader = db.newConnection(name: "reader")
            // Three rounds: in place, then admitted to the cache on the second read, then lent
            // from the cache.
            for _ in 0..<3 {
                try reader.read { txn throws in
                    for (key, value) in values {
                        let lent = try txn.withUnsafeBytes(forKey: key, inCollection: "c") { Data($0) }
                        #expect(lent == value, "key \(key)")
                    }
                    var called = false
                    let absent = try txn.withUnsafeBytes(forKey: "absent", inCollection: "c") { _ -> Bool in
                        called = true
                        return true
                    }
                    #expect(absent == nil)
                    #expect(!called)
                }
            }
            #expect(reader.cachedValueCount == values.count)
        }
    }

    /// Reads inside the body, of the same key, of another key and lent again, leave the
    /// outer bytes where they were.
    @Test func readsInsideTheBodyLeaveTheBytesInPlace() throws {
        try withTemporaryDatabase { db throws in
            try db.newConnection(name: "writer").readWrite { txn in
                try txn.setData(Data(repeating: 1, count: 64), forKey: "a", inCollection: "c")
                try txn.setData(Data(repeating: 2, count: 64), forKey: "b", inCollection: "c")
            }
            try db.newConnection(name: "reader").read { txn throws in
                let result = try txn.withUnsafeBytes(forKey: "a", inCollection: "c") { outer throws in
                    let before = Data(outer)
                    let b = try txn.data(forKey: "b", inCollection: "c")
                    let a = try txn.data(forKey: "a", inCollection: "c")
                    let nested = try txn.withUnsafeBytes(forKey: "b", inCollection: "c") { inner throws in
                        try txn.withUnsafeBytes(forKey: "a", inCollection: "c") { Data($0) == Data(outer) }
                            == true && inner.allSatisfy { $0 == 2 }
                    }
                    return before == Data(outer) && b == Data(repeating: 2, count: 64)
                        && a == Data(repeating: 1, count: 64) && nested == true
                }
                #expect(result == true)
            }
        }
    }

    /// In a read-write transaction the body sees the transaction's own writes; a write inside
    /// the body is misuse and changes nothing, and the transaction goes on after it.
    @Test func aWriteInsideTheBodyIsMisuse() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in try txn.setData(Data([1]), forKey: "a", inCollection: "c") }
            try writer.readWrite { txn in
                try txn.setData(Data([2]), forKey: "a", inCollection: "c")
                let seen = try txn.withUnsafeBytes(forKey: "a", inCollection: "c") { Data($0) }
                #expect(seen == Data([2]))
                for write in [
                    { try txn.setData(Data([3]), forKey: "a", inCollection: "c") },
                    { try txn.setData(Data([3]), forKey: "other", inCollection: "elsewhere") },
                    { try txn.removeValue(forKey: "a", inCollection: "c") },
                    { try txn.removeAllCollections() },
                    { _ = try txn.setMetadata("m", forKey: "a", inCollection: "c") },
                ] as [() throws -> Void] {
                    let error = #expect(throws: DatabaseError.self) {
                        try txn.withUnsafeBytes(forKey: "a", inCollection: "c") { _ in try write() }
                    }
                    #expect(error?.code == .misuse)
                }
                try txn.setData(Data([4]), forKey: "b", inCollection: "c")
            }
            try writer.read { txn throws in
                #expect(try txn.data(forKey: "a", inCollection: "c") == Data([2]))
                #expect(try txn.data(forKey: "b", inCollection: "c") == Data([4]))
                #expect(try txn.data(forKey: "other", inCollection: "elsewhere") == nil)
                #expect(try txn.metadata(forKey: "a", inCollection: "c", as: String.self) == nil)
            }
        }
    }

    /// An error thrown by the body reaches the caller, and the statement is ready for the next
    /// read.
    @Test func theBodysErrorPassesThrough() throws {
        struct Stop: Error {}
        try withTemporaryDatabase { db throws in
            try db.newConnection(name: "writer").readWrite { txn in
                try txn.setData(Data([7]), forKey: "a", inCollection: "c")
            }
            try db.newConnection(name: "reader").read { txn throws in
                #expect(throws: Stop.self) {
                    try txn.withUnsafeBytes(forKey: "a", inCollection: "c") { _ in throw Stop() }
                }
                #expect(try txn.withUnsafeBytes(forKey: "a", inCollection: "c") { Data($0) } == Data([7]))
            }
        }
    }

    /// A bookmarked connection is lent the bytes of its commit while a writer changes them.
    @Test func aBookmarkIsLentItsCommitsBytes() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            let reader = db.newConnection(name: "reader")
            try writer.readWrite { txn in try txn.setData(Data("old".utf8), forKey: "a", inCollection: "c") }
            try reader.beginLongLivedReadTransaction()
            try writer.readWrite { txn in try txn.setData(Data("new".utf8), forKey: "a", inCollection: "c") }
            for _ in 0..<3 {
                let lent = try reader.read { txn throws in
                    try txn.withUnsafeBytes(forKey: "a", inCollection: "c") { Data($0) }
                }
                #expect(lent == Data("old".utf8))
            }
            try reader.beginLongLivedReadTransaction()
            let advanced = try reader.read { txn throws in
                try txn.withUnsafeBytes(forKey: "a", inCollection: "c") { Data($0) }
            }
            #expect(advanced == Data("new".utf8))
        }
    }
}
