internal import CSnapshotDBVFS

internal import struct Synchronization.Atomic

/// Switches for experiments that compare SnapshotDB with one of its own mechanisms turned off
/// or forced on, for the whole process. Not an API to configure a database with: the defaults
/// are the behaviour the manual documents, and nothing but an experiment should change them.
///
/// `Scripts/torn-replica-experiment.py` uses them (through `snapshotdb-stress replica-writer`)
/// to tell whether the torn Litestream replicas the stress run saw came from SnapshotDB's WAL
/// preallocation or its writer turns (Benchmarks/README.md, "Torn Litestream replicas").
@_spi(Experiments)
public enum Experiments {
    private static let turnsWhileReplicating = Atomic<Bool>(false)

    /// Whether the VFS zero-fills each WAL ahead of its frames (`snapshotdb_vfs.c`), for WALs
    /// written from now on in this process. On by default.
    public static func setWALPreallocation(_ enabled: Bool) {
        snapshotdb_vfs_set_preallocation(enabled ? 1 : 0)
    }

    /// Whether writers of several processes take turns even while a replicator keeps the WAL,
    /// as every multi-process writer did before the stress run saw torn replicas
    /// (``Configuration/writerTurns`` must be on too). Off by default: see
    /// `Configuration.Checkpointing.writersTakeTurns`.
    public static var writerTurnsWhileReplicating: Bool {
        get { turnsWhileReplicating.load(ordering: .relaxed) }
        set { turnsWhileReplicating.store(newValue, ordering: .relaxed) }
    }
}
