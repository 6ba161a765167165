internal import Dispatch
internal import Synchronization

/// Runs the database's checkpoints on its own SQLite handle, off the committing threads.
///
/// SQLite's auto-checkpoint is off on every connection; instead every commit reports the WAL
/// size through `sqlite3_wal_hook`, and past ``Configuration/checkpointThresholdPages`` a
/// PASSIVE checkpoint is queued here. Requests are merged: at most one runs and at most one
/// more is queued, however many commits ask.
final class Checkpointer: Sendable {
    private struct State {
        var handle: SQLiteHandle?
        var isQueued = false
        var database = WeakDatabase?.none
    }

    private let queue = DispatchQueue(label: "snapshotdb.checkpoint")
    private let state: Mutex<State>
    let configuration: Configuration
    let path: String

    init(path: String, configuration: Configuration, handle: sending SQLiteHandle) {
        self.path = path
        self.configuration = configuration
        self.state = Mutex(State(handle: handle))
    }

    var database: WeakDatabase? {
        get { state.withLock { $0.database } }
        set { state.withLock { $0.database = newValue } }
    }

    /// Called on the committing thread after each commit with the WAL's size in pages.
    func walDidGrow(pages: Int) {
        guard pages >= configuration.checkpointThresholdPages else { return }
        requestCheckpoint()
    }

    /// Queues one PASSIVE checkpoint unless one is already queued.
    func requestCheckpoint() {
        let shouldQueue = state.withLock { state in
            defer { state.isQueued = true }
            return !state.isQueued
        }
        guard shouldQueue else { return }
        queue.async { [self] in
            state.withLock { $0.isQueued = false }
            _ = try? run(.passive)
        }
    }

    /// Runs a checkpoint now on the checkpoint handle.
    func run(_ mode: CheckpointMode) throws(DatabaseError) -> CheckpointResult {
        try state.withLock { state throws(DatabaseError) in
            guard let handle = state.handle else {
                throw DatabaseError(.misuse, "the database is closed")
            }
            return try handle.checkpoint(mode)
        }
    }

    /// At open: a WAL left behind by an earlier run is checkpointed and truncated when nothing
    /// pins it.
    func checkpointAtOpen() {
        _ = try? run(.truncate)
    }

    /// Closes the checkpoint handle after any queued checkpoint.
    func close() {
        queue.sync {}
        state.withLock { $0.handle = nil }
    }
}
