internal import Foundation
internal import Logging

#if canImport(Glibc)
    internal import Glibc
#elseif canImport(Darwin)
    internal import Darwin
#endif

/// The on-disk format of a SnapshotDB database and its explicit migrations.
///
/// - `PRAGMA application_id` marks the file as SnapshotDB's; `PRAGMA user_version` is the
///   schema version. Both are written while the file is still in rollback-journal mode, so the
///   main file's header always carries them (a foreign tool can tell what the file is without
///   reading the WAL).
/// - `snapshotdb_values` holds every value under `(collection, key)`.
/// - `snapshotdb_history` holds one row per commit: its number, kind, date, process, connection,
///   a random token, `info` and the changed keys with what extensions recorded (the encoding is
///   ``HistoryCoding``). **The commit counter is the newest row's number**: a commit writes its
///   history row in place of the counter row that schema 2 rewrote, so durable history costs
///   no extra page per commit. Rows older than the retention bound are purged, never the newest.
/// - `snapshotdb_meta` holds the database's random `identity` (a history position of another
///   file is refused, see ``HistoryPosition``) and two markers for writes made by foreign
///   clients: triggers on `snapshotdb_values` bump `external` for every row a foreign client
///   (the `sqlite3` shell, another library) changes and note its key in
///   `snapshotdb_foreign_changes`; SnapshotDB's own connections run with triggers disabled, so
///   their writes cost nothing extra. When `external` differs from `external_sealed`, the next
///   SnapshotDB transaction gives the foreign change a commit number of its own and a changeset
///   with exactly those keys ("sealing").
/// - `snapshotdb_consumers` holds the durable positions of named consumers (``Consumer``).
/// - `snapshotdb_extension_state` holds, beside the extension catalog, the collections each
///   extension derives from, who registered it, and whether a write left it stale
///   (``ExtensionUpkeep``).
enum Schema {
    /// `'SnDB'`, stored in the header's application id field.
    static let applicationID: Int32 = 0x536E_4442
    /// The schema version this library writes and reads.
    static let currentVersion: Int64 = 3

    /// A date in seconds since 1970, in SQL (`unixepoch('subsec')` needs SQLite 3.42).
    private static let sqlNow = "((julianday('now') - 2440587.5) * 86400.0)"

    /// The tables and triggers schema 3 added: durable history, foreign keys, consumers.
    static let historyObjects = """
        CREATE TABLE snapshotdb_history(
            number INTEGER PRIMARY KEY,
            kind INTEGER NOT NULL,
            date REAL NOT NULL,
            process INTEGER,
            connection TEXT,
            token INTEGER NOT NULL,
            info TEXT,
            changes BLOB
        );
        CREATE TABLE snapshotdb_foreign_changes(
            collection TEXT NOT NULL,
            key TEXT NOT NULL,
            PRIMARY KEY (collection, key)
        ) WITHOUT ROWID;
        CREATE TABLE IF NOT EXISTS snapshotdb_extensions(
            name TEXT PRIMARY KEY NOT NULL, kind TEXT NOT NULL, version TEXT NOT NULL) WITHOUT ROWID;
        CREATE TABLE snapshotdb_extension_state(
            name TEXT PRIMARY KEY NOT NULL,
            collections TEXT,
            registered_process INTEGER,
            registered_commit INTEGER,
            registered_connection TEXT,
            stale_commit INTEGER,
            stale_process INTEGER,
            stale_connection TEXT
        ) WITHOUT ROWID;
        CREATE TABLE snapshotdb_consumers(
            name TEXT PRIMARY KEY NOT NULL,
            position INTEGER NOT NULL,
            expired INTEGER NOT NULL DEFAULT 0,
            updated REAL NOT NULL
        );
        \(foreignWriteTriggers)
        INSERT INTO snapshotdb_meta(name, value) VALUES ('identity', random());
        """

