import Foundation

/// What a workload's database holds before the measured part starts.
enum Fixture: Sendable {
    /// A new, empty database.
    case empty
    /// A new database loaded with every row (100-byte values).
    case rows
    /// A shared database loaded with every row, opened once and reused by every round of every
    /// read-only workload.
    case sharedRows
    /// Like `sharedRows`, with JSON-encoded ``Item``s.
    case sharedItems
}

/// How the rounds of a workload are summarized.
enum Statistic: Sendable {
    /// The median over rounds of the measured time, shown per operation.
    case timePerOperation
    /// The median over rounds of the slowest single operation.
    case worst
}

/// One line of the table.
struct Workload {
    let id: String
    let title: String
    let operations: Int
    var sync: SyncMode = .full
    var checkpoints: CheckpointPolicy = .never
    let fixture: Fixture
    var statistic: Statistic = .timePerOperation
    /// Rounds for this workload, when not the run's default (fsync-bound workloads).
    var rounds: Int?
    /// Runs the measured part on a subject; returns one duration per operation or one in all.
    var body: ((any Subject, WorkloadData) throws -> [Duration])?
    /// For long fsync-bound workloads, instead of `body`: the operations are split into
    /// `interleavedChunks` chunks, and each chunk runs on every engine in turn (each engine with
    /// its own database, open for the whole round), so that the disk's drift over a round of
    /// many seconds hits every engine alike. Called with the chunk's range of operations.
    var chunkBody: ((any Subject, WorkloadData, Range<Int>) throws -> [Duration])?
    var interleavedChunks = 20
}

/// The median of each engine's rounds for one workload.
struct WorkloadResult {
    let workload: Workload
    /// Engine name → the workload's statistic (a total for `timePerOperation`).
    let values: [String: Duration]
    /// Engine name → the median of the rounds' 99th-percentile operation, for `worst`.
    let percentile99: [String: Duration]
    /// Engine name → the statistic of every round, in round order.
    let rounds: [String: [Duration]]

    /// The median over rounds of `engine`'s statistic divided by `other`'s in the same round.
    ///
    /// Engines run back to back within a round, so a per-round ratio cancels most of the drift
    /// of a noisy machine, which a ratio of two medians taken from different rounds does not.
    func ratio(_ engine: String, to other: String) -> Double? {
        guard let ours = rounds[engine], let theirs = rounds[other], ours.count == theirs.count else {
            return nil
        }
        let ratios = zip(ours, theirs).compactMap { $1 > .zero ? $0.seconds / $1.seconds : nil }
        guard !ratios.isEmpty else { return nil }
        let sorted = ratios.sorted()
        let middle = sorted.count / 2
        return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
    }
}

/// Runs workloads on every engine, interleaving engines within each round so that a noisy
/// neighbour hurts all of them alike.
final class Runner {
    let engines: [any Subject.Type]
    let data: WorkloadData
    let rounds: Int
    let directory: URL
    private var shared: [String: any Subject] = [:]
    private var fileCounter = 0

    init(engines: [any Subject.Type], data: WorkloadData, rounds: Int, directory: URL) {
        self.engines = engines
        self.data = data
        self.rounds = rounds
        self.directory = directory
    }

    func run(_ workload: Workload, progress: (String) -> Void) throws -> WorkloadResult {
        var samples: [String: [Duration]] = [:]
        var percentiles: [String: [Duration]] = [:]
        let rounds = workload.rounds ?? self.rounds
        for round in 0..<rounds {
            progress("(\(workload.id)) \(workload.title): round \(round + 1)/\(rounds)")
            if workload.chunkBody != nil {
                for (engine, measured) in try measureInterleaved(workload) {
                    samples[engine, default: []].append(measured.reduce(.zero, +))
                }
                continue
            }
            for offset in 0..<engines.count {
                let engine = engines[(round + offset) % engines.count]
                // Dirty pages the previous engine left are written back now, not during this one.
                sync()
                let measured = try measure(workload, on: engine)
                let value: Duration
                switch workload.statistic {
                case .timePerOperation: value = measured.reduce(.zero, +)
                case .worst:
                    value = measured.max() ?? .zero
                    percentiles[engine.engineName, default: []].append(percentile(measured, 0.99))
                    reportSlowest(measured, engine: engine.engineName, workload: workload.id)
                }
                samples[engine.engineName, default: []].append(value)
            }
        }
        return WorkloadResult(
            workload: workload, values: samples.mapValues(median),
            percentile99: percentiles.mapValues(median),
            rounds: samples
        )
    }

