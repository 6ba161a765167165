internal import Dispatch
internal import Foundation
internal import Logging
internal import SnapshotDBLocking

internal import struct Synchronization.Atomic

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
    /// Who resets the WAL, as in force: ``Configuration/checkpointing``, or
    /// `.external(replicator: "litestream")` for a file Litestream replicates (recognized by its
    /// `_litestream_seq` table, at open or, for a Litestream started later, before the first
    /// WAL reset) when the configuration says `.automatic`.
    public var checkpointing: Configuration.Checkpointing {
        checkpointer.checkpointing
    }
    /// The file's identity: a random number drawn when the file was created (or upgraded to
    /// durable history), kept by every copy of it. A ``HistoryPosition`` carries it, so that a
    /// position of another file is refused. This is the identity read at the open; positions
    /// carry (and are checked against) the identity of the snapshot they are taken or used in,
    /// which differs once another file was restored over the open one.
    public let identity: UInt64
    /// The VFS and name of a read replica (``init(replica:vfs:configuration:)``), or `nil` for a
    /// file this process writes.
    let replica: Replica?
    /// What this database is to its file, given at open: the code that differs by role asks it
    /// (see ``DatabaseRole``).
    let role: any DatabaseRole

    /// The single writer: every commit of this process is made there (see ``Writer``).
    let writer = Writer()
    /// Turns for the writers of this and other processes (see ``WriterTurns``).
    let writerTurns: WriterTurns
    /// Faults injected by tests (debug builds only).
    let faults = FaultInjector()
    /// What tests count of the library's work (debug builds only).
    let debugCounters = DebugCounters()
    /// Connections, codecs and extensions.
    let state: Mutex<DatabaseState>
    /// The commits this process published, with their changesets and subscribers.
    let commitLog: CommitLog
    let checkpointer: Checkpointer
    /// Where the database logs what it cannot throw (a `ROLLBACK` that failed after another
    /// error): the configuration's ``Configuration/checkpointLogger``, with the file's path.
    var logger: Logger { checkpointer.logger }
    /// The last WAL-index header whose commit counter a transaction read or a writer made, with
    /// that counter: see ``knownCommit(at:)``.
    let knownSnapshot = KnownSnapshot()
    /// Where every commit is announced, once (see ``CommitEvent``).
    let commitDispatcher: CommitDispatcher
    /// Every connection's commit log pin, and the oldest of them, for the commit log's trimming.
    let commitLogPins = CommitLogPins()
    /// How many extensions are registered: write transactions skip their hooks at no cost
    /// while there are none.
    let extensionCount = Atomic<Int>(0)
    /// ``DatabaseState/extensionGeneration``, readable without the state lock (stored with it):
    /// a write transaction whose upkeep is cached for it takes no lock on the registry.
    let registryGeneration = Atomic<UInt64>(0)
    /// Set by ``close()``: every call after it throws `databaseClosed`.
    let closed = Atomic<Bool>(false)
    /// What extension writers keep from one write transaction to the next.
    let extensionCaches = ExtensionCaches()
    /// `vacuum()` and `backup(to:)` while they run, which `close()` waits for.
    let operations = InFlightOperations()
    /// Publishes commits of other processes as they happen, once anything subscribed.
    let foreignCommitWatcher: ForeignCommitWatcher
    /// The file's extension catalog as last read, for the writer's upkeep check.
    let extensionCatalogCache = ExtensionCatalogCache()
    /// Purges history past ``Configuration/historyRetention``, off the commit path.
    var historyPurger: HistoryPurger { commitLog.purger }

    /// Opens or creates the database at `path` with the default configuration.
    ///
    /// - Throws: ``DatabaseError`` with code `alreadyOpen` when this process has the file open,
    ///   `notADatabase` for a foreign or damaged file (left untouched), `schemaTooNew` for a
    ///   SnapshotDB file written by a newer version, `unsupportedFormat` for a newer SQLite file
    ///   format, `corrupt` for damage the open reads, `walUnreadable` for a `-wal` SQLite
    ///   refuses, `cannotOpen`/`readOnly` when the file or its directory cannot be used.
    public convenience init(path: String) throws(DatabaseError) {
        try self.init(path: path, configuration: Configuration())
    }

    /// Opens or creates the database at `path` with `configuration`.
    ///
    /// A new file is created with ``Configuration/fileMode``, in WAL mode, with the current
    /// schema, under a temporary name in the same directory that is synced and then linked into
    /// place: a crash or power cut leaves no half-made file under `path`. An existing file is
    /// checked before SQLite touches it: a file that is not a SnapshotDB (or empty SQLite)
    /// database is refused and not modified, and no `-wal` or `-shm` is created for it. A file
    /// of zeros beside the hot journal of its own creation (an in-place creation cut short by a
    /// power cut) is rolled back by SQLite, as any SQLite client would, and created again.
    ///
    /// Nothing is written until the checks have read what the library needs (the header, the
    /// schema, the metadata rows and the commit counter): a refused open leaves the main file
    /// and its `-wal` exactly as they were (SQLite's own recovery may rebuild the `-shm`).
    /// `PRAGMA quick_check` is not run: it reads the whole file (about 0.1 s per 128 MiB from
    /// the page cache, the file's full size from disk when cold), a cost every open would pay.
    ///
    /// Damaged and unwritable files:
    ///
    /// - A `-wal` or `-shm` left by a process that is gone (a crash, a copy) is recovered by
    ///   SQLite and the open does not fail, except for a `-wal` whose intact header names a WAL
    ///   version SQLite does not read (`walUnreadable`) and a `-wal` or `-shm` that is not a
    ///   regular file (`cannotOpen`). The `-shm` is rebuilt from the `-wal` whatever it
    ///   holds. The `-wal` is replayed up to its first frame that is cut short or fails its
    ///   checksum: every commit checkpointed into the main file and every commit whose frames
    ///   come before the damage opens intact, values and commit counter of the same commit.
    ///   Commits after the damage are lost as if the process had died before making them (their
    ///   commit numbers are given again to the next commits), and the open's checkpoint
    ///   discards the damaged tail. A `-wal` of *another copy* of the database cannot be told
    ///   from its own: never move a database file without its `-wal`, or beside another's.
    /// - Damage to the main file is not looked for at open: reads and writes that reach a
    ///   damaged page throw ``DatabaseError/Code/corrupt`` with SQLite's message and change
    ///   nothing; values on intact pages stay readable.
    /// - In a directory that cannot be written (a read-only file system), a database whose
    ///   `-wal` and `-shm` exist opens read-only (reads work, writes throw `readOnly`); one
    ///   without them cannot be read by SQLite and the open throws `readOnly`.
    ///
    /// - Throws: `misuse` when a number of `configuration` is out of its range (a negative
    ///   count, size or duration), naming it, before the file is touched; otherwise see
    ///   ``init(path:)``.
    public convenience init(path: String, configuration: Configuration) throws(DatabaseError) {
        try configuration.validate()
        let resolved = try Self.resolve(path)
        try OpenFiles.claim(resolved)
        let opened: OpenedFile
        do throws(DatabaseError) {
            opened = try Self.openFile(at: resolved, configuration: configuration)
        } catch {
            OpenFiles.release(resolved)
            throw Self.naming(resolved, in: Self.explainUnwritableDirectory(error, path: resolved))
        }
        self.init(path: resolved, replica: nil, opened: opened, configuration: configuration)
    }

    /// What an open learnt from the file before the `Database` exists, and the handle it used
    /// (which becomes the checkpoint handle).
    struct OpenedFile: @unchecked Sendable {
        /// Handed to the checkpointer, which confines it to its queue.
        let setup: SQLiteHandle
        let latest: UInt64
        let latestToken: UInt64?
        let identity: UInt64
        let checkpointing: Configuration.Checkpointing
        /// Whether Litestream was recognized by its table while the configuration let
        /// SnapshotDB choose (said once in the log).
        let recognizedLitestream: Bool
        let pageSize: Int
        let isReadOnly: Bool
    }

    /// Checks, prepares and reads the file at `resolved` (claimed by the caller): see
    /// ``init(path:configuration:)``.
    private static func openFile(at resolved: String, configuration: Configuration) throws(DatabaseError)
        -> OpenedFile
    {
        var fileState = try Schema.inspectFile(at: resolved, logger: configuration.checkpointLogger)
        if configuration.readOnly {
            try checkReadOnlyOpen(fileState, path: resolved)
        }
        if case .missing = fileState {
            guard configuration.createIfMissing else {
                throw DatabaseError(
                    .cannotOpen,
                    "no database at \(resolved): the file does not exist, and Configuration.createIfMissing is "
                        + "false (nothing was created)")
            }
            let created = try Schema.createDatabase(
                at: resolved, mode: configuration.fileMode, logger: configuration.checkpointLogger)
            // Created by someone else meanwhile: checked like any existing file.
            fileState =
                created
                ? .snapshotDB(version: Schema.currentVersion)
                : try Schema.inspectFile(at: resolved, logger: configuration.checkpointLogger)
        }
        switch fileState {
        case .missing:
            throw DatabaseError(.cannotOpen, "\(resolved) was created and removed again while opening")
        case .new:
            try Schema.createFile(at: resolved, mode: configuration.fileMode)
        case .interruptedCreation, .snapshotDB, .emptyCandidate:
            break
        }
        // A -wal with frames must stay as it is until every check passed: closing the handle of
        // a refused open must not checkpoint it (`setCheckpointsOnClose(_:)`). An empty or
        // missing one is left to SQLite's close, which removes the files the open created
        // without writing to the main file.
        let walHasFrames = Schema.fileSize(resolved + "-wal") > 0
        let setup = try SQLiteHandle(path: resolved, readOnly: configuration.readOnly)
        if walHasFrames { setup.setCheckpointsOnClose(false) }
        setup.setBusyTimeout(milliseconds: configuration.busyTimeoutMilliseconds)
        try Schema.prepare(setup, path: resolved, logger: configuration.checkpointLogger)
        try setup.configureForSnapshotDB(
            synchronous: configuration.synchronous, journalSizeLimit: configuration.journalSizeLimit)
        let latest = try setup.readCommitState().commit
        let latestToken = try History.token(of: latest, on: setup)
        let identity = try History.identity(on: setup)
        var checkpointing = configuration.checkpointing
        let replicated = try setup.int64(Checkpointer.litestreamQuery) == 1
        if checkpointing == .automatic && replicated {
            checkpointing = .external(replicator: "litestream")
        }
        let pageSize = try setup.pageSize()
        if walHasFrames { setup.setCheckpointsOnClose(true) }
        if !checkpointing.checkpointsOnClose { setup.setCheckpointsOnClose(false) }
        return OpenedFile(
            setup: setup, latest: latest, latestToken: latestToken,
            identity: identity ?? 0,
            checkpointing: checkpointing,
            recognizedLitestream: replicated && configuration.checkpointing == .automatic, pageSize: pageSize,
            isReadOnly: setup.isReadOnly)
    }

    /// Refuses a read-only open (``Configuration/readOnly``) of a file that is not a SnapshotDB
    /// database yet: making it one would write.
    private static func checkReadOnlyOpen(_ state: Schema.FileState, path: String) throws(DatabaseError) {
        switch state {
        case .missing:
            throw DatabaseError(
                .cannotOpen,
                "no database at \(path): the file does not exist, and Configuration.readOnly opens only an "
                    + "existing database (nothing was created)")
        case .new, .interruptedCreation, .emptyCandidate:
            throw DatabaseError(
                .readOnly,
                "\(path) is not a SnapshotDB database yet, and Configuration.readOnly forbids writing its "
                    + "schema; open it once without readOnly (nothing was changed)")
        case .snapshotDB:
            break
        }
    }

    /// Makes the `Database` of an opened file (`replica == nil`) or read replica, whose `path`
    /// is claimed.
    init(path: String, replica: Replica?, opened: OpenedFile, configuration: Configuration) {
        self.path = path
        self.replica = replica
        self.role =
            replica.map { ReplicaRole(replica: $0) } ?? PrimaryRole(writesTheFile: !configuration.readOnly)
        self.configuration = configuration
        self.identity = opened.identity
        self.foreignCommitWatcher = ForeignCommitWatcher(
            path: path,
            pollInterval: role.watcherPollInterval)
        self.state = Mutex(DatabaseState())
        self.commitLog = CommitLog(
            latestCommit: opened.latest, latestToken: opened.latestToken,
            retention: configuration.commitLogRetention,
            retentionBytes: configuration.commitLogRetentionBytes,
            keepingTokens: role.comparesHistoryTokens)
        self.writerTurns = WriterTurns(
            walPath: path + "-wal", enabled: configuration.writerTurns && role.hasWAL)
        writer.lock.setIdleHandler { [writerTurns] in writerTurns.releaseCarried() }
        self.checkpointer = Checkpointer(
            path: path, configuration: configuration, pageSize: opened.pageSize, handle: opened.setup,
            replicator: opened.checkpointing.replicator, hasWAL: role.hasWAL,
            checkpoints: !configuration.readOnly)
        self.commitDispatcher = CommitDispatcher(
            knownSnapshot: knownSnapshot, writerTurns: writerTurns, extensionCaches: extensionCaches,
            checkpointer: checkpointer, historyPurger: commitLog.purger)
        if opened.recognizedLitestream { checkpointer.announceLitestream() }
        checkpointer.database = WeakDatabase(self)
        checkpointer.checkpointAtOpen(readOnly: opened.isReadOnly)
        OpenFiles.attach(path, self)
    }

    deinit {
        foreignCommitWatcher.stop()
        writerTurns.close()
        guard !isClosed else { return }
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
    /// a transaction, or at once while anything subscribes to ``changes()`` (its watcher).
    public var latestCommit: UInt64 { commitLog.latestCommit }

    /// Registers `codec` for the values of `collection`; values of other collections keep the
    /// default JSON codec.
    ///
    /// Register codecs right after the open, before any transaction, extension, consumer or
    /// observer: the registry is frozen at the first use of a codec (a connection's first
    /// decode or encode of a value, an extension's or consumer's first use), so a transaction
    /// that has read no value yet leaves it open, but nothing promises which comes first.
    ///
    /// - Throws: ``DatabaseError/Code/misuse`` once the registry is frozen: a codec that changed
    ///   under live connections would misread what they cached; `databaseClosed` after
    ///   ``close()``.
    public func register(_ codec: any ValueCodec, forCollection collection: String) throws(DatabaseError) {
        try checkOpen()
        try state.withLock { state throws(DatabaseError) in
            guard !state.codecsFrozen else {
                throw DatabaseError(
                    .misuse,
                    "codecs must be registered right after the open, before any transaction, extension, "
                        + "consumer or observer of the database (each of them reads values with the codecs "
                        + "registered by then)")
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

    /// SQLite can read a WAL database only with its `-wal` and `-shm` files; when it cannot
    /// create them (a read-only file system, a directory the process may not write), the open
    /// fails with SQLite's "unable to open database file" (`SQLITE_CANTOPEN`) or, when the file
    /// itself is read-only too, "attempt to write a readonly database". Either becomes
    /// `readOnly`, saying why.
    static func explainUnwritableDirectory(_ error: DatabaseError, path: String) -> DatabaseError {
        guard error.code == .cannotOpen || error.code == .readOnly, let sqliteCode = error.sqliteCode
        else { return error }
        let directory = URL(fileURLWithPath: path).deletingLastPathComponent().path
        guard access(directory, W_OK) != 0 else { return error }
        let reason = String(cString: strerror(errno))
        return DatabaseError(
            .readOnly,
            "\(path) cannot be read: its directory cannot be written (\(reason)), and SQLite needs to "
                + "create the -wal and -shm files beside a WAL database to read it (\(error.message))",
            sqliteCode: sqliteCode)
    }

    /// `error` with `path` in its message: an open that fails always names the file (SQLite's
    /// own messages, "database disk image is malformed", name none).
    static func naming(_ path: String, in error: DatabaseError) -> DatabaseError {
        guard !error.message.contains(path) else { return error }
        return DatabaseError(
            error.code, "\(path): \(error.message)", sqliteCode: error.sqliteCode,
            collection: error.collection,
            key: error.key, typeName: error.typeName, cause: error.cause)
    }

    /// The absolute path of `path` with symlinks resolved; the file itself need not exist.
    ///
    /// Refuses what names no file before any C call sees it: an empty path (which would
    /// resolve to the working directory), a path with a NUL character (which C would silently
    /// cut short, opening another file), and a symbolic link to a missing file.
    static func resolve(_ path: String) throws(DatabaseError) -> String {
        guard !path.isEmpty else {
            throw DatabaseError(.cannotOpen, "the database path is empty")
        }
        guard !path.utf8.contains(0) else {
            throw DatabaseError(
                .cannotOpen, "the database path \(path.debugDescription) contains a NUL character")
        }
        if let real = realpath(path, nil) {
            defer { free(real) }
            return String(cString: real)
        }
        // Fails whenever `path` is no symbolic link (most often a file yet to be created): its
        // directory is resolved below, which reports what is missing.
        if let destination = try? FileManager.default.destinationOfSymbolicLink(atPath: path) {
            throw DatabaseError(
                .cannotOpen, "\(path) is a symbolic link to \(destination), which does not exist")
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

/// A weak reference that can cross threads.
struct WeakDatabase: Sendable {
    weak var database: Database?
    init(_ database: Database?) { self.database = database }
}
