import ArgumentParser
import Foundation
import SnapshotDBInspection

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `snapshotdb watch FILE`: `inspect`, refreshed every few seconds.
struct Watch: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Repeat the inspect report every --interval seconds.",
        discussion: """
            Like inspect, changes nothing. With --json prints one JSON document per line. \
            Exit status: 2 as soon as a refresh cannot inspect the files, else 1 if any refresh \
            exceeded a --warn-* threshold, else 0.
            """
    )

    @OptionGroup var database: DatabaseArgument
    @OptionGroup var output: ReportOptions
    @OptionGroup var thresholds: ThresholdOptions

    @Option(help: ArgumentHelp("Seconds between refreshes.", valueName: "S"))
    var interval: Double = 2

    @Option(help: ArgumentHelp("Stop after N refreshes (default: run until interrupted).", valueName: "N"))
    var count: Int?

    func validate() throws {
        guard interval.isFinite, interval >= 0.01 else {
            throw ValidationError("--interval must be at least 0.01 seconds.")
        }
        if let count, count < 1 { throw ValidationError("--count must be at least 1.") }
    }

    func run() throws {
        let clearsScreen = !output.json && isatty(STDOUT_FILENO) == 1
        var exceeded = false
        var refresh = 0
        while true {
            refresh += 1
            let inspection = try Inspection.run(
                file: database.file, frames: output.frames, thresholds: thresholds.thresholds,
                json: output.json)
            exceeded = exceeded || !inspection.health.isHealthy
            var text = try inspection.formatted(json: output.json, compactJSON: true)
            if !output.json {
                let stamp = ISO8601DateFormatter().string(from: inspection.generatedAt)
                text = "--- \(stamp) refresh \(refresh)\(count.map { " of \($0)" } ?? "")\n" + text
                if clearsScreen { text = "\u{1B}[H\u{1B}[2J" + text }
            }
            Output.write(text)
            if let count, refresh >= count { break }
            Thread.sleep(forTimeInterval: interval)
        }
        if exceeded { throw ExitCode(1) }
    }
}
