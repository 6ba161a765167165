internal import SnapshotDB

/// A bookmarked reader: at its own snapshot it checks the total and that repeated reads agree;
/// at each advance it checks the changesets it is handed against what actually changed.
struct Reader {
    let connection: Connection
    let bank: BankInfo
    let control: RunControl
    let violations: Violations
    var random: SplitMix64
    var stats = WorkloadStats()

    /// Runs until the deadline and returns what it did.
    mutating func run() -> WorkloadStats {
        do {
            try connection.beginLongLivedReadTransaction()
            var current = try read(enumerated: false, verifyLog: true)
            var rows = try ViewChecks.check(
                connection, snapshot: current, previous: nil, changes: [], violations: violations)
            while control.shouldContinue {
                for repetition in 0..<Int.random(in: 1...3, using: &random) {
                    // Alternate the cache and SQLite: a stale cached value shows up as a mismatch.
                    let again = try read(enumerated: repetition % 2 == 0, verifyLog: false)
                    violations.check(
                        again.commit == current.commit && again.balances == current.balances,
                        "\(connection.name): repeated read at commit \(current.commit) disagrees "
                            + "(commit \(again.commit), \(Self.difference(current.balances, again.balances)))"
                    )
                }
                let changes = try connection.beginLongLivedReadTransaction()
                let next = try read(enumerated: false, verifyLog: true)
                stats.advances += 1
                try BookmarkChecks.checkAdvance(
                    from: current, to: next, changes: changes, connection: connection, bank: bank,
                    violations: violations)
                rows = try ViewChecks.check(
                    connection, snapshot: next, previous: rows, changes: changes, violations: violations)
                current = next
            }
            try connection.endLongLivedReadTransaction()
        } catch {
            violations.record("reader \(connection.name): \(error)")
            control.stop()
        }
        return stats
    }

    /// Reads every balance at the bookmark and checks the snapshot on its own terms.
    private mutating func read(enumerated: Bool, verifyLog: Bool) throws -> BankSnapshot {
        let started = ContinuousClock.now
        let snapshot = try BookmarkChecks.read(
            connection, bank: bank, enumerated: enumerated, verifyLog: verifyLog, violations: violations)
        stats.readLatency.record(ContinuousClock.now - started)
        stats.reads += 1
        return snapshot
    }

    /// A short description of where two balance lists differ.
    static func difference(_ first: [Int64], _ second: [Int64]) -> String {
        guard first.count == second.count else { return "\(first.count) vs \(second.count) accounts" }
        let differing = first.indices.filter { first[$0] != second[$0] }
        let shown = differing.prefix(3).map { "\(Bank.accountKey($0)): \(first[$0]) vs \(second[$0])" }
        return "\(differing.count) accounts differ"
            + (shown.isEmpty ? "" : ": " + shown.joined(separator: ", "))
    }
}
