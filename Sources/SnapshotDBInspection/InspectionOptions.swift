/// How the inspection reads the database file and its `-shm`.
///
/// Reading a file means opening it, and POSIX record locks have a trap: when a process closes
/// *any* descriptor of a file, the kernel drops *every* lock that process holds on that file.
/// SQLite keeps its locks on the database file and on the `-shm` as POSIX locks, so a process
/// with live SQLite connections to a database must never open and close that database's files.
/// (The `-wal` carries no locks; it is always read through a transient descriptor.)
public enum FileAccess: String, Sendable, Codable, CaseIterable {
    /// Open, read, close. Only for a process that has no SQLite connection to the database,
    /// such as the `snapshotdb` tool.
    case transient
    /// Open each file once (per device and inode) and keep the read-only descriptor for the
    /// lifetime of the process. Safe in a process whose SQLite connections hold locks on the
    /// same files; the price is one descriptor per distinct database file and `-shm` inspected.
    case retainedDescriptors
}

/// How the lock holders of the `-shm` lock bytes are found.
public enum LockProbeMethod: String, Sendable, Codable, CaseIterable {
    /// Only `/proc/locks`, matched by the `-shm`'s device and inode from `stat()`. Never opens
    /// the `-shm`; lists every holder of a shared lock with its process id.
    case procLocks
    /// `/proc/locks` and, for each lock byte, `fcntl(F_OFD_GETLK)`. The extra probe needs a
    /// descriptor on the `-shm`, which is opened under the report's ``FileAccess``; it finds a
    /// holder even where `/proc/locks` is unavailable, but only one holder per byte.
    case procLocksAndOFDGetLock
}

/// What ``SnapshotDBInspector/inspect(databaseAt:options:)`` reads and how.
///
/// The default is safe inside a process that has SQLite connections on the inspected database
/// (``inProcess``); the `snapshotdb` tool uses ``separateProcess``.
public struct InspectionOptions: Sendable, Equatable {
    /// How the database file and `-shm` are opened.
    public var fileAccess: FileAccess
    /// How lock holders are found.
    public var lockProbe: LockProbeMethod
    /// Whether the report lists every frame of the `-wal` (``InspectionReport/frames``).
    public var includesFrames: Bool
    /// How many times the two copies of the wal-index header are read before the read is
    /// reported as torn (a writer was changing it); at least 1.
    public var walIndexReadAttempts: Int

    /// Creates options; the defaults are those of ``inProcess``.
    public init(
        fileAccess: FileAccess = .retainedDescriptors,
        lockProbe: LockProbeMethod = .procLocks,
        includesFrames: Bool = false,
        walIndexReadAttempts: Int = 5
    ) {
        self.fileAccess = fileAccess
        self.lockProbe = lockProbe
        self.includesFrames = includesFrames
        self.walIndexReadAttempts = max(1, walIndexReadAttempts)
    }

    /// For a process with live SQLite connections on the database (the checkpoint monitor):
    /// retained descriptors and `/proc/locks` only, so no lock of the process is ever dropped.
    public static let inProcess = InspectionOptions()

    /// For a separate process with no SQLite connection to the database (the `snapshotdb`
    /// tool): transient descriptors and both lock probes.
    public static let separateProcess = InspectionOptions(
        fileAccess: .transient, lockProbe: .procLocksAndOFDGetLock)
}
