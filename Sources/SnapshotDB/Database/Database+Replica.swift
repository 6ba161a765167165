internal import Foundation
internal import SnapshotDBLocking

#if canImport(Glibc)
    internal import Glibc
#elseif canImport(Darwin)
    internal import Darwin
#endif

/// Where a read replica is read from: the SQLite VFS that serves it and the name it is opened by.
struct Replica: Sendable {
    let vfs: String
    let name: String

    /// A URI that opens the local file at `path` with SQLite's default Unix VFS, whatever VFS
    /// the handle that names it uses (`VACUUM INTO` of a replica writes a local copy).
    static func localFileURI(_ path: String) -> String {
        var allowed = CharacterSet.urlPathAllowed
        allowed.remove(charactersIn: "?#%")
        let encoded = path.addingPercentEncoding(withAllowedCharacters: allowed) ?? path
        return "file:\(encoded)?vfs=unix"
    }
}

extension Database {
    /// Opens a read replica of a SnapshotDB database, served by the registered SQLite VFS `vfs`
    /// under `name`: for example Litestream's VFS, which reads the pages of a replica that
    /// `litestream replicate` keeps (``LitestreamVFS``).
    ///
    /// ```swift
    /// // started with LITESTREAM_REPLICA_URL=s3://bucket/app in the environment
    /// try LitestreamVFS.register(extensionPath: vfsLibrary)
    /// let replica = try Database(replica: "app.sqlite", vfs: LitestreamVFS.name)
    /// let ui = replica.newConnection(name: "ui")
    /// try ui.beginLongLivedReadTransaction()      // a bookmark on the replica
    /// for await _ in replica.changes() {           // the primary's commits, as they arrive
    ///     let changesets = try ui.beginLongLivedReadTransaction()   // exact, from the history
    /// }
    /// ```
    ///
    /// A replica reads as the primary does: values, views, indexes and full-text search (when
    /// the same extensions are registered on it), bookmarks that keep their commit while the
    /// replica advances, and each commit's exact changeset (read from the durable history that
    /// the replica carries). The primary's commits arrive as the replicator copies them;
    /// ``changes()`` hears of them by polling the replica every 250 ms while anything
    /// subscribes.
    ///
    /// It never writes: read-write transactions, ``vacuum()``, ``checkpoint(_:)``,
    /// ``purgeHistory()`` and consumer acknowledgements throw
    /// ``DatabaseError/Code/readOnly``. An extension not built on the primary cannot be
    /// registered here (its build would write). Foreign writes on the primary that its
    /// SnapshotDB has not yet sealed with a commit number read as an external changeset.
    ///
    /// With Litestream's VFS each connection follows the replica on its own, and a connection
    /// inside a read transaction keeps its pages until the transaction ends (the VFS applies
    /// new pages at its unlock): so a bookmark is a snapshot of the replica, as on the primary.
    /// The VFS polls the replica per connection, once a second: one connection may see a newer
    /// commit than another for that long, so ``latestCommit`` is the newest any connection saw
    /// and an advance may stop short of it (advance again to catch up); a snapshot behind
    /// another connection's is not taken for older contents put back. A primary that *was* put
    /// back to an older commit and went on under the same numbers is told apart by its history
    /// rows' tokens, or by a connection's snapshot moving back: such advances return an external
    /// changeset and drop the cache until the replica passes the newest commit it had published.
    /// Connections open a new SQLite handle once the put-back is seen, and when their snapshot
    /// stays behind what another handle published (Litestream's VFS can stop following on the
    /// connections open across a put-back: see `ReplicaHandleFollowing`).
    /// A bookmark older than the replica's retention (`l0-retention`, 5 minutes by default, and
    /// its compactions) can find its pages gone and fail to read; advance bookmarks more often
    /// than that.
    ///
    /// - Parameters:
    ///   - name: the name the VFS serves the replica under (Litestream's VFS serves one replica
    ///     under any name).
    ///   - vfs: the name of a VFS registered in this process (``LitestreamVFS/register(extensionPath:)``,
    ///     ``loadSQLiteExtension(at:entryPoint:)``).
    ///   - configuration: the configuration, as for a primary (its checkpoint settings do not
    ///     apply: a replica has no WAL of its own).
    /// - Throws: `cannotOpen` when no VFS of that name is registered, `alreadyOpen` when this
    ///   process has the same replica open, `notADatabase` when the replica holds another
    ///   application's database (a replica URL that holds no backup yet is another matter:
    ///   Litestream's VFS waits in the open until one appears, for ever for a mistyped URL), `schemaTooNew` or `readOnly` when its schema is not this library's (the
    ///   primary must be opened once by this version to upgrade it), `corrupt` for a damaged
    ///   schema; `misuse` when a number of `configuration` is out of its range, naming it.
    public convenience init(replica name: String, vfs: String, configuration: Configuration = Configuration())
        throws(DatabaseError)
    {
        try configuration.validate()
        for (what, value) in [("replica name", name), ("VFS name", vfs)] {
            guard !value.isEmpty, !value.utf8.contains(0) else {
                throw DatabaseError(
                    .cannotOpen, "the \(what) \(value.debugDescription) is empty or contains a NUL")
            }
        }
        guard SQLiteLibrary.hasVFS(named: vfs) else {
            throw DatabaseError(
                .cannotOpen,
                "no SQLite VFS named '\(vfs)' is registered in this process: load it first "
                    + "(LitestreamVFS.register(extensionPath:), or Database.loadSQLiteExtension(at:))")
        }
        let key = "\(vfs):\(name)"
        // Litestream's VFS serves the one replica that LITESTREAM_REPLICA_URL names, whatever
        // name it is opened by: another name is the same database, not a second replica.
        try OpenFiles.claim(
            key,
            sharing: vfs == LitestreamVFS.name
                ? (
                    prefix: "\(vfs):",
                    reason: "Litestream's VFS serves one replica per process (the one LITESTREAM_REPLICA_URL "
                        + "names), so another name opens the same database; share that Database, or serve "
                        + "another replica from another process"
                ) : nil)
        let opened: OpenedFile
        do throws(DatabaseError) {
            let deadline = ContinuousClock.now + configuration.replicaOpenTimeout
            if vfs == LitestreamVFS.name {
                try LitestreamVFS.waitForBackup(within: configuration.replicaOpenTimeout)
            }
            while true {
                do throws(DatabaseError) {
                    opened = try Self.openReplica(
                        name: name, vfs: vfs, describedAs: key, configuration: configuration)
                    break
                } catch {
                    // A first backup Litestream is still writing can read as a database that is
                    // not complete yet (SQLite's "SQL logic error", no application id): the VFS
                    // is asked again until the replica open's time limit, then the error stands.
                    let incomplete = [DatabaseError.Code.sqlite, .notADatabase, .corrupt].contains(error.code)
                    guard vfs == LitestreamVFS.name, incomplete, ContinuousClock.now < deadline else {
                        throw error
                    }
                    Thread.sleep(forTimeInterval: 0.05)
                }
            }
        } catch {
            OpenFiles.release(key)
            throw error
        }
        self.init(
            path: key, replica: Replica(vfs: vfs, name: name), opened: opened, configuration: configuration)
    }

