internal import ArgumentParser
internal import Foundation
internal import SnapshotDB

/// The workload of the power-loss test (`Scripts/powerloss.sh`), run under a tracer that records
/// every write and sync: creates a database, makes one-key commits with small checkpoint steps
/// (so automatic WAL resets and a TRUNCATE checkpoint happen), and writes `opened` to the marks
/// file once the open returned and `ack N` after each commit returned.
struct PowerLossWorkloadCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "power-loss-workload", abstract: "The traced workload of the power-loss test.",
        shouldDisplay: false)

    @Option(help: "The database to create.")
    var db: String

    @Option(help: "Where to write the acknowledgements.")
    var marks: String

    @Option(help: "How many commits.")
    var commits = 120

    @Option(help: "full or normal.")
    var synchronous = "full"

    func run() throws {
        var configuration = Configuration()
        configuration.synchronous = synchronous == "normal" ? .normal : .full
        configuration.checkpointThresholdPages = 8
        configuration.journalSizeLimit = 16 << 10
        let database = try Database(path: db, configuration: configuration)
        let writer = database.newConnection(name: "writer")
        let acknowledgements = try FileHandle(forWritingTo: URL(fileURLWithPath: marks))
        // The open returned: from here the file must be there after any cut (its creation is
        // durable, whatever `synchronous` says of commits).
        try acknowledgements.write(contentsOf: Data("opened\n".utf8))
        for commit in 1...commits {
            try writer.readWrite { txn in
                try txn.setData(
                    Data(repeating: UInt8(commit % 251), count: 600), forKey: "k\(commit)", inCollection: "c")
                txn.info = ["step": "\(commit)"]
            }
            try acknowledgements.write(contentsOf: Data("ack \(commit)\n".utf8))
            if commit == commits / 2 { try database.checkpoint(.truncate) }
        }
        try database.close()
    }
}

/// Checks one replayed crash state with the library: the file must be there and not empty (the
/// library would create a database there), it must open, its commit counter must equal the
/// number of values (each commit added one key), and its durable history must hold exactly one
/// changeset per commit, naming that commit's key and `info` (a commit and its history row are
/// one atomic unit), and every value must be the bytes its commit wrote. Prints `ok COMMIT KEYS`
/// or `bad WHY`.
struct PowerLossCheckCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "power-loss-check", abstract: "Check a replayed crash state with the library.",
        shouldDisplay: false)

    @Option(help: "The database of the crash state.")
    var db: String

    func run() throws {
        // SnapshotDB links a new database into place only once it is written and synced: a
        // missing or empty file under the name was never one it created, and opening it would
        // create an empty database there and report it whole.
        guard let size = try? FileManager.default.attributesOfItem(atPath: db)[.size] as? NSNumber else {
            print("bad no file at \(db)")
            return
        }
        guard size.intValue > 0 else {
            print("bad the database file is empty")
            return
        }
        do {
            let database = try Database(path: db)
            let (keys, counter, history, tornValue) = try database.newConnection(name: "check").read { txn in
                let keys = try txn.keys(inCollection: "c")
                // Every value is whole: `integrity_check` does not read a value's bytes, so a page
                // torn inside a payload would pass it.
                let torn = try keys.first { key in
                    let commit = Int(key.dropFirst()) ?? 0
                    return try txn.data(forKey: key, inCollection: "c")
                        != Data(repeating: UInt8(commit % 251), count: 600)
                }
                return (keys, txn.commit, try txn.changes(after: 0), torn)
            }
            if let tornValue {
                print("bad the value of \(tornValue) is not the bytes its commit wrote")
                return
            }
            let numbers = keys.compactMap { Int($0.dropFirst()) }.sorted()
            guard numbers == Array(1...max(1, numbers.count)).prefix(numbers.count).map({ $0 }) else {
                print("bad keys are not 1...\(numbers.count): \(numbers.prefix(10))")
                return
            }
            guard counter == UInt64(numbers.count) else {
                print("bad commit counter \(counter) with \(numbers.count) keys")
                return
            }
            guard history.map(\.commit) == Array(0..<counter).map({ $0 + 1 }) else {
                print(
                    "bad the history lists commits \(history.map(\.commit).prefix(10)) for counter \(counter)"
                )
                return
            }
            for changeset in history {
                let commit = changeset.commit
                guard changeset.setKeys == ["c": ["k\(commit)"]], changeset.info == ["step": "\(commit)"],
                    changeset.removedKeys.isEmpty, !changeset.isExternal
                else {
                    print("bad the history row of commit \(commit) is not that commit's: \(changeset)")
                    return
                }
            }
            print("ok \(counter) \(numbers.count)")
        } catch {
            print("bad \(error)")
        }
    }
}
