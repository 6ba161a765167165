internal import Dispatch
internal import Foundation

/// An OS thread running one worker, joined with ``join()``.
///
/// Workers call SnapshotDB's blocking API, so they run on threads of their own rather than on
/// the two-thread cooperative pool of Swift concurrency, which they would starve.
final class WorkerThread: Sendable {
    private let finished = DispatchSemaphore(value: 0)

    init(name: String, _ body: @escaping @Sendable () -> Void) {
        let thread = Thread { [finished] in
            body()
            finished.signal()
        }
        thread.name = name
        thread.start()
    }

    /// Waits until the worker's body has returned.
    func join() { finished.wait() }
}
