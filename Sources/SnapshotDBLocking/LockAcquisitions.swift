#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// How many locks the current thread took: every ``Mutex/withLock(_:)`` and the writer lock's
/// own (debug builds; release builds count nothing and read 0).
///
/// Per thread, so that a test can count what one call took (a one-row commit's lock
/// acquisitions) while the checkpointer and the watcher take locks on threads of their own.
/// The count is the value of a thread-specific pointer, so counting allocates nothing.
public enum LockAcquisitions {
    #if DEBUG
        private static let key: pthread_key_t = {
            var key = pthread_key_t()
            pthread_key_create(&key, nil)
            return key
        }()
    #endif

    /// The locks this thread took so far.
    public static var onThisThread: Int {
        #if DEBUG
            return Int(bitPattern: pthread_getspecific(key))
        #else
            return 0
        #endif
    }

    /// Counts one lock taken by this thread.
    @inline(__always)
    public static func count() {
        #if DEBUG
            pthread_setspecific(key, UnsafeRawPointer(bitPattern: onThisThread + 1))
        #endif
    }
}
