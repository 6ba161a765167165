import Foundation
import SnapshotDB
import SnapshotDBTestSupport
import Testing

/// A full disk, made real by a file size limit (`RLIMIT_FSIZE`) on a child process: SQLite's
/// writes past the limit fail exactly as they do on a full file system.
///
/// The child is this test binary again, running only ``childUnderFileSizeLimit()`` (enabled by
/// an environment variable), so that the limit never touches the test runner itself.
@Suite("Full disk")
struct DiskFullTests {
    static let childDatabaseKey = "SNAPSHOTDB_DISK_FULL_CHILD_DB"

    @Test func fullDiskFailsTheTransactionKeepsEarlierCommitsAndRecovers() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("full.sqlite").path
            do {
                let db = try Database(path: path)
                let writer = db.newConnection()
                for index in 0..<5 {
                    try writer.readWrite {
                        try $0.set(Item(title: "kept \(index)"), forKey: "\(index)", inCollection: "c")
                    }
                }
            }
            let child = try runChildTest(
                "childUnderFileSizeLimit", environmentKey: Self.childDatabaseKey, path: path)
            let results = child.results
            #expect(results["failed-with"] == "diskFull", "child said: \(child.output)")
            #expect(results["commit-after-failure"] == "5")
            #expect(results["values-after-failure"] == "5")
            #expect(results["after-space-returned"] == "committed 6")
            #expect(child.terminationStatus == 0)

            // Reopened by this process: intact, with every commit and none of the failed one.
            let db = try Database(path: path)
            #expect(db.latestCommit == 6)
            try db.newConnection().read { txn throws in
                #expect(try txn.keys(inCollection: "c") == ["0", "1", "2", "3", "4"])
                #expect(try txn.keys(inCollection: "big") == [])
                #expect(try txn.keys(inCollection: "small") == ["after"])
            }
            #expect(try run("/usr/bin/sqlite3", [path, "PRAGMA integrity_check"]) == "ok\n")
        }
    }

    static let preallocationChildKey = "SNAPSHOTDB_DISK_FULL_PREALLOCATION_CHILD_DB"

    /// WAL preallocation (256 KiB of zeros past the frames) is best effort: with room for the
    /// frames and not for the zeros, commits still succeed and the WAL stays under the limit.
    @Test func commitsThatFitSucceedWhenTheWALPreallocationDoesNot() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("tight.sqlite").path
            do {
                let db = try Database(path: path)
                try db.newConnection().readWrite {
                    try $0.set(Item(title: "first"), forKey: "first", inCollection: "c")
                }
                #expect(try db.checkpoint(.truncate).isComplete)
            }
            let child = try runChildTest(
                "childPreallocatingUnderFileSizeLimit", environmentKey: Self.preallocationChildKey, path: path
            )
            #expect(child.results["committed"] == "5", "child said: \(child.output)")
            #expect(child.results["failed-with"] == nil, "child said: \(child.output)")
            let walBytes = Int(child.results["wal-bytes"] ?? "") ?? .max
            let limit = Int(child.results["limit"] ?? "") ?? 0
            #expect(walBytes <= limit)
            #expect(child.terminationStatus == 0)

            let db = try Database(path: path)
            #expect(db.latestCommit == 6)
            try db.newConnection().read { txn throws in
                #expect(try txn.keys(inCollection: "c") == ["0", "1", "2", "3", "4", "first"])
            }
            #expect(try isIntact(path))
        }
    }

    @Test(.enabled(if: ProcessInfo.processInfo.environment[preallocationChildKey] != nil))
    func childPreallocatingUnderFileSizeLimit() throws {
        let path = try #require(ProcessInfo.processInfo.environment[Self.preallocationChildKey])
        let db = try Database(path: path)
        let writer = db.newConnection()
        let databaseBytes =
            (try FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.intValue ?? 0
        reportResult("limit", "\(databaseBytes + 64 * 1024)")
        withFileSizeLimit(above: path) {
            var committed = 0
            do {
                for index in 0..<5 {
                    try writer.readWrite {
                        try $0.set(Item(title: "row \(index)"), forKey: "\(index)", inCollection: "c")
                    }
                    committed += 1
                }
            } catch {
                reportResult("failed-with", (error as? DatabaseError)?.code.name ?? "\(error)")
            }
            reportResult("committed", "\(committed)")
        }
        let walBytes =
            (try FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? NSNumber)?.intValue
            ?? 0
        reportResult("wal-bytes", "\(walBytes)")
    }

    @Test(.enabled(if: ProcessInfo.processInfo.environment[childDatabaseKey] != nil))
    func childUnderFileSizeLimit() throws {
        let path = try #require(ProcessInfo.processInfo.environment[Self.childDatabaseKey])
        let db = try Database(path: path)
        let writer = db.newConnection()
        withFileSizeLimit(above: path) {
            do {
                try writer.readWrite { txn in
                    try txn.setData(Data(repeating: 7, count: 4 << 20), forKey: "huge", inCollection: "big")
                }
                reportResult("failed-with", "nothing")
            } catch {
                reportResult("failed-with", (error as? DatabaseError)?.code.name ?? "\(error)")
            }
        }
        reportResult("commit-after-failure", "\(db.latestCommit)")
        reportResult("values-after-failure", "\(try writer.read { try $0.count(inCollection: "c") })")
        try writer.readWrite { try $0.set("back", forKey: "after", inCollection: "small") }
        reportResult("after-space-returned", "committed \(db.latestCommit)")
    }
}
