import Foundation
import SnapshotDB
import SnapshotDBTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

@Suite("Database files")
struct FileTests {
    /// The bytes of every file in `directory`, by name, to prove nothing was created or changed.
    func snapshotOfDirectory(_ directory: URL) throws -> [String: Data] {
        var files: [String: Data] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: directory.path) {
            files[name] = try Data(contentsOf: directory.appendingPathComponent(name))
        }
        return files
    }

    @Test(arguments: [
        Data("this is a text file, not a database\n".utf8),
        Data((0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 7) }),
        Data("SQLite format 3\u{0}".utf8),  // a truncated header
    ])
    func foreignFileIsRefusedUntouched(_ contents: Data) throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("foreign.sqlite")
            try contents.write(to: path)
            let before = try snapshotOfDirectory(directory)
            expectError(.notADatabase) { try Database(path: path.path) }
            #expect(try snapshotOfDirectory(directory) == before)
        }
    }

    @Test(arguments: ["DELETE", "WAL"])
    func sqliteDatabaseOfAnotherApplicationIsRefusedUntouched(_ journalMode: String) throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("other.sqlite").path
            try run(
                "/usr/bin/sqlite3",
                [path, "PRAGMA journal_mode=\(journalMode); CREATE TABLE t(x); INSERT INTO t VALUES (1);"])
            let before = try snapshotOfDirectory(directory)
            expectError(.notADatabase) { try Database(path: path) }
            #expect(try snapshotOfDirectory(directory) == before)
            #expect(try run("/usr/bin/sqlite3", [path, "SELECT x FROM t"]) == "1\n")
        }
    }

    @Test func emptySQLiteDatabaseIsAdopted() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("empty.sqlite").path
            try run("/usr/bin/sqlite3", [path, "PRAGMA user_version = 0; VACUUM;"])
            let db = try Database(path: path)
            try db.newConnection().readWrite { try $0.set(1, forKey: "k", inCollection: "c") }
            #expect(db.latestCommit == 1)
        }
    }

    @Test func newerSchemaIsRefusedUntouched() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("future.sqlite").path
            do {
                let db = try Database(path: path)
                try db.newConnection().readWrite { try $0.set(1, forKey: "k", inCollection: "c") }
            }
            try run("/usr/bin/sqlite3", [path, "PRAGMA user_version = 99; PRAGMA wal_checkpoint(TRUNCATE);"])
            let before = try snapshotOfDirectory(directory)
            expectError(.schemaTooNew) { try Database(path: path) }
            #expect(try snapshotOfDirectory(directory) == before)
        }
    }

    @Test func secondOpenOfTheSameFileIsRefused() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("db.sqlite").path
            let link = directory.appendingPathComponent("link.sqlite").path
            var first: Database? = try Database(path: path)
            try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: path)
            expectError(.alreadyOpen) { try Database(path: path) }
            expectError(.alreadyOpen) { try Database(path: link) }
            expectError(.alreadyOpen) { try Database(path: directory.path + "/./db.sqlite") }
            // A hard link is another name for the same inode: refused before SQLite opens it,
            // so no -wal or -shm appears beside it.
            let hard = directory.appendingPathComponent("hard.sqlite").path
            try FileManager.default.linkItem(atPath: path, toPath: hard)
            let error = expectError(.alreadyOpen) { try Database(path: hard) }
            #expect(error?.message.contains("same file as") == true)
            #expect(!FileManager.default.fileExists(atPath: hard + "-wal"))
            #expect(!FileManager.default.fileExists(atPath: hard + "-shm"))
            #expect(first?.latestCommit == 0)
            first = nil
            // Released: the file can be opened again, under either name.
            var second: Database? = try Database(path: link)
            #expect(second?.path == URL(fileURLWithPath: path).resolvingSymlinksInPath().path)
            second = nil
            let third = try Database(path: hard)
            #expect(third.latestCommit == 0)
            expectError(.alreadyOpen) { try Database(path: path) }
        }
    }

    @Test func newFilesAreOwnerOnly() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("private.sqlite").path
            let previous = umask(0)
            defer { umask(previous) }
            let db = try Database(path: path)
            let writer = db.newConnection()
            try writer.readWrite { try $0.set(1, forKey: "k", inCollection: "c") }
            for suffix in ["", "-wal", "-shm"] {
                let attributes = try FileManager.default.attributesOfItem(atPath: path + suffix)
                let mode = (attributes[.posixPermissions] as? NSNumber)?.uint16Value
                #expect(mode == 0o600, "\(suffix) has mode \(String(mode ?? 0, radix: 8))")
            }
        }
    }

    @Test func missingDirectoryIsAClearError() throws {
        expectError(.cannotOpen) { try Database(path: "/nonexistent-\(UUID().uuidString)/db.sqlite") }
    }

    @Test func concurrentWritersLoseNoUpdate() async throws {
        try await withTemporaryDatabase { db in
            let tasks = 8
            let increments = 40
            try await withThrowingTaskGroup(of: Void.self) { group in
                for task in 0..<tasks {
                    let connection = db.newConnection(name: "task-\(task)")
                    group.addTask {
                        for _ in 0..<increments {
                            try await connection.readWrite { txn in
                                let value =
                                    try txn.value(forKey: "counter", inCollection: "c", as: Int.self) ?? 0
                                try txn.set(value + 1, forKey: "counter", inCollection: "c")
                            }
                        }
                    }
                }
                try await group.waitForAll()
            }
            let total = try await db.newConnection().read {
                try $0.value(forKey: "counter", inCollection: "c", as: Int.self)
            }
            #expect(total == tasks * increments)
            #expect(db.latestCommit == UInt64(tasks * increments))
            let persisted = try run(
                "/usr/bin/sqlite3", [db.path, "SELECT max(number) FROM snapshotdb_history"])
            #expect(persisted == "\(tasks * increments)\n")
        }
    }
}
