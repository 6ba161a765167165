#if SNAPSHOTDB_TSAN
    internal import SnapshotDBLocking

    /// ThreadSanitizer builds (`Scripts/tsan.sh`) use a mutex TSan sees (see
    /// `TSanVisibleMutex`); this module-level name shadows `Synchronization.Mutex` there only.
    struct Mutex<Value: ~Copyable>: ~Copyable, Sendable {
        private let base: TSanVisibleMutex<Value>

        init(_ initialValue: consuming sending Value) { base = TSanVisibleMutex(initialValue) }

        func withLock<Result: ~Copyable, E: Error>(
            _ body: (inout sending Value) throws(E) -> sending Result
        ) throws(E) -> sending Result {
            try base.withLock(body)
        }
    }
#endif
