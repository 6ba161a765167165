import SnapshotDBLocking

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Read-only descriptors opened once per file (device + inode) and kept for the process lifetime.
///
/// POSIX record locks belong to a process and a file, not to a descriptor: closing *any*
/// descriptor of the database file or its `-shm` silently drops the locks that the process's
/// SQLite connections hold there. A process that has SQLite connections open on a database may
/// therefore read that database's files only through descriptors it never closes; this table is
/// where they live. Its size is bounded by the number of distinct files ever inspected.
enum RetainedDescriptors {
    private struct State: ~Copyable {
        var descriptors: [FileIdentity: Int32] = [:]
    }

    private static let state = Mutex(State())

    /// The retained descriptor of the file at `path`, opening it on first use; `nil` if missing.
    static func descriptor(for path: String) throws(InspectionError) -> Int32? {
        guard let status = try InspectedFile.status(of: path) else { return nil }
        let result: Result<Int32?, InspectionError> = state.withLock { state in
            if let descriptor = state.descriptors[status.identity] {
                return .success(descriptor)
            }
            let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)
            guard descriptor >= 0 else {
                let error = errno
                if error == ENOENT { return .success(nil) }
                return .failure(InspectedFile.systemError(error, path: path, doing: "open"))
            }
            // The path may have been replaced between stat() and open(): key the descriptor by the
            // file it really opened. If that file already has a descriptor, the new one is kept too
            // (never closed, for the reason above) but the table keeps the first.
            var info = stat()
            var identity = status.identity
            if fstat(descriptor, &info) == 0 {
                identity = FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
            }
            if let existing = state.descriptors[identity] {
                return .success(existing)
            }
            state.descriptors[identity] = descriptor
            return .success(descriptor)
        }
        return try result.get()
    }

    /// How many files currently have a retained descriptor (for tests and diagnostics).
    static var count: Int { state.withLock { $0.descriptors.count } }
}
