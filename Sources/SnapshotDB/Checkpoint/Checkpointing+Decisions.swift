/// Who keeps the WAL, as a mode with its own decisions: SnapshotDB's checkpointer
/// (`.automatic`), or a replicator that reads the WAL and resets it itself
/// (`.external(replicator:)`: Litestream, configured, or recognized at open or before the first
/// reset). The code that differs by it asks it what to do, not whether a replicator is there.
extension Configuration.Checkpointing {
    /// Whether SnapshotDB resets the WAL (TRUNCATE when nothing pins it): not when a replicator
    /// keeps it, whose reader would be cut off.
    var resetsWAL: Bool { replicator == nil }

    /// Whether writers of several processes take turns (``WriterTurns``): not while a replicator
    /// keeps the WAL. Litestream takes SQLite's write lock for its own checkpoints through the
    /// busy handler, and turns leave it fewer moments to. (An experiment can force them on:
    /// ``Experiments/writerTurnsWhileReplicating``.)
    var writersTakeTurns: Bool { replicator == nil || Experiments.writerTurnsWhileReplicating }

    /// Whether the last handle to close checkpoints (SQLite's checkpoint-on-close): it would
    /// reset a WAL the replicator keeps.
    var checkpointsOnClose: Bool { replicator == nil }

    /// The checkpoint a database runs as it closes: TRUNCATE when SnapshotDB keeps the WAL and
    /// no other process reads it, PASSIVE otherwise (a reader of another process would make a
    /// TRUNCATE wait, and hold every other writer back meanwhile).
    func closingCheckpoint(withForeignReaders foreignReaders: Bool) -> CheckpointMode {
        resetsWAL && !foreignReaders ? .truncate : .passive
    }

    /// Whether a checkpoint that no reader of this process explains, twice in a row, is news:
    /// not when a replicator keeps the WAL, whose reader stops every pass by design.
    var reportsUnexplainedStalls: Bool { replicator == nil }

    /// Whether the process named `processName` is the replicator, whose reader is expected.
    func isReplicator(processName: String?) -> Bool { replicator != nil && processName == replicator }
}
