internal import Dispatch

/// The receivers of one kind of event (the database's changesets, the checkpoint monitor's
/// events): async streams and callbacks on a queue, each under an id that unsubscribes it.
///
/// A value guarded by its owner's lock. Delivering never calls out while that lock is held
/// except to yield into a stream or to enqueue a callback; streams that must be finished are
/// handed back, because finishing runs their termination handlers, which take the lock.
struct Subscribers<Element: Sendable> {
    enum Subscriber {
        case stream(AsyncStream<Element>.Continuation)
        case observer(DispatchQueue, @Sendable (Element) -> Void)
    }

    /// Whether a stream whose buffer is full is finished (for changesets, where a silent gap
    /// would be a lie) rather than left to drop elements by its buffering policy (for
    /// monitor events, where the newest matter most).
    let finishesOverflowingStreams: Bool
    private var entries: [Int: Subscriber] = [:]
    private var nextID = 0

    init(finishesOverflowingStreams: Bool) {
        self.finishesOverflowingStreams = finishesOverflowingStreams
    }

    var isEmpty: Bool { entries.isEmpty }

    /// Adds `subscriber` and returns its id.
    mutating func add(_ subscriber: Subscriber) -> Int {
        nextID += 1
        entries[nextID] = subscriber
        return nextID
    }

    /// Removes a subscriber; returns it, so that a stream can be finished outside the lock.
    mutating func remove(_ id: Int) -> Subscriber? {
        entries.removeValue(forKey: id)
    }

    /// Removes the streams and returns them, to be finished outside the lock, and delivers
    /// `element` to the observers, which stay.
    mutating func removeStreams(notifyingObservers element: Element) -> [AsyncStream<Element>.Continuation] {
        var streams: [AsyncStream<Element>.Continuation] = []
        for (id, subscriber) in entries {
            switch subscriber {
            case .stream(let continuation):
                entries[id] = nil
                streams.append(continuation)
            case .observer(let queue, let body):
                queue.async { body(element) }
            }
        }
        return streams
    }

    /// Removes every subscriber and returns their streams, to be finished outside the lock.
    mutating func removeAll() -> [AsyncStream<Element>.Continuation] {
        defer { entries = [:] }
        return entries.values.compactMap {
            if case .stream(let continuation) = $0 { continuation } else { nil }
        }
    }

    /// Hands `element` to every subscriber; returns the streams that overflowed (already
    /// removed) when overflowing streams are finished.
    mutating func deliver(_ element: Element) -> [AsyncStream<Element>.Continuation] {
        var overflowed: [AsyncStream<Element>.Continuation] = []
        for (id, subscriber) in entries {
            switch subscriber {
            case .stream(let continuation):
                if case .dropped = continuation.yield(element), finishesOverflowingStreams {
                    entries[id] = nil
                    overflowed.append(continuation)
                }
            case .observer(let queue, let body):
                queue.async { body(element) }
            }
        }
        return overflowed
    }
}
