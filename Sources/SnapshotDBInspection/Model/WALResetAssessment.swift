/// Whether a `TRUNCATE` (or `RESTART`) checkpoint run now could reset the WAL, and if not, why.
///
/// A reset needs every committed frame copied back (a checkpoint can do that unless a reader
/// pins frames), no reader reading through the WAL (slots 1...4), and the writer and checkpoint
/// locks free.
public struct WALResetAssessment: Sendable, Codable, Equatable {
    /// Whether a `TRUNCATE` checkpoint run now would reset the WAL without waiting.
    public var isPossible: Bool
    /// Whether the WAL holds frames at all; when not, there is nothing to reset.
    public var isNeeded: Bool
    /// Committed frames not yet copied into the database file; a checkpoint copies them first.
    public var framesToCheckpoint: UInt32
    /// Everything that prevents the reset, most important first; empty when it is possible.
    public var blockers: [WALResetBlocker]

    enum CodingKeys: String, CodingKey {
        case isPossible = "possible"
        case isNeeded = "needed"
        case framesToCheckpoint
        case blockers
    }
}

/// One reason the WAL cannot be reset now.
public struct WALResetBlocker: Sendable, Codable, Equatable {
    /// The kind of obstacle.
    public enum Reason: String, Sendable, Codable {
        /// A reader on slot 1...4 reads through the WAL (and may pin frames after its snapshot).
        case readerPinned
        /// A slot-0 reader reads the database file, so no checkpoint may write it.
        case slotZeroReader
        /// A write transaction is in progress (the write lock is held).
        case writerActive
        /// Another checkpoint is running (the checkpoint lock is held).
        case checkpointRunning
        /// The wal-index is being rebuilt (the recover lock is held).
        case recoveryRunning
        /// The wal-index header could not be read consistently (torn or uninitialized).
        case walIndexUnreliable
    }

    /// The kind of obstacle.
    public var reason: Reason
    /// The reader slot involved, for reader blockers.
    public var slot: Int?
    /// The process ids involved, when known.
    public var pids: [Int32]
    /// A one-line explanation naming processes and frames.
    public var message: String

    enum CodingKeys: String, CodingKey {
        case reason
        case slot
        case pids
        case message
    }
}
