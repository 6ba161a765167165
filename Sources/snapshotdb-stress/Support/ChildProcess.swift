internal import Foundation

#if canImport(Glibc)
    internal import Glibc
#elseif canImport(Darwin)
    internal import Darwin
#endif

/// A child process whose standard output and error are drained on threads of their own while it
/// runs, so that a chatty child never blocks on a full pipe. Used by the thread that started it.
final class ChildProcess {
    /// How the child ended.
    enum Termination: Equatable, CustomStringConvertible {
        case exited(Int32)
        case signaled(Int32)

        var description: String {
            switch self {
            case .exited(let status): "exited with status \(status)"
            case .signaled(let signal): "killed by signal \(signal)"
            }
        }
    }

    private let process = Process()
    private let output: PipeDrain
    private let errorOutput: PipeDrain

    /// Starts `executable` with `arguments`.
    init(executable: URL, arguments: [String]) throws {
        let outputPipe = Pipe()
        let errorPipe = Pipe()
        process.executableURL = executable
        process.arguments = arguments
        process.standardOutput = outputPipe
        process.standardError = errorPipe
        process.standardInput = FileHandle.nullDevice
        try process.run()
        output = PipeDrain(outputPipe.fileHandleForReading)
        errorOutput = PipeDrain(errorPipe.fileHandleForReading)
    }

    var processIdentifier: Int32 { process.processIdentifier }

    /// Whether the child has not ended yet.
    var isRunning: Bool { process.isRunning }

    /// Sends `SIGKILL`: the child gets no chance to flush, sync or clean up anything.
    func killNow() {
        kill(process.processIdentifier, SIGKILL)
    }

    /// Waits for the child to end and for both pipes to reach end of file; returns how it ended
    /// and everything it wrote.
    func wait() -> (termination: Termination, output: Data, errorOutput: Data) {
        process.waitUntilExit()
        let termination: Termination =
            process.terminationReason == .uncaughtSignal
            ? .signaled(process.terminationStatus) : .exited(process.terminationStatus)
        return (termination, output.collect(), errorOutput.collect())
    }

    /// Runs `executable` to completion and returns its exit status and output as text.
    static func run(_ executable: URL, _ arguments: [String]) throws -> (
        termination: Termination, output: String, errorOutput: String
    ) {
        let child = try ChildProcess(executable: executable, arguments: arguments)
        let result = child.wait()
        return (
            result.termination, String(decoding: result.output, as: UTF8.self),
            String(decoding: result.errorOutput, as: UTF8.self)
        )
    }

    /// The first executable called `name` on `PATH`.
    static func find(_ name: String) -> URL? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        for directory in path.split(separator: ":") {
            let candidate = "\(directory)/\(name)"
            if FileManager.default.isExecutableFile(atPath: candidate) {
                return URL(fileURLWithPath: candidate)
            }
        }
        return nil
    }
}

/// Reads a pipe to end of file on a thread of its own.
///
/// `@unchecked Sendable` is sound because `data` is written once, by the draining thread,
/// before it signals `done`, and read only by `collect()` after waiting for `done`.
private final class PipeDrain: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)
    private var data = Data()

    init(_ handle: FileHandle) {
        let thread = Thread { [self] in
            data = (try? handle.readToEnd()) ?? Data()
            done.signal()
        }
        thread.start()
    }

    func collect() -> Data {
        done.wait()
        done.signal()
        return data
    }
}
