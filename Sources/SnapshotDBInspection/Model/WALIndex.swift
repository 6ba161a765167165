/// The wal-index header at the start of the `-shm` file (SQLite's `WalIndexHdr`), decoded.
///
/// SQLite keeps two copies of it (bytes 0..<48 and 48..<96) in the byte order of the machine;
/// a reader trusts it only when both copies agree and the checksum matches.
/// See "The WAL-Index Format" at https://www.sqlite.org/walformat.html.
public struct WALIndexHeader: Sendable, Codable, Equatable {
    /// The wal-index format version; 3007000.
    public var version: UInt32
    /// Incremented by every transaction that changes the wal-index.
    public var changeCounter: UInt32
    /// Whether SQLite has finished initializing the wal-index.
    public var isInitialized: Bool
    /// Whether the WAL checksums read big-endian words.
    public var bigEndianChecksums: Bool
    /// The page size in bytes.
    public var pageSize: Int
    /// `mxFrame`: the index of the last committed frame in the `-wal`; readers see frames up to it.
    public var maxFrame: UInt32
    /// The database size in pages after the last commit.
    public var pageCount: UInt32
    /// The cumulative checksum of frame `mxFrame`, first word.
    public var frameChecksum1: UInt32
    /// The cumulative checksum of frame `mxFrame`, second word.
    public var frameChecksum2: UInt32
    /// The salt-1 that the current `-wal` header carries (or will, after a reset).
    public var salt1: UInt32
    /// The salt-2 that the current `-wal` header carries (or will, after a reset).
    public var salt2: UInt32
    /// The header checksum, first word.
    public var checksum1: UInt32
    /// The header checksum, second word.
    public var checksum2: UInt32
    /// Whether the checksum matches the first 40 bytes of the header.
    public var isChecksumValid: Bool

    enum CodingKeys: String, CodingKey {
        case version
        case changeCounter = "iChange"
        case isInitialized = "initialized"
        case bigEndianChecksums
        case pageSize
        case maxFrame = "mxFrame"
        case pageCount = "nPage"
        case frameChecksum1
        case frameChecksum2
        case salt1
        case salt2
        case checksum1
        case checksum2
        case isChecksumValid = "checksumValid"
    }
}

/// The `-shm` file: the wal-index header, the checkpoint progress and the five read marks.
public struct WALIndexSummary: Sendable, Codable, Equatable {
    /// The number of reader slots (`WAL_NREADER`).
    public static let readSlotCount = 5
    /// The read mark value of an unused slot (`READMARK_NOT_USED`).
    public static let unusedReadMark: UInt32 = 0xffff_ffff

    /// The `-shm` path.
    public var path: String
    /// The file size in bytes.
    public var sizeBytes: Int64
    /// The first copy of the header (the one SQLite writes last and reads first).
    public var header: WALIndexHeader
    /// Whether both copies of the header were byte-for-byte equal in the last read.
    public var copiesAgree: Bool
    /// How many reads it took to see two equal copies (or how many were tried).
    public var readAttempts: Int
    /// `nBackfill`: frames already copied back into the database file (checkpointed).
    public var backfilledFrames: UInt32
    /// `nBackfillAttempted`: frames a checkpoint has tried to copy back.
    public var backfillAttemptedFrames: UInt32
    /// The five read marks (`aReadMark`): the `mxFrame` each reader slot's snapshot ends at;
    /// `nil` for an unused slot (0xffffffff). Slot 0 is always 0: its readers ignore the WAL.
    public var readMarks: [UInt32?]
    /// Whether the header's salts equal those of the `-wal` header; `nil` without a valid
    /// `-wal` header. They differ right after a WAL reset, before the next frame is written.
    public var saltsMatchWAL: Bool?

    /// Whether the header can be trusted: initialized, both copies equal, checksum valid.
    public var isReliable: Bool { copiesAgree && header.isInitialized && header.isChecksumValid }
    /// Frames committed to the WAL but not yet checkpointed (`mxFrame - nBackfill`).
    public var framesToCheckpoint: UInt32 {
        header.maxFrame > backfilledFrames ? header.maxFrame - backfilledFrames : 0
    }

    enum CodingKeys: String, CodingKey {
        case path
        case sizeBytes
        case header
        case copiesAgree
        case readAttempts
        case backfilledFrames = "nBackfill"
        case backfillAttemptedFrames = "nBackfillAttempted"
        case readMarks
        case saltsMatchWAL
        case isReliable = "reliable"
    }

    /// Creates a summary.
    public init(
        path: String, sizeBytes: Int64, header: WALIndexHeader, copiesAgree: Bool, readAttempts: Int,
        backfilledFrames: UInt32, backfillAttemptedFrames: UInt32, readMarks: [UInt32?], saltsMatchWAL: Bool?
    ) {
        self.path = path
        self.sizeBytes = sizeBytes
        self.header = header
        self.copiesAgree = copiesAgree
        self.readAttempts = readAttempts
        self.backfilledFrames = backfilledFrames
        self.backfillAttemptedFrames = backfillAttemptedFrames
        self.readMarks = readMarks
        self.saltsMatchWAL = saltsMatchWAL
    }

    /// Decodes a summary; `reliable` is derived, not read.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.path = try container.decode(String.self, forKey: .path)
        self.sizeBytes = try container.decode(Int64.self, forKey: .sizeBytes)
        self.header = try container.decode(WALIndexHeader.self, forKey: .header)
        self.copiesAgree = try container.decode(Bool.self, forKey: .copiesAgree)
        self.readAttempts = try container.decode(Int.self, forKey: .readAttempts)
        self.backfilledFrames = try container.decode(UInt32.self, forKey: .backfilledFrames)
        self.backfillAttemptedFrames = try container.decode(UInt32.self, forKey: .backfillAttemptedFrames)
        self.readMarks = try container.decode([UInt32?].self, forKey: .readMarks)
        self.saltsMatchWAL = try container.decodeIfPresent(Bool.self, forKey: .saltsMatchWAL)
    }

    /// Encodes the summary, including the derived `reliable` flag.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(path, forKey: .path)
        try container.encode(sizeBytes, forKey: .sizeBytes)
        try container.encode(header, forKey: .header)
        try container.encode(copiesAgree, forKey: .copiesAgree)
        try container.encode(readAttempts, forKey: .readAttempts)
        try container.encode(backfilledFrames, forKey: .backfilledFrames)
        try container.encode(backfillAttemptedFrames, forKey: .backfillAttemptedFrames)
        try container.encode(readMarks, forKey: .readMarks)
        try container.encodeIfPresent(saltsMatchWAL, forKey: .saltsMatchWAL)
        try container.encode(isReliable, forKey: .isReliable)
    }
}
