import Foundation
import SnapshotDBLocking
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDB

/// `Migrator`: named migrations, each in one transaction with its record, exactly once per
/// file across processes, refused when the file is newer, rolled back whole on an error or a
/// kill, with extensions rebuilt once at the end.
@Suite("Migrations")
struct MigrationTests {
    static let childKey = "SNAPSHOTDB_MIGRATION_CHILD"

    struct OldPerson: Codable, Sendable, Equatable { var name: String }
    struct Person: Codable, Sendable, Equatable {
        var first: String
        var last: String
    }

    /// A view that reads both shapes (an app registers its views after migrating; this one
    /// is registered before, to see what the migration does to it).
    struct EitherPerson: Codable, Sendable {
        var name: String?
        var last: String?
        var sortName: String { last ?? name ?? "" }
    }
    static let byLast = View<EitherPerson>(
        name: "byLast", version: "1", collections: ["people"], group: { _, _, _ in "all" },
        areInIncreasingOrder: { $0.sortName < $1.sortName })
    static let items = View<Item>(
        name: "items", version: "1", collections: ["items"], group: { _, _, _ in "all" },
        areInIncreasingOrder: { $0.title < $1.title })

    /// The app's migrations: split the name, then rename the collection of tags.
    static var migrator: Migrator {
        var migrator = Migrator()
        migrator.register("split-name") { txn in
            try txn.rewriteValues(inCollection: "people", from: OldPerson.self, to: Person.self) { _, old in
                let parts = old.name.split(separator: " ", maxSplits: 1).map(String.init)
                return Person(first: parts.first ?? "", last: parts.count > 1 ? parts[1] : "")
            }
        }
        migrator.register("rename-tags") { txn in try txn.renameCollection("tags", to: "labels") }
        return migrator
    }

    static func seed(_ db: Database, people: Int = 20) throws {
        try db.newConnection().readWrite { txn in
            for index in 0..<people {
                try txn.set(
                    OldPerson(name: "Ann \(String(format: "%03d", people - index))"), forKey: "p\(index)",
                    inCollection: "people")
            }
            try txn.set(Item(title: "red"), forKey: "t1", inCollection: "tags", metadata: Item(title: "meta"))
        }
    }

