/// The 32-byte header of a `-wal` file, decoded.
///
/// See "The WAL File Format" at https://www.sqlite.org/fileformat2.html#walformat.
public struct WALHeader: Sendable, Codable, Equatable {
    /// 0x377f0682 (checksums over little-endian words) or 0x377f0683 (big-endian words).
    public var magic: UInt32
    /// Whether the checksums read the content as big-endian 32-bit words.
    public var bigEndianChecksums: Bool { magic & 1 == 1 }
    /// The WAL format version; always 3007000.
    public var formatVersion: UInt32
    /// The database page size in bytes.
    public var pageSize: Int
    /// The checkpoint sequence number, incremented by each WAL reset.
    public var checkpointSequence: UInt32
    /// Salt-1, incremented by each WAL reset; every valid frame repeats it.
    public var salt1: UInt32
    /// Salt-2, a fresh random number at each WAL reset; every valid frame repeats it.
    public var salt2: UInt32
    /// The first word of the header checksum (the seed of the frame checksum chain).
    public var checksum1: UInt32
    /// The second word of the header checksum.
    public var checksum2: UInt32
    /// Whether the checksum matches the first 24 bytes. SQLite ignores a WAL whose header
    /// checksum or page size is wrong, as if it were empty.
    public var isValid: Bool

    enum CodingKeys: String, CodingKey {
        case magic
        case formatVersion
        case pageSize
        case checkpointSequence
        case salt1
        case salt2
        case checksum1
        case checksum2
        case isValid = "valid"
    }
}

/// The `-wal` file: its header and how its frames divide into valid, committed and stale ones.
public struct WALSummary: Sendable, Codable, Equatable {
    /// The `-wal` path.
    public var path: String
    /// The file size in bytes.
    public var sizeBytes: Int64
    /// The header; `nil` for an empty (0-byte) `-wal`.
    public var header: WALHeader?
    /// Bytes per frame: the 24-byte frame header plus one page; 0 without a valid header.
    public var frameSizeBytes: Int
    /// Complete frames the file holds, valid or not.
    public var frameSlots: Int
    /// Frames of the valid prefix: salts equal to the header's, checksum chain intact.
    public var validFrames: Int
    /// Commit frames (frames that end a transaction) in the valid prefix.
    public var commitFrames: Int
    /// The 1-based index of the last commit frame of the valid prefix; 0 when there is none.
    public var lastCommitFrame: UInt32
    /// Valid frames after the last commit frame: a transaction being written, or one a crashed
    /// writer never finished. Readers never see them.
    public var uncommittedFrames: Int
    /// Frames past the valid prefix: the stale tail left by an earlier WAL generation (after a
    /// reset new frames overwrite the file from the start) or damaged frames.
    public var staleFrames: Int
    /// Stale frames whose salts differ from the header's: frames of an earlier WAL generation.
    /// Zero-filled frames are not counted here.
    public var staleFramesWithOtherSalts: Int
    /// Stale frames whose header is all zeros (page 0, salts 0): space SnapshotDB's VFS
    /// preallocated past the frames under `synchronous = FULL`, not yet written.
    public var zeroFilledFrames: Int
    /// Bytes at the end of the file that do not make a complete frame.
    public var trailingPartialBytes: Int

    enum CodingKeys: String, CodingKey {
        case path
        case sizeBytes
        case header
        case frameSizeBytes
        case frameSlots
        case validFrames
        case commitFrames
        case lastCommitFrame
        case uncommittedFrames
        case staleFrames
        case staleFramesWithOtherSalts
        case zeroFilledFrames
        case trailingPartialBytes
    }
}

/// One frame of the `-wal` file.
public struct WALFrame: Sendable, Codable, Equatable {
    /// Where a frame stands.
    public enum Status: String, Sendable, Codable {
        /// In the valid prefix, at or before the last commit frame: readers may see it.
        case committed
        /// In the valid prefix, after the last commit frame: no reader sees it.
        case uncommitted
        /// Past the valid prefix (other salts or a broken checksum chain): ignored by SQLite.
        case stale
    }

    /// The 1-based frame number (SQLite's frame index, as in `mxFrame` and read marks).
    public var index: UInt32
    /// The byte offset of the frame header in the `-wal`.
    public var offset: Int64
    /// The database page the frame holds.
    public var pageNumber: UInt32
    /// For a commit frame, the database size in pages after the commit; `nil` otherwise.
    public var commitPageCount: UInt32?
    /// The frame's salt-1.
    public var salt1: UInt32
    /// The frame's salt-2.
    public var salt2: UInt32
    /// Where the frame stands.
    public var status: Status
    /// Whether the frame has been copied back into the database file (index ≤ `nBackfill`).
    public var isCheckpointed: Bool

    enum CodingKeys: String, CodingKey {
        case index
        case offset
        case pageNumber
        case commitPageCount
        case salt1
        case salt2
        case status
        case isCheckpointed = "checkpointed"
    }
}

/// A run of consecutive WAL frames, by 1-based frame number.
public struct WALFrameRange: Sendable, Codable, Equatable {
    /// The first frame of the run.
    public var first: UInt32
    /// The last frame of the run (equal to `first` for a single frame).
    public var last: UInt32
    /// How many frames the run holds.
    public var count: Int { Int(last - first) + 1 }
}
