import CSQLite
import Foundation
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDB

#if canImport(Glibc)
    import Glibc
#endif

/// Files SQLite cannot use get a specific code and a message that says what to do, before
/// SQLite touches them: not the generic `sqlite` code, not "unable to open database file", and
/// not a `busy` after the whole busy timeout on every write.
@Suite("Unreadable formats and side files")
struct FormatErrorTests {
    typealias CrashCopy = DamagedFileTests.CrashCopy

    enum Case: String, CaseIterable, Sendable {
        /// The `-wal`'s version field changed and its header checksum made valid again: SQLite's
        /// recovery refuses it (was `cannotOpen`, "unable to open database file").
        case walVersion
        /// The main file's read version (offset 19) says rollback-journal mode beside a `-wal`
        /// (was: the open succeeded, then every write failed with `busy` after 5 seconds).
        case rollbackReadVersionBesideWAL
        /// A read version above 2: a file format newer than SQLite's (was `notADatabase`).
        case newerReadVersion
        /// A schema format number above 4 (was `sqlite`, "unsupported file format").
        case newerSchemaFormat
        /// A FIFO in place of the `-shm` (was `sqlite`, "disk I/O error").
        case fifoSharedMemory
        /// A FIFO in place of the `-wal` (was: the open succeeded without the commits in the
        /// `-wal`, and writes failed with `sqlite`, "disk I/O error").
        case fifoWAL

        var code: DatabaseError.Code {
            switch self {
            case .walVersion: .walUnreadable
            case .rollbackReadVersionBesideWAL: .corrupt
            case .newerReadVersion, .newerSchemaFormat: .unsupportedFormat
            case .fifoSharedMemory, .fifoWAL: .cannotOpen
            }
        }

        /// Words the message must contain: what is wrong and what to do.
        var advice: String {
            switch self {
            case .walVersion: "move the -wal and -shm aside"
            case .rollbackReadVersionBesideWAL: "rollback-journal mode"
            case .newerReadVersion, .newerSchemaFormat: "open it with the SQLite that wrote it"
            case .fifoSharedMemory, .fifoWAL: "is a FIFO (named pipe)"
            }
        }

        func apply(to copy: CrashCopy) throws {
            switch self {
            case .walVersion:
                var wal = try Data(contentsOf: URL(fileURLWithPath: copy.walPath))
                wal[7] ^= 0x01
                sealWALHeader(&wal)
                try wal.write(to: URL(fileURLWithPath: copy.walPath))
            case .rollbackReadVersionBesideWAL: try overwrite(copy.path, at: 19, with: Data([1]))
            case .newerReadVersion: try overwrite(copy.path, at: 19, with: Data([3]))
            case .newerSchemaFormat: try overwrite(copy.path, at: 44, with: Data([0, 0, 0, 9]))
            case .fifoSharedMemory:
                try? FileManager.default.removeItem(atPath: copy.sharedMemoryPath)
                #expect(mkfifo(copy.sharedMemoryPath, 0o600) == 0)
            case .fifoWAL:
                try FileManager.default.removeItem(atPath: copy.walPath)
                #expect(mkfifo(copy.walPath, 0o600) == 0)
            }
        }
    }

    /// Recomputes the WAL header's checksum (SQLite's, over its first 24 bytes, in the byte
    /// order the magic number's low bit names), so that only the changed field is wrong.
    static func sealWALHeader(_ wal: inout Data) {
        func word(_ offset: Int) -> UInt32 {
            let value = wal[offset..<offset + 4].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            return wal[3] & 1 == 1 ? value : value.byteSwapped
        }
        var first: UInt32 = 0
        var second: UInt32 = 0
        for offset in stride(from: 0, to: 24, by: 8) {
            first = first &+ word(offset) &+ second
            second = second &+ word(offset + 4) &+ first
        }
        for (offset, value) in [(24, first), (28, second)] {
            for byte in 0..<4 { wal[offset + byte] = UInt8(truncatingIfNeeded: value >> (24 - 8 * byte)) }
        }
    }