    /// With `SNAPSHOTDB_BENCHMARK_SLOWEST=N` in the environment, prints the N slowest operations
    /// of each round of a `worst` row, with their index, to standard error: how the rows' worst
    /// commits were traced to the checkpoint that met them.
    private func reportSlowest(_ measured: [Duration], engine: String, workload: String) {
        guard let text = ProcessInfo.processInfo.environment["SNAPSHOTDB_BENCHMARK_SLOWEST"],
            let count = Int(text), count > 0
        else { return }
        let slowest = measured.enumerated().sorted { $0.element > $1.element }.prefix(count)
        let list = slowest.map { "#\($0.offset) \(format(seconds: $0.element.seconds))" }
            .joined(separator: ", ")
        FileHandle.standardError.write(Data("  \(workload) \(engine): \(list)\n".utf8))
    }

    /// One round of a chunked workload: every engine's database is opened (and loaded), then the
    /// chunks run on the engines in turn, the engine that goes first rotating.
    private func measureInterleaved(_ workload: Workload) throws -> [String: [Duration]] {
        guard let chunkBody = workload.chunkBody else { return [:] }
        var subjects: [(name: String, subject: any Subject)] = []
        var paths: [String] = []
        defer {
            subjects.removeAll()  // closes the databases before their files go
            for path in paths { removeDatabase(path) }
        }
        for engine in engines {
            let path = newPath(engine)
            paths.append(path)
            let subject = try engine.init(path: path, sync: workload.sync, checkpoints: workload.checkpoints)
            subjects.append((engine.engineName, subject))
            if case .rows = workload.fixture { try subject.load(keys: data.keys, payload: data.payload) }
        }
        var measured: [String: [Duration]] = [:]
        let chunks = max(1, min(workload.interleavedChunks, workload.operations))
        for chunk in 0..<chunks {
            let range = (workload.operations * chunk / chunks)..<(workload.operations * (chunk + 1) / chunks)
            for offset in 0..<subjects.count {
                let entry = subjects[(chunk + offset) % subjects.count]
                measured[entry.name, default: []] += try chunkBody(entry.subject, data, range)
            }
        }
        for entry in subjects { try entry.subject.close() }
        return measured
    }

    private func measure(_ workload: Workload, on engine: any Subject.Type) throws -> [Duration] {
        guard let body = workload.body else { return [] }
        switch workload.fixture {
        case .sharedRows, .sharedItems:
            let subject = try sharedSubject(engine, fixture: workload.fixture)
            return try body(subject, data)
        case .empty, .rows:
            let path = newPath(engine)
            defer { removeDatabase(path) }
            return try measureFresh(workload, on: engine, path: path)
        }
    }

    /// Runs `workload` on a new database at `path`; the subject is released, and its files
    /// closed, when this returns.
    private func measureFresh(_ workload: Workload, on engine: any Subject.Type, path: String) throws
        -> [Duration]
    {
        guard let body = workload.body else { return [] }
        let subject = try engine.init(path: path, sync: workload.sync, checkpoints: workload.checkpoints)
        if case .rows = workload.fixture { try subject.load(keys: data.keys, payload: data.payload) }
        let result = try body(subject, data)
        try subject.close()
        return result
    }

    private func sharedSubject(_ engine: any Subject.Type, fixture: Fixture) throws -> any Subject {
        let name = "\(engine.engineName)-\(fixture)"
        if let subject = shared[name] { return subject }
        let subject = try engine.init(path: newPath(engine), sync: .full, checkpoints: .never)
        if case .sharedItems = fixture {
            try subject.loadItems(keys: data.keys, items: data.items)
        } else {
            try subject.load(keys: data.keys, payload: data.payload)
        }
        shared[name] = subject
        return subject
    }

    /// Closes the shared databases.
    func finish() throws {
        for subject in shared.values { try subject.close() }
        shared = [:]
    }

    private func newPath(_ engine: any Subject.Type) -> String {
        fileCounter += 1
        let name = engine.engineName.replacingOccurrences(of: " ", with: "-")
        return directory.appendingPathComponent("\(name)-\(fileCounter).sqlite").path
    }

    private func removeDatabase(_ path: String) {
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
    }
}

func median(_ values: [Duration]) -> Duration {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return .zero }
    let middle = sorted.count / 2
    return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}

func percentile(_ values: [Duration], _ fraction: Double) -> Duration {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return .zero }
    let index = min(sorted.count - 1, Int((Double(sorted.count) * fraction).rounded(.up)) - 1)
    return sorted[max(0, index)]
}

extension Duration {
    /// The duration in seconds as a `Double`.
    var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) * 1e-18
    }
}
