import Foundation
import SnapshotDB
import Testing

#if canImport(Glibc)
    import Glibc
#endif

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
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
            process.arguments = ["--testing-library", "swift-testing", "--filter", "childUnderFileSizeLimit"]
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
            #expect(results["failed-with"] == "diskFull", "child said: \(text)")
            #expect(results["commit-after-failure"] == "5")
            #expect(results["values-after-failure"] == "5")
            #expect(results["after-space-returned"] == "committed 6")
            #expect(process.terminationStatus == 0)

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
        signal(SIGXFSZ, SIG_IGN)
        let db = try Database(path: path)
        let writer = db.newConnection()
        func report(_ name: String, _ value: String) { print("RESULT \(name) \(value)") }

        var limit = rlimit()
        getrlimit(fileSizeResource, &limit)
        let original = limit
        let fileSize =
            (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.intValue ?? 0
        limit.rlim_cur = rlim_t(fileSize + 64 * 1024)
        setrlimit(fileSizeResource, &limit)
        do {
            try writer.readWrite { txn in
                try txn.setData(Data(repeating: 7, count: 4 << 20), forKey: "huge", inCollection: "big")
            }
            report("failed-with", "nothing")
        } catch let error as DatabaseError {
            report("failed-with", error.code.name)
        }
        report("commit-after-failure", "\(db.latestCommit)")
        report("values-after-failure", "\(try writer.read { try $0.count(inCollection: "c") })")

        limit = original
        setrlimit(fileSizeResource, &limit)
        try writer.readWrite { try $0.set("back", forKey: "after", inCollection: "small") }
        report("after-space-returned", "committed \(db.latestCommit)")
    }
}

/// `RLIMIT_FSIZE` as the type `getrlimit` takes on this platform.
#if canImport(Glibc)
    let fileSizeResource = __rlimit_resource_t(RLIMIT_FSIZE.rawValue)
#else
    let fileSizeResource = RLIMIT_FSIZE
#endif
