import ArgumentParser

/// The database argument every subcommand takes.
struct DatabaseArgument: ParsableArguments {
    @Argument(help: "The SnapshotDB database file (not its -wal or -shm).")
    var file: String
}

/// The output options of `inspect` and `watch`.
struct ReportOptions: ParsableArguments {
    @Flag(help: "Print JSON with stable keys instead of the text report.")
    var json = false

    @Flag(help: "List every frame of the -wal.")
    var frames = false
}

/// Monitoring thresholds of `inspect` and `watch`; exceeding one makes the exit code 1.
struct ThresholdOptions: ParsableArguments {
    @Option(
        name: .customLong("warn-wal-bytes"),
        help: ArgumentHelp("Exit with 1 when the -wal file is larger than N bytes.", valueName: "N"))
    var warnWALBytes: Int64?

    @Option(
        name: .customLong("warn-lag-frames"),
        help: ArgumentHelp(
            "Exit with 1 when more than N committed frames are not yet checkpointed (mxFrame - nBackfill).",
            valueName: "N"))
    var warnLagFrames: UInt32?

    func validate() throws {
        if let warnWALBytes, warnWALBytes < 0 {
            throw ValidationError("--warn-wal-bytes must be 0 or more.")
        }
    }

    /// The thresholds as a value the health check understands.
    var thresholds: HealthThresholds {
        HealthThresholds(walBytes: warnWALBytes, lagFrames: warnLagFrames)
    }
}
