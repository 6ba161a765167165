import Foundation
import Logging
import SnapshotDBTestSupport
import Testing

import struct Synchronization.Mutex

@testable import SnapshotDB

/// Closing a database, backing it up while writers go on, and vacuuming it.
@Suite("Lifecycle: close, backup, vacuum", .hangLimit)
struct LifecycleTests {
    @Test func closeEndsEverythingAndTheFileReopensAtOnce() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("close.sqlite").path
            let db = try Database(path: path)
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            try await writer.readWrite { try $0.set(Item(title: "a"), forKey: "a", inCollection: "c") }
            try ui.beginLongLivedReadTransaction()
            let commits = db.changes()
            try db.close()
            #expect(db.isClosed)
            #expect(!ui.isInLongLivedReadTransaction)
            try Self.expectClosed(db, ui, writer, directory: directory)
            await #expect(throws: DatabaseError.self) {
                try await ui.read { try $0.count(inCollection: "c") }
            }
            for call in Self.closedAsyncCalls(db, ui, writer) {
                do {
                    try await call()
                    Issue.record("expected databaseClosed, but nothing was thrown")
                } catch let error as DatabaseError {
                    #expect(error.code == .databaseClosed, "\(error)")
                }
            }
            var delivered = 0
            for await _ in commits { delivered += 1 }
            #expect(delivered == 0, "the changes() stream finished")
            try db.close()  // idempotent
            // Nothing pinned the WAL: it was checkpointed and the handles closed, so SQLite
            // removed the -wal and -shm with the last one.
            #expect(!FileManager.default.fileExists(atPath: path + "-wal"))
            let reopened = try Database(path: path)
            #expect(reopened.latestCommit == 1)
            #expect(try await reopened.newConnection().read { try $0.count(inCollection: "c") } == 1)
        }
    }

    /// Every call on a closed database and its connections throws `databaseClosed`.
    static func expectClosed(_ db: Database, _ ui: Connection, _ writer: Connection, directory: URL) throws {
        expectError(.databaseClosed) { try ui.read { try $0.count(inCollection: "c") } }
        expectError(.databaseClosed) {
            try ui.read(timeLimit: .seconds(1)) { try $0.count(inCollection: "c") }
        }
        expectError(.databaseClosed) { try writer.readWrite { try $0.removeAll(inCollection: "c") } }
        expectError(.databaseClosed) { try ui.beginLongLivedReadTransaction() }
        expectError(.databaseClosed) { try ui.endLongLivedReadTransaction() }
        for mode in [CheckpointMode.passive, .full, .restart, .truncate] {
            expectError(.databaseClosed) { try db.checkpoint(mode) }
        }
        let copy = directory.appendingPathComponent("closed-copy.sqlite").path
        expectError(.databaseClosed) { try db.backup(to: copy) }
        #expect(!FileManager.default.fileExists(atPath: copy))
        expectError(.databaseClosed) { try db.vacuum() }
        expectError(.databaseClosed) { try db.purgeHistory() }
        expectError(.databaseClosed) { try db.consumer(named: "late") }
        expectError(.databaseClosed) { try db.register(JSONValueCodec(), forCollection: "late") }
        let view = View<Item>(
            name: "late", version: "1", collections: ["c"], group: { _, _, _ in "all" },
            areInIncreasingOrder: { $0.title < $1.title })
        expectError(.databaseClosed) { try db.register(view) }
        expectError(.databaseClosed) { try db.register([view]) }
        expectError(.databaseClosed) { try db.unregister("late") }
        // The closed database is said first, before any other fault of the call.
        expectError(.databaseClosed) { try db.register([view, view]) }
        expectError(.databaseClosed) { try db.unregister("not a name") }
        expectError(.databaseClosed) { try db.newConnection(name: "new").read { _ in } }
    }

    /// The `async` calls of ``expectClosed(_:_:_:directory:)``.
    static func closedAsyncCalls(_ db: Database, _ ui: Connection, _ writer: Connection)
        -> [@Sendable () async throws -> Void]
    {
        [
            { _ = try await ui.read { try $0.count(inCollection: "c") } },
            { _ = try await ui.read(timeLimit: .seconds(1)) { try $0.count(inCollection: "c") } },
            { try await writer.readWrite { try $0.removeAll(inCollection: "c") } },
            { _ = try await ui.advance() },
        ]
    }

    /// The descriptors of this process open on `path`, its `-wal` or its `-shm`.
    static func descriptors(on path: String) -> [String] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        return entries.compactMap { entry in
            try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(entry)")
        }.filter { $0 == path || $0 == path + "-wal" || $0 == path + "-shm" }
    }

    /// Readers kept past their transaction's closure hold no SQLite handle: `close()` closes
    /// every one (a reader held its transaction, and through it its handle, and the file stayed
    /// open), and an index or search reader says its transaction ended; readers dropped within
    /// the closure leave nothing behind in the transaction.
    @Test func readersKeptPastTheirTransactionKeepNoHandleOpen() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("reader.sqlite").path
            let db = try Database(path: path)
            try db.register([ViewTests.byTitle, IndexTests.people, IndexTests.articles])
            let writer = db.newConnection(name: "writer")
            try writer.readWrite {
                try $0.set(
                    Note(title: "a", folder: "inbox", archived: false), forKey: "n1", inCollection: "notes")
                try $0.set(Person(city: "Oslo", age: 30, score: nil), forKey: "p1", inCollection: "people")
                try $0.set(Article(title: "t", body: "b"), forKey: "a1", inCollection: "articles")
            }
            var kept: ViewReader?
            var index: IndexReader?
            var search: SearchReader?
            try db.newConnection(name: "ui").read { txn in
                // Readers made and dropped in a loop, around the one kept: the transaction keeps
                // no end action for each (it kept one per reader before, for the closure's life).
                for _ in 0..<5_000 { _ = try txn.view(named: "byTitle").count }
                kept = try txn.view(named: "byTitle")
                for _ in 0..<5_000 { _ = try txn.view(named: "byTitle").count }
                #expect(txn.endActionCount < 200, "\(txn.endActionCount) end actions kept")
                index = try txn.index(named: "people")
                search = try txn.search(named: "articles")
            }
            expectError(.transactionEnded) { try index?.keys(where: "age > 0") }
            expectError(.transactionEnded) { try search?.keys(matching: "t") }
            expectError(.transactionEnded) { try kept?.value(at: 0, inGroup: "inbox", as: Note.self) }
            try db.close()
            #expect(Self.descriptors(on: path) == [], "descriptors left open: \(Self.descriptors(on: path))")
            // What the view reader read at its commit stays readable.
            #expect(kept?.count == 1)
            #expect(kept?.groups == ["inbox"])
        }
    }

    @Test func closeFromInsideATransactionIsMisuse() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            _ = try writer.readWrite { _ in expectError(.misuse) { try db.close() } }
            _ = try writer.read { _ in expectError(.misuse) { try db.close() } }
            #expect(!db.isClosed)
        }
    }

    @Test func backupCopiesOneCommitWhileWritersGoOn() throws {
        try withTemporaryDirectory { directory in
            let db = try Database(path: directory.appendingPathComponent("source.sqlite").path)
            let writer = db.newConnection(name: "writer")
            for index in 0..<50 {
                try writer.readWrite {
                    try $0.set(Item(title: "\(index)"), forKey: "k\(index)", inCollection: "c")
                }
            }
            let destination = directory.appendingPathComponent("backup.sqlite").path
            let copied = try db.backup(to: destination)
            try writer.readWrite { try $0.set(Item(title: "after"), forKey: "after", inCollection: "c") }
            #expect(copied == 50)
            var info = stat()
            #expect(stat(destination, &info) == 0)
            #expect(info.st_mode & 0o777 == 0o600)
            #expect(try isIntact(destination))
            let copy = try Database(path: destination)
            #expect(copy.latestCommit == 50)
            let reader = copy.newConnection()
            #expect(try reader.read { try $0.count(inCollection: "c") } == 50)
            #expect(
                try reader.read { try $0.value(forKey: "k7", inCollection: "c", as: Item.self) }
                    == Item(title: "7"))
            // An existing destination is refused, and nothing is left behind on failure.
            expectError(.cannotOpen) { try db.backup(to: destination) }
            let leftovers = try FileManager.default.contentsOfDirectory(atPath: directory.path)
                .filter { $0.contains(".backup-") }
            #expect(leftovers.isEmpty)
            // A `-wal` left at the destination by a database deleted without it would be applied
            // to the copy: refused, naming it, and nothing is created.
            let orphaned = directory.appendingPathComponent("orphaned.sqlite").path
            #expect(FileManager.default.createFile(atPath: orphaned + "-wal", contents: Data(count: 4_152)))
            let error = expectError(.cannotOpen) { try db.backup(to: orphaned) }
            #expect(error?.message.contains("orphaned.sqlite-wal") == true, "\(String(describing: error))")
            #expect(!FileManager.default.fileExists(atPath: orphaned))
        }
    }

    @Test func vacuumKeepsValuesAndCommitsAndGivesSpaceBack() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            try writer.readWrite { txn in
                for index in 0..<2_000 {
                    try txn.setData(
                        Data(repeating: 7, count: 1_000), forKey: "k\(index)", inCollection: "big")
                }
                try txn.set(Item(title: "kept"), forKey: "kept", inCollection: "c")
            }
            try writer.readWrite { try $0.removeAll(inCollection: "big") }
            try db.checkpoint(.truncate)
            let before = fileSize(db.path)
            try ui.beginLongLivedReadTransaction()
            try db.vacuum()
            #expect(try ui.read { try $0.count(inCollection: "c") } == 1, "the bookmark reads on")
            try ui.endLongLivedReadTransaction()
            try db.checkpoint(.truncate)
            #expect(fileSize(db.path) < before / 2)
            #expect(db.latestCommit == 2)
            #expect(
                try writer.read { try $0.value(forKey: "kept", inCollection: "c", as: Item.self) }
                    == Item(title: "kept"))
            try writer.readWrite { try $0.set(Item(title: "next"), forKey: "next", inCollection: "c") }
            #expect(db.latestCommit == 3)
            #expect(try isIntact(db.path))
        }
    }
}

