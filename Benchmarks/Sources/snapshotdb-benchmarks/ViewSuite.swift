import Foundation
import GRDB
import Logging
import SnapshotDB

/// The value the view rows list: a title to sort by and a folder to group by.
struct ViewNote: Codable, Sendable {
    var title: String
    var folder: String
}

let viewFolders = ["inbox", "work", "home", "later"]

/// The deterministic title of note `index` in round `stamp` (0 when loaded).
func viewTitle(_ generator: inout SplitMix64) -> String {
    String(format: "%09d", Int(generator.next() % 1_000_000_000))
}

/// The `views` suite (see ``SuiteName/views``): SnapshotDB's `View` beside GRDB's way (a table
/// with an index on (grp, title, key), `ORDER BY … LIMIT/OFFSET`, `COUNT(*)`, and an app-side
/// diff of two fetches).
func runViewSuite(_ context: SuiteContext) throws -> SuiteReport {
    var report = SuiteReport(
        title: "views (issue 14)",
        columns: ["SnapshotDB", "without view", "GRDB", "SnapshotDB / without", "SnapshotDB / GRDB"],
        notes: [
            "v-build: SnapshotDB registers the view over N values (one commit); \"without view\" is a plain "
                + "scan decoding every value; GRDB creates its index on (grp, title, key).",
            "v-commit: one-row commits that give a random note a random new title (it moves), "
                + "synchronous FULL (v-commit-normal: NORMAL); \"without view\" is the same commit into a "
                + "database with no view; GRDB updates the title column of its indexed table.",
            "v-open: the first read of the view after opening the database, which loads the view's layout "
                + "(its pages' order and counts) from the page rows; v-commit starts after it.",
            "v-item, v-index: 1,000 random positions (item(at:inGroup:)) or keys (index(ofKey:inCollection:)) "
                + "in one read transaction; GRDB: `LIMIT 1 OFFSET k` and `COUNT(*) WHERE (title, key) < (?, ?)` "
                + "over the index.",
            "v-changes-1, v-changes-100: after a commit that moved 1 or 100 notes, the reader's advance and "
                + "`changes(for:)`; GRDB: a new read of the group's ordered keys and `difference(from:)` "
                + "against the previous array.",
            "v-load: loading N values in one transaction into a new database whose view is registered, "
                + "against loading them and then registering the view (both totals; \"without view\" is the "
                + "second).",
            "-key rows: the same view ordered by a sort key (`sortKey: { SortKey(note.title) }`, keys stored "
                + "in its pages) instead of the closure `{ $0.title < $1.title }`; the other rows use the closure "
                + "view.",
        ])
    let n = context.quick ? 50_000 : 1_000_000
    let wanted = [
        "v-build", "v-build-key", "v-commit", "v-commit-key", "v-commit-normal", "v-commit-normal-key",
        "v-open",
        "v-item", "v-index", "v-changes-1", "v-changes-100", "v-load",
    ]
    guard wanted.contains(where: context.wants) else { return report }
    let bench = try ViewBench(context: context, n: n)
    defer { bench.close() }
    try bench.load()

    for (id, keyed) in [("v-build", false), ("v-build-key", true)] where context.wants(id) {
        context.progress("(\(id)) register a view over \(grouped(n)) values")
        bench.keyed = keyed
        var ours: [Duration] = []
        var scan: [Duration] = []
        var grdb: [Duration] = []
        for _ in 0..<max(1, min(context.rounds, 3)) {
            ours.append(try bench.buildView())
            scan.append(try bench.scanValues())
            grdb.append(try bench.buildGRDBIndex())
        }
        let ratio = medianRatio(ours, scan)
        var row = SuiteRow(
            id: id, title: "register a \(keyed ? "keyed" : "closure") view over N values (total)", n: n,
            cells: [
                "SnapshotDB": format(seconds: median(ours).seconds),
                "without view": format(seconds: median(scan).seconds) + " (scan)",
                "GRDB": format(seconds: median(grdb).seconds) + " (CREATE INDEX)",
                "SnapshotDB / without": format(ratio: ratio),
                "SnapshotDB / GRDB": format(ratio: medianRatio(ours, grdb)),
            ])
        if keyed {
            report.verdict("≤ 1.5× the scan", ratio <= 1.5, to: &row)
        } else {
            row.verdicts = ["no target (build time against a plain scan)"]
        }
        report.rows.append(row)
    }
    bench.keyed = false
    _ = try bench.buildView()
    _ = try bench.buildGRDBIndex()

    let commitRows: [(String, SyncMode, Bool)] = [
        ("v-commit", .full, false), ("v-commit-key", .full, true), ("v-commit-normal", .normal, false),
        ("v-commit-normal-key", .normal, true),
    ]
    for (id, sync, keyed) in commitRows where context.wants(id) {
        context.progress("(\(id)) one-row moves into a \(grouped(n))-item view, synchronous \(sync.rawValue)")
        bench.keyed = keyed
        let commits = context.quick ? 100 : 200
        var ours: [Duration] = []
        var plain: [Duration] = []
        var grdb: [Duration] = []
        for round in 0..<context.rounds {
            let (a, b, c) = try bench.commits(commits, sync: sync, seed: UInt64(round + 1))
            ours.append(a)
            plain.append(b)
            grdb.append(c)
        }
        let ratio = medianRatio(ours, plain)
        let grdbRatio = medianRatio(ours, grdb)
        var row = SuiteRow(
            id: id, title: "one-row move\(keyed ? " (keyed view)" : ""), synchronous \(sync.rawValue)", n: n,
            cells: [
                "SnapshotDB": perOperationCell(ours, operations: commits),
                "without view": perOperationCell(plain, operations: commits),
                "GRDB": perOperationCell(grdb, operations: commits),
                "SnapshotDB / without": format(ratio: ratio),
                "SnapshotDB / GRDB": format(ratio: medianRatio(ours, grdb)),
            ])
        if keyed {
            report.verdict("≤ 1.5× GRDB", grdbRatio <= 1.5, to: &row)
        } else if sync == .full {
            report.verdict("≤ 1.30× without the view", ratio <= 1.3, to: &row)
        } else {
            row.verdicts = ["no target (the CPU cost)"]
        }
        report.rows.append(row)
    }
    // The other rows read the closure view.
    if bench.keyed {
        bench.keyed = false
        try bench.reopenForReads()
    }

    if context.wants("v-load") {
        let count = min(n, 200_000)
        context.progress("(v-load) load \(grouped(count)) values with the view registered, or register after")
        var registeredFirst: [Duration] = []
        var registeredAfter: [Duration] = []
        for round in 0..<max(1, min(context.rounds, 3)) {
            let (first, after) = try bench.loadComparison(count: count, round: round)
            registeredFirst.append(first)
            registeredAfter.append(after)
        }
        var row = SuiteRow(
            id: "v-load", title: "load N values with the view registered (total)", n: count,
            cells: [
                "SnapshotDB": format(seconds: median(registeredFirst).seconds),
                "without view": format(seconds: median(registeredAfter).seconds) + " (load, then register)",
                "SnapshotDB / without": format(ratio: medianRatio(registeredFirst, registeredAfter)),
            ])
        row.verdicts = ["no target (the order of loading and registering)"]
        report.rows.append(row)
    }

    if context.wants("v-open") {
        context.progress("(v-open) the first read of a \(grouped(n))-item view after opening")
        var ours: [Duration] = []
        for _ in 0..<context.rounds { ours.append(try bench.openAndRead()) }
        var row = SuiteRow(
            id: "v-open", title: "first view read after opening (loads the layout)", n: n,
            cells: ["SnapshotDB": format(seconds: median(ours).seconds)])
        row.verdicts = ["no target (once per open)"]
        report.rows.append(row)
    }

    for id in ["v-item", "v-index"] where context.wants(id) {
        context.progress("(\(id)) 1,000 random positions in a \(grouped(n))-item view")
        var ours: [Duration] = []
        var grdb: [Duration] = []
        for round in 0..<context.rounds {
            let (a, b) =
                id == "v-item"
                ? try bench.itemAt(1_000, seed: UInt64(round + 10))
                : try bench.indexOf(1_000, seed: UInt64(round + 20))
            ours.append(a)
            grdb.append(b)
        }
        let ratio = medianRatio(ours, grdb)
        var row = SuiteRow(
            id: id, title: id == "v-item" ? "item(at:) at random positions" : "index(ofKey:) of random keys",
            n: n,
            cells: [
                "SnapshotDB": perOperationCell(ours, operations: 1_000),
                "GRDB": perOperationCell(grdb, operations: 1_000),
                "SnapshotDB / GRDB": format(ratio: ratio),
            ])
        report.verdict("< GRDB", ratio < 1, to: &row)
        report.rows.append(row)
    }

    for (id, moved) in [("v-changes-1", 1), ("v-changes-100", 100)] where context.wants(id) {
        context.progress("(\(id)) row changes after \(moved) moves")
        var ours: [Duration] = []
        var grdb: [Duration] = []
        for round in 0..<context.rounds {
            let (a, b) = try bench.rowChanges(moved: moved, seed: UInt64(round + 30))
            ours.append(a)
            grdb.append(b)
        }
        let ratio = medianRatio(ours, grdb)
        var row = SuiteRow(
            id: id, title: "advance + row changes after \(moved) moved", n: n,
            cells: [
                "SnapshotDB": format(seconds: median(ours).seconds),
                "GRDB": format(seconds: median(grdb).seconds) + " (fetch + diff)",
                "SnapshotDB / GRDB": format(ratio: ratio),
            ])
        report.verdict("< GRDB", ratio < 1, to: &row)
        report.rows.append(row)
    }
    return report
}

