public import ArgumentParser
public import SnapshotDB
import SnapshotDBInspection

/// `snapshotdb checkpoint FILE --mode M`: the one subcommand that changes the files.
struct Checkpoint: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run a SQLite WAL checkpoint on purpose and print SQLite's result.",
        discussion: """
            Opens the database with SQLite (read-write, never creating it) after the inspection \
            library found the database and its -wal and -shm readable, runs sqlite3_wal_checkpoint_v2 in \
            the given mode and closes without the checkpoint-on-close. Exit status: 0 done, \
            1 busy (SQLite's SQLITE_BUSY: a full, restart or truncate checkpoint could not get the \
            locks it waits for within the busy timeout), 2 error. A passive checkpoint never waits \
            and is never busy: it copies what no reader still needs and exits 0, and its output \
            says how far it got (log frames against checkpointed frames).
            """
    )

    @OptionGroup var database: DatabaseArgument

    @Option(
        help: ArgumentHelp(
            "The checkpoint mode.",
            discussion: """
                passive (the default, as in SQLite): copy what no reader needs, never wait. full: \
                wait for the writer, then copy everything. restart: full, then wait for readers so \
                the next writer restarts the WAL. truncate: restart, then truncate the -wal to 0 bytes.
                """))
    var mode: CheckpointMode = .passive

    @Option(
        name: .customLong("busy-timeout"),
        help: ArgumentHelp("Milliseconds to wait for locks before giving up as busy.", valueName: "MS"))
    var busyTimeout: Int32 = 0

    @Flag(help: "Print the result as JSON.")
    var json = false

    func validate() throws {
        guard busyTimeout >= 0 else { throw ValidationError("--busy-timeout must be 0 or more.") }
    }

    func run() throws {
        let outcome: Result<ExternalCheckpoint.Outcome, DatabaseError>
        do {
            outcome = try CommandLinePath.withUsablePath(database.file) { path throws(InspectionError) in
                // Refuse what the inspection refuses (foreign, truncated, random -wal, cut -shm)
                // before SQLite opens, and possibly rewrites, anything.
                _ = try SnapshotDBInspector.inspect(databaseAt: path, options: .separateProcess)
                return Result { () throws(DatabaseError) in
                    try ExternalCheckpoint.run(path: path, mode: mode, busyTimeoutMilliseconds: busyTimeout)
                }
            }
        } catch {
            Output.error(error.description, json: json)
            throw ExitCode(2)
        }
        let result: CheckpointResult
        do {
            result = CheckpointResult(try outcome.get(), mode: mode)
        } catch {
            let code = error.sqliteCode.map { "SQLite error \($0): " } ?? ""
            Output.error("\(database.file): \(code)\(error.message)", json: json)
            throw ExitCode(2)
        }
        Output.write(json ? try Output.json(result) + "\n" : result.text + "\n")
        if result.isBusy { throw ExitCode(1) }
    }
}

// The checkpoint modes are the library's (`SnapshotDB.CheckpointMode`), named on the command line
// by their raw values.
extension CheckpointMode: ExpressibleByArgument {}

extension CheckpointMode: Encodable {
    /// The mode's name, as on the command line.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}

/// What `sqlite3_wal_checkpoint_v2` answered.
struct CheckpointResult: Encodable, Sendable {
    var mode: CheckpointMode
    /// SQLite's result code: `SQLITE_OK` (0) or `SQLITE_BUSY` (5).
    var resultCode: Int32
    var isBusy: Bool
    /// `PRAGMA journal_mode`; only `wal` databases are checkpointed.
    var journalMode: String
    /// Frames in the WAL (`pnLog`).
    var logFrames: Int32
    /// Frames checkpointed (`pnCkpt`).
    var checkpointedFrames: Int32

    init(_ outcome: ExternalCheckpoint.Outcome, mode: CheckpointMode) {
        self.mode = mode
        resultCode = outcome.resultCode
        isBusy = outcome.isBusy
        journalMode = outcome.journalMode
        logFrames = outcome.walFrames
        checkpointedFrames = outcome.checkpointedFrames
    }

    enum CodingKeys: String, CodingKey {
        case mode
        case resultCode
        case isBusy = "busy"
        case journalMode
        case logFrames
        case checkpointedFrames
    }

    var text: String {
        guard journalMode == "wal" else {
            return "checkpoint \(mode.rawValue): journal_mode is \(journalMode), not wal; nothing to do"
        }
        let outcome = isBusy ? "busy (SQLITE_BUSY: could not complete)" : "done"
        let copied =
            logFrames <= 0
            ? "; the WAL was empty, nothing to copy"
            : checkpointedFrames <= 0 ? "; nothing could be copied (readers hold every frame)" : ""
        return "checkpoint \(mode.rawValue): \(outcome); log frames \(Format.count(logFrames)), "
            + "checkpointed frames \(Format.count(checkpointedFrames))\(copied)"
    }
}
