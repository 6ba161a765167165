import ArgumentParser
import Foundation
import SnapshotDBInspection

/// `snapshotdb inspect FILE`: one report, read without SQLite, locks or writes.
struct Inspect: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Report sizes, commit counter, WAL frames, readers and what they pin.",
        discussion: """
            Reads the database, its -wal and its -shm and the -shm lock bytes (via /proc/locks \
            and F_OFD_GETLK) without SQLite: it changes no byte, creates no missing file and never \
            checkpoints. Exit status: 0 healthy, 1 a --warn-* threshold is exceeded, 2 the files \
            cannot be inspected (missing, truncated, not a SQLite database). A SQLite database that \
            is not SnapshotDB's is inspected all the same: its report says "not SnapshotDB".
            """
    )

    @OptionGroup var database: DatabaseArgument
    @OptionGroup var output: ReportOptions
    @OptionGroup var thresholds: ThresholdOptions

    func run() throws {
        let inspection = try Inspection.run(
            file: database.file, frames: output.frames, thresholds: thresholds.thresholds, json: output.json)
        Output.write(try inspection.formatted(json: output.json, compactJSON: false))
        if !inspection.health.isHealthy { throw ExitCode(1) }
    }
}

/// One inspection as the tool runs it: report, health and rendering; failures become exit 2.
struct Inspection {
    var report: InspectionReport
    var health: Health
    var generatedAt: Date

    /// Inspects `file` as a separate process; on an ``InspectionError`` prints one line on
    /// standard error and throws exit code 2.
    static func run(file: String, frames: Bool, thresholds: HealthThresholds, json: Bool = false) throws
        -> Inspection
    {
        var options = InspectionOptions.separateProcess
        options.includesFrames = frames
        do {
            let report = try CommandLinePath.withUsablePath(file) { path throws(InspectionError) in
                let report = try SnapshotDBInspector.inspect(databaseAt: path, options: options)
                return path == file ? report : report.naming(file)
            }
            return Inspection(
                report: report, health: Health(report: report, thresholds: thresholds), generatedAt: Date())
        } catch {
            Output.error(error.description, json: json)
            throw ExitCode(2)
        }
    }

    func formatted(json: Bool, compactJSON: Bool) throws -> String {
        if json {
            return try Output.json(
                InspectOutput(report: report, health: health, generatedAt: generatedAt), compact: compactJSON)
                + "\n"
        }
        return ReportRenderer(report: report, health: health).render()
    }
}
