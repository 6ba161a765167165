import Foundation
import Logging
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDB

/// What the open logs about a WAL left by an earlier run names the real reason it could not be
/// checkpointed.
@Suite("Logs at open")
struct OpenLogTests {
    static let childKey = "SNAPSHOTDB_OPEN_LOG_DISK_FULL_CHILD_DB"

    /// A database `shared.sqlite` in `directory` with one value, closed (no `-wal` left).
    static func makeClosedDatabase(in directory: URL) throws -> String {
        let path = directory.appendingPathComponent("shared.sqlite").path
        let db = try Database(path: path)
        try db.newConnection().readWrite { try $0.setData(Data([1]), forKey: "a", inCollection: "c") }
        try db.close()
        return path
    }

    /// A copy, as a crash leaves it, whose `-wal` holds a commit of about 400 KiB that the main
    /// file does not: checkpointing it must grow the main file.
    static func makeCrashCopyWithLargeWAL(in directory: URL) throws -> String {
        let original = directory.appendingPathComponent("original.sqlite").path
        let copy = directory.appendingPathComponent("copy.sqlite").path
        let db = try Database(path: original)
        let writer = db.newConnection()
        try writer.readWrite { try $0.set(Item(title: "small"), forKey: "small", inCollection: "c") }
        #expect(try db.checkpoint(.truncate).isComplete)
        try writer.readWrite { txn in
            for index in 0..<100 {
                try txn.setData(
                    Data(repeating: UInt8(index), count: 4000), forKey: "\(index)", inCollection: "big")
            }
        }
        try FileManager.default.copyItem(atPath: original, toPath: copy)
        try FileManager.default.copyItem(atPath: original + "-wal", toPath: copy + "-wal")
        return copy
    }

    /// Before, the warning said the WAL "cannot be reset while a reader in another process reads
    /// it", with no reader anywhere.
    @Test func aCheckpointAtOpenThatFindsTheDiskFullSaysSo() throws {
        try withTemporaryDirectory { directory throws in
            let path = try Self.makeCrashCopyWithLargeWAL(in: directory)
            let child = try runChildTest(
                "childOpensUnderFileSizeLimit", environmentKey: Self.childKey, path: path)
            #expect(child.results["opened-at"] == "2", "child said: \(child.output)")
            let warnings = child.results["warnings"] ?? ""
            #expect(warnings.contains("the disk is full"), "child said: \(child.output)")
            #expect(!warnings.contains("reader"), "child said: \(child.output)")
            #expect(child.terminationStatus == 0)
            // With space back, the next open checkpoints it and every commit is there.
            let logs = LogCapture()
            var configuration = Configuration()
            configuration.checkpointLogger = logs.logger
            let db = try Database(path: path, configuration: configuration)
            #expect(db.latestCommit == 2)
            #expect(logs.messages(at: .notice).contains { $0.contains("checkpointed and truncated it") })
            #expect(try db.newConnection().read { try $0.count(inCollection: "big") } == 100)
        }
    }

    /// Another process reading the WAL at the open is what processes sharing a file do: the
    /// open says so at debug level, naming the process, and warns of nothing. (Notices were noise
    /// in every multi-process server's log.)
    @Test func anotherProcessReadingTheWALAtTheOpenIsDebugNotAWarning() throws {
        try withTemporaryDirectory { directory throws in
            let path = try Self.makeClosedDatabase(in: directory)
            let reader = try SQLiteChild(
                path: path, statements: ["BEGIN", "SELECT count(*) FROM snapshotdb_values"])
            do {
                let db = try Database(path: path)
                try db.newConnection().readWrite { try $0.setData(Data([2]), forKey: "b", inCollection: "c") }
                try db.close()  // the reader keeps the WAL: it stays
            }
            let logs = LogCapture()
            var configuration = Configuration()
            configuration.checkpointLogger = logs.logger
            let db = try Database(path: path, configuration: configuration)
            #expect(
                logs.messages(at: .debug).contains { $0.contains("it cannot be reset while") },
                "\(logs.messages(at: .debug))")
            #expect(logs.messages(at: .info) == [])
            #expect(logs.messages(at: .notice) == [])
            #expect(logs.messages(at: .warning) == [])
            try db.close()
            try reader.release()
        }
    }

    /// Closing while another process reads the WAL leaves the WAL to it, at debug level.
    @Test func closingWhileAnotherProcessReadsTheWALIsDebug() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("shared.sqlite").path
            let logs = LogCapture()
            var configuration = Configuration()
            configuration.checkpointLogger = logs.logger
            let db = try Database(path: path, configuration: configuration)
            try db.newConnection().readWrite { try $0.setData(Data([1]), forKey: "a", inCollection: "c") }
            // It reads a snapshot of the WAL (a read mark past slot 0).
            let reader = try SQLiteChild(
                path: path, statements: ["BEGIN", "SELECT count(*) FROM snapshotdb_values"])
            try db.close()
            #expect(
                logs.messages(at: .debug).contains {
                    $0.contains("reads the WAL: checkpointed (PASSIVE) and left to it")
                }, "\(logs.messages(at: .debug))")
            #expect(logs.messages(at: .info) == [])
            #expect(logs.messages(at: .notice) == [])
            #expect(logs.messages(at: .warning) == [])
            try reader.release()
        }
    }

    /// A WAL at the open made by another process that has the file open (and reads nothing) is
    /// debug: processes sharing a file. (One left by an earlier run is a notice: the crash-copy
    /// tests above.)
    @Test func theWALOfAnotherProcessThatHasTheFileOpenIsDebugAtTheOpen() throws {
        try withTemporaryDirectory { directory throws in
            let path = try Self.makeClosedDatabase(in: directory)
            // Another process writes (a foreign write, in the WAL) and keeps the file open.
            let other = try SQLiteChild(
                path: path,
                statements: ["INSERT INTO snapshotdb_values(collection, key, data) VALUES ('c', 'b', x'02')"])
            let logs = LogCapture()
            var configuration = Configuration()
            configuration.checkpointLogger = logs.logger
            let db = try Database(path: path, configuration: configuration)
            let debug = logs.messages(at: .debug).filter { $0.contains("checkpointed and truncated it") }
            #expect(
                debug.count == 1 && debug[0].contains("has the file open"), "\(logs.messages(at: .debug))")
            #expect(
                !logs.messages(at: .notice).contains { $0.contains("found a WAL") },
                "\(logs.messages(at: .notice))")
            #expect(logs.messages(at: .info) == [])
            #expect(try db.newConnection().read { try $0.data(forKey: "b", inCollection: "c") } == Data([2]))
            try db.close()
            try other.release()

        }
    }

    @Test(.enabled(if: ProcessInfo.processInfo.environment[childKey] != nil))
    func childOpensUnderFileSizeLimit() throws {
        let path = try #require(ProcessInfo.processInfo.environment[Self.childKey])
        let logs = LogCapture()
        var configuration = Configuration()
        configuration.checkpointLogger = logs.logger
        try withFileSizeLimit(above: path) {
            let db = try Database(path: path, configuration: configuration)
            reportResult("opened-at", "\(db.latestCommit)")
        }
        reportResult("warnings", logs.messages(at: .warning).joined(separator: " | "))
    }
}
