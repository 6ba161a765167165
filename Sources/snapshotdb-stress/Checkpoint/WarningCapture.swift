internal import Foundation
internal import Logging
internal import SnapshotDBLocking

/// One log message the checkpoint monitor emitted during the run.
struct CapturedWarning: Codable, Sendable {
    /// Seconds since the run started.
    let seconds: Double
    let level: String
    let label: String
    let message: String
    let metadata: [String: String]

    /// Whether the message or its metadata names `connection`.
    func names(_ connection: String) -> Bool {
        message.contains(connection) || metadata.values.contains { $0.contains(connection) }
    }

    /// `message key=value ...` on one line.
    var line: String {
        let pairs = metadata.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
        return ([message] + pairs).joined(separator: " ")
    }
}

/// Collects what SnapshotDB logs through the loggers the stress run hands it (the checkpoint
/// monitor's `snapshotdb.checkpoint` logger), without touching the process-wide
/// `LoggingSystem`.
final class WarningCapture: Sendable {
    private let start: ContinuousClock.Instant
    private let echo: Bool
    private let captured = Mutex<[CapturedWarning]>([])

    /// - Parameter echo: also print each message on standard error as it arrives.
    init(start: ContinuousClock.Instant, echo: Bool) {
        self.start = start
        self.echo = echo
    }

    /// A logger with `label` whose messages at `level` and above are captured.
    func logger(label: String, level: Logger.Level = .notice) -> Logger {
        var logger = Logger(label: label) { label in CaptureLogHandler(label: label, capture: self) }
        logger.logLevel = level
        return logger
    }

    fileprivate func record(_ event: LogEvent, label: String, handlerMetadata: Logger.Metadata) {
        let metadata = handlerMetadata.merging(event.metadata ?? [:]) { $1 }
        let warning = CapturedWarning(
            seconds: (ContinuousClock.now - start).seconds, level: event.level.rawValue, label: label,
            message: event.message.description, metadata: metadata.mapValues(\.description))
        captured.withLock { $0.append(warning) }
        if echo { StandardError.write("[\(label)] \(event.level): \(warning.line)") }
    }

    /// Everything captured at `warning` level or above.
    var warnings: [CapturedWarning] {
        captured.withLock { $0 }.filter { Logger.Level(rawValue: $0.level).map { $0 >= .warning } ?? true }
    }
}

/// Forwards each log event to a ``WarningCapture``.
private struct CaptureLogHandler: LogHandler {
    let label: String
    let capture: WarningCapture
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .notice

    init(label: String, capture: WarningCapture) {
        self.label = label
        self.capture = capture
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        capture.record(event, label: label, handlerMetadata: metadata)
    }
}
