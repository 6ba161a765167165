internal import Foundation

#if canImport(Glibc)
    internal import Glibc
#elseif canImport(Darwin)
    internal import Darwin
#endif

/// Checks of the main file's header against its `-wal` and `-shm`, made before SQLite opens
/// the file: what SQLite would report as a generic error, a busy lock or a useless "unable to
/// open database file" is refused here with a code and a message that says what to do, and
/// nothing is written.
extension Schema {
    /// The only WAL format version SQLite reads (`WAL_MAX_VERSION`).
    static let walFormatVersion: UInt32 = 3_007_000

    /// Refuses a file whose header, `-wal` or `-shm` SQLite would fail on.
    ///
    /// `header` is the main file's first 100 bytes, its magic string already checked.
    static func checkFormat(of path: String, header: Data) throws(DatabaseError) {
        let readVersion = header[header.startIndex + 19]
        if readVersion > 2 {
            throw DatabaseError(
                .unsupportedFormat,
                "\(path) is in a SQLite file format newer than this SQLite reads (read version "
                    + "\(readVersion) in its header): open it with the SQLite that wrote it")
        }
        let schemaFormat = bigEndian32(header, at: 44)
        if schemaFormat > 4 {
            throw DatabaseError(
                .unsupportedFormat,
                "\(path) has schema format \(schemaFormat), newer than this SQLite reads (up to 4): "
                    + "open it with the SQLite that wrote it")
        }
        try checkSideFile(path + "-shm", holding: "wal-index")
        try checkSideFile(path + "-wal", holding: "write-ahead log")
        let walBytes = fileSize(path + "-wal")
        guard walBytes > 0 else { return }
        if readVersion != 2 {
            // SQLite reads the -wal anyway, and then every write waits out the busy timeout and
            // fails with `busy`.
            throw DatabaseError(
                .corrupt,
                "\(path) says in its header that it is in rollback-journal mode (read version "
                    + "\(readVersion), 2 is WAL mode), yet a -wal of \(walBytes) bytes lies beside it: "
                    + "something other than SQLite changed the header, or a change of journal mode "
                    + "was cut short. Keep a copy of the database and its -wal and -shm; "
                    + "`sqlite3 \(path) 'PRAGMA integrity_check'` tells whether the -wal is needed")
        }
        try checkWALHeader(path)
    }

    /// Refuses a `-wal` or `-shm` that exists and is neither a regular file nor a directory
    /// (which SQLite treats as a file it cannot write, and so opens the database read-only).
    private static func checkSideFile(_ sidePath: String, holding contents: String) throws(DatabaseError) {
        var info = stat()
        guard stat(sidePath, &info) == 0 else { return }
        let kind: String
        switch info.st_mode & S_IFMT {
        case S_IFREG, S_IFDIR: return
        case S_IFIFO: kind = "a FIFO (named pipe)"
        case S_IFSOCK: kind = "a socket"
        case S_IFCHR: kind = "a character device"
        case S_IFBLK: kind = "a block device"
        default: kind = "not a regular file"
        }
        throw DatabaseError(
            .cannotOpen,
            "\(sidePath) is \(kind), where SQLite keeps the database's \(contents) in a regular file: "
                + "remove it (it holds no data of the database) and open again")
    }

    /// Refuses a `-wal` whose header SQLite's recovery would accept as intact (magic, page
    /// size and checksum right) and then refuse for its version: SQLite then fails every read
    /// with "unable to open database file". A `-wal` of its header alone is not checked: SQLite's
    /// recovery reads the header only when frames follow it, so it ignores that file.
    private static func checkWALHeader(_ path: String) throws(DatabaseError) {
        let walPath = path + "-wal"
        guard let header = readPrefix(of: walPath, count: 33), header.count == 33 else { return }
        let magic = bigEndian32(header, at: 0)
        let pageSize = bigEndian32(header, at: 8)
        guard magic & 0xFFFF_FFFE == 0x377F_0682, pageSize >= 512, pageSize <= 65536,
            pageSize & (pageSize - 1) == 0
        else { return }
        // SQLite's checksum over the first 24 bytes, in the byte order the magic's low bit names.
        let bigEndianChecksum = magic & 1 == 1
        var first: UInt32 = 0
        var second: UInt32 = 0
        for offset in stride(from: 0, to: 24, by: 8) {
            let words = [offset, offset + 4].map { word in
                bigEndianChecksum
                    ? bigEndian32(header, at: word) : bigEndian32(header, at: word).byteSwapped
            }
            first = first &+ words[0] &+ second
            second = second &+ words[1] &+ first
        }
        guard first == bigEndian32(header, at: 24), second == bigEndian32(header, at: 28) else { return }
        let version = bigEndian32(header, at: 4)
        guard version != walFormatVersion else { return }
        throw DatabaseError(
            .walUnreadable,
            "\(walPath) has an intact header of WAL format version \(version), which SQLite does not "
                + "read (it reads \(walFormatVersion)), so SQLite can read neither the -wal nor the "
                + "database. If a newer SQLite wrote it, open the database with that SQLite. Otherwise "
                + "the -wal is damaged: keep a copy of the database, its -wal and -shm, then move the "
                + "-wal and -shm aside to open the database without the commits that are only in the -wal")
    }

    /// The first `count` bytes of the file at `path` (fewer if it is shorter), or `nil`.
    static func readPrefix(of path: String, count: Int) -> Data? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var bytes = [UInt8](repeating: 0, count: count)
        let read = bytes.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, count, 0) }
        return read < 0 ? nil : Data(bytes.prefix(read))
    }

    static func bigEndian32(_ data: Data, at offset: Int) -> UInt32 {
        let start = data.startIndex + offset
        return data[start..<start + 4].reduce(0) { $0 << 8 | UInt32($1) }
    }

    /// The size of the file at `path`, or 0 when it does not exist.
    static func fileSize(_ path: String) -> Int64 {
        var info = stat()
        guard stat(path, &info) == 0 else { return 0 }
        return Int64(info.st_size)
    }
}
