import Foundation

/// The suites of the benchmark executable. `core` is issue 6's table (``makeWorkloads``); the
/// others each run their own rows and print their own table after it.
///
/// A suite other than `core` is a function from a ``SuiteContext`` to a ``SuiteReport``: it
/// opens its own files under ``SuiteContext/directory``, times only what its rows name (through
/// ``timed(_:)``, so callgrind counts the same parts) and reports medians and ratios per round.
enum SuiteName: String, CaseIterable, Sendable {
    /// Issue 6's rows a–g.
    case core
    /// Views (issue 14): upkeep on commit, positions, row changes and build time, beside GRDB's
    /// indexed `ORDER BY … LIMIT` and an app-side diff.
    case views
    /// Secondary indexes and full-text search (issue 15), beside GRDB with the same SQL index
    /// and FTS5 table.
    case indexes
    /// Costs against history and connections (issue 13): advance against database size, keys
    /// changed and commits jumped; commit cost against connections; memory after a laggard.
    case scaling
    /// The durable history (issue 24): wake-up latency across processes, idle CPU,
    /// `changes(after:)` against the changesets returned, bytes per commit, purge steps.
    case history
    /// Real Litestream beside SnapshotDB (issue 25): commit throughput while it replicates,
    /// replication lag, restore time.
    case replication
}

/// What a suite gets from the command line.
struct SuiteContext {
    /// Small sizes (for CI and profiling).
    let quick: Bool
    /// Rounds per row; suites report medians over them.
    let rounds: Int
    /// A directory the suite may fill; removed by the command afterwards when it made it.
    let directory: URL
    /// Row ids selected with `--only`, or nil for every row.
    let only: Set<String>?
    /// Prints a progress line to standard error.
    let progress: (String) -> Void

    /// Whether row `id` was selected.
    func wants(_ id: String) -> Bool { only?.contains(id) ?? true }

    /// A path for a new database file named `name` in the suite's directory, with any earlier
    /// file of that name (and its `-wal` and `-shm`) removed.
    func freshPath(_ name: String) -> String {
        let path = directory.appendingPathComponent(name).path
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
        return path
    }
}

/// One line of a suite's table, already formatted.
struct SuiteRow {
    var id: String
    var title: String
    var n: Int
    /// Column title → cell text; a column a row has no value for shows "–".
    var cells: [String: String]
    /// The verdicts for this row, for example "≤ 1.30× without the view: met".
    var verdicts: [String] = []
}

/// A suite's result: a titled Markdown table and whether every target was met.
struct SuiteReport {
    var title: String
    var columns: [String]
    var rows: [SuiteRow] = []
    /// Lines printed under the table (what the columns mean, the sizes).
    var notes: [String] = []
    private(set) var allTargetsMet = true

    init(title: String, columns: [String], notes: [String] = []) {
        self.title = title
        self.columns = columns
        self.notes = notes
    }

    /// Adds a verdict to `row`: "target: met" or "target: **missed**".
    mutating func verdict(_ target: String, _ met: Bool, to row: inout SuiteRow) {
        if !met { allTargetsMet = false }
        row.verdicts.append("\(target): \(met ? "met" : "**missed**")")
    }

    func markdown() -> String {
        var lines = [
            "### \(title)", "",
            "| row | workload | N | " + columns.joined(separator: " | ") + " | target |",
            "|---|---|---:|" + String(repeating: "---:|", count: columns.count) + "---|",
        ]
        for row in rows {
            let cells = columns.map { row.cells[$0] ?? "–" }
            lines.append(
                "| "
                    + ([row.id, row.title, grouped(row.n)] + cells + [row.verdicts.joined(separator: "; ")])
                    .joined(separator: " | ") + " |")
        }
        if !notes.isEmpty { lines += [""] + notes }
        return lines.joined(separator: "\n")
    }
}

/// The median of per-round ratios `numerator[i] / denominator[i]` (rounds paired, which cancels
/// most of a shared machine's drift).
func medianRatio(_ numerator: [Duration], _ denominator: [Duration]) -> Double {
    medianOf(zip(numerator, denominator).map { $0.seconds / max($1.seconds, 1e-12) })
}

/// The median of plain numbers (for values a suite computed per round).
func medianOf(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return .nan }
    let middle = sorted.count / 2
    return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}

/// The median of `rounds` divided by `operations`, formatted (for a table cell).
func perOperationCell(_ rounds: [Duration], operations: Int) -> String {
    format(seconds: median(rounds).seconds / Double(max(1, operations)))
}
