import Foundation
import SnapshotDB

// The Swift blocks of the README, each between `// readme-snippet: NAME` and
// `// end readme-snippet: NAME`, in the context the README names for it ("synchronous": the body
// of a throwing function; "async": an `async` function). `ReadmeTests` checks that every line
// of each README block appears here, in order, within its markers (white space aside), so the
// README cannot drift from code that compiles; lines between them are the scaffolding a block
// needs (the names it takes from the blocks before it, stand-ins for an app's own functions).
// `ReadmeTests.readmeBlocksRunInOrder` runs the synchronous blocks in README order.

/// An app's own functions that the README's blocks call.
func refresh(_ keys: Set<String>) { print(keys.sorted()) }
func reloadAll() {}
struct Settings: Codable, Sendable { var theme: String }
func apply(_ settings: Settings?) { print(settings?.theme ?? "default") }
func alert(_ snapshots: [SnapshotPin]) { print(snapshots.map(\.connectionName)) }
func index(_ changeset: Changeset, in txn: ReadWriteTransaction) throws {
    try txn.set(changeset.commit, forKey: "last", inCollection: "indexed")
}

// readme-snippet: gettingstarted
func gettingStarted() throws -> Bool {
    struct Task: Codable, Sendable {
        var title: String
        var done: Bool
    }
    let db = try Database(path: "tasks.sqlite")
    let writer = db.newConnection(name: "writer")
    let ui = db.newConnection(name: "ui")

    try writer.readWrite { txn in  // all or nothing
        try txn.set(Task(title: "Buy milk", done: false), forKey: "t1", inCollection: "tasks")
    }
    try ui.beginLongLivedReadTransaction()  // bookmark: ui reads this commit until it advances
    try writer.readWrite { txn in
        try txn.set(Task(title: "Buy milk", done: true), forKey: "t1", inCollection: "tasks")
    }
    let before = try ui.read { try $0.value(forKey: "t1", inCollection: "tasks", as: Task.self) }
    let changes = try ui.beginLongLivedReadTransaction()  // advance, with the changes jumped
    let after = try ui.read { try $0.value(forKey: "t1", inCollection: "tasks", as: Task.self) }
    print(before?.done == false, after?.done == true, changes.hasChange(forKey: "t1", inCollection: "tasks"))
    return before?.done == false && after?.done == true
        && changes.hasChange(forKey: "t1", inCollection: "tasks")
}
// end readme-snippet: gettingstarted

// readme-snippet: frontpage
func frontPage() async throws {
    struct Note: Codable, Sendable {
        var title: String
        var folder: String
    }
    let db = try Database(path: "notes.sqlite")
    try db.register(
        View<Note>(
            name: "byTitle", version: "1", collections: ["notes"],
            group: { _, _, note in note.folder }, areInIncreasingOrder: { $0.title < $1.title }))

    let writer = db.newConnection(name: "writer")
    try await writer.readWrite { txn in
        try txn.set(Note(title: "Milk", folder: "inbox"), forKey: "n1", inCollection: "notes")
    }
    var rows: [String: [ViewItem]] = [:]
    for try await update in db.observe(view: "byTitle") {  // the rows, then exactly what changed
        rows = update.isReload ? update.rows ?? [:] : ViewRowChange.apply(update.changes, to: rows) ?? [:]
        print(update.commit, rows["inbox"]?.map(\.key) ?? [])
    }
}
// end readme-snippet: frontpage

// readme-snippet: usage
func usage() throws -> (db: Database, ui: Connection, writer: Connection) {
    struct Item: Codable, Sendable { var title: String }

    let db = try Database(path: "app.sqlite")  // or Database(path:configuration:)
    let ui = db.newConnection(name: "ui")
    let writer = db.newConnection(name: "sync")

    try writer.readWrite { txn in  // commits on return, rolls back on throw
        try txn.set(Item(title: "a"), forKey: "1", inCollection: "items")
        try txn.removeValue(forKey: "2", inCollection: "items")
        try txn.savepoint { txn in  // nested: a throw undoes only this part, and propagates
            try txn.set(Item(title: "draft"), forKey: "3", inCollection: "items")
        }
        txn.info = ["source": "sync"]  // travels with the changeset
    }

    let item = try ui.read { try $0.value(forKey: "1", inCollection: "items", as: Item.self) }

    try ui.beginLongLivedReadTransaction()  // a bookmark: every ui.read sees this commit
    try writer.readWrite { try $0.set(Item(title: "b"), forKey: "1", inCollection: "items") }
    let changes = try ui.beginLongLivedReadTransaction()  // advance atomically
    if changes.hasChange(forKey: "1", inCollection: "items") {
        print("refresh that row")
    }
    _ = item
    return (db, ui, writer)
}
// end readme-snippet: usage

