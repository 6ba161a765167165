import CSQLite
import Foundation
import Logging
import SnapshotDB
import SnapshotDBTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Paths SnapshotDB cannot use: read-only locations, directories, empty or missing paths.
/// Each is refused with a typed error, and nothing is created or changed.
@Suite("Read-only and unusable paths")
struct UnusablePathTests {
    // MARK: Read-only file systems

    /// A database with commits 1...3 in `directory`, released (no `-wal` or `-shm` left).
    static func makeDatabase(in directory: URL) throws -> String {
        let path = directory.appendingPathComponent("db.sqlite").path
        let db = try Database(path: path)
        let writer = db.newConnection(name: "setup")
        for index in 0..<3 {
            try writer.readWrite {
                try $0.set(Item(title: "kept \(index)"), forKey: "\(index)", inCollection: "c")
            }
        }
        return path
    }

    /// Runs `body` with a read-only view of a fresh `source` directory that `prepare` filled.
    static func withReadOnlyView(
        of prepare: (URL) throws -> Void, _ body: (_ source: URL, _ view: URL) throws -> Void
    ) throws {
        try withTemporaryDirectory { directory in
            let source = directory.appendingPathComponent("source")
            try FileManager.default.createDirectory(at: source, withIntermediateDirectories: false)
            try prepare(source)
            let mount = try ReadOnlyMount(of: source, at: directory.appendingPathComponent("view"))
            defer { mount.unmount() }
            try body(source, mount.url)
        }
    }

    @Test(.enabled(if: ReadOnlyMount.isAvailable, "needs root and mount(8) to make a read-only bind mount"))
    func newDatabaseOnAReadOnlyFileSystemThrowsReadOnlyAndCreatesNothing() throws {
        let nothing: (URL) throws -> Void = { _ in }
        try Self.withReadOnlyView(of: nothing) { source, view throws in
            let error = expectError(.readOnly) {
                try Database(path: view.appendingPathComponent("new.sqlite").path)
            }
            #expect(error?.message.contains("Read-only file system") == true, "\(String(describing: error))")
            #expect(try directoryContents(source).isEmpty)
        }
    }

    /// A WAL database closed cleanly has no `-wal` or `-shm`, and SQLite cannot read it where
    /// it cannot create them: the open fails with `readOnly`, saying so, and changes nothing.
    @Test(.enabled(if: ReadOnlyMount.isAvailable, "needs root and mount(8) to make a read-only bind mount"))
    func closedDatabaseOnAReadOnlyFileSystemThrowsReadOnlyAndChangesNothing() throws {
        let database: (URL) throws -> Void = { _ = try Self.makeDatabase(in: $0) }
        try Self.withReadOnlyView(of: database) { source, view throws in
            let before = try directoryContents(source)
            let path = view.appendingPathComponent("db.sqlite").path
            let error = expectError(.readOnly) { try Database(path: path) }
            #expect(error?.sqliteCode.map { $0 & 0xFF } == SQLITE_CANTOPEN)
            #expect(error?.message.contains("Read-only file system") == true, "\(String(describing: error))")
            #expect(error?.message.contains("-wal and -shm") == true)
            #expect(try directoryContents(source) == before)
            // The failed open released the path: it opens again (and fails the same way).
            expectError(.readOnly) { try Database(path: path) }
            #expect(try isIntact(source.appendingPathComponent("db.sqlite").path))
        }
    }

