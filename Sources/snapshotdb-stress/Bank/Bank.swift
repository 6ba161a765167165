internal import SnapshotDB

/// The data set every stress process works on: accounts whose balances always add up to the
/// same total, and a log holding exactly one transfer per commit, keyed by commit number.
///
/// Because each commit after the setup is exactly one transfer, a snapshot at commit `c` must
/// hold log entries for every commit in `(setupCommit, c]` and none after, and replaying the
/// log entries between two snapshots onto the first one's balances must give the second's.
enum Bank {
    static let accountsCollection = "accounts"
    static let logCollection = "log"
    static let metaCollection = "bank"
    static let infoKey = "info"
    static let initialBalance: Int64 = 1_000
    /// The changeset `info` keys a transfer sets, naming the two accounts it changed.
    static let fromInfoKey = "from"
    static let toInfoKey = "to"

    static func accountKey(_ index: Int) -> String { "a" + padded(UInt64(index), width: 5) }

    static func logKey(_ commit: UInt64) -> String { padded(commit, width: 12) }

    /// The index of the account stored under `key`, or `nil` for a key no account has.
    static func accountIndex(_ key: String) -> Int? {
        guard key.first == "a", key.count == 6 else { return nil }
        return Int(key.dropFirst())
    }

    private static func padded(_ number: UInt64, width: Int) -> String {
        let digits = String(number)
        return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
    }

    // MARK: Setup

    /// Creates the accounts in one commit, or returns what an earlier setup recorded.
    static func open(_ connection: Connection, accounts: Int) throws -> BankInfo {
        if let info = try load(connection) {
            guard info.accounts == accounts else {
                throw StressError("the bank has \(info.accounts) accounts, not \(accounts)")
            }
            return info
        }
        return try connection.readWrite { txn in
            let info = BankInfo(
                accounts: accounts, total: Int64(accounts) * initialBalance, setupCommit: txn.commit + 1)
            for index in 0..<accounts {
                try txn.set(
                    Account(balance: initialBalance), forKey: accountKey(index),
                    inCollection: accountsCollection)
            }
            try txn.set(info, forKey: infoKey, inCollection: metaCollection)
            return info
        }
    }

    /// What the setup commit recorded, or `nil` before the setup.
    static func load(_ connection: Connection) throws -> BankInfo? {
        try connection.read { try $0.value(forKey: infoKey, inCollection: metaCollection, as: BankInfo.self) }
    }

    // MARK: Transfers

    /// What a writer's transaction does besides the transfer.
    enum Variant: CaseIterable {
        /// The transfer alone; commits.
        case plain
        /// The transfer, then `rollback()`: must produce no commit and no changeset.
        case rolledBack
        /// The transfer, plus a savepoint that corrupts a third account and writes a stray log
        /// entry, then throws: the savepoint must vanish from the data and from the changeset.
        case failedSavepoint
    }

    private struct SavepointFailure: Error {}

    /// Moves a random amount between two random accounts and logs it under the new commit
    /// number, in one read-write transaction; returns the transfer once committed, `nil` when
    /// the variant rolled it back.
    static func transfer(
        on connection: Connection, bank: BankInfo, writer: String, variant: Variant,
        using random: inout SplitMix64
    ) throws -> Transfer? {
        let from = Int.random(in: 0..<bank.accounts, using: &random)
        var to = Int.random(in: 0..<bank.accounts - 1, using: &random)
        if to >= from { to += 1 }
        let requested = Int64.random(in: 1...100, using: &random)
        let decoy = Int.random(in: 0..<bank.accounts, using: &random)
        return try connection.readWrite { txn -> Transfer? in
            var source = try account(from, in: txn)
            var target = try account(to, in: txn)
            let amount = min(requested, source.balance)
            source.balance -= amount
            target.balance += amount
            // The transaction started from `txn.commit`; if it commits, it is the next one.
            let commit = txn.commit + 1
            let transfer = Transfer(commit: commit, from: from, to: to, amount: amount, writer: writer)
            try txn.set(source, forKey: accountKey(from), inCollection: accountsCollection)
            try txn.set(target, forKey: accountKey(to), inCollection: accountsCollection)
            try txn.set(transfer, forKey: logKey(commit), inCollection: logCollection)
            txn.info = [fromInfoKey: accountKey(from), toInfoKey: accountKey(to)]
            switch variant {
            case .plain:
                break
            case .rolledBack:
                txn.rollback()
                return nil
            case .failedSavepoint:
                do {
                    try txn.savepoint { inner in
                        var stray = try account(decoy, in: inner)
                        stray.balance += 1_000_000
                        try inner.set(stray, forKey: accountKey(decoy), inCollection: accountsCollection)
                        try inner.set(transfer, forKey: logKey(commit + 1), inCollection: logCollection)
                        throw SavepointFailure()
                    }
                } catch is SavepointFailure {}
            }
            return transfer
        }
    }

