import Foundation
import SnapshotDB
import SnapshotDBTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The bytes of every regular file in `directory`, by name: equal snapshots prove that nothing
/// was created, removed or changed.
func directoryContents(_ directory: URL) throws -> [String: Data] {
    var files: [String: Data] = [:]
    for name in try FileManager.default.contentsOfDirectory(atPath: directory.path) {
        var isDirectory: ObjCBool = false
        let path = directory.appendingPathComponent(name).path
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue {
            files[name + "/"] = Data()
        } else {
            files[name] = try Data(contentsOf: URL(fileURLWithPath: path))
        }
    }
    return files
}

/// Runs `sql` on `path` with the `sqlite3` shell and returns its output.
@discardableResult
func sqlite3(_ path: String, _ sql: String) throws -> String {
    try run("/usr/bin/sqlite3", [path, sql])
}

/// Whether SQLite's own `PRAGMA integrity_check`, run by the `sqlite3` shell, finds `path` sound.
func isIntact(_ path: String) throws -> Bool {
    do {
        return try sqlite3(path, "PRAGMA integrity_check") == "ok\n"
    } catch let failure as ChildProcessFailed where failure.standardError.contains("malformed") {
        return false
    }
}

/// Deterministic bytes that are not a valid SQLite page, WAL or wal-index: the same `seed`
/// always gives the same garbage, so a failure reproduces.
func garbage(count: Int, seed: UInt64 = 0x5EED) -> Data {
    var state = seed
    var bytes = [UInt8](repeating: 0, count: count)
    for index in bytes.indices {
        // xorshift64*
        state ^= state >> 12
        state ^= state << 25
        state ^= state >> 27
        bytes[index] = UInt8(truncatingIfNeeded: (state &* 0x2545_F491_4F6C_DD1D) >> 56)
    }
    return Data(bytes)
}

/// Overwrites `data.count` bytes of the file at `path`, starting at `offset`.
func overwrite(_ path: String, at offset: Int, with data: Data) throws {
    let handle = try FileHandle(forUpdating: URL(fileURLWithPath: path))
    defer { try? handle.close() }
    try handle.seek(toOffset: UInt64(offset))
    try handle.write(contentsOf: data)
}

/// A `python3` child process that opens a database with Python's `sqlite3` module, runs
/// statements, prints `ready` once it holds what they lock, and keeps holding it until told.
///
/// Nothing in the test sleeps: the test waits for the child's `ready` line, and the child waits
/// for the test's lines on its standard input (each one a statement to run; an empty line or
/// end of input closes the connection, which rolls back an open transaction, and exits).
final class SQLiteChild {
    static let script = """
        import sqlite3, sys
        connection = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=0)
        for statement in sys.argv[2:]:
            connection.execute(statement).fetchall()
        print("ready", flush=True)
        for line in sys.stdin:
            if not line.strip():
                break
            connection.execute(line).fetchall()
            print("done", flush=True)
        connection.close()
        print("released", flush=True)
        """

    private let child: ChildProcess

    /// Starts the child on `path`, runs `statements` in it and waits for its `ready`.
    init(path: String, statements: [String]) throws {
        child = try ChildProcess(python: Self.script, [path] + statements)
        try expectLine("ready")
    }

    /// Runs one more statement in the child and waits until it has.
    func execute(_ statement: String) throws {
        try child.send(statement)
        try expectLine("done")
    }

    /// Closes the child's connection (rolling back what it did not commit) and waits for it to
    /// exit.
    func release() throws {
        child.closeInput()
        try expectLine("released")
        #expect(child.finish() == 0)
    }

    private func expectLine(_ expected: String) throws {
        let line = try child.readLine()
        #expect(line == expected)
    }
}

/// A read-only bind mount of a directory, the only way to make a file unwritable for `root`
/// (permission bits do not stop it). Needs `CAP_SYS_ADMIN`; tests that use it are skipped,
/// visibly, where mounting is impossible (``isAvailable``).
struct ReadOnlyMount {
    /// The read-only view.
    let url: URL

    /// Whether this process can make read-only bind mounts; probed once.
    static let isAvailable: Bool = {
        guard getuid() == 0 else { return false }
        return
            (try? withTemporaryDirectory { directory in
                let source = directory.appendingPathComponent("source")
                try FileManager.default.createDirectory(at: source, withIntermediateDirectories: false)
                let mount = try ReadOnlyMount(of: source, at: directory.appendingPathComponent("view"))
                defer { mount.unmount() }
                return creat(mount.url.appendingPathComponent("probe").path, 0o600) < 0 && errno == EROFS
            }) ?? false
    }()

    /// Mounts `source` read-only at `mountPoint` (created if missing).
    init(of source: URL, at mountPoint: URL) throws {
        try FileManager.default.createDirectory(at: mountPoint, withIntermediateDirectories: true)
        try run("/usr/bin/mount", ["--bind", source.path, mountPoint.path])
        do {
            try run("/usr/bin/mount", ["-o", "remount,bind,ro", mountPoint.path])
        } catch {
            _ = try? run("/usr/bin/umount", [mountPoint.path])
            throw error
        }
        url = mountPoint
    }

    /// Removes the mount; the source directory is untouched.
    func unmount() {
        _ = try? run("/usr/bin/umount", [url.path])
    }
}