/// The databases of the views suite: SnapshotDB with the view, SnapshotDB without it (the same
/// values), and GRDB's table.
final class ViewBench {
    let context: SuiteContext
    let n: Int
    private var withView: SnapshotDB.Database
    private var withoutView: SnapshotDB.Database
    private let pool: DatabasePool
    private let withViewPath: String
    private let withoutViewPath: String
    /// Each note's current title, by index, as every side holds it.
    private var titles: [String] = []
    private var viewRegistered = false
    private var stamp: UInt64 = 0
    /// Whether the view registered from now on is the keyed one (``keyedView``).
    var keyed = false

    static let view = View<ViewNote>(
        name: "byTitle", version: "1", collections: ["notes"], group: { _, _, note in note.folder },
        areInIncreasingOrder: { $0.title < $1.title })

    /// The same view ordered by a sort key (another table format: registering one after the
    /// other rebuilds).
    static let keyedView = View<ViewNote>(
        name: "byTitle", version: "1", collections: ["notes"], group: { _, _, note in note.folder },
        sortKey: { _, _, note in SortKey(note.title) })

    var currentView: View<ViewNote> { keyed ? Self.keyedView : Self.view }

    init(context: SuiteContext, n: Int) throws {
        self.context = context
        self.n = n
        withViewPath = context.freshPath("views-snapshotdb.sqlite")
        withoutViewPath = context.freshPath("views-plain.sqlite")
        withView = try Self.open(withViewPath, sync: .full)
        withoutView = try Self.open(withoutViewPath, sync: .full)
        var configuration = GRDB.Configuration()
        configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA wal_autocheckpoint = 0") }
        pool = try DatabasePool(path: context.freshPath("views-grdb.sqlite"), configuration: configuration)
        try pool.write { db in
            try db.execute(
                sql: """
                    CREATE TABLE notes(key TEXT PRIMARY KEY NOT NULL, grp TEXT NOT NULL, title TEXT NOT NULL)
                    WITHOUT ROWID
                    """)
        }
    }

