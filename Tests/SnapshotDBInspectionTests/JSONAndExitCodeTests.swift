import Foundation
import SnapshotDBInspection
import SnapshotDBTestSupport
import Testing

/// `--json` carries the report with stable keys; thresholds turn into exit codes.
@Suite("JSON output and exit codes")
struct JSONAndExitCodeTests {
    @Test("--json parses, has the documented keys, and decodes back into the report")
    func jsonKeys() throws {
        try withFixtureDatabase { path in
            try Python.run(Python.commit, path, "4", "crash")
            let json = try Tool.inspectJSON(path, "--frames")
            for key in [
                "formatVersion", "database.path", "database.sizeBytes", "database.header.pageSize",
                "database.header.pageCount", "database.header.applicationID", "database.header.userVersion",
                "snapshotDB.isSnapshotDB", "snapshotDB.schemaVersion", "snapshotDB.commitCounter",
                "wal.sizeBytes", "wal.header.salt1", "wal.header.checkpointSequence", "wal.validFrames",
                "wal.commitFrames", "wal.lastCommitFrame", "wal.staleFrames", "walIndex.header.mxFrame",
                "walIndex.nBackfill", "walIndex.nBackfillAttempted", "walIndex.readMarks",
                "walIndex.copiesAgree",
                "walIndex.reliable", "locks.bytes.0.offset", "locks.bytes.8.name", "readSlots.0.slot",
                "readSlots.0.held", "walReset.possible", "walReset.blockers", "walReset.framesToCheckpoint",
                "committedFrames", "checkpointedFrames", "health.healthy", "health.walBytes",
                "health.lagFrames",
                "health.warnings", "frames.0.index", "frames.0.pageNumber", "frames.0.status",
                "frames.0.checkpointed", "generatedAt",
            ] {
                #expect(json.value(at: key) != nil, "missing key \(key)")
            }
            #expect(json.value(at: "formatVersion") as? Int == 1)
            #expect(json.value(at: "snapshotDB.commitCounter") as? Int == 4)
            #expect(json.value(at: "database.header.applicationID") as? Int == 1_399_735_362)
            #expect(json.value(at: "locks.bytes.8.name") as? String == "dms")
            #expect(json.value(at: "locks.bytes.8.offset") as? Int == 128)
            #expect((json.value(at: "frames") as? [Any])?.count == 8)

            // The same document decodes into the library's Codable model.
            let result = try Tool.run("inspect", "--json", path)
            let report = try JSONDecoder().decode(
                InspectionReport.self, from: Data(result.standardOutput.utf8))
            #expect(report.snapshotDB.commitCounter == 4)
            #expect(report.wal?.commitFrames == 4)
            #expect(report == (try SnapshotDBInspector.inspect(databaseAt: path, options: .separateProcess)))
        }
    }

