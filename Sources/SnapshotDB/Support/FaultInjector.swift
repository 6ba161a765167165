internal import SnapshotDBLocking

internal import struct Synchronization.Atomic

/// Faults that tests inject into branches the release code cannot reach on demand: a bookmark
/// that cannot be taken again during a WAL reset, a `BEGIN` that fails during an advance, a
/// `COMMIT`, a `ROLLBACK` or a history purge step that fails.
///
/// Per database, so that tests running in parallel do not see each other's faults. Only debug
/// builds check it: in release builds ``shouldFail(_:)`` is a constant `false`.
final class FaultInjector: Sendable {
    enum Fault: Hashable, Sendable {
        /// ``ConnectionCore/reseatBookmark(at:)`` finds another commit than its bookmark's.
        case reseat
        /// The `BEGIN` of a read transaction fails (as an I/O error would).
        case beginRead
        /// The writer's `COMMIT` fails (as a full disk at commit would).
        case commit
        /// A savepoint's `ROLLBACK TO` fails.
        case savepointRollback
        /// A `ROLLBACK` on a connection's handle fails (as an I/O error would); the handle is
        /// left inside its transaction and marked broken.
        case rollback
        /// A history purge step's `DELETE` fails (as a full disk would).
        case purge
    }

    #if DEBUG
        private let armed = Mutex<[Fault: Int]>([:])
        /// Whether any fault was ever armed: until then a check takes no lock, so that a debug
        /// build takes the locks a release build takes (the commit's count, `CommitEventTests`).
        private let everArmed = Atomic<Bool>(false)
    #endif

    /// Makes the next `times` checks of `fault` fail (debug builds; does nothing in release).
    func arm(_ fault: Fault, times: Int = 1) {
        #if DEBUG
            armed.withLock { $0[fault, default: 0] += times }
            everArmed.store(true, ordering: .releasing)
        #endif
    }

    /// Whether the code at `fault` must fail now; consumes one armed failure.
    func shouldFail(_ fault: Fault) -> Bool {
        #if DEBUG
            guard everArmed.load(ordering: .acquiring) else { return false }
            return armed.withLock { armed in
                guard let count = armed[fault], count > 0 else { return false }
                armed[fault] = count - 1
                return true
            }
        #else
            return false
        #endif
    }

    /// The error an injected fault throws: SQLite's I/O error, mapped as a real one is
    /// (`ioError`), so that tests see the code a failing device gives.
    static func error(_ fault: Fault) -> DatabaseError {
        DatabaseError.sqliteIOError("injected fault: \(fault)")
    }
}
