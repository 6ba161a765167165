internal import struct Synchronization.Atomic

/// Counts of what a database did, for tests that check a claim about the code rather than a
/// timing ("an advance visits no other connection's record"). Debug builds only: in release
/// builds ``count(_:)`` does nothing and every count reads 0.
///
/// Atomics, not a lock: a counter must not add to the lock acquisitions it may be read beside.
final class DebugCounters: Sendable {
    enum Counter: CaseIterable, Sendable {
        /// A connection's record read while walking the database's connections (the checkpoint
        /// monitor's look at every snapshot, a close): never on a commit's or an advance's path.
        case connectionRecordVisits
    }

    #if DEBUG
        private let connectionRecordVisits = Atomic<Int>(0)
    #endif

    /// Adds `amount` to `counter` (debug builds).
    @inline(__always)
    func count(_ counter: Counter, _ amount: Int = 1) {
        #if DEBUG
            switch counter {
            case .connectionRecordVisits: connectionRecordVisits.add(amount, ordering: .relaxed)
            }
        #endif
    }

    /// The count of `counter` so far (0 in release builds).
    func value(_ counter: Counter) -> Int {
        #if DEBUG
            switch counter {
            case .connectionRecordVisits: return connectionRecordVisits.load(ordering: .relaxed)
            }
        #else
            return 0
        #endif
    }
}
