import Foundation
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDBInspection

#if canImport(Glibc)
    import Glibc
#endif

/// What `inspect` costs follows what the `-wal` holds, not its size; and a database whose name
/// is not UTF-8 is found.
@Suite("Sparse -wal files and raw paths")
struct SparseAndRawPathTests {
    /// A `-wal` grown to 64 GiB by `truncate -s` (one hole past its frames): before, the scan
    /// read every frame header of the hole (26 s, and past a minute with `--frames`, which
    /// listed 16.7 million empty frames).
    @Test func aSparse64GiBWALIsInspectedInMomentsAndItsTailReportedAsZeroFilled() throws {
        try withFixtureDatabase { path in
            try Python.run(Python.commit, path, "3", "crash")
            let walPath = path + "-wal"
            let frameBytes = 4096 + 24
            let realSize = try #require(
                (try FileManager.default.attributesOfItem(atPath: walPath)[.size] as? NSNumber)?.intValue)
            let validFrames = (realSize - 32) / frameBytes
            let size: Int64 = 64 << 30
            #expect(truncate(walPath, off_t(size)) == 0)
            let slots = Int((size - 32) / Int64(frameBytes))

            let started = ContinuousClock.now
            let report = try SnapshotDBInspector.inspect(
                databaseAt: path, options: InspectionOptions(fileAccess: .transient, includesFrames: true))
            #expect(ContinuousClock.now - started < .seconds(2))
            let wal = try #require(report.wal)
            #expect(wal.sizeBytes == size)
            #expect(wal.validFrames == validFrames)
            #expect(wal.frameSlots == slots)
            #expect(wal.staleFrames == slots - validFrames)
            #expect(wal.zeroFilledFrames == slots - validFrames)
            #expect(report.snapshotDB.commitCounter == 3)
            #expect(report.frames?.count == validFrames)
            #expect(
                report.zeroFilledFrameRanges
                    == [WALFrameRange(first: UInt32(validFrames + 1), last: UInt32(slots))])

