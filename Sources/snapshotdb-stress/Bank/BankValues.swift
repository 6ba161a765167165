/// One account of the bank.
struct Account: Codable, Hashable, Sendable {
    var balance: Int64
}

/// One transfer, stored in the log under the number of the commit that made it.
struct Transfer: Codable, Hashable, Sendable {
    let commit: UInt64
    let from: Int
    let to: Int
    let amount: Int64
    let writer: String
}

/// What the setup commit recorded about the bank, so every process checks the same total.
struct BankInfo: Codable, Hashable, Sendable {
    let accounts: Int
    let total: Int64
    /// The commit that created the accounts; every later commit is one transfer.
    let setupCommit: UInt64
}
