import CSQLite
import Foundation
import Logging
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

/// History rows a newer release may write, and strings that are not text (issue 45).
@Suite("History rows this release cannot read")
struct NewerHistoryRowTests {
    /// The encoding of one set of `key` in collection "c", with `version` and `flags`.
    static func row(version: UInt8 = HistoryCoding.formatVersion, flags: UInt8 = 0, key: [UInt8]) -> [UInt8] {
        // version, flags, 1 run: "c" with 1 op (set, key), no extensions, no resets, not all reset.
        [version, flags, 1, 1, UInt8(ascii: "c"), 1, 0, UInt8(key.count)] + key + [0, 0, 0]
    }

    static func decode(_ bytes: [UInt8]) throws(HistoryReader.Failure) -> HistoryCoding.Decoded {
        let outcome = bytes.withUnsafeBytes { raw -> Result<HistoryCoding.Decoded, HistoryReader.Failure> in
            do throws(HistoryReader.Failure) { return .success(try HistoryCoding.decode(raw)) } catch {
                return .failure(error)
            }
        }
        return try outcome.get()
    }

    @Test func aNewerVersionOrFlagIsANewerFormatAndBadUTF8IsDamage() throws {
        #expect(try Self.decode(Self.row(key: Array("k".utf8))).operations.map(\.key) == ["k"])
        for bytes in [
            Self.row(version: 2, key: Array("k".utf8)), Self.row(flags: 0x02, key: Array("k".utf8)),
        ] {
            #expect(throws: HistoryReader.Failure.self) { _ = try Self.decode(bytes) }
            do { _ = try Self.decode(bytes) } catch { #expect(error.isNewerFormat, "\(error.reason)") }
        }
        // Version 0 was never written: damage, not a newer release.
        do { _ = try Self.decode(Self.row(version: 0, key: Array("k".utf8))) } catch {
            #expect(!error.isNewerFormat)
        }
        // A key that is not UTF-8 is damage; it used to read as U+FFFD.
        do {
            _ = try Self.decode(Self.row(key: [0x6B, 0xFF]))
            Issue.record("invalid UTF-8 decoded")
        } catch {
            #expect(!error.isNewerFormat)
            #expect(error.reason.contains("not valid UTF-8"), "\(error.reason)")
        }
    }

    /// A row of a newer release among this one's: `changes(after:)` says it cannot read it, and
    /// an advance gets that commit as external and the others exactly.
    @Test func aRowOfANewerReleaseIsUnsupportedFormatAndCostsItsCommitOnly() throws {
        let logs = LogCapture()
        var configuration = Configuration()
        configuration.checkpointLogger = logs.logger
        try withTemporaryDatabase(configuration: configuration) { db throws in
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            try writer.readWrite { try $0.set(0, forKey: "k0", inCollection: "c") }
            try ui.beginLongLivedReadTransaction()
            let start = db.latestCommit
            // "Another process" (the sqlite3 shell) writes three rows; the middle one is a newer
            // release's (format version 2). Each is a copy of the newest row, numbered on.
            let newer = Self.row(version: 2, key: Array("k2".utf8)).map { String(format: "%02x", $0) }
                .joined()
            for (offset, changes) in [Self.row(key: Array("k1".utf8)), nil, Self.row(key: Array("k3".utf8))]
                .enumerated()
            {
                let hex = changes.map { $0.map { String(format: "%02x", $0) }.joined() } ?? newer
                _ = try sqlite3(
                    db.path,
                    "INSERT INTO snapshotdb_history(number, kind, date, process, connection, token, info, changes) "
                        + "SELECT number + 1, 0, date, process, connection, token + 1, NULL, x'\(hex)' "
                        + "FROM snapshotdb_history WHERE number = \(start + UInt64(offset));")
            }
            let reader = db.newConnection(name: "reader")
            let error = expectError(.unsupportedFormat) { try reader.read { try $0.changes(after: start) } }
            #expect(error?.message.contains("commit \(start + 2) was written by a newer SnapshotDB") == true)
            let changesets = try ui.beginLongLivedReadTransaction()
            #expect(changesets.map(\.commit) == [start + 1, start + 2, start + 3])
            #expect(changesets.map(\.isExternal) == [false, true, false])
            #expect(changesets.first?.setKeys["c"] == ["k1"])
            #expect(logs.messages(at: .warning).count == 1)
        }
    }
}
