internal import Foundation
internal import Logging

#if canImport(Glibc)
    internal import Glibc
#elseif canImport(Darwin)
    internal import Darwin
#endif

/// Creating a new database so that no half-made file ever appears under the user's name, and
/// recognizing the one half-made state an older in-place creation (or the creation in an
/// existing empty file) can leave.
extension Schema {
    /// Creates the database at `path` (which did not exist): the schema is written under a
    /// temporary name in the same directory, with `mode`, synced, then linked into place and the
    /// directory synced.
    ///
    /// A power cut at any point leaves either no file under `path` or the whole, synced one; at
    /// worst a hidden `.NAME.snapshotdb-new-*` file beside it, which nothing opens. `link`
    /// rather than `rename`, so that a file another process created at `path` meanwhile is never
    /// replaced.
    ///
    /// - Returns: `false` when another process or thread created `path` first: the caller opens
    ///   that file instead (after checking it like any existing file).
    /// - Throws: `readOnly`/`cannotOpen` when the directory cannot take the file, or what SQLite
    ///   reports while writing the schema (`diskFull`); nothing is left behind.
    static func createDatabase(at path: String, mode: UInt16, logger: Logger) throws(DatabaseError) -> Bool {
        try refuseOrphanedSideFiles(of: path)
        let url = URL(fileURLWithPath: path)
        let directory = url.deletingLastPathComponent().path
        // SQLite names the `-wal` and `-shm` after the file: a name with no room for them would
        // be created, then fail to open, and stay behind.
        let nameMax = nameLimit(in: directory)
        let nameBytes = url.lastPathComponent.utf8.count
        if nameBytes + "-wal".utf8.count > nameMax, nameBytes <= nameMax {
            throw DatabaseError(
                .cannotOpen,
                "cannot create \(path): its name is \(nameBytes) bytes, and SQLite's -wal beside it would "
                    + "need \(nameBytes + 4), more than the \(nameMax) this file system allows")
        }
        let temporary =
            directory + "/"
            + temporaryName(for: url.lastPathComponent, tag: "snapshotdb-new", nameMax: nameMax)
        defer {
            for suffix in ["", "-journal", "-wal", "-shm"] { unlink(temporary + suffix) }
        }
        try createFile(at: temporary, mode: mode, reportedAs: path)
        do {
            let handle = try SQLiteHandle(path: temporary)
            try prepare(handle, path: temporary, logger: logger)
            // The handle closes here: the last connection checkpoints the (empty) WAL and deletes
            // the -wal and -shm; the header and schema are in the main file.
        }
        try sync(temporary, what: "the new database")
        guard try linkNew(temporary, as: path) else { return false }
        // The new name must survive a power cut as well as the file's contents.
        try sync(directory, what: "the directory of \(path)")
        return true
    }

    /// The longest file name the file system of `directory` takes, in bytes: `pathconf`'s
    /// answer, or 255 (Linux's and most file systems') when it has none.
    static func nameLimit(in directory: String) -> Int {
        let limit = pathconf(directory, Int32(_PC_NAME_MAX))
        return limit > 0 ? min(limit, 255) : 255
    }

    /// The hidden name a new file named `name` is made under: `.NAME.TAG-` and 16 random hex
    /// digits, with `NAME` cut (at a character) so that the name and SQLite's `-journal` beside
    /// it fit in `nameMax` bytes: any name SQLite can open beside its `-wal` can be created or
    /// backed up to. (The whole name made names from about 215 bytes fail.)
    static func temporaryName(for name: String, tag: String, nameMax: Int) -> String {
        let random = String(UInt64.random(in: 0...UInt64.max), radix: 16)
        let suffix = "." + tag + "-" + String(repeating: "0", count: 16 - random.utf8.count) + random
        let room = nameMax - "-journal".utf8.count - 1 - suffix.utf8.count
        var stem = ""
        var bytes = 0
        for character in name {
            bytes += character.utf8.count
            guard bytes <= room else { break }
            stem.append(character)
        }
        return "." + stem + suffix
    }

