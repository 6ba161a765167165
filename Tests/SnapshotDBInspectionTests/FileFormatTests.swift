import Foundation
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDBInspection

/// The library's reading of SQLite's file formats, checked against what SQLite itself reads.
@Suite("SQLite file formats")
struct FileFormatTests {
    static let layouts: [(pageSize: Int, encoding: String)] = [
        (512, "UTF-8"), (4096, "UTF-8"), (65536, "UTF-8"), (4096, "UTF-16le"), (1024, "UTF-16be"),
    ]

    @Test("the commit counter read from pages equals SQLite's", arguments: layouts)
    func counterMatchesSQLite(layout: (pageSize: Int, encoding: String)) throws {
        try withFixtureDatabase(pageSize: layout.pageSize, encoding: layout.encoding) { path in
            try Python.run(Python.commit, path, "7", "crash")
            let report = try SnapshotDBInspector.inspect(databaseAt: path, options: .separateProcess)
            #expect(report.database.header.pageSize == layout.pageSize)
            #expect(report.walIndex?.header.pageSize == layout.pageSize)
            #expect(report.wal?.header?.pageSize == layout.pageSize)
            #expect(report.snapshotDB.isSnapshotDB)
            #expect(report.snapshotDB.schemaVersion == 1)
            #expect(report.wal?.commitFrames == 7)
            #expect(report.committedFrames == UInt32(report.wal?.validFrames ?? -1))
            let sqlite = try Python.run(Python.readCounter, path).trimmingCharacters(
                in: .whitespacesAndNewlines)
            #expect(report.snapshotDB.commitCounter.map(String.init) == sqlite)
            #expect(sqlite == "7")
        }
    }

    @Test("interior b-tree pages and overflow chains are followed")
    func interiorAndOverflowPages() throws {
        try withFixtureDatabase(pageSize: 1024) { path in
            // Enough schema rows to make page 1 an interior page, long SQL text that overflows,
            // and a meta table of many long-named rows with the counter row at the end.
            try Python.run(
                """
                import sqlite3, sys
                c = sqlite3.connect(sys.argv[1], isolation_level=None)
                c.execute('PRAGMA wal_autocheckpoint=0')
                c.execute('BEGIN')
                for t in range(40):
                    columns = ', '.join(f'column_{i}_{"x" * 40} TEXT' for i in range(30))
                    c.execute(f'CREATE TABLE extra_{t}({columns})')
                for i in range(400):
                    c.execute('INSERT INTO snapshotdb_meta VALUES(?, ?)', (f'filler-{i:04}-' + 'y' * 3000, i))
                c.execute("DELETE FROM snapshotdb_meta WHERE name = 'commit'")
                c.execute("INSERT INTO snapshotdb_meta VALUES('commit', 123456789012)")
                c.execute('COMMIT')
                import os; os._exit(0)
                """, path)
            let report = try SnapshotDBInspector.inspect(databaseAt: path, options: .separateProcess)
            #expect(report.snapshotDB.commitCounter == 123_456_789_012, "\(report.snapshotDB)")
            let sqlite = try Python.run(Python.readCounter, path).trimmingCharacters(
                in: .whitespacesAndNewlines)
            #expect(sqlite == "123456789012")
            // After SQLite's checkpoint on close, the same answer from the database file alone.
            let checkpointed = try SnapshotDBInspector.inspect(databaseAt: path, options: .separateProcess)
            #expect(checkpointed.wal == nil)
            #expect(checkpointed.snapshotDB.commitCounter == 123_456_789_012)
        }
    }

    /// After a RESTART checkpoint, the next writer starts the WAL over with new salts; the frames
    /// after the new valid prefix are the stale tail of the previous generation.
    @Test("a stale tail after a WAL reset is counted and ignored")
    func staleTail() throws {
        try withFixtureDatabase { path in
            try Python.run(
                """
                import os, sqlite3, sys
                c = sqlite3.connect(sys.argv[1], isolation_level=None)
                c.execute('PRAGMA wal_autocheckpoint=0')
                for i in range(5):
                    c.execute("UPDATE snapshotdb_meta SET value = value + 1 WHERE name = 'commit'")
                    c.execute("INSERT INTO snapshotdb_values VALUES('c', ?, x'00')", (str(i),))
                c.execute('PRAGMA wal_checkpoint(RESTART)')
                c.execute("UPDATE snapshotdb_meta SET value = value + 1 WHERE name = 'commit'")
                os._exit(0)
                """, path)
            let report = try SnapshotDBInspector.inspect(
                databaseAt: path, options: InspectionOptions(fileAccess: .transient, includesFrames: true))
            let wal = try #require(report.wal)
            #expect(wal.validFrames == 1)
            #expect(wal.commitFrames == 1)
            #expect(wal.staleFrames == 9)
            #expect(wal.staleFramesWithOtherSalts == 9)
            #expect(wal.header?.checkpointSequence == 1)
            #expect(report.frames?.filter { $0.status == .stale }.count == 9)
            #expect(report.frames?.first?.status == .committed)
            #expect(report.snapshotDB.commitCounter == 6)
            let text = try Tool.run("inspect", "--frames", path)
            #expect(text.standardOutput.contains("stale tail of 9 frames (9 with older salts)"))
            #expect(text.standardOutput.contains("       2         4         4  stale         no    other"))
        }
    }

