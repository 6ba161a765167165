internal import ArgumentParser
internal import Foundation
internal import SnapshotDB

#if canImport(Glibc)
    internal import Glibc
#elseif canImport(Darwin)
    internal import Darwin
#endif

/// The child of a crash round: makes transfers until it is killed, and reports each commit on
/// standard output only after `readWrite` returned, that is once SnapshotDB acknowledged it.
///
/// Lines (each written with one `write(2)`, so never interleaved):
/// `ready COMMIT` once the database is open, then `ack COMMIT FROM TO AMOUNT WRITER` per commit.
struct CrashChildCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "crash-child",
        abstract: "Make acknowledged transfers until killed (used by the crash rounds).",
        shouldDisplay: false)

    @Option(help: "The database to write; its bank must already exist.")
    var db: String

    @Option(help: "Writer connections.")
    var writers = 2

    @Option(help: "Seed for the transfers.")
    var seed: UInt64 = 1

    @Option(help: "WAL pages that trigger a checkpoint: small, so that kills also land in checkpoints.")
    var checkpointPages = 64

    @Option(help: "Exit on its own after this many seconds, in case nobody kills it.")
    var maxSeconds = 60.0

    func run() throws {
        // `synchronous` stays `.full` (the default): every acknowledged commit must survive.
        var configuration = Configuration()
        configuration.checkpointThresholdPages = checkpointPages
        let database = try Database(path: db, configuration: configuration)
        guard let bank = try Bank.load(database.newConnection(name: "crash-setup")) else {
            throw StressError("\(db) holds no bank")
        }
        Self.emit("ready \(database.latestCommit)")
        let parent = getppid()
        let control = RunControl(duration: .seconds(maxSeconds))
        let threads = (1...max(1, writers)).map { index in
            let connection = database.newConnection(name: "crash-writer-\(index)")
            let generator = SplitMix64.forWorker(index, seed: seed)
            return WorkerThread(name: connection.name) {
                var random = generator
                // Stop when orphaned: the parent died without killing this child.
                while control.shouldContinue, getppid() == parent {
                    do {
                        guard
                            let transfer = try Bank.transfer(
                                on: connection, bank: bank, writer: connection.name, variant: .plain,
                                using: &random)
                        else { continue }
                        Self.emit(
                            "ack \(transfer.commit) \(transfer.from) \(transfer.to) \(transfer.amount) "
                                + transfer.writer)
                    } catch {
                        StandardError.write("crash-child: \(connection.name): \(error)")
                        Foundation.exit(3)
                    }
                }
            }
        }
        for thread in threads { thread.join() }
    }

    /// Writes `line` to standard output with a single `write(2)`: atomic on a pipe below
    /// `PIPE_BUF` bytes, and unbuffered, so the parent has it the moment it returns.
    static func emit(_ line: String) {
        var bytes = Array((line + "\n").utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeMutableBytes { buffer in
                write(STDOUT_FILENO, buffer.baseAddress! + offset, buffer.count - offset)
            }
            if written <= 0 {
                if written < 0, errno == EINTR { continue }
                Foundation.exit(4)
            }
            offset += written
        }
    }
}
