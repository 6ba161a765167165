import Foundation

/// How the three engines sync commits: the same `PRAGMA synchronous` for all of them.
enum SyncMode: String, Sendable, CaseIterable {
    case full = "FULL"
    case normal = "NORMAL"
}

/// The sizes of one run: issue 6's sizes by default, small ones with `--quick`.
struct Sizes: Sendable {
    /// Rows inserted by (a) and (f), and rows loaded before the read workloads.
    var rows: Int
    /// Point reads of (b), (b2) and (f).
    var reads: Int
    /// One-row write transactions of (c).
    var writeTransactions: Int
    /// Advances of (d).
    var advances: Int
    /// Hot reads of (e), spread over `hotKeys` keys.
    var hotReads: Int
    var hotKeys: Int
    /// One-row commits of (g); the laggard starts pinning after the first quarter.
    var laggardCommits: Int

    static let full = Sizes(
        rows: 100_000, reads: 100_000, writeTransactions: 10_000, advances: 1_000, hotReads: 100_000,
        hotKeys: 100, laggardCommits: 2_000)

    static let quick = Sizes(
        rows: 10_000, reads: 10_000, writeTransactions: 500, advances: 200, hotReads: 20_000,
        hotKeys: 100, laggardCommits: 1_200)
}

/// The collection every workload writes to and reads from.
let benchmarkCollection = "bench"

/// The fixed-width key of row `index`: `key0000042`.
func benchmarkKey(_ index: Int) -> String {
    let digits = String(index)
    return "key" + String(repeating: "0", count: max(0, 7 - digits.count)) + digits
}

/// 100 deterministic bytes; the first four bytes carry `stamp` so that readers can check which
/// version of a row they saw.
func benchmarkPayload(stamp: UInt32 = 0) -> Data {
    var generator = SplitMix64(seed: 0x5EED)
    var bytes = (0..<100).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
    withUnsafeBytes(of: stamp.littleEndian) { stampBytes in
        for (offset, byte) in stampBytes.enumerated() { bytes[offset] = byte }
    }
    return Data(bytes)
}

/// The stamp that ``benchmarkPayload(stamp:)`` wrote into `bytes`.
func payloadStamp(_ bytes: UnsafeRawBufferPointer) -> UInt32 {
    guard bytes.count >= 4 else { return .max }
    return UInt32(littleEndian: bytes.loadUnaligned(as: UInt32.self))
}

/// The small struct of the Codable workloads (f): about 100 bytes of sorted-keys JSON.
struct Item: Codable, Sendable, Equatable {
    var id: Int
    var title: String
    var score: Double
    var isDone: Bool
    var tags: [String]

    static func make(_ index: Int) -> Item {
        Item(
            id: index, title: "Item number \(index)", score: Double(index % 1_000) / 8,
            isDone: index % 3 == 0,
            tags: ["bench", "t\(index % 7)"])
    }
}

/// The JSON encoder the C and GRDB sides use for (f): the same output format as SnapshotDB's
/// default codec (sorted keys).
func makeItemEncoder() -> JSONEncoder {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys]
    return encoder
}

/// A small, fast, seeded generator, so every engine reads the same keys in the same order.
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// The inputs of every workload, generated once before anything is timed.
struct WorkloadData: Sendable {
    let sizes: Sizes
    /// Row keys in insertion order.
    let keys: [String]
    /// `sizes.reads` keys drawn uniformly (with replacement) from `keys`.
    let randomKeys: [String]
    /// `sizes.hotReads` keys cycling over the first `sizes.hotKeys` keys.
    let hotKeys: [String]
    /// Keys of the one-row write transactions of (c) and (g): random existing rows.
    let writeKeys: [String]
    let payload: Data
    /// One payload per write of (c), (d) and (g), each stamped with its index plus one, so
    /// that every write changes the row.
    let writePayloads: [Data]
    let items: [Item]

    init(sizes: Sizes) {
        self.sizes = sizes
        keys = (0..<sizes.rows).map(benchmarkKey)
        var generator = SplitMix64(seed: 42)
        let rows = UInt64(sizes.rows)
        randomKeys = (0..<sizes.reads).map { _ in benchmarkKey(Int(generator.next() % rows)) }
        var hotGenerator = SplitMix64(seed: 7)
        let hotSet = (0..<sizes.hotKeys).map { _ in benchmarkKey(Int(hotGenerator.next() % rows)) }
        hotKeys = (0..<sizes.hotReads).map { hotSet[$0 % hotSet.count] }
        let writes = max(sizes.writeTransactions, sizes.laggardCommits, sizes.advances)
        writeKeys = (0..<writes).map { _ in benchmarkKey(Int(generator.next() % rows)) }
        payload = benchmarkPayload()
        writePayloads = (0..<writes).map { benchmarkPayload(stamp: UInt32($0 + 1)) }
        items = (0..<sizes.rows).map(Item.make)
    }
}
