import CSQLite
import Foundation
import Logging
import SnapshotDB
import SnapshotDBTestSupport
import Testing

/// Damaged files on disk: a main file with a garbage b-tree page, and `-wal`/`-shm` files
/// damaged while no process had the database open (what a crash, a bad copy or a faulty disk
/// leaves behind).
///
/// The promise under test: damage is reported as a typed error, never a crash, and never
/// repaired by losing or changing something that was intact.
@Suite("Damaged database, -wal and -shm files")
struct DamagedFileTests {
    static func key(_ index: Int) -> String {
        let digits = String(index)
        return String(repeating: "0", count: max(0, 3 - digits.count)) + digits
    }

    static func title(_ index: Int) -> String {
        "value \(index) " + String(repeating: "x", count: 200)
    }

    // MARK: A corrupt main file

    @Test func garbageOverAValuesPageFailsReadsAndWritesWithCorruptAndChangesNothing() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("corrupt.sqlite").path
            let valueCount = 400
            do {
                let db = try Database(path: path)
                let writer = db.newConnection(name: "writer")
                for start in stride(from: 0, to: valueCount, by: 100) {
                    try writer.readWrite { txn in
                        for index in start..<start + 100 {
                            try txn.set(
                                Item(title: Self.title(index)), forKey: Self.key(index), inCollection: "c")
                        }
                    }
                }
            }
            // Released: the last connection checkpointed everything into the main file.
            #expect(!FileManager.default.fileExists(atPath: path + "-wal"))
            let pageSize = try #require(
                Int(try sqlite3(path, "PRAGMA page_size").trimmingCharacters(in: .newlines)))
            let leaves = try sqlite3(
                path,
                "SELECT pageno FROM dbstat WHERE name = 'snapshotdb_values' AND pagetype = 'leaf' ORDER BY pageno"
            ).split(separator: "\n").compactMap { Int($0) }
            try #require(leaves.count > 4)
            let damagedPage = leaves[leaves.count / 2]
            try overwrite(path, at: (damagedPage - 1) * pageSize, with: garbage(count: pageSize))
            let damagedFile = try Data(contentsOf: URL(fileURLWithPath: path))

            do {
                let db = try Database(path: path)
                #expect(db.latestCommit == 4)
                let reader = db.newConnection(name: "reader")
                var intact = 0
                var corruptKeys: [String] = []
                for index in 0..<valueCount {
                    do {
                        let item = try reader.read {
                            try $0.value(forKey: Self.key(index), inCollection: "c", as: Item.self)
                        }
                        #expect(item == Item(title: Self.title(index)))
                        intact += 1
                    } catch let error as DatabaseError {
                        #expect(error.code == .corrupt, "\(error)")
                        #expect(error.sqliteCode.map { $0 & 0xFF } == SQLITE_CORRUPT)
                        #expect(error.message.contains("database disk image is malformed"), "\(error)")
                        corruptKeys.append(Self.key(index))
                    }
                }
                // Only the values on the damaged page are unreadable; every other one is intact.
                #expect(!corruptKeys.isEmpty)
                #expect(intact + corruptKeys.count == valueCount)
                #expect(intact >= valueCount - 2 * (valueCount / leaves.count))
                // Scans cross the damaged page.
                expectError(.corrupt) { try reader.read { try $0.count(inCollection: "c") } }
                expectError(.corrupt) { try reader.read { try $0.keys(inCollection: "c") } }
                expectError(.corrupt) {
                    try reader.read { txn in
                        try txn.enumerate(inCollection: "c", as: Item.self) { _, _, _ in }
                    }
                }
                // Writes that touch the damaged page fail the same way and commit nothing.
                let writer = db.newConnection(name: "writer")
                let damagedKey = try #require(corruptKeys.first)
                expectError(.corrupt) {
                    try writer.readWrite { txn in
                        try txn.set(Item(title: "new"), forKey: "new", inCollection: "other")
                        try txn.set(Item(title: "overwrite"), forKey: damagedKey, inCollection: "c")
                    }
                }
                expectError(.corrupt) { try writer.readWrite { try $0.removeAll(inCollection: "c") } }
                expectError(.corrupt) { try writer.readWrite { try $0.removeAllCollections() } }
                #expect(db.latestCommit == 4)
                #expect(try reader.read { try $0.hasValue(forKey: "new", inCollection: "other") } == false)
                // The connections still work for what is intact.
                #expect(
                    try reader.read { try $0.value(forKey: "000", inCollection: "c", as: Item.self) } != nil)
            }
            // Neither the failed reads nor the failed writes changed a byte, and the damage is
            // still there for SQLite's own check (and a recovery tool) to see.
            #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == damagedFile)
            #expect(try !isIntact(path))
        }
    }

    /// Pages the open itself reads: the schema (page 1, after the 100-byte header SnapshotDB
    /// checks) and the metadata table with the commit counter.
    enum OpenPage: String, CaseIterable, Sendable {
        case schema
        case metadata
    }

    @Test(arguments: OpenPage.allCases)
    func garbageOverAPageTheOpenReadsFailsTheOpenWithCorruptAndChangesNothing(_ page: OpenPage) throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("corrupt.sqlite").path
            do {
                let db = try Database(path: path)
                try db.newConnection().readWrite {
                    try $0.set(Item(title: "kept"), forKey: "k", inCollection: "c")
                }
            }
            let pageSize = try #require(
                Int(try sqlite3(path, "PRAGMA page_size").trimmingCharacters(in: .newlines)))
            switch page {
            case .schema:
                try overwrite(path, at: 100, with: garbage(count: pageSize - 100))
            case .metadata:
                let root = try #require(
                    Int(
                        try sqlite3(path, "SELECT rootpage FROM sqlite_schema WHERE name = 'snapshotdb_meta'")
                            .trimmingCharacters(in: .newlines)))
                try overwrite(path, at: (root - 1) * pageSize, with: garbage(count: pageSize))
            }
            let before = try directoryContents(directory)
            let error = expectError(.corrupt) { try Database(path: path) }
            #expect(error?.message.contains("malformed") == true, "\(String(describing: error))")
            #expect(
                error?.message.contains(path) == true,
                "the error names the file: \(String(describing: error))")
            #expect(try directoryContents(directory) == before)
            // The failed open released the path: a second attempt fails the same way.
            expectError(.corrupt) { try Database(path: path) }
        }
    }

    // MARK: SnapshotDB's own tables damaged by a foreign client

    /// What a foreign client (the `sqlite3` shell) may do to SnapshotDB's metadata.
    enum MetadataDamage: String, CaseIterable, Sendable {
        case historyEmptied = "DELETE FROM snapshotdb_history"
        case externalMarkerDeleted = "DELETE FROM snapshotdb_meta WHERE name = 'external'"
        case sealedMarkerDeleted = "DELETE FROM snapshotdb_meta WHERE name = 'external_sealed'"
        case metadataTableDropped = "DROP TABLE snapshotdb_meta"
        case valuesTableDropped = "DROP TABLE snapshotdb_values"
    }

    /// Damage done while the database is closed fails the open with `corrupt`. Done while it
    /// is open, it fails every transaction: with `corrupt` for lost metadata rows; for a dropped
    /// table, reads with SQLite's "no such table" (`sqlite`) and writes with `corrupt` (the
    /// writer checks a changed schema whole), but for `snapshotdb_meta`, which a write reads
    /// before that check. Either way nothing more is written.
    @Test(arguments: MetadataDamage.allCases)
    func damagedMetadataIsReportedAsCorruptAndNothingIsWritten(_ damage: MetadataDamage) throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("meta.sqlite").path
            let db = try Database(path: path)
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { try $0.set(Item(title: "kept"), forKey: "kept", inCollection: "c") }

            try sqlite3(path, damage.rawValue)
            let contents = try sqlite3(path, ".dump")
            let dropsATable = damage.rawValue.hasPrefix("DROP TABLE")
            let code: DatabaseError.Code = dropsATable ? .sqlite : .corrupt
            let reader = db.newConnection(name: "reader")
            let readError = expectError(code) { try reader.read { try $0.keys(inCollection: "c") } }
            #expect(readError?.message.contains("snapshotdb_") == true, "\(String(describing: readError))")
            let writeError = expectError(damage == .metadataTableDropped ? .sqlite : .corrupt) {
                try writer.readWrite { try $0.set(Item(title: "lost"), forKey: "lost", inCollection: "c") }
            }
            #expect(writeError?.message.contains("snapshotdb_") == true, "\(String(describing: writeError))")
            if damage != .valuesTableDropped {
                expectError(code) { try reader.beginLongLivedReadTransaction() }
                #expect(!reader.isInLongLivedReadTransaction)
            }
            #expect(db.latestCommit == 1)
            #expect(try sqlite3(path, ".dump") == contents)
        }
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("meta.sqlite").path
            do {
                let db = try Database(path: path)
                try db.newConnection().readWrite {
                    try $0.set(Item(title: "kept"), forKey: "kept", inCollection: "c")
                }
            }
            try sqlite3(path, damage.rawValue)
            let before = try directoryContents(directory)
            let error = expectError(.corrupt) { try Database(path: path) }
            #expect(error?.message.contains("snapshotdb_") == true, "\(String(describing: error))")
            #expect(try directoryContents(directory) == before)
        }
    }

    /// Without its triggers, writes by foreign clients would go unnoticed by every cache.
    @Test func droppedTriggerFailsTheOpenWithCorrupt() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("trigger.sqlite").path
            _ = try Database(path: path)
            try sqlite3(path, "DROP TRIGGER snapshotdb_external_update")
            let before = try directoryContents(directory)
            let error = expectError(.corrupt) { try Database(path: path) }
            #expect(error?.message.contains("trigger") == true, "\(String(describing: error))")
            #expect(try directoryContents(directory) == before)
        }
    }

    /// A trigger dropped while the database is open: this process's next write finds the schema
    /// changed, checks it whole again and throws `corrupt` naming the trigger, as the open would,
    /// rather than go on while foreign writes go unseen. Reads go on; nothing is written.
    @Test func aTriggerDroppedWhileOpenFailsTheNextWriteWithCorrupt() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { try $0.set(Item(title: "a"), forKey: "a", inCollection: "c") }
            let committed = db.latestCommit
            try sqlite3(db.path, "DROP TRIGGER snapshotdb_external_update")
            let error = expectError(.corrupt) {
                try writer.readWrite { try $0.set(Item(title: "b"), forKey: "b", inCollection: "c") }
            }
            #expect(error?.message.contains("trigger") == true, "\(String(describing: error))")
            #expect(db.latestCommit == committed)
            #expect(try writer.read { try $0.keys(inCollection: "c") } == ["a"])
        }
    }

    // MARK: A damaged -wal or -shm left by an earlier run

    /// A copy of a database as a crash leaves it: commits 1...5 checkpointed into the main file,
    /// commits 6...10 only in the `-wal`, no process attached.
    struct CrashCopy {
        static let checkpointedCommits: UInt64 = 5
        static let allCommits: UInt64 = 10

        let path: String
        var walPath: String { path + "-wal" }
        var sharedMemoryPath: String { path + "-shm" }
        /// The wal-index as the live database had it after commit 8: well-formed, checksums
        /// right, and stale.
        let staleSharedMemory: Data
        /// The byte offset just past the commit frame of each commit in the `-wal`, in order.
        let commitFrameEnds: [Int]

        static func make(in directory: URL) throws -> CrashCopy {
            let original = directory.appendingPathComponent("original.sqlite").path
            let copy = directory.appendingPathComponent("copy.sqlite").path
            let db = try Database(path: original)
            let writer = db.newConnection(name: "writer")
            func commit(_ index: Int) throws {
                let title = UInt64(index) < checkpointedCommits ? "checkpointed \(index)" : "wal \(index)"
                try writer.readWrite { txn in
                    try txn.set(Item(title: title, count: index), forKey: "\(index)", inCollection: "c")
                }
            }
            for index in 0..<Int(checkpointedCommits) { try commit(index) }
            #expect(try db.checkpoint(.truncate).isComplete)
            var stale = Data()
            for index in Int(checkpointedCommits)..<Int(allCommits) {
                try commit(index)
                if index == 7 { stale = try Data(contentsOf: URL(fileURLWithPath: original + "-shm")) }
            }
            #expect(db.latestCommit == allCommits)
            try FileManager.default.copyItem(atPath: original, toPath: copy)
            try FileManager.default.copyItem(atPath: original + "-wal", toPath: copy + "-wal")
            let wal = try Data(contentsOf: URL(fileURLWithPath: copy + "-wal"))
            return CrashCopy(
                path: copy, staleSharedMemory: stale, commitFrameEnds: Self.commitFrameEnds(of: wal))
        }

        /// Walks the WAL's frame headers: a frame whose "database size after commit" field is
        /// not zero ends a transaction.
        static func commitFrameEnds(of wal: Data) -> [Int] {
            func bigEndian32(_ offset: Int) -> Int {
                wal[offset..<offset + 4].reduce(0) { $0 << 8 | Int($1) }
            }
            let frameSize = 24 + bigEndian32(8)
            var ends: [Int] = []
            var offset = 32
            while offset + frameSize <= wal.count {
                if bigEndian32(offset + 4) != 0 { ends.append(offset + frameSize) }
                offset += frameSize
            }
            return ends
        }

        /// Opens the copy and checks that it holds exactly commits 1...`commits`, each value
        /// intact, that it takes a new commit, and that SQLite finds it sound.
        func expectExactly(_ commits: UInt64, sourceLocation: SourceLocation = #_sourceLocation) throws {
            do {
                let logs = LogCapture()
                var configuration = Configuration()
                configuration.checkpointLogger = logs.logger
                let db = try Database(path: path, configuration: configuration)
                #expect(db.latestCommit == commits, sourceLocation: sourceLocation)
                // The open says what it found and did, and nothing worse.
                let walBytesAtOpen = db.checkpointStatus().walBytesAtOpen
                #expect(
                    logs.messages(at: .notice).contains { $0.contains("checkpointed and truncated it") }
                        == (walBytesAtOpen > 0), sourceLocation: sourceLocation)
                #expect(logs.messages(at: .warning).isEmpty, sourceLocation: sourceLocation)
                #expect(logs.messages(at: .error).isEmpty, sourceLocation: sourceLocation)
                // The open's checkpoint moved what was recovered into the main file and reset
                // the WAL: a damaged tail is gone, not replayed later.
                let walSize = try FileManager.default.attributesOfItem(atPath: walPath)[.size] as? NSNumber
                #expect(walSize?.intValue == 0, sourceLocation: sourceLocation)
                let reader = db.newConnection(name: "reader")
                try reader.read { txn throws in
                    #expect(txn.commit == commits, sourceLocation: sourceLocation)
                    #expect(
                        try txn.keys(inCollection: "c") == (0..<Int(commits)).map(String.init),
                        sourceLocation: sourceLocation)
                    for index in 0..<Int(commits) {
                        let title =
                            UInt64(index) < Self.checkpointedCommits
                            ? "checkpointed \(index)" : "wal \(index)"
                        #expect(
                            try txn.value(forKey: "\(index)", inCollection: "c", as: Item.self)
                                == Item(title: title, count: index), sourceLocation: sourceLocation)
                    }
                }
                try db.newConnection(name: "writer").readWrite {
                    try $0.set(Item(title: "after"), forKey: "after", inCollection: "c")
                }
                #expect(db.latestCommit == commits + 1, sourceLocation: sourceLocation)
            }
            #expect(try isIntact(path), sourceLocation: sourceLocation)
            #expect(
                try sqlite3(path, "SELECT max(number) FROM snapshotdb_history")
                    == "\(commits + 1)\n",
                sourceLocation: sourceLocation)
        }
    }

    /// Ways a `-wal` is found damaged, and the commits SQLite's recovery keeps: every commit
    /// whose frames, and all frames before them, are whole and carry valid checksums.
    enum WALDamage: String, CaseIterable, Sendable {
        /// Undamaged: the crash copy recovers every commit (the baseline).
        case none
        /// Emptied.
        case empty
        /// Overwritten by random bytes of the same length.
        case randomBytes
        /// Cut inside its 32-byte header.
        case truncatedInHeader
        /// Cut inside the last frame (the commit frame of commit 10).
        case truncatedInLastFrame
        /// A valid header whose checksum does not match.
        case badHeaderChecksum
        /// Valid frames, except one byte of the first frame of commit 8.
        case badFrameChecksum
        /// Valid frames followed by random bytes, right after the last commit frame (where
        /// SQLite's recovery reads the next frame header).
        case garbageAppended

        func apply(to copy: CrashCopy) throws {
            let url = URL(fileURLWithPath: copy.walPath)
            var wal = try Data(contentsOf: url)
            switch self {
            case .none: return
            case .empty: wal = Data()
            case .randomBytes: wal = garbage(count: wal.count)
            case .truncatedInHeader: wal = wal.prefix(20)
            case .truncatedInLastFrame:
                // The last commit frame, not the file's end: past it lie zeros SnapshotDB's
                // VFS preallocated.
                wal = wal.prefix(copy.commitFrameEnds[copy.commitFrameEnds.count - 1] - 100)
            case .badHeaderChecksum: wal[24] ^= 0xFF
            case .badFrameChecksum:
                // Commit 8 is the third commit in this WAL; its first frame follows commit 7's.
                wal[copy.commitFrameEnds[1] + 24 + 100] ^= 0xFF
            case .garbageAppended:
                // Over the zeros SnapshotDB's VFS preallocated past the last commit frame: behind
                // them, the garbage would never be read (recovery stops at the first zero frame).
                wal = wal.prefix(copy.commitFrameEnds[copy.commitFrameEnds.count - 1]) + garbage(count: 5_000)
            }
            try wal.write(to: url)
        }

        var survivingCommits: UInt64 {
            switch self {
            case .none, .garbageAppended: return CrashCopy.allCommits
            case .empty, .randomBytes, .truncatedInHeader, .badHeaderChecksum:
                return CrashCopy.checkpointedCommits
            case .truncatedInLastFrame: return CrashCopy.allCommits - 1
            case .badFrameChecksum: return 7
            }
        }
    }

    @Test(arguments: WALDamage.allCases)
    func damagedWALOpensWithEveryCommitBeforeTheDamage(_ damage: WALDamage) throws {
        try withTemporaryDirectory { directory throws in
            let copy = try CrashCopy.make(in: directory)
            #expect(copy.commitFrameEnds.count == 5)
            try damage.apply(to: copy)
            try copy.expectExactly(damage.survivingCommits)
        }
    }

    /// Ways a `-shm` is found damaged. With no process attached SQLite rebuilds the wal-index
    /// from the `-wal`, so every commit survives.
    enum SharedMemoryDamage: String, CaseIterable, Sendable {
        case randomBytes
        case truncated
        case empty
        /// A well-formed wal-index with valid checksums that describes fewer commits than the
        /// `-wal` holds.
        case stale
        /// A directory where the `-shm` should be: this one SQLite cannot replace.
        case directory

        func apply(to copy: CrashCopy) throws {
            let url = URL(fileURLWithPath: copy.sharedMemoryPath)
            switch self {
            case .randomBytes: try garbage(count: 32_768).write(to: url)
            case .truncated: try copy.staleSharedMemory.prefix(100).write(to: url)
            case .empty: try Data().write(to: url)
            case .stale: try copy.staleSharedMemory.write(to: url)
            case .directory:
                try FileManager.default.createDirectory(at: url, withIntermediateDirectories: false)
            }
        }
    }

    @Test(arguments: SharedMemoryDamage.allCases.filter { $0 != .directory })
    func damagedSharedMemoryIsRebuiltAndEveryCommitSurvives(_ damage: SharedMemoryDamage) throws {
        try withTemporaryDirectory { directory throws in
            let copy = try CrashCopy.make(in: directory)
            try damage.apply(to: copy)
            try copy.expectExactly(CrashCopy.allCommits)
        }
    }

    @Test func damagedSharedMemoryAndDamagedWALTogether() throws {
        try withTemporaryDirectory { directory throws in
            let copy = try CrashCopy.make(in: directory)
            try SharedMemoryDamage.stale.apply(to: copy)
            try WALDamage.badFrameChecksum.apply(to: copy)
            try copy.expectExactly(WALDamage.badFrameChecksum.survivingCommits)
        }
    }

    /// A `-shm` that SQLite can open only for reading (here a directory in its place) makes the
    /// database read-only for this process: every commit is readable from the `-wal`, writes
    /// fail with `readOnly`, and no file changes.
    @Test func unwritableSharedMemoryMakesTheDatabaseReadOnlyAndChangesNothing() throws {
        try withTemporaryDirectory { directory throws in
            let copy = try CrashCopy.make(in: directory)
            try SharedMemoryDamage.directory.apply(to: copy)
            let before = try directoryContents(directory)
            do {
                let logs = LogCapture()
                var configuration = Configuration()
                configuration.checkpointLogger = logs.logger
                let db = try Database(path: copy.path, configuration: configuration)
                #expect(db.latestCommit == CrashCopy.allCommits)
                // The open's checkpoint fails on the -shm it cannot write, and says why; no
                // warning blames a reader.
                #expect(logs.messages(at: .error).contains { $0.contains("readOnly") })
                #expect(logs.messages(at: .warning).isEmpty)
                let connection = db.newConnection()
                #expect(try connection.read { try $0.count(inCollection: "c") } == Int(CrashCopy.allCommits))
                let error = expectError(.readOnly) {
                    try connection.readWrite { try $0.set(1, forKey: "x", inCollection: "c") }
                }
                #expect(error?.sqliteCode.map { $0 & 0xFF } == SQLITE_READONLY)
                #expect(db.latestCommit == CrashCopy.allCommits)
            }
            #expect(try directoryContents(directory) == before)
            try FileManager.default.removeItem(atPath: copy.sharedMemoryPath)
            try copy.expectExactly(CrashCopy.allCommits)
        }
    }
}
