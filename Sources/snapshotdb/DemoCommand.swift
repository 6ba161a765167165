import ArgumentParser
import Foundation
import Logging
import SnapshotDB
import SnapshotDBLocking

/// `snapshotdb demo [DIR]`: a guided run of what SnapshotDB is for, on a fresh database.
///
/// Writers commit, a bookmarked reader keeps its snapshot and then advances with the exact
/// changesets it jumped, a laggard pins the WAL until the checkpoint monitor names it, and the
/// `inspect` report shows the same from outside the process.
struct Demo: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run writers, a bookmarked reader and a laggard on a new database, then inspect it.",
        discussion: """
            Creates DIR/demo.sqlite (DIR defaults to a new temporary directory, removed at the end; \
            an existing DIR is kept, and an existing demo.sqlite in it is refused).
            """
    )

    @Argument(help: "Directory for the demo database (default: a new temporary directory).")
    var directory: String?

    @Option(help: "Commits the laggard is allowed to fall behind before it advances (at least 1).")
    var laggardCommits = 400

    func validate() throws {
        guard laggardCommits >= 1 else { throw ValidationError("--laggard-commits must be at least 1.") }
    }

    /// Runs the demo. A failure of the run (not of the command line, which ArgumentParser
    /// refuses with the usage and exit status 64) is one line on standard error, exit status 1.
    func run() throws {
        do {
            try runSteps()
        } catch {
            Output.error("demo: \(error)")
            throw ExitCode(1)
        }
    }

    private func runSteps() throws {
        let (folder, isTemporary) = try makeDirectory()
        defer { if isTemporary { try? FileManager.default.removeItem(atPath: folder) } }
        let path = (folder as NSString).appendingPathComponent("demo.sqlite")
        guard !FileManager.default.fileExists(atPath: path) else {
            throw DemoFailure("\(path) exists; the demo only runs on a new database")
        }
        var configuration = Configuration()
        configuration.walWarningBytes = 512 << 10
        configuration.checkpointThresholdPages = 64
        configuration.warningInterval = .seconds(3600)
        var logger = Logger(label: "snapshotdb.checkpoint") { StreamLogHandler.standardOutput(label: $0) }
        logger.logLevel = .info
        configuration.checkpointLogger = logger
        print("Database: \(path)")
        print(
            isTemporary
                ? "   (in a temporary directory, removed at the end; `snapshotdb demo DIR` keeps the files)"
                : "   (kept after the demo)")
        print("Source of this demo: Sources/snapshotdb/DemoCommand.swift in the SnapshotDB package")
        let db = try Database(path: path, configuration: configuration)
        // A view: the items in two groups by price, sorted by price; kept by every commit.
        try db.register(
            View<DemoItem>(
                name: "byPrice", version: "1", collections: ["items"],
                group: { _, _, item in item.price < 50 ? "under 50" : "50 and over" },
                areInIncreasingOrder: { $0.price < $1.price }))

        section("1. Two writers commit 100 items each")
        let writers = [db.newConnection(name: "writer-1"), db.newConnection(name: "writer-2")]
        let failures = Mutex<[any Error]>([])
        DispatchQueue.concurrentPerform(iterations: writers.count) { number in
            do {
                for index in 0..<100 {
                    try writers[number].readWrite { txn in
                        try txn.set(
                            DemoItem(title: "item \(number)-\(index)", price: index),
                            forKey: "\(number)-\(index)", inCollection: "items")
                    }
                }
            } catch {
                failures.withLock { $0.append(error) }
            }
        }
        if let failure = failures.withLock({ $0.first }) { throw failure }
        print("   latest commit: \(db.latestCommit)")

        section("2. A bookmarked reader keeps its snapshot while writers go on")
        let ui = db.newConnection(name: "ui")
        try ui.beginLongLivedReadTransaction()
        let before = try ui.read { try $0.count(inCollection: "items") }
        print("   ui bookmarks commit \(ui.snapshot): \(before) items")
        try writers[0].readWrite { txn in
            try txn.set(DemoItem(title: "renamed", price: 1), forKey: "0-1", inCollection: "items")
            txn.info = ["reason": "rename"]
        }
        try writers[1].readWrite { try $0.removeValues(forKeys: ["1-1", "1-2"], inCollection: "items") }
        try writers[0].readWrite { txn in
            try txn.set("dark", forKey: "theme", inCollection: "settings")
            try txn.removeAll(inCollection: "items-archive")
        }
        let still = try ui.read { try $0.count(inCollection: "items") }
        print("   3 commits later ui still reads commit \(ui.snapshot): \(still) items")
        let changes = try ui.beginLongLivedReadTransaction()
        print("   ui advances to commit \(ui.snapshot) and gets \(changes.count) changesets:")
        for changeset in changes { print("     \(changeset)") }
        print(
            "   hasChange(forKey: \"0-1\", inCollection: \"items\") = \(changes.hasChange(forKey: "0-1", inCollection: "items"))"
        )
        print(
            "   hasChange(forKey: \"0-5\", inCollection: \"items\") = \(changes.hasChange(forKey: "0-5", inCollection: "items"))"
        )
        let rows = try ui.read { txn in
            let view = try txn.view(named: "byPrice")
            let first = view.items(inGroup: "under 50").prefix(3).map(\.key).joined(separator: ", ")
            print(
                "   view byPrice: groups \(view.groups), \(view.count(inGroup: "under 50")) under 50 (first: \(first))"
            )
            return try view.changes(for: changes)
        }
        print("   the view's row changes for this advance (old indexes for deletes, new for inserts):")
        for row in rows { print("     \(row)") }
        try ui.endLongLivedReadTransaction()

        section("3. A laggard pins the WAL; the checkpoint monitor names it")
        let laggard = db.newConnection(name: "laggard")
        try laggard.beginLongLivedReadTransaction()
        let payload = String(repeating: "x", count: 2_000)
        for index in 0..<laggardCommits {
            try writers[index % 2].readWrite {
                try $0.set(payload, forKey: "blob-\(index % 50)", inCollection: "blobs")
            }
        }
        try db.checkpoint(.passive)
        let status = db.checkpointStatus()
        print(
            "   WAL \(status.walBytes / 1024) KiB, \(status.walFrames) frames, \(status.checkpointedFrames) checkpointed"
        )
        for pin in status.laggingSnapshots {
            print(
                "   pinned by '\(pin.connectionName)': \(pin.commitsBehind) commits behind, "
                    + "\(String(format: "%.1f", pin.secondsHeld)) s, \(pin.pinnedBytes / 1024) KiB")
        }

        section("4. snapshotdb inspect, from another process, while the laggard holds on")
        print(try inspectInChildProcess(path: path), terminator: "")

        section("5. The laggard advances; the WAL is reset")
        try writers[0].readWrite { try $0.set("after", forKey: "done", inCollection: "settings") }
        let jumped = try laggard.beginLongLivedReadTransaction()
        print(
            "   laggard advances \(jumped.count) commits to commit \(laggard.snapshot) and keeps its bookmark"
        )
        // The reset has the bookmark take its snapshot again off the WAL; on a loaded machine its
        // connection may not get to run within the few milliseconds allowed, so try a few times.
        var reset = try db.checkpoint(.truncate)
        for _ in 0..<20 where !reset.isComplete { reset = try db.checkpoint(.truncate) }
        let after = db.checkpointStatus()
        print(
            "   truncate checkpoint complete: \(reset.isComplete); WAL now \(after.walFileBytes) bytes on disk"
        )
        if !reset.isComplete { throw DemoFailure("the WAL was not reset: \(after)") }
        print("\nDone. Database: \(isTemporary ? "removed with its temporary directory" : path)")
    }

    private func makeDirectory() throws -> (String, Bool) {
        if let directory {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            return (directory, false)
        }
        let folder = FileManager.default.temporaryDirectory
            .appendingPathComponent("snapshotdb-demo-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        return (folder, true)
    }

    private func section(_ title: String) { print("\n== \(title)") }

    /// Runs `snapshotdb inspect` as a separate process: inspecting in this process would be
    /// safe with the in-process options, but the point is to show the outside view.
    private func inspectInChildProcess(path: String) throws -> String {
        // This program's own file, however it was started (through PATH, a relative path or a
        // symlink): on Linux Foundation reads `/proc/self/exe`, on macOS it asks the loader.
        guard let executable = Bundle.main.executableURL else {
            throw DemoFailure("cannot find this program's executable to run `snapshotdb inspect`")
        }
        let process = Process()
        process.executableURL = executable
        process.arguments = ["inspect", path]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: data, as: UTF8.self)
    }
}

/// A failure of the demo's run, said on standard error.
private struct DemoFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// The value the demo stores.
struct DemoItem: Codable, Sendable {
    var title: String
    var price: Int
}