    /// Whether this database is a read replica (``init(replica:vfs:configuration:)``).
    public var isReplica: Bool { replica != nil }

    /// The name SQLite opens this database's file by: its path, or a replica's name.
    var fileName: String { replica?.name ?? path }

    /// The VFS that serves this database's file: SnapshotDB's own, or a replica's.
    var vfsName: String? { replica?.vfs }

    /// A URI that opens the local file at `path` whatever the VFS of this database's handles (a
    /// replica's VFS would otherwise serve a `VACUUM INTO` copy too).
    func localFileURI(_ path: String) -> String {
        replica == nil ? path : Replica.localFileURI(path)
    }

    /// A read replica's watcher saw its file at `commit`, after `previous` (its last look): a
    /// lower commit is the primary put back (a handle follows the replica forward only); a
    /// higher one under numbers the marked log published already is the put-back primary going
    /// on. Either wakes the subscribers (see ``CommitLog/markForeignHistory(at:)``).
    func replicaWatcherSaw(_ commit: UInt64, after previous: UInt64?) {
        guard replica != nil, let previous, commit != previous else { return }
        if commit < previous { markForeignHistory(at: commit) }
        // Also after a mark that was not new (a connection marked first, at another commit):
        // this commit's wake is due all the same.
        for continuation in commitLog.streamsForReusedNumber(commit) { continuation.finish() }
    }

