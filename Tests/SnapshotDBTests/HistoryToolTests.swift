import Foundation
import SnapshotDB
import SnapshotDBInspection
import SnapshotDBTestSupport
import Testing

/// `snapshotdb history` and the history lines of `snapshotdb inspect`, run as a user would,
/// against a database another process (this one) has open.
@Suite("snapshotdb history")
struct HistoryToolTests {
    /// `snapshotdb`, built beside the test bundle.
    static let tool: String? = BuiltProducts.executable("snapshotdb")?.path

    static func bytes(_ path: String) -> [Data?] {
        ["", "-wal", "-shm"].map { FileManager.default.contents(atPath: path + $0) }
    }

    @Test func historyListsEveryCommitAsTheLibraryReadsItAndChangesNoByte() throws {
        let tool = try #require(Self.tool, "the snapshotdb binary is not beside the test bundle")
        try withTemporaryDatabase { db throws in
            try db.register(ViewTests.byTitle)
            _ = try db.consumer(named: "uploader")
            let writer = db.newConnection(name: "sync")
            try writer.readWrite { txn in
                try txn.set(
                    Note(title: "a", folder: "inbox", archived: false), forKey: "n1", inCollection: "notes")
                try txn.set(
                    Item(title: "x"), forKey: "'; DROP TABLE snapshotdb_history; --", inCollection: "c")
                txn.info = ["source": "server"]
            }
            try writer.readWrite { try $0.removeValue(forKey: "n1", inCollection: "notes") }
            try writer.readWrite { try $0.removeAll(inCollection: "c") }
            // A row a foreign client numbered below zero is no commit, to the tool as to the library.
            _ = try sqlite3(
                db.path,
                "INSERT INTO snapshotdb_history(number, kind, date, token) VALUES (-9223372036854775808, 1, 0, 0)"
            )
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()  // a live reader: the -wal and -shm are in use
            let expected = try writer.read { try $0.changes(after: 0) }
            let before = Self.bytes(db.path)

            let result = try ChildProcess.run(tool, ["history", "--json", db.path])
            #expect(result.status == 0, "\(result.standardError)")
            let document = try #require(
                try JSONSerialization.jsonObject(with: Data(result.standardOutput.utf8)) as? [String: Any])
            let commits = try #require(document["commits"] as? [[String: Any]])
            #expect(commits.map { $0["commit"] as? Int } == expected.map { Int($0.commit) })
            for (entry, changeset) in zip(commits, expected) {
                #expect(entry["connection"] as? String == changeset.connectionName)
                #expect(entry["processID"] as? Int == changeset.processID.map(Int.init))
                #expect(entry["info"] as? [String: String] == changeset.info)
                #expect(
                    entry["setKeys"] as? [String: [String]] == changeset.setKeys.mapValues { $0.sorted() })
                #expect(
                    entry["removedKeys"] as? [String: [String]]
                        == changeset.removedKeys.mapValues { $0.sorted() })
                #expect(entry["clearedCollections"] as? [String] == changeset.clearedCollections.sorted())
                #expect(entry["keysKnown"] as? Bool == true)
            }
            #expect(document["newestCommit"] as? Int == Int(db.latestCommit))
            #expect(document["oldestCommit"] as? Int == 0)
            let consumers = try #require(document["consumers"] as? [[String: Any]])
            #expect(consumers.first?["name"] as? String == "uploader")

            let text = try ChildProcess.run(tool, ["history", db.path, "--after", "2", "--limit", "1"])
            #expect(text.status == 0)
            let lines = text.standardOutput.split(separator: "\n")
            #expect(lines.count == 4, "\(text.standardOutput)")  // summary, selection, consumer, one commit
            #expect(lines[0].contains("holds the commits after 0 through \(db.latestCommit)"))
            #expect(lines[1] == "listing the oldest 1 after 2: 1 commit", "\(text.standardOutput)")
            #expect(lines.last?.hasPrefix("3  ") == true)
            #expect(lines.last?.contains(#"removed notes["n1"]"#) == true)

            // --last: the newest commits, alone or after --after; --limit: the oldest.
            let newest = try ChildProcess.run(tool, ["history", "--json", db.path, "--last", "2"])
            #expect(newest.status == 0, "\(newest.standardError)")
            let newestDocument = try #require(
                try JSONSerialization.jsonObject(with: Data(newest.standardOutput.utf8)) as? [String: Any])
            #expect(
                (newestDocument["commits"] as? [[String: Any]])?.map { $0["commit"] as? Int }
                    == expected.suffix(2).map { Int($0.commit) })
            let oldest = try ChildProcess.run(tool, ["history", "--json", db.path, "--limit", "2"])
            let oldestDocument = try #require(
                try JSONSerialization.jsonObject(with: Data(oldest.standardOutput.utf8)) as? [String: Any])
            #expect(
                (oldestDocument["commits"] as? [[String: Any]])?.map { $0["commit"] as? Int }
                    == expected.prefix(2).map { Int($0.commit) })
            let lastAfter = try ChildProcess.run(tool, ["history", db.path, "--after", "2", "--last", "5"])
            let listed = lastAfter.standardOutput.split(separator: "\n").compactMap { line in
                line.split(separator: " ", maxSplits: 1).first.flatMap { UInt64($0) }
            }
            #expect(listed == expected.map(\.commit).filter { $0 > 2 }, "\(lastAfter.standardOutput)")
            #expect(
                lastAfter.standardOutput.contains("listing the newest 5 after 2: \(listed.count) commits"))
            let both = try ChildProcess.run(tool, ["history", db.path, "--limit", "1", "--last", "1"])
            #expect(both.status == 64, "\(both.standardError)")
            // A negative count is refused for what it is, not as a missing value.
            for option in ["--limit", "--last"] {
                let negative = try ChildProcess.run(tool, ["history", db.path, option, "-1"])
                #expect(negative.status == 64, "\(negative.standardError)")
                #expect(
                    negative.standardError.contains("\(option) must be 0 or more"),
                    "\(negative.standardError)")
                #expect(!negative.standardError.contains("Missing value"), "\(negative.standardError)")
            }
            #expect(both.standardError.contains("give one of them"), "\(both.standardError)")
            for count in [0, 1, 2, 3, 9, Int.max] {
                let listing = try SnapshotDBInspector.history(databaseAt: db.path, last: count)
                #expect(listing.rows.map(\.commit) == expected.suffix(count).map(\.commit), "last \(count)")
            }
            for (limit, last) in [(nil, -1), (-1, nil), (1, 1)] {
                let error = #expect(throws: InspectionError.self) {
                    try SnapshotDBInspector.history(databaseAt: db.path, limit: limit, last: last)
                }
                #expect(error?.code == .invalidArgument, "limit \(limit as Int?), last \(last as Int?)")
            }

            let inspect = try ChildProcess.run(tool, ["inspect", db.path])
            #expect(inspect.standardOutput.contains("history     "))
            #expect(inspect.standardOutput.contains("consumer    'uploader' at commit 1, 3 behind"))
            #expect(Self.bytes(db.path) == before, "a read-only tool changed a byte")
        }
    }

    @Test func aDamagedRowStopsTheListingWithExitThreeAndAFileWithoutHistoryIsRefused() throws {
        let tool = try #require(Self.tool)
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "sync")
            for index in 0..<3 {
                try writer.readWrite { try $0.set(index, forKey: "k\(index)", inCollection: "c") }
            }
            _ = try sqlite3(db.path, "UPDATE snapshotdb_history SET changes = x'01' WHERE number = 2;")
            let result = try ChildProcess.run(tool, ["history", db.path])
            #expect(result.status == 3)
            #expect(result.standardOutput.contains("1  "))
            #expect(result.standardError.contains("commit 2 is damaged"), "\(result.standardError)")
        }
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("v2.sqlite").path
            try run("/usr/bin/sqlite3", [path, OlderSchemas.version2])
            let result = try ChildProcess.run(tool, ["history", path])
            #expect(result.status == 2)
            #expect(result.standardError.contains("no durable history"), "\(result.standardError)")
        }
    }
}
