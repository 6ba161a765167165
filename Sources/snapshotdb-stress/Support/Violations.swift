internal import SnapshotDBLocking

/// Every broken invariant of a run, in the order they were found.
final class Violations: Sendable {
    private struct State {
        var messages: [String] = []
        var count = 0
    }

    /// How many messages are kept; the count goes on past it.
    static let keptMessages = 200

    private let state = Mutex(State())

    /// Records a broken invariant and echoes it on standard error at once, so a long run shows
    /// the first failure when it happens.
    func record(_ message: String) {
        let isKept = state.withLock { state in
            state.count += 1
            guard state.messages.count < Self.keptMessages else { return false }
            state.messages.append(message)
            return true
        }
        if isKept { StandardError.write("violation: \(message)") }
    }

    /// Records `message` unless `condition` holds; returns `condition`.
    @discardableResult
    func check(_ condition: Bool, _ message: @autoclosure () -> String) -> Bool {
        if !condition { record(message()) }
        return condition
    }

    var count: Int { state.withLock { $0.count } }
    var messages: [String] { state.withLock { $0.messages } }
}