    /// Checks and reads a replica: the schema must be this library's current one, intact; no
    /// migration and no WAL switch (both would write).
    private static func openReplica(
        name: String, vfs: String, describedAs key: String, configuration: Configuration
    ) throws(DatabaseError) -> OpenedFile {
        let setup = try SQLiteHandle(path: name, vfs: vfs)
        setup.setBusyTimeout(milliseconds: configuration.busyTimeoutMilliseconds)
        let applicationID = try setup.int64("PRAGMA application_id") ?? 0
        guard applicationID == Int64(Schema.applicationID) else {
            throw DatabaseError(
                .notADatabase,
                "the replica \(key) is not a SnapshotDB database (application_id \(applicationID))")
        }
        let version = try setup.int64("PRAGMA user_version") ?? 0
        try Schema.checkNotTooNew(version, path: "the replica \(key)")
        if version < Schema.currentVersion {
            throw DatabaseError(
                .readOnly,
                "the replica \(key) has SnapshotDB schema version \(version), which must be upgraded to "
                    + "\(Schema.currentVersion) before this library can read it; open the primary once with this version"
            )
        }
        try Schema.checkIntact(setup, path: "the replica \(key)", version: version)
        try setup.configureForSnapshotDB(
            synchronous: configuration.synchronous, journalSizeLimit: configuration.journalSizeLimit)
        let latest = try setup.readCommitState().commit
        let latestToken = try History.token(of: latest, on: setup)
        let identity = try History.identity(on: setup)
        return OpenedFile(
            setup: setup, latest: latest, latestToken: latestToken,
            identity: identity ?? 0,
            checkpointing: .external(replicator: vfs), recognizedLitestream: false,
            pageSize: try setup.pageSize(),
            isReadOnly: true)
    }

    /// A new SQLite handle on this database, configured as every SnapshotDB handle is: on the
    /// file, or through the replica's VFS.
    func openHandle() throws(DatabaseError) -> SQLiteHandle {
        let handle = try SQLiteHandle(
            path: replica?.name ?? path, readOnly: configuration.readOnly, vfs: replica?.vfs)
        #if DEBUG
            handle.faults = faults
        #endif
        handle.setBusyTimeout(milliseconds: configuration.busyTimeoutMilliseconds)
        try handle.configureForSnapshotDB(
            synchronous: configuration.synchronous, journalSizeLimit: configuration.journalSizeLimit)
        // SQLite's last connection checkpoints and deletes the WAL as it closes: never behind an
        // external replicator's back.
        if !checkpointing.checkpointsOnClose { handle.setCheckpointsOnClose(false) }
        return handle
    }

    /// Throws `readOnly` on a read replica, or a database opened with ``Configuration/readOnly``,
    /// which `operation` would write.
    func checkWritable(_ operation: String) throws(DatabaseError) {
        if configuration.readOnly {
            throw DatabaseError(
                .readOnly, "\(operation) would write, and \(path) was opened with Configuration.readOnly")
        }
        guard let replica else { return }
        throw DatabaseError(
            .readOnly,
            "\(operation) would write, and \(replica.vfs):\(replica.name) is a read replica; write to the primary"
        )
    }

    /// Loads a SQLite loadable extension (`sqlite3_load_extension`) into this process: for a VFS
    /// such as Litestream's, which registers itself with SQLite for every handle of the process.
    ///
    /// - Parameters:
    ///   - path: the shared library (SQLite adds the platform's suffix when it is left out).
    ///   - entryPoint: its init function; by default SQLite derives it from the file name.
    /// - Throws: `cannotOpen` with SQLite's message when the library cannot be loaded.
    public static func loadSQLiteExtension(at path: String, entryPoint: String? = nil) throws(DatabaseError) {
        try SQLiteLibrary.loadExtension(at: path, entryPoint: entryPoint)
    }
}

