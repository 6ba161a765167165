internal import struct Synchronization.Atomic

/// Counts of what a database did, for tests that check a claim about the code rather than a
/// timing ("an advance visits no other connection's record", "a commit is dispatched once").
/// Debug builds only: in release builds ``count(_:_:)`` does nothing and every count reads 0.
///
/// Atomics, not a lock: a counter must not add to the lock acquisitions it may be read beside.
final class DebugCounters: Sendable {
    enum Counter: CaseIterable, Sendable {
        /// A connection's record read while walking the database's connections (the checkpoint
        /// monitor's look at every snapshot, a close): never on a commit's or an advance's path.
        case connectionRecordVisits
        /// A ``CommitEvent`` handed to the ``CommitDispatcher``.
        case commitEventsDispatched
        /// The commit log's publishing step (``CommitLog/publish(through:loaded:)``) run.
        case publishSteps
        /// The checkpointer told of a commit (``Checkpointer/commitDidHappen(_:in:)``).
        case checkpointerToldOfCommits
        /// A live view's observation woken by a published commit (``ExtensionWakers``).
        case observationsWoken
    }

    #if DEBUG
        // (One atomic each: an `Atomic` is not copyable, so it cannot sit in an array.)
        private let connectionRecordVisits = Atomic<Int>(0)
        private let commitEventsDispatched = Atomic<Int>(0)
        private let publishSteps = Atomic<Int>(0)
        private let checkpointerToldOfCommits = Atomic<Int>(0)
        private let observationsWoken = Atomic<Int>(0)

        private func atomic<T>(_ counter: Counter, _ body: (borrowing Atomic<Int>) -> T) -> T {
            switch counter {
            case .connectionRecordVisits: body(connectionRecordVisits)
            case .commitEventsDispatched: body(commitEventsDispatched)
            case .publishSteps: body(publishSteps)
            case .checkpointerToldOfCommits: body(checkpointerToldOfCommits)
            case .observationsWoken: body(observationsWoken)
            }
        }
    #endif

    /// Adds `amount` to `counter` (debug builds).
    @inline(__always)
    func count(_ counter: Counter, _ amount: Int = 1) {
        #if DEBUG
            atomic(counter) { _ = $0.add(amount, ordering: .relaxed) }
        #endif
    }

    /// The count of `counter` so far (0 in release builds).
    func value(_ counter: Counter) -> Int {
        #if DEBUG
            return atomic(counter) { $0.load(ordering: .relaxed) }
        #else
            return 0
        #endif
    }
}
