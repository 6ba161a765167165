import Foundation
import SnapshotDB
import SnapshotDBTestSupport
import Testing

/// The `snapshotdb` VFS (`Sources/CSnapshotDBVFS/snapshotdb_vfs.c`) extends the WAL with zeros
/// ahead of its frames when every commit is synced, and writes each frame's header and page in
/// one write. These tests look at the real `-wal` file and read it back with foreign clients.
@Suite("The snapshotdb VFS: WAL preallocation, one write per frame")
struct WALPreallocationTests {
    static let commits = 20

    /// The `-wal` as bytes, its frame size, and the offset just past its last commit frame.
    struct WALFile {
        let bytes: Data
        let frameSize: Int
        let commitFrameEnds: [Int]

        init(path: String) throws {
            bytes = try Data(contentsOf: URL(fileURLWithPath: path + "-wal"))
            frameSize = 24 + bytes[8..<12].reduce(0) { $0 << 8 | Int($1) }
            commitFrameEnds = DamagedFileTests.CrashCopy.commitFrameEnds(of: bytes)
        }

        var lastCommitEnd: Int { commitFrameEnds.last ?? 32 }
    }

    static func writeCommits(to db: Database) throws {
        let writer = db.newConnection(name: "writer")
        for index in 0..<commits {
            try writer.readWrite {
                try $0.set(Item(title: "row \(index)"), forKey: "\(index)", inCollection: "c")
            }
        }
    }

    /// A copy of the database and its `-wal` as they are now, without the `-shm`: what a crash
    /// of every process would leave. Returns the copy's path.
    static func crashCopy(of path: String, in directory: URL) throws -> String {
        let copy = directory.appendingPathComponent("copy.sqlite").path
        try FileManager.default.copyItem(atPath: path, toPath: copy)
        try FileManager.default.copyItem(atPath: path + "-wal", toPath: copy + "-wal")
        return copy
    }

    @Test func underSynchronousFullTheWALIsExtendedWithZerosThatEveryClientReadsPast() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("full.sqlite").path
            let db = try Database(path: path)
            try Self.writeCommits(to: db)

            let wal = try WALFile(path: path)
            #expect(wal.commitFrameEnds.count == Self.commits)
            // Zeros past the last frame, a whole number of frames, at most one preallocation.
            #expect(wal.bytes.count > wal.lastCommitEnd)
            #expect((wal.bytes.count - 32) % wal.frameSize == 0)
            #expect(wal.bytes.count - wal.lastCommitEnd <= 256 * 1024 + 2 * wal.frameSize)
            #expect(wal.bytes[wal.lastCommitEnd...].allSatisfy { $0 == 0 })

