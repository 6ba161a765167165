import Foundation
import SnapshotDB
import Testing

#if canImport(Glibc)
    import Glibc
#endif

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
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
            process.arguments = [
                "--testing-library", "swift-testing", "--filter", "childCatchingDiskFullAndGoingOn",
            ]
            process.environment = ProcessInfo.processInfo.environment.merging([Self.childDatabaseKey: path]) {
                $1
            }
            let output = Pipe()
            process.standardOutput = output
            process.standardError = FileHandle.nullDevice
            try process.run()
            let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            let results = Dictionary(
                text.split(separator: "\n").compactMap { line -> (String, String)? in
                    let parts = line.split(separator: " ", maxSplits: 2).map(String.init)
                    return parts.count == 3 && parts[0] == "RESULT" ? (parts[1], parts[2]) : nil
                }, uniquingKeysWith: { $1 })
            #expect(results["huge"] == "diskFull", "child said: \(text)")
            #expect(results["small-after"] == "diskFull")
            #expect(results["read-after"] == "diskFull")
            #expect(results["savepoint-after"] == "diskFull")
            #expect(results["transaction"] == "diskFull")
            #expect(results["commit-after-failure"] == "1")
            #expect(results["keys-after-failure"] == "kept")
            #expect(results["after-space-returned"] == "committed 2")
            #expect(process.terminationStatus == 0)

            // Nothing of the failed transaction reached the file, not even what ran after the
            // automatic rollback.
            #expect(try isIntact(path))
            #expect(try sqlite3(path, "SELECT key FROM snapshotdb_values ORDER BY key") == "after\nkept\n")
            #expect(try sqlite3(path, "SELECT value FROM snapshotdb_meta WHERE name = 'commit'") == "2\n")
        }
    }

    @Test(.enabled(if: ProcessInfo.processInfo.environment[childDatabaseKey] != nil))
    func childCatchingDiskFullAndGoingOn() throws {
        let path = try #require(ProcessInfo.processInfo.environment[Self.childDatabaseKey])
        signal(SIGXFSZ, SIG_IGN)
        let db = try Database(path: path)
        let writer = db.newConnection()
        func report(_ name: String, _ value: String) { print("RESULT \(name) \(value)") }
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

        var limit = rlimit()
        getrlimit(fileSizeResource, &limit)
        let original = limit
        let fileSize =
            (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.intValue ?? 0
        limit.rlim_cur = rlim_t(fileSize + 64 * 1024)
        setrlimit(fileSizeResource, &limit)
        report(
            "transaction",
            code {
                try writer.readWrite { txn in
                    try txn.set(Item(title: "small"), forKey: "small before", inCollection: "c")
                    report(
                        "huge",
                        code {
                            // Spills the page cache to the WAL, past the file size limit.
                            try txn.setData(
                                Data(repeating: 7, count: 4 << 20), forKey: "huge", inCollection: "big")
                        })
                    report(
                        "small-after",
                        code { try txn.set(Item(title: "small"), forKey: "small after", inCollection: "c") })
                    report("read-after", code { _ = try txn.keys(inCollection: "c") })
                    report(
                        "savepoint-after",
                        code {
                            try txn.savepoint {
                                try $0.set(Item(title: "small"), forKey: "savepoint", inCollection: "c")
                            }
                        })
                }
            })
        limit = original
        setrlimit(fileSizeResource, &limit)
        report("commit-after-failure", "\(db.latestCommit)")
        report(
            "keys-after-failure", (try writer.read { try $0.keys(inCollection: "c") }).joined(separator: ","))
        try writer.readWrite { try $0.set(Item(title: "after"), forKey: "after", inCollection: "c") }
        report("after-space-returned", "committed \(db.latestCommit)")
    }
}