/// The README's `Item`, at file level for the blocks after the first.
struct Item: Codable, Sendable { var title: String }

// readme-snippet: follow
func follow(_ db: Database, ui: Connection) async throws {
    let commits = db.changes()  // subscribe first, then bookmark:
    try await ui.advance()  // no commit falls in between
    for await _ in commits {
        let changes = try await ui.advance()  // every commit since the last advance
        if changes.hasChange(forKey: "1", inCollection: "items") {
            let item = try await ui.read { try $0.value(forKey: "1", inCollection: "items", as: Item.self) }
            print(item?.title ?? "removed")
        }
    }
    // The stream ended: the database was released, the task cancelled, or this consumer fell
    // more than `changesBufferLimit` commits behind. Subscribe again, then advance: nothing is lost.
}
// end readme-snippet: follow

// readme-snippet: summary
func summary(ui: Connection) throws {
    let summary = try ui.beginLongLivedReadTransaction().summary  // ChangeSummary
    if summary.hasChange(forKey: "1", inCollection: "items") { print("refresh that row") }
    if let keys = summary.changedKeys(inCollection: "items") { refresh(keys) } else { reloadAll() }
}
// end readme-snippet: summary

// readme-snippet: limits
func search(_ text: String, ui: Connection) async throws -> [ViewItem] {
    try await ui.read(timeLimit: .seconds(2)) { txn in
        try txn.search(named: "notes").keys(matching: SearchReader.query(forText: text), limit: 50)
    }
}
// end readme-snippet: limits

// readme-snippet: metadata
func metadata(ui: Connection, writer: Connection) throws {
    struct Stamp: Codable { var modified: Date }
    try writer.readWrite { txn in
        try txn.set(Item(title: "doc"), forKey: "1", inCollection: "docs", metadata: Stamp(modified: Date()))
        // false: there is no value under "2"
        try txn.setMetadata(Stamp(modified: Date()), forKey: "2", inCollection: "docs")
    }
    let stamp = try ui.read { try $0.metadata(forKey: "1", inCollection: "docs", as: Stamp.self) }
    _ = stamp
}
// end readme-snippet: metadata

// readme-snippet: observe
func watchSettings(_ db: Database, writer: Connection) async throws {
    for try await settings in db.observe(forKey: "main", inCollection: "settings", as: Settings.self) {
        apply(settings)  // a Settings?, nil when the key has no value
    }
}
func markChanged(_ writer: Connection) throws {
    try writer.readWrite { try $0.touch(forKey: "1", inCollection: "items") }  // views report an update
}
// end readme-snippet: observe

/// Stand-ins for swift-service-lifecycle's `Service` and `gracefulShutdown()`, with their
/// signatures: a dependency of this package's tests would be resolved by every app that depends
/// on SnapshotDB.
protocol Service: Sendable {
    func run() async throws
}
func gracefulShutdown() async throws {}

// readme-snippet: service
struct DatabaseService: Service {
    let db: Database
    func run() async throws {
        try? await gracefulShutdown()  // wait for SIGTERM / the group's shutdown
        try db.close()
    }
}
// end readme-snippet: service

// readme-snippet: errors
func errors(writer: Connection) throws {
    do {
        try writer.readWrite { try $0.set(Item(title: "c"), forKey: "4", inCollection: "items") }
    } catch DatabaseError.Code.diskFull {
        // nothing was committed: free some space and try again
    }
}
// end readme-snippet: errors

// readme-snippet: migration
func migration(migratedPath: String) throws -> Database {
    struct NoteV1: Codable, Sendable {  // the old shape
        var title: String
        var text: String
    }
    struct NoteV2: Codable, Sendable {  // `text` renamed
        var title: String
        var body: String
    }
    var migrator = Migrator()
    migrator.register("rename-text-to-body") { txn in
        try txn.rewriteValues(inCollection: "drafts", from: NoteV1.self, to: NoteV2.self) { key, old in
            NoteV2(title: old.title, body: old.text)  // nil would remove the value
        }
    }
    migrator.register("drafts-to-notes") { txn in try txn.renameCollection("drafts", to: "notes-v2") }
    let migrated = try Database(path: migratedPath, migrator: migrator)  // or try migrator.migrate(db)
    return migrated
}
// end readme-snippet: migration

// readme-snippet: errorcodes
func errorCodes(writer: Connection) throws {
    do {
        try writer.readWrite { txn in try txn.set(Item(title: "a"), forKey: "e1", inCollection: "items") }
    } catch DatabaseError.Code.diskFull {
        print("free some space, then try again: nothing was committed")
    } catch let error as DatabaseError where error.code == .busy {
        print("another process held the lock past the busy timeout: \(error.message)")
    }
}
// end readme-snippet: errorcodes

