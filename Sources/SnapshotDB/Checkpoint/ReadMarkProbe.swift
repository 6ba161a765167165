/// Lists which processes hold the read-mark lock bytes of the database's `-shm`.
///
/// A reader holds a shared lock on byte `123 + i` of the `-shm` while its snapshot uses read
/// mark `i`. The probe never opens the `-shm`: closing any descriptor on it would drop every
/// POSIX lock SQLite holds there for the whole process.
enum ReadMarkProbe {
    /// One holder of a read-mark lock.
    struct Holder: Hashable {
        var slot: Int
        var processID: Int32
        var processName: String?
    }

    /// The holders of the read marks of the database at `databasePath` (this process's own
    /// connections included), or `nil` when lock holders cannot be listed on this system.
    static func holders(databasePath: String) -> [Holder]? {
        nil
    }
}
