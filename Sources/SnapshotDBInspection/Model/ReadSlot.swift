/// One of the five reader slots of the wal-index: its read mark, who holds it, what it pins.
public struct ReadSlot: Sendable, Codable, Equatable {
    /// The slot number, 0...4. Slot 0 readers read the database file and ignore the WAL.
    public var slot: Int
    /// The slot's read mark (`aReadMark[slot]`): the last WAL frame of the snapshot its readers
    /// see; `nil` when unused. A mark of a slot nobody holds is only a leftover.
    public var readMark: UInt32?
    /// The processes holding the slot's lock byte; empty when nobody reads through this slot.
    public var holders: [LockHolder]
    /// What the slot's readers hold back, when the slot is held (by a shared lock).
    public var pin: ReadPin?

    /// Whether some process holds the slot's lock.
    public var isHeld: Bool { !holders.isEmpty }

    enum CodingKeys: String, CodingKey {
        case slot
        case readMark
        case holders
        case pin
        case isHeld = "held"
    }

    /// Creates a slot description.
    public init(slot: Int, readMark: UInt32?, holders: [LockHolder], pin: ReadPin?) {
        self.slot = slot
        self.readMark = readMark
        self.holders = holders
        self.pin = pin
    }

    /// Decodes a slot; `held` is derived, not read.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.slot = try container.decode(Int.self, forKey: .slot)
        self.readMark = try container.decodeIfPresent(UInt32.self, forKey: .readMark)
        self.holders = try container.decode([LockHolder].self, forKey: .holders)
        self.pin = try container.decodeIfPresent(ReadPin.self, forKey: .pin)
    }

    /// Encodes the slot, including the derived `held` flag.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(slot, forKey: .slot)
        try container.encodeIfPresent(readMark, forKey: .readMark)
        try container.encode(holders, forKey: .holders)
        try container.encodeIfPresent(pin, forKey: .pin)
        try container.encode(isHeld, forKey: .isHeld)
    }
}

/// What the readers of a held slot hold back: the WAL frames newer than their snapshot, which
/// no checkpoint may copy into the database file while they read, and the WAL reset.
public struct ReadPin: Sendable, Codable, Equatable {
    /// The last WAL frame of the readers' snapshot. For slot 0, the backfilled frame count
    /// (`nBackfill`), since those readers see the database file as it was when they began.
    public var snapshotFrame: UInt32
    /// Whether the readers read the database file only (slot 0).
    public var readsDatabaseFileOnly: Bool
    /// Whether the readers stop every backfill, not only that of the frames after their snapshot:
    /// true for slot 0, since a checkpoint needs slot 0 exclusively to write the database file.
    public var blocksAllBackfill: Bool
    /// Committed frames after the snapshot (`mxFrame - snapshotFrame`).
    public var framesBehind: UInt32
    /// Commit frames (transactions) after the snapshot.
    public var commitFramesBehind: Int
    /// Bytes of the WAL after the snapshot (`framesBehind` × frame size).
    public var bytesBehind: Int64
    /// Whether the readers keep the WAL from being reset (every reader through the WAL does).
    public var preventsWALReset: Bool
    /// The SnapshotDB commit counter in the readers' snapshot, read from the pages as of
    /// `snapshotFrame`; `nil` when not a SnapshotDB file or not readable.
    public var snapshotCommit: UInt64?
    /// Newest commit counter minus `snapshotCommit`: the SnapshotDB commits the readers lag.
    public var commitsBehind: UInt64?
    /// Why `snapshotCommit` is missing, when it is.
    public var snapshotCommitUnavailableReason: String?

    enum CodingKeys: String, CodingKey {
        case snapshotFrame
        case readsDatabaseFileOnly
        case blocksAllBackfill
        case framesBehind
        case commitFramesBehind
        case bytesBehind
        case preventsWALReset
        case snapshotCommit
        case commitsBehind
        case snapshotCommitUnavailableReason
    }
}
