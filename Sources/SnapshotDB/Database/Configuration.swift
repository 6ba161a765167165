internal import Foundation
public import Logging
public import Metrics

/// How a ``Database`` opens its file and behaves; every property has a sensible default.
///
/// ```swift
/// var configuration = Configuration()
/// configuration.synchronous = .normal        // faster commits, may lose the last ones on power loss
/// configuration.walWarningBytes = 64 << 20   // warn when lagging readers pin 64 MiB of WAL
/// let db = try Database(path: "app.sqlite", configuration: configuration)
/// ```
///
/// The database checks the numbers when it opens: a count, size or duration below zero (or a
/// ``fileMode`` past `0o7777`) is refused with ``DatabaseError/Code/misuse``, naming the
/// property and its range. The largest values mean "never" or "no limit".
public struct Configuration: Sendable {
    /// When SQLite syncs the WAL to stable storage.
    public enum Synchronous: Sendable, Hashable {
        /// Sync at every commit: a committed transaction survives power loss (the default).
        case full
        /// Sync at checkpoints only: commits stay atomic and consistent, but the last ones
        /// before a power loss (not a process crash) may be rolled back.
        case normal
    }

    /// When SQLite syncs the WAL; `.full` by default.
    public var synchronous: Synchronous = .full

    /// Whether opening a path where no file is creates a new database there (`true` by default,
    /// as SQLite's `SQLITE_OPEN_CREATE`). With `false`, ``Database/init(path:configuration:)``
    /// throws `cannotOpen` naming the path and creates nothing (no file, no `-wal`, no `-shm`):
    /// a mistyped path, or a restore that was not written, is an error instead of a new, empty
    /// database. (An existing empty file is still made a database.)
    public var createIfMissing = true

    /// Whether the database is opened for reading only (`false` by default, as GRDB's
    /// `readonly`): the file must exist and already be a SnapshotDB database, every handle is
    /// opened with SQLite's `SQLITE_OPEN_READONLY`, and every write (a read-write transaction,
    /// a registration that would build, a consumer's acknowledgement, `checkpoint`, `vacuum`,
    /// `purgeHistory`) throws `readOnly`. The open changes no byte of the database or its `-wal`:
    /// nothing is checkpointed, at the open, while open, or at the close (SQLite may still
    /// create or update the `-shm`, the shared memory that readers coordinate through). Use it
    /// to check a restore without writing to it.
    ///
    /// Extensions the file holds are read as a read replica reads them: registering one adopts
    /// the file's tables when they are of the same kind and version, and throws `readOnly`
    /// when they would have to be built. Commits of other processes are followed as usual,
    /// but writes by foreign clients (the `sqlite3` shell) are not numbered here until a
    /// writable open seals them.
    public var readOnly = false

    /// The permission bits of a newly created database file (`-wal` and `-shm` inherit them);
    /// owner read/write only (`0o600`) by default. An existing file keeps its mode.
    public var fileMode: UInt16 = 0o600

    /// How long a connection waits for a lock held by another *process* before failing with
    /// ``DatabaseError/Code/busy``. Connections of the same `Database` never wait on each other
    /// except writers, which queue on the database's writer lock.
    ///
    /// SQLite counts the timeout in 32-bit milliseconds: a longer one waits about 24 days (and
    /// so does a checkpoint waiting for this process's writer lock), a negative one does not
    /// wait.
    public var busyTimeout: Duration = .seconds(5)

