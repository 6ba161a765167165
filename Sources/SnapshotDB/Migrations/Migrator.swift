internal import Foundation

internal import struct Synchronization.Atomic

/// Named migrations of an app's stored values, run in order, each exactly once per file, in
/// every process: the value-store form of GRDB's `DatabaseMigrator`, Core Data's migrations and
/// Realm's migration block.
///
/// ```swift
/// var migrator = Migrator()
/// migrator.register("split-name") { txn in
///     try txn.rewriteValues(inCollection: "people", from: OldPerson.self, to: Person.self) { _, old in
///         Person(first: old.name.components(separatedBy: " ").first ?? "", last: "")
///     }
/// }
/// try migrator.migrate(db)
/// ```
///
/// Design:
/// - **One transaction each.** A migration runs in one read-write transaction together with
///   its record in the file (the table `snapshotdb_migrations`): it commits whole, with its
///   record, or not at all. A migration that throws rolls back, leaves the file as it was, and
///   no later migration runs; a process killed in the middle leaves the file as it was, and
///   the next `migrate` runs it again. Its commit is an ordinary commit, in the history and in
///   every bookmark's changesets, with `info["migration"]` set to its name.
/// - **Exactly once, in every process.** Whether a migration ran is read under SQLite's write
///   lock, in the transaction that would run it: of several processes migrating one file at
///   once, one runs each migration and the others wait for the lock (bounded by
///   ``Configuration/busyTimeout``, then `busy`) and find it done.
/// - **Refused when superseded.** A file that records a migration this migrator does not have
///   was migrated by a newer release of the app: `migrate` throws `migrationsSuperseded`
///   naming them, before it writes anything.
/// - **Extensions rebuilt once.** While a migration runs, the registered extensions are not
///   kept value by value: at its end, those that observe a collection it changed are rebuilt
///   from the values, once, in the same transaction (a bookmark gets a reload for them).
///   Reading an extension inside a migration reads it as it was before the migration.
///   Extensions this process has not registered yet go stale as any write makes them, and
///   are rebuilt when registered.
/// - **Registration is checked at the run.** `register` does not throw (so that a list of
///   migrations reads as one): a name registered twice, or a migration registered after the
///   migrator ran, makes the next `migrate` throw `misuse` naming it.
public struct Migrator: Sendable {
    struct Migration: Sendable {
        let name: String
        let body: @Sendable (ReadWriteTransaction) throws -> Void
    }

    private var migrations: [Migration] = []
    private var problems: [String] = []
    /// Shared by copies: whether any of them ran.
    private let runs = RunFlag()

    final class RunFlag: Sendable {
        let hasRun = Atomic(false)
    }

    /// Development only (off by default): when the file records a migration this migrator does
    /// not have (one renamed or removed while the app was being written), `migrate` erases
    /// every value and every migration record in one commit, and runs every migration again,
    /// instead of throwing `migrationsSuperseded` (as GRDB's `eraseDatabaseOnSchemaChange`).
    /// Never set it in a release: it deletes the user's data.
    public var eraseDatabaseOnSchemaChange = false

    /// A migrator with no migrations.
    public init() {}

    /// Adds the migration `name`, run after those registered before it. `migrate` throws
    /// `misuse` when `name` was registered already, or when this migrator ran before the call.
    public mutating func register(
        _ name: String, _ migrate: @escaping @Sendable (ReadWriteTransaction) throws -> Void
    ) {
        if migrations.contains(where: { $0.name == name }) {
            problems.append("the migration '\(name)' is registered twice")
        }
        if runs.hasRun.load(ordering: .acquiring) {
            problems.append(
                "the migration '\(name)' was registered after the migrator ran: register every migration "
                    + "before the first migrate(_:)")
        }
        migrations.append(Migration(name: name, body: migrate))
    }

    /// The names of the registered migrations, in order.
    public var migrationNames: [String] { migrations.map(\.name) }

