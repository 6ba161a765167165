internal import SnapshotDBLocking

/// A value a worker thread hands back to the thread that joins it.
final class ResultBox<Value: Sendable>: Sendable {
    private let storage: Mutex<Value>

    init(_ value: Value) { storage = Mutex(value) }

    var value: Value {
        get { storage.withLock { $0 } }
        set { storage.withLock { $0 = newValue } }
    }

    /// Changes the value in place, under the lock (for results several workers add to).
    func modify(_ change: (inout Value) -> Void) { storage.withLock { change(&$0) } }
}
