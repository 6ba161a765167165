internal import Dispatch
internal import Foundation
internal import SnapshotDBLocking

internal import struct Synchronization.Atomic

/// How much durable history a database file keeps: the newest ``commits`` commits, of at most
/// ``age``, in at most about ``bytes``; whichever bound is tightest wins.
///
/// The bound is hard. History past it is purged even when a named ``Consumer`` has not
/// acknowledged it; such a consumer is *expired* in the same SQLite transaction as the purge
/// (never dropped in a race), and its next read throws
/// ``DatabaseError/Code/consumerExpired``. A position saved with
/// ``ReadTransaction/position()`` that falls past the bound gets
/// ``DatabaseError/Code/historyUnavailable``. A bookmark gets the changesets this process
/// already published from memory, whatever was purged since (a test shows it): its own
/// commits, and the commits of other processes it had read. Commits of another process that
/// were purged before this process read them arrive as one external changeset (keys unknown).
///
/// The defaults suit a phone: 10,000 commits, 7 days, 16 MiB. Purging runs off the commit path
/// (on the database's checkpoint queue, after about every ``commits``/8 commits, at most every
/// 256), in steps of at most `HistoryPurger.stepRows` rows, each its own short write
/// transaction that never waits for a writer. The age bound is enforced when commits are made:
/// a database that nobody writes keeps its history.
public struct HistoryRetention: Sendable, Equatable {
    /// How many of the newest commits are kept at most.
    public var commits: Int
    /// How old the oldest kept commit may be at most.
    public var age: Duration
    /// About how many bytes of history rows are kept at most (the sizes of their `info` and
    /// `changes` columns plus 48 bytes a row, estimated from the newest 256 rows).
    public var bytes: Int

    /// A retention bound; the defaults suit a phone.
    public init(commits: Int = 10_000, age: Duration = .seconds(7 * 24 * 3600), bytes: Int = 16 << 20) {
        self.commits = commits
        self.age = age
        self.bytes = bytes
    }
}

extension Database {
    /// Purges the history past ``Configuration/historyRetention`` now, in the same bounded
    /// steps as the automatic purge, and returns how many rows it removed. The automatic purge
    /// runs after commits; call this to reclaim the space at once (before a backup, say).
    ///
    /// - Throws: `databaseClosed`; `busy` when another process kept SQLite's write lock; the
    ///   error of a step that failed otherwise (`diskFull`, `ioError`, `corrupt`, …), after the
    ///   steps before it were committed.
    @discardableResult
    public func purgeHistory() throws(DatabaseError) -> Int {
        try checkOpen()
        try checkWritable("purgeHistory()")
        let before = historyPurger.rowsPurged.load(ordering: .acquiring)
        switch historyPurger.purgeNow(self) {
        case .busy:
            throw DatabaseError(
                .busy, "the history of \(path) could not be purged: another process is writing")
        case .failed(let error): throw error
        case .done, .more: break
        }
        return historyPurger.rowsPurged.load(ordering: .acquiring) - before
    }
}

/// Purges history past ``Configuration/historyRetention`` in bounded steps, off the commit path.
final class HistoryPurger: Sendable {
    /// At most this many rows are deleted by one purge step (one write transaction).
    static let stepRows = 1_000

    private struct State {
        var lastRequest: UInt64 = 0
        var isQueued = false
    }

    private let state = Mutex(State())
    /// `State.lastRequest`, readable without the lock (stored with it).
    private let lastRequest = Atomic<UInt64>(0)
    /// How many purge steps ran, and how many rows they removed.
    let steps = Atomic<Int>(0)
    let rowsPurged = Atomic<Int>(0)

    /// Called by the writer after each commit: asks for a purge every so many commits.
    func didCommit(_ commit: UInt64, database: Database) {
        let interval = UInt64(max(1, min(256, database.configuration.historyRetention.commits / 8)))
        // Not due yet: no lock (most commits).
        guard commit >= lastRequest.load(ordering: .relaxed) &+ interval else { return }
        let request = state.withLock { state -> Bool in
            guard !state.isQueued, commit >= state.lastRequest + interval else { return false }
            state.lastRequest = commit
            lastRequest.store(commit, ordering: .relaxed)
            state.isQueued = true
            return true
        }
        if request { queue(database) }
    }

    private func queue(_ database: Database, attempt: Int = 0) {
        let weakDatabase = WeakDatabase(database)
        let work: @Sendable () -> Void = { [self] in
            guard let database = weakDatabase.database, !database.isClosed else {
                state.withLock { $0.isQueued = false }
                return
            }
            let outcome = database.checkpointer.withCheckpointHandle { handle in
                handle.map { step(database, handle: $0) } ?? .done
            }
            switch outcome {
            case .more: queue(database)
            case .busy: queue(database, attempt: attempt + 1)
            // A failed step (a full disk, say) is not retried until the next request: the
            // history only grows past its bound meanwhile, and `purgeHistory()` reports it.
            case .done, .failed: state.withLock { $0.isQueued = false }
            }
        }
        // At once unless retrying after a busy step: a test (or `purgeHistory()`) that flushes
        // the checkpoint queue then finds the steps done.
        if attempt == 0 {
            database.checkpointer.queue.async(execute: work)
        } else {
            let delay = Duration.milliseconds(min(200, 5 << min(attempt, 6)))
            database.checkpointer.queue.asyncAfter(deadline: .now() + delay.dispatchInterval, execute: work)
        }
    }

