import CSQLite
import Foundation
import SnapshotDB
import SnapshotDBTestSupport
import Testing

/// Locks held by another process (a `python3` child with its own SQLite connection): a writer
/// that cannot get the lock within ``Configuration/busyTimeout`` fails with `busy`, changes
/// nothing, and succeeds once the lock is released.
@Suite("Locks held by other processes")
struct BusyTests {
    static var shortTimeout: Configuration {
        var configuration = Configuration()
        configuration.busyTimeout = .milliseconds(100)
        return configuration
    }

    /// A database with commits 1...3 (keys "0", "1", "2" in collection "c"), released.
    static func makeDatabase(at path: String) throws {
        let db = try Database(path: path)
        let writer = db.newConnection(name: "setup")
        for index in 0..<3 {
            try writer.readWrite {
                try $0.set(Item(title: "kept \(index)"), forKey: "\(index)", inCollection: "c")
            }
        }
    }

    static let keptKeys = ["0", "1", "2"]

    /// Expects a write on `writer` to fail with `busy` after about the short timeout, without its
    /// closure ever running.
    static func expectBusyWrite(_ writer: Connection, sourceLocation: SourceLocation = #_sourceLocation) {
        var bodyRan = false
        let clock = ContinuousClock()
        let start = clock.now
        let error = expectError(.busy, sourceLocation: sourceLocation) {
            try writer.readWrite { txn in
                bodyRan = true
                try txn.set(Item(title: "refused"), forKey: "refused", inCollection: "c")
            }
        }
        let waited = clock.now - start
        #expect(!bodyRan, sourceLocation: sourceLocation)
        #expect(waited >= .milliseconds(90), "gave up after \(waited)", sourceLocation: sourceLocation)
        #expect(waited < .seconds(5), "waited \(waited)", sourceLocation: sourceLocation)
        #expect(error?.sqliteCode.map { $0 & 0xFF } == SQLITE_BUSY, sourceLocation: sourceLocation)
        #expect(error?.message.contains("database is locked") == true, sourceLocation: sourceLocation)
    }

    @Test func writeWhileAnotherProcessHoldsTheWriteLockThrowsBusyThenSucceeds() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("busy.sqlite").path
            try Self.makeDatabase(at: path)
            let db = try Database(path: path, configuration: Self.shortTimeout)
            let writer = db.newConnection(name: "writer")
            let reader = db.newConnection(name: "reader")
            #expect(try reader.read { try $0.keys(inCollection: "c") } == Self.keptKeys)
            // Frames in the WAL, for the checkpoint below to copy back.
            try writer.readWrite { try $0.set(Item(title: "wal"), forKey: "w", inCollection: "wal") }

            // Timeline:  writer: commit 4 | child: BEGIN IMMEDIATE, INSERT (uncommitted)
            //            | writer: busy after 100 ms | readers read commit 4, checkpoint
            //            | child: ROLLBACK, exit | writer: commit 5
            let child = try SQLiteChild(
                path: path,
                statements: [
                    "BEGIN IMMEDIATE",
                    "INSERT INTO snapshotdb_values(collection, key, data) VALUES ('c', 'child', x'7B7D')",
                ])
            Self.expectBusyWrite(writer)
            Self.expectBusyWrite(writer)  // the connection is not left in a broken state
            #expect(db.latestCommit == 4)
            // Readers of this process never wait for a writer of another.
            #expect(try reader.read { try $0.keys(inCollection: "c") } == Self.keptKeys)
            #expect(try writer.read { try $0.keys(inCollection: "c") } == Self.keptKeys)
            // A checkpoint does not wait or fail either: PASSIVE takes no write lock, and the
            // child's snapshot is the newest commit, so every frame is copied back.
            let checkpoint = try db.checkpoint(.passive)
            #expect(checkpoint.walFrames > 0)
            #expect(checkpoint.isComplete, "\(checkpoint)")

