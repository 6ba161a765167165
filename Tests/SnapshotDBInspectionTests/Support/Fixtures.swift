import Foundation
import SnapshotDBTestSupport
import Testing

/// A database of the engine's first schema, made by `python3` (``Python/createDatabase``) and
/// closed cleanly, so without `-wal`/`-shm`, in a temporary directory; the body gets its path.
func withFixtureDatabase<T>(
    pageSize: Int = 4096, encoding: String = "UTF-8", _ body: (String) throws -> T
) throws -> T {
    try withTemporaryDirectory { directory in
        let path = directory.appendingPathComponent("app.sqlite").path
        try Python.run(Python.createDatabase, path, String(pageSize), encoding)
        return try body(path)
    }
}

/// The python3 programs the tests run as foreign processes, with exactly the engine's schema.
enum Python {
    /// argv: path, page size, encoding. Creates the schema with commit counter 0, then closes.
    static let createDatabase = """
        import sqlite3, sys
        path, page_size, encoding = sys.argv[1], int(sys.argv[2]), sys.argv[3]
        c = sqlite3.connect(path, isolation_level=None)
        c.execute(f"PRAGMA page_size={page_size}")
        c.execute(f"PRAGMA encoding='{encoding}'")
        c.executescript('''
        PRAGMA journal_mode=WAL;
        PRAGMA application_id=1399735362;
        PRAGMA user_version=1;
        CREATE TABLE snapshotdb_meta(name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL);
        CREATE TABLE snapshotdb_values(collection TEXT NOT NULL, key TEXT NOT NULL, data BLOB NOT NULL,
            PRIMARY KEY (collection, key)) WITHOUT ROWID;
        INSERT INTO snapshotdb_meta VALUES('commit', 0);
        ''')
        c.close()
        """

    /// argv: path, commits, then "close" or "crash". Each commit upserts a value and adds 1 to
    /// the counter, as the engine does; "crash" exits without closing, leaving -wal and -shm.
    static let commit = """
        import os, sqlite3, sys
        path, commits, ending = sys.argv[1], int(sys.argv[2]), sys.argv[3]
        c = sqlite3.connect(path, isolation_level=None)
        c.execute('PRAGMA wal_autocheckpoint=0')
        for i in range(commits):
            c.execute('BEGIN IMMEDIATE')
            c.execute("INSERT OR REPLACE INTO snapshotdb_values VALUES('items', ?, ?)", (str(i), os.urandom(200)))
            c.execute("UPDATE snapshotdb_meta SET value = value + 1 WHERE name = 'commit'")
            c.execute('COMMIT')
        sys.stdout.flush()
        if ending == 'crash':
            os._exit(0)
        c.close()
        """

    /// argv: path. Holds `BEGIN; SELECT` (a snapshot) and prints `ready <counter>`; exits on any
    /// line on stdin.
    static let holdReader = """
        import sqlite3, sys
        c = sqlite3.connect(sys.argv[1], isolation_level=None)
        c.execute('PRAGMA wal_autocheckpoint=0')
        c.execute('BEGIN')
        value = c.execute("SELECT value FROM snapshotdb_meta WHERE name = 'commit'").fetchone()[0]
        print('ready', value, flush=True)
        sys.stdin.readline()
        c.execute('COMMIT')
        c.close()
        """

    /// argv: path. Holds an open write transaction (`BEGIN IMMEDIATE`, the WAL write lock) and
    /// prints `ready <counter>`; rolls back and exits on any line on stdin.
    static let holdWriter = """
        import sqlite3, sys
        c = sqlite3.connect(sys.argv[1], isolation_level=None)
        c.execute('PRAGMA wal_autocheckpoint=0')
        c.execute('BEGIN IMMEDIATE')
        value = c.execute("SELECT value FROM snapshotdb_meta WHERE name = 'commit'").fetchone()[0]
        print('ready', value, flush=True)
        sys.stdin.readline()
        c.execute('ROLLBACK')
        c.close()
        """

    /// argv: path. Prints the commit counter as SQLite reads it.
    static let readCounter = """
        import sqlite3, sys
        c = sqlite3.connect(sys.argv[1], isolation_level=None)
        print(c.execute("SELECT value FROM snapshotdb_meta WHERE name = 'commit'").fetchone()[0])
        c.close()
        """

    /// Runs `python3 -c script arguments...` to completion; returns its standard output.
    @discardableResult
    static func run(_ script: String, _ arguments: String...) throws -> String {
        let result = try ChildProcess.run("/usr/bin/python3", ["-c", script] + arguments)
        #expect(result.status == 0, "python3 failed: \(result.standardError)")
        return result.standardOutput
    }
}

/// A foreign process holding a transaction open until told to finish.
final class ReaderProcess {
    private let child: ChildProcess
    /// The commit counter the reader's snapshot sees, from its `ready` line.
    let commit: UInt64

    var pid: Int32 { child.processID }

    /// Starts `python3` running `script` (by default holding a snapshot of `path`) and waits for
    /// its `ready` line (no sleeps).
    init(path: String, script: String = Python.holdReader) throws {
        child = try ChildProcess(python: script, [path])
        let line = (try? child.readLine()) ?? ""
        let words = line.split(separator: " ")
        guard words.count == 2, words[0] == "ready", let commit = UInt64(words[1]) else {
            child.finish()
            throw ReaderFailed(output: line + child.standardError)
        }
        self.commit = commit
    }

    struct ReaderFailed: Error {
        var output: String
    }

    /// Ends the read transaction and waits for the process to exit.
    func finish() {
        guard child.isRunning else { return }
        try? child.send("quit")
        child.finish()
    }

    deinit { finish() }
}

/// The built `snapshotdb` binary, run as a user would.
enum Tool {
    /// `snapshotdb`, next to the test bundle in the build products directory.
    static let url: URL? = BuiltProducts.executable("snapshotdb")

    static func run(_ arguments: String...) throws -> ChildResult {
        try run(arguments)
    }

    static func run(_ arguments: [String]) throws -> ChildResult {
        let url = try #require(Tool.url, "the snapshotdb binary is not next to the test bundle")
        return try ChildProcess.run(url.path, arguments)
    }

    /// `snapshotdb inspect --json FILE`, decoded with JSONSerialization.
    static func inspectJSON(_ path: String, _ extra: String...) throws -> [String: Any] {
        let result = try run(["inspect", "--json", path] + extra)
        #expect(result.status == 0 || result.status == 1, "inspect failed: \(result.standardError)")
        let object = try JSONSerialization.jsonObject(with: Data(result.standardOutput.utf8))
        return try #require(object as? [String: Any])
    }
}

/// The bytes of a database's three files (`nil` for a missing one), to prove nothing changed.
struct FileSet: Equatable {
    var database: Data?
    var wal: Data?
    var sharedMemory: Data?
    var directoryListing: [String]

    init(databasePath path: String) {
        database = FileManager.default.contents(atPath: path)
        wal = FileManager.default.contents(atPath: path + "-wal")
        sharedMemory = FileManager.default.contents(atPath: path + "-shm")
        let directory = URL(fileURLWithPath: path).deletingLastPathComponent().path
        directoryListing = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).sorted()
    }
}

extension [String: Any] {
    /// The value at a dotted path such as `snapshotDB.commitCounter`.
    func value(at path: String) -> Any? {
        var current: Any? = self
        for key in path.split(separator: ".") {
            if let array = current as? [Any], let index = Int(key) {
                current = index < array.count ? array[index] : nil
            } else {
                current = (current as? [String: Any])?[String(key)]
            }
        }
        return current
    }
}