    @Test func migrationsRunInOrderOnceEachAsOrdinaryCommits() throws {
        try withTemporaryDatabase { db throws in
            try Self.seed(db)
            let before = db.latestCommit
            let migrator = Self.migrator
            #expect(try !migrator.hasCompletedMigrations(in: db))
            try migrator.migrate(db)
            #expect(try migrator.appliedMigrations(in: db) == ["split-name", "rename-tags"])
            #expect(try migrator.hasCompletedMigrations(in: db))
            #expect(db.latestCommit == before + 2)
            let reader = db.newConnection()
            try reader.read { txn in
                #expect(
                    try txn.value(forKey: "p0", inCollection: "people", as: Person.self)
                        == Person(first: "Ann", last: "020"))
                #expect(try txn.count(inCollection: "tags") == 0)
                #expect(
                    try txn.value(forKey: "t1", inCollection: "labels", as: Item.self) == Item(title: "red"))
                #expect(
                    try txn.metadata(forKey: "t1", inCollection: "labels", as: Item.self)
                        == Item(title: "meta"))
                let history = try txn.changes(after: before)
                #expect(history.map { $0.info["migration"] } == ["split-name", "rename-tags"])
                #expect(
                    history[1].removedKeys == ["tags": ["t1"]] && history[1].setKeys == ["labels": ["t1"]])
            }
            // Again: nothing left to run, nothing written.
            try migrator.migrate(db)
            #expect(db.latestCommit == before + 2)
        }
    }

    /// Opening with a migrator migrates before the database is handed back; a migration that
    /// fails fails the open and leaves the path free to open again.
    @Test func anOpenWithAMigratorMigratesFirst() throws {
        struct Refused: Error {}
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("open.sqlite").path
            do { try Self.seed(try Database(path: path)) }
            let db = try Database(path: path, migrator: Self.migrator)
            #expect(try Self.migrator.hasCompletedMigrations(in: db))
            try db.close()
            var failing = Self.migrator
            failing.register("refused") { _ in throw Refused() }
            #expect(throws: Refused.self) { try Database(path: path, migrator: failing) }
            _ = try Database(path: path)
        }
    }

    /// A migration that throws leaves the file as it was, with no record, and no later
    /// migration runs; fixed, the next run applies it.
    @Test func aMigrationThatThrowsRollsBackAndStopsTheRun() throws {
        struct Refused: Error {}
        try withTemporaryDatabase { db throws in
            try Self.seed(db)
            let before = db.latestCommit
            var failing = Migrator()
            failing.register("first") { txn in
                try txn.set(Item(title: "1"), forKey: "one", inCollection: "log")
            }
            failing.register("second") { txn in
                try txn.set(Item(title: "2"), forKey: "two", inCollection: "log")
                throw Refused()
            }
            failing.register("third") { txn in
                try txn.set(Item(title: "3"), forKey: "three", inCollection: "log")
            }
            #expect(throws: Refused.self) { try failing.migrate(db) }
            #expect(try failing.appliedMigrations(in: db) == ["first"])
            #expect(try db.newConnection().read { try $0.keys(inCollection: "log") } == ["one"])
            #expect(db.latestCommit == before + 1)
        }
    }

    @Test func registrationMistakesAreMisuseAtTheRun() throws {
        try withTemporaryDatabase { db throws in
            var twice = Migrator()
            twice.register("a") { _ in }
            twice.register("a") { _ in }
            let duplicate = expectError(.misuse) { try twice.migrate(db) }
            #expect(duplicate?.message.contains("'a' is registered twice") == true)

            var late = Migrator()
            late.register("a") { _ in }
            try late.migrate(db)
            late.register("b") { _ in }
            let error = expectError(.misuse) { try late.migrate(db) }
            #expect(error?.message.contains("'b' was registered after the migrator ran") == true)
        }
    }

    /// An older app (fewer migrations than the file records) is refused before it writes.
    @Test func anOlderAppIsRefusedBeforeItWrites() throws {
        try withTemporaryDatabase { db throws in
            try Self.seed(db)
            var newer = Self.migrator
            newer.register("add-email") { _ in }
            try newer.migrate(db)
            let before = db.latestCommit
            var older = Migrator()
            older.register("split-name") { txn in
                try txn.set(Item(title: "ran"), forKey: "older", inCollection: "log")
            }
            #expect(try older.hasBeenSuperseded(in: db))
            let error = expectError(.migrationsSuperseded) { try older.migrate(db) }
            #expect(
                error?.message.contains("'rename-tags', 'add-email'") == true, "\(String(describing: error))")
            #expect(db.latestCommit == before)
            // With the development option, the file is erased and migrated again.
            older.eraseDatabaseOnSchemaChange = true
            try older.migrate(db)
            #expect(try older.appliedMigrations(in: db) == ["split-name"])
            #expect(try db.newConnection().read { try $0.collections() } == ["log"])
        }
    }

    /// A value of the wrong type is `decodingFailed` naming its collection and key, and the
    /// migration changes nothing.
    @Test func aValueOfTheWrongTypeIsDecodingFailedNamingIt() throws {
        try withTemporaryDatabase { db throws in
            try Self.seed(db)
            try db.newConnection().readWrite {
                try $0.set(Item(title: "not a person"), forKey: "odd", inCollection: "people")
            }
            let before = db.latestCommit
            let error = expectError(.decodingFailed) { try Self.migrator.migrate(db) }
            #expect(error?.collection == "people" && error?.key == "odd", "\(String(describing: error))")
            #expect(db.latestCommit == before)
            #expect(try Self.migrator.appliedMigrations(in: db) == [])
        }
    }

    /// Extensions on the changed collections are rebuilt once at the migration's end (a reset
    /// in its changeset, a reload for a bookmark), others are left alone, and every view
    /// reads right after it.
    @Test func extensionsOfTheChangedCollectionsAreRebuiltOnce() throws {
        try withTemporaryDatabase { db throws in
            try Self.seed(db, people: 300)
            try db.register(Self.byLast, Self.items)
            try db.newConnection().readWrite {
                try $0.set(Item(title: "x"), forKey: "x", inCollection: "items")
            }
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            let progress = Mutex<[Int]>([])
            var migrator = Migrator()
            migrator.register("split-name") { txn in
                try txn.rewriteValues(
                    inCollection: "people", from: OldPerson.self, to: Person.self, batchSize: 128,
                    progress: { done, total in
                        #expect(total == 300)
                        progress.withLock { $0.append(done) }
                    }
                ) { _, old in Person(first: "", last: old.name) }
            }
            try migrator.migrate(db)
            #expect(progress.withLock { $0 } == [128, 256, 300])
            let changes = try ui.beginLongLivedReadTransaction()
            #expect(changes.count == 1 && changes[0].info["migration"] == "split-name")
            try ui.read { txn in
                let view = try txn.view(named: "byLast")
                #expect(view.requiresReload(for: changes))
                #expect(!(try txn.view(named: "items").requiresReload(for: changes)))
                let lasts = try view.items(inGroup: "all").map {
                    try txn.value(forKey: $0.key, inCollection: "people", as: Person.self)!.last
                }
                #expect(lasts.count == 300 && lasts == lasts.sorted())
            }
        }
    }

    @Test func batchesWalkACollectionWhileItIsWritten() throws {
        try withTemporaryDatabase { db throws in
            try db.newConnection().readWrite { txn in
                for key in ["", "a", "b", "c", "d", "e"] {
                    try txn.set(Item(title: key), forKey: key, inCollection: "c")
                }
                var seen: [[String]] = []
                try txn.forEachBatch(inCollection: "c", as: Item.self, batchSize: 4) { batch in
                    seen.append(batch.map(\.key))
                    for (key, _) in batch { try txn.removeValue(forKey: key, inCollection: "c") }
                    if seen.count == 1 { try txn.set(Item(title: "z"), forKey: "z", inCollection: "c") }
                }
                #expect(seen == [["", "a", "b", "c"], ["d", "e", "z"]])
                expectError(.misuse) {
                    try txn.forEachBatch(inCollection: "c", as: Item.self, batchSize: 0) { _ in }
                }
            }
        }
    }

    // MARK: Processes

    /// The child: migrates the file (`run`), or begins a long migration and waits to be killed
    /// in it (`hang`).
    @Test(.enabled(if: ProcessInfo.processInfo.environment[childKey] != nil))
    func childMigrates() throws {
        let parts = try #require(ProcessInfo.processInfo.environment[Self.childKey]).split(separator: "|")
        let db = try Database(path: String(parts[0]))
        var migrator = Migrator()
        migrator.register("count-runs") { txn in
            // Long enough that the processes' runs overlap.
            for index in 0..<2_000 {
                try txn.set(Item(title: "\(index)"), forKey: "\(index)", inCollection: "filler")
            }
            let runs = try txn.value(forKey: "runs", inCollection: "meta", as: Int.self) ?? 0
            try txn.set(runs + 1, forKey: "runs", inCollection: "meta")
            if parts[1] == "hang" {
                FileHandle.standardOutput.write(Data("INSIDE\n".utf8))
                _ = readLine()
            }
        }
        try migrator.migrate(db)
        print("DONE")
    }

    /// Several processes migrating one file at once: exactly one runs the migration.
    @Test func ofSeveralProcessesExactlyOneRunsEachMigration() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("shared.sqlite").path
            _ = try Database(path: path)
            let children = try (0..<3).map { _ in
                try startChildTest("childMigrates", environmentKey: Self.childKey, value: "\(path)|run")
            }
            for child in children { #expect(child.finish() == 0, "\(child.standardError)") }
            let db = try Database(path: path)
            #expect(
                try db.newConnection().read {
                    try $0.value(forKey: "runs", inCollection: "meta", as: Int.self)
                } == 1)
            let history = try db.newConnection().read { try $0.changes(after: 0) }
            #expect(history.filter { $0.info["migration"] == "count-runs" }.count == 1)
        }
    }

    /// SIGKILL in the middle of a migration: the file is as it was, and the next run runs it.
    @Test func aMigrationKilledInTheMiddleLeavesTheFileAsItWas() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("killed.sqlite").path
            let before: UInt64
            do {
                let db = try Database(path: path)
                try db.newConnection().readWrite {
                    try $0.set(Item(title: "kept"), forKey: "k", inCollection: "c")
                }
                before = db.latestCommit
            }
            let child = try startChildTest(
                "childMigrates", environmentKey: Self.childKey, value: "\(path)|hang")
            try child.waitForLine("INSIDE")
            child.kill()
            _ = child.finish()
            let db = try Database(path: path)
            #expect(db.latestCommit == before)
            var migrator = Migrator()
            migrator.register("count-runs") { txn in try txn.set(1, forKey: "runs", inCollection: "meta") }
            #expect(try migrator.appliedMigrations(in: db) == [])
            #expect(try db.newConnection().read { try $0.count(inCollection: "filler") } == 0)
            try migrator.migrate(db)
            #expect(try migrator.appliedMigrations(in: db) == ["count-runs"])
        }
    }

    /// A record table changed from outside is `corrupt`, naming it.
    @Test func aDamagedRecordTableIsCorrupt() throws {
        try withTemporaryDatabase { db throws in
            _ = try sqlite3(db.path, "CREATE TABLE snapshotdb_migrations(nom TEXT);")
            let error = expectError(.corrupt) { try Self.migrator.migrate(db) }
            #expect(error?.message.contains("snapshotdb_migrations") == true, "\(String(describing: error))")
        }
    }
}