    /// Under `synchronous = FULL` SnapshotDB's VFS zero-fills the WAL past its frames; those
    /// frames are stale (page 0, salts 0) and reported as zero-filled, not as an older generation.
    @Test("zero-filled frames past the valid prefix are reported as preallocated")
    func zeroFilledTail() throws {
        try withFixtureDatabase { path in
            try Python.run(
                """
                import os, sqlite3, sys
                c = sqlite3.connect(sys.argv[1], isolation_level=None)
                c.execute('PRAGMA wal_autocheckpoint=0')
                for i in range(2):
                    c.execute("UPDATE snapshotdb_meta SET value = value + 1 WHERE name = 'commit'")
                os._exit(0)
                """, path)
            let wal = try FileHandle(forWritingTo: URL(fileURLWithPath: path + "-wal"))
            try wal.seekToEnd()
            try wal.write(contentsOf: Data(count: 3 * (4096 + 24)))
            try wal.close()
            let report = try SnapshotDBInspector.inspect(databaseAt: path, options: .separateProcess)
            let summary = try #require(report.wal)
            #expect(summary.validFrames == 2)
            #expect(summary.staleFrames == 3)
            #expect(summary.zeroFilledFrames == 3)
            #expect(summary.staleFramesWithOtherSalts == 0)
            #expect(summary.trailingPartialBytes == 0)
            #expect(report.snapshotDB.commitCounter == 2)
            let text = try Tool.run("inspect", path)
            #expect(
                text.standardOutput.contains(
                    "stale tail of 3 frames (0 with older salts, 3 zero-filled, preallocated)"))
        }
    }

    /// A WAL written by a big-endian machine (magic 0x377f0683) checksums big-endian words.
    /// The test rewrites a little-endian WAL that way; SQLite's own recovery must accept it too.
    @Test("big-endian WAL checksums are verified")
    func bigEndianChecksums() throws {
        try withFixtureDatabase { path in
            try Python.run(Python.commit, path, "3", "crash")
            try FileManager.default.removeItem(atPath: path + "-shm")
            try Python.run(
                """
                import struct, sys
                path = sys.argv[1] + '-wal'
                data = bytearray(open(path, 'rb').read())
                def checksum(buf, s0, s1):
                    for i in range(0, len(buf), 8):
                        x0, x1 = struct.unpack('>II', buf[i:i + 8])
                        s0 = (s0 + x0 + s1) & 0xffffffff
                        s1 = (s1 + x1 + s0) & 0xffffffff
                    return s0, s1
                struct.pack_into('>I', data, 0, 0x377f0683)
                s = checksum(data[0:24], 0, 0)
                struct.pack_into('>II', data, 24, *s)
                page_size = struct.unpack('>I', data[8:12])[0]
                offset = 32
                while offset + 24 + page_size <= len(data):
                    s = checksum(data[offset:offset + 8], *s)
                    s = checksum(data[offset + 24:offset + 24 + page_size], *s)
                    struct.pack_into('>II', data, offset + 16, *s)
                    offset += 24 + page_size
                open(path, 'wb').write(data)
                """, path)
            let report = try SnapshotDBInspector.inspect(databaseAt: path, options: .separateProcess)
            #expect(report.wal?.header?.magic == 0x377f_0683)
            #expect(report.wal?.header?.bigEndianChecksums == true)
            #expect(report.wal?.header?.isValid == true)
            #expect(report.wal?.validFrames == 6)
            #expect(report.walIndex == nil)
            #expect(report.snapshotDB.commitCounter == 3)
            #expect(
                try Python.run(Python.readCounter, path).trimmingCharacters(in: .whitespacesAndNewlines)
                    == "3")
        }
    }

    @Test("a wal-index whose two header copies differ is reported as torn, not trusted")
    func tornWALIndex() throws {
        try withFixtureDatabase { path in
            try Python.run(Python.commit, path, "2", "crash")
            let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path + "-shm"))
            try handle.seek(toOffset: 48 + 16)  // mxFrame of the second copy
            try handle.write(contentsOf: Data([0x7f]))
            try handle.close()

            let report = try SnapshotDBInspector.inspect(
                databaseAt: path, options: InspectionOptions(fileAccess: .transient, walIndexReadAttempts: 3))
            let index = try #require(report.walIndex)
            #expect(index.copiesAgree == false)
            #expect(index.readAttempts == 3)
            #expect(index.isReliable == false)
            #expect(report.committedFrames == 4)  // from the valid frame chain instead
            #expect(report.snapshotDB.commitCounter == 2)
            #expect(report.walReset.blockers.map(\.reason) == [.walIndexUnreliable])
            let text = try Tool.run("inspect", path)
            #expect(text.status == 0)
            #expect(text.standardOutput.contains("TORN: header copies differed in 5 reads"))
        }
    }

    @Test("/proc/locks lines are parsed: POSIX and OFD holders, EOF ranges, waiters skipped")
    func procLocksParsing() {
        let text = """
            1: POSIX  ADVISORY  READ 3801 fe:00:16220444 124 124
            2: POSIX  ADVISORY  WRITE 3802 fe:00:16220444 120 120
            2: -> POSIX  ADVISORY  WRITE 3803 fe:00:16220444 120 120
            3: OFDLCK ADVISORY  READ -1 103:02:77 0 EOF
            4: FLOCK  ADVISORY  WRITE 99 fe:00:16220444 0 EOF
            garbage line
            """
        let entries = LockProbe.parseProcLocks(text)
        #expect(entries.count == 3)
        #expect(
            entries[0]
                == .init(
                    kind: .posix, mode: .shared, pid: 3801, deviceMajor: 0xfe, deviceMinor: 0,
                    inode: 16_220_444, start: 124, end: 124))
        #expect(entries[1].mode == .exclusive && entries[1].pid == 3802)
        #expect(entries[2].kind == .openFileDescription && entries[2].pid == nil)
        #expect(entries[2].deviceMajor == 0x103 && entries[2].deviceMinor == 2 && entries[2].end == Int64.max)
        #expect(entries[2].covers(128))
    }
}
