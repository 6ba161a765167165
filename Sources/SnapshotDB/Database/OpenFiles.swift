internal import Dispatch
internal import SnapshotDBLocking

#if canImport(Glibc)
    internal import Glibc
#elseif canImport(Darwin)
    internal import Darwin
#endif

/// The files open in this process, so that a second `Database` on the same file is refused
/// before SQLite touches it: by resolved path, and by device and inode, which also catch a
/// hard link or a symbolic link to an open file (two SQLite handles on one file through
/// different names would not share their locks' bookkeeping).
///
/// A file is free again once its `Database` is released, whichever thread drops the last
/// reference. The database's own background work (a checkpoint on its queue) holds it for a
/// moment at a time, and a user's last release may land in such a moment: the checkpoint queue
/// then drops the last reference a little later. So a claim that finds the file held waits for
/// that work, and takes the file if nothing but its own wait still holds the `Database`:
/// releasing the last reference frees the path before a reopen can see it.
enum OpenFiles {
    private struct FileID: Hashable {
        let device: UInt64
        let inode: UInt64
    }

    private struct Entry {
        var fileID: FileID?
        /// The open `Database`; `nil` while its open is still in progress.
        var holder: WeakDatabase?
        /// Left when the entry is released: what a claim waits on while a `Database` whose
        /// last reference is gone is still running its `deinit` on another thread.
        let released: DispatchGroup
    }

    private static let entries = Mutex<[String: Entry]>([:])

    /// How often a claim drains the holder's background work before it decides the file is
    /// held by someone else.
    private static let maximumDrains = 3

    private enum Holder {
        case claimed
        case opening(path: String)
        case open(path: String, database: Database)
        case releasing(DispatchGroup)
    }

    /// Claims `path` for a `Database` being opened.
    ///
    /// - Throws: `alreadyOpen` when a `Database` of this process holds the same file (or opens
    ///   it right now).
    ///
    /// `sharing` names a prefix under which every path is one database (the replicas of a VFS
    /// that serves one replica per process), and why: a path under it is refused while another
    /// one is open.
    static func claim(_ path: String, sharing shared: (prefix: String, reason: String)? = nil)
        throws(DatabaseError)
    {
        var drains = 0
        while true {
            switch holder(of: path, sharedPrefix: shared?.prefix) {
            case .claimed:
                return
            case .releasing(let released):
                released.wait()
            case .opening(let other):
                throw alreadyOpen(path, other: other, reason: shared?.reason)
            case .open(let other, var database):
                guard drains < maximumDrains, !database.checkpointer.isOnQueue else {
                    throw alreadyOpen(path, other: other, reason: shared?.reason)
                }
                drains += 1
                // A checkpoint running or queued may hold the last other reference.
                database.checkpointer.queue.sync {}
                if !isKnownUniquelyReferenced(&database) && drains == maximumDrains {
                    throw alreadyOpen(path, other: other, reason: shared?.reason)
                }
            // If this was the last reference, the database is released here, on this thread,
            // and the next round claims the file.
            }
        }
    }

    /// Claims `path` when it is free, or says who holds it; never releases a `Database` inside
    /// the lock (its `deinit` takes the lock).
    private static func holder(of path: String, sharedPrefix: String?) -> Holder {
        let id = fileID(path)
        return entries.withLock { entries -> Holder in
            let held =
                entries[path] != nil
                ? path
                : id.flatMap { id in entries.first { $0.value.fileID == id }?.key }
                    ?? sharedPrefix.flatMap { prefix in entries.keys.first { $0.hasPrefix(prefix) } }
            guard let held, let entry = entries[held] else {
                let released = DispatchGroup()
                released.enter()
                entries[path] = Entry(fileID: id, holder: nil, released: released)
                return .claimed
            }
            guard let holder = entry.holder else { return .opening(path: held) }
            guard let database = holder.database else { return .releasing(entry.released) }
            return .open(path: held, database: database)
        }
    }

    private static func alreadyOpen(_ path: String, other: String, reason: String? = nil) -> DatabaseError {
        if other != path, let reason {
            return DatabaseError(
                .alreadyOpen, "\(path) cannot be opened while \(other) is open in this process: \(reason)")
        }
        if other != path {
            return DatabaseError(
                .alreadyOpen,
                "\(path) is the same file as \(other), which is already open in this process; "
                    + "share its Database and make connections from it")
        }
        return DatabaseError(
            .alreadyOpen,
            "\(path) is already open in this process; share its Database and make connections from it")
    }

    /// Records the opened `database` for `path`, with the device and inode of the file now
    /// there (the open may have created it).
    static func attach(_ path: String, _ database: Database) {
        let id = fileID(path)
        entries.withLock { entries in
            entries[path]?.holder = WeakDatabase(database)
            if let id { entries[path]?.fileID = id }
        }
    }

    /// Frees `path`: called by a failed open and by the `Database`'s `deinit`.
    static func release(_ path: String) {
        let entry = entries.withLock { $0.removeValue(forKey: path) }
        entry?.released.leave()
    }

    private static func fileID(_ path: String) -> FileID? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return FileID(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
    }
}
