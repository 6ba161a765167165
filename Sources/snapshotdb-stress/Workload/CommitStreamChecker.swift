internal import Dispatch
internal import SnapshotDB
internal import SnapshotDBLocking

/// Follows `Database.changes()` for the whole run and checks every changeset on its own: the
/// commits arrive consecutively, each is local, and each lists exactly the two accounts and
/// the one log entry its transfer wrote (a failed savepoint's writes must not leak into it).
final class CommitStreamChecker: Sendable {
    private struct State {
        var lastCommit: UInt64
        var received = 0
        var target: UInt64?
        var streamEnded = false
    }

    private let state: Mutex<State>
    private let reachedTarget = DispatchSemaphore(value: 0)
    private let violations: Violations
    private let task = Mutex<Task<Void, Never>?>(nil)

    /// Subscribes now; the first changeset expected is `after + 1`.
    init(database: Database, after commit: UInt64, violations: Violations) {
        self.state = Mutex(State(lastCommit: commit))
        self.violations = violations
        let stream = database.changes()
        let task = Task.detached { [self] in
            for await changeset in stream { receive(changeset) }
            endOfStream()
        }
        self.task.withLock { $0 = task }
    }

    private func receive(_ changeset: Changeset) {
        let commit = changeset.commit
        let (expected, reached) = state.withLock { state in
            let expected = state.lastCommit + 1
            state.lastCommit = max(state.lastCommit, commit)
            state.received += 1
            return (expected, state.target.map { state.lastCommit >= $0 } ?? false)
        }
        violations.check(
            commit == expected,
            "changes(): received commit \(commit), expected \(expected) (gap or duplicate)")
        check(changeset)
        if reached { reachedTarget.signal() }
    }

    private func check(_ changeset: Changeset) {
        let commit = changeset.commit
        guard
            violations.check(!changeset.isExternal, "changes(): local commit \(commit) delivered as external")
        else { return }
        let from = changeset.info[Bank.fromInfoKey]
        let to = changeset.info[Bank.toInfoKey]
        let accounts = Set([from, to].compactMap { $0 })
        violations.check(
            changeset.setKeys[Bank.accountsCollection] == accounts && accounts.count == 2,
            "changes(): commit \(commit) by \(changeset.connectionName ?? "?") lists accounts "
                + "\(changeset.setKeys[Bank.accountsCollection]?.sorted() ?? []), "
                + "expected \(accounts.sorted())"
        )
        violations.check(
            changeset.setKeys[Bank.logCollection] == [Bank.logKey(commit)],
            "changes(): commit \(commit) lists log keys "
                + "\(changeset.setKeys[Bank.logCollection]?.sorted() ?? [])"
        )
        violations.check(
            changeset.setKeys.count == 2 && changeset.removedKeys.isEmpty
                && changeset.clearedCollections.isEmpty
                && !changeset.clearedAllCollections,
            "changes(): commit \(commit) changed more than one transfer: "
                + "\(changeset.changedCollections.sorted())"
        )
        violations.check(
            changeset.connectionName?.hasPrefix("writer-") == true,
            "changes(): commit \(commit) names connection \(changeset.connectionName ?? "nil")")
    }

    private func endOfStream() {
        let waiting = state.withLock { state in
            state.streamEnded = true
            return state.target != nil
        }
        if waiting { reachedTarget.signal() }
    }

    /// Waits (up to `timeout`) until every commit through `commit` was received, then
    /// unsubscribes and returns how many changesets arrived.
    func finish(through commit: UInt64, timeout: Duration) -> Int {
        let pending = state.withLock { state in
            state.target = commit
            return state.lastCommit < commit && !state.streamEnded
        }
        if pending {
            _ = reachedTarget.wait(timeout: .now() + timeout.seconds)
        }
        task.withLock { $0?.cancel() }
        let final = state.withLock { $0 }
        violations.check(
            final.lastCommit >= commit,
            "changes(): the stream stopped at commit \(final.lastCommit) of \(commit)"
                + (final.streamEnded ? " (it was finished early)" : ""))
        return final.received
    }
}