    /// Whether a purge is queued or running (for tests).
    var isQueued: Bool { state.withLock { $0.isQueued } }

    enum Outcome: Equatable {
        case done
        case more
        case busy
        case failed(DatabaseError)
    }

    /// Runs purge steps until the history is within the bound (or a step is busy), on the
    /// checkpoint queue; returns how the last step ended.
    @discardableResult
    func purgeNow(_ database: Database) -> Outcome {
        database.checkpointer.withCheckpointHandle { handle in
            guard let handle else { return .done }
            var outcome = Outcome.more
            while outcome == .more { outcome = step(database, handle: handle) }
            return outcome
        }
    }

    /// One purge step on `handle`; never waits more than a few milliseconds for a writer.
    ///
    /// The bound is first checked in a read transaction, which takes no lock a writer waits
    /// for and reads a few pages: only a history past its bound costs a write.
    func step(_ database: Database, handle: SQLiteHandle) -> Outcome {
        let retention = database.configuration.historyRetention
        do {
            try handle.statement(.begin).execute()
            let (cutoff, floor) = try Self.cutoff(retention, handle: handle)
            try handle.rollback()
            guard cutoff > floor else { return .done }
        } catch {
            handle.rollback(after: "an error checking the history's bound", logger: database.logger)
            return error.code == .busy ? .busy : .failed(error)
        }
        let deadline = Date(timeIntervalSinceNow: Checkpointer.resetWait.timeInterval)
        guard database.writer.lock.lockWithPriority(before: deadline) else { return .busy }
        defer { database.writer.lock.unlock() }
        do throws(DatabaseError) {
            try handle.withBusyTimeout(Checkpointer.resetWait, restoring: database.configuration.busyTimeout)
            {
                () throws(DatabaseError) in
                try handle.statement(.beginImmediate).execute()
            }
            defer { handle.rollback(after: "purging the history", logger: database.logger) }
            // (A commit of this process: the writer turns must not take it for another's.)
            handle.lookUpWALIndex()
            let headerBefore = handle.walIndexHeader()
            let (cutoff, floor) = try Self.cutoff(retention, handle: handle)
            guard cutoff > floor else { return .done }
            let target = min(cutoff, floor + UInt64(Self.stepRows))
            if database.faults.shouldFail(.purge) { throw FaultInjector.error(.purge) }
            try handle.execute("DELETE FROM snapshotdb_history WHERE number < \(target)")
            let removed = Int(handle.changes)
            // In the purge's own transaction: a consumer is never dropped in a race with its
            // acknowledgement (which takes the same write lock).
            try handle.execute(
                "UPDATE snapshotdb_consumers SET expired = 1 WHERE expired = 0 AND position < \(target)")
            try handle.statement(.commit).execute()
            database.writerTurns.didCommit(on: handle, headerBefore: headerBefore)
            steps.add(1, ordering: .relaxed)
            rowsPurged.add(removed, ordering: .relaxed)
            // A full step may have left more past the age bound, which it looks for one step's
            // rows at a time.
            return target < cutoff || removed >= Self.stepRows ? .more : .done
        } catch {
            return error.code == .busy ? .busy : .failed(error)
        }
    }

    /// How many of the newest rows give the average row size of the bytes bound's estimate.
    static let sampleRows = 256

    /// The oldest commit the bound keeps (the new floor of the history: everything before it is
    /// purged), and the floor now. Reads a few pages, whatever the history's size:
    /// - commits: the newest row's number less the bound;
    /// - age: the dates of the rows the next step would purge (commit numbers grow with their
    ///   dates; a clock set back only delays the purge);
    /// - bytes: the rows past the floor times the average size of the newest rows.
    static func cutoff(_ retention: HistoryRetention, handle: SQLiteHandle) throws(DatabaseError)
        -> (cutoff: UInt64, floor: UInt64)
    {
        // Commit numbers are never negative; a row a foreign client wrote below zero is below
        // every cutoff (and purged), and never makes the arithmetic below overflow.
        let latest = try handle.int64("SELECT max(number) FROM snapshotdb_history WHERE number >= 0") ?? 0
        let floor = try handle.int64("SELECT min(number) FROM snapshotdb_history WHERE number >= 0") ?? 0
        var cutoff = max(floor, latest - Int64(max(0, retention.commits)))
        let oldest = Date().timeIntervalSince1970 - retention.age.timeInterval
        if let tooOld = try handle.int64(
            """
            SELECT max(number) FROM snapshotdb_history
            WHERE number >= \(floor) AND number < min(\(latest), \(floor) + \(stepRows)) AND date < \(oldest)
            """)
        {
            cutoff = max(cutoff, tooOld)
        }
        let rows = latest - floor
        if rows > 0,
            let sample = try handle.int64(
                """
                SELECT avg(coalesce(length(info), 0) + coalesce(length(changes), 0) + 48) FROM snapshotdb_history
                WHERE number > \(latest - Int64(sampleRows))
                """), sample > 0
        {
            let kept = Int64(max(0, retention.bytes)) / sample
            if rows > kept { cutoff = max(cutoff, latest - kept) }
        }
        // The newest row is the commit counter: it is never purged.
        return (UInt64(max(0, min(cutoff, latest))), UInt64(max(0, floor)))
    }
}

extension HistoryPurger: CommitSubscriber {
    /// A commit of this process may make a purge due (commits of other processes are theirs to
    /// purge after).
    func commitDidHappen(_ event: CommitEvent, in database: Database) {
        if event.isLocal { didCommit(event.commit, database: database) }
    }
}
