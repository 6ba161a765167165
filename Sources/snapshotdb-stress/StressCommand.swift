internal import ArgumentParser

/// `snapshotdb-stress`: hammers one SnapshotDB database with concurrent writers, bookmarked
/// readers, a lagging reader and crashing processes, and exits 0 only when every invariant held.
@main
struct StressCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "snapshotdb-stress",
        abstract: "Stress SnapshotDB and check its invariants.",
        discussion: """
            Writers make bank transfers (the total never changes) and log each one under its \
            commit number; bookmarked readers check their snapshots and every advance; a \
            connection named 'laggard' pins the WAL until the checkpoint monitor names it; child \
            processes are killed with SIGKILL and their databases checked; with --processes, \
            worker processes write and read the same database, and every advance over another \
            process's commits is checked as exactly as over local ones. Exits 0 only when every \
            invariant held.
            """,
        subcommands: [
            RunCommand.self, CrashChildCommand.self, PowerLossWorkloadCommand.self,
            PowerLossCheckCommand.self, WorkerProcessCommand.self, ReplicaWriterCommand.self,
        ],
        defaultSubcommand: RunCommand.self)
}