    /// The names of the migrations `db`'s file records as run, in the order they ran.
    ///
    /// - Throws: `corrupt` when the record table is damaged; what a read throws.
    public func appliedMigrations(in db: Database) throws -> [String] {
        try db.newConnection(name: "snapshotdb.migrator").read { txn in
            try MigrationRecords.applied(on: txn.core.handle())
        }
    }

    /// Whether `db`'s file records every migration of this migrator.
    public func hasCompletedMigrations(in db: Database) throws -> Bool {
        Set(try appliedMigrations(in: db)).isSuperset(of: migrationNames)
    }

    /// Whether `db`'s file records a migration this migrator does not have (a newer release
    /// migrated it).
    public func hasBeenSuperseded(in db: Database) throws -> Bool {
        !Set(try appliedMigrations(in: db)).isSubset(of: migrationNames)
    }

    /// Runs, in order, every registered migration that `db`'s file does not record yet, each in
    /// its own transaction.
    ///
    /// - Throws: `misuse` for a migration registered twice or after a run; `migrationsSuperseded`
    ///   when the file records migrations this migrator does not have (nothing written);
    ///   `readOnly` on a read replica or a read-only open; `busy` when another process held
    ///   the write lock past the busy timeout; what a migration throws (its transaction rolled
    ///   back, and no later migration ran).
    public func migrate(_ db: Database) throws {
        runs.hasRun.store(true, ordering: .releasing)
        guard problems.isEmpty else {
            throw DatabaseError(.misuse, problems.joined(separator: "; "))
        }
        try db.checkWritable("migrate(_:)")
        let connection = db.newConnection(name: "snapshotdb.migrator")
        let names = migrationNames
        let known = Set(names)
        let erase = eraseDatabaseOnSchemaChange
        // Checked before any transaction too, so that a migrator with nothing left to run
        // still refuses a file it does not know.
        if !erase {
            let unknown = try connection.read { txn in try MigrationRecords.applied(on: txn.core.handle()) }
                .filter { !known.contains($0) }
            if !unknown.isEmpty { throw Self.superseded(unknown, known: names) }
        }
        for (position, migration) in migrations.enumerated() {
            try connection.readWrite { txn in
                // Read under the write lock, in the transaction that would run it: exactly once.
                let handle = try txn.core.handle()
                var applied = try MigrationRecords.applied(on: handle)
                let unknown = applied.filter { !known.contains($0) }
                if !unknown.isEmpty {
                    guard erase else { throw Self.superseded(unknown, known: names) }
                    try txn.removeAllCollections()
                    try MigrationRecords.removeAll(on: handle)
                    applied = []
                    txn.info["migration.erased"] = unknown.joined(separator: ",")
                }
                guard !applied.contains(migration.name) else { return }
                txn.info["migration"] = migration.name
                try txn.runMigration(named: migration.name, position: position, migration.body)
            }
        }
    }

    private static func superseded(_ unknown: [String], known: [String]) -> DatabaseError {
        DatabaseError(
            .migrationsSuperseded,
            "the file records migrations this app does not have: \(unknown.map { "'\($0)'" }.joined(separator: ", ")) "
                + "(this app knows \(known.count): \(known.map { "'\($0)'" }.joined(separator: ", "))); a newer release "
                + "migrated it, and this one must not write to it (nothing was written)")
    }
}

extension Database {
    /// Opens the database at `path` and runs `migrator`'s pending migrations before handing it
    /// back (see ``Migrator/migrate(_:)``): the app's code never sees the file in an older
    /// shape. Register extensions after this returns, so that they are built from the
    /// migrated values.
    ///
    /// - Throws: what ``init(path:configuration:)`` throws, then what ``Migrator/migrate(_:)``
    ///   throws (the database is closed again: a migration that failed left it as it was).
    public convenience init(path: String, configuration: Configuration = Configuration(), migrator: Migrator)
        throws
    {
        try self.init(path: path, configuration: configuration)
        do {
            try migrator.migrate(self)
        } catch {
            do {
                try close()
            } catch {
                // The migration's error is the one to report; a close that failed leaves the
                // WAL for the next open, as any close does.
            }
            throw error
        }
    }
}
