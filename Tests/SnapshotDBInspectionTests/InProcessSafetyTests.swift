import Foundation
import Testing

@testable import SnapshotDBInspection

#if canImport(Glibc)
    import Glibc
#endif

/// The in-process entry points never drop a POSIX lock of the calling process.
///
/// POSIX record locks vanish when their process closes *any* descriptor of the file. The test
/// plays the engine: it takes POSIX locks on the `-shm` (a read slot, as a SQLite reader does)
/// and on the database file (SQLite's shared-lock range), then inspects in-process and checks
/// the kernel still lists both locks. A control run with transient descriptors shows the test
/// would notice a dropped lock.
@Suite("In-process inspection")
struct InProcessSafetyTests {
    @Test("probeLocks and inspect(.inProcess) keep this process's POSIX locks; transient reads drop them")
    func locksSurvive() throws {
        try withFixtureDatabase { path in
            try Python.run(Python.commit, path, "2", "crash")
            let sharedMemory = open(path + "-shm", O_RDWR | O_CLOEXEC)
            let database = open(path, O_RDWR | O_CLOEXEC)
            #expect(sharedMemory >= 0 && database >= 0)
            defer {
                close(sharedMemory)
                close(database)
            }
            try readLock(sharedMemory, at: Int64(WALIndexLock.read2.rawValue))
            try readLock(database, at: 0x4000_0002)  // SQLite's SHARED lock range starts here

            let pid = getpid()
            for _ in 0..<2 {
                let locks = try #require(try SnapshotDBInspector.probeLocks(databaseAt: path))
                #expect(locks.holders(of: .read2).contains { $0.pid == pid })
                let report = try SnapshotDBInspector.inspect(databaseAt: path)
                #expect(report.readSlots[2].holders.contains { $0.pid == pid && $0.mode == .shared })
                #expect(report.readSlots[2].pin != nil)
                #expect(report.snapshotDB.commitCounter == 2)
                _ = try SnapshotDBInspector.readDatabaseHeader(at: path)
            }
            #expect(try holdsLock(path: path + "-shm", at: Int64(WALIndexLock.read2.rawValue)))
            #expect(try holdsLock(path: path, at: 0x4000_0002))

            // Control: reading through transient descriptors closes them, and the kernel drops
            // this process's locks on both files.
            _ = try SnapshotDBInspector.inspect(databaseAt: path, options: .separateProcess)
            #expect(try !holdsLock(path: path + "-shm", at: Int64(WALIndexLock.read2.rawValue)))
            #expect(try !holdsLock(path: path, at: 0x4000_0002))
        }
    }

    private func readLock(_ descriptor: Int32, at offset: Int64) throws {
        var request = flock()
        request.l_type = Int16(F_RDLCK)
        request.l_whence = Int16(SEEK_SET)
        request.l_start = off_t(offset)
        request.l_len = 1
        #expect(fcntl(descriptor, F_SETLK, &request) == 0)
    }

    /// Whether `/proc/locks` lists a POSIX lock of this process on `offset` of `path`.
    private func holdsLock(path: String, at offset: Int64) throws -> Bool {
        let status = try #require(try InspectedFile.status(of: path))
        let entries = try #require(LockProbe.procLocksEntries(for: status.identity))
        return entries.contains { $0.pid == getpid() && $0.kind == .posix && $0.covers(offset) }
    }
}
