import Foundation
import SnapshotDB
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