// readme-snippet: history
func history(reader: Connection) throws {
    let saved = try reader.read { try $0.position() }  // a HistoryPosition; save its description
    // … after a restart, or in another process:
    let missed = try reader.read { try $0.changes(after: saved) }
    _ = missed
}
// end readme-snippet: history

// readme-snippet: resume
/// What an app does with the changesets (the README leaves it out).
func apply(_ changesets: [Changeset]) { _ = changesets }
func resume(_ db: Database, ui: Connection, from saved: HistoryPosition) async throws {
    let commits = db.changes()  // 1. subscribe: no commit after this is missed
    try ui.beginLongLivedReadTransaction()  // 2. bookmark
    apply(try await ui.read { try $0.changes(after: saved) })  // 3. catch up, to the bookmark exactly
    for await _ in commits {  // 4. follow
        apply(try ui.beginLongLivedReadTransaction())
    }
}
// end readme-snippet: resume

// readme-snippet: consumer
func runIndexer(_ db: Database, writer: Connection) async throws {
    let indexer = try db.consumer(named: "search-indexer")
    for try await batch in indexer.batches(on: db.newConnection(name: "indexer")) {
        try await writer.readWrite { txn in
            // Its own commits come back to it too: index only what changed its sources,
            // or it would write for its own writes for ever.
            for changeset in batch.changesets where changeset.hasChange(inCollection: "notes") {
                try index(changeset, in: txn)
            }
            try indexer.acknowledge(batch, in: txn)  // commits with the index
        }
    }
}
// end readme-snippet: consumer

// readme-snippet: replica
// Started with LITESTREAM_REPLICA_URL=file:///backups/app (or s3://...) and
// LITESTREAM_LOG_FILE=/var/log/litestream-vfs.log in its environment.
func serveReplica() async throws {
    try LitestreamVFS.register(extensionPath: "/path/to/litestream-vfs.so")
    let replica = try Database(replica: "app.sqlite", vfs: LitestreamVFS.name)
    try replica.register(byTitle)  // the primary built it; the replica takes it up
    let ui = replica.newConnection(name: "ui")
    try await ui.advance()  // a bookmark on the replica
    for await _ in replica.changes() {  // the primary's commits, as they arrive
        let changesets = try await ui.advance()  // exact, with row changes
        print(changesets.count)
    }
}
// end readme-snippet: replica

// readme-snippet: views
struct Note: Codable, Sendable {
    var title: String
    var body: String
    var folder: String
    var archived: Bool
}

func views(db: Database, ui: Connection, writer: Connection) throws -> View<Note> {
    func reloadList() {}
    func animate(_ sections: [ViewSectionChange], _ rows: [ViewRowChange]) {
        print(sections.count, rows.count)
    }
    let byTitle = View<Note>(
        name: "byTitle", version: "1", collections: ["notes"],
        group: { collection, key, note in note.archived ? nil : note.folder },  // nil: not in the view
        areInIncreasingOrder: { a, b in a.title < b.title })  // ties: by (collection, key)
    try db.register(byTitle)
    try writer.readWrite { txn in
        try txn.set(
            Note(title: "Milk", body: "2 l", folder: "inbox", archived: false), forKey: "n1",
            inCollection: "notes")
        try txn.set(
            Note(title: "Plan", body: "Q3", folder: "work", archived: false), forKey: "n2",
            inCollection: "notes")
    }

    try ui.beginLongLivedReadTransaction()
    var rows: [String: [ViewItem]] = [:]  // a list's model: the items of each group, in order
    try ui.read { txn in
        let view = try txn.view(named: "byTitle")
        print(view.groups)  // ["inbox", "work"], sorted
        print(view.count(inGroup: "inbox"))  // O(1)
        print(view.item(at: 0, inGroup: "inbox") as Any)  // ViewItem(collection:key:), O(log n)
        print(view.index(ofKey: "n1", inCollection: "notes") as Any)  // ViewIndex(group:index:), O(log n)
        print(try view.value(at: 0, inGroup: "inbox", as: Note.self) as Any)
        for group in view.groups { rows[group] = view.items(inGroup: group) }  // O(n) for the group
    }
    try writer.readWrite { txn in
        try txn.set(
            Note(title: "Beer", body: "", folder: "inbox", archived: false), forKey: "n3",
            inCollection: "notes")
    }
    let changes = try ui.beginLongLivedReadTransaction()
    let summary = try ui.read { try $0.view(named: "byTitle").changeSummary(for: changes) }
    if summary.isReload { reloadList() } else { animate(summary.sections, summary.rows) }
    // Or apply the row changes to the model: it then equals the view's new rows.
    let rowChanges = try ui.read { try $0.view(named: "byTitle").changes(for: changes) }
    rows = ViewRowChange.apply(rowChanges, to: rows) ?? [:]  // nil: the changes do not fit the model
    return byTitle
}
// end readme-snippet: views