    /// The bytes of the main file and of a regular `-wal`; a FIFO is not read (it would block).
    static func contents(_ copy: CrashCopy) throws -> [Data] {
        var files = [try Data(contentsOf: URL(fileURLWithPath: copy.path))]
        var info = stat()
        if stat(copy.walPath, &info) == 0, info.st_mode & S_IFMT == S_IFREG {
            files.append(try Data(contentsOf: URL(fileURLWithPath: copy.walPath)))
        }
        return files
    }

    @Test(arguments: Case.allCases)
    func refusedWithASpecificCodeAndChangesNothing(_ testCase: Case) throws {
        try withTemporaryDirectory { directory throws in
            let copy = try CrashCopy.make(in: directory)
            try testCase.apply(to: copy)
            let before = try Self.contents(copy)
            let started = ContinuousClock.now
            let error = expectError(testCase.code) { try Database(path: copy.path) }
            #expect(ContinuousClock.now - started < .seconds(1))
            #expect(error?.message.contains(testCase.advice) == true, "\(String(describing: error))")
            #expect(try Self.contents(copy) == before)
        }
    }

    /// A `-wal` that is its header alone is no WAL to SQLite (its recovery reads a header only
    /// with frames after it), whatever version the header names: the open goes on with the
    /// commits of the main file, as SQLite's own shell does.
    @Test func aWALOfAHeaderAloneIsIgnoredWhateverItsVersion() throws {
        try withTemporaryDirectory { directory throws in
            let copy = try CrashCopy.make(in: directory)
            var wal = try Data(contentsOf: URL(fileURLWithPath: copy.walPath)).prefix(32)
            wal[7] ^= 0x01
            Self.sealWALHeader(&wal)
            try? FileManager.default.removeItem(atPath: copy.sharedMemoryPath)
            try Data(wal).write(to: URL(fileURLWithPath: copy.walPath))
            let db = try Database(path: copy.path)
            #expect(db.latestCommit == CrashCopy.checkpointedCommits)
            try db.close()
            #expect(
                try sqlite3(copy.path, "SELECT max(number) FROM snapshotdb_history")
                    == "\(CrashCopy.checkpointedCommits)\n")
        }
    }

    /// The advice of the `-wal` error works: with the `-wal` and `-shm` moved aside, the
    /// database opens with the commits its main file holds.
    @Test func movingAnUnreadableWALAsideOpensTheCheckpointedCommits() throws {
        try withTemporaryDirectory { directory throws in
            let copy = try CrashCopy.make(in: directory)
            try Case.walVersion.apply(to: copy)
            expectError(.walUnreadable) { try Database(path: copy.path) }
            try FileManager.default.moveItem(atPath: copy.walPath, toPath: copy.walPath + ".saved")
            try? FileManager.default.removeItem(atPath: copy.sharedMemoryPath)
            let db = try Database(path: copy.path)
            #expect(db.latestCommit == CrashCopy.checkpointedCommits)
        }
    }

    /// What SQLite reports through a handle maps to the same codes (266 is `SQLITE_IOERR_READ`,
    /// 4618 `SQLITE_IOERR_SHMOPEN`, 778 `SQLITE_IOERR_WRITE`).
    @Test func sqliteResultCodesMapToSpecificCodes() {
        #expect(DatabaseError.sqlite(266, message: "disk I/O error").code == .ioError)
        #expect(DatabaseError.sqlite(4618, message: "disk I/O error").code == .ioError)
        #expect(
            DatabaseError.sqlite(778, message: "disk I/O error", systemErrno: ENOSPC).code
                == .diskFull)
        #expect(
            DatabaseError.sqlite(SQLITE_ERROR, message: "unsupported file format").code == .unsupportedFormat)
        #expect(DatabaseError.sqlite(SQLITE_ERROR, message: "no such table: x").code == .sqlite)
    }
}
