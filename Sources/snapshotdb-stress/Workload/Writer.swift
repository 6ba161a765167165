internal import SnapshotDB

/// A writer connection making transfers as fast as the single writer lock lets it, with a few
/// rolled-back transactions and failed savepoints mixed in.
struct Writer {
    let connection: Connection
    let bank: BankInfo
    let control: RunControl
    let violations: Violations
    var random: SplitMix64
    var stats = WorkloadStats()

    /// Runs until the deadline and returns what it did.
    mutating func run() -> WorkloadStats {
        do {
            while control.shouldContinue { try step() }
        } catch {
            violations.record(
                "writer \(connection.name): \(error)"
                    + LockReport.describe(after: error, databaseAt: connection.database.path))
            control.stop()
        }
        return stats
    }

    private mutating func step() throws {
        let roll = Int.random(in: 0..<100, using: &random)
        let variant: Bank.Variant = roll < 5 ? .rolledBack : roll < 15 ? .failedSavepoint : .plain
        let before = connection.snapshot
        let started = ContinuousClock.now
        let transfer = try Bank.transfer(
            on: connection, bank: bank, writer: connection.name, variant: variant, using: &random)
        let elapsed = ContinuousClock.now - started
        guard let transfer else {
            stats.rolledBack += 1
            // A rolled-back transaction makes no commit: the connection still sees the commit
            // its transaction started from, which is at most the newest one.
            violations.check(
                connection.snapshot <= connection.database.latestCommit && connection.snapshot >= before,
                "\(connection.name): rolled-back transaction left snapshot \(connection.snapshot)")
            return
        }
        stats.commitLatency.record(elapsed)
        stats.commits += 1
        if variant == .failedSavepoint { stats.failedSavepoints += 1 }
        stats.commitNumbers.append(transfer.commit)
        violations.check(
            connection.snapshot == transfer.commit,
            "\(connection.name): committed \(transfer.commit) but its snapshot says \(connection.snapshot)")
    }
}
