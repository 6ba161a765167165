import Foundation
import SnapshotDBInspection

/// Where the tool writes: unbuffered writes to the standard output and error descriptors, so a
/// `watch` refresh appears at once even through a pipe.
enum Output {
    static func write(_ text: String) {
        FileHandle.standardOutput.write(Data(text.utf8))
    }

    /// Prints `snapshotdb: message` as one line on standard error; with `json`, also
    /// `{"error": message, "exitCode": code}` on standard output, so that a script reading JSON
    /// gets JSON whatever happened.
    static func error(_ message: String, json: Bool = false, exitCode: Int32 = 2) {
        let line = message.split(whereSeparator: \.isNewline).joined(separator: " ")
        FileHandle.standardError.write(Data("snapshotdb: \(line)\n".utf8))
        if json, let document = try? Output.json(JSONError(error: line, exitCode: exitCode), compact: true) {
            write(document + "\n")
        }
    }

    /// The JSON document of a failure.
    private struct JSONError: Encodable {
        var error: String
        var exitCode: Int32
    }

    /// The JSON encoding of `value`: sorted keys, pretty-printed unless `compact` (one line),
    /// absent facts as `null` (see ``NullPreservingJSON``).
    static func json(_ value: some Encodable, compact: Bool = false) throws -> String {
        try NullPreservingJSON.encode(value, pretty: !compact)
    }
}

/// The JSON document of `inspect --json` and of each `watch --json` line: the report's keys,
/// plus `health` (the threshold verdict) and `generatedAt`.
struct InspectOutput: Encodable {
    var report: InspectionReport
    var health: Health
    var generatedAt: Date

    enum ExtraKeys: String, CodingKey {
        case health
        case generatedAt
    }

    func encode(to encoder: any Encoder) throws {
        try report.encode(to: encoder)
        var container = encoder.container(keyedBy: ExtraKeys.self)
        try container.encode(health, forKey: .health)
        try container.encode(ISO8601DateFormatter().string(from: generatedAt), forKey: .generatedAt)
    }
}
