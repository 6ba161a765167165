import ArgumentParser
import Foundation
@_spi(Tools) import SnapshotDB
import SnapshotDBInspection

/// `snapshotdb history FILE`: the durable history, read without SQLite, locks or writes.
struct History: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List the commits of the durable history: who, when, which keys.",
        discussion: """
            Reads the database and its -wal without SQLite (as `inspect` does): it changes no \
            byte, creates no missing file and never checkpoints. Rows are read from the newest \
            committed snapshot. Exit status: 0 listed, 2 the file cannot be read or has no \
            durable history, 3 a history row is damaged (the rows before it are printed), 64 bad \
            options (a negative count, or --limit with --last).
            """
    )

    @OptionGroup var database: DatabaseArgument

    @Option(help: ArgumentHelp("List only the commits after commit N.", valueName: "N"))
    var after: UInt64?

    // (`.unconditional`: "-1" is a value to refuse with its reason, not a missing value and an
    // unknown flag.)
    @Option(
        parsing: .unconditional,
        help: ArgumentHelp("List at most N commits: the oldest N (after --after, if given).", valueName: "N"))
    var limit: Int?

    @Option(
        parsing: .unconditional,
        help: ArgumentHelp("List the newest N commits (after --after, if given).", valueName: "N"))
    var last: Int?

    @Flag(
        help: "Print JSON (one document, its keys in the manual's CommandLineTools article) instead of text.")
    var json = false

    func validate() throws {
        if let limit, limit < 0 { throw ValidationError("--limit must be 0 or more.") }
        if let last, last < 0 { throw ValidationError("--last must be 0 or more.") }
        if limit != nil, last != nil {
            throw ValidationError("--limit lists the oldest commits and --last the newest: give one of them.")
        }
    }

    /// What the options select, in words (`nil` for every commit): the text form says it, so
    /// that the range the history holds is not read as the range listed.
    var selection: String? {
        let after = after.map { " after \($0)" } ?? ""
        if let last { return "the newest \(last)\(after)" }
        if let limit { return "the oldest \(limit)\(after)" }
        return self.after.map { "those after \($0)" }
    }

    func run() throws {
        let listing: HistoryListing
        do {
            listing = try CommandLinePath.withUsablePath(database.file) { path throws(InspectionError) in
                try SnapshotDBInspector.history(
                    databaseAt: path, after: after, limit: limit, last: last, options: .separateProcess)
            }
        } catch {
            Output.error(error.description, json: json)
            throw ExitCode(2)
        }
        var entries: [HistoryEntry] = []
        var damage: String?
        for row in listing.rows {
            do {
                entries.append(
                    HistoryEntry(
                        row: row,
                        changeset: try Changeset.fromHistoryRow(
                            commit: row.commit, kind: row.kind, date: row.date, processID: row.processID,
                            connection: row.connection, info: row.info, changes: row.changes,
                            path: database.file)))
            } catch {
                damage = error.message
                break
            }
        }
        let document = HistoryDocument(
            path: database.file, oldestCommit: listing.oldestCommit, newestCommit: listing.newestCommit,
            rowCount: listing.rowCount, bytes: listing.bytes, consumers: listing.consumers, commits: entries,
            damage: damage, selection: selection)
        if json {
            Output.write(try Output.json(document) + "\n")
        } else {
            Output.write(document.text())
        }
        if let damage {
            if !json { Output.error(damage) }
            throw ExitCode(3)
        }
    }
}

/// One commit as `history` prints it.
struct HistoryEntry: Encodable {
    var commit: UInt64
    var kind: String
    var date: String
    var connection: String?
    var processID: Int64?
    var info: [String: String]
    var setKeys: [String: [String]]
    var removedKeys: [String: [String]]
    var clearedCollections: [String]
    var clearedAllCollections: Bool
    var keysKnown: Bool
    var extensions: [String]

    init(row: HistoryRow, changeset: Changeset?) {
        commit = row.commit
        kind =
            ["commit", "foreign", "start", "unknown"].indices.contains(Int(row.kind))
            ? ["commit", "foreign", "start", "unknown"][Int(row.kind)] : "kind \(row.kind)"
        date = ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: row.date))
        connection = changeset?.connectionName
        processID = changeset?.processID.map(Int64.init)
        info = changeset?.info ?? [:]
        setKeys = (changeset?.setKeys ?? [:]).mapValues { $0.sorted() }
        removedKeys = (changeset?.removedKeys ?? [:]).mapValues { $0.sorted() }
        clearedCollections = (changeset?.clearedCollections ?? []).sorted()
        clearedAllCollections = changeset?.clearedAllCollections ?? false
        keysKnown = changeset.map { !$0.isExternal } ?? false
        extensions = changeset?.extensionNames ?? []
    }

    func line() -> String {
        var parts = ["\(commit)", date, kind]
        if let connection { parts.append("'\(connection)'" + (processID.map { " pid \($0)" } ?? "")) }
        if !info.isEmpty {
            parts.append(
                "info {"
                    + info.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ", ")
                    + "}")
        }
        for (collection, keys) in setKeys.sorted(by: { $0.key < $1.key }) {
            parts.append("set \(collection)[\(Self.list(keys))]")
        }
        for (collection, keys) in removedKeys.sorted(by: { $0.key < $1.key }) {
            parts.append("removed \(collection)[\(Self.list(keys))]")
        }
        if !clearedCollections.isEmpty {
            parts.append("cleared \(clearedCollections.joined(separator: ", "))")
        }
        if clearedAllCollections { parts.append("cleared every collection") }
        if kind == "unknown" { parts.append("keys unknown") }
        if !extensions.isEmpty { parts.append("extensions \(extensions.joined(separator: ", "))") }
        return parts.joined(separator: "  ")
    }

    /// Keys shown: the first 10 and a count of the rest.
    static func list(_ keys: [String]) -> String {
        let shown = keys.prefix(10).map { $0.debugDescription }.joined(separator: ", ")
        return keys.count > 10 ? shown + ", … \(keys.count - 10) more" : shown
    }
}

/// The document `history --json` prints.
struct HistoryDocument: Encodable {
    var formatVersion = 1
    var path: String
    var oldestCommit: UInt64?
    var newestCommit: UInt64?
    var rowCount: Int
    var bytes: Int
    var consumers: [HistoryConsumer]
    var commits: [HistoryEntry]
    var damage: String?
    /// The options' selection (text form only).
    var selection: String? = nil

    private enum CodingKeys: String, CodingKey {
        case formatVersion, path, oldestCommit, newestCommit, rowCount, bytes, consumers, commits, damage
    }

    func text() -> String {
        var lines = [
            "history of \(path): holds the commits after \(oldestCommit.map(String.init) ?? "?") through "
                + "\(newestCommit.map(String.init) ?? "?") (\(rowCount) rows, about \(bytes) bytes)"
        ]
        if let selection {
            let listed = commits.filter { $0.kind != "start" }.count
            lines.append("listing \(selection): \(listed) commit\(listed == 1 ? "" : "s")")
        }
        for consumer in consumers {
            let lag = (newestCommit ?? 0) > consumer.position ? (newestCommit ?? 0) - consumer.position : 0
            lines.append(
                "consumer '\(consumer.name)' at commit \(consumer.position), \(lag) behind"
                    + (consumer.isExpired ? ", expired" : ""))
        }
        lines += commits.filter { $0.kind != "start" }.map { $0.line() }
        return lines.joined(separator: "\n") + "\n"
    }
}
