import ArgumentParser
import Foundation

@main
struct BenchmarkCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "snapshotdb-benchmarks",
        abstract: "Runs issue 6's workloads through SnapshotDB, raw SQLite (C API) and GRDB in one process.",
        discussion: """
            Prints a Markdown table of times per operation (median of several rounds) and the \
            ratios SnapshotDB / C and SnapshotDB / GRDB, with a verdict for each target.
            """)

    @Flag(help: "Small sizes and 3 rounds: finishes in a few minutes (for CI).")
    var quick = false

    @Option(help: "Rounds of each workload; the median is reported (default 5, 3 with --quick).")
    var rounds: Int?

    @Option(help: "Rounds of the fsync-bound workloads c (FULL) and g (default 5, 3 with --quick).")
    var writeRounds: Int?

    @Option(help: "Only these rows, comma-separated (for example a,b,e). Row e needs b for its target.")
    var only: String?

    @Option(help: "Only these engines, comma-separated: snapshotdb, c, grdb (for profiling one side).")
    var engines: String?

    @Option(
        help: "Directory for the database files (default: a new temporary directory, removed at the end).")
    var directory: String?

    @Flag(help: "Exit with status 1 when a target is missed.")
    var check = false

    @Option(
        help: """
            Suites to run, comma-separated: core (issue 6's rows a–g), views, indexes, scaling, \
            history, replication (needs litestream on PATH), or all (default: core).
            """)
    var suite = "core"

    /// The suites selected with `--suite`, in their declaration order.
    private func selectedSuites() throws -> [SuiteName] {
        let names = suite.lowercased().split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        if names.contains("all") { return SuiteName.allCases }
        let selected = try names.map { name in
            guard let suite = SuiteName(rawValue: name) else {
                throw ValidationError("--suite: unknown suite '\(name)'")
            }
            return suite
        }
        return SuiteName.allCases.filter(selected.contains)
    }

    func validate() throws {
        _ = try selectedSuites()
        if let rounds, rounds < 1 { throw ValidationError("--rounds must be at least 1") }
        if let writeRounds, writeRounds < 1 { throw ValidationError("--write-rounds must be at least 1") }
    }

    func run() throws {
        // The writer child of row h-wake (the same binary, started by the history suite).
        if let wakeWriter = ProcessInfo.processInfo.environment[wakeWriterKey] {
            try runWakeWriter(wakeWriter)
            return
        }
        // The writer child of rows h-turns and h-share.
        if let flatOutWriter = ProcessInfo.processInfo.environment[flatOutWriterKey] {
            try runFlatOutWriter(flatOutWriter)
            return
        }
        let suites = try selectedSuites()
        let sizes = quick ? Sizes.quick : Sizes.full
        let rounds = rounds ?? (quick ? 3 : 5)
        let writeRounds = writeRounds ?? (quick ? 3 : 5)
        let wantedRows = only.map {
            Set($0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) })
        }
        var workloads = makeWorkloads(sizes, writeRounds: writeRounds)
        if let wantedRows { workloads = workloads.filter { wantedRows.contains($0.id) } }

        let fileManager = FileManager.default
        let workDirectory: URL
        let ownsDirectory = directory == nil
        if let directory {
            workDirectory = URL(fileURLWithPath: directory)
            try fileManager.createDirectory(at: workDirectory, withIntermediateDirectories: true)
        } else {
            workDirectory = fileManager.temporaryDirectory.appendingPathComponent(
                "snapshotdb-benchmarks-\(ProcessInfo.processInfo.processIdentifier)")
            try fileManager.createDirectory(at: workDirectory, withIntermediateDirectories: true)
        }
        defer { if ownsDirectory { try? fileManager.removeItem(at: workDirectory) } }

        let started = Date()
        var tables: [String] = []
        var allTargetsMet = true
        if suites.contains(.core), !workloads.isEmpty {
            var report = try runCore(workloads, sizes: sizes, rounds: rounds, directory: workDirectory)
            tables.append(report.markdown())
            allTargetsMet = allTargetsMet && report.allTargetsMet
        }
        let context = SuiteContext(
            quick: quick, rounds: rounds, directory: workDirectory, only: wantedRows, progress: progress)
        for suite in suites where suite != .core {
            let report = try run(suite, context)
            guard !report.rows.isEmpty else { continue }
            tables.append(report.markdown())
            allTargetsMet = allTargetsMet && report.allTargetsMet
        }
        guard !tables.isEmpty else { throw ValidationError("--only selects no row") }
        let elapsed = Date().timeIntervalSince(started)

        let date = ISO8601DateFormatter.string(
            from: started, timeZone: TimeZone(identifier: "UTC")!, formatOptions: [.withFullDate])
        let arguments = CommandLine.arguments.dropFirst().joined(separator: " ")
        print(
            """
            SnapshotDB benchmarks, \(date); \(machineDescription()); SQLite \(SQLiteSubject.sqliteVersion), \
            GRDB 7.10.0; `synchronous = FULL` unless noted; median of \(rounds) rounds \
            (\(writeRounds) for c and g); \(Int(elapsed.rounded())) s in all.
            Command: `swift run -c release snapshotdb-benchmarks\(arguments.isEmpty ? "" : " " + arguments)` \
            (in Benchmarks/).
            Times are per operation (for g: the slowest commit; the 99th percentile after the semicolon).

            \(tables.joined(separator: "\n\n"))
            """)
        if check, !allTargetsMet { throw ExitCode(1) }
    }

    /// Issue 6's table: every workload through every selected engine.
    private func runCore(_ workloads: [Workload], sizes: Sizes, rounds: Int, directory: URL) throws -> Report
    {
        progress("generating data (\(quick ? "quick" : "full") sizes) in \(directory.path)")
        let data = WorkloadData(sizes: sizes)
        var engines: [any Subject.Type] = [SnapshotDBSubject.self, SQLiteSubject.self, GRDBSubject.self]
        if let selected = self.engines {
            let wanted = Set(selected.lowercased().split(separator: ",").map(String.init))
            let keys: [String: any Subject.Type] = [
                "snapshotdb": SnapshotDBSubject.self, "c": SQLiteSubject.self, "grdb": GRDBSubject.self,
            ]
            engines = wanted.compactMap { keys[$0] }
            guard engines.count == wanted.count else { throw ValidationError("--engines: unknown engine") }
        }
        let runner = Runner(engines: engines, data: data, rounds: rounds, directory: directory)
        var results: [WorkloadResult] = []
        for workload in workloads {
            results.append(try runner.run(workload, progress: progress))
        }
        try runner.finish()
        return Report(
            results: results, snapshotDB: SnapshotDBSubject.engineName, sqlite: SQLiteSubject.engineName,
            grdb: GRDBSubject.engineName)
    }

    /// A suite other than `core`.
    private func run(_ suite: SuiteName, _ context: SuiteContext) throws -> SuiteReport {
        switch suite {
        case .core: preconditionFailure("core runs through runCore")
        case .views: return try runViewSuite(context)
        case .indexes: return try runIndexSuite(context)
        case .scaling: return try runScalingSuite(context)
        case .history: return try runHistorySuite(context)
        case .replication: return try runReplicationSuite(context)
        }
    }

    private func progress(_ message: String) {
        FileHandle.standardError.write(Data("· \(message)\n".utf8))
    }
}
