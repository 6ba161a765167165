import Foundation
import SnapshotDBInspection
import SnapshotDBTestSupport
import Testing

/// `inspect` and `watch` change no byte, create no file, and refuse damaged input cleanly.
@Suite("The tool only reads")
struct ReadOnlyTests {
    @Test("inspect and watch leave the three files byte-for-byte unchanged, with a live reader")
    func filesUnchanged() throws {
        try withFixtureDatabase { path in
            try Python.run(Python.commit, path, "2", "crash")
            let reader = try ReaderProcess(path: path)
            defer { reader.finish() }
            try Python.run(Python.commit, path, "3", "close")

            let before = FileSet(databasePath: path)
            #expect(before.wal != nil && before.sharedMemory != nil)
            for arguments in [
                ["inspect", path], ["inspect", "--json", path], ["inspect", "--frames", path],
                ["inspect", path, "--warn-wal-bytes", "1"],
                ["watch", path, "--count", "2", "--interval", "0.05"],
                ["watch", path, "--count", "2", "--interval", "0.05", "--json", "--frames"],
            ] {
                let result = try Tool.run(arguments)
                #expect(result.status == 0 || result.status == 1, "\(arguments): \(result.standardError)")
                #expect(FileSet(databasePath: path) == before, "\(arguments) changed a file")
            }
            _ = try SnapshotDBInspector.inspect(databaseAt: path)
            _ = try SnapshotDBInspector.probeLocks(databaseAt: path)
            #expect(FileSet(databasePath: path) == before)
        }
    }

    @Test("a missing -wal and -shm stay missing")
    func noFileCreated() throws {
        try withFixtureDatabase { path in
            let before = FileSet(databasePath: path)
            #expect(before.wal == nil && before.sharedMemory == nil)
            let result = try Tool.run("inspect", path)
            #expect(result.status == 0)
            #expect(result.standardOutput.contains("wal         none (no -wal file)"))
            #expect(result.standardOutput.contains("commit      0"))
            _ = try Tool.run("watch", path, "--count", "2", "--interval", "0.05")
            #expect(FileSet(databasePath: path) == before)
        }
    }

    @Test("watch refreshes the given number of times")
    func watchCount() throws {
        try withFixtureDatabase { path in
            let result = try Tool.run("watch", path, "--count", "3", "--interval", "0.05", "--json")
            #expect(result.status == 0)
            let lines = result.standardOutput.split(separator: "\n")
            #expect(lines.count == 3)
            for line in lines {
                let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
                #expect(object?.value(at: "snapshotDB.commitCounter") as? Int == 0)
            }
            let text = try Tool.run("watch", path, "--count", "2", "--interval", "0.05")
            #expect(text.standardOutput.components(separatedBy: "--- ").count == 3)
            #expect(text.standardOutput.contains("refresh 2 of 2"))
        }
    }

    /// A damaged input and what the one-line error must say.
    struct Damage: Sendable, CustomTestStringConvertible {
        var name: String
        var expectedMessage: String
        var damage: @Sendable (String) throws -> Void

        var testDescription: String { name }
    }

    static let damages: [Damage] = [
        Damage(name: "missing database", expectedMessage: "no such file") { path in
            try FileManager.default.removeItem(atPath: path)
        },
        Damage(name: "empty database", expectedMessage: "empty file") { path in
            try Data().write(to: URL(fileURLWithPath: path))
        },
        Damage(name: "random database", expectedMessage: "not a SQLite database") { path in
            try randomBytes(8192).write(to: URL(fileURLWithPath: path))
        },
        Damage(name: "database cut inside its header", expectedMessage: "truncated database") { path in
            try truncate(path, to: 50)
        },
        Damage(name: "database cut inside a page", expectedMessage: "not a whole number") { path in
            try truncate(path, to: 4096 + 1000)
        },
        Damage(name: "random -wal", expectedMessage: "not a SQLite write-ahead log") { path in
            try Python.run(Python.commit, path, "1", "crash")
            try randomBytes(3 * 4120).write(to: URL(fileURLWithPath: path + "-wal"))
        },
        Damage(name: "-wal cut inside its header", expectedMessage: "truncated write-ahead log") { path in
            try Python.run(Python.commit, path, "1", "crash")
            try truncate(path + "-wal", to: 20)
        },
        Damage(name: "directory", expectedMessage: "not a regular file") { path in
            try FileManager.default.removeItem(atPath: path)
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        },
    ]

    @Test("damaged input is refused with exit 2 and one line on stderr, changing nothing", arguments: damages)
    func damagedInput(_ damage: Damage) throws {
        try withFixtureDatabase { path in
            try damage.damage(path)
            let before = FileSet(databasePath: path)
            for arguments in [
                ["inspect", path], ["inspect", "--json", path],
                ["watch", path, "--count", "2", "--interval", "0.05"],
            ] {
                let result = try Tool.run(arguments)
                #expect(result.status == 2, "\(arguments)")
                // With --json the failure is also a JSON document on standard output.
                if arguments.contains("--json") {
                    #expect(result.standardOutput.hasPrefix(#"{"error":"#), "\(result.standardOutput)")
                } else {
                    #expect(result.standardOutput.isEmpty)
                }
                let lines = result.standardError.split(separator: "\n", omittingEmptySubsequences: false)
                #expect(lines.count == 2 && lines[1].isEmpty, "not one line: \(result.standardError)")
                #expect(result.standardError.hasPrefix("snapshotdb: "))
                #expect(result.standardError.contains(damage.expectedMessage), "\(result.standardError)")
                #expect(FileSet(databasePath: path) == before, "\(arguments) changed a file")
            }
            // The one acting subcommand refuses the same input before SQLite touches it.
            let checkpoint = try Tool.run("checkpoint", path, "--mode", "truncate")
            #expect(checkpoint.status == 2)
            #expect(checkpoint.standardError.contains(damage.expectedMessage))
            #expect(FileSet(databasePath: path) == before, "checkpoint touched a refused file")
        }
    }

    private static func randomBytes(_ count: Int) -> Data {
        var generator = SystemRandomNumberGenerator()
        return Data((0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }

    private static func truncate(_ path: String, to size: UInt64) throws {
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        try handle.truncate(atOffset: size)
        try handle.close()
    }
}