    /// Whether the writers of this process take turns with the writers of other SnapshotDB
    /// processes on the same file (on by default; Linux only, elsewhere there are no turns).
    ///
    /// SQLite lets whichever writer finds its write lock free take it: a writer of another
    /// process, asleep in SQLite's busy handler (up to 100 ms between tries), mostly wakes to a
    /// lock taken again, and a process that commits without pause can keep the others out for
    /// seconds, past ``busyTimeout``. With turns, a writer that waits is woken the moment the
    /// turn is free, and a process that has just committed lets a writer that waited go first.
    /// Under the stress run's saturated load across three processes, the longest commit fell
    /// from 2.2–7.2 s to 0.29–0.93 s, and total throughput to 0.73× (each process's
    /// transactions now interleave with the others', and each starts with what they changed).
    /// A process that writes alone pays nothing: it takes turns only once it sees commits of
    /// another process (see <doc:History>).
    ///
    /// Turn them off for the most commits per second from processes that all write flat out
    /// and can wait. Foreign clients (the `sqlite3` shell) take no turns either way. While
    /// Litestream replicates the file (``Checkpointing/external(replicator:)``, or found at the
    /// open), there are no turns: Litestream takes SQLite's write lock for its own checkpoints
    /// through the busy handler, and turns leave it fewer moments to get it. (The stress run once
    /// saw replicas that Litestream tore in 4 of 29 runs with turns, 1 of about 74 without; an
    /// experiment with one driver for every arm then found none in 50 runs with turns forced
    /// on, and no arm measurably worse than plain SQLite: see <doc:Litestream>.)
    public var writerTurns: Bool = true

    /// ``busyTimeout`` in the milliseconds `sqlite3_busy_timeout` takes, clamped to its range.
    var busyTimeoutMilliseconds: Int32 { busyTimeout.sqliteMilliseconds }

    /// How long SQLite may work inside one read transaction's closure before it is stopped with
    /// ``DatabaseError/Code/interrupted``; `nil` (the default) for no limit. It bounds queries
    /// whose cost comes from their input (a secondary index fragment, a full-text search); the
    /// transaction, the connection and its bookmark are unharmed by the interrupt. It counts
    /// SQLite's work only, checked every thousand or so virtual-machine steps, not time spent
    /// in Swift between statements. ``Connection/read(timeLimit:_:)-7pp46`` sets it per read.
    /// Read-write transactions are never interrupted: a write commits or rolls back as its
    /// closure decides.
    public var readTimeLimit: Duration? = nil

    /// How many values each connection keeps decoded in memory; `0` turns the cache off.
    public var cacheLimit: Int = 1_000

    /// How many changesets each `Database.changes()` subscriber may have buffered; a subscriber
    /// that falls further behind has its stream finished (it never silently misses a commit).
    public var changesBufferLimit: Int = 10_000

    /// Who resets the WAL. ``Checkpointing/automatic`` (the default): SnapshotDB's checkpointer
    /// copies the WAL back and resets it (RESTART, TRUNCATE) when nothing pins it.
    /// ``Checkpointing/external(replicator:)``: an external replicator (Litestream) reads the
    /// WAL and resets it on its own schedule; SnapshotDB runs PASSIVE checkpoints only, and
    /// nothing it runs (its checkpointer, ``Database/close()``, ``Database/vacuum()``) resets
    /// the WAL behind the replicator.
    ///
    /// A file that Litestream replicates is recognized without configuration (its
    /// `_litestream_seq` table is in the file) and gets `.external(replicator: "litestream")`,
    /// with one log line at open; ``Database/checkpointing`` says which mode is in force.
    public var checkpointing: Checkpointing = .automatic

    /// Who resets the WAL (see ``Configuration/checkpointing``).
    public enum Checkpointing: Sendable, Hashable {
        /// SnapshotDB's checkpointer resets the WAL when nothing pins it.
        case automatic
        /// A replicator (its process name, as `/proc/PID/comm` gives it: "litestream") reads
        /// and resets the WAL; SnapshotDB runs PASSIVE checkpoints only and expects its reader.
        case external(replicator: String)

        /// The replicator's process name in the external mode.
        public var replicator: String? {
            if case .external(let name) = self { return name }
            return nil
        }
    }

    /// How much durable history the file keeps (``HistoryRetention``): by default the newest
    /// 10,000 commits, 7 days and 16 MiB of it, whichever is least.
    public var historyRetention = HistoryRetention()