    static func open(_ path: String, sync: SyncMode) throws -> SnapshotDB.Database {
        var configuration = SnapshotDB.Configuration()
        configuration.synchronous = sync == .full ? .full : .normal
        configuration.checkpointThresholdPages = 1 << 40
        configuration.checkpointLogger = Logger(label: "snapshotdb.checkpoint") { _ in
            SwiftLogNoOpLogHandler()
        }
        return try SnapshotDB.Database(path: path, configuration: configuration)
    }

    static func key(_ index: Int) -> String { benchmarkKey(index) }
    static func folder(_ index: Int) -> String { viewFolders[index % viewFolders.count] }

    /// Loads `count` notes into a new database whose view is registered, and into another that
    /// registers the view after the load; returns both totals.
    func loadComparison(count: Int, round: Int) throws -> (
        registeredFirst: Duration, registeredAfter: Duration
    ) {
        var generator = SplitMix64(seed: 40 + UInt64(round))
        let notes = (0..<count).map { ViewNote(title: viewTitle(&generator), folder: Self.folder($0)) }
        func load(_ db: SnapshotDB.Database) throws {
            try db.newConnection(name: "load").readWrite { txn in
                for (index, note) in notes.enumerated() {
                    try txn.set(note, forKey: Self.key(index), inCollection: "notes")
                }
            }
        }
        let clock = ContinuousClock()
        let first = try Self.open(context.freshPath("v-load-first-\(round).sqlite"), sync: .full)
        let registeredFirst = try clock.measure {
            try first.register(Self.view)
            try load(first)
        }
        try first.close()
        let after = try Self.open(context.freshPath("v-load-after-\(round).sqlite"), sync: .full)
        let registeredAfter = try clock.measure {
            try load(after)
            try after.register(Self.view)
        }
        try after.close()
        return (registeredFirst, registeredAfter)
    }

