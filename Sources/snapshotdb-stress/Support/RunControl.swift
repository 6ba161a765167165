internal import Foundation
internal import SnapshotDBLocking

internal import struct Synchronization.Atomic

/// The clock of one run: when it started, when the workload must stop, and an early stop for
/// fatal errors.
final class RunControl: Sendable {
    let start: ContinuousClock.Instant
    let deadline: ContinuousClock.Instant
    private let stopped = Atomic<Bool>(false)

    init(duration: Duration) {
        start = .now
        deadline = start + duration
    }

    /// Whether workers should start another step.
    var shouldContinue: Bool {
        !stopped.load(ordering: .relaxed) && ContinuousClock.now < deadline
    }

    /// Ends the workload early.
    func stop() { stopped.store(true, ordering: .relaxed) }

    /// The instant `fraction` of the way through the run.
    func instant(at fraction: Double) -> ContinuousClock.Instant {
        start + (deadline - start) * fraction
    }

    /// Seconds since the run started.
    var elapsedSeconds: Double { (ContinuousClock.now - start).seconds }

    /// Waits until `instant`, the deadline or an early stop, whichever comes first, checking
    /// every `step`. A wait for a point in time, never a stand-in for synchronization.
    func wait(until instant: ContinuousClock.Instant, step: Duration = .milliseconds(20)) {
        let end = min(instant, deadline)
        while !stopped.load(ordering: .relaxed) {
            let now = ContinuousClock.now
            guard now < end else { return }
            Thread.sleep(forTimeInterval: min(end - now, step).seconds)
        }
    }
}
