internal import SnapshotDB
internal import SnapshotDBLocking

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

/// The writer and bookmarked-reader threads of one process of a run, started: `writers`
/// writers named `writerName(i)` and `readers` readers named `readerName(i)` (1-based), each
/// with its own random sequence drawn from `seed` and the worker number `seedBase + i` (writers)
/// or `seedBase + 1_000 + i` (readers), merging what they did into `stats` when they stop.
func startWorkload(
    database: Database, bank: BankInfo, control: RunControl, violations: Violations, stats: StatsCollector,
    writers: Int, readers: Int, seed: UInt64, seedBase: Int = 0,
    writerName: (Int) -> String, readerName: (Int) -> String
) -> [WorkerThread] {
    var threads: [WorkerThread] = []
    for index in 1...max(1, writers) {
        let connection = database.newConnection(name: writerName(index))
        let random = SplitMix64.forWorker(seedBase + index, seed: seed)
        threads.append(
            WorkerThread(name: connection.name) {
                var writer = Writer(
                    connection: connection, bank: bank, control: control, violations: violations,
                    random: random)
                stats.add(writer.run())
            })
    }
    for index in 1...max(1, readers) {
        let connection = database.newConnection(name: readerName(index))
        let random = SplitMix64.forWorker(seedBase + 1_000 + index, seed: seed)
        threads.append(
            WorkerThread(name: connection.name) {
                var reader = Reader(
                    connection: connection, bank: bank, control: control, violations: violations,
                    random: random)
                stats.add(reader.run())
            })
    }
    return threads
}
