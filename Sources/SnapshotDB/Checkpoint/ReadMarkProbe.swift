internal import SnapshotDBInspection

/// Lists which processes hold the read-mark lock bytes of the database's `-shm`.
///
/// A reader holds a shared lock on byte `123 + i` of the `-shm` while its snapshot uses read
/// mark `i`. The probe is ``SnapshotDBInspector/probeLocks(databaseAt:)``, which only calls
/// `stat()` and reads `/proc/locks`: it never opens the `-shm`, since closing any descriptor on
/// it would drop every POSIX lock SQLite holds there for the whole process.
enum ReadMarkProbe {
    /// One holder of a read-mark lock.
    struct Holder: Hashable {
        var slot: Int
        var processID: Int32
        var processName: String?
    }

    /// The holders of the read marks of the database at `databasePath` (this process's own
    /// connections included, under its pid), or `nil` when lock holders cannot be listed on
    /// this system.
    static func holders(databasePath: String) -> [Holder]? {
        // A probe that fails (`stat()` of the `-shm` refused; a missing one is `nil` without an
        // error) answers as where locks cannot be listed: callers then name no reader, and a
        // reset or a closing TRUNCATE waits a few milliseconds at most for one it did not see.
        guard let locks = try? SnapshotDBInspector.probeLocks(databaseAt: databasePath) else { return nil }
        guard !locks.sources.isEmpty else { return nil }
        var holders: [Holder] = []
        for byte in locks.bytes {
            guard let slot = byte.lock.readSlot else { continue }
            for holder in byte.holders where holder.mode == .shared {
                guard let pid = holder.pid else { continue }
                holders.append(Holder(slot: slot, processID: pid, processName: holder.processName))
            }
        }
        return holders
    }
}
