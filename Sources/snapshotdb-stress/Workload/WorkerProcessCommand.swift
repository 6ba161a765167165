internal import ArgumentParser
internal import Foundation
internal import SnapshotDB

/// A worker process of a multi-process run (`--processes N`): writers and bookmarked readers of
/// its own on the run's database, checking every advance, including over the commits of the
/// other processes, against what actually changed (exact keys, `info`, connection names, view
/// row changes), with the durable history as the only way those changesets can arrive.
///
/// Prints one JSON line at the end (``WorkerProcessResult``), which the parent merges.
struct WorkerProcessCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "worker-process", abstract: "Writers and readers in a process of their own.",
        shouldDisplay: false)

    @Option(help: "The run's database; its bank must already exist.")
    var db: String

    @Option(help: "This worker's number, in its connection names.")
    var index = 1

    @Option(help: "Writer connections.")
    var writers = 1

    @Option(help: "Bookmarked reader connections.")
    var readers = 1

    @Option(help: "How long to run, in seconds.")
    var duration = 10.0

    @Option(help: "Seed for the transfers.")
    var seed: UInt64 = 1

    @Option(help: "The WAL size past which a checkpoint is asked for, in pages.")
    var checkpointPages = 256

    @Option(help: "Writer turns: automatic, on or off (the parent's --writer-turns).")
    var writerTurns = TurnsChoice.automatic

    /// The busy timeout of every process of a multi-process run: writers of several processes
    /// queue on SQLite's write lock, whose busy handler is not fair (it sleeps and retries), so
    /// under this load one process can wait seconds.
    static let busyTimeout: Duration = .seconds(60)

    func run() throws {
        var configuration = Configuration()
        configuration.checkpointThresholdPages = checkpointPages
        configuration.busyTimeout = Self.busyTimeout
        writerTurns.apply(to: &configuration)
        let database = try Database(path: db, configuration: configuration)
        try database.register(ViewChecks.views)
        try database.register(LitestreamRounds.index)
        guard let bank = try Bank.load(database.newConnection(name: "worker-setup-\(index)")) else {
            throw StressError("\(db) holds no bank")
        }
        let control = RunControl(duration: .seconds(duration))
        let violations = Violations()
        let stats = StatsCollector()
        // "writer-" first: the parent's changes() checker expects every writer's name so.
        let threads = startWorkload(
            database: database, bank: bank, control: control, violations: violations, stats: stats,
            writers: writers, readers: readers, seed: seed, seedBase: 10_000 * index,
            writerName: { "writer-p\(index)-\($0)" }, readerName: { "reader-p\(index)-\($0)" })
        for thread in threads { thread.join() }
        try database.close()
        let totals = stats.snapshot
        let result = WorkerProcessResult(
            commitNumbers: totals.commitNumbers, commits: totals.commits, rolledBack: totals.rolledBack,
            failedSavepoints: totals.failedSavepoints, reads: totals.reads, advances: totals.advances,
            violationCount: violations.count, violations: violations.messages)
        CrashChildCommand.emit(String(decoding: try JSONEncoder().encode(result), as: UTF8.self))
    }
}

/// What a worker process reports to the parent.
struct WorkerProcessResult: Codable {
    var commitNumbers: [UInt64]
    var commits: Int
    var rolledBack: Int
    var failedSavepoints: Int
    var reads: Int
    var advances: Int
    var violationCount: Int
    var violations: [String]
}