            let text = try Tool.run("inspect", "--frames", path)
            #expect(text.status == 0, "\(text.standardError)")
            #expect(
                text.standardOutput.contains("\(validFrames + 1)-\(slots): ")
                    && text.standardOutput.contains("zero-filled stale frames (not listed one by one)"),
                "\(text.standardOutput.suffix(400))")
        }
    }

    /// A `-wal` grown past 2^32 frame slots (SQLite numbers frames with 32 bits): `--frames`
    /// lists the zero-filled slots up to the last number instead of trapping on the conversion.
    @Test func aWALPastTwoToThe32FrameSlotsIsListedWithoutTrapping() throws {
        // Pages of 512 bytes: 2^32 frame slots fit in a sparse file of 2.3 TB, within ext4's
        // largest file.
        try withFixtureDatabase(pageSize: 512) { path in
            try Python.run(Python.commit, path, "3", "crash")
            let walPath = path + "-wal"
            let frameBytes: Int64 = 512 + 24
            let size = 32 + (Int64(UInt32.max) + 10) * frameBytes
            #expect(truncate(walPath, off_t(size)) == 0)
            let report = try SnapshotDBInspector.inspect(
                databaseAt: path, options: InspectionOptions(fileAccess: .transient, includesFrames: true))
            let wal = try #require(report.wal)
            #expect(Int64(wal.frameSlots) == Int64(UInt32.max) + 10)
            #expect(report.zeroFilledFrameRanges?.last?.last == UInt32.max)
            #expect(report.snapshotDB.commitCounter == 3)
            let text = try Tool.run("inspect", "--frames", path)
            #expect(text.status == 0, "\(text.standardError)")
        }
    }

    /// A `-shm` that lags the WAL, as a writer killed between syncing its commit frame and
    /// updating the wal-index leaves it (made here by putting back the `-shm` of two commits
    /// before): with no process attached, SQLite's next opener rebuilds the index from the WAL,
    /// so the report gives the commit the WAL holds, as `sqlite3` reads it.
    @Test func aLaggingSharedMemoryFileOfAClosedDatabaseIsNotTrustedForTheNewestCommit() throws {
        try withFixtureDatabase { path in
            try Python.run(
                """
                import os, shutil, sqlite3, sys
                path = sys.argv[1]
                c = sqlite3.connect(path, isolation_level=None)
                c.execute('PRAGMA wal_autocheckpoint=0')
                def commit(i):
                    c.execute('BEGIN IMMEDIATE')
                    c.execute("INSERT OR REPLACE INTO snapshotdb_values VALUES('items', ?, ?)", (str(i), os.urandom(200)))
                    c.execute("UPDATE snapshotdb_meta SET value = value + 1 WHERE name = 'commit'")
                    c.execute('COMMIT')
                for i in range(5): commit(i)
                shutil.copyfile(path + '-shm', path + '.saved-shm')
                for i in range(5, 7): commit(i)
                sys.stdout.flush()
                os._exit(0)
                """, path)
            #expect(rename(path + ".saved-shm", path + "-shm") == 0)
            let report = try SnapshotDBInspector.inspect(
                databaseAt: path, options: InspectionOptions(fileAccess: .transient))
            // What SQLite reads, on a copy of the database and WAL (its recovery writes).
            let copy = path + ".copy"
            for suffix in ["", "-wal"] {
                try FileManager.default.copyItem(atPath: path + suffix, toPath: copy + suffix)
            }
            let counter = try ChildProcess.run(
                "/usr/bin/sqlite3", [copy, "SELECT value FROM snapshotdb_meta WHERE name = 'commit'"])
            #expect(counter.standardOutput == "7\n")
            #expect(report.snapshotDB.commitCounter == 7)
        }
    }

    /// A `-shm` of 3 bytes, as SQLite truncates it when the first connection opens the database
    /// (and leaves it when that opener dies there): no wal-index to read, not an error; the
    /// newest commit comes from the WAL, as SQLite's next opener rebuilds it.
    @Test func aSharedMemoryFileShorterThanItsHeaderIsNoWALIndex() throws {
        try withFixtureDatabase { path in
            try Python.run(Python.commit, path, "3", "crash")
            #expect(truncate(path + "-shm", 3) == 0)
            let report = try SnapshotDBInspector.inspect(
                databaseAt: path, options: InspectionOptions(fileAccess: .transient))
            #expect(report.walIndex == nil)
            #expect(report.snapshotDB.commitCounter == 3)
            let text = try Tool.run("inspect", path)
            #expect(text.status == 0, "\(text.standardError)")
            #expect(text.standardOutput.contains("shorter than its header"), "\(text.standardOutput)")
        }
    }

    /// Bytes past the last whole page of the database file, which SQLite ignores (it counts
    /// whole pages; `integrity_check` passes): inspected as SQLite reads the file.
    @Test func bytesPastTheLastWholePageAreIgnoredAsSQLiteIgnoresThem() throws {
        try withFixtureDatabase { path in
            try Python.run(Python.commit, path, "3", "close")
            let handle = try #require(FileHandle(forWritingAtPath: path))
            try handle.seekToEnd()
            try handle.write(contentsOf: Data("abc".utf8))
            try handle.close()
            let check = try ChildProcess.run("/usr/bin/sqlite3", [path, "PRAGMA integrity_check"])
            #expect(check.standardOutput == "ok\n")
            let report = try SnapshotDBInspector.inspect(
                databaseAt: path, options: InspectionOptions(fileAccess: .transient))
            #expect(report.snapshotDB.commitCounter == 3)
            #expect(try Tool.run("inspect", path).status == 0)
        }
    }

    /// A database named through a symbolic link: SQLite keeps its `-wal` and `-shm` beside the
    /// file the link leads to, and so does the inspection look for them.
    @Test func aDatabaseNamedThroughASymbolicLinkIsInspectedWhereItsWALIs() throws {
        try withFixtureDatabase { path in
            try Python.run(Python.commit, path, "3", "crash")
            let link = path + ".link"
            #expect(symlink(path, link) == 0)
            defer { unlink(link) }
            let direct = try SnapshotDBInspector.inspect(
                databaseAt: path, options: InspectionOptions(fileAccess: .transient))
            let linked = try SnapshotDBInspector.inspect(
                databaseAt: link, options: InspectionOptions(fileAccess: .transient))
            #expect(direct.wal?.validFrames ?? 0 > 0)
            #expect(linked.wal?.validFrames == direct.wal?.validFrames)
            #expect(linked.snapshotDB.commitCounter == direct.snapshotDB.commitCounter)
            let text = try Tool.run("inspect", link)
            #expect(text.status == 0, "\(text.standardError)")
            #expect(
                text.standardOutput.contains("\(direct.wal?.validFrames ?? 0) valid frames"),
                "\(text.standardOutput.prefix(600))")
        }
    }

    /// Frames that follow a hole are still read: a stale frame of an older generation past the
    /// hole is reported as such.
    @Test func framesAfterAHoleAreStillRead() throws {
        try withFixtureDatabase { path in
            try Python.run(Python.commit, path, "2", "crash")
            let walPath = path + "-wal"
            let wal = try Data(contentsOf: URL(fileURLWithPath: walPath))
            // A copy of the first frame, with its salts changed, one gigabyte further on.
            var frame = Data(wal[32..<(32 + 4096 + 24)])
            frame[8] ^= 0xFF
            let frameBytes = 4096 + 24
            let slot = (1 << 30) / frameBytes
            let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: walPath))
            try handle.seek(toOffset: UInt64(32 + slot * frameBytes))
            try handle.write(contentsOf: frame)
            try handle.close()
            let report = try SnapshotDBInspector.inspect(databaseAt: path, options: .separateProcess)
            let summary = try #require(report.wal)
            #expect(summary.staleFramesWithOtherSalts == 1)
            #expect(summary.zeroFilledFrames == summary.staleFrames - 1)
            #expect(summary.frameSlots == slot + 1)
        }
    }

    /// Runs `snapshotdb` with argument bytes that need not be UTF-8 (Foundation's `Process`
    /// takes only strings); returns the exit status and standard output.
    static func runTool(_ arguments: [[UInt8]], in directory: URL) throws -> (status: Int32, output: String) {
        let tool = try #require(Tool.url)
        let outputPath = directory.appendingPathComponent("tool-output").path
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        let all = [Array(tool.path.utf8)] + arguments
        let cStrings = all.map { bytes -> UnsafeMutablePointer<CChar>? in
            let pointer = UnsafeMutablePointer<CChar>.allocate(capacity: bytes.count + 1)
            for (index, byte) in bytes.enumerated() { pointer[index] = CChar(bitPattern: byte) }
            pointer[bytes.count] = 0
            return pointer
        }
        defer { for pointer in cStrings { pointer?.deallocate() } }
        var argv: [UnsafeMutablePointer<CChar>?] = cStrings + [nil]
        var pid = pid_t()
        let spawned = posix_spawn(&pid, tool.path, &actions, nil, &argv, environ)
        try #require(spawned == 0)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        let output = String(decoding: try Data(contentsOf: URL(fileURLWithPath: outputPath)), as: UTF8.self)
        return ((status >> 8) & 0xFF, output)
    }

    /// A database named `caf\xE9.sqlite` (Latin-1, not UTF-8), with a `-wal` and `-shm` as a
    /// crash leaves them. Before, the tool looked for `caf\u{FFFD}.sqlite` and exited 2.
    @Test func aDatabaseWhoseNameIsNotUTF8IsFound() throws {
        try withFixtureDatabase { path in
            try Python.run(Python.commit, path, "4", "crash")
            let directory = URL(fileURLWithPath: path).deletingLastPathComponent()
            let rawName = Array(directory.path.utf8) + Array("/caf".utf8) + [0xE9] + Array(".sqlite".utf8)
            for suffix in ["", "-wal", "-shm"] {
                let target = rawName + Array(suffix.utf8) + [0]
                let renamed = target.withUnsafeBufferPointer { bytes in
                    bytes.withMemoryRebound(to: CChar.self) { rename(path + suffix, $0.baseAddress!) }
                }
                #expect(renamed == 0)
            }
            let inspected = try Self.runTool([Array("inspect".utf8), rawName], in: directory)
            #expect(inspected.status == 0, "\(inspected.output)")
            #expect(inspected.output.contains("commit      4"), "\(inspected.output)")
            #expect(inspected.output.contains("caf\u{FFFD}.sqlite"), "\(inspected.output)")
            let json = try Self.runTool(
                [Array("inspect".utf8), Array("--json".utf8), rawName], in: directory)
            #expect(json.status == 0)
            #expect(json.output.contains("\"commitCounter\" : 4"), "\(json.output)")
            // The tool created nothing beside the database.
            #expect(
                try FileManager.default.contentsOfDirectory(atPath: directory.path).filter {
                    !$0.hasPrefix("caf") && $0 != "tool-output"
                } == [])
        }
    }
}
