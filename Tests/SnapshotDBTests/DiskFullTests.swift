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
    /// frames and not for the zeros, commits still succeed, and the zeros written before the
    /// write failed are given back (the VFS truncates the WAL to where it was), so the WAL ends
    /// at its last commit frame. The same commits without the limit (the control) do leave
    /// zeros past it: the limited run did try to preallocate.
    @Test func commitsThatFitSucceedWhenTheWALPreallocationDoesNot() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("tight.sqlite").path
            let control = directory.appendingPathComponent("control.sqlite").path
            do {
                let db = try Database(path: path)
                try db.newConnection().readWrite {
                    try $0.set(Item(title: "first"), forKey: "first", inCollection: "c")
                }
                #expect(try db.checkpoint(.truncate).isComplete)
            }
            try FileManager.default.copyItem(atPath: path, toPath: control)
            let unlimited = try Self.commitFive(at: control, underFileSizeLimit: false)
            #expect(unlimited["committed"] == "5", "\(unlimited)")
            let unlimitedEnd = try #require(Int(unlimited["wal-last-commit-end"] ?? ""), "\(unlimited)")
            #expect(Int(unlimited["wal-bytes"] ?? "") ?? 0 > unlimitedEnd, "preallocated: \(unlimited)")
            #expect(unlimited["wal-zeros-past-last-commit"] == "true", "\(unlimited)")

            let child = try runChildTest(
                "childPreallocatingUnderFileSizeLimit", environmentKey: Self.preallocationChildKey, path: path
            )
            #expect(child.results["committed"] == "5", "child said: \(child.output)")
            #expect(child.results["failed-with"] == nil, "child said: \(child.output)")
            // The five commits' frames, and nothing past them.
            let childEnd = try #require(Int(child.results["wal-last-commit-end"] ?? ""), "\(child.output)")
            #expect(childEnd > 32, "child said: \(child.output)")
            #expect(child.results["wal-bytes"] == "\(childEnd)", "child said: \(child.output)")
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
        for (name, value) in try Self.commitFive(at: path, underFileSizeLimit: true) {
            reportResult(name, value)
        }
    }

    /// Makes five one-row commits on the database at `path` (synchronous = FULL, so the VFS
    /// preallocates), under a file size limit 64 KiB above the database's size or without one,
    /// and returns what happened and what the `-wal` holds while the database is still open.
    static func commitFive(at path: String, underFileSizeLimit: Bool) throws -> [String: String] {
        var results: [String: String] = [:]
        let db = try Database(path: path)
        let writer = db.newConnection()
        func commit() {
            var committed = 0
            do {
                for index in 0..<5 {
                    try writer.readWrite {
                        try $0.set(Item(title: "row \(index)"), forKey: "\(index)", inCollection: "c")
                    }
                    committed += 1
                }
            } catch {
                results["failed-with"] = (error as? DatabaseError)?.code.name ?? "\(error)"
            }
            results["committed"] = "\(committed)"
        }
        if underFileSizeLimit { withFileSizeLimit(above: path, commit) } else { commit() }
        let wal = try Data(contentsOf: URL(fileURLWithPath: path + "-wal"))
        let lastCommitEnd = DamagedFileTests.CrashCopy.commitFrameEnds(of: wal).last ?? 0
        results["wal-bytes"] = "\(wal.count)"
        results["wal-last-commit-end"] = "\(lastCommitEnd)"
        results["wal-zeros-past-last-commit"] = "\(wal[lastCommitEnd...].allSatisfy { $0 == 0 })"
        return results
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
