import Foundation
import SnapshotDB
import SnapshotDBTestSupport
import Testing

/// Some errors make SQLite roll back the whole transaction on its own (an I/O error or a full
/// disk while the page cache spills to the WAL, out of memory). A caller that catches such an
/// error inside `readWrite` and goes on must not end up writing outside any transaction: every
/// later use of the transaction fails with the same code, and the transaction commits nothing.
///
/// As in ``DiskFullTests``, the full disk is a file size limit on a child process (this test
/// binary again, running only ``childCatchingDiskFullAndGoingOn()``).
@Suite("Transactions SQLite rolled back")
struct AutomaticRollbackTests {
    static let childDatabaseKey = "SNAPSHOTDB_AUTOMATIC_ROLLBACK_CHILD_DB"

    @Test func writesAfterACaughtDiskFullAreRefusedAndNothingCommits() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("rollback.sqlite").path
            do {
                let db = try Database(path: path)
                try db.newConnection().readWrite {
                    try $0.set(Item(title: "kept"), forKey: "kept", inCollection: "c")
                }
            }
            let child = try runChildTest(
                "childCatchingDiskFullAndGoingOn", environmentKey: Self.childDatabaseKey, path: path)
            let results = child.results
            #expect(results["huge"] == "diskFull", "child said: \(child.output)")
            #expect(results["small-after"] == "diskFull")
            #expect(results["read-after"] == "diskFull")
            #expect(results["savepoint-after"] == "diskFull")
            #expect(results["transaction"] == "diskFull")
            #expect(results["commit-after-failure"] == "1")
            #expect(results["keys-after-failure"] == "kept")
            #expect(results["after-space-returned"] == "committed 2")
            #expect(child.terminationStatus == 0)

            // Nothing of the failed transaction reached the file, not even what ran after the
            // automatic rollback.
            #expect(try isIntact(path))
            #expect(try sqlite3(path, "SELECT key FROM snapshotdb_values ORDER BY key") == "after\nkept\n")
            #expect(try sqlite3(path, "SELECT max(number) FROM snapshotdb_history") == "2\n")
        }
    }

    @Test(.enabled(if: ProcessInfo.processInfo.environment[childDatabaseKey] != nil))
    func childCatchingDiskFullAndGoingOn() throws {
        let path = try #require(ProcessInfo.processInfo.environment[Self.childDatabaseKey])
        let db = try Database(path: path)
        let writer = db.newConnection()
        func code(_ body: () throws -> Void) -> String {
            do {
                try body()
                return "nothing"
            } catch let error as DatabaseError {
                return error.code.name
            } catch {
                return "\(error)"
            }
        }

        withFileSizeLimit(above: path) {
            reportResult(
                "transaction",
                code {
                    try writer.readWrite { txn in
                        try txn.set(Item(title: "small"), forKey: "small before", inCollection: "c")
                        reportResult(
                            "huge",
                            code {
                                // Spills the page cache to the WAL, past the file size limit.
                                try txn.setData(
                                    Data(repeating: 7, count: 4 << 20), forKey: "huge", inCollection: "big")
                            })
                        reportResult(
                            "small-after",
                            code {
                                try txn.set(Item(title: "small"), forKey: "small after", inCollection: "c")
                            })
                        reportResult("read-after", code { _ = try txn.keys(inCollection: "c") })
                        reportResult(
                            "savepoint-after",
                            code {
                                try txn.savepoint {
                                    try $0.set(Item(title: "small"), forKey: "savepoint", inCollection: "c")
                                }
                            })
                    }
                })
        }
        reportResult("commit-after-failure", "\(db.latestCommit)")
        reportResult(
            "keys-after-failure", (try writer.read { try $0.keys(inCollection: "c") }).joined(separator: ","))
        try writer.readWrite { try $0.set(Item(title: "after"), forKey: "after", inCollection: "c") }
        reportResult("after-space-returned", "committed \(db.latestCommit)")
    }
}