    /// Gives the complete file `temporary` the name `path` too, unless a file has that name:
    /// returns `false` then (a `link`, which never replaces, so a file that appeared under the name
    /// meanwhile is never overwritten). The caller syncs the directory and unlinks `temporary`.
    static func linkNew(_ temporary: String, as path: String) throws(DatabaseError) -> Bool {
        guard link(temporary, path) != 0 else { return true }
        let linkError = errno
        if linkError == EEXIST { return false }
        // File systems without hard links (FAT, some network and FUSE file systems) say
        // EPERM or ENOTSUP: `rename` then, unless a file appeared under the name meanwhile
        // (a race that `link` closes and this check only narrows).
        let noHardLinks = [EPERM, ENOTSUP, EOPNOTSUPP, EMLINK, ENOSYS].contains(linkError)
        guard noHardLinks, access(path, F_OK) != 0, errno == ENOENT else {
            if noHardLinks { return false }
            throw DatabaseError(
                linkError == EACCES || linkError == EROFS ? .readOnly : .cannotOpen,
                "cannot create \(path): \(String(cString: strerror(linkError)))")
        }
        if rename(temporary, path) != 0 {
            throw DatabaseError(.cannotOpen, "cannot create \(path): \(String(cString: strerror(errno)))")
        }
        return true
    }

    /// Refuses to create a database beside a `-wal` or `-journal` with content: they belong to a
    /// database that was deleted or moved without them, and SQLite would replay (or roll back)
    /// their pages into the new file.
    static func refuseOrphanedSideFiles(of path: String) throws(DatabaseError) {
        for suffix in ["-wal", "-journal"] where fileSize(path + suffix) > 0 {
            throw DatabaseError(
                .cannotOpen,
                "\(path) does not exist, but \(path)\(suffix) does: it belongs to a database that was "
                    + "deleted or moved without it, and SQLite would apply its pages to a new database. "
                    + "Put the database back beside it, or move \(path)\(suffix) (and \(path)-shm) away")
        }
    }

    /// Creates an empty file with `mode` so that the database, and through it its `-wal` and
    /// `-shm`, never exist with wider permissions than asked for; an existing file is kept.
    static func createFile(at path: String, mode: UInt16, reportedAs name: String? = nil)
        throws(DatabaseError)
    {
        let descriptor = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, mode_t(mode))
        if descriptor < 0 {
            if errno == EEXIST { return }
            let code: DatabaseError.Code = errno == EACCES || errno == EROFS ? .readOnly : .cannotOpen
            throw DatabaseError(code, "cannot create \(name ?? path): \(String(cString: strerror(errno)))")
        }
        // The umask may have narrowed the mode; set exactly what the configuration asked for.
        fchmod(descriptor, mode_t(mode))
        close(descriptor)
    }

    /// `fsync` of the file or directory at `path`.
    private static func sync(_ path: String, what: String) throws(DatabaseError) {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw DatabaseError(
                .cannotOpen, "cannot open \(what) to sync it: \(String(cString: strerror(errno)))")
        }
        defer { close(descriptor) }
        guard fsync(descriptor) == 0 else {
            let code: DatabaseError.Code = errno == ENOSPC ? .diskFull : .ioError
            throw DatabaseError(code, "cannot sync \(what): \(String(cString: strerror(errno)))")
        }
    }

    /// The 8-byte magic number that starts every rollback journal header.
    static let journalMagic: [UInt8] = [0xD9, 0xD5, 0x05, 0xF9, 0x20, 0xA1, 0x63, 0xD7]

    /// Whether a main file whose header is all zeros is a creation cut short: a hot rollback
    /// journal beside it says the database had no page before the transaction that the zeros
    /// belong to (its "initial database size" field is 0).
    ///
    /// A power cut while the schema of a new database is written in place can lose page 1 (or
    /// tear its first sector) and keep later pages and the journal. Any SQLite client rolls that
    /// journal back to an empty file, and so does the open (which then creates the schema). A
    /// journal that would restore pages of an earlier database is not a creation: the file is
    /// refused untouched, as any foreign or damaged file.
    static func isInterruptedCreation(_ path: String, header: Data) -> Bool {
        guard header.allSatisfy({ $0 == 0 }) else { return false }
        guard let journal = readPrefix(of: path + "-journal", count: 28), journal.count == 28 else {
            return false
        }
        return Array(journal.prefix(8)) == journalMagic && bigEndian32(journal, at: 16) == 0
    }
}
