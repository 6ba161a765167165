import Foundation
import SnapshotDB
import SnapshotDBTestSupport
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

    /// One-row commits into a view of many pages, where the writer keeps its layout (and the
    /// pages' first values it compared with) from one commit to the next: items moved before
    /// their page's first item, past the next page's first item, to ties with those first
    /// items (ordered by key), within their page, or given a new value that keeps their place,
    /// and moves of pages' first items themselves. Each batch starts from a new open, whose
    /// layout knows no first values yet. After every batch the view equals the values sorted
    /// by brute force, in memory and in the file.
    @Test func oneRowMovesBetweenPagesKeepTheOrder() throws {
        var random = SeededGenerator(state: 7)
        try withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("moves.sqlite").path
            let count = 3_000
            do {
                let db = try Database(path: path)
                try db.register(ViewTests.byTitle)
                try db.newConnection(name: "loader").readWrite { txn in
                    for index in 0..<count {
                        let note = Note(
                            title: String(format: "%05d", index * 10), folder: "inbox", archived: false)
                        try txn.set(note, forKey: "n\(index)", inCollection: "notes")
                    }
                }
                try db.close()
            }
            for batch in 0..<8 {
                let db = try Database(path: path)
                try db.register(ViewTests.byTitle)
                let writer = db.newConnection(name: "writer")
                let items = try writer.read { try ViewTests.rows($0.view(named: "byTitle")) }["inbox"] ?? []
                for _ in 0..<50 {
                    let moved = items[Int.random(in: 0..<items.count, using: &random)]
                    // Ties: another item's title, so that the order falls to the keys; half the
                    // time an item at a multiple of 64, the page size, so that ties fall at or
                    // near pages' first items.
                    let other = items[
                        Int.random(in: 0..<2, using: &random) == 0
                            ? Int.random(in: 0..<(items.count / 64), using: &random) * 64
                            : Int.random(in: 0..<items.count, using: &random)]
                    try writer.readWrite { txn in
                        var note = try txn.value(forKey: moved.key, inCollection: "notes", as: Note.self)!
                        switch Int.random(in: 0..<4, using: &random) {
                        case 0:
                            note.title = String(
                                format: "%05d", Int.random(in: 0..<(count * 10), using: &random))
                        case 1:
                            note.title = try txn.value(
                                forKey: other.key, inCollection: "notes", as: Note.self)!.title
                        case 2: note.title += "0"
                        default: note.archived = false
                        }
                        try txn.set(note, forKey: moved.key, inCollection: "notes")
                    }
                }
                let after = try writer.read { txn in
                    let view = try txn.view(named: "byTitle")
                    let rows = ViewTests.rows(view)
                    #expect(rows == (try ViewTests.expectedRows(txn)), "batch \(batch)")
                    Self.checkPositions(view, rows)
                    return rows
                }
                #expect(try Self.rowsFromTheFile(path) == after, "batch \(batch)")
                try db.close()
            }
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

    /// A bookmark that had not read the view yet when the writer published a newer layout must
    /// not take that one: it reads the layout of its own commit.
    @Test func aBookmarkNeverTakesTheLayoutOfALaterCommit() throws {
        try withTemporaryDatabase { db throws in
            try db.register(ViewTests.byTitle)
            let writer = db.newConnection(name: "writer")
            func write(_ shift: Int) throws {
                try writer.readWrite { txn in
                    for index in 0..<400 {
                        try txn.set(
                            Note(
                                title: String(format: "%04d", (index * 7 + shift) % 400),
                                folder: (index + shift) % 3 == 0 ? "work" : "inbox", archived: false),
                            forKey: "n\(index)", inCollection: "notes")
                    }
                }
            }
            try write(0)
            let bookmarked = db.newConnection(name: "bookmarked")
            try bookmarked.beginLongLivedReadTransaction()
            let expected = try bookmarked.read { try ViewTests.expectedRows($0) }
            try write(1)
            try bookmarked.read { txn in
                let view = try txn.view(named: "byTitle")
                #expect(ViewTests.rows(view) == expected)
                Self.checkPositions(view, expected)
            }
            try db.newConnection(name: "fresh").read { txn throws in
                let rows = ViewTests.rows(try txn.view(named: "byTitle"))
                #expect(rows == (try ViewTests.expectedRows(txn)))
            }
        }
    }

    /// A page row damaged by a foreign client (which SnapshotDB cannot detect when it happens)
    /// is reported as `corrupt` when the view is read or written, naming the way out; the
    /// values are untouched, and registering a new version rebuilds the view.
    @Test func aDamagedPageRowIsReportedAndANewVersionRebuilds() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("damaged-view.sqlite").path
            do {
                let db = try Database(path: path)
                try db.register(ViewTests.byTitle)
                try db.newConnection().readWrite { txn in
                    for index in 0..<200 {
                        try txn.set(
                            Note(
                                title: String(format: "%04d", index * 7 % 200), folder: "inbox",
                                archived: false),
                            forKey: "n\(index)", inCollection: "notes")
                    }
                }
                try db.close()
            }
            try sqlite3(
                path,
                "UPDATE snapshotdb_x7_byTitle_page SET data = x'0500' WHERE id = (SELECT min(id) FROM snapshotdb_x7_byTitle_page);"
            )
            let db = try Database(path: path)
            try db.register(ViewTests.byTitle)
            let reader = db.newConnection()
            let error = expectError(.corrupt) { try reader.read { try $0.view(named: "byTitle").count } }
            #expect(
                error?.message.contains("register the view with a new version") == true,
                "\(String(describing: error))")
            #expect(try reader.read { try $0.count(inCollection: "notes") } == 200)
            // A write the view must follow fails the same way, and changes nothing.
            let before = try reader.read { try $0.value(forKey: "n1", inCollection: "notes", as: Note.self) }
            expectError(.corrupt) {
                try db.newConnection().readWrite { txn in
                    try txn.set(
                        Note(title: "zzz", folder: "inbox", archived: false), forKey: "n1",
                        inCollection: "notes")
                }
            }
            #expect(
                try reader.read { try $0.value(forKey: "n1", inCollection: "notes", as: Note.self) }?.title
                    == before?.title)
            try db.register(
                View<Note>(
                    name: "byTitle", version: "2", collections: ["notes"],
                    group: { _, _, note in note.archived ? nil : note.folder },
                    areInIncreasingOrder: { $0.title < $1.title }))
            try reader.read { txn throws in
                let rows = ViewTests.rows(try txn.view(named: "byTitle"))
                #expect(rows == (try ViewTests.expectedRows(txn)))
                #expect(rows["inbox"]?.count == 200)
            }
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

