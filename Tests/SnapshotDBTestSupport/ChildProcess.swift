internal import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A child process for tests (the `sqlite3` shell, a `python3` client holding a lock, the
/// test binary re-run with a file size limit, the `snapshotdb` tool): the one place the test
/// suites start processes.
///
/// Two ways to use it:
/// - ``run(_:_:input:environment:)`` runs a program to completion. Its output goes through
///   files, so no pipe can fill up and block it.
/// - ``init(_:_:environment:)`` starts a child that the test drives step by step through its
///   standard input and output. The child prints a line when it reaches a state, and waits for
///   a line on its input to go on. Nothing sleeps: each side waits for the other's line.
public final class ChildProcess {
    private let process = Process()
    private let input = Pipe()
    private let output = Pipe()
    private let errors: URL
    private var buffered = Data()
    private let command: String

    /// Starts `executable` with `arguments` (and `environment` added to this process's). With
    /// `outputToFile`, its standard output goes to the file its errors go to, for a child whose
    /// output no test reads (a pipe nobody reads blocks the child once 64 KiB are written).
    public init(
        _ executable: String, _ arguments: [String], environment: [String: String] = [:],
        outputToFile: Bool = false
    ) throws {
        command = ([executable] + arguments.map { $0.count > 60 ? String($0.prefix(57)) + "..." : $0 })
            .joined(separator: " ")
        errors = FileManager.default.temporaryDirectory.appendingPathComponent(
            "child-\(UUID().uuidString).stderr")
        _ = FileManager.default.createFile(atPath: errors.path, contents: nil)
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        process.standardInput = input
        let errorFile = try FileHandle(forWritingTo: errors)
        process.standardOutput = outputToFile ? errorFile : output
        process.standardError = errorFile
        try process.run()
    }

    /// Starts `python3 -c script arguments...`.
    public convenience init(python script: String, _ arguments: [String]) throws {
        try self.init("/usr/bin/python3", ["-c", script] + arguments)
    }

    deinit {
        if process.isRunning {
            try? input.fileHandleForWriting.close()
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(at: errors)
    }

    /// The child's process id.
    public var processID: Int32 { process.processIdentifier }

    /// Whether the child is still running.
    public var isRunning: Bool { process.isRunning }

    /// Sends one line to the child's standard input.
    public func send(_ line: String) throws {
        try input.fileHandleForWriting.write(contentsOf: Data((line + "\n").utf8))
    }

    /// Closes the child's standard input (end of input).
    public func closeInput() {
        try? input.fileHandleForWriting.close()
    }

    /// The child's next line of output, without its newline.
    ///
    /// - Throws: ``ChildProcessFailed`` (with what the child wrote on standard error) when the
    ///   child exits first.
    public func readLine() throws -> String {
        while !buffered.contains(UInt8(ascii: "\n")) {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty {
                process.waitUntilExit()
                throw ChildProcessFailed(
                    command: command, status: process.terminationStatus, standardError: standardError,
                    partialOutput: String(decoding: buffered, as: UTF8.self))
            }
            buffered.append(chunk)
        }
        let end = buffered.firstIndex(of: UInt8(ascii: "\n"))!
        let line = String(decoding: buffered[buffered.startIndex..<end], as: UTF8.self)
        buffered = Data(buffered[buffered.index(after: end)...])
        return line
    }

    /// Reads lines until one equals `line`; throws if the child exits first.
    public func waitForLine(_ line: String) throws {
        while try readLine() != line {}
    }

    /// Closes the child's input and waits for it to exit; returns its exit status.
    @discardableResult
    public func finish() -> Int32 {
        closeInput()
        process.waitUntilExit()
        return process.terminationStatus
    }

    /// Kills the child with SIGKILL, as a crash would, and reaps it.
    public func kill() {
        _ = Foundation.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    /// What the child wrote on standard error so far.
    public var standardError: String {
        (try? String(contentsOf: errors, encoding: .utf8)) ?? ""
    }

    /// Runs `executable` to completion, with `input` on its standard input (none: `/dev/null`).
    public static func run(
        _ executable: String, _ arguments: [String], input: String? = nil, environment: [String: String] = [:]
    ) throws -> ChildResult {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "child-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let outputURL = directory.appendingPathComponent("stdout")
        let errorURL = directory.appendingPathComponent("stderr")
        let inputURL = directory.appendingPathComponent("stdin")
        _ = FileManager.default.createFile(atPath: outputURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: errorURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: inputURL.path, contents: Data((input ?? "").utf8))
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        let output = try FileHandle(forWritingTo: outputURL)
        let error = try FileHandle(forWritingTo: errorURL)
        process.standardInput =
            input == nil ? FileHandle.nullDevice : try FileHandle(forReadingFrom: inputURL)
        process.standardOutput = output
        process.standardError = error
        try process.run()
        process.waitUntilExit()
        try output.close()
        try error.close()
        return ChildResult(
            command: ([executable] + arguments).joined(separator: " "), status: process.terminationStatus,
            standardOutput: String(decoding: try Data(contentsOf: outputURL), as: UTF8.self),
            standardError: String(decoding: try Data(contentsOf: errorURL), as: UTF8.self))
    }
}

/// A child process that ran to completion.
public struct ChildResult: Sendable {
    /// The command line, for messages.
    public var command: String
    /// The exit status.
    public var status: Int32
    /// Everything the child wrote on standard output.
    public var standardOutput: String
    /// Everything the child wrote on standard error.
    public var standardError: String

    /// The standard output of a child that exited 0.
    ///
    /// - Throws: ``ChildProcessFailed`` for any other exit status.
    public func succeeded() throws -> String {
        guard status == 0 else {
            throw ChildProcessFailed(
                command: command, status: status, standardError: standardError, partialOutput: standardOutput)
        }
        return standardOutput
    }
}

/// A child process that exited with a failure, or before printing what a test waited for.
public struct ChildProcessFailed: Error, CustomStringConvertible {
    /// The command line, for messages.
    public var command: String
    /// The exit status.
    public var status: Int32
    /// What the child wrote on standard error.
    public var standardError: String
    /// What the child printed before it exited.
    public var partialOutput: String = ""

    /// The command, its status and what it wrote.
    public var description: String {
        "\(command) exited \(status): \(standardError)"
            + (partialOutput.isEmpty ? "" : " (after printing \(partialOutput.debugDescription))")
    }
}
