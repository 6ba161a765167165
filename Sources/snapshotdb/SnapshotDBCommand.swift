import ArgumentParser

/// The `snapshotdb` tool: inspect a SnapshotDB database's WAL and readers, watch them,
/// checkpoint on purpose, and run the guided demo.
@main
struct SnapshotDBCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "snapshotdb",
        abstract: "Inspect, watch and checkpoint SnapshotDB database files.",
        discussion: """
            `inspect`, `history` and `watch` read the database, its -wal and its -shm without \
            SQLite and without locks: they change no byte, create no file and never checkpoint. \
            `checkpoint` is the one subcommand that acts.
            """,
        subcommands: [
            Inspect.self,
            History.self,
            Watch.self,
            Checkpoint.self,
            Demo.self,
        ]
    )
}
