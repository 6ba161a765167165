internal import Foundation

/// The file's record of the migrations that ran (``Migrator``): one row each, written in the
/// migration's own transaction, so that a migration and its record commit together or not at
/// all. The table is made by the first migration that runs; a file without it has run none.
enum MigrationRecords {
    static let table = "snapshotdb_migrations"

    static let create = """
        CREATE TABLE IF NOT EXISTS snapshotdb_migrations(
            name TEXT PRIMARY KEY NOT NULL,
            position INTEGER NOT NULL,
            commit_number INTEGER NOT NULL,
            applied_at REAL NOT NULL
        ) WITHOUT ROWID
        """

    /// The names of the migrations the snapshot of `handle` records, in the order they ran.
    ///
    /// - Throws: `corrupt` naming the table when it is not the table SnapshotDB makes (a
    ///   damaged schema, or a foreign client's table of that name).
    static func applied(on handle: SQLiteHandle) throws(DatabaseError) -> [String] {
        guard
            try handle.int64("SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = '\(table)'")
                == 1
        else { return [] }
        let select: SQLiteStatement
        do throws(DatabaseError) {
            select = try SQLiteStatement(
                handle: handle, sql: "SELECT name FROM \(table) ORDER BY position, name", persistent: false)
        } catch {
            throw damaged(error)
        }
        defer { select.reset() }
        var names: [String] = []
        do throws(DatabaseError) {
            while try select.step() {
                guard select.storageClass(at: 0) == .text else {
                    throw DatabaseError(.corrupt, "a row of \(table) has no text name")
                }
                names.append(select.string(at: 0))
            }
        } catch {
            throw error.code == .corrupt ? damaged(error) : error
        }
        return names
    }

    /// Records `name` as run at `position`, in the commit `commit` (the one its transaction
    /// makes, or the one it read when it changed no value).
    static func record(_ name: String, position: Int, commit: UInt64, on handle: SQLiteHandle)
        throws(DatabaseError)
    {
        do throws(DatabaseError) {
            try handle.execute(create)
            let insert = try SQLiteStatement(
                handle: handle,
                sql:
                    "INSERT INTO \(table)(name, position, commit_number, applied_at) VALUES (?1, ?2, ?3, ?4)",
                persistent: false)
            defer { insert.reset() }
            try insert.bind(name, at: 1)
            try insert.bind(Int64(position), at: 2)
            try insert.bind(Int64(commit), at: 3)
            try insert.bind(Date().timeIntervalSince1970, at: 4)
            try insert.execute()
        } catch {
            throw error.code == .sqlite || error.code == .corrupt ? damaged(error) : error
        }
    }

    /// Removes every record (a development erase, ``Migrator/eraseDatabaseOnSchemaChange``).
    static func removeAll(on handle: SQLiteHandle) throws(DatabaseError) {
        try handle.execute("DROP TABLE IF EXISTS \(table)")
    }

    private static func damaged(_ error: DatabaseError) -> DatabaseError {
        DatabaseError(
            .corrupt,
            "the table \(table), where SnapshotDB records the migrations that ran, is not the table it makes "
                + "(\(error.message)): the file's schema was changed from outside", cause: error)
    }
}
