internal import CSQLite
internal import Foundation

#if canImport(Glibc)
    internal import Glibc
#elseif canImport(Darwin)
    internal import Darwin
#endif

/// The process-wide side of SQLite: its registry of VFSes and its loadable and automatic
/// extensions (a read replica's VFS is one, see ``LitestreamVFS``).
enum SQLiteLibrary {
    /// Whether a VFS named `name` is registered in this process (`sqlite3_vfs_find`).
    static func hasVFS(named name: String) -> Bool { sqlite3_vfs_find(name) != nil }

    /// The suffix SQLite appends to a library path it cannot load as given.
    #if canImport(Darwin)
        static let librarySuffix = ".dylib"
    #else
        static let librarySuffix = ".so"
    #endif

    /// Loads the loadable extension at `path` into the process (`sqlite3_load_extension`, on an
    /// in-memory handle made for it and closed after).
    ///
    /// - Throws: `cannotOpen` naming the path when neither it nor it with the platform's suffix
    ///   exists, or with the loader's own reason when the library cannot be loaded (SQLite's
    ///   message is its retry's, with the suffix appended: "….so.so: cannot open shared object
    ///   file" for any failure).
    static func loadExtension(at path: String, entryPoint: String?) throws(DatabaseError) {
        let files = FileManager.default
        guard files.fileExists(atPath: path) || files.fileExists(atPath: path + librarySuffix) else {
            throw DatabaseError(
                .cannotOpen, "cannot load the SQLite extension \(path): no such file")
        }
        var handle: OpaquePointer?
        guard
            sqlite3_open_v2(":memory:", &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_MEMORY, nil)
                == SQLITE_OK,
            let handle
        else {
            if let handle { sqlite3_close_v2(handle) }
            throw DatabaseError(.cannotOpen, "cannot open an in-memory SQLite handle to load \(path)")
        }
        defer { sqlite3_close_v2(handle) }
        _ = snapshotdb_db_config_enable_load_extension(handle, 1)
        var message: UnsafeMutablePointer<CChar>?
        let result = sqlite3_load_extension(handle, path, entryPoint, &message)
        guard result == SQLITE_OK else {
            let text = message.map { String(cString: $0) } ?? String(cString: sqlite3_errstr(result))
            sqlite3_free(message)
            throw DatabaseError(
                .cannotOpen, "cannot load the SQLite extension \(path): \(firstLoadError(path) ?? text)")
        }
    }

    /// Why the dynamic loader refuses the file at `path` as given (SQLite's message is its second
    /// try's, with the suffix appended); `nil` when there is no such file or the loader takes it
    /// (the failure was then the extension's own initialization, which SQLite's message gives).
    private static func firstLoadError(_ path: String) -> String? {
        guard FileManager.default.fileExists(atPath: path) else { return nil }
        if let library = dlopen(path, RTLD_NOW | RTLD_LOCAL) {
            dlclose(library)
            return nil
        }
        return dlerror().map { String(cString: $0) }
    }

    /// Whether SQLite still opens an in-memory database in this process (an automatic extension
    /// that fails makes every open fail).
    static func opensInMemory() -> Bool {
        var handle: OpaquePointer?
        let result = sqlite3_open_v2(":memory:", &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_MEMORY, nil)
        sqlite3_close_v2(handle)
        return result == SQLITE_OK
    }

    /// Clears the process's automatic extensions (`sqlite3_reset_auto_extension`).
    static func resetAutomaticExtensions() { sqlite3_reset_auto_extension() }
}
