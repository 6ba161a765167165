internal import Dispatch
internal import Foundation

/// The conversions of `Duration` that SnapshotDB's C and Foundation calls need, in one place.
/// Each is computed from the integer components, so no duration can overflow or trap.
extension Duration {
    /// The duration in the 32-bit milliseconds `sqlite3_busy_timeout` takes: clamped to
    /// `0...Int32.max` (about 24 days), negative durations giving 0 (do not wait).
    var sqliteMilliseconds: Int32 {
        let (seconds, attoseconds) = components
        guard seconds >= 0, attoseconds >= 0 else { return 0 }
        let (milliseconds, overflow) = seconds.multipliedReportingOverflow(by: 1_000)
        guard !overflow else { return .max }
        let total = milliseconds.addingReportingOverflow(attoseconds / 1_000_000_000_000_000)
        return total.overflow ? .max : Int32(clamping: total.partialValue)
    }

    /// The moment this duration from now, for a wait on a lock: clamped, as the busy timeout
    /// SQLite takes is (``sqliteMilliseconds``, about 24 days), since Foundation's
    /// `NSCondition.wait(until:)` traps on a date past what its `timespec` holds.
    var deadlineFromNow: Date {
        Date(timeIntervalSinceNow: min(timeInterval, TimeInterval(Int32.max) / 1_000))
    }

    /// The duration in seconds, for `Date` and for people (negative durations give 0).
    var timeInterval: TimeInterval {
        let (seconds, attoseconds) = components
        guard seconds >= 0, attoseconds >= 0 else { return 0 }
        return TimeInterval(seconds) + TimeInterval(attoseconds) * 1e-18
    }

    /// The duration as a Dispatch interval, clamped to what `Int` nanoseconds hold.
    var dispatchInterval: DispatchTimeInterval {
        let (seconds, attoseconds) = components
        guard seconds >= 0, attoseconds >= 0 else { return .nanoseconds(0) }
        let (nanoseconds, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        guard !overflow else { return .nanoseconds(.max) }
        let total = nanoseconds.addingReportingOverflow(attoseconds / 1_000_000_000)
        return .nanoseconds(total.overflow ? .max : Int(total.partialValue))
    }
}