    /// With its `-wal` and `-shm` beside it (as a crash or a copy leaves them), a database on a
    /// read-only file system opens read-only: every commit is readable, every write fails
    /// with `readOnly`, and no byte changes.
    @Test(.enabled(if: ReadOnlyMount.isAvailable, "needs root and mount(8) to make a read-only bind mount"))
    func databaseWithItsWALOnAReadOnlyFileSystemIsReadableAndRefusesWrites() throws {
        try withTemporaryDirectory { directory throws in
            let copy = try DamagedFileTests.CrashCopy.make(in: directory)
            try copy.staleSharedMemory.write(to: URL(fileURLWithPath: copy.sharedMemoryPath))
            let source = directory.appendingPathComponent("source")
            try FileManager.default.createDirectory(at: source, withIntermediateDirectories: false)
            for suffix in ["", "-wal", "-shm"] {
                try FileManager.default.moveItem(
                    atPath: copy.path + suffix,
                    toPath: source.appendingPathComponent("db.sqlite" + suffix).path)
            }
            let before = try directoryContents(source)
            let mount = try ReadOnlyMount(of: source, at: directory.appendingPathComponent("view"))
            defer { mount.unmount() }
            do {
                let logs = LogCapture()
                var configuration = Configuration()
                configuration.checkpointLogger = logs.logger
                let db = try Database(
                    path: mount.url.appendingPathComponent("db.sqlite").path, configuration: configuration)
                let allCommits = DamagedFileTests.CrashCopy.allCommits
                #expect(db.latestCommit == allCommits)
                let reader = db.newConnection(name: "reader")
                try reader.read { txn throws in
                    #expect(try txn.keys(inCollection: "c") == (0..<Int(allCommits)).map(String.init))
                    #expect(
                        try txn.value(forKey: "9", inCollection: "c", as: Item.self)
                            == Item(title: "wal 9", count: 9))
                }
                #expect(try reader.beginLongLivedReadTransaction() == [])
                #expect(try reader.read { $0.commit } == allCommits)
                let writer = db.newConnection(name: "writer")
                for write in [
                    { (txn: ReadWriteTransaction) in
                        try txn.set(Item(title: "new"), forKey: "new", inCollection: "c")
                    },
                    { (txn: ReadWriteTransaction) in try txn.removeValue(forKey: "0", inCollection: "c") },
                    { (txn: ReadWriteTransaction) in try txn.removeAllCollections() },
                ] {
                    let error = expectError(.readOnly) { try writer.readWrite(write) }
                    #expect(error?.sqliteCode.map { $0 & 0xFF } == SQLITE_READONLY)
                }
                // The open left the WAL alone, without a warning; the explicit checkpoint fails,
                // and says so.
                #expect(logs.messages(at: .warning).isEmpty)
                #expect(logs.messages(at: .error).isEmpty)
                let checkpoint = try? db.checkpoint(.truncate)
                #expect(checkpoint?.isComplete != true)
                #expect(logs.messages(at: .error).contains { $0.contains("readOnly") })
                #expect(db.latestCommit == allCommits)
                #expect(try reader.read { try $0.count(inCollection: "c") } == Int(allCommits))
            }
            #expect(try directoryContents(source) == before)
        }
    }

    // MARK: Permission bits

    static let permissionChildKey = "SNAPSHOTDB_PERMISSION_CHILD_DB"

    /// Permission bits do not stop `root`, so as `root` the checks run in a child process (this
    /// test binary, running only ``childWithoutWritePermission()``) with the identity of
    /// `nobody`, set by `setpriv`; as another user, in a child without it.
    static let canRunUnprivileged =
        getuid() != 0 || FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")

    /// Runs the child on `path` as a user without write permission and returns its results.
    static func runUnprivilegedChild(on path: String) throws -> [String: String] {
        let child = try runChildTest(
            "childWithoutWritePermission", environmentKey: Self.permissionChildKey, path: path,
            unprivileged: true)
        #expect(child.terminationStatus == 0, "child said: \(child.output)")
        return child.results
    }

    /// A directory the process may not write (`chmod 0555`) holding a closed database: SQLite
    /// cannot create the `-wal` and `-shm`, and the open fails with `readOnly`.
    @Test(.enabled(if: canRunUnprivileged, "needs a non-root user or setpriv(1) to drop root"))
    func closedDatabaseInADirectoryWithoutWritePermissionThrowsReadOnly() throws {
        try withTemporaryDirectory { directory throws in
            let locked = directory.appendingPathComponent("locked")
            try FileManager.default.createDirectory(at: locked, withIntermediateDirectories: false)
            let path = try Self.makeDatabase(in: locked)
            chmod(directory.path, 0o755)
            chmod(path, 0o644)
            chmod(locked.path, 0o555)
            defer { chmod(locked.path, 0o755) }
            let before = try directoryContents(locked)
            let results = try Self.runUnprivilegedChild(on: path)
            #expect(results["open"] == "readOnly", "\(results)")
            #expect(results["open-message"]?.contains("Permission denied") == true, "\(results)")
            #expect(try directoryContents(locked) == before)
        }
    }

    /// A database file the process may not read (new files are `0600`, here `root`'s): the
    /// open fails with `cannotOpen`, saying why, and changes nothing.
    @Test(.enabled(if: getuid() == 0 && canRunUnprivileged, "needs root and setpriv(1) to drop root"))
    func databaseFileWithoutReadPermissionThrowsCannotOpen() throws {
        try withTemporaryDirectory { directory throws in
            let path = try Self.makeDatabase(in: directory)
            chmod(directory.path, 0o777)
            let before = try directoryContents(directory)
            let results = try Self.runUnprivilegedChild(on: path)
            #expect(results["open"] == "cannotOpen", "\(results)")
            #expect(results["open-message"]?.hasSuffix("db.sqlite: Permission denied") == true, "\(results)")
            #expect(try directoryContents(directory) == before)
        }
    }

    /// A database file the process may not write (`chmod 0444`) in a directory it may: SQLite
    /// opens it read-only, reads work and writes fail with `readOnly`; the file is unchanged.
    @Test(.enabled(if: canRunUnprivileged, "needs a non-root user or setpriv(1) to drop root"))
    func databaseFileWithoutWritePermissionIsReadOnly() throws {
        try withTemporaryDirectory { directory throws in
            let open = directory.appendingPathComponent("open")
            try FileManager.default.createDirectory(at: open, withIntermediateDirectories: false)
            let path = try Self.makeDatabase(in: open)
            chmod(directory.path, 0o755)
            chmod(open.path, 0o777)
            chmod(path, 0o444)
            let before = try Data(contentsOf: URL(fileURLWithPath: path))
            let results = try Self.runUnprivilegedChild(on: path)
            #expect(results["open"] == "opened", "\(results)")
            #expect(results["keys"] == "0,1,2", "\(results)")
            #expect(results["write"] == "readOnly", "\(results)")
            #expect(results["commit-after"] == "3", "\(results)")
            #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == before)
            #expect(try isIntact(path))
        }
    }

    @Test(.enabled(if: ProcessInfo.processInfo.environment[permissionChildKey] != nil))
    func childWithoutWritePermission() throws {
        let path = try #require(ProcessInfo.processInfo.environment[Self.permissionChildKey])
        let db: Database
        do {
            db = try Database(path: path)
            reportResult("open", "opened")
        } catch {
            reportResult("open", error.code.name)
            reportResult("open-message", error.message)
            return
        }
        let connection = db.newConnection()
        reportResult("keys", (try connection.read { try $0.keys(inCollection: "c") }).joined(separator: ","))
        do {
            try connection.readWrite {
                try $0.set(Item(title: "refused"), forKey: "refused", inCollection: "c")
            }
            reportResult("write", "committed")
        } catch let error as DatabaseError {
            reportResult("write", error.code.name)
        }
        reportResult("commit-after", "\(db.latestCommit)")
    }

    // MARK: Paths that name no usable file

    @Test func directoryIsRefusedAndNothingIsCreated() throws {
        try withTemporaryDirectory { directory throws in
            let target = directory.appendingPathComponent("a directory")
            try FileManager.default.createDirectory(at: target, withIntermediateDirectories: false)
            let error = expectError(.cannotOpen) { try Database(path: target.path) }
            #expect(error?.message.contains("is not a regular file") == true, "\(String(describing: error))")
            #expect(try directoryContents(directory) == ["a directory/": Data()])
            #expect(try directoryContents(target).isEmpty)
            // The path can be used again: the failed open released it.
            try FileManager.default.removeItem(at: target)
            _ = try Database(path: target.path)
        }
    }

    @Test func emptyPathIsRefusedAndNothingIsCreated() throws {
        let workingDirectory = FileManager.default.currentDirectoryPath
        let before = try FileManager.default.contentsOfDirectory(atPath: workingDirectory)
        let error = expectError(.cannotOpen) { try Database(path: "") }
        #expect(error?.message == "the database path is empty")
        #expect(try FileManager.default.contentsOfDirectory(atPath: workingDirectory) == before)
    }

    @Test func missingDirectoryIsRefusedAndNothingIsCreated() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("missing/deeper/db.sqlite").path
            let error = expectError(.cannotOpen) { try Database(path: path) }
            #expect(error?.message.contains("does not exist") == true, "\(String(describing: error))")
            #expect(try directoryContents(directory).isEmpty)
        }
    }

    @Test func regularFileAsParentDirectoryIsRefused() throws {
        try withTemporaryDirectory { directory throws in
            let file = directory.appendingPathComponent("file.txt")
            try Data("not a directory".utf8).write(to: file)
            let error = expectError(.cannotOpen) {
                try Database(path: file.appendingPathComponent("db.sqlite").path)
            }
            #expect(error?.message.contains("Not a directory") == true, "\(String(describing: error))")
            #expect(try directoryContents(directory) == ["file.txt": Data("not a directory".utf8)])
        }
    }

    /// C would read the path only up to the NUL and open another file than the one named.
    @Test func pathWithANulCharacterIsRefusedAndNothingIsCreated() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("db.sqlite").path
            let error = expectError(.cannotOpen) { try Database(path: path + "\u{0}.backup") }
            #expect(error?.message.contains("NUL") == true, "\(String(describing: error))")
            #expect(try directoryContents(directory).isEmpty)
        }
    }

    @Test func symbolicLinkToAMissingFileIsRefusedAndNothingIsCreated() throws {
        try withTemporaryDirectory { directory throws in
            let link = directory.appendingPathComponent("link.sqlite")
            let destination = directory.appendingPathComponent("missing.sqlite").path
            try FileManager.default.createSymbolicLink(atPath: link.path, withDestinationPath: destination)
            let error = expectError(.cannotOpen) { try Database(path: link.path) }
            #expect(
                error?.message.contains("symbolic link to \(destination)") == true,
                "\(String(describing: error))")
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["link.sqlite"])
        }
    }
}