    /// How many recent changesets the commit log keeps beyond those that bookmarks pin, so that
    /// idle connections can invalidate their caches precisely instead of dropping them. (The
    /// log is trimmed in batches, so it may briefly hold up to a quarter more.)
    public var commitLogRetention: Int = 1_000

    /// How much memory, roughly, the commit log may keep for those recent changesets (16 MiB
    /// by default): a few bulk commits keep fewer than ``commitLogRetention`` changesets.
    /// Changesets that a bookmark still has to be given are kept whatever their size; the
    /// checkpoint monitor names the connections that lag.
    public var commitLogRetentionBytes: Int = 16 << 20

    /// The most bytes a view records of one commit in its changeset and the durable history
    /// (4 MiB by default): each item the commit touched with its place before it, which is its
    /// old value in a view ordered by a closure (its sort key in a keyed one). A commit that
    /// touches more records a reload of the view instead: a bookmark that advances over it gets
    /// ``ViewReader/requiresReload(for:)`` for that view, not row changes. So a history row
    /// grows with the keys a commit touches, never with the values past this bound, and a
    /// commit that rewrites a gigabyte under a closure view neither writes its old values into
    /// the WAL again nor fails at SQLite's one-gigabyte limit for a blob.
    public var viewRecordLimitBytes: Int = Self.defaultViewRecordLimitBytes

    /// ``viewRecordLimitBytes`` by default: 4 MiB.
    static let defaultViewRecordLimitBytes = 4 << 20

    /// How long opening a read replica on Litestream's VFS waits for a first backup at a
    /// `file://` replica URL (10 s by default): Litestream's VFS would wait for ever for one that
    /// never comes (a mistyped path, a primary never replicated). Past it, the open throws
    /// `cannotOpen` naming the URL. (For other URLs, such as `s3://`, the VFS alone decides how
    /// long it waits.)
    public var replicaOpenTimeout: Duration = .seconds(10)

    /// The WAL size, in pages, past which a commit asks for a PASSIVE checkpoint (1000, about
    /// 4 MiB with 4 KiB pages).
    ///
    /// The checkpoint runs on the database's own connection, off the committing thread; when no
    /// snapshot is behind the newest commit, the WAL is then reset. A writer that gets four
    /// thresholds ahead of a running checkpoint waits for it, so the WAL stays bounded under a
    /// writer that commits as fast as it can; snapshots that pin the WAL never make writers
    /// wait (see ``walHardLimitBytes``).
    ///
    /// `Int.max` means no checkpoint after commits: the WAL then grows until
    /// ``Database/checkpoint(_:)``, ``Database/vacuum()``, the hard limit or the close
    /// checkpoints it.
    public var checkpointThresholdPages: Int = 1_000

    /// The WAL size in bytes past which the checkpoint monitor warns about the snapshots that
    /// pin it (64 MiB by default).
    ///
    /// The warning is logged through ``checkpointLogger`` and sent as
    /// ``CheckpointEvent/walOverWarning(_:)`` when a checkpoint cannot finish because snapshots
    /// pin the WAL; an all-clear follows once the WAL is under this size again.
    public var walWarningBytes: Int64 = 64 << 20

    /// The minimum time between two repeated warnings about the same stall, unless the WAL
    /// doubled in the meantime.
    public var warningInterval: Duration = .seconds(60)

    /// An optional hard limit: past this WAL size, new read-write transactions throw
    /// ``DatabaseError/Code/walLimitExceeded`` naming the snapshots that pin the WAL, until
    /// they are released; `Database.vacuum()`, which writes about the whole database into the
    /// WAL, is refused while snapshots pin it if it would take the WAL past the limit. `nil` (the
    /// default) never refuses a write.
    public var walHardLimitBytes: Int64? = nil

    /// The size SQLite trims a reset WAL file to (`PRAGMA journal_size_limit`), 8 MiB by
    /// default: twice the WAL at the default checkpoint threshold, so that steady writing
    /// reuses the file without resizing it (a commit that grows the file costs its `fdatasync`
    /// a metadata write). A file that grew past twice this limit while a snapshot pinned it is
    /// truncated to nothing at the next reset. `Int64.max` never trims the file (SQLite's
    /// "no limit").
    public var journalSizeLimit: Int64 = 8 << 20