    /// Notes the key of `row` (`NEW` or `OLD`) in `snapshotdb_foreign_changes` unless it is
    /// there already. Not `INSERT OR IGNORE`: the conflict policy of the statement that fired the
    /// trigger overrides the trigger's own, so a foreign client's UPSERT (whose `DO UPDATE` runs as
    /// `ABORT`), `UPDATE OR ABORT`, `OR FAIL` or `OR ROLLBACK` of a key already noted failed on
    /// the table's primary key; a statement that cannot conflict has no policy to take.
    private static func noteForeignKey(_ row: String) -> String {
        """
        INSERT INTO snapshotdb_foreign_changes SELECT \(row).collection, \(row).key WHERE NOT EXISTS
                (SELECT 1 FROM snapshotdb_foreign_changes WHERE collection = \(row).collection AND key = \(row).key);
        """
    }

    /// The triggers that count and note the writes of foreign clients (SnapshotDB's own
    /// connections run with triggers disabled).
    static let foreignWriteTriggers = """
        CREATE TRIGGER snapshotdb_external_insert AFTER INSERT ON snapshotdb_values BEGIN
            UPDATE snapshotdb_meta SET value = value + 1 WHERE name = 'external';
            \(noteForeignKey("NEW"))
        END;
        CREATE TRIGGER snapshotdb_external_update AFTER UPDATE ON snapshotdb_values BEGIN
            UPDATE snapshotdb_meta SET value = value + 1 WHERE name = 'external';
            \(noteForeignKey("OLD"))
            \(noteForeignKey("NEW"))
        END;
        CREATE TRIGGER snapshotdb_external_delete AFTER DELETE ON snapshotdb_values BEGIN
            UPDATE snapshotdb_meta SET value = value + 1 WHERE name = 'external';
            \(noteForeignKey("OLD"))
        END;
        """

    /// The text by which the triggers of files written before 0.2 are told apart (see
    /// ``upgradeForeignWriteTriggers(_:path:logger:)``).
    static let conflictingTriggerText = "INSERT OR IGNORE INTO snapshotdb_foreign_changes"

    /// The current schema, for a new file. Version 2 added `snapshotdb_values.metadata`,
    /// version 3 the durable history (its row 0 starts the history of a new file).
    static let createCurrent = """
        CREATE TABLE snapshotdb_meta(name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL);
        INSERT INTO snapshotdb_meta(name, value) VALUES ('external', 0), ('external_sealed', 0);
        CREATE TABLE snapshotdb_values(
            collection TEXT NOT NULL,
            key TEXT NOT NULL,
            data BLOB NOT NULL,
            metadata BLOB,
            PRIMARY KEY (collection, key)
        ) WITHOUT ROWID;
        \(historyObjects)
        INSERT INTO snapshotdb_history(number, kind, date, token)
            VALUES (0, \(HistoryKind.start.rawValue), \(sqlNow), random());
        PRAGMA application_id = \(applicationID);
        PRAGMA user_version = \(currentVersion);
        """

    /// The explicit migrations, by the version they start from: each runs in one transaction
    /// and sets the next version.
    static let migrations: [Int64: String] = [
        // Version 2: metadata beside each value (`ReadWriteTransaction.setMetadata`).
        1: "ALTER TABLE snapshotdb_values ADD COLUMN metadata BLOB; PRAGMA user_version = 2;",
        // Version 3: durable history. The counter row becomes the history's first row (a
        // "start" row: no history before it), and the triggers also note foreign keys.
        2: """
        DROP TRIGGER snapshotdb_external_insert;
        DROP TRIGGER snapshotdb_external_update;
        DROP TRIGGER snapshotdb_external_delete;
        \(historyObjects)
        INSERT INTO snapshotdb_history(number, kind, date, token)
            SELECT value, \(HistoryKind.start.rawValue), \(sqlNow), random()
            FROM snapshotdb_meta WHERE name = 'commit';
        DELETE FROM snapshotdb_meta WHERE name = 'commit';
        PRAGMA user_version = 3;
        """,
    ]

