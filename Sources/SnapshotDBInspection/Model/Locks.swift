/// A lock byte of the `-shm` file, as SQLite's unix VFS uses them.
///
/// The value is the byte offset in the `-shm` (`WALINDEX_LOCK_OFFSET` is 120; the dead-man
/// switch follows the eight WAL locks at 128).
public enum WALIndexLock: Int, Sendable, Codable, CaseIterable, CustomStringConvertible {
    /// `WAL_WRITE_LOCK`: held exclusively by the one writer.
    case write = 120
    /// `WAL_CKPT_LOCK`: held exclusively by a running checkpoint.
    case checkpoint = 121
    /// `WAL_RECOVER_LOCK`: held exclusively while the wal-index is rebuilt.
    case recover = 122
    /// `WAL_READ_LOCK(0)`: shared by readers that read the database file and ignore the WAL.
    case read0 = 123
    /// `WAL_READ_LOCK(1)`: shared by readers whose snapshot ends at read mark 1.
    case read1 = 124
    /// `WAL_READ_LOCK(2)`: shared by readers whose snapshot ends at read mark 2.
    case read2 = 125
    /// `WAL_READ_LOCK(3)`: shared by readers whose snapshot ends at read mark 3.
    case read3 = 126
    /// `WAL_READ_LOCK(4)`: shared by readers whose snapshot ends at read mark 4.
    case read4 = 127
    /// The dead-man switch (`UNIX_SHM_DMS`): shared by every process that has the database open.
    case deadManSwitch = 128

    /// The lock of reader slot `slot` (0...4).
    public static func read(slot: Int) -> WALIndexLock? {
        (0..<5).contains(slot) ? WALIndexLock(rawValue: WALIndexLock.read0.rawValue + slot) : nil
    }

    /// The reader slot (0...4) this byte locks, or `nil` for the other locks.
    public var readSlot: Int? {
        (123...127).contains(rawValue) ? rawValue - 123 : nil
    }

    /// The lock's name: `write`, `checkpoint`, `recover`, `read0`...`read4`, `dms`.
    public var description: String {
        switch self {
        case .write: "write"
        case .checkpoint: "checkpoint"
        case .recover: "recover"
        case .read0: "read0"
        case .read1: "read1"
        case .read2: "read2"
        case .read3: "read3"
        case .read4: "read4"
        case .deadManSwitch: "dms"
        }
    }
}

/// A process (or open file description) holding a lock on a `-shm` lock byte.
public struct LockHolder: Sendable, Codable, Hashable {
    /// Whether the lock excludes others.
    public enum Mode: String, Sendable, Codable {
        /// A read (shared) lock; many holders can share it.
        case shared
        /// A write (exclusive) lock.
        case exclusive
    }

    /// The kind of lock.
    public enum Kind: String, Sendable, Codable {
        /// A POSIX record lock (`F_SETLK`), owned by a process: what SQLite uses.
        case posix
        /// An open-file-description lock (`F_OFD_SETLK`), owned by a descriptor; no process id.
        case openFileDescription
    }

    /// How the holder was found.
    public enum Source: String, Sendable, Codable {
        /// Listed in `/proc/locks`.
        case procLocks
        /// Reported by `fcntl(F_OFD_GETLK)`.
        case ofdGetLock
    }

    /// The holder's process id (in the inspecting process's pid namespace); `nil` when unknown,
    /// as for open-file-description locks.
    public var pid: Int32?
    /// The holder's command name from `/proc/PID/comm`, when readable.
    public var processName: String?
    /// Shared or exclusive.
    public var mode: Mode
    /// POSIX or open-file-description lock.
    public var kind: Kind
    /// How the holder was found.
    public var source: Source

    enum CodingKeys: String, CodingKey {
        case pid
        case processName
        case mode
        case kind
        case source
    }

    /// Creates a holder description.
    public init(pid: Int32?, processName: String?, mode: Mode, kind: Kind, source: Source) {
        self.pid = pid
        self.processName = processName
        self.mode = mode
        self.kind = kind
        self.source = source
    }

    /// Whether the holder is Litestream: the replicator a SnapshotDB file leaves its WAL to,
    /// whose reader is expected (SnapshotDB's `Configuration.Checkpointing.external`).
    public var isReplicator: Bool { processName == "litestream" }

    /// `1234 (python3)`, `1234 (litestream, the replicator)`; without a pid, `an unknown
    /// process (openFileDescription lock)`.
    public var displayName: String {
        guard let pid else { return "an unknown process (\(kind.rawValue) lock)" }
        return processName.map { "\(pid) (\($0)\(isReplicator ? ", the replicator" : ""))" } ?? "\(pid)"
    }
}

/// The holders of one `-shm` lock byte.
public struct LockByteState: Sendable, Codable, Equatable {
    /// Which lock.
    public var lock: WALIndexLock
    /// Every holder found; empty when the byte is free.
    public var holders: [LockHolder]

    enum CodingKeys: String, CodingKey {
        case lock = "offset"
        case name
        case holders
    }

    /// Creates a state.
    public init(lock: WALIndexLock, holders: [LockHolder]) {
        self.lock = lock
        self.holders = holders
    }

    /// Decodes a state from its `offset` (the name is informative only).
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.lock = try container.decode(WALIndexLock.self, forKey: .lock)
        self.holders = try container.decode([LockHolder].self, forKey: .holders)
    }

    /// Encodes `offset`, `name` and `holders`.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(lock, forKey: .lock)
        try container.encode(lock.description, forKey: .name)
        try container.encode(holders, forKey: .holders)
    }
}

/// Who holds which lock byte of a `-shm` file, at the moment of the probe.
public struct WALIndexLocks: Sendable, Codable, Equatable {
    /// The `-shm` path probed.
    public var path: String
    /// The probes that ran.
    public var sources: [LockHolder.Source]
    /// The nine lock bytes, in offset order, with their holders.
    public var bytes: [LockByteState]

    enum CodingKeys: String, CodingKey {
        case path
        case sources
        case bytes
    }

    /// Creates a lock table.
    public init(path: String, sources: [LockHolder.Source], bytes: [LockByteState]) {
        self.path = path
        self.sources = sources
        self.bytes = bytes
    }

    /// The holders of `lock`; empty when it is free.
    public func holders(of lock: WALIndexLock) -> [LockHolder] {
        bytes.first { $0.lock == lock }?.holders ?? []
    }

    /// The processes that have the database open: the holders of the dead-man switch.
    public var connectedProcesses: [LockHolder] { holders(of: .deadManSwitch) }
}
