internal import Synchronization

/// What the writers and readers of a run did; each worker keeps its own and merges it into a
/// ``StatsCollector`` when it stops, so the hot loops take no lock.
struct WorkloadStats: Sendable {
    var commits = 0
    var rolledBack = 0
    var failedSavepoints = 0
    var reads = 0
    var advances = 0
    var commitLatency = LatencyHistogram()
    var readLatency = LatencyHistogram()
    /// The commit numbers the writers were acknowledged, to prove none was handed out twice.
    var commitNumbers: [UInt64] = []

    mutating func merge(_ other: WorkloadStats) {
        commits += other.commits
        rolledBack += other.rolledBack
        failedSavepoints += other.failedSavepoints
        reads += other.reads
        advances += other.advances
        commitLatency.merge(other.commitLatency)
        readLatency.merge(other.readLatency)
        commitNumbers += other.commitNumbers
    }
}

/// Gathers the workers' ``WorkloadStats``.
final class StatsCollector: Sendable {
    private let total = Mutex(WorkloadStats())

    func add(_ stats: WorkloadStats) { total.withLock { $0.merge(stats) } }

    var snapshot: WorkloadStats { total.withLock { $0 } }
}
