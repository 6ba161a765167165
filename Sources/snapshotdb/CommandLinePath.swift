import Foundation
import SnapshotDBInspection

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The database path as the shell passed it: file names on Linux are bytes, and Swift's
/// `CommandLine.arguments` (which ArgumentParser reads) replaces bytes that are not UTF-8 with
/// U+FFFD, which names another, missing file.
///
/// A Swift `String` cannot hold such a name, so the tool reaches the file through symbolic
/// links with UTF-8 names, in a private temporary directory, to the database, its `-wal` and its
/// `-shm` (missing ones dangle, and stay missing). Reports and errors show the argument as given
/// (with U+FFFD), not the links. Nothing is created beside the database.
enum CommandLinePath {
    /// The bytes of the command-line argument that reads as `argument` once its invalid UTF-8 is
    /// replaced, when they are not valid UTF-8; `nil` for every ordinary argument.
    static func invalidUTF8Bytes(of argument: String) -> [UInt8]? {
        guard argument.unicodeScalars.contains("\u{FFFD}") else { return nil }
        for index in 1..<Int(CommandLine.argc) {
            guard let pointer = CommandLine.unsafeArgv[index] else { continue }
            let bytes = UnsafeBufferPointer(start: pointer, count: strlen(pointer)).map {
                UInt8(bitPattern: $0)
            }
            guard String(validating: bytes, as: UTF8.self) == nil else { continue }
            if String(decoding: bytes, as: UTF8.self) == argument { return bytes }
        }
        return nil
    }

    /// Runs `body` with a path, usable from Swift, to the database the command line named as
    /// `argument`; errors and paths in the result name `argument`.
    static func withUsablePath<T>(
        _ argument: String, _ body: (String) throws(InspectionError) -> T
    ) throws(InspectionError) -> T {
        guard let bytes = invalidUTF8Bytes(of: argument) else { return try body(argument) }
        var template = Array((NSTemporaryDirectory() + "/snapshotdb-path-XXXXXX").utf8CString)
        guard let created = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw InspectionError(
                code: .ioFailure, path: argument,
                message:
                    "cannot make a temporary directory to reach this path: \(String(cString: strerror(errno)))"
            )
        }
        let directory = String(cString: created)
        let link = directory + "/database"
        let target = absolute(bytes)
        defer {
            for suffix in ["", "-wal", "-shm"] { unlink(link + suffix) }
            rmdir(directory)
        }
        for suffix in ["", "-wal", "-shm"] {
            let made = (target + Array(suffix.utf8) + [0]).withUnsafeBufferPointer { targetBytes in
                targetBytes.withMemoryRebound(to: CChar.self) { symlink($0.baseAddress!, link + suffix) }
            }
            guard made == 0 else {
                throw InspectionError(
                    code: .ioFailure, path: argument,
                    message: "cannot link to this path from \(directory): \(String(cString: strerror(errno)))"
                )
            }
        }
        do {
            return try body(link)
        } catch {
            var named = error
            if named.path.hasPrefix(link) { named.path = argument + named.path.dropFirst(link.count) }
            throw named
        }
    }

    /// `path` made absolute against the working directory, as bytes.
    private static func absolute(_ path: [UInt8]) -> [UInt8] {
        guard path.first != UInt8(ascii: "/") else { return path }
        guard let directory = getcwd(nil, 0) else { return path }
        defer { free(directory) }
        let bytes = UnsafeBufferPointer(start: directory, count: strlen(directory)).map {
            UInt8(bitPattern: $0)
        }
        return bytes + [UInt8(ascii: "/")] + path
    }
}

extension InspectionReport {
    /// The report with the paths of the database, `-wal` and `-shm` given as `database`.
    func naming(_ database: String) -> InspectionReport {
        var report = self
        report.database.path = database
        report.wal?.path = database + "-wal"
        report.walIndex?.path = database + "-shm"
        report.locks?.path = database + "-shm"
        return report
    }
}