            try child.release()
            try writer.readWrite { try $0.set(Item(title: "after"), forKey: "after", inCollection: "c") }
            #expect(db.latestCommit == 5)
            #expect(try reader.read { try $0.keys(inCollection: "c") } == Self.keptKeys + ["after"])
            #expect(try isIntact(path))
        }
    }

    /// Closing never waits on another process. A writer of another process holds SQLite's write
    /// lock, which a truncating checkpoint needs, and it reads no WAL frame (the WAL is empty),
    /// so close() finds no reader and truncates: it must give up at once instead of waiting the
    /// busy timeout (ten minutes here) with SQLite's write lock in hand, which held every other
    /// process's writers back. The time limit catches the wait; nothing is lost.
    @Test(.timeLimit(.minutes(1))) func closeDoesNotWaitForAnotherProcessesWriteLock() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("close.sqlite").path
            try Self.makeDatabase(at: path)
            var configuration = Configuration()
            configuration.busyTimeout = .seconds(600)
            let db = try Database(path: path, configuration: configuration)
            try db.checkpoint(.truncate)
            let child = try SQLiteChild(path: path, statements: ["BEGIN IMMEDIATE"])
            let started = ContinuousClock.now
            try db.close()
            // Far under the busy timeout: close() gave up on the checkpoint at once.
            #expect(ContinuousClock.now - started < .seconds(10))
            try child.release()
            let reopened = try Database(path: path)
            defer { try? reopened.close() }
            #expect(try reopened.newConnection().read { try $0.keys(inCollection: "c") } == Self.keptKeys)
            #expect(try isIntact(path))
        }
    }

    @Test func asyncWriteWhileAnotherProcessHoldsTheWriteLockThrowsBusy() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("busy.sqlite").path
            try Self.makeDatabase(at: path)
            let db = try Database(path: path, configuration: Self.shortTimeout)
            let writer = db.newConnection(name: "writer")
            let child = try SQLiteChild(path: path, statements: ["BEGIN IMMEDIATE"])
            do {
                try await writer.readWrite { txn in
                    try txn.set(Item(title: "refused"), forKey: "refused", inCollection: "c")
                }
                Issue.record("expected busy")
            } catch let error as DatabaseError {
                #expect(error.code == .busy)
            }
            try child.release()
            try await writer.readWrite { txn in
                try txn.set(Item(title: "after"), forKey: "after", inCollection: "c")
            }
            #expect(db.latestCommit == 4)
        }
    }

    /// A write by a foreign client is sealed (given a commit number) by the next transaction,
    /// which takes the write lock to do it. When another process holds that lock, reads still
    /// succeed and see the foreign write; it is sealed by the first write after the release.
    @Test func readAfterAForeignWriteWhileAnotherProcessHoldsTheWriteLockSucceeds() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("foreign.sqlite").path
            try Self.makeDatabase(at: path)
            let db = try Database(path: path, configuration: Self.shortTimeout)
            let connection = db.newConnection()
            let child = try SQLiteChild(
                path: path,
                statements: [
                    """
                    INSERT INTO snapshotdb_values(collection, key, data)
                    VALUES ('c', 'foreign', CAST('{"count":0,"title":"foreign"}' AS BLOB))
                    """,
                    "BEGIN IMMEDIATE",
                ])
            try connection.read { txn throws in
                #expect(try txn.keys(inCollection: "c") == Self.keptKeys + ["foreign"])
                #expect(
                    try txn.value(forKey: "foreign", inCollection: "c", as: Item.self)
                        == Item(title: "foreign"))
            }
            Self.expectBusyWrite(connection)
            try child.release()
            try connection.readWrite { try $0.set(Item(title: "after"), forKey: "after", inCollection: "c") }
            // Commit 4 is the foreign write's, commit 5 ours.
            #expect(db.latestCommit == 5)
            #expect(
                try connection.read { try $0.keys(inCollection: "c") } == Self.keptKeys + [
                    "after", "foreign",
                ])
            #expect(try isIntact(path))
        }
    }

    /// In WAL mode an `EXCLUSIVE` transaction of another process blocks writers only: a fresh
    /// open and reads go on, and see none of its uncommitted changes.
    @Test func freshOpenWhileAnotherProcessIsInAnExclusiveTransaction() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("exclusive.sqlite").path
            try Self.makeDatabase(at: path)
            let child = try SQLiteChild(
                path: path,
                statements: [
                    "BEGIN EXCLUSIVE",
                    "UPDATE snapshotdb_values SET data = x'7B7D'",
                    "DELETE FROM snapshotdb_values WHERE key = '0'",
                ])
            let db = try Database(path: path, configuration: Self.shortTimeout)
            #expect(db.latestCommit == 3)
            let connection = db.newConnection()
            try connection.read { txn throws in
                #expect(try txn.keys(inCollection: "c") == Self.keptKeys)
                #expect(try txn.value(forKey: "0", inCollection: "c", as: Item.self) == Item(title: "kept 0"))
            }
            Self.expectBusyWrite(connection)
            #expect(db.latestCommit == 3)

            try child.release()
            try connection.readWrite { try $0.set(Item(title: "after"), forKey: "after", inCollection: "c") }
            #expect(db.latestCommit == 4)
            try connection.read { txn throws in
                #expect(try txn.keys(inCollection: "c") == Self.keptKeys + ["after"])
                #expect(try txn.value(forKey: "1", inCollection: "c", as: Item.self) == Item(title: "kept 1"))
            }
            #expect(try isIntact(path))
        }
    }

    /// A process in `locking_mode = EXCLUSIVE` keeps everyone else out, readers included: the
    /// open fails with `busy` after the timeout, creates and changes nothing, and works once
    /// the process is gone.
    @Test func openWhileAnotherProcessHoldsTheFileInExclusiveLockingModeThrowsBusy() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("exclusive.sqlite").path
            try Self.makeDatabase(at: path)
            let child = try SQLiteChild(
                path: path,
                statements: [
                    "PRAGMA locking_mode = EXCLUSIVE",
                    "BEGIN EXCLUSIVE",
                    "DELETE FROM snapshotdb_values WHERE key = '0'",
                ])
            let before = try directoryContents(directory)
            let error = expectError(.busy) { try Database(path: path, configuration: Self.shortTimeout) }
            #expect(error?.sqliteCode.map { $0 & 0xFF } == SQLITE_BUSY)
            #expect(try directoryContents(directory) == before)

            try child.release()
            let db = try Database(path: path, configuration: Self.shortTimeout)
            #expect(db.latestCommit == 3)
            #expect(try db.newConnection().read { try $0.keys(inCollection: "c") } == Self.keptKeys)
            #expect(try isIntact(path))
        }
    }

    /// `busyTimeout` is a `Duration`, SQLite's timeout 32-bit milliseconds: a longer timeout
    /// waits as long as SQLite can (about 24 days) and a negative one does not wait; neither
    /// may crash the open.
    @Test(arguments: [Duration.seconds(100 * 86_400), .seconds(Int64.max), .milliseconds(-5)])
    func busyTimeoutOutsideSQLitesRangeIsClamped(_ timeout: Duration) throws {
        var configuration = Configuration()
        configuration.busyTimeout = timeout
        try withTemporaryDatabase(configuration: configuration) { db throws in
            let writer = db.newConnection()
            try writer.readWrite { try $0.set(Item(title: "kept"), forKey: "kept", inCollection: "c") }
            #expect(db.latestCommit == 1)
            // The checkpointer sets and restores the timeout around its own waits (nothing pins
            // the WAL here, so none of them waits).
            try writer.readWrite { try $0.set(Item(title: "second"), forKey: "second", inCollection: "c") }
            for mode in CheckpointMode.allCases { #expect(try db.checkpoint(mode).isComplete) }
            #expect(db.latestCommit == 2)
            guard timeout < .zero else { return }
            let child = try SQLiteChild(path: db.path, statements: ["BEGIN IMMEDIATE"])
            let clock = ContinuousClock()
            let start = clock.now
            expectError(.busy) {
                try writer.readWrite {
                    try $0.set(Item(title: "refused"), forKey: "refused", inCollection: "c")
                }
            }
            #expect(clock.now - start < .seconds(1))
            try child.release()
            #expect(db.latestCommit == 2)
        }
    }
}
