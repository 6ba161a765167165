import Foundation
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDB

/// A view's record of a commit is bounded (issue 45, item 2): past
/// ``Configuration/viewRecordLimitBytes`` the commit records a reload of the view, and its
/// history row holds keys, not the old values of a view ordered by a closure.
@Suite("A view's record of a commit, bounded")
struct ViewRecordLimitTests {
    @Test func aCommitPastTheLimitRecordsAReloadAndAHistoryRowWithoutValues() throws {
        var configuration = Configuration()
        configuration.viewRecordLimitBytes = 4_096
        try withTemporaryDatabase(configuration: configuration) { db throws in
            try db.register(ViewTests.byTitle)
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            let long = String(repeating: "x", count: 1_000)
            try writer.readWrite { txn in
                for index in 0..<50 {
                    try txn.set(
                        Note(title: "\(index) \(long)", folder: "inbox", archived: false),
                        forKey: "n\(index)",
                        inCollection: "notes")
                }
            }
            try ui.beginLongLivedReadTransaction()
            // Within the bound: one move records its exact row change.
            try writer.readWrite {
                try $0.set(
                    Note(title: "0 moved", folder: "inbox", archived: false), forKey: "n1",
                    inCollection: "notes")
            }
            var changes = try ui.beginLongLivedReadTransaction()
            try ui.read { txn in
                let view = try txn.view(named: "byTitle")
                #expect(!view.requiresReload(for: changes))
                #expect(try !view.changes(for: changes).isEmpty)
            }
            // Past it: removing the 50 notes (about 50 KB of old values) records a reload.
            try writer.readWrite { try $0.removeAll(inCollection: "notes") }
            let commit = db.latestCommit
            changes = try ui.beginLongLivedReadTransaction()
            #expect(changes.map(\.commit) == [commit])
            try ui.read { txn in
                let view = try txn.view(named: "byTitle")
                #expect(view.requiresReload(for: changes))
                #expect(view.count(inGroup: "inbox") == 0)
            }
            // The row holds what the commit changed, not the old values (about 50 KB with them).
            let length = try sqlite3(
                db.path, "SELECT length(changes) FROM snapshotdb_history WHERE number = \(commit);")
            #expect(
                Int(length.trimmingCharacters(in: .whitespacesAndNewlines)).map { $0 < 4_096 } == true,
                "\(length)")
            // A reader of the durable history (another process, or this one after a restart)
            // gets the same reload.
            let fromHistory = try db.newConnection(name: "history").read { try $0.changes(after: commit - 1) }
            let reloads = try ui.read { try $0.view(named: "byTitle").requiresReload(for: fromHistory) }
            #expect(reloads)
        }
    }

    /// The row bound follows SQLite's own: with SQLite's length limit lowered (as a gigabyte is
    /// in production, without writing one), `removeAll(inCollection:)` of more old values under
    /// a closure view than one row can hold commits, and a bookmark gets a reload. (Before the
    /// bound, the commit failed with `valueTooLarge` after all its work.)
    @Test func aRemoveAllPastSQLitesLengthLimitCommits() throws {
        try withTemporaryDatabase { db throws in
            try db.register(ViewTests.byTitle)
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            let long = String(repeating: "x", count: 10_000)
            try writer.readWrite { txn in
                for index in 0..<30 {
                    try txn.set(
                        Note(title: "\(index) \(long)", folder: "inbox", archived: false),
                        forKey: "n\(index)",
                        inCollection: "notes")
                }
            }
            try ui.beginLongLivedReadTransaction()
            // 300 KB of old values; one row may hold 200 KB.
            try writer.setSQLiteLengthLimit(200_000)
            try writer.readWrite { try $0.removeAll(inCollection: "notes") }
            let changes = try ui.beginLongLivedReadTransaction()
            try ui.read { txn in
                let view = try txn.view(named: "byTitle")
                #expect(view.requiresReload(for: changes))
                #expect(view.count == 0)
            }
        }
    }
}
