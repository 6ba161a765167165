import Foundation
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDB

/// New items are placed together when the view's pages are next written: a bulk load sorts them
/// once and builds pages (an empty group) or merges them into the group's items (a group that
/// gets many); the view and its row changes are what one-by-one inserts gave.
@Suite("Views under bulk writes")
struct ViewBulkTests {
    /// The rows `byTitle` must hold for `notes`, by brute force.
    static func expected(_ notes: [String: Note]) -> [String: [ViewItem]] {
        var groups: [String: [(note: Note, item: ViewItem)]] = [:]
        for (key, note) in notes where !note.archived {
            groups[note.folder, default: []].append((note, ViewItem(collection: "notes", key: key)))
        }
        return groups.mapValues { members in
            members.sorted { ($0.note.title, $0.item) < ($1.note.title, $1.item) }.map(\.item)
        }
    }

    static func note(_ random: inout SeededGenerator) -> Note {
        Note(
            title: "t\(Int.random(in: 0..<500, using: &random))",
            folder: ["inbox", "work", "home"].randomElement(using: &random)!,
            archived: Int.random(in: 0..<10, using: &random) == 0)
    }

    @Test(arguments: [false, true]) func bulkWritesGiveTheViewAndTheRowChangesOfOneByOneInserts(keyed: Bool)
        throws
    {
        try withTemporaryDatabase { db throws in
            try db.register(ViewTests.byTitle(keyed: keyed))
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            var random = SeededGenerator(state: 5)
            var notes: [String: Note] = [:]
            var rows: [String: [ViewItem]] = [:]
            func check(_ what: String) throws {
                let changes = try ui.beginLongLivedReadTransaction()
                let (now, rowChanges) = try ui.read { txn in
                    let view = try txn.view(named: "byTitle")
                    return (ViewTests.rows(view), try view.changes(for: changes))
                }
                #expect(now == Self.expected(notes), "\(what): the view is not the brute force")
                #expect(
                    ViewTests.apply(rowChanges, to: rows) == now, "\(what): the row changes do not replay")
                rows = now
            }
            /// Sets a random note under each of `indexes`, and expects it unless `rolledBack`.
            func set<Indexes: Sequence<Int>>(
                _ indexes: Indexes, in txn: ReadWriteTransaction, rolledBack: Bool = false
            )
                throws
            {
                for index in indexes {
                    let note = Self.note(&random)
                    if !rolledBack { notes["n\(index)"] = note }
                    try txn.set(note, forKey: "n\(index)", inCollection: "notes")
                }
            }
            func remove<Indexes: Sequence<Int>>(_ indexes: Indexes, in txn: ReadWriteTransaction) throws {
                for index in indexes {
                    notes["n\(index)"] = nil
                    try txn.removeValue(forKey: "n\(index)", inCollection: "notes")
                }
            }

            // 1,000 new items into empty groups: each group is built from the sorted items.
            try writer.readWrite { txn in
                try set(0..<1_000, in: txn)
            }
            try check("a bulk load into an empty view")

            // 300 more (a merge into groups of about 300 each), beside updates and removals of
            // items already there, items set twice, and items added then removed.
            try writer.readWrite { txn in
                try set(1_000..<1_300, in: txn)
                try set(stride(from: 0, to: 200, by: 7), in: txn)
                try remove(stride(from: 3, to: 200, by: 11), in: txn)
                try set(1_000..<1_020, in: txn)
                try remove(1_020..<1_030, in: txn)
                // Read inside the transaction: the waiting items are placed first.
                let view = try txn.view(named: "byTitle")
                #expect(ViewTests.rows(view) == Self.expected(notes))
                try set(1_300..<1_400, in: txn)
            }
            try check("a bulk merge with updates and removals")

            // Savepoints: new items of a savepoint that rolls back are gone with it; those of one
            // that is kept stay.
            try writer.readWrite { txn in
                try txn.savepoint { txn in
                    try set(2_000..<2_200, in: txn, rolledBack: true)
                    txn.rollback()
                }
                try txn.savepoint { txn in
                    try set(3_000..<3_200, in: txn)
                }
            }
            try check("savepoints")

            // A few new items: placed one by one.
            try writer.readWrite { txn in
                try set(4_000..<4_010, in: txn)
            }
            try check("a few inserts")

            // A reader made before the transaction's writes refuses to answer for after them
            // (its pages may be gone after a merge); the transaction fails with `misuse`.
            let stale = expectError(.misuse) {
                try writer.readWrite { txn in
                    let before = try txn.view(named: "byTitle")
                    try set(5_000..<5_200, in: txn, rolledBack: true)
                    _ = before.item(at: 0, inGroup: "inbox")
                }
            }
            #expect(stale?.message.contains("call view(named:) again") == true)
            try check("nothing of the refused transaction")

            // The pages on disk give the same view to a database opened afresh.
            try db.close()
            let reopened = try Database(path: db.path)
            try reopened.register(ViewTests.byTitle(keyed: keyed))
            let rowsAfterReopen = try reopened.newConnection(name: "r").read {
                ViewTests.rows(try $0.view(named: "byTitle"))
            }
            #expect(rowsAfterReopen == Self.expected(notes))
        }
    }
}

extension ViewBulkTests {
    /// A reader made before writes is refused even when the transaction's change log is as long
    /// again as when it was made (`removeAllCollections()` empties the log, a savepoint rollback
    /// shortens it): the count that tells it only grows.
    @Test func aReaderMadeBeforeAClearAndAsManyWritesIsRefused() throws {
        try withTemporaryDatabase { db throws in
            try db.register(ViewTests.byTitle)
            let writer = db.newConnection(name: "writer")
            let stale = expectError(.misuse) {
                try writer.readWrite { txn in
                    try txn.set(
                        Note(title: "a", folder: "inbox", archived: false), forKey: "n1",
                        inCollection: "notes")
                    let before = try txn.view(named: "byTitle")
                    try txn.removeAllCollections()
                    try txn.set(
                        Note(title: "b", folder: "work", archived: false), forKey: "n2", inCollection: "notes"
                    )
                    _ = try txn.view(named: "byTitle")
                    _ = before.items(inGroup: "inbox")
                }
            }
            #expect(
                stale?.message.contains("call view(named:) again") == true, "\(String(describing: stale))")
            try writer.readWrite {
                try $0.set(
                    Note(title: "a", folder: "inbox", archived: false), forKey: "n1", inCollection: "notes")
            }
            let savepoint = expectError(.misuse) {
                try writer.readWrite { txn in
                    let before = try txn.view(named: "byTitle")
                    try? txn.savepoint { txn in
                        try txn.set(
                            Note(title: "c", folder: "inbox", archived: false), forKey: "n3",
                            inCollection: "notes")
                        txn.rollback()
                    }
                    _ = before.items(inGroup: "inbox")
                }
            }
            #expect(savepoint?.message.contains("call view(named:) again") == true)
        }
    }
}
