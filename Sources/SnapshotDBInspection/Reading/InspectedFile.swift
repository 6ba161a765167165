#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// The device and inode that identify a file however it is named.
struct FileIdentity: Hashable, Sendable {
    var device: UInt64
    var inode: UInt64

    /// The device's major number, split the way Linux's `gnu_dev_major` does.
    var deviceMajor: UInt64 { ((device >> 8) & 0xfff) | ((device >> 32) & ~UInt64(0xfff)) }
    /// The device's minor number, split the way Linux's `gnu_dev_minor` does.
    var deviceMinor: UInt64 { (device & 0xff) | ((device >> 12) & ~UInt64(0xff)) }
}

/// What `stat()` says about a path.
struct FileStatus: Sendable {
    var identity: FileIdentity
    var size: Int64
}

/// Every system call the inspection library makes on the inspected files goes through here.
///
/// Nothing here ever opens a file for writing, creates a file or takes a lock.
enum InspectedFile {
    /// `stat()` of `path` without opening it; `nil` when the file does not exist.
    ///
    /// - Throws: ``InspectionError`` `notARegularFile` for directories and devices, or the mapped
    ///   `errno` of a failed `stat()`.
    static func status(of path: String) throws(InspectionError) -> FileStatus? {
        var info = stat()
        guard stat(path, &info) == 0 else {
            let error = errno
            if error == ENOENT || error == ENOTDIR { return nil }
            throw systemError(error, path: path, doing: "stat")
        }
        guard (info.st_mode & S_IFMT) == S_IFREG else {
            throw InspectionError(
                code: .notARegularFile, path: path, message: "is not a regular file")
        }
        return FileStatus(
            identity: FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino)),
            size: Int64(info.st_size))
    }

    /// Opens `path` read-only under the given access policy; `nil` when the file does not exist.
    ///
    /// Never passes `O_CREAT`: a missing `-wal` or `-shm` stays missing.
    static func openReadOnly(
        _ path: String, access: FileAccess
    ) throws(InspectionError) -> ReadableFile? {
        switch access {
        case .transient:
            // stat() first: opening a FIFO named like a -wal would block.
            guard try status(of: path) != nil else { return nil }
            let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)
            guard descriptor >= 0 else {
                let error = errno
                if error == ENOENT { return nil }
                throw systemError(error, path: path, doing: "open")
            }
            return ReadableFile(descriptor: descriptor, path: path, closesOnDeinit: true)
        case .retainedDescriptors:
            guard let descriptor = try RetainedDescriptors.descriptor(for: path) else { return nil }
            return ReadableFile(descriptor: descriptor, path: path, closesOnDeinit: false)
        }
    }

    /// The whole content of a small kernel-generated file such as `/proc/locks`; `nil` if absent.
    ///
    /// Only for `/proc` files, which hold no locks a close could drop.
    static func contentsOfProcFile(_ path: String) -> [UInt8]? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var result: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                return nil
            }
            if count == 0 { break }
            result.append(contentsOf: chunk[0..<count])
        }
        return result
    }

    /// Maps a failed system call's `errno` to an ``InspectionError``.
    static func systemError(_ error: Int32, path: String, doing call: String) -> InspectionError {
        let text = String(cString: strerror(error))
        switch error {
        case ENOENT:
            return InspectionError(
                code: .fileNotFound, path: path, message: "no such file", systemErrorNumber: error)
        case EACCES, EPERM:
            return InspectionError(
                code: .permissionDenied, path: path, message: "\(call) failed: \(text)",
                systemErrorNumber: error)
        case EISDIR:
            return InspectionError(
                code: .notARegularFile, path: path, message: "is a directory", systemErrorNumber: error)
        default:
            return InspectionError(
                code: .ioFailure, path: path, message: "\(call) failed: \(text)", systemErrorNumber: error)
        }
    }
}

/// `lseek`'s `SEEK_DATA`, which Glibc declares only under `_GNU_SOURCE`.
#if canImport(Darwin)
    private let seekData = SEEK_DATA
#else
    private let seekData: Int32 = 3
#endif

/// A read-only descriptor on an inspected file.
///
/// A transient descriptor is closed when the value goes away; a retained one belongs to
/// ``RetainedDescriptors`` and is never closed, because closing any descriptor of a file drops
/// every POSIX lock the process holds on that file, including the locks of SQLite connections.
final class ReadableFile {
    let descriptor: Int32
    let path: String
    private let closesOnDeinit: Bool

    init(descriptor: Int32, path: String, closesOnDeinit: Bool) {
        self.descriptor = descriptor
        self.path = path
        self.closesOnDeinit = closesOnDeinit
    }

    deinit {
        if closesOnDeinit { close(descriptor) }
    }

    /// The file's current size according to `fstat()`.
    func size() throws(InspectionError) -> Int64 {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else {
            throw InspectedFile.systemError(errno, path: path, doing: "fstat")
        }
        return Int64(info.st_size)
    }

    /// The first offset at or after `offset` that holds data (`lseek` with `SEEK_DATA`): the
    /// file's size when only a hole follows, and `offset` itself where the file system cannot
    /// say (it is then read as usual).
    func nextData(atOrAfter offset: Int64) -> Int64 {
        let result = lseek(descriptor, off_t(offset), seekData)
        if result >= 0 { return Int64(result) }
        return errno == ENXIO ? (try? size()) ?? offset : offset
    }

    /// Up to `count` bytes at `offset`; fewer only where the file ends.
    func read(at offset: Int64, count: Int) throws(InspectionError) -> [UInt8] {
        guard count > 0 else { return [] }
        var buffer = [UInt8](repeating: 0, count: count)
        var filled = 0
        var failure: Int32 = 0
        buffer.withUnsafeMutableBytes { bytes in
            while filled < count {
                let result = pread(
                    descriptor, bytes.baseAddress! + filled, count - filled, off_t(offset) + off_t(filled))
                if result < 0 {
                    if errno == EINTR { continue }
                    failure = errno
                    return
                }
                if result == 0 { return }
                filled += result
            }
        }
        if failure != 0 { throw InspectedFile.systemError(failure, path: path, doing: "pread") }
        if filled < count { buffer.removeLast(count - filled) }
        return buffer
    }
}
