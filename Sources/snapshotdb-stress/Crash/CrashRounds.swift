internal import Foundation
internal import SnapshotDB

/// What the crash rounds of a run did.
struct CrashReport: Codable, Sendable {
    /// Rounds whose child was killed and whose database was then checked.
    var rounds = 0
    /// Rounds after which every check passed.
    var survived = 0
    /// Rounds whose child was killed before it had opened the database.
    var killedBeforeReady = 0
    /// Commits acknowledged by children over all rounds, each checked after every later crash.
    var acknowledgedCommits = 0
    /// The commit counter after the last round.
    var lastCommit: UInt64 = 0
    /// The foreign SQLite that ran `PRAGMA integrity_check`.
    var integrityChecker = ""
}

/// Crash rounds: a child process makes transfers on its own database and acknowledges each
/// commit on a pipe; it is killed with `SIGKILL` at a random moment; the database is then
/// checked by a foreign SQLite (`PRAGMA integrity_check`) and reopened with SnapshotDB, which
/// must find the total intact and every acknowledged commit present (with `synchronous = FULL`,
/// an acknowledged commit survives the loss of the process).
struct CrashRounds {
    let path: String
    let executable: URL
    let accounts: Int
    let control: RunControl
    let violations: Violations
    let checker: IntegrityChecker?
    /// How the parent opens the crashed database (its logger goes to the run's capture).
    let configuration: Configuration
    var random: SplitMix64
    /// The child is killed this long after it starts, at most (uniformly at random).
    var maximumKillDelay: Duration = .milliseconds(600)
    /// No round starts when less than this is left of the run.
    var roundBudget: Duration = .seconds(1)

    /// Every acknowledged commit so far, by commit number.
    private var acknowledged: [UInt64: Transfer] = [:]

    init(
        path: String, executable: URL, accounts: Int, control: RunControl, violations: Violations,
        checker: IntegrityChecker?, configuration: Configuration, random: SplitMix64
    ) {
        self.path = path
        self.executable = executable
        self.accounts = accounts
        self.control = control
        self.violations = violations
        self.checker = checker
        self.configuration = configuration
        self.random = random
    }

    mutating func run() -> CrashReport {
        var report = CrashReport(integrityChecker: checker?.name ?? "none")
        guard
            violations.check(
                checker != nil, "crash rounds: neither sqlite3 nor python3 found for integrity_check")
        else { return report }
        do {
            do {
                let database = try Database(path: path, configuration: configuration)
                _ = try Bank.open(database.newConnection(name: "crash-setup"), accounts: accounts)
            }
            while control.shouldContinue, control.deadline - .now > roundBudget {
                try round(&report)
            }
        } catch {
            violations.record("crash rounds: \(error)")
        }
        report.acknowledgedCommits = acknowledged.count
        return report
    }

    private mutating func round(_ report: inout CrashReport) throws {
        let seed = random.next()
        let delay = Duration.nanoseconds(
            Int64.random(in: 0...Int64(maximumKillDelay.nanoseconds), using: &random))
        let child = try ChildProcess(
            executable: executable, arguments: ["crash-child", "--db", path, "--seed", String(seed)])
        // The random moment of the crash: wall-clock time by design.
        Thread.sleep(forTimeInterval: delay.seconds)
        child.killNow()
        let result = child.wait()
        report.rounds += 1
        let roundName =
            "crash round \(report.rounds) (pid \(child.processIdentifier), "
            + "killed after \(formatSeconds(delay.seconds)))"
        let errorText = String(decoding: result.errorOutput, as: UTF8.self)
        guard
            violations.check(
                result.termination == .signaled(SIGKILL),
                "\(roundName): the child \(result.termination) before it was killed: \(errorText)")
        else { return }

        // Only complete lines count: a line cut short by the kill was never acknowledged.
        let text = String(decoding: result.output, as: UTF8.self)
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        lines.removeLast()
        var isReady = false
        var failed = false
        for line in lines {
            let fields = line.split(separator: " ")
            if fields.first == "ready" {
                isReady = true
                continue
            }
            guard fields.count == 6, fields[0] == "ack", let commit = UInt64(fields[1]),
                let from = Int(fields[2]),
                let to = Int(fields[3]), let amount = Int64(fields[4])
            else {
                failed = true
                violations.record("\(roundName): unreadable line from the child: '\(line)'")
                continue
            }
            let transfer = Transfer(
                commit: commit, from: from, to: to, amount: amount, writer: String(fields[5]))
            if let earlier = acknowledged[commit], earlier != transfer {
                failed = true
                violations.record(
                    "\(roundName): commit \(commit) acknowledged twice (\(earlier) then \(transfer)): "
                        + "an acknowledged commit was lost and its number reused")
            }
            acknowledged[commit] = transfer
        }
        if !isReady { report.killedBeforeReady += 1 }

        if !verify(roundName, report: &report) { failed = true }
        if !failed { report.survived += 1 }
    }

    /// Checks the crashed database; returns whether every check passed.
    private func verify(_ roundName: String, report: inout CrashReport) -> Bool {
        var passed = true
        if let checker, let problems = checker.problems(at: path) {
            violations.record("\(roundName): integrity_check failed: \(problems)")
            passed = false
        }
        do {
            let database = try Database(path: path, configuration: configuration)
            let connection = database.newConnection(name: "crash-verifier")
            let acknowledged = self.acknowledged
            passed =
                try connection.read { txn in
                    try check(txn, acknowledged: acknowledged, roundName: roundName)
                } && passed
            report.lastCommit = database.latestCommit
        } catch {
            violations.record("\(roundName): reopening after the crash failed: \(error)")
            passed = false
        }
        return passed
    }

    /// Audits the whole bank, then checks that every acknowledged commit is there as
    /// acknowledged.
    private func check(_ txn: ReadTransaction, acknowledged: [UInt64: Transfer], roundName: String) throws
        -> Bool
    {
        var problems = try Bank.audit(txn)
        let lost = acknowledged.keys.filter { $0 > txn.commit }.sorted()
        if !lost.isEmpty {
            problems.append(
                "acknowledged commits \(BookmarkChecks.summary(lost)) are lost: "
                    + "the counter is at \(txn.commit)"
            )
        }
        for (commit, transfer) in acknowledged.sorted(by: { $0.key < $1.key }) where commit <= txn.commit {
            let stored = try txn.value(
                forKey: Bank.logKey(commit), inCollection: Bank.logCollection, as: Transfer.self)
            if stored != transfer {
                problems.append(
                    "acknowledged commit \(commit) \(transfer) is stored as "
                        + (stored.map { "\($0)" } ?? "nothing")
                )
            }
        }
        for problem in problems { violations.record("\(roundName): \(problem)") }
        return problems.isEmpty
    }
}