    /// What the first 100 bytes of an existing file say, read before SQLite touches the file.
    enum FileState {
        /// No file: SnapshotDB creates one (``createDatabase(at:mode:logger:)``).
        case missing
        /// An empty file: SnapshotDB writes its schema into it.
        case new
        /// A new database whose creation was cut short (``isInterruptedCreation(_:header:)``):
        /// SQLite's recovery empties it, then SnapshotDB writes its schema into it.
        case interruptedCreation
        /// A SnapshotDB database of schema version `version` (as the main file's header says).
        case snapshotDB(version: Int64)
        /// A SQLite database with no application id in rollback-journal mode: adopted if it
        /// holds no tables, refused otherwise (checked once opened, which creates no files).
        case emptyCandidate
    }

    /// Classifies the file at `path` without opening it through SQLite, so that a foreign or
    /// damaged file is refused before SQLite could create a `-wal` or `-shm` beside it. A read
    /// of the header that fails is logged on `logger` (the open is then refused as no database).
    static func inspectFile(at path: String, logger: Logger) throws(DatabaseError) -> FileState {
        var info = stat()
        if stat(path, &info) != 0 {
            if errno == ENOENT { return .missing }
            throw DatabaseError(.cannotOpen, "cannot stat \(path): \(String(cString: strerror(errno)))")
        }
        if (info.st_mode & S_IFMT) != S_IFREG {
            throw DatabaseError(.cannotOpen, "\(path) is not a regular file")
        }
        if info.st_size == 0 { return .new }
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw DatabaseError(.cannotOpen, "cannot read \(path): \(String(cString: strerror(errno)))")
        }
        let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        let header: Data
        do {
            header = try handle.read(upToCount: 100) ?? Data()
        } catch {
            // The open is refused below as "not a SQLite database (bad header)": say what failed.
            logger.warning(
                "could not read the header of \(path): \(error); the open refuses it as not a SQLite database",
                metadata: ["snapshotdb_path": "\(path)"])
            header = Data()
        }
        // Closing a descriptor that was only read from loses nothing if it fails: nothing was
        // written through it, and the header is in hand.
        try? handle.close()
        let magic = Data("SQLite format 3\u{0}".utf8)
        if header.count == 100, isInterruptedCreation(path, header: header) { return .interruptedCreation }
        guard header.count == 100, header.prefix(16) == magic else {
            throw DatabaseError(.notADatabase, "\(path) is not a SQLite database (bad header)")
        }
        let applicationID = Int32(bitPattern: bigEndian32(header, at: 68))
        let version = Int64(bigEndian32(header, at: 60))
        switch applicationID {
        case Schema.applicationID:
            try checkFormat(of: path, header: header)
            try checkNotTooNew(version, path: path)
            return .snapshotDB(version: version)
        case 0 where header[18] == 1 && header[19] == 1:
            try checkFormat(of: path, header: header)
            return .emptyCandidate
        default:
            throw DatabaseError(
                .notADatabase,
                "\(path) is a SQLite database of another application (application_id \(applicationID))")
        }
    }

    /// Brings an open database to the current schema version, creating it when empty.
    ///
    /// Runs on a handle still in rollback-journal mode for a new file, so the header fields
    /// land in the main file, then switches to WAL. A `ROLLBACK` of a failed migration that
    /// fails too is logged on `logger`.
    static func prepare(_ handle: SQLiteHandle, path: String, logger: Logger) throws(DatabaseError) {
        let applicationID = try handle.int64("PRAGMA application_id") ?? 0
        if applicationID == 0 {
            let tables = try handle.int64("SELECT count(*) FROM sqlite_schema") ?? 0
            guard tables == 0 else {
                throw DatabaseError(.notADatabase, "\(path) is a SQLite database of another application")
            }
            try handle.execute("BEGIN IMMEDIATE; \(createCurrent) COMMIT;")
        } else if applicationID != Int64(Schema.applicationID) {
            throw DatabaseError(.notADatabase, "\(path) is a SQLite database of another application")
        }
        let version = try handle.int64("PRAGMA user_version") ?? 0
        try checkNotTooNew(version, path: path)
        try checkIntact(handle, path: path, version: version)
        // Migrations write, so they run only once the checks proved the file readable.
        var migrated = version
        while let step = migrations[migrated], migrated < currentVersion {
            do {
                try handle.execute("BEGIN IMMEDIATE; \(step) COMMIT;")
            } catch {
                handle.rollback(
                    after: "a failed upgrade of \(path) from schema version \(migrated)", logger: logger)
                guard error.code == .readOnly else { throw error }
                // Schema 3 moved the commit counter into the history: an older file cannot be
                // read until it is upgraded once, which needs a writable file.
                throw DatabaseError(
                    .readOnly,
                    "\(path) has SnapshotDB schema version \(version), which must be upgraded to "
                        + "\(currentVersion) before this library can read it, and the file cannot be written; "
                        + "open it once where it is writable", cause: error)
            }
            migrated += 1
        }
        try upgradeForeignWriteTriggers(handle, path: path, logger: logger)
        let mode = try handle.string("PRAGMA journal_mode = WAL")
        guard mode?.lowercased() == "wal" else {
            throw DatabaseError(
                .sqlite, "\(path) could not be switched to WAL mode (got \(mode ?? "nothing"))")
        }
    }

    /// Replaces the foreign-write triggers of a file written before 0.2, which made a foreign
    /// client's UPSERT fail (see ``noteForeignKey(_:)``), by the current ones. They count and note
    /// the same writes, so the schema version stays: a file upgraded here is still read by
    /// earlier versions of this library. A read-only file keeps its triggers.
    static func upgradeForeignWriteTriggers(_ handle: SQLiteHandle, path: String, logger: Logger)
        throws(DatabaseError)
    {
        let outdated = """
            SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' AND name LIKE 'snapshotdb_external_%'
                AND instr(sql, '\(conflictingTriggerText)') > 0
            """
        guard try handle.int64(outdated) ?? 0 > 0 else { return }
        do {
            try handle.execute("BEGIN IMMEDIATE")
            // Another process may have replaced them meanwhile.
            if try handle.int64(outdated) ?? 0 > 0 {
                try handle.execute(
                    """
                    DROP TRIGGER snapshotdb_external_insert;
                    DROP TRIGGER snapshotdb_external_update;
                    DROP TRIGGER snapshotdb_external_delete;
                    \(foreignWriteTriggers)
                    """)
            }
            try handle.execute("COMMIT")
        } catch {
            handle.rollback(
                after: "a failed upgrade of the foreign-write triggers of \(path)", logger: logger)
            guard error.code == .readOnly else { throw error }
        }
    }

    /// Throws `schemaTooNew` for a file (`path`, as a message names it) of a schema `version`
    /// newer than this library reads.
    static func checkNotTooNew(_ version: Int64, path: String) throws(DatabaseError) {
        guard version > currentVersion else { return }
        throw DatabaseError(
            .schemaTooNew,
            "\(path) has SnapshotDB schema version \(version); this library reads up to \(currentVersion)")
    }

    /// The tables, triggers and metadata rows every transaction relies on, by type, in a file of
    /// schema `version`.
    static func requiredObjects(version: Int64) -> [String: [String]] {
        var tables = ["snapshotdb_meta", "snapshotdb_values"]
        if version >= 3 {
            tables += [
                "snapshotdb_history", "snapshotdb_foreign_changes", "snapshotdb_consumers",
                "snapshotdb_extensions",
                "snapshotdb_extension_state",
            ]
        }
        return [
            "table": tables,
            "trigger": [
                "snapshotdb_external_insert", "snapshotdb_external_update", "snapshotdb_external_delete",
            ],
        ]
    }

    static func requiredMetadata(version: Int64) -> [String] {
        version >= 3
            ? ["identity", "external", "external_sealed"] : ["commit", "external", "external_sealed"]
    }

    /// Refuses a SnapshotDB file whose schema or metadata another client damaged (dropped a
    /// table or trigger, deleted a row of `snapshotdb_meta`, emptied `snapshotdb_history`):
    /// opened, it would number commits wrong or miss foreign writes.
    static func checkIntact(_ handle: SQLiteHandle, path: String, version: Int64 = currentVersion)
        throws(DatabaseError)
    {
        for (type, names) in requiredObjects(version: version).sorted(by: { $0.key < $1.key }) {
            let list = names.map { "'\($0)'" }.joined(separator: ", ")
            let found = try handle.int64(
                "SELECT count(*) FROM sqlite_schema WHERE type = '\(type)' AND name IN (\(list))")
            guard found == Int64(names.count) else {
                throw DatabaseError(
                    .corrupt,
                    "\(path) is a damaged SnapshotDB database: a \(type) of snapshotdb_ (\(list)) is missing")
            }
        }
        let required = requiredMetadata(version: version)
        let list = required.map { "'\($0)'" }.joined(separator: ", ")
        let rows = try handle.int64("SELECT count(*) FROM snapshotdb_meta WHERE name IN (\(list))")
        guard rows == Int64(required.count) else { throw damagedMetadata(path: path) }
        if version >= 3 {
            let counted = try handle.int64("SELECT count(*) FROM (SELECT 1 FROM snapshotdb_history LIMIT 1)")
            guard counted == 1 else { throw damagedMetadata(path: path) }
        }
        if version == currentVersion { try checkColumns(handle, path: path) }
    }

    /// The columns of each of SnapshotDB's tables in the current schema, in order, read once
    /// from an in-memory database made with ``createCurrent``: the reference for
    /// ``checkColumns(_:path:)``, never a list kept by hand beside the SQL. `nil` only if SQLite
    /// cannot make an in-memory database (out of memory), and the check is then skipped: a
    /// damaged definition still fails at its first use, as it did before the check.
    static let currentColumns: [String: [String]]? = {
        guard let memory = try? SQLiteHandle(path: ":memory:") else { return nil }
        do {
            try memory.execute(createCurrent)
            return try columns(of: requiredObjects(version: currentVersion)["table"] ?? [], on: memory)
        } catch {
            return nil
        }
    }()

    /// The column names of each table of `tables`, in order, as `handle` reads them.
    private static func columns(of tables: [String], on handle: SQLiteHandle) throws(DatabaseError)
        -> [String: [String]]
    {
        var columns: [String: [String]] = [:]
        let statement = try handle.cachedStatement("SELECT name FROM pragma_table_info(?1) ORDER BY cid")
        defer { statement.reset() }
        for table in tables {
            try statement.bind(table, at: 1)
            var names: [String] = []
            while try statement.step() { names.append(statement.string(at: 0)) }
            statement.reset()
            columns[table] = names
        }
        return columns
    }

    /// Checks that SnapshotDB's tables have the columns of the current schema: a definition
    /// changed in `sqlite_schema` (by a foreign client, or damage) would otherwise open and fail
    /// at the first write with an untyped SQLite error ("table snapshotdb_history has no column
    /// named changes").
    ///
    /// - Throws: `corrupt` naming the table and the columns it has and should have.
    static func checkColumns(_ handle: SQLiteHandle, path: String) throws(DatabaseError) {
        guard let expected = currentColumns else { return }
        let found = try columns(of: expected.keys.sorted(), on: handle)
        for (table, names) in expected.sorted(by: { $0.key < $1.key }) where found[table] != names {
            let has = (found[table] ?? []).joined(separator: ", ")
            throw DatabaseError(
                .corrupt,
                "\(path) is a damaged SnapshotDB database: table \(table) has the columns (\(has)) where "
                    + "SnapshotDB's has (\(names.joined(separator: ", "))): its definition in sqlite_schema was "
                    + "changed")
        }
    }

    /// The error for a `snapshotdb_meta` table that lost rows SnapshotDB needs.
    static func damagedMetadata(path: String) -> DatabaseError {
        DatabaseError(
            .corrupt,
            "\(path) is a damaged SnapshotDB database: rows of snapshotdb_meta (the identity and the "
                + "foreign-write markers) or every row of snapshotdb_history (which holds the commit "
                + "counter) were deleted by another client")
    }
}
