internal import struct Synchronization.Atomic

/// What may stop SQLite's work inside one read transaction's closure: a deadline
/// (``Configuration/readTimeLimit``, ``Connection/read(timeLimit:_:)-7pp46``) and the cancellation of
/// the task that asked for an `async` read.
///
/// It is checked by SQLite's progress handler (`sqlite3_progress_handler`) every
/// ``checkInterval`` virtual-machine steps while the closure runs, on the connection's own
/// handle: a handler that answers "stop" makes the running statement fail with
/// `SQLITE_INTERRUPT`. A SELECT stopped this way ends alone; the read transaction stays open, so
/// a bookmark keeps its snapshot. (`sqlite3_interrupt` was the other way; it stops every
/// statement of the handle, and one asked for just as a read ends can stop the *next* read.)
final class ReadInterruption: Sendable {
    /// The virtual-machine steps between two checks: a check reads the clock (about 25 ns), and
    /// a thousand steps take some microseconds, so the check costs about a percent and an
    /// interrupt lands within microseconds.
    static let checkInterval: Int32 = 1_000

    enum Reason: Int {
        case none = 0
        case deadline = 1
        case cancelled = 2
    }

    let limit: Duration?
    private let deadline: ContinuousClock.Instant?
    private let cancellation: TaskCancellation?
    private let firedReason = Atomic<Int>(Reason.none.rawValue)

    /// Refuses a negative per-read limit, as the open refuses a negative
    /// ``Configuration/readTimeLimit``: a limit already past would stop the read before its
    /// first statement, which is never what the caller meant.
    static func check(_ limit: Duration?) throws(DatabaseError) {
        guard let limit, limit < .zero else { return }
        throw DatabaseError(.misuse, "read(timeLimit:) got \(limit); a time limit must be zero or more")
    }

    /// `nil` when there is nothing to check: no limit and no task to cancel.
    static func make(limit: Duration?, cancellation: TaskCancellation?) -> ReadInterruption? {
        guard limit != nil || cancellation != nil else { return nil }
        return ReadInterruption(limit: limit, cancellation: cancellation)
    }

    private init(limit: Duration?, cancellation: TaskCancellation?) {
        self.limit = limit
        self.deadline = limit.map { ContinuousClock.now + $0 }
        self.cancellation = cancellation
    }

    /// Why SQLite was stopped, if it was.
    var reason: Reason { Reason(rawValue: firedReason.load(ordering: .relaxed)) ?? .none }

    /// The progress handler's question: whether to stop now.
    func shouldStop() -> Bool {
        if cancellation?.isCancelled == true {
            firedReason.store(Reason.cancelled.rawValue, ordering: .relaxed)
            return true
        }
        if let deadline, ContinuousClock.now >= deadline {
            firedReason.store(Reason.deadline.rawValue, ordering: .relaxed)
            return true
        }
        return false
    }

    /// The error to throw for `error`, which ended the closure: `CancellationError` or a
    /// typed `interrupted` that names the limit when this interruption stopped SQLite, else
    /// `error` itself.
    func explain(_ error: any Error, connection: String) -> any Error {
        guard let interrupted = error as? DatabaseError, interrupted.code == .interrupted else {
            return error
        }
        return stopped(connection: connection, cause: interrupted) ?? error
    }

    /// The error of a read this interruption stopped (`CancellationError`, or `interrupted`
    /// naming the limit), or `nil` when it stopped nothing.
    func stopped(connection: String, cause: DatabaseError? = nil) -> (any Error)? {
        switch reason {
        case .cancelled:
            return CancellationError()
        case .deadline:
            let limit = limit.map { "\($0)" } ?? "?"
            return DatabaseError(
                .interrupted,
                "a read on connection '\(connection)' ran past its time limit of \(limit), and SQLite stopped it; "
                    + "the connection and its bookmark are unharmed",
                sqliteCode: cause?.sqliteCode, cause: cause)
        case .none:
            return nil
        }
    }
}

extension ReadInterruption: SQLiteProgressCheck {}
