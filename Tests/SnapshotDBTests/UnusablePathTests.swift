import Foundation
import SnapshotDB
import Testing

/// Paths SnapshotDB cannot use: directories, empty or missing paths.
/// Each is refused with a typed error, and nothing is created or changed.
@Suite("Read-only and unusable paths")
struct UnusablePathTests {
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
