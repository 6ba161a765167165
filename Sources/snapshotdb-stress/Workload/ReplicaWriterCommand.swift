internal import ArgumentParser
internal import Foundation
@_spi(Experiments) internal import SnapshotDB

/// One writer process of the torn-replica experiment (`Scripts/torn-replica-experiment.py`):
/// the stress run's bank, views and index, written by SnapshotDB with its WAL preallocation and
/// writer turns as the arm asks, while the script runs, stops, kills and restores Litestream.
///
/// The script starts three of these at once (the stress run's `--processes 2` beside its main
/// process) and an SQLite-only writer with the same transactions for its baseline arm, so that
/// only what SnapshotDB does differs between the arms. Each process runs `--writers` writers
/// making plain transfers, a bookmarked reader that reads every balance one to three times
/// and advances, and with `--laggard` a reader that holds its snapshot for 2 to 5 s at a time.
/// It prints one JSON line at the end: its commits and the last commit it acknowledged.
struct ReplicaWriterCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replica-writer",
        abstract: "A writer process of the torn-replica experiment.", shouldDisplay: false)

    @Option(help: "The database.")
    var db: String

    @Flag(help: "Create the bank (its accounts, views and index) and exit.")
    var create = false

    @Option(help: "Accounts in the bank, when creating it.")
    var accounts = 100

    @Option(help: "How long to write, in seconds.")
    var duration = 10.0

    @Option(help: "Writer connections.")
    var writers = 2

    @Flag(help: "Also run a reader that holds its snapshot for seconds at a time.")
    var laggard = false

    @Option(help: "Seed for the transfers.")
    var seed: UInt64 = 1

    @Option(help: "This process's name, in its connection names.")
    var name = "p0"

    @Flag(inversion: .prefixedNo, help: "Zero-fill the WAL ahead of its frames (SnapshotDB's VFS).")
    var preallocation = true

    @Option(help: "Writer turns: automatic, on or off.")
    var turns = TurnsChoice.automatic

    @Option(help: "The newest commits the history keeps (SnapshotDB's purge), 10,000 by default.")
    var historyRetention = HistoryRetention().commits

    func run() throws {
        Experiments.setWALPreallocation(preallocation)
        var configuration = Configuration()
        configuration.busyTimeout = WorkerProcessCommand.busyTimeout
        configuration.checkpointThresholdPages = 256
        turns.apply(to: &configuration)
        configuration.historyRetention.commits = historyRetention
        let database = try Database(path: db, configuration: configuration)
        try database.register(ViewChecks.views)
        try database.register(LitestreamRounds.index)
        let setup = database.newConnection(name: "setup-\(name)")
        if create {
            _ = try Bank.open(setup, accounts: accounts)
            try database.close()
            return
        }
        guard let bank = try Bank.load(setup) else { throw StressError("\(db) holds no bank") }
        let control = RunControl(duration: .seconds(duration))
        let violations = Violations()
        // Commits acknowledged, and the last of them.
        let results = ResultBox<(commits: Int, last: UInt64)>((0, 0))
        var threads: [WorkerThread] = []
        for number in 0..<writers {
            let connection = database.newConnection(name: "writer-\(name)-\(number)")
            let writerSeed = seed &+ UInt64(number) &* 7_919
            threads.append(
                WorkerThread(name: connection.name) {
                    var random = SplitMix64(seed: writerSeed)
                    var acknowledged = (commits: 0, last: UInt64(0))
                    do {
                        while control.shouldContinue {
                            if let transfer = try Bank.transfer(
                                on: connection, bank: bank, writer: connection.name, variant: .plain,
                                using: &random)
                            {
                                acknowledged = (
                                    acknowledged.commits + 1, max(acknowledged.last, transfer.commit)
                                )
                            }
                        }
                    } catch {
                        violations.record("\(connection.name): \(error)")
                        control.stop()
                    }
                    results.modify {
                        $0 = ($0.commits + acknowledged.commits, max($0.last, acknowledged.last))
                    }
                })
        }
        for holds in laggard ? [false, true] : [false] {
            let connection = database.newConnection(name: holds ? "laggard-\(name)" : "reader-\(name)")
            let readerSeed = seed &+ (holds ? 1_001 : 1_000)
            threads.append(
                WorkerThread(name: connection.name) {
                    var random = SplitMix64(seed: readerSeed)
                    do {
                        try Self.read(
                            connection, bank: bank, holds: holds, control: control, random: &random)
                    } catch {
                        violations.record("\(connection.name): \(error)")
                        control.stop()
                    }
                })
        }
        for thread in threads { thread.join() }
        try database.close()
        let acknowledged = results.value
        let line: [String: Any] = [
            "commits": acknowledged.commits, "last": acknowledged.last, "errors": violations.messages,
        ]
        let json = try JSONSerialization.data(withJSONObject: line, options: [.sortedKeys])
        print(String(decoding: json, as: UTF8.self))
        if violations.count > 0 { throw ExitCode(1) }
    }

    /// A bookmarked reader: reads every balance one to three times at its snapshot and
    /// advances; the laggard holds each snapshot for 2 to 5 s instead.
    private static func read(
        _ connection: Connection, bank: BankInfo, holds: Bool, control: RunControl,
        random: inout SplitMix64
    ) throws {
        try connection.beginLongLivedReadTransaction()
        while control.shouldContinue {
            for _ in 0..<Int.random(in: 1...3, using: &random) {
                _ = try connection.read { try Bank.balances(in: $0, bank: bank, enumerated: false) }
            }
            if holds {
                control.wait(until: .now + .milliseconds(Int64.random(in: 2_000...5_000, using: &random)))
            }
            try connection.beginLongLivedReadTransaction()
        }
        try connection.endLongLivedReadTransaction()
    }
}

/// Writer turns as an experiment sets them (`--turns`, and the stress run's hidden
/// `--writer-turns`).
enum TurnsChoice: String, ExpressibleByArgument {
    /// As SnapshotDB decides: none while a replicator keeps the WAL.
    case automatic
    /// Taken even while Litestream replicates (``Experiments/writerTurnsWhileReplicating``).
    case on
    /// Never taken (`Configuration.writerTurns = false`).
    case off

    /// Sets the process-wide switch and `configuration` for this choice.
    func apply(to configuration: inout Configuration) {
        Experiments.writerTurnsWhileReplicating = self == .on
        configuration.writerTurns = self != .off
    }
}