            // A foreign client reading the live database sees every commit.
            #expect(try sqlite3(path, "SELECT count(*) FROM snapshotdb_values") == "\(Self.commits)\n")
            // A copy taken now, as a crash would leave the files, recovers every commit from the
            // WAL and stops at the zeros.
            let copy = try Self.crashCopy(of: path, in: directory)
            #expect(try sqlite3(copy, "SELECT count(*) FROM snapshotdb_values") == "\(Self.commits)\n")
            #expect(try isIntact(copy))
            let reopened = try Database(path: copy)
            #expect(reopened.latestCommit == UInt64(Self.commits))
        }
    }

    @Test func underSynchronousNormalTheWALEndsAtItsLastFrame() throws {
        var configuration = Configuration()
        configuration.synchronous = .normal
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("normal.sqlite").path
            let db = try Database(path: path, configuration: configuration)
            try Self.writeCommits(to: db)
            let wal = try WALFile(path: path)
            #expect(wal.commitFrameEnds.count == Self.commits)
            #expect(wal.bytes.count == wal.lastCommitEnd)
        }
    }

    /// A transaction bigger than SQLite's page cache spills frames to the WAL before it commits;
    /// pages it changes again are rewritten in place, and at commit SQLite reads those frames
    /// back and rewrites their headers' checksums. The VFS writes those headers at once (only a
    /// header followed by its page is held back), so a crash copy taken right after the commit,
    /// with no sync in NORMAL, recovers the whole transaction.
    @Test(arguments: [Configuration.Synchronous.full, .normal])
    func aSpilledTransactionWhosePagesChangeAgainSurvivesACrashCopy(
        _ synchronous: Configuration.Synchronous
    ) throws {
        var configuration = Configuration()
        configuration.synchronous = synchronous
        // No checkpoint: the commit must be recovered from the WAL alone.
        configuration.checkpointThresholdPages = 1_000_000
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("spill.sqlite").path
            let db = try Database(path: path, configuration: configuration)
            let rows = 6_000
            let writer = db.newConnection(name: "writer")
            // Not the WAL's first transaction (after which SQLite looks at the file's size).
            try writer.readWrite { try $0.setData(Data([0]), forKey: "0", inCollection: "c") }
            try writer.readWrite { txn in
                for index in 0..<rows {
                    try txn.setData(Data(repeating: 1, count: 1_000), forKey: "\(index)", inCollection: "c")
                }
                for index in 0..<100 {
                    try txn.setData(Data(repeating: 2, count: 1_000), forKey: "\(index)", inCollection: "c")
                }
            }
            let copy = try Self.crashCopy(of: path, in: directory)
            #expect(try sqlite3(copy, "SELECT count(*) FROM snapshotdb_values") == "\(rows)\n")
            #expect(
                try sqlite3(copy, "SELECT hex(substr(data, 1, 2)) FROM snapshotdb_values WHERE key = '42'")
                    == "0202\n")
            #expect(try isIntact(copy))
        }
    }

    /// The default reset path when a WAL grew past `journal_size_limit` (and not past twice
    /// it): RESTART leaves the file, and SQLite trims it to the limit at the first commit of the
    /// new WAL; the preallocated zeros do not grow it back, and every client reads the file.
    @Test func aRestartedWALPastTheJournalSizeLimitIsTrimmedToItAtTheNextCommit() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("trim.sqlite").path
            var configuration = Configuration()
            configuration.journalSizeLimit = 1 << 20
            configuration.checkpointThresholdPages = 1_000_000
            let db = try Database(path: path, configuration: configuration)
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { try $0.setData(Data([0]), forKey: "first", inCollection: "c") }
            try writer.readWrite { txn in
                for index in 0..<320 {
                    try txn.setData(Data(repeating: 7, count: 4_000), forKey: "\(index)", inCollection: "c")
                }
            }
            let grown = try WALFile(path: path).bytes.count
            #expect(grown > 1 << 20 && grown < 2 << 20, "\(grown) bytes")
            #expect(try db.checkpoint(.restart).isComplete)
            #expect(try WALFile(path: path).bytes.count == grown, "RESTART leaves the file")
            try writer.readWrite { try $0.setData(Data([1]), forKey: "after", inCollection: "c") }
            let wal = try WALFile(path: path)
            #expect(wal.bytes.count == 1 << 20, "trimmed to journal_size_limit: \(wal.bytes.count) bytes")
            // The new WAL's one commit; past it, the old WAL's frames (other salts), read by no one.
            #expect(wal.commitFrameEnds.count == 1)
            #expect(try sqlite3(path, "SELECT count(*) FROM snapshotdb_values") == "322\n")
            let copy = try Self.crashCopy(of: path, in: directory)
            #expect(try sqlite3(copy, "SELECT count(*) FROM snapshotdb_values") == "322\n")
            #expect(try isIntact(copy))
        }
    }

    @Test func aWALResetReusesThePreallocatedFileAndTheZerosStayPastTheFrames() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("reset.sqlite").path
            let db = try Database(path: path)
            try Self.writeCommits(to: db)
            let before = try WALFile(path: path)
            #expect(try db.checkpoint(.restart).isComplete)
            // Two commits after the reset: the file is overwritten from its start, not grown.
            let writer = db.newConnection(name: "writer")
            for index in 0..<2 {
                try writer.readWrite {
                    try $0.set(Item(title: "again \(index)"), forKey: "\(index)", inCollection: "c")
                }
            }
            let after = try WALFile(path: path)
            #expect(after.bytes.count == before.bytes.count)
            #expect(try sqlite3(path, "SELECT count(*) FROM snapshotdb_values") == "\(Self.commits)\n")
            #expect(
                try sqlite3(path, "SELECT max(number) FROM snapshotdb_history")
                    == "\(Self.commits + 2)\n")
            #expect(try isIntact(path))
        }
    }
}