/// Litestream's VFS (PyPI's `litestream-vfs`, or a build of `cmd/litestream-vfs`): it serves
/// reads of a Litestream replica to SQLite, fetching pages from the replica (a directory, S3,
/// SFTP...) and following it as `litestream replicate` copies new commits. SnapshotDB opens it
/// as a read replica (``Database/init(replica:vfs:configuration:)``).
///
/// The VFS is written in Go, and reads its settings from the environment the process *started*
/// with (Go takes its copy of the environment at the start, so `setenv` later is not seen):
/// start the process with `LITESTREAM_REPLICA_URL` set (`file:///path`, `s3://bucket/path`,
/// ...), and `LITESTREAM_LOG_FILE` (the VFS logs to standard output otherwise). It serves one
/// replica per process: that URL.
public enum LitestreamVFS {
    /// The name the VFS registers under.
    public static let name = "litestream"

    /// Loads Litestream's VFS library into this process, once, and returns the replica URL it
    /// serves.
    ///
    /// - Parameter extensionPath: the VFS library, e.g. `litestream-vfs.so` of PyPI's
    ///   `litestream-vfs` (`python3 -c 'import litestream_vfs; print(litestream_vfs.loadable_path())'`).
    /// litestream-vfs 0.5.17 also registers an automatic extension that makes every other SQLite
    /// open of the process fail; when it finds that, this clears the process's automatic
    /// extensions (`sqlite3_reset_auto_extension`): register your own after this call.
    ///
    /// - Throws: `misuse` when the process did not start with `LITESTREAM_REPLICA_URL` (the VFS
    ///   would fail every open with "SQL logic error"), or when other code registered a VFS of
    ///   that name; `cannotOpen` when the library cannot be loaded.
    @discardableResult
    public static func register(extensionPath: String) throws(DatabaseError) -> String {
        try registration.withLock { registered throws(DatabaseError) in
            if let registered { return registered }
            guard let url = startEnvironment()["LITESTREAM_REPLICA_URL"], !url.isEmpty else {
                throw DatabaseError(
                    .misuse,
                    "Litestream's VFS reads LITESTREAM_REPLICA_URL from the environment the process started with "
                        + "(it does not see setenv); start the process with it set to the replica's URL")
            }
            guard !SQLiteLibrary.hasVFS(named: name) else {
                throw DatabaseError(
                    .misuse, "a VFS named '\(name)' was registered in this process by other code")
            }
            try Database.loadSQLiteExtension(at: extensionPath)
            guard SQLiteLibrary.hasVFS(named: name) else {
                throw DatabaseError(
                    .cannotOpen, "\(extensionPath) loaded but registered no VFS named '\(name)'")
            }
            if !otherOpensWork() {
                // litestream-vfs 0.5.17 registers an automatic extension (its SQL functions) whose
                // C function is declared `void`: SQLite reads an undefined result, and every
                // later open of a file *not* on its VFS fails with "automatic extension loading
                // failed" (local files, backups). Clearing the automatic extensions mends it;
                // the VFS itself is unaffected (only its SQL functions are gone).
                SQLiteLibrary.resetAutomaticExtensions()
                guard otherOpensWork() else {
                    throw DatabaseError(
                        .cannotOpen,
                        "after loading \(extensionPath), SQLite cannot open other databases in this process")
                }
            }
            registered = url
            return url
        }
    }

    /// Whether SQLite still opens a database that is not on Litestream's VFS.
    private static func otherOpensWork() -> Bool { SQLiteLibrary.opensInMemory() }

    /// The replica URL the VFS was registered for in this process.
    private static let registration = Mutex<String?>(nil)

