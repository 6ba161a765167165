/// How hard a checkpoint tries; the modes of `sqlite3_wal_checkpoint_v2`.
public enum CheckpointMode: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// Copy what no reader needs any more; never waits.
    case passive
    /// Wait for the writer, then copy everything; waits for readers to finish with old frames.
    case full
    /// Like `full`, then wait until the next writer can restart the WAL from the beginning.
    case restart
    /// Like `restart`, then truncate the WAL file to zero bytes.
    case truncate

    /// The mode's name.
    public var description: String { rawValue }
}

/// What a checkpoint did.
public struct CheckpointResult: Sendable, Hashable {
    /// The mode that ran.
    public let mode: CheckpointMode
    /// Frames in the WAL when the checkpoint finished (0 after a completed restart/truncate).
    public let walFrames: Int
    /// Frames of the WAL copied back into the database file.
    public let checkpointedFrames: Int
    /// Whether every frame was checkpointed (and, for restart/truncate, the WAL was reset).
    public let isComplete: Bool

    /// Creates a result; SnapshotDB creates these.
    public init(mode: CheckpointMode, walFrames: Int, checkpointedFrames: Int, isComplete: Bool) {
        self.mode = mode
        self.walFrames = walFrames
        self.checkpointedFrames = checkpointedFrames
        self.isComplete = isComplete
    }
}
