import CSQLite
import Foundation
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDB

/// A damaged table of SnapshotDB's own is `corrupt` naming it (issue 45), not an untyped SQLite
/// error at the first write.
@Suite("Damaged tables of SnapshotDB's own")
struct DamagedHistoryTableTests {
    /// One column renamed in `sqlite_schema`'s `CREATE TABLE` text (a foreign client's
    /// `writable_schema` edit, or damage to that page): the open refuses the file, naming the
    /// table and both column lists; it opened, and the first write failed with "table
    /// snapshotdb_history has no column named changes" and code `sqlite`.
    @Test func aTableWhoseColumnsChangedIsRefusedAtOpen() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("edited.sqlite").path
            do {
                let db = try Database(path: path)
                try db.newConnection().readWrite { try $0.set(1, forKey: "a", inCollection: "c") }
                try db.close()
            }
            _ = try sqlite3(
                path,
                "PRAGMA writable_schema = ON; UPDATE sqlite_schema SET sql = replace(sql, 'changes BLOB', "
                    + "'changez BLOB') WHERE name = 'snapshotdb_history'; PRAGMA writable_schema = OFF;")
            let error = expectError(.corrupt) { try Database(path: path) }
            let message = error?.message ?? ""
            #expect(message.contains("table snapshotdb_history has the columns"), "\(message)")
            #expect(message.contains("changez") && message.contains("changes"), "\(message)")
        }
    }

    /// A row number already taken in `snapshotdb_history` (what a damaged page makes SQLite
    /// find) fails the commit as `corrupt` naming the table and the commit; any other failure
    /// is left as SQLite reported it.
    @Test func aConstraintOnTheHistorysOwnRowsIsDamage() {
        // SQLITE_CONSTRAINT_PRIMARYKEY (a macro Swift does not import).
        let taken = DatabaseError.sqlite(
            SQLITE_CONSTRAINT | (6 << 8), message: "UNIQUE constraint failed: snapshotdb_history.number")
        let damaged = History.damaged(taken, writing: 42, path: "app.sqlite")
        #expect(damaged.code == .corrupt)
        #expect(damaged.message.contains("row of commit 42 into snapshotdb_history"), "\(damaged.message)")
        #expect(damaged.message.contains("UNIQUE constraint failed"), "\(damaged.message)")
        let full = DatabaseError.sqlite(SQLITE_FULL, message: "database or disk is full")
        #expect(History.damaged(full, writing: 42, path: "app.sqlite").code == .diskFull)
    }
}
