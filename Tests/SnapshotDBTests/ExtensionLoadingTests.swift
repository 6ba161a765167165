import Foundation
import SnapshotDB
import SnapshotDBTestSupport
import Testing

/// Loading a SQLite extension library (a replica's VFS) names the real cause of a failure, not
/// SQLite's retry with the platform's suffix appended ("….so.so: cannot open shared object file").
@Suite("Loading a SQLite extension")
struct ExtensionLoadingTests {
    @Test func aMissingLibraryIsNamedAsMissing() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("litestream-vfs.so").path
            let error = expectError(.cannotOpen) { try Database.loadSQLiteExtension(at: path) }
            #expect(error?.message.contains("\(path): no such file") == true, "\(String(describing: error))")
            #expect(error?.message.contains(".so.so") == false, "\(String(describing: error))")
        }
    }

    @Test func aFileThatIsNotALibraryGetsTheLoadersOwnReason() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("w.log").path
            try Data("not a shared library\n".utf8).write(to: URL(fileURLWithPath: path))
            let error = expectError(.cannotOpen) { try Database.loadSQLiteExtension(at: path) }
            let message = error?.message ?? ""
            // The loader's reason for the file as given (glibc: "invalid ELF header" or "file too
            // short"), not SQLite's second try at "w.log.so".
            #expect(message.contains("\(path): \(path):"), "\(message)")
            #expect(!message.contains("w.log.so"), "\(message)")
        }
    }
}