    func load() throws {
        context.progress("(views) loading \(grouped(n)) notes into each engine")
        var generator = SplitMix64(seed: 14)
        titles = (0..<n).map { _ in viewTitle(&generator) }
        for db in [withView, withoutView] {
            try db.newConnection(name: "load").readWrite { txn in
                for index in 0..<n {
                    try txn.set(
                        ViewNote(title: titles[index], folder: Self.folder(index)), forKey: Self.key(index),
                        inCollection: "notes")
                }
            }
            try db.checkpoint(.truncate)
        }
        try pool.write { db in
            let insert = try db.cachedStatement(sql: "INSERT INTO notes(key, grp, title) VALUES (?, ?, ?)")
            for index in 0..<n {
                try insert.execute(arguments: [Self.key(index), Self.folder(index), titles[index]])
            }
        }
        _ = try pool.writeWithoutTransaction { db in try db.checkpoint(.truncate) }
    }

    func close() {
        try? withView.close()
        try? withoutView.close()
        try? pool.close()
    }

    // MARK: v-build

    func buildView() throws -> Duration {
        if viewRegistered { try withView.unregister("byTitle") }
        let time = try timed { try withView.register(currentView) }
        viewRegistered = true
        return time
    }

    func scanValues() throws -> Duration {
        var count = 0
        let time = try timed {
            count = try withoutView.newConnection(name: "scan").read { txn in
                try txn.values(inCollection: "notes", as: ViewNote.self).count
            }
        }
        guard count == n else { throw BenchmarkCheckFailed(description: "scan found \(count) of \(n) notes") }
        return time
    }

    func buildGRDBIndex() throws -> Duration {
        try pool.write { db in try db.execute(sql: "DROP INDEX IF EXISTS notes_order") }
        return try timed {
            try pool.write { db in try db.execute(sql: "CREATE INDEX notes_order ON notes(grp, title, key)") }
        }
    }

    // MARK: v-commit

    /// `count` one-row moves on every side, in interleaved chunks of ten; the total time of each.
    func commits(_ count: Int, sync: SyncMode, seed: UInt64) throws -> (Duration, Duration, Duration) {
        try reopen(sync: sync)
        // The first read after opening loads the view's layout (v-open); the commits measure
        // the upkeep from then on.
        _ = try firstRead()
        var generator = SplitMix64(seed: seed &* 7919)
        let moves = (0..<count).map { _ in (Int(generator.next() % UInt64(n)), viewTitle(&generator)) }
        let ours = withView.newConnection(name: "writer")
        let plain = withoutView.newConnection(name: "writer")
        var totals: [Duration] = [.zero, .zero, .zero]
        for chunk in stride(from: 0, to: count, by: 10) {
            let slice = moves[chunk..<min(count, chunk + 10)]
            for (side, connection) in [(0, ours), (1, plain)] {
                totals[side] += try timed {
                    for (index, title) in slice {
                        try connection.readWrite { txn in
                            try txn.set(
                                ViewNote(title: title, folder: Self.folder(index)), forKey: Self.key(index),
                                inCollection: "notes")
                        }
                    }
                }
            }
            totals[2] += try timed {
                for (index, title) in slice {
                    try pool.write { db in
                        try db.cachedStatement(sql: "UPDATE notes SET title = ? WHERE key = ?")
                            .execute(arguments: [title, Self.key(index)])
                    }
                }
            }
        }
        for (index, title) in moves { titles[index] = title }
        try reopen(sync: .full)
        return (totals[0], totals[1], totals[2])
    }

