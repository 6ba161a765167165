/// The state of the WAL and of the snapshots that pin it, as ``Database/checkpointStatus()``
/// reports it.
///
/// ```swift
/// let status = db.checkpointStatus()
/// for pin in status.laggingSnapshots {
///     print("\(pin.connectionName) is \(pin.commitsBehind) commits behind, pins \(pin.pinnedBytes) bytes")
/// }
/// ```
public struct CheckpointStatus: Sendable, Hashable {
    /// The bytes of the WAL in use: its header and every frame not yet reset, whether
    /// checkpointed or not; 0 for an empty WAL.
    public let walBytes: Int64
    /// The size of the `-wal` file on disk, which can exceed ``walBytes`` after a restart that
    /// reuses the file.
    public let walFileBytes: Int64
    /// The frames in the WAL, as this process last saw them (after its own commits and
    /// checkpoints).
    public let walFrames: Int
    /// The frames the last checkpoint copied back into the database file.
    public let checkpointedFrames: Int
    /// The database page size; a WAL frame is this plus a 24-byte frame header.
    public let pageSize: Int
    /// The newest commit this process knows of.
    public let latestCommit: UInt64
    /// Every connection of this process that holds a read snapshot (a bookmark or an open
    /// transaction), oldest snapshot first.
    public let snapshots: [SnapshotPin]
    /// Readers in other processes, found through the lock bytes of the `-shm`; empty where
    /// lock holders cannot be listed.
    public let externalReaders: [ExternalReader]
    /// WAL bytes the last checkpoint could not copy that no snapshot of this process explains:
    /// a reader in another process pins them (see ``externalReaders``).
    public let externallyPinnedBytes: Int64
    /// Whether the last checkpoint stopped short of the end of the WAL because snapshots pin it.
    public let isStalled: Bool
    /// The size of the `-wal` file found when the database was opened (0 when there was none).
    public let walBytesAtOpen: Int64

    /// Creates a status; SnapshotDB creates these.
    public init(
        walBytes: Int64, walFileBytes: Int64, walFrames: Int, checkpointedFrames: Int, pageSize: Int,
        latestCommit: UInt64, snapshots: [SnapshotPin], externalReaders: [ExternalReader],
        externallyPinnedBytes: Int64, isStalled: Bool, walBytesAtOpen: Int64
    ) {
        self.walBytes = walBytes
        self.walFileBytes = walFileBytes
        self.walFrames = walFrames
        self.checkpointedFrames = checkpointedFrames
        self.pageSize = pageSize
        self.latestCommit = latestCommit
        self.snapshots = snapshots
        self.externalReaders = externalReaders
        self.externallyPinnedBytes = externallyPinnedBytes
        self.isStalled = isStalled
        self.walBytesAtOpen = walBytesAtOpen
    }

    /// The snapshots older than the newest commit: the connections that keep the WAL from
    /// being checkpointed and reset, oldest first.
    public var laggingSnapshots: [SnapshotPin] { snapshots.filter { $0.commitsBehind > 0 } }

    /// The oldest snapshot held by a connection of this process, if any.
    public var oldestSnapshot: SnapshotPin? { snapshots.first }
}

/// A read snapshot held by a connection of this process, and what it costs the WAL.
public struct SnapshotPin: Sendable, Hashable {
    /// The name the connection was created with.
    public let connectionName: String
    /// The commit the snapshot sees.
    public let commit: UInt64
    /// How many commits were made after the snapshot's commit.
    public let commitsBehind: UInt64
    /// How long the snapshot has been held, in seconds.
    public let secondsHeld: Double
    /// Whether the snapshot is a bookmark (a long-lived read transaction) rather than a
    /// transaction in progress.
    public let isBookmark: Bool
    /// The WAL bytes written after the snapshot's commit, which cannot be checkpointed while it
    /// is held.
    public let pinnedBytes: Int64

    /// Creates a pin; SnapshotDB creates these.
    public init(
        connectionName: String, commit: UInt64, commitsBehind: UInt64, secondsHeld: Double,
        isBookmark: Bool, pinnedBytes: Int64
    ) {
        self.connectionName = connectionName
        self.commit = commit
        self.commitsBehind = commitsBehind
        self.secondsHeld = secondsHeld
        self.isBookmark = isBookmark
        self.pinnedBytes = pinnedBytes
    }
}

/// A read transaction of another process on the database, found through the read-mark lock
/// bytes of the `-shm` file.
public struct ExternalReader: Sendable, Hashable {
    /// The process id of the reader, in this process's pid namespace.
    public let processID: Int32
    /// The reader's command name (`/proc/PID/comm`), when readable.
    public let processName: String?
    /// The read-mark slot (0...4) the reader holds; slot 0 readers read the database file only.
    public let readMarkSlot: Int
    /// Whether the reader is the external replicator the WAL is left to
    /// (``Configuration/Checkpointing/external(replicator:)``): expected, and never named as a
    /// laggard in the monitor's warnings.
    public let isReplicator: Bool

    /// Creates a reader description; SnapshotDB creates these.
    public init(processID: Int32, processName: String?, readMarkSlot: Int, isReplicator: Bool = false) {
        self.processID = processID
        self.processName = processName
        self.readMarkSlot = readMarkSlot
        self.isReplicator = isReplicator
    }
}

/// A change in the checkpoint monitor's view of the WAL, delivered by
/// ``Database/checkpointEvents()``.
public enum CheckpointEvent: Sendable, Hashable {
    /// A checkpoint could not copy the whole WAL because snapshots pin it; sent when the
    /// monitor enters that state with a culprit (a snapshot behind the newest commit that was
    /// held before the checkpoint started, or a reader of another process), or when the stall
    /// persists to the next checkpoint. Brief stalls caused by ordinary reads stay quiet.
    case checkpointStalled(CheckpointStatus)
    /// The WAL is past ``Configuration/walWarningBytes`` and cannot be checkpointed; the
    /// status names the culprits. Throttled like the logged warning: once, then again when the
    /// WAL doubled or after ``Configuration/warningInterval``.
    case walOverWarning(CheckpointStatus)
    /// After a stall or a warning, a checkpoint completed and the WAL is under the warning size
    /// again.
    case recovered(CheckpointStatus)

    /// The status the event carries.
    public var status: CheckpointStatus {
        switch self {
        case .checkpointStalled(let status), .walOverWarning(let status), .recovered(let status):
            return status
        }
    }
}
