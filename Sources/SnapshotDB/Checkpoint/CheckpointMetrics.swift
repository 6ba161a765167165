internal import Metrics

/// The swift-metrics gauges and counters of one database's checkpoint monitor.
///
/// Names follow Prometheus conventions so that a server exporting swift-metrics needs no extra
/// code; every metric carries the dimension `database` (``Configuration/metricsLabel``, or the
/// database path):
///
/// - `snapshotdb_wal_bytes` (gauge): the WAL in use, after every commit and checkpoint.
/// - `snapshotdb_wal_checkpointed_frames` (gauge): frames the last checkpoint copied back.
/// - `snapshotdb_oldest_snapshot_lag_commits`, `snapshotdb_oldest_snapshot_lag_seconds`
///   (gauges): how far behind the oldest snapshot of this process is, after every checkpoint
///   and status.
/// - `snapshotdb_checkpoints_total` (counter, dimensions `mode` and `result`: `complete`,
///   `incomplete`, `failed`).
/// - `snapshotdb_checkpoint_warnings_total` (counter): warnings logged about a pinned WAL.
struct CheckpointMetrics: Sendable {
    private let walBytes: Gauge
    private let checkpointedFrames: Gauge
    private let oldestLagCommits: Gauge
    private let oldestLagSeconds: Gauge
    private let warnings: Counter
    private let checkpoints: [String: Counter]

    /// The `result` dimension of `snapshotdb_checkpoints_total`.
    enum Outcome: String, CaseIterable {
        case complete
        case incomplete
        case failed
    }

    init(label: String, factory: (any MetricsFactory)?) {
        let factory = factory ?? MetricsSystem.factory
        let database = [("database", label)]
        walBytes = Gauge(label: "snapshotdb_wal_bytes", dimensions: database, factory: factory)
        checkpointedFrames = Gauge(
            label: "snapshotdb_wal_checkpointed_frames", dimensions: database, factory: factory)
        oldestLagCommits = Gauge(
            label: "snapshotdb_oldest_snapshot_lag_commits", dimensions: database, factory: factory)
        oldestLagSeconds = Gauge(
            label: "snapshotdb_oldest_snapshot_lag_seconds", dimensions: database, factory: factory)
        warnings = Counter(
            label: "snapshotdb_checkpoint_warnings_total", dimensions: database, factory: factory)
        var checkpoints: [String: Counter] = [:]
        for mode in CheckpointMode.allCases {
            for outcome in Outcome.allCases {
                checkpoints[Self.key(mode, outcome)] = Counter(
                    label: "snapshotdb_checkpoints_total",
                    dimensions: database + [("mode", mode.rawValue), ("result", outcome.rawValue)],
                    factory: factory)
            }
        }
        self.checkpoints = checkpoints
    }

    /// Records the WAL bytes in use.
    func recordWALBytes(_ bytes: Int64) { walBytes.record(bytes) }

    /// Records the frames the last checkpoint copied back.
    func recordCheckpointedFrames(_ frames: Int) { checkpointedFrames.record(frames) }

    /// Counts one warning logged about a pinned WAL.
    func countWarning() { warnings.increment() }

    /// Counts one checkpoint run in `mode`.
    func countCheckpoint(_ mode: CheckpointMode, _ outcome: Outcome) {
        checkpoints[Self.key(mode, outcome)]?.increment()
    }

    /// Records the lag of the oldest snapshot in `status` that is behind the newest commit
    /// (zero when none is).
    func recordLag(_ status: CheckpointStatus) {
        let oldest = status.laggingSnapshots.first
        oldestLagCommits.record(Int64(clamping: oldest?.commitsBehind ?? 0))
        oldestLagSeconds.record(oldest?.secondsHeld ?? 0)
    }

    private static func key(_ mode: CheckpointMode, _ outcome: Outcome) -> String {
        "\(mode.rawValue)/\(outcome.rawValue)"
    }
}