    private func reopen(sync: SyncMode) throws {
        try withView.close()
        try withoutView.close()
        withView = try Self.open(withViewPath, sync: sync)
        withoutView = try Self.open(withoutViewPath, sync: sync)
        try withView.register(currentView)
        try pool.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = \(sync.rawValue)")
        }
    }

    /// Registers the current flavour of the view (rebuilding it when the other was there).
    func reopenForReads() throws { try reopen(sync: .full) }

    // MARK: v-open

    /// The first read of the view after the database opened: it loads the layout.
    func openAndRead() throws -> Duration {
        try reopen(sync: .full)
        return try timed { _ = try firstRead() }
    }

    private func firstRead() throws -> Int {
        try withView.newConnection(name: "reader").read { try $0.view(named: "byTitle").count }
    }

    // MARK: v-item, v-index

    func itemAt(_ count: Int, seed: UInt64) throws -> (Duration, Duration) {
        var generator = SplitMix64(seed: seed)
        let group = viewFolders[0]
        let size = (n + viewFolders.count - 1) / viewFolders.count
        let positions = (0..<count).map { _ in Int(generator.next() % UInt64(size)) }
        var ourKeys: [String] = []
        var theirKeys: [String] = []
        let ours = try timed {
            try withView.newConnection(name: "reader").read { txn in
                let view = try txn.view(named: "byTitle")
                for position in positions {
                    ourKeys.append(view.item(at: position, inGroup: group)?.key ?? "")
                }
            }
        }
        let theirs = try timed {
            try pool.read { db in
                let select = try db.cachedStatement(
                    sql: "SELECT key FROM notes WHERE grp = ? ORDER BY title, key LIMIT 1 OFFSET ?")
                for position in positions {
                    theirKeys.append(try String.fetchOne(select, arguments: [group, position]) ?? "")
                }
            }
        }
        guard ourKeys == theirKeys, !ourKeys.contains("") else {
            throw BenchmarkCheckFailed(
                description: "v-item: SnapshotDB and GRDB disagree on the items at positions")
        }
        return (ours, theirs)
    }

    func indexOf(_ count: Int, seed: UInt64) throws -> (Duration, Duration) {
        var generator = SplitMix64(seed: seed)
        let indexes = (0..<count).map { _ in Int(generator.next() % UInt64(n)) }
        var ourPositions: [Int] = []
        var theirPositions: [Int] = []
        let ours = try timed {
            try withView.newConnection(name: "reader").read { txn in
                let view = try txn.view(named: "byTitle")
                for index in indexes {
                    ourPositions.append(
                        view.index(ofKey: Self.key(index), inCollection: "notes")?.index ?? -1)
                }
            }
        }
        let theirs = try timed {
            try pool.read { db in
                let select = try db.cachedStatement(
                    sql: "SELECT COUNT(*) FROM notes WHERE grp = ?1 AND (title, key) < (?2, ?3)")
                for index in indexes {
                    theirPositions.append(
                        try Int.fetchOne(
                            select, arguments: [Self.folder(index), titles[index], Self.key(index)]) ?? -2)
                }
            }
        }
        guard ourPositions == theirPositions else {
            throw BenchmarkCheckFailed(description: "v-index: SnapshotDB and GRDB disagree on positions")
        }
        return (ours, theirs)
    }

    // MARK: v-changes

    /// A reader on each side holds the group's rows; `moved` notes of that group move in one
    /// commit (not timed); then the reader's advance and row changes (SnapshotDB) or a new fetch
    /// and a diff (GRDB) are timed.
    func rowChanges(moved: Int, seed: UInt64) throws -> (Duration, Duration) {
        let group = viewFolders[1]
        let reader = withView.newConnection(name: "ui")
        try reader.beginLongLivedReadTransaction()
        var previous = try reader.read { txn in try txn.view(named: "byTitle").items(inGroup: group) }
        let fetch = "SELECT key FROM notes WHERE grp = ? ORDER BY title, key"
        let before = try pool.read { db in try String.fetchAll(db, sql: fetch, arguments: [group]) }

        var generator = SplitMix64(seed: seed)
        let members = stride(from: 1, to: n, by: viewFolders.count).map { $0 }
        let moves = (0..<moved).map { _ in
            (members[Int(generator.next() % UInt64(members.count))], viewTitle(&generator))
        }
        try withView.newConnection(name: "writer").readWrite { txn in
            for (index, title) in moves {
                try txn.set(
                    ViewNote(title: title, folder: group), forKey: Self.key(index), inCollection: "notes")
            }
        }
        try pool.write { db in
            for (index, title) in moves {
                try db.execute(
                    sql: "UPDATE notes SET title = ? WHERE key = ?", arguments: [title, Self.key(index)])
            }
        }
        for (index, title) in moves { titles[index] = title }

        var rows: [ViewRowChange] = []
        let ours = try timed {
            let changes = try reader.beginLongLivedReadTransaction()
            rows = try reader.read { txn in
                try txn.view(named: "byTitle").changes(for: changes, inGroups: [group])
            }
        }
        var difference: CollectionDifference<String>?
        var after: [String] = []
        let theirs = try timed {
            after = try pool.read { db in try String.fetchAll(db, sql: fetch, arguments: [group]) }
            difference = after.difference(from: before)
        }
        // Both sides must describe the same new order.
        guard let applied = ViewRowChange.apply(rows, to: [group: previous])?[group],
            applied.map(\.key) == after, before.applying(difference!) == after
        else {
            throw BenchmarkCheckFailed(description: "v-changes: the row changes do not give the new order")
        }
        previous = applied
        return (ours, theirs)
    }
}