extension LifecycleTests {
    /// Timeline: a python3 reader holds a read transaction on the WAL | close(), with a busy
    /// timeout of 30 s: a truncating checkpoint would wait for that reader, so close runs a
    /// PASSIVE one, says so, and returns at once; the WAL stays for the reader.
    @Test func closeDoesNotWaitForAReaderOfAnotherProcess() throws {
        let logs = LogCapture()
        var configuration = Configuration()
        configuration.busyTimeout = .seconds(30)
        configuration.checkpointLogger = logs.logger
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("close.sqlite").path
            let db = try Database(path: path, configuration: configuration)
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { try $0.set(Item(title: "a"), forKey: "a", inCollection: "c") }
            let reader = try SQLiteChild(
                path: path, statements: ["BEGIN", "SELECT count(*) FROM snapshotdb_values"])
            try writer.readWrite { try $0.set(Item(title: "b"), forKey: "b", inCollection: "c") }
            let clock = ContinuousClock()
            let start = clock.now
            try db.close()
            #expect(clock.now - start < .seconds(10), "close waited for the other process's reader")
            #expect(fileSize(path + "-wal") > 0)
            #expect(
                logs.messages(at: .debug).contains { $0.contains("reads the WAL") },
                "\(logs.messages(at: .notice))")
            try reader.release()
        }
    }
}

