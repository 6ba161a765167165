import CCallgrind
import Foundation

/// Whether the WAL is checkpointed while a workload runs.
enum CheckpointPolicy: Sendable {
    /// Never, on any side: SQLite's auto-checkpoint off for the C and GRDB sides (SnapshotDB's
    /// own `PRAGMA wal_autocheckpoint = 0`) and SnapshotDB's checkpointer threshold out of
    /// reach, so that rows a–f compare the same work (no side copies pages back or syncs the
    /// database file during a measurement).
    case never
    /// Each engine's default: SnapshotDB's checkpointer (PASSIVE off the committing thread past
    /// 1,000 pages); for the C and GRDB sides SQLite's auto-checkpoint, a PASSIVE checkpoint on
    /// the committing connection once the WAL passes 1,000 pages.
    case engineDefault
}

/// One engine under test, opened on a new database file with the benchmark's table.
///
/// Every workload method returns only the time of the part that is measured; loading rows,
/// opening handles and checks run outside it. Read workloads return the number of rows found so
/// that the runner can check every side did the same work.
protocol Subject: AnyObject {
    /// The engine's name in the table.
    static var engineName: String { get }

    init(path: String, sync: SyncMode, checkpoints: CheckpointPolicy) throws

    /// Loads `keys` with `payload` in one transaction and checkpoints the WAL away, so that
    /// every engine reads from an equally checkpointed file (not timed).
    func load(keys: [String], payload: Data) throws
    /// Loads `items` under `keys` with JSON, like ``load(keys:payload:)`` (not timed).
    func loadItems(keys: [String], items: [Item]) throws

    /// (a) Inserts every key with `payload` in one write transaction.
    func insert(keys: [String], payload: Data) throws -> Duration
    /// (b) and (e): reads `keys` in one read transaction.
    func readInOneTransaction(keys: [String]) throws -> (time: Duration, found: Int)
    /// (b-bytes) Reads `keys` in one read transaction, each value's bytes where the engine holds
    /// them, without a copy: SnapshotDB's `withUnsafeBytes(forKey:inCollection:_:)`, GRDB's
    /// `Row.withUnsafeData(atIndex:_:)`, and C's `sqlite3_column_blob` (as in b).
    func readBytesInOneTransaction(keys: [String]) throws -> (time: Duration, found: Int)
    /// (b2) Reads each key in a transaction of its own.
    func readOneTransactionEach(keys: [String]) throws -> (time: Duration, found: Int)
    /// (c) and (g): one write transaction per key, each setting one row to the payload of the
    /// same index; returns each commit's latency. With `laggardAfter`, another connection opens
    /// a read transaction after that many commits and holds it until the last one, pinning the
    /// WAL.
    ///
    /// Every payload differs from the row's previous value: SQLite does not write a page whose
    /// bytes an update leaves unchanged, so rewriting the same bytes would commit nothing.
    ///
    /// With `bumpingCounter`, the C and GRDB sides also add one to a counter row in every
    /// transaction, as SnapshotDB always does with its commit counter: the same pages written.
    func writeTransactions(keys: [String], payloads: [Data], laggardAfter: Int?, bumpingCounter: Bool)
        throws -> [Duration]
    /// (d) `iterations` times (after ``advanceWarmUp`` untimed ones): another connection commits
    /// a new version of one row (not timed), then the reader advances to the newest commit and
    /// reads that row (timed).
    /// With `writes == false` nothing is committed in between and the reader reads one row.
    func advanceAndRead(keys: [String], iterations: Int, writes: Bool) throws -> Duration
    /// (f) Encodes and inserts `items` in one write transaction.
    func insertItems(keys: [String], items: [Item]) throws -> Duration
    /// (f) Reads and decodes `keys` in one read transaction.
    func readItems(keys: [String]) throws -> (time: Duration, found: Int)
    /// Warms whatever cache the engine has with `keys`, reading each twice (SnapshotDB caches
    /// raw bytes on their second read) (not timed).
    func warm(keys: [String]) throws

    /// Closes the database; the runner deletes the files afterwards.
    func close() throws
}

/// Thrown when a side did not do the same work as the others.
struct BenchmarkCheckFailed: Error, CustomStringConvertible {
    let description: String
}

/// Checks that `bytes` (a value read in (d)) carries `stamp`.
func checkStamp(_ bytes: UnsafeRawBufferPointer, _ stamp: Int, engine: String) throws {
    guard payloadStamp(bytes) == UInt32(truncatingIfNeeded: stamp) else {
        throw BenchmarkCheckFailed(
            description: "\(engine): advance \(stamp) read an older version of the row")
    }
}

/// Times `body`: every measured part of every subject runs through here.
///
/// Under `valgrind --tool=callgrind --collect-atstart=no`, callgrind counts exactly the
/// instructions of the measured parts (and nothing of loading, checks or other engines), which
/// is how the hot paths were profiled on a noisy machine.
func timed(_ body: () throws -> Void) rethrows -> Duration {
    let clock = ContinuousClock()
    benchmark_callgrind_toggle_collect()
    let start = clock.now
    try body()
    let end = clock.now
    benchmark_callgrind_toggle_collect()
    return end - start
}

/// Untimed iterations that (d) runs first on every side, so that first-use costs (type metadata,
/// conformance lookups, caches) are not measured.
let advanceWarmUp = 10

/// Runs `body`; times it unless `isWarmUp`.
func timed(unless isWarmUp: Bool, _ body: () throws -> Void) rethrows -> Duration {
    guard !isWarmUp else {
        try body()
        return .zero
    }
    return try timed(body)
}