    private static func account(_ index: Int, in txn: ReadTransaction) throws -> Account {
        guard
            let account = try txn.value(
                forKey: accountKey(index), inCollection: accountsCollection, as: Account.self)
        else {
            throw StressError("account \(accountKey(index)) is missing at commit \(txn.commit)")
        }
        return account
    }

    // MARK: Reading a snapshot

    /// Every balance as of `txn`'s commit, in account order: through the connection's value
    /// cache (`enumerated == false`), or straight from SQLite by enumerating the collection.
    static func balances(in txn: ReadTransaction, bank: BankInfo, enumerated: Bool) throws -> [Int64] {
        guard enumerated else {
            return try (0..<bank.accounts).map { try account($0, in: txn).balance }
        }
        var balances: [Int64] = []
        balances.reserveCapacity(bank.accounts)
        try txn.enumerate(inCollection: accountsCollection, as: Account.self) { key, account, _ in
            guard accountIndex(key) == balances.count else {
                throw StressError("unexpected key '\(key)' in \(accountsCollection) at commit \(txn.commit)")
            }
            balances.append(account.balance)
        }
        guard balances.count == bank.accounts else {
            throw StressError(
                "\(balances.count) accounts instead of \(bank.accounts) at commit \(txn.commit)")
        }
        return balances
    }

    /// The transfers logged for the commits in `(after, through]`, read in `txn`.
    static func transfers(after: UInt64, through: UInt64, in txn: ReadTransaction) throws -> [Transfer] {
        guard through > after else { return [] }
        return try (after + 1...through).map { commit in
            guard
                let transfer = try txn.value(
                    forKey: logKey(commit), inCollection: logCollection, as: Transfer.self)
            else {
                throw StressError("no log entry for commit \(commit) at commit \(txn.commit)")
            }
            return transfer
        }
    }

    // MARK: Auditing

    /// Checks a whole snapshot from first principles and returns what is wrong: the setup record
    /// is there, the log holds exactly one entry per commit after the setup, numbered by commit,
    /// and replaying it from the initial balances gives exactly the stored balances, whose sum
    /// is the bank's total.
    static func audit(_ txn: ReadTransaction) throws -> [String] {
        guard let bank = try txn.value(forKey: infoKey, inCollection: metaCollection, as: BankInfo.self)
        else {
            return ["the bank's setup record is missing at commit \(txn.commit)"]
        }
        var problems: [String] = []
        let balances = try balances(in: txn, bank: bank, enumerated: true)
        let total = balances.reduce(0, +)
        if total != bank.total {
            problems.append("total \(total) at commit \(txn.commit), expected \(bank.total)")
        }

        var replayed = [Int64](repeating: initialBalance, count: bank.accounts)
        var expectedCommit = bank.setupCommit
        try txn.enumerate(inCollection: logCollection, as: Transfer.self) { key, transfer, stop in
            expectedCommit += 1
            guard key == logKey(expectedCommit), transfer.commit == expectedCommit,
                replayed.indices.contains(transfer.from), replayed.indices.contains(transfer.to)
            else {
                problems.append("log entry '\(key)' (\(transfer)) where commit \(expectedCommit) belongs")
                stop = true
                return
            }
            replayed[transfer.from] -= transfer.amount
            replayed[transfer.to] += transfer.amount
        }
        if problems.isEmpty, expectedCommit != txn.commit {
            problems.append("the log ends at commit \(expectedCommit), the commit counter is \(txn.commit)")
        }
        if problems.isEmpty, replayed != balances {
            problems.append("replaying the log does not give the balances at commit \(txn.commit)")
        }
        return problems
    }
}