    /// Waits at most `timeout` for a first backup (an `.ltx` file) at a `file://` replica URL,
    /// which the VFS would otherwise wait for without end; returns at once for other URLs,
    /// whose stores only the VFS can read.
    ///
    /// - Throws: `cannotOpen` naming the URL and what was waited for.
    static func waitForBackup(within timeout: Duration) throws(DatabaseError) {
        guard let url = registration.withLock({ $0 }), url.hasPrefix("file://") else { return }
        let directory = String(url.dropFirst("file://".count))
        let deadline = ContinuousClock.now + timeout
        while true {
            // (No directory yet: no backup either.)
            let files = (try? FileManager.default.subpathsOfDirectory(atPath: directory)) ?? []
            if files.contains(where: { $0.hasSuffix(".ltx") }) { return }
            guard ContinuousClock.now < deadline else {
                throw DatabaseError(
                    .cannotOpen,
                    "the replica \(url) holds no backup (no .ltx file) after \(timeout): Litestream has not "
                        + "replicated a primary there (is LITESTREAM_REPLICA_URL right, and does `litestream "
                        + "replicate` run?); Configuration.replicaOpenTimeout sets how long an open waits")
            }
            // Litestream writes its first backup within about a second of starting: a poll of a
            // directory listing every 50 ms costs little meanwhile.
            Thread.sleep(forTimeInterval: 0.05)
        }
    }

    /// The environment as the process started with it: what Go's runtime reads.
    static func startEnvironment() -> [String: String] {
        #if os(Linux)
            guard let data = FileManager.default.contents(atPath: "/proc/self/environ") else { return [:] }
            var environment: [String: String] = [:]
            for entry in data.split(separator: 0) {
                let text = String(decoding: entry, as: UTF8.self)
                guard let equals = text.firstIndex(of: "=") else { continue }
                environment[String(text[..<equals])] = String(text[text.index(after: equals)...])
            }
            return environment
        #else
            return ProcessInfo.processInfo.environment
        #endif
    }
}

/// A read replica (``Database/init(replica:vfs:configuration:)``): it follows another process's
/// primary through a VFS, writes nothing, and tells its snapshots apart by their history tokens,
/// since its primary may be put back to an older commit.
struct ReplicaRole: DatabaseRole {
    let replica: Replica

    var hasWAL: Bool { false }
    var writesTheFile: Bool { false }
    var cannotWriteReason: String { "a read replica cannot build it; register it on the primary" }
    var comparesHistoryTokens: Bool { true }
    var handlesMayStopFollowing: Bool { true }
    var watcherPollInterval: Int32 { ForeignCommitWatcher.replicaPollInterval }

    func judge(_ state: inout CommitState, published: UInt64, in database: Database) {
        // Each connection follows the replica on its own (Litestream's VFS polls it per
        // connection): a snapshot behind another connection's is not older contents put back,
        // only a connection that has not caught up yet. Nothing can be sealed here: another
        // history is read unsealed, with the cache dropped.
        state.hasUnnumberedForeignWrites = state.unsealed != 0
        if database.holdsAnotherHistory(state, published: published) {
            database.markForeignHistory(at: state.commit)
            state.unsealed = max(state.unsealed, 1)
            state.isAnotherHistory = true
        }
        // A snapshot whose row has another token than the one published under its number is the
        // primary put back to an older commit (a point-in-time restore) that went on, or not,
        // with other commits: the log's changesets are perhaps another history's. They are
        // marked so (no reader moves its cache or reports an advance by them), and this snapshot
        // is read unsealed, with its cache dropped, and reported as external even when the
        // bookmark moved back to it. (Whatever `published`, loaded before the transaction began:
        // the log's tokens are read now.)
        if let token = state.token, let known = database.commitLog.token(of: state.commit), known != token {
            database.markForeignHistory(at: state.commit)
            state.unsealed = max(state.unsealed, 1)
            state.isAnotherHistory = true
        }
    }

    /// A replica reads its history rows whatever they are: the log compares their tokens, under
    /// its lock, with those it published (``CommitLog/publish(through:loaded:)``).
    func publishesHistory(of handle: SQLiteHandle, published: UInt64, in database: Database) -> Bool { true }

    /// A replica's WAL frames are its VFS's, not a WAL this process checkpoints.
    func sawSnapshot(_ state: CommitState, header: WALIndexHeader, in database: Database) {}
}
