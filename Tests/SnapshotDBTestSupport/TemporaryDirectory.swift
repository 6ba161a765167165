public import Foundation
internal import Logging

/// A passing `swift test` prints nothing: the test process's log handler discards what the
/// library logs. Tests that expect a log give the configuration a logger with a handler of its
/// own and assert on what it caught.
private let quietLogging: Void = LoggingSystem.bootstrap { _ in SwiftLogNoOpLogHandler() }

/// A fresh directory under the system temporary directory, removed with everything in it after
/// `body`: the one temporary-directory helper of both test targets.
public func withTemporaryDirectory<T>(_ body: (URL) throws -> T) throws -> T {
    let directory = try makeTemporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    return try body(directory)
}

/// The async form of ``withTemporaryDirectory(_:)``.
public func withTemporaryDirectory<T>(_ body: (URL) async throws -> T) async throws -> T {
    let directory = try makeTemporaryDirectory()
    defer { try? FileManager.default.removeItem(at: directory) }
    return try await body(directory)
}

/// Creates the directory with the default mode, so that a child process running as another
/// user (an unprivileged test child) can reach the files in it.
private func makeTemporaryDirectory() throws -> URL {
    quietLogging
    let directory = FileManager.default.temporaryDirectory
        .appendingPathComponent("snapshotdb-tests-\(UUID().uuidString)", isDirectory: true)
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    return directory
}
