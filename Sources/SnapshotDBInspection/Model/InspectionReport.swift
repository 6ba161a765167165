/// Everything ``SnapshotDBInspector`` learned about one database and its `-wal`/`-shm`, read at
/// one moment without SQLite and without taking a lock.
///
/// The report is a best-effort snapshot: processes keep writing while the files are read, so the
/// `-wal`, the `-shm` and the lock table may each be a few frames apart.
///
/// Its `Codable` form is what `snapshotdb inspect --json` prints; the keys are stable (explicit
/// coding keys) and optional values that are unknown are left out.
public struct InspectionReport: Sendable, Codable, Equatable {
    /// The version of this report's JSON layout.
    public static let currentFormatVersion = 1

    /// The version of the JSON layout, ``currentFormatVersion``.
    public var formatVersion: Int
    /// The database file.
    public var database: DatabaseFileSummary
    /// The SnapshotDB view: whether it is a SnapshotDB file and its commit counter.
    public var snapshotDB: SnapshotDBSummary
    /// The `-wal` file; `nil` when it does not exist.
    public var wal: WALSummary?
    /// The `-shm` wal-index; `nil` when the `-shm` does not exist or is empty.
    public var walIndex: WALIndexSummary?
    /// The holders of the `-shm` lock bytes; `nil` when the `-shm` does not exist.
    public var locks: WALIndexLocks?
    /// The five reader slots, 0...4 (empty without a wal-index).
    public var readSlots: [ReadSlot]
    /// Whether the WAL could be reset now, and if not why.
    public var walReset: WALResetAssessment
    /// Every frame of the `-wal`, when ``InspectionOptions/includesFrames`` was set, except
    /// the stale frames whose header is all zeros (space SnapshotDB's VFS preallocated, holes of
    /// a sparse file): those are listed as ranges in ``zeroFilledFrameRanges``, so that a huge
    /// sparse `-wal` does not make a list of millions of empty frames.
    public var frames: [WALFrame]?
    /// The zero-filled stale frames, as ascending ranges of frame numbers, when
    /// ``InspectionOptions/includesFrames`` was set.
    public var zeroFilledFrameRanges: [WALFrameRange]?

    /// The committed frame count the report uses as the newest snapshot: the wal-index's
    /// `mxFrame` when it is reliable, else the valid prefix's last commit frame.
    public var committedFrames: UInt32
    /// The frames copied back into the database file (`nBackfill`), 0 without a wal-index.
    public var checkpointedFrames: UInt32

    /// Committed frames not yet checkpointed: the checkpoint lag.
    public var framesToCheckpoint: UInt32 { committedFrames - min(checkpointedFrames, committedFrames) }
    /// The held reader slots, oldest snapshot first.
    public var pinningSlots: [ReadSlot] {
        readSlots.filter { $0.pin != nil }.sorted {
            ($0.pin?.snapshotFrame ?? 0) < ($1.pin?.snapshotFrame ?? 0)
        }
    }

    enum CodingKeys: String, CodingKey {
        case formatVersion
        case database
        case snapshotDB
        case wal
        case walIndex
        case locks
        case readSlots
        case walReset
        case frames
        case zeroFilledFrameRanges
        case committedFrames
        case checkpointedFrames
    }
}

/// The database file and its header.
public struct DatabaseFileSummary: Sendable, Codable, Equatable {
    /// The database path as given.
    public var path: String
    /// The database file size in bytes.
    public var sizeBytes: Int64
    /// The header of page 1 as of the newest commit (from the WAL when page 1 is there).
    public var header: DatabaseHeader
    /// The WAL frame that header was read from; `nil` when it came from the database file.
    public var headerWALFrame: UInt32?

    /// The database size in bytes as of the newest commit (page count × page size).
    public var committedSizeBytes: Int64 { Int64(header.pageCount) * Int64(header.pageSize) }

    enum CodingKeys: String, CodingKey {
        case path
        case sizeBytes
        case header
        case headerWALFrame
    }
}

/// The SnapshotDB layer of a database: its marks and its commit counter.
public struct SnapshotDBSummary: Sendable, Codable, Equatable {
    /// Whether `application_id` is 0x536E4442 ("SnDB").
    public var isSnapshotDB: Bool
    /// `PRAGMA user_version`: the SnapshotDB schema version.
    public var schemaVersion: Int32
    /// The newest committed commit counter, read from the pages; `nil` when unavailable.
    public var commitCounter: UInt64?
    /// Why ``commitCounter`` is missing, when it is.
    public var commitCounterUnavailableReason: String?
    /// The durable history (schema 3 and later); `nil` when the file has none or it could not
    /// be read.
    public var history: HistorySummary?

    enum CodingKeys: String, CodingKey {
        case isSnapshotDB
        case schemaVersion
        case commitCounter
        case commitCounterUnavailableReason
        case history
    }
}

/// The size of a SnapshotDB file's durable history and its named consumers.
public struct HistorySummary: Sendable, Codable, Equatable {
    /// How many rows the history holds.
    public var rows: Int
    /// About how many bytes they take.
    public var bytes: Int
    /// Changesets are known for the commits after this one.
    public var oldestCommit: UInt64
    /// The named consumers, each with its position and how many commits it is behind.
    public var consumers: [ConsumerLag]

    enum CodingKeys: String, CodingKey {
        case rows
        case bytes
        case oldestCommit
        case consumers
    }
}

/// A named consumer's position and lag.
public struct ConsumerLag: Sendable, Codable, Equatable {
    /// The consumer's name.
    public var name: String
    /// The commit it acknowledged last.
    public var position: UInt64
    /// How many commits it is behind the commit counter.
    public var commitsBehind: UInt64
    /// Whether it was expired by the retention bound.
    public var isExpired: Bool

    enum CodingKeys: String, CodingKey {
        case name
        case position
        case commitsBehind
        case isExpired
    }
}
