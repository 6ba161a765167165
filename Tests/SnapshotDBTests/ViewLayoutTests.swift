import Foundation
import SnapshotDB
import Testing

/// A view's page order and counts live in memory (the layout), shared between the writer, the
/// readers of each commit and a savepoint's start; the page rows hold the items. These tests
/// check that every way of getting a layout agrees with the rows: the writer's own, the one it
/// published, a bookmarked connection's old one, and the order of the page rows in the file,
/// read by the `sqlite3` shell.
@Suite("View layout")
struct ViewLayoutTests {
    /// The rows of the view as the `sqlite3` shell reads them from the file: the page rows in
    /// the order of their positions, each page's items decoded from its documented format (an
    /// item count, then each item's collection and key, lengths as 8-byte little-endian integers).
    static func rowsFromTheFile(_ path: String) throws -> [String: [ViewItem]] {
        let output = try sqlite3(
            path, "SELECT grp || '|' || hex(data) FROM snapshotdb_x7_byTitle_page ORDER BY grp, position;")
        var rows: [String: [ViewItem]] = [:]
        for line in output.split(separator: "\n") {
            let parts = line.split(separator: "|")
            let hex = Array(parts[1].utf8)
            let bytes = stride(from: 0, to: hex.count, by: 2).map {
                UInt8(String(decoding: hex[$0..<$0 + 2], as: UTF8.self), radix: 16)!
            }
            var offset = 0
            func int() -> Int {
                defer { offset += 8 }
                return (0..<8).reduce(0) { $0 | Int(bytes[offset + $1]) << (8 * $1) }
            }
            func string() -> String {
                let length = int()
                defer { offset += length }
                return String(decoding: bytes[offset..<offset + length], as: UTF8.self)
            }
            for _ in 0..<int() {
                let collection = string()
                rows[String(parts[0]), default: []].append(ViewItem(collection: collection, key: string()))
            }
            #expect(offset == bytes.count)
        }
        return rows
    }

    /// Checks positions both ways for every item of `rows`.
    static func checkPositions(_ view: ViewReader, _ rows: [String: [ViewItem]]) {
        for (group, items) in rows {
            #expect(view.count(inGroup: group) == items.count)
            for (index, item) in items.enumerated() {
                #expect(view.item(at: index, inGroup: group) == item)
                #expect(
                    view.index(ofKey: item.key, inCollection: "notes")
                        == ViewIndex(group: group, index: index))
            }
        }
    }

    /// About 12,000 items in one group: hundreds of pages, so the layout's chunks split, and
    /// commits that insert, move and remove across them. A bookmark keeps the layout of its
    /// commit while the writer moves on.
    @Test func aLargeGroupSpansManyChunksAndEveryReaderAgrees() throws {
        var random = SeededGenerator(state: 41)
        try withTemporaryDatabase { db throws in
            try db.register(ViewTests.byTitle)
            let writer = db.newConnection(name: "writer")
            let bookmarked = db.newConnection(name: "bookmarked")
            func note() -> Note {
                Note(
                    title: String(format: "%06d", Int.random(in: 0..<1_000_000, using: &random)),
                    folder: Int.random(in: 0..<20, using: &random) == 0 ? "work" : "inbox", archived: false)
            }
            var held: [String: [ViewItem]]?
            for round in 0..<6 {
                try writer.readWrite { txn in
                    for _ in 0..<(round < 3 ? 4_000 : 500) {
                        let key = "n\(Int.random(in: 0..<13_000, using: &random))"
                        if round >= 3 && Int.random(in: 0..<4, using: &random) == 0 {
                            try txn.removeValue(forKey: key, inCollection: "notes")
                        } else {
                            try txn.set(note(), forKey: key, inCollection: "notes")
                        }
                    }
                }
                let rows = try writer.read { txn in
                    let view = try txn.view(named: "byTitle")
                    let rows = ViewTests.rows(view)
                    #expect(rows == (try ViewTests.expectedRows(txn)), "round \(round)")
                    return rows
                }
                #expect(try Self.rowsFromTheFile(db.path) == rows, "round \(round)")
                if round == 2 {
                    try bookmarked.beginLongLivedReadTransaction()
                    held = rows
                }
                if let held {
                    try bookmarked.read { txn in Self.checkPositions(try txn.view(named: "byTitle"), held) }
                }
            }
            #expect((held?["inbox"]?.count ?? 0) > 64 * 48)
        }
    }

    /// Items inserted, in increasing order, always just before the same page: each split halves
    /// the gap between two page positions, until there is none and the group's pages are
    /// renumbered; the file's positions must then give the same order.
    @Test func pagePositionsThatRunOutAreHandedOutAgain() throws {
        try withTemporaryDatabase { db throws in
            try db.register(ViewTests.byTitle)
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                try txn.set(
                    Note(title: "a", folder: "inbox", archived: false), forKey: "a", inCollection: "notes")
                for index in 0..<200 {
                    try txn.set(
                        Note(title: String(format: "z%04d", index), folder: "inbox", archived: false),
                        forKey: "z\(index)", inCollection: "notes")
                }
            }
            // About 33 inserts per split, and 2^32 between pages: 40 splits need a renumbering.
            for chunk in 0..<8 {
                try writer.readWrite { txn in
                    for index in (chunk * 200)..<((chunk + 1) * 200) {
                        try txn.set(
                            Note(title: String(format: "m%05d", index), folder: "inbox", archived: false),
                            forKey: "m\(index)", inCollection: "notes")
                    }
                }
            }
            let rows = try writer.read { txn in
                let view = try txn.view(named: "byTitle")
                let rows = ViewTests.rows(view)
                #expect(rows == (try ViewTests.expectedRows(txn)))
                Self.checkPositions(view, rows)
                return rows
            }
            #expect(try Self.rowsFromTheFile(db.path) == rows)
        }
    }

    /// A writer that first touches the view inside a savepoint that rolls back must forget what
    /// it did there, layout included, and go on from the transaction's start.
    @Test func aWriterMadeInsideARolledBackSavepointStartsOver() throws {
        try withTemporaryDatabase { db throws in
            try db.register(ViewTests.byTitle)
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                for index in 0..<300 {
                    try txn.set(
                        Note(
                            title: String(format: "%04d", index * 7 % 300), folder: "inbox", archived: false),
                        forKey: "n\(index)", inCollection: "notes")
                }
            }
            try writer.readWrite { txn in
                try txn.set(Item(title: "unrelated"), forKey: "x", inCollection: "other")
                try txn.savepoint { txn in
                    for index in 0..<200 {
                        try txn.set(
                            Note(title: "0000", folder: "work", archived: false), forKey: "n\(index)",
                            inCollection: "notes")
                    }
                    txn.rollback()
                }
                for index in 200..<260 {
                    try txn.set(
                        Note(title: "9999", folder: "inbox", archived: false), forKey: "n\(index)",
                        inCollection: "notes")
                }
                let view = try txn.view(named: "byTitle")
                #expect(ViewTests.rows(view) == (try ViewTests.expectedRows(txn)))
                #expect(view.groups == ["inbox"])
            }
            let rows = try writer.read { txn in
                let view = try txn.view(named: "byTitle")
                #expect(ViewTests.rows(view) == (try ViewTests.expectedRows(txn)))
                return ViewTests.rows(view)
            }
            #expect(try Self.rowsFromTheFile(db.path) == rows)
        }
    }
}