    /// The logger for checkpoint warnings, and for the errors SnapshotDB cannot throw (a
    /// `ROLLBACK` that failed after another error, which is the one thrown); label
    /// `snapshotdb.checkpoint` by default.
    ///
    /// The default logger is made when it is first read (at the open), not when the
    /// configuration is: swift-log gives a logger the handler that `LoggingSystem.bootstrap` set
    /// when the logger is made, so an app that bootstraps logging after making its
    /// configuration, and before opening, still gets its handler.
    public var checkpointLogger: Logger {
        get { chosenCheckpointLogger ?? Logger(label: "snapshotdb.checkpoint") }
        set { chosenCheckpointLogger = newValue }
    }
    private var chosenCheckpointLogger: Logger?

    /// The value of the `database` dimension of the checkpoint metrics; the database path when
    /// `nil` (the default).
    ///
    /// Set a short, stable name ("main", "cache") when paths differ between machines or hold
    /// user names.
    public var metricsLabel: String? = nil

    /// The swift-metrics factory the checkpoint metrics are created with; `nil` (the default)
    /// uses the factory that `MetricsSystem.bootstrap` installed.
    public var metricsFactory: (any MetricsFactory)? = nil

    /// Creates a configuration with every default.
    public init() {}
}

extension Configuration {
    /// Throws ``DatabaseError/Code/misuse`` naming the first property whose value is out of its
    /// range: a count, size or duration below zero (``busyTimeout`` excepted: a negative one
    /// does not wait), or a ``fileMode`` that is not permission bits. Called when a database
    /// opens, before anything touches the file.
    func validate() throws(DatabaseError) {
        func atLeastZero(_ name: String, _ value: Int64, _ hint: String = "") throws(DatabaseError) {
            guard value < 0 else { return }
            throw DatabaseError(.misuse, "Configuration.\(name) is \(value); it must be 0 or more\(hint)")
        }
        func atLeastZero(_ name: String, _ value: Duration) throws(DatabaseError) {
            guard value < .zero else { return }
            throw DatabaseError(.misuse, "Configuration.\(name) is \(value); it must be zero or more")
        }
        guard fileMode <= 0o7777 else {
            throw DatabaseError(
                .misuse,
                "Configuration.fileMode is 0o\(String(fileMode, radix: 8)); it must be permission bits, 0o0...0o7777"
            )
        }
        try atLeastZero("cacheLimit", Int64(cacheLimit))
        try atLeastZero("viewRecordLimitBytes", Int64(viewRecordLimitBytes))
        try atLeastZero("replicaOpenTimeout", replicaOpenTimeout)
        try atLeastZero("changesBufferLimit", Int64(changesBufferLimit))
        if let readTimeLimit { try atLeastZero("readTimeLimit", readTimeLimit) }
        try atLeastZero("historyRetention.commits", Int64(historyRetention.commits))
        try atLeastZero("historyRetention.age", historyRetention.age)
        try atLeastZero("historyRetention.bytes", Int64(historyRetention.bytes))
        try atLeastZero("commitLogRetention", Int64(commitLogRetention))
        try atLeastZero("commitLogRetentionBytes", Int64(commitLogRetentionBytes))
        try atLeastZero("checkpointThresholdPages", Int64(checkpointThresholdPages))
        try atLeastZero("walWarningBytes", walWarningBytes)
        try atLeastZero("warningInterval", warningInterval)
        if let walHardLimitBytes { try atLeastZero("walHardLimitBytes", walHardLimitBytes) }
        // SQLite reads a negative `journal_size_limit` as "no limit"; here that is Int64.max.
        try atLeastZero("journalSizeLimit", journalSizeLimit, " (Int64.max for no limit)")
    }
}
