import Foundation
import SnapshotDBTestSupport
import Testing

@Suite("snapshotdb demo")
struct DemoTests {
    @Test func demoRunsEveryStepAndTheMonitorNamesTheLaggard() throws {
        try withTemporaryDirectory { directory in
            let result = try Tool.run("demo", directory.path)
            #expect(result.status == 0, "demo failed: \(result.standardError)")
            let output = result.standardOutput
            // It says where its files are, where its source is, and that they are kept.
            #expect(output.contains("Database: \(directory.appendingPathComponent("demo.sqlite").path)"))
            #expect(output.contains("(kept after the demo)"))
            #expect(output.contains("Sources/snapshotdb/DemoCommand.swift"))
            // The bookmarked reader jumped exactly the three commits made while it held on (the
            // view's registration was commit 1).
            #expect(output.contains("ui advances to commit 204 and gets 3 changesets"))
            #expect(output.contains(#"commit 203 by writer-2; removed items["1-1", "1-2"]"#))
            // The view's row changes for that advance: two deletions at old indexes, one update.
            #expect(output.contains("delete(items/1-2, at: under 50[5])"))
            #expect(output.contains("delete(items/1-1, at: under 50[3])"))
            #expect(output.contains("update(items/0-1, at: under 50[2])"))
            // The checkpoint monitor's warning names the laggard, and only it.
            let warnings = output.split(separator: "\n").filter {
                $0.contains("warning snapshotdb.checkpoint")
            }
            #expect(!warnings.isEmpty)
            #expect(warnings.allSatisfy { $0.contains("'laggard'") && !$0.contains("'ui'") })
            // The inspect report from another process sees the laggard's pin.
            #expect(output.contains("400 commits, "))
            #expect(output.contains("WAL reset   not possible"))
            // Once the laggard advanced, the WAL was reset.
            #expect(output.contains("truncate checkpoint complete: true; WAL now 0 bytes on disk"))
            // A directory given by the user is kept, with its database.
            #expect(
                FileManager.default.fileExists(atPath: directory.appendingPathComponent("demo.sqlite").path))
            // A second run refuses the existing database: a failure of the run, not of the
            // command line (no usage, exit status 1).
            let again = try Tool.run("demo", directory.path)
            #expect(again.status == 1)
            #expect(again.standardError.contains("demo.sqlite exists; the demo only runs on a new database"))
            #expect(!again.standardError.contains("Usage"))
        }
    }

    @Test func aLaggardCommitCountBelowOneIsACommandLineError() throws {
        try withTemporaryDirectory { directory in
            for count in ["0", "-1", "-400"] {
                // A directory of its own for each: a demo that ran would leave its database there.
                let folder = directory.appendingPathComponent("laggard\(count)").path
                let result = try Tool.run("demo", folder, "--laggard-commits=\(count)")
                #expect(result.status == 64, "\(count): \(result.standardError)")
                #expect(result.standardError.contains("--laggard-commits must be at least 1."))
                #expect(result.standardOutput.isEmpty, "the demo did not start")
                #expect(!FileManager.default.fileExists(atPath: folder))
            }
        }
    }
}
