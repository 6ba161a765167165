internal import Dispatch
internal import Foundation
internal import Synchronization

#if canImport(Glibc)
    internal import Glibc
#elseif canImport(Darwin)
    internal import Darwin
#endif

/// A SnapshotDB database: one WAL-mode SQLite file, its commit counter, its single writer, its
/// commit log and its checkpoints.
///
/// Open one `Database` per file per process (a second open of the same file throws
/// ``DatabaseError/Code/alreadyOpen``) and make a ``Connection`` for each thread of work that
/// needs its own snapshot: typically one for the UI, one per background writer.
///
/// ```swift
/// let db = try Database(path: "app.sqlite")
/// let writer = db.newConnection(name: "sync")
/// try writer.readWrite { txn in try txn.set(item, forKey: item.id, inCollection: "items") }
/// ```
///
/// The file is closed when the `Database` and every connection made from it are released.
public final class Database: Sendable {
    /// The absolute path of the database file, symlinks resolved.
    public let path: String
    /// The configuration the database was opened with.
    public let configuration: Configuration

    /// One writer at a time in this process: read-write transactions queue here instead of
    /// spinning on `SQLITE_BUSY`. A lock rather than `Mutex` because it is held across the
    /// caller's closure, which returns an arbitrary value; the checkpointer can take it with
    /// priority for a WAL reset.
    let writerLock = WriterLock()
    let state: Mutex<DatabaseState>
    let checkpointer: Checkpointer

    /// Opens or creates the database at `path` with the default configuration.
    ///
    /// - Throws: ``DatabaseError`` with code `alreadyOpen` when this process has the file open,
    ///   `notADatabase` for a foreign or damaged file (left untouched), `schemaTooNew` for a
    ///   SnapshotDB file written by a newer version, `cannotOpen`/`readOnly` when the file or
    ///   its directory cannot be used.
    public convenience init(path: String) throws(DatabaseError) {
        try self.init(path: path, configuration: Configuration())
    }

    /// Opens or creates the database at `path` with `configuration`.
    ///
    /// A new file is created with ``Configuration/fileMode``, in WAL mode, with the current
    /// schema. An existing file is checked before SQLite touches it: a file that is not a
    /// SnapshotDB (or empty SQLite) database is refused and not modified, and no `-wal` or
    /// `-shm` is created for it.
    ///
    /// - Throws: see ``init(path:)``.
    public init(path: String, configuration: Configuration) throws(DatabaseError) {
        let resolved = try Self.resolve(path)
        try OpenFiles.claim(resolved)
        do {
            let fileState = try Schema.inspectFile(at: resolved)
            if case .new = fileState {
                try Schema.createFile(at: resolved, mode: configuration.fileMode)
            }
            let setup = try SQLiteHandle(path: resolved)
            setup.setBusyTimeout(milliseconds: Int32(configuration.busyTimeout / .milliseconds(1)))
            try Schema.prepare(setup, path: resolved)
            try setup.configureForSnapshotDB(
                synchronous: configuration.synchronous, journalSizeLimit: configuration.journalSizeLimit)
            let latest = try Self.readCommitCounter(setup)
            let pageSize = try setup.pageSize()
            self.path = resolved
            self.configuration = configuration
            self.state = Mutex(DatabaseState(latestCommit: latest))
            self.checkpointer = Checkpointer(
                path: resolved, configuration: configuration, pageSize: pageSize, handle: setup)
        } catch {
            OpenFiles.release(resolved)
            throw error
        }
        checkpointer.database = WeakDatabase(self)
        checkpointer.checkpointAtOpen()
    }

    deinit {
        finishSubscribers()
        checkpointer.close()
        OpenFiles.release(path)
    }

    /// Creates a connection with its own SQLite handle, statement cache and value cache.
    ///
    /// The handle is opened on first use, so an unusable file surfaces as an error from the
    /// first transaction. `name` identifies the connection in changesets and checkpoint
    /// warnings; give each connection a distinct, meaningful one ("ui", "sync", "laggard").
    public func newConnection(name: String = "connection") -> Connection {
        Connection(database: self, name: name)
    }

    /// The newest commit this process knows of.
    ///
    /// Commits by other processes become known when a connection of this database next begins
    /// a transaction.
    public var latestCommit: UInt64 { state.withLock { $0.latestCommit } }

    /// Registers `codec` for the values of `collection`; values of other collections keep the
    /// default JSON codec.
    ///
    /// - Throws: ``DatabaseError/Code/misuse`` once any transaction has started: a codec that
    ///   changed under live connections would misread what they cached.
    public func register(_ codec: any ValueCodec, forCollection collection: String) throws(DatabaseError) {
        try state.withLock { state throws(DatabaseError) in
            guard !state.codecsFrozen else {
                throw DatabaseError(
                    .misuse, "codecs must be registered before the first transaction of the database")
            }
            state.codecs[collection] = codec
        }
    }

    /// Freezes and returns the codec registry (called by each connection at its first use).
    func frozenCodecs() -> [String: any ValueCodec] {
        state.withLock { state in
            state.codecsFrozen = true
            return state.codecs
        }
    }

    static func readCommitCounter(_ handle: SQLiteHandle) throws(DatabaseError) -> UInt64 {
        let value = try handle.int64("SELECT value FROM snapshotdb_meta WHERE name = 'commit'") ?? 0
        return UInt64(max(0, value))
    }

    /// The absolute path of `path` with symlinks resolved; the file itself need not exist.
    static func resolve(_ path: String) throws(DatabaseError) -> String {
        if let real = realpath(path, nil) {
            defer { free(real) }
            return String(cString: real)
        }
        let url = URL(fileURLWithPath: path)
        let directory = url.deletingLastPathComponent().path
        guard let realDirectory = realpath(directory, nil) else {
            throw DatabaseError(.cannotOpen, "the directory of \(path) does not exist")
        }
        defer { free(realDirectory) }
        let base = String(cString: realDirectory)
        return (base == "/" ? "" : base) + "/" + url.lastPathComponent
    }
}

/// The files open in this process, so that a second `Database` on the same file is refused.
enum OpenFiles {
    private static let paths = Mutex<Set<String>>([])

    static func claim(_ path: String) throws(DatabaseError) {
        try paths.withLock { paths throws(DatabaseError) in
            guard paths.insert(path).inserted else {
                throw DatabaseError(
                    .alreadyOpen,
                    "\(path) is already open in this process; share its Database and make connections from it"
                )
            }
        }
    }

    static func release(_ path: String) {
        _ = paths.withLock { $0.remove(path) }
    }
}

/// A weak reference that can cross threads.
struct WeakDatabase: Sendable {
    weak var database: Database?
    init(_ database: Database) { self.database = database }
}
