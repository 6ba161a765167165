import Foundation
import Logging
import SnapshotDBLocking
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDB

/// A swift-log handler that keeps every message, so tests can read what the monitor logged.
final class LogCapture: Sendable {
    struct Entry: Sendable {
        var level: Logger.Level
        var message: String
    }

    private let entries = Mutex<[Entry]>([])

    /// A logger labelled like the checkpoint logger that records into this capture.
    var logger: Logger {
        Logger(label: "snapshotdb.checkpoint") { _ in Handler(capture: self) }
    }

    /// A handler that records into this capture (for `LoggingSystem.bootstrap` in a child).
    var handler: any LogHandler { Handler(capture: self) }

    /// The messages logged at `level`, in order.
    func messages(at level: Logger.Level) -> [String] {
        entries.withLock { $0.filter { $0.level == level }.map(\.message) }
    }

    fileprivate func append(_ entry: Entry) {
        entries.withLock { $0.append(entry) }
    }

    private struct Handler: LogHandler {
        let capture: LogCapture
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            capture.append(Entry(level: event.level, message: event.message.description))
        }
    }
}

/// The size of the file at `path`, 0 when it does not exist.
func fileSize(_ path: String) -> Int64 {
    ((try? FileManager.default.attributesOfItem(atPath: path)[.size]) as? NSNumber)?.int64Value ?? 0
}

/// Commits `count` transactions of `valuesPerCommit` values of about `valueBytes` bytes each.
func writeCommits(
    _ connection: Connection, count: Int, valuesPerCommit: Int = 8, valueBytes: Int = 600, offset: Int = 0
) throws {
    let filler = String(repeating: "x", count: valueBytes)
    for commit in 0..<count {
        try connection.readWrite { txn in
            for value in 0..<valuesPerCommit {
                let key = "\((offset + commit) * valuesPerCommit + value)"
                try txn.set(Item(title: filler, count: commit), forKey: key, inCollection: "items")
            }
        }
    }
}

/// Commits until the WAL holds more than `bytes`, at most `limit` commits; returns how many.
@discardableResult
func writeUntilWAL(
    of database: Database, exceeds bytes: Int64, through connection: Connection, limit: Int = 5_000
)
    throws -> Int
{
    var commits = 0
    while database.checkpointer.knownWALBytes <= bytes && commits < limit {
        try writeCommits(connection, count: 1, offset: commits)
        commits += 1
    }
    return commits
}