/// Layouts shared between threads: the writer publishes the layout of each commit while
/// readers on other threads take it, load their own, or keep a bookmarked one. (In the
/// ThreadSanitizer run, `Scripts/tsan.sh`.)
@Suite("View layouts shared between threads")
struct ViewSharingTests {
    @Test func readersOnOtherThreadsSeeTheLayoutOfTheirCommit() throws {
        try withTemporaryDatabase { db throws in
            try db.register(ViewTests.byTitle)
            let keys = 1_500
            try db.newConnection(name: "setup").readWrite { txn in
                for index in 0..<keys {
                    try txn.set(
                        Note(
                            title: String(format: "%05d", index * 37 % keys), folder: "inbox", archived: false
                        ),
                        forKey: "n\(index)", inCollection: "notes")
                }
            }
            let writerDone = LockedFlag()
            let failures = LockedArray()
            let writing = DispatchGroup()
            let writer = db.newConnection(name: "writer")
            DispatchQueue.global().async(group: writing) {
                var generator = SeededGenerator(state: 5)
                for _ in 0..<120 {
                    do {
                        try writer.readWrite { txn in
                            for _ in 0..<8 {
                                let key = "n\(Int.random(in: 0..<keys, using: &generator))"
                                if Int.random(in: 0..<5, using: &generator) == 0 {
                                    try txn.removeValue(forKey: key, inCollection: "notes")
                                } else {
                                    let title = String(
                                        format: "%05d", Int.random(in: 0..<99_999, using: &generator))
                                    let folder =
                                        Int.random(in: 0..<4, using: &generator) == 0 ? "work" : "inbox"
                                    try txn.set(
                                        Note(title: title, folder: folder, archived: false), forKey: key,
                                        inCollection: "notes")
                                }
                            }
                        }
                    } catch {
                        failures.append(1)
                    }
                }
            }
            let reading = DispatchGroup()
            for reader in 0..<3 {
                let bookmarked = db.newConnection(name: "bookmarked-\(reader)")
                let plain = db.newConnection(name: "plain-\(reader)")
                DispatchQueue.global().async(group: reading) {
                    do {
                        try bookmarked.beginLongLivedReadTransaction()
                        var previous = try bookmarked.read { ViewTests.rows(try $0.view(named: "byTitle")) }
                        var rounds = 0
                        while !writerDone.value || rounds < 3 {
                            rounds += 1
                            let fresh = try plain.read { txn in
                                ViewTests.rows(try txn.view(named: "byTitle"))
                                    == (try ViewTests.expectedRows(txn))
                            }
                            if !fresh { failures.append(2) }
                            let changes = try bookmarked.beginLongLivedReadTransaction()
                            try bookmarked.read { txn in
                                let view = try txn.view(named: "byTitle")
                                let now = ViewTests.rows(view)
                                if now != (try ViewTests.expectedRows(txn)) { failures.append(3) }
                                let rows = try view.changes(for: changes)
                                if ViewRowChange.apply(rows, to: previous) != now { failures.append(4) }
                                previous = now
                            }
                        }
                    } catch {
                        failures.append(5)
                    }
                }
            }
            writing.wait()
            writerDone.set()
            reading.wait()
            #expect(failures.values.isEmpty, "failures: \(failures.values)")
        }
    }
}

