#if SNAPSHOTDB_TSAN
    /// ThreadSanitizer builds (`Scripts/tsan.sh`, `-DSNAPSHOTDB_TSAN`): a mutex that TSan sees,
    /// with the API SnapshotDB uses of `Synchronization.Mutex` (`init(_:)`, `withLock(_:)`).
    ///
    /// Swift's ThreadSanitizer on Linux does not see `Synchronization.Mutex` (a futex it does
    /// not intercept), so every access a `Mutex` guards would be reported as a race and real
    /// races would drown in the noise. This one locks a `pthread_mutex_t`, which TSan
    /// intercepts (``TSanVisibleMutex``). Like `Synchronization.Mutex` it is not copyable, so
    /// code that compiles here compiles in the other builds too.
    public struct Mutex<Value: ~Copyable>: ~Copyable, Sendable {
        private let base: TSanVisibleMutex<Value>

        /// A mutex guarding `initialValue`.
        public init(_ initialValue: consuming sending Value) { base = TSanVisibleMutex(initialValue) }

        /// Runs `body` with exclusive access to the value.
        public func withLock<Result: ~Copyable, E: Error>(
            _ body: (inout sending Value) throws(E) -> sending Result
        ) throws(E) -> sending Result {
            LockAcquisitions.count()
            return try base.withLock(body)
        }
    }
#elseif DEBUG
    internal import struct Synchronization.Mutex

    /// Debug builds: `Synchronization.Mutex`, each acquisition counted for the current thread
    /// (``LockAcquisitions``), so that a test can check how many locks a commit takes.
    public struct Mutex<Value: ~Copyable>: ~Copyable, Sendable {
        private let base: Synchronization.Mutex<Value>

        /// A mutex guarding `initialValue`.
        public init(_ initialValue: consuming sending Value) { base = Synchronization.Mutex(initialValue) }

        /// Runs `body` with exclusive access to the value.
        public func withLock<Result: ~Copyable, E: Error>(
            _ body: (inout sending Value) throws(E) -> sending Result
        ) throws(E) -> sending Result {
            LockAcquisitions.count()
            return try base.withLock(body)
        }
    }
#else
    // Release builds: `Synchronization.Mutex` itself. Re-exported so that a file needs only
    // `import SnapshotDBLocking` for `Mutex` in every build; a file that needs `Atomic` imports
    // `struct Synchronization.Atomic`, never all of Synchronization, whose `Mutex` would be
    // ambiguous in a ThreadSanitizer build (`Scripts/tsan.sh` checks).
    @_exported public import struct Synchronization.Mutex
#endif
