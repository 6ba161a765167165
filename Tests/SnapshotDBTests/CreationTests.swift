import Foundation
import SnapshotDB
import SnapshotDBTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A new database appears under the user's name whole or not at all, and the half-made file
/// an in-place creation cut short by a power cut leaves is recovered, not refused forever.
@Suite("Creating a database")
struct CreationTests {
    static let childKey = "SNAPSHOTDB_CREATION_CHILD_DB"

    /// With `createIfMissing = false` a mistyped path (or a restore that was not written) is
    /// `cannotOpen` naming it, and nothing appears in the directory; an existing database opens.
    @Test func anOpenThatMustNotCreateRefusesAMissingFileAndCreatesNothing() throws {
        try withTemporaryDirectory { directory throws in
            var configuration = Configuration()
            configuration.createIfMissing = false
            let path = directory.appendingPathComponent("restored.sqlite").path
            let error = expectError(.cannotOpen) { try Database(path: path, configuration: configuration) }
            #expect(error?.message.contains("no database at") == true, "\(String(describing: error))")
            #expect(error?.message.contains("restored.sqlite") == true)
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == [])
            // The default creates it; then the same configuration opens it.
            try Database(path: path).newConnection().readWrite {
                try $0.set(Item(title: "a"), forKey: "a", inCollection: "c")
            }
            let db = try Database(path: path, configuration: configuration)
            #expect(
                try db.newConnection().read { try $0.value(forKey: "a", inCollection: "c", as: Item.self) }?
                    .title == "a")
        }
    }

    /// The schema needs about 24 KiB; under an 8 KiB file size limit its writes fail as on a full
    /// disk. Before, the user's name was then left holding a half-made file.
    @Test func aCreationThatFailsLeavesNoFileBehind() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("new.sqlite").path
            let child = try runChildTest(
                "childCreatesUnderATinyFileSizeLimit", environmentKey: Self.childKey, path: path)
            // Past a file size limit SQLite fails with `SQLITE_IOERR_WRITE` (EFBIG), and the errno
            // is not always still there to tell it from a device error; a full disk is SQLITE_FULL.
            #expect(["diskFull", "ioError"].contains(child.results["open"]), "child said: \(child.output)")
            #expect(child.terminationStatus == 0)
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == [])
            // With space, the same path is created as usual.
            let db = try Database(path: path)
            try db.newConnection().readWrite { try $0.set(Item(title: "a"), forKey: "a", inCollection: "c") }
            #expect(db.latestCommit == 1)
        }
    }

    @Test(.enabled(if: ProcessInfo.processInfo.environment[childKey] != nil))
    func childCreatesUnderATinyFileSizeLimit() throws {
        let path = try #require(ProcessInfo.processInfo.environment[Self.childKey])
        signal(SIGXFSZ, SIG_IGN)
        var limit = rlimit()
        getrlimit(fileSizeResource, &limit)
        limit.rlim_cur = 8 * 1024
        setrlimit(fileSizeResource, &limit)
        do throws(DatabaseError) {
            _ = try Database(path: path)
            reportResult("open", "succeeded")
        } catch {
            reportResult("open", error.code.name)
        }
    }

    /// A file name up to the longest SQLite can open beside its `-wal` and `-shm` (the name
    /// plus 4 bytes within the file system's 255): created, written, opened again and backed up
    /// to, with no temporary file left. The hidden temporary files' names shorten the name they
    /// carry, which made names from 215 bytes (211 for a backup) fail before.
    @Test(arguments: [200, 214, 215, 230, 240, 247, 251])
    func aLongFileNameIsCreatedAsAnyOther(length: Int) throws {
        try withTemporaryDirectory { directory throws in
            // Three-byte characters after two ASCII ones: cutting the temporary names at a byte
            // count would split one in half (an invalid name on some file systems).
            let stem = "ab" + String(repeating: "€", count: (length - 9) / 3)
            let name = stem + String(repeating: "n", count: length - 7 - stem.utf8.count) + ".sqlite"
            #expect(name.utf8.count == length)
            let path = directory.appendingPathComponent(name).path
            do {
                let db = try Database(path: path)
                try db.newConnection().readWrite {
                    try $0.set(Item(title: "a"), forKey: "a", inCollection: "c")
                }
                try db.close()
            }
            let reopened = try Database(path: path)
            #expect(
                try reopened.newConnection().read {
                    try $0.value(forKey: "a", inCollection: "c", as: Item.self)
                }
                    == Item(title: "a"))
            // A backup's copy is in rollback mode until opened: SQLite needs room for its
            // `-journal` name (8 bytes), so names past 247 bytes are refused for it.
            let copyName = "z" + name.dropFirst()
            let copyPath = directory.appendingPathComponent(copyName).path
            if length <= 247 {
                #expect(try reopened.backup(to: copyPath) == 1)
                let copy = try Database(path: copyPath)
                #expect(
                    try copy.newConnection().read {
                        try $0.value(forKey: "a", inCollection: "c", as: Item.self)
                    }
                        == Item(title: "a"))
                try copy.close()
            } else {
                let refused = expectError(.cannotOpen) { _ = try reopened.backup(to: copyPath) }
                #expect(refused?.message.contains("-journal") == true, "\(String(describing: refused))")
            }
            try reopened.close()
            #expect(
                try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
                    == (length <= 247 ? [name, copyName] : [name]).sorted())
        }
    }

    /// A name too long for SQLite's `-wal` beside it (or for the file system) is refused with
    /// `cannotOpen`, leaving nothing behind.
    @Test(arguments: [252, 255, 256])
    func aFileNameTooLongForTheWALIsRefusedCleanly(length: Int) throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent(String(repeating: "n", count: length)).path
            let error = expectError(.cannotOpen) { _ = try Database(path: path) }
            #expect(error?.message.contains(path) == true, "\(String(describing: error))")
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == [])
        }
    }

    /// A successful creation leaves only the database (and, once written, its `-wal` and `-shm`)
    /// in the directory: no temporary file.
    @Test func aCreationLeavesOnlyTheDatabase() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("new.sqlite").path
            do {
                let db = try Database(path: path)
                #expect(
                    try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted().first
                        == "new.sqlite")
                try db.newConnection().readWrite {
                    try $0.set(Item(title: "a"), forKey: "a", inCollection: "c")
                }
            }
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["new.sqlite"])
            #expect(try isIntact(path))
        }
    }

    /// A `-wal` or `-journal` left beside a database that was deleted: before, the new database
    /// was created and SQLite replayed the old `-wal`'s pages into it (or rolled the journal
    /// back over it).
    @Test(arguments: ["-wal", "-journal"])
    func anOrphanedSideFileIsNotAppliedToANewDatabase(_ suffix: String) throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("gone.sqlite").path
            let crash = try DamagedFileTests.CrashCopy.make(in: directory)
            if suffix == "-wal" {
                try FileManager.default.copyItem(atPath: crash.walPath, toPath: path + suffix)
            } else {
                try Self.journalHeader(initialPages: 3).write(to: URL(fileURLWithPath: path + suffix))
            }
            let before = try directoryContents(directory)
            let error = expectError(.cannotOpen) { try Database(path: path) }
            #expect(error?.message.contains("deleted or moved") == true, "\(String(describing: error))")
            #expect(try directoryContents(directory) == before)
        }
    }

    /// A rollback journal header (SQLite's "Rollback journal" format): magic, record count 0,
    /// nonce, the database's size in pages before the transaction, sector and page size; padded
    /// to one sector.
    static func journalHeader(initialPages: UInt32) -> Data {
        var header = Data([0xD9, 0xD5, 0x05, 0xF9, 0x20, 0xA1, 0x63, 0xD7])
        for word: UInt32 in [0, 0x1234_5678, initialPages, 512, 4096] {
            header += [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: word >> $0) }
        }
        return header + Data(count: 512 - header.count)
    }

    /// What a power cut can leave when a database was created in place (in an existing empty
    /// file, or by an earlier version): page 1 lost, the later pages of the schema written, and
    /// the hot journal of the creating transaction, which says the file had no pages before.
    static func makeInterruptedCreation(at path: String, initialPages: UInt32) throws {
        let source = path + ".source"
        do { _ = try Database(path: source) }
        var file = try Data(contentsOf: URL(fileURLWithPath: source))
        file.replaceSubrange(0..<4096, with: Data(count: 4096))
        try file.write(to: URL(fileURLWithPath: path))
        try FileManager.default.removeItem(atPath: source)
        try journalHeader(initialPages: initialPages).write(to: URL(fileURLWithPath: path + "-journal"))
    }

    /// Before, every open refused this file with `notADatabase` ("bad header"), forever, while
    /// the `sqlite3` shell rolled it back to an empty database.
    @Test func aCreationCutShortIsRolledBackAndCreatedAgain() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("torn.sqlite").path
            try Self.makeInterruptedCreation(at: path, initialPages: 0)
            do {
                let db = try Database(path: path)
                #expect(db.latestCommit == 0)
                let connection = db.newConnection()
                #expect(try connection.read { try $0.collections() } == [])
                try connection.readWrite { try $0.set(Item(title: "a"), forKey: "a", inCollection: "c") }
                #expect(db.latestCommit == 1)
            }
            #expect(!FileManager.default.fileExists(atPath: path + "-journal"))
            #expect(try isIntact(path))
        }
    }

    /// The same zeros beside a journal that would restore pages of an earlier database are not
    /// a creation: the file is refused and nothing changes (SQLite's recovery is not run).
    @Test func zerosBesideAJournalOfAnEarlierDatabaseAreRefusedUntouched() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("torn.sqlite").path
            try Self.makeInterruptedCreation(at: path, initialPages: 3)
            let before = try directoryContents(directory)
            expectError(.notADatabase) { try Database(path: path) }
            #expect(try directoryContents(directory) == before)
        }
    }
}
