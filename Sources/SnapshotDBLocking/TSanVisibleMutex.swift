#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A mutex over `pthread_mutex_t`, with the API SnapshotDB uses of `Synchronization.Mutex`
/// (`init(_:)`, `withLock(_:)`), for ThreadSanitizer builds only.
///
/// Swift 6.3's ThreadSanitizer on Linux does not see `Synchronization.Mutex` (a futex it does
/// not intercept), so every access a `Mutex` guards is reported as a race and real races drown
/// in the noise. TSan intercepts `pthread_mutex_lock`. `Scripts/tsan.sh` builds with
/// `-DSNAPSHOTDB_TSAN`, under which each module that uses `Mutex` declares
/// `typealias Mutex = TSanVisibleMutex` (see `Mutex+TSan.swift` in each), a module-level name
/// that shadows the imported one: no call site changes, and release and debug builds keep
/// `Synchronization.Mutex`.
///
/// `@unchecked Sendable`: `value` is only read or written between `pthread_mutex_lock` and
/// `pthread_mutex_unlock` of `mutex`, which the instance owns.
public final class TSanVisibleMutex<Value: ~Copyable>: @unchecked Sendable {
    private var value: Value
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>

    /// A mutex guarding `initialValue`.
    public init(_ initialValue: consuming sending Value) {
        value = initialValue
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` with exclusive access to the value.
    public func withLock<Result: ~Copyable, E: Error>(
        _ body: (inout sending Value) throws(E) -> sending Result
    ) throws(E)
        -> sending Result
    {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