    @Test("a command line that cannot be parsed: usage on standard error, 64")
    func usage() throws {
        for arguments in [
            ["no-such-command"],
            ["inspect"],
            ["inspect", "--no-such-option", "app.sqlite"],
            ["inspect", "app.sqlite", "--warn-wal-bytes", "many"],
            ["checkpoint", "app.sqlite", "--mode", "sometimes"],
            ["demo", "--laggard-commits", "many"],
        ] {
            let result = try Tool.run(arguments)
            #expect(result.status == 64, "\(arguments): \(result.standardError)")
            #expect(
                result.standardError.contains("Usage: snapshotdb"), "\(arguments): \(result.standardError)")
            #expect(result.standardOutput.isEmpty, "\(arguments)")
        }
    }

    @Test("thresholds: 0 healthy, 1 exceeded")
    func thresholds() throws {
        try withFixtureDatabase { path in
            try Python.run(Python.commit, path, "3", "crash")  // 6 frames, none checkpointed
            let walSize = try #require(
                try FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int)

            #expect(try Tool.run("inspect", path).status == 0)
            #expect(try Tool.run("inspect", path, "--warn-wal-bytes", String(walSize)).status == 0)
            let overBytes = try Tool.run("inspect", path, "--warn-wal-bytes", String(walSize - 1))
            #expect(overBytes.status == 1)
            #expect(overBytes.standardOutput.contains("WARNING: the -wal is"))
            #expect(try Tool.run("inspect", path, "--warn-lag-frames", "6").status == 0)
            let overLag = try Tool.run("inspect", path, "--warn-lag-frames", "5", "--json")
            #expect(overLag.status == 1)
            let json = try #require(
                try JSONSerialization.jsonObject(with: Data(overLag.standardOutput.utf8)) as? [String: Any])
            #expect(json.value(at: "health.healthy") as? Bool == false)
            #expect(json.value(at: "health.warnings.0.check") as? String == "lagFrames")
            #expect(json.value(at: "health.lagFrames") as? Int == 6)
            #expect(
                try Tool.run("watch", path, "--count", "2", "--interval", "0.05", "--warn-lag-frames", "5")
                    .status == 1)
            #expect(
                try Tool.run("watch", path, "--count", "2", "--interval", "0.05", "--warn-lag-frames", "6")
                    .status == 0)

            // Without --mode the checkpoint is PASSIVE, as SQLite's is.
            let passive = try Tool.run("checkpoint", path, "--json")
            #expect(passive.status == 0)
            let mode =
                try JSONSerialization.jsonObject(with: Data(passive.standardOutput.utf8)) as? [String: Any]
            #expect(mode?["mode"] as? String == "passive", "\(passive.standardOutput)")
            // After a checkpoint nothing lags.
            #expect(try Tool.run("checkpoint", path, "--mode", "full").status == 0)
            #expect(try Tool.run("inspect", path, "--warn-lag-frames", "0").status == 0)
            // A second one has nothing left to copy, and says so.
            let again = try Tool.run("checkpoint", path, "--mode", "truncate")
            #expect(again.standardOutput.contains("nothing"), "\(again.standardOutput)")
        }
    }

    @Test("a foreign SQLite database is inspected but has no commit counter; checkpoint refuses non-SQLite")
    func foreignDatabase() throws {
        try withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("other.db").path
            try Python.run(
                "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('create table t(x)'); c.commit()",
                path)
            let result = try Tool.run("inspect", path)
            #expect(result.status == 0)
            #expect(result.standardOutput.contains("application_id 0x0 (not SnapshotDB)"))
            // The help says what the tool does with it (exit 2 is for files that are not SQLite).
            // (Its lines wrapped to the terminal's width: read as one line of words.)
            let help = try Tool.run("inspect", "--help").standardOutput.split(whereSeparator: \.isWhitespace)
                .joined(separator: " ")
            #expect(help.contains("not a SQLite database"), "\(help)")
            #expect(help.contains("is not SnapshotDB's is inspected all the same"), "\(help)")
            #expect(result.standardOutput.contains("rollback-journal mode"))
            let json = try Tool.inspectJSON(path)
            #expect(json.value(at: "snapshotDB.isSnapshotDB") as? Bool == false)
            // An unknown fact is present, as null: every report has the same keys.
            #expect(json.value(at: "snapshotDB.commitCounter") is NSNull)

            let text = directory.appendingPathComponent("notes.txt").path
            try Data("hello, not a database\n".utf8).write(to: URL(fileURLWithPath: text))
            let refused = try Tool.run("checkpoint", text, "--mode", "truncate")
            #expect(refused.status == 2)
            // With --json, the failure is a JSON document on standard output too.
            let refusedJSON = try Tool.run("inspect", text, "--json")
            #expect(refusedJSON.status == 2)
            let failure =
                try JSONSerialization.jsonObject(with: Data(refusedJSON.standardOutput.utf8))
                as? [String: Any]
            #expect((failure?["error"] as? String)?.contains("not a SQLite database") == true)
            #expect(failure?["exitCode"] as? Int == 2)
            #expect(refused.standardError.contains("not a SQLite database"))
            #expect(!FileManager.default.fileExists(atPath: text + "-wal"))
        }
    }
}