// readme-snippet: liveview
func liveView(db: Database) async throws {
    var rows: [String: [ViewItem]] = [:]
    for try await update in db.observe(view: "byTitle") {  // the rows, then every change
        rows = update.isReload ? update.rows ?? [:] : ViewRowChange.apply(update.changes, to: rows) ?? [:]
        let milk = try update.read { try $0.value(forKey: "n1", inCollection: "notes", as: Note.self) }
        print(update.commit, rows["inbox"]?.count ?? 0, milk?.title ?? "removed")
    }
}
// end readme-snippet: liveview

// readme-snippet: keyed
func keyed(db: Database, writer: Connection) throws -> ViewItem? {
    let byFolderThenTitle = View<Note>(
        name: "byFolderThenTitle", version: "1", collections: ["notes"],
        group: { _, _, note in note.archived ? "archive" : "all" },
        sortKey: { _, _, note in SortKey(note.folder, .descending(note.body.isEmpty), note.title) })
    try db.register(byFolderThenTitle)
    let first = try writer.read { try $0.view(named: "byFolderThenTitle").item(at: 0, inGroup: "all") }
    return first
}
// end readme-snippet: keyed

/// The view the README's views block registers, for the replica block.
let byTitle = View<Note>(
    name: "byTitle", version: "1", collections: ["notes"], group: { _, _, note in note.folder },
    areInIncreasingOrder: { $0.title < $1.title })

// readme-snippet: indexes
func indexes(db: Database, ui: Connection, writer: Connection) throws -> FullTextSearch<Note> {
    struct Person: Codable, Sendable {
        var city: String
        var age: Int
        var score: Double?
    }
    let byCity = SecondaryIndex<Person>(
        name: "people", version: "1", collections: ["people"],
        columns: [.text("city"), .integer("age"), .real("score")],
        extract: { collection, key, person in ["city": .text(person.city), "age": .integer(person.age)] })
    try db.register(byCity)
    try writer.readWrite { try $0.set(Person(city: "Oslo", age: 34), forKey: "p1", inCollection: "people") }
    try ui.beginLongLivedReadTransaction()  // advance past the registration to read the index
    let city = "Oslo"  // user input: always bound with ?, never spliced into the fragment
    try ui.read { txn in
        let index = try txn.index(named: "people")
        let keys = try index.keys(
            where: "city = ? AND age >= ?", [.text(city), 30], orderBy: "age DESC", limit: 20)
        let minors = try index.count(where: "age < ?", [18])
        print(keys, minors, try index.explain(where: "city = ?"))  // SQLite's plan: an index, or a scan
    }

    let search = FullTextSearch<Note>(
        name: "notes", version: "1", collections: ["notes"], columns: ["title", "body"],
        extract: { _, _, note in ["title": note.title, "body": note.body] })
    try db.register(search)
    try ui.beginLongLivedReadTransaction()
    let hits = try ui.read { try $0.search(named: "notes").keys(matching: "swift NEAR/5 sqlite", limit: 50) }
    let snippets = try ui.read { try $0.search(named: "notes").snippets(matching: "milk", column: "title") }
    _ = (hits, snippets)
    return search
}
// end readme-snippet: indexes

// readme-snippet: results
func results(db: Database, ui: Connection, byTitle: View<Note>, search: FullTextSearch<Note>) throws {
    let found = SearchResultsView(name: "found", parent: byTitle, search: search, version: "1", query: "milk")
    try db.register(found)
    try ui.beginLongLivedReadTransaction()
    let matches = try ui.read { txn in try txn.view(named: "found").items(inGroup: "inbox") }
    try db.register(found.searching("beer"))  // a new query: the view is rebuilt, its readers reload
    _ = matches
}
// end readme-snippet: results

// readme-snippet: checkpoints
func monitor() async throws {
    var configuration = Configuration()
    configuration.walWarningBytes = 64 << 20  // warn past 64 MiB (the default)
    configuration.walHardLimitBytes = 1 << 30  // refuse writes past 1 GiB while pinned (off by default)
    configuration.metricsLabel = "main"  // `database` dimension of the metrics
    let db = try Database(path: "app.sqlite", configuration: configuration)

    let status = db.checkpointStatus()  // WAL bytes/frames, checkpointed frames, newest commit
    for pin in status.laggingSnapshots {  // name, commit, commits behind, seconds held, bytes pinned
        print(pin.connectionName, pin.commitsBehind, pin.secondsHeld, pin.pinnedBytes)
    }
    print(status.externalReaders.map(\.processID))  // readers in other processes, from the -shm lock bytes

    for await event in db.checkpointEvents() {  // .checkpointStalled, .walOverWarning, .recovered
        if case .walOverWarning(let status) = event { alert(status.laggingSnapshots) }
    }
    try db.checkpoint(.truncate)  // force one; returns WAL and checkpointed frames
}
// end readme-snippet: checkpoints
