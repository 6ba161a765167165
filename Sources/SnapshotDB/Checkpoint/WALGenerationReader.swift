internal import SnapshotDBLocking

#if canImport(Glibc)
    internal import Glibc
#elseif canImport(Darwin)
    internal import Darwin
#endif

/// Reads which generation the `-wal` file is in, so that a restart of the WAL is never missed.
///
/// Every time SQLite restarts the WAL from its first frame it writes a new header with new
/// salts (bytes 16..<24: the first incremented, the second random). The frame count of
/// `sqlite3_wal_hook` alone cannot tell a restarted WAL from a grown one when the first commit
/// after the restart is larger than the whole previous WAL.
///
/// Commits read the same eight bytes from the WAL-index header, where SQLite keeps a verbatim
/// copy (`snapshotdb_wal_index_salts`), which needs no system call; this reader of the file is the
/// fallback when that header is being rewritten, and what the database uses at open.
///
/// The descriptor stays open for the life of the database. That is safe for the `-wal`,
/// unlike the `-shm` or the database file: SQLite's unix VFS takes no POSIX lock on the `-wal`,
/// so closing this descriptor cannot drop a lock that SQLite holds.
final class WALGenerationReader: Sendable {
    private let path: String
    private let descriptor = Mutex<Int32>(-1)

    init(walPath: String) { self.path = walPath }

    deinit { closeDescriptor() }

    /// The two salts of the current header, as raw bytes, or `nil` when the file is missing or
    /// has no header (an empty, freshly truncated WAL).
    func read() -> UInt64? {
        descriptor.withLock { descriptor in
            if descriptor < 0 {
                descriptor = open(path, O_RDONLY | O_CLOEXEC)
                if descriptor < 0 { return nil }
            }
            var bytes: (UInt64, UInt64) = (0, 0)
            let count = withUnsafeMutableBytes(of: &bytes) { buffer in
                pread(descriptor, buffer.baseAddress, 8, 16)
            }
            guard count == 8 else { return nil }
            return bytes.0
        }
    }

    /// Closes the descriptor; a later `read()` reopens it.
    func closeDescriptor() {
        descriptor.withLock { descriptor in
            if descriptor >= 0 { _ = close(descriptor) }
            descriptor = -1
        }
    }
}
