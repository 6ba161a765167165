#if canImport(Glibc)
    internal import Glibc
#elseif canImport(Darwin)
    internal import Darwin
#endif

/// The connections whose calls the current thread is running, innermost first.
///
/// A call on a connection runs on that connection's serial queue, usually on the caller's own
/// thread. A call made from inside it, on the same connection or on one that is already
/// running further out (`a.read { b.read { a.read { } } }`), would wait for a queue this
/// thread holds: libdispatch traps on that. `DispatchQueue.getSpecific` sees only the
/// innermost queue, so each call instead pushes a frame, on its own stack, onto a list that a
/// thread-specific pointer heads; a new call walks the list and is refused as misuse when it
/// finds its connection there. Costs two `pthread_setspecific` calls per call, no allocation.
enum ActiveConnections {
    private struct Frame {
        let connection: Int
        let outer: UnsafeMutableRawPointer?
    }

    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        let result = pthread_key_create(&key, nil)
        precondition(result == 0, "pthread_key_create failed: \(result)")
        return key
    }()

    /// Whether the current thread is inside a call on `connection`.
    static func contains(_ connection: Int) -> Bool {
        var next = pthread_getspecific(key)
        while let pointer = next {
            let frame = pointer.assumingMemoryBound(to: Frame.self)
            if frame.pointee.connection == connection { return true }
            next = frame.pointee.outer
        }
        return false
    }

    /// Runs `body` as a call on `connection`, on the current thread.
    static func running<T>(_ connection: Int, _ body: () throws -> T) rethrows -> T {
        let outer = pthread_getspecific(key)
        var frame = Frame(connection: connection, outer: outer)
        return try withUnsafeMutablePointer(to: &frame) { pointer in
            pthread_setspecific(key, pointer)
            defer { pthread_setspecific(key, outer) }
            return try body()
        }
    }
}
