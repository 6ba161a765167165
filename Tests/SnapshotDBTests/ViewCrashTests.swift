import Foundation
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDB

/// A view is updated in the same SQLite transaction as its values: a process killed in the
/// middle of writing leaves a view that equals a rebuild from the values that survived.
@Suite("Views after a crash")
struct ViewCrashTests {
    static let childKey = "SNAPSHOTDB_VIEW_CRASH_CHILD_DB"

    /// Timeline: the child registers the view and commits transactions of several writes each,
    /// printing the number of each commit | after 40 commits this process kills it with
    /// SIGKILL, wherever it is | reopened, the view's rows are those of a brute-force sort of
    /// the values, and registering the same version again changes nothing.
    @Test func aKilledWriterLeavesTheViewInStepWithTheValues() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("crash.sqlite").path
            let testBinary = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
            let child = try ChildProcess(
                testBinary, ["--testing-library", "swift-testing", "--filter", "childWritesUntilKilled"],
                environment: [Self.childKey: path])
            while true {
                let line = try child.readLine()
                if line.hasPrefix("committed "), Int(line.dropFirst(10)) ?? 0 >= 40 { break }
            }
            child.kill()
            let db = try Database(path: path)
            try db.register(ViewTests.byTitle)
            #expect(db.latestCommit >= 40)
            try db.newConnection().read { txn throws in
                let view = try txn.view(named: "byTitle")
                let expected = try ViewTests.expectedRows(txn)
                #expect(ViewTests.rows(view) == expected)
                #expect(view.count > 0)
            }
            #expect(try isIntact(path))
        }
    }

    @Test(.enabled(if: ProcessInfo.processInfo.environment[childKey] != nil))
    func childWritesUntilKilled() throws {
        let path = try #require(ProcessInfo.processInfo.environment[Self.childKey])
        let db = try Database(path: path)
        try db.register(ViewTests.byTitle)
        let writer = db.newConnection(name: "child")
        var random = SeededGenerator(state: 7)
        let folders = ["inbox", "work", "home"]
        while true {
            let commit = try writer.readWrite { txn in
                for _ in 0..<8 {
                    let key = "n\(Int.random(in: 0..<200, using: &random))"
                    if Int.random(in: 0..<4, using: &random) == 0 {
                        try txn.removeValue(forKey: key, inCollection: "notes")
                    } else {
                        let note = Note(
                            title: "\(Int.random(in: 0..<1000, using: &random))",
                            folder: folders.randomElement(using: &random)!, archived: false)
                        try txn.set(note, forKey: key, inCollection: "notes")
                    }
                }
                return txn.commit + 1
            }
            // Unbuffered, so the parent sees each line as soon as the commit returned.
            FileHandle.standardOutput.write(Data("committed \(commit)\n".utf8))
        }
    }
}
