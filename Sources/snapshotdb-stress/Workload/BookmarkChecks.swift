internal import SnapshotDB

/// What a bookmarked connection saw at one commit.
struct BankSnapshot {
    let commit: UInt64
    let balances: [Int64]
}

/// The invariants a bookmarked connection checks, shared by the readers and the laggard.
enum BookmarkChecks {
    /// Reads the balances at `connection`'s bookmark and checks that the snapshot is the
    /// bookmarked commit, that the total is exact and, with `verifyLog`, that the log ends
    /// exactly at that commit.
    static func read(
        _ connection: Connection, bank: BankInfo, enumerated: Bool, verifyLog: Bool, violations: Violations
    ) throws -> BankSnapshot {
        let bookmark = connection.snapshot
        let snapshot = try connection.read { txn in
            let balances = try Bank.balances(in: txn, bank: bank, enumerated: enumerated)
            if verifyLog {
                let count = try txn.count(inCollection: Bank.logCollection)
                violations.check(
                    UInt64(count) == txn.commit - bank.setupCommit,
                    "\(connection.name): \(count) log entries at commit \(txn.commit), expected "
                        + "\(txn.commit - bank.setupCommit)")
                let hasNext = try txn.hasValue(
                    forKey: Bank.logKey(txn.commit + 1), inCollection: Bank.logCollection)
                violations.check(
                    !hasNext,
                    "\(connection.name): snapshot \(txn.commit) already holds commit \(txn.commit + 1)")
            }
            return BankSnapshot(commit: txn.commit, balances: balances)
        }
        violations.check(
            snapshot.commit == bookmark,
            "\(connection.name): read commit \(snapshot.commit) while bookmarked at \(bookmark)")
        let total = snapshot.balances.reduce(0, +)
        violations.check(
            total == bank.total,
            "\(connection.name): total \(total) at commit \(snapshot.commit), expected \(bank.total)")
        return snapshot
    }

    /// Checks one advance of a bookmark from `old` to `new`:
    ///
    /// - the changesets are exactly the commits `old.commit + 1 ... new.commit`, in order, with
    ///   no gap and no duplicate, none of them external;
    /// - every account whose balance differs between the snapshots, and every log entry
    ///   between them, is reported by `hasChange`;
    /// - replaying the logged transfers onto the old balances gives exactly the new ones.
    static func checkAdvance(
        from old: BankSnapshot, to new: BankSnapshot, changes: [Changeset], connection: Connection,
        bank: BankInfo, violations: Violations
    ) throws {
        let name = connection.name
        guard
            violations.check(
                new.commit >= old.commit, "\(name): advanced backwards from \(old.commit) to \(new.commit)")
        else { return }
        let expected = Array(old.commit + 1..<new.commit + 1)
        let received = changes.map(\.commit)
        violations.check(
            received == expected,
            "\(name): advance \(old.commit) -> \(new.commit) returned commits \(summary(received)), "
                + "expected \(summary(expected))")
        let external = changes.filter(\.isExternal).map(\.commit)
        violations.check(
            external.isEmpty,
            "\(name): advance returned external changesets for local commits \(summary(external))")

        for index in 0..<bank.accounts where old.balances[index] != new.balances[index] {
            violations.check(
                changes.hasChange(forKey: Bank.accountKey(index), inCollection: Bank.accountsCollection),
                "\(name): \(Bank.accountKey(index)) changed between \(old.commit) and \(new.commit) "
                    + "(\(old.balances[index]) -> \(new.balances[index])) but hasChange is false")
        }
        guard new.commit > old.commit else { return }

        let transfers = try connection.read { txn in
            try Bank.transfers(after: old.commit, through: new.commit, in: txn)
        }
        var replayed = old.balances
        for (changeset, transfer) in zip(changes, transfers) {
            // Exact, whichever process made the commit: the two accounts and the log entry it
            // wrote, its info and its writer's name; nothing more.
            let accounts: Set<String> = [Bank.accountKey(transfer.from), Bank.accountKey(transfer.to)]
            violations.check(
                changeset.setKeys == [
                    Bank.accountsCollection: accounts, Bank.logCollection: [Bank.logKey(changeset.commit)],
                ] && changeset.removedKeys.isEmpty && changeset.clearedCollections.isEmpty,
                "\(name): changeset \(changeset.commit) is not its transfer's: \(changeset)")
            violations.check(
                changeset.connectionName == transfer.writer
                    && changeset.info == [
                        Bank.fromInfoKey: Bank.accountKey(transfer.from),
                        Bank.toInfoKey: Bank.accountKey(transfer.to),
                    ],
                "\(name): changeset \(changeset.commit) names \(changeset.connectionName ?? "nil") and info "
                    + "\(changeset.info), the log says \(transfer.writer)")
        }
        for (commit, transfer) in zip(expected, transfers) {
            violations.check(
                transfer.commit == commit, "\(name): log entry \(commit) records commit \(transfer.commit)")
            violations.check(
                changes.hasChange(forKey: Bank.logKey(commit), inCollection: Bank.logCollection),
                "\(name): log entry \(commit) appeared but hasChange is false")
            replayed[transfer.from] -= transfer.amount
            replayed[transfer.to] += transfer.amount
        }
        violations.check(
            replayed == new.balances,
            "\(name): replaying the log \(old.commit) -> \(new.commit) does not give the new balances "
                + "(\(Reader.difference(replayed, new.balances)))")
    }

    /// `[first ... last] (count)` for long lists, the list itself for short ones.
    static func summary(_ commits: [UInt64]) -> String {
        guard commits.count > 6, let first = commits.first, let last = commits.last else {
            return "\(commits)"
        }
        return "[\(first) ... \(last)] (\(commits.count))"
    }
}