extension LifecycleTests {
    /// `vacuum()` runs on a SQLite handle of its own, outside any connection: `close()` waits for
    /// it to end (its locks must not outlive the close), and the file reopens whole.
    @Test func closeWaitsForARunningVacuum() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("vacuum.sqlite").path
            let db = try Database(path: path)
            let writer = db.newConnection(name: "writer")
            let filler = String(repeating: "x", count: 1_000)
            for batch in 0..<20 {
                try writer.readWrite { txn in
                    for index in 0..<1_000 {
                        try txn.set(
                            Item(title: filler, count: index), forKey: "\(batch)-\(index)", inCollection: "c")
                    }
                }
            }
            try writer.readWrite { txn in
                for batch in stride(from: 0, to: 20, by: 2) {
                    for index in 0..<1_000 {
                        try txn.removeValue(forKey: "\(batch)-\(index)", inCollection: "c")
                    }
                }
            }
            let ended = DispatchSemaphore(value: 0)
            let failure = Mutex<DatabaseError?>(nil)
            let vacuum = Thread {
                do throws(DatabaseError) {
                    try db.vacuum()
                } catch {
                    failure.withLock { $0 = error }
                }
                ended.signal()
            }
            vacuum.start()
            db.operations.waitForBegun(1)
            try db.close()
            // The count moves inside vacuum() before it lets close() go on; the thread's own end
            // comes later, after vacuum() returned, so it is waited for only to read its outcome.
            #expect(db.operations.finishedCount == 1, "close() returned while vacuum() ran")
            #expect(ended.wait(timeout: .now() + .seconds(60)) == .success, "vacuum() never returned")
            #expect(failure.withLock { $0 } == nil)
            let reopened = try Database(path: path)
            #expect(try reopened.newConnection().read { try $0.count(inCollection: "c") } == 10_000)
            #expect(try isIntact(path))
        }
    }
}