extension ViewLayoutTests {
    /// A page position a foreign client set to Int64.min (still in order, so the view reads
    /// right): a split after it finds no free position without overflowing, and renumbers the
    /// group instead of trapping.
    @Test func aPagePositionAtInt64MinIsRenumberedOnTheNextSplit() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("positions.sqlite").path
            do {
                let db = try Database(path: path)
                try db.register(ViewTests.byTitle)
                try db.newConnection().readWrite { txn in
                    for index in 0..<100 {
                        try txn.set(
                            Note(title: String(format: "m%04d", index), folder: "inbox", archived: false),
                            forKey: "n\(index)", inCollection: "notes")
                    }
                }
                try db.close()
            }
            // The first page at Int64.min: the gap to the next (positive) position is past Int64.
            try sqlite3(
                path,
                """
                UPDATE snapshotdb_x7_byTitle_page SET position = -9223372036854775808
                    WHERE id = (SELECT id FROM snapshotdb_x7_byTitle_page ORDER BY position LIMIT 1);
                """)
            let db = try Database(path: path)
            try db.register(ViewTests.byTitle)
            let writer = db.newConnection()
            // Items that sort before every other fill the first page until it splits.
            for index in 0..<80 {
                try writer.readWrite { txn in
                    try txn.set(
                        Note(title: String(format: "a%04d", index), folder: "inbox", archived: false),
                        forKey: "a\(index)", inCollection: "notes")
                }
            }
            try writer.read { txn throws in
                #expect(ViewTests.rows(try txn.view(named: "byTitle")) == (try ViewTests.expectedRows(txn)))
            }
            #expect(try isIntact(path))
        }
    }
}
