internal import Dispatch
internal import SnapshotDBLocking

/// What became of a request to take a bookmark again at the same commit.
enum BookmarkReseat: Sendable {
    /// The bookmark's read transaction was begun again at the same commit.
    case reseated
    /// Nothing was done: the connection was busy, or its bookmark is elsewhere.
    case skipped
    /// The snapshot could not be taken again and the bookmark was released (never expected).
    case lost
}

/// One re-seat request handed to a connection's queue, which the checkpointer stops waiting
/// for after a deadline.
///
/// Once the deadline passed, a request that has not started never starts (the checkpointer is
/// about to release the WAL write lock that makes it safe); one that started is waited for, as
/// it takes microseconds.
final class ReseatAttempt: Sendable {
    private enum Phase {
        case pending
        case cancelled
        case running
        case finished(BookmarkReseat)
    }

    private let phase = Mutex(Phase.pending)
    private let done = DispatchSemaphore(value: 0)

    /// Called on the connection's queue: whether the re-seat may still run.
    func start() -> Bool {
        phase.withLock { phase in
            guard case .pending = phase else { return false }
            phase = .running
            return true
        }
    }

    /// Called on the connection's queue when the re-seat ran.
    func finish(_ outcome: BookmarkReseat) {
        phase.withLock { $0 = .finished(outcome) }
        done.signal()
    }

    /// Waits up to `timeout` for the request to start, then for it to finish.
    func wait(timeout: Duration) -> BookmarkReseat {
        if done.wait(timeout: .now() + timeout.dispatchInterval) == .timedOut {
            let cancelled = phase.withLock { phase in
                guard case .pending = phase else { return false }
                phase = .cancelled
                return true
            }
            if cancelled { return .skipped }
            done.wait()
        }
        return phase.withLock { phase in
            if case .finished(let outcome) = phase { return outcome }
            return .skipped
        }
    }
}
