import Foundation
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDB

struct Note: Codable, Sendable, Equatable {
    var title: String
    var folder: String
    var archived: Bool
}

/// A deterministic random generator (SplitMix64), so that a failing seed can be replayed.
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Views: sorted, grouped lists kept by every commit, read at a snapshot, with row changes.
@Suite("Views")
struct ViewTests {
    static let byTitle = View<Note>(
        name: "byTitle", version: "1", collections: ["notes"],
        group: { _, _, note in note.archived ? nil : note.folder },
        areInIncreasingOrder: { $0.title < $1.title })

    /// The same view ordered by a sort key: the same rows (the titles are ASCII, where `String`'s
    /// `<` and the key's byte order agree).
    static let byTitleKeyed = View<Note>(
        name: "byTitle", version: "1", collections: ["notes"],
        group: { _, _, note in note.archived ? nil : note.folder },
        sortKey: { _, _, note in SortKey(note.title) })

    /// `byTitle` ordered by its closure, or by its sort key when `keyed`.
    static func byTitle(keyed: Bool) -> View<Note> { keyed ? byTitleKeyed : byTitle }

    /// What the view must hold: the values at the transaction's snapshot, grouped and sorted by
    /// brute force.
    static func expectedRows(_ txn: ReadTransaction) throws -> [String: [ViewItem]] {
        var groups: [String: [(ViewItem, Note)]] = [:]
        for (key, note) in try txn.values(inCollection: "notes", as: Note.self) where !note.archived {
            groups[note.folder, default: []].append((ViewItem(collection: "notes", key: key), note))
        }
        return groups.mapValues { members in
            members.sorted { lhs, rhs in
                lhs.1.title != rhs.1.title ? lhs.1.title < rhs.1.title : lhs.0 < rhs.0
            }.map(\.0)
        }
    }

    static func rows(_ view: ViewReader) -> [String: [ViewItem]] {
        Dictionary(uniqueKeysWithValues: view.groups.map { ($0, view.items(inGroup: $0)) })
    }

    static func apply(_ changes: [ViewRowChange], to old: [String: [ViewItem]]) -> [String: [ViewItem]]? {
        ViewRowChange.apply(changes, to: old)
    }

    @Test func applyingRowChangesThatDoNotFitGivesNil() {
        let a = ViewItem(collection: "notes", key: "a")
        let b = ViewItem(collection: "notes", key: "b")
        let c = ViewItem(collection: "notes", key: "c")
        let rows = ["inbox": [a, b]]
        func at(_ index: Int) -> ViewIndex { ViewIndex(group: "inbox", index: index) }
        #expect(
            ViewRowChange.apply([.delete(a, at: at(0)), .insert(c, at: at(1))], to: rows) == [
                "inbox": [b, c]
            ])
        #expect(
            ViewRowChange.apply([.move(b, from: at(1), to: at(0)), .update(a, at: at(1))], to: rows)
                == ["inbox": [b, a]])
        let misfits: [[ViewRowChange]] = [
            [.delete(a, at: at(-1))],
            [.delete(b, at: at(2))],
            [.delete(b, at: at(0))],
            [.delete(a, at: ViewIndex(group: "work", index: 0))],
            [.insert(c, at: at(-1))],
            [.insert(c, at: at(3))],
            [.insert(c, at: at(.min))],
            [.move(a, from: at(-2), to: at(1))],
            [.move(a, from: at(0), to: at(-1))],
            [.move(a, from: at(0), to: at(2))],
        ]
        for changes in misfits {
            #expect(ViewRowChange.apply(changes, to: rows) == nil, "\(changes)")
        }
    }

    @Test func aViewListsGroupsInOrderAndAnswersPositions() throws {
        try withTemporaryDatabase { db throws in
            try db.register(Self.byTitle)
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                try txn.set(
                    Note(title: "b", folder: "inbox", archived: false), forKey: "n1", inCollection: "notes")
                try txn.set(
                    Note(title: "a", folder: "inbox", archived: false), forKey: "n2", inCollection: "notes")
                try txn.set(
                    Note(title: "c", folder: "work", archived: false), forKey: "n3", inCollection: "notes")
                try txn.set(
                    Note(title: "z", folder: "inbox", archived: true), forKey: "n4", inCollection: "notes")
                try txn.set(Item(title: "not a note"), forKey: "x", inCollection: "other")
            }
            try writer.read { txn in
                let view = try txn.view(named: "byTitle")
                #expect(view.groups == ["inbox", "work"])
                #expect(view.count(inGroup: "inbox") == 2)
                #expect(view.item(at: 0, inGroup: "inbox") == ViewItem(collection: "notes", key: "n2"))
                #expect(view.items(inGroup: "inbox").map(\.key) == ["n2", "n1"])
                #expect(view.index(ofKey: "n1", inCollection: "notes") == ViewIndex(group: "inbox", index: 1))
                #expect(view.index(ofKey: "n4", inCollection: "notes") == nil)
                #expect(try view.value(at: 0, inGroup: "work", as: Note.self)?.title == "c")
                #expect(view.item(at: 5, inGroup: "inbox") == nil)
            }
            expectError(.unknownExtension) { try writer.read { try $0.view(named: "missing") } }
        }
    }

    @Test func registeringBuildsFromExistingValuesAndANewVersionRebuilds() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                for index in 0..<300 {
                    try txn.set(
                        Note(
                            title: String(format: "%03d", (index * 7) % 300), folder: "f\(index % 3)",
                            archived: false),
                        forKey: "k\(index)", inCollection: "notes")
                }
            }
            try db.register(Self.byTitle)
            try writer.read { txn throws in
                let view = try txn.view(named: "byTitle")
                let expected = try Self.expectedRows(txn)
                #expect(Self.rows(view) == expected)
            }
            // Version 2 groups everything in one group, ordered backwards.
            let reversed = View<Note>(
                name: "byTitle", version: "2", collections: ["notes"], group: { _, _, _ in "all" },
                areInIncreasingOrder: { $0.title > $1.title })
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            try db.register(reversed)
            let changes = try ui.beginLongLivedReadTransaction()
            try ui.read { txn in
                let view = try txn.view(named: "byTitle")
                #expect(view.groups == ["all"])
                #expect(view.count(inGroup: "all") == 300)
                #expect(try view.value(at: 0, inGroup: "all", as: Note.self)?.title == "299")
                #expect(view.requiresReload(for: changes))
                #expect(try view.changeSummary(for: changes).isReload)
            }
            try db.unregister("byTitle")
            let tables = try sqlite3(
                db.path,
                "SELECT name FROM sqlite_schema WHERE substr(name, 1, 12) = 'snapshotdb_x' OR substr(name, 1, 15) = 'snapshotdb_ext_';"
            )
            #expect(tables == "")
            expectError(.unknownExtension) { try writer.read { try $0.view(named: "byTitle") } }
        }
    }

    /// A view registered over existing values finds every item by key, before and after moves
    /// and removals: the rebuild writes each item's location (its page) as it scanned the
    /// values, with gaps for values outside the view and values of other collections.
    @Test(arguments: [false, true]) func aViewBuiltOverExistingValuesFindsEveryItemByKey(keyed: Bool) throws {
        try withTemporaryDatabase { db throws in
            var random = SeededGenerator(state: keyed ? 7 : 8)
            let writer = db.newConnection(name: "writer")
            func note() -> Note {
                Note(
                    title: String(format: "%05d", Int.random(in: 0..<100_000, using: &random)),
                    folder: ["a", "b", "c"].randomElement(using: &random)!,
                    archived: Int.random(in: 0..<10, using: &random) == 0)
            }
            try writer.readWrite { txn in
                for index in 0..<2_000 {
                    try txn.set(note(), forKey: "n\(index)", inCollection: "notes")
                    if index % 5 == 0 { try txn.set(note(), forKey: "n\(index)", inCollection: "drafts") }
                }
            }
            try db.register(Self.byTitle(keyed: keyed))
            func check(_ when: String) throws {
                try writer.read { txn throws in
                    let view = try txn.view(named: "byTitle")
                    let expected = try Self.expectedRows(txn)
                    #expect(Self.rows(view) == expected, "\(when)")
                    for (group, items) in expected {
                        for (index, item) in items.enumerated() {
                            #expect(
                                view.index(ofKey: item.key, inCollection: "notes")
                                    == ViewIndex(group: group, index: index), "\(when): \(item)")
                        }
                    }
                }
            }
            try check("after the build")
            try writer.readWrite { txn in
                for _ in 0..<100 {
                    let key = "n\(Int.random(in: 0..<2_000, using: &random))"
                    if Bool.random(using: &random) {
                        try txn.set(note(), forKey: key, inCollection: "notes")
                    } else {
                        try txn.removeValue(forKey: key, inCollection: "notes")
                    }
                }
            }
            try check("after moves and removals")
        }
    }

    /// Keys and collections that look like SQL, hold a NUL, are empty, long, or differ only in
    /// Unicode normalization are items like any other: a view built over them and one that
    /// receives them one by one find each by key, in every group, and forget each removed.
    @Test(arguments: [false, true]) func oddKeysAndCollectionsAreItemsLikeAnyOther(keyed: Bool) throws {
        let keys = [
            "", "\u{0}", "a\u{0}b", "'; DROP TABLE snapshotdb_values; --", "\"quoted\"", "日本", "é",
            "e\u{301}",
            String(repeating: "k", count: 5_000),
        ]
        let collections = ["notes", "o'dd\u{0}; --", "é"]
        let view =
            keyed
            ? View<Note>(
                name: "odd", version: "1", group: { collection, _, note in collection + "|" + note.folder },
                sortKey: { _, _, note in SortKey(note.title) })
            : View<Note>(
                name: "odd", version: "1", group: { collection, _, note in collection + "|" + note.folder },
                areInIncreasingOrder: { $0.title < $1.title })
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            func write(_ collection: String, in txn: ReadWriteTransaction) throws {
                for (index, key) in keys.enumerated() {
                    try txn.set(
                        Note(
                            title: "t\(keys.count - index)", folder: index % 2 == 0 ? "x" : "y",
                            archived: false),
                        forKey: key, inCollection: collection)
                }
            }
            // Built over the first collection's values; the others arrive one by one.
            try writer.readWrite { try write(collections[0], in: $0) }
            try db.register(view)
            try writer.readWrite { txn in
                for collection in collections.dropFirst() { try write(collection, in: txn) }
            }
            // By index: a `Set<String>` would hold "é" and "e\u{301}" as one element.
            func check(removed: Set<Int>) throws {
                try writer.read { txn throws in
                    let reader = try txn.view(named: "odd")
                    for collection in collections {
                        for (index, key) in keys.enumerated() {
                            let found = reader.index(ofKey: key, inCollection: collection)
                            if removed.contains(index) {
                                #expect(found == nil, "\(collection) \(key.prefix(20))")
                                continue
                            }
                            let group = collection + "|" + (index % 2 == 0 ? "x" : "y")
                            #expect(found?.group == group, "\(collection) \(key.prefix(20))")
                            if let found {
                                #expect(
                                    reader.item(at: found.index, inGroup: group)
                                        == ViewItem(collection: collection, key: key))
                            }
                        }
                    }
                }
            }
            try check(removed: [])
            let removed: Set<Int> = [0, 2, 3, 7]  // "", "a\u{0}b", the SQL, "e\u{301}"
            try writer.readWrite { txn in
                for collection in collections {
                    for index in removed {
                        try txn.removeValue(forKey: keys[index], inCollection: collection)
                    }
                }
            }
            try check(removed: removed)
        }
    }

    /// Group names that Swift's `String` equality holds equal ("Café" composed and decomposed)
    /// are one group, before and after the file is opened again, and keep working through moves
    /// between the spellings.
    @Test(arguments: [false, true]) func groupNamesEqualInSwiftAreOneGroup(keyed: Bool) throws {
        let composed = "Caf\u{E9}"
        let decomposed = "Cafe\u{301}"
        let byFolder =
            keyed
            ? View<Note>(
                name: "byFolder", version: "1", group: { _, _, note in note.folder },
                sortKey: { _, _, note in SortKey(note.title) })
            : View<Note>(
                name: "byFolder", version: "1", group: { _, _, note in note.folder },
                areInIncreasingOrder: { $0.title < $1.title })
        try withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("groups.sqlite").path
            func note(_ index: Int, _ folder: String) -> Note {
                Note(title: String(format: "%03d", index), folder: folder, archived: false)
            }
            func expectOneGroup(_ db: Database, count: Int) throws {
                try db.newConnection().read { txn throws in
                    let view = try txn.view(named: "byFolder")
                    #expect(view.groups.count == 1)
                    #expect(view.groups.first == composed)
                    #expect(view.count(inGroup: composed) == count)
                    #expect(view.count(inGroup: decomposed) == count)
                    let titles = try view.items(inGroup: decomposed).map {
                        try txn.value(forKey: $0.key, inCollection: $0.collection, as: Note.self)!.title
                    }
                    #expect(titles == titles.sorted() && titles.count == count)
                }
            }
            do {
                let db = try Database(path: path)
                try db.register(byFolder)
                try db.newConnection().readWrite { txn in
                    for index in 0..<300 {
                        try txn.set(
                            note(index, index % 2 == 0 ? composed : decomposed), forKey: "n\(index)",
                            inCollection: "notes")
                    }
                }
                try expectOneGroup(db, count: 300)
                try db.newConnection().readWrite { txn in
                    for index in 0..<100 {
                        try txn.set(
                            note(index + 1_000, index % 2 == 0 ? decomposed : composed), forKey: "n\(index)",
                            inCollection: "notes")
                    }
                    for index in 100..<150 { try txn.removeValue(forKey: "n\(index)", inCollection: "notes") }
                }
                try expectOneGroup(db, count: 250)
                try db.close()
            }
            let db = try Database(path: path)
            try db.register(byFolder)
            try expectOneGroup(db, count: 250)
            try db.newConnection().readWrite { txn in
                try txn.set(note(5_000, decomposed), forKey: "n200", inCollection: "notes")
            }
            try expectOneGroup(db, count: 250)
            try db.close()
        }
    }

    @Test func aBookmarkReadsTheViewAtItsCommit() throws {
        try withTemporaryDatabase { db throws in
            try db.register(Self.byTitle)
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            try writer.readWrite {
                try $0.set(
                    Note(title: "m", folder: "inbox", archived: false), forKey: "m", inCollection: "notes")
            }
            try ui.beginLongLivedReadTransaction()
            try writer.readWrite { txn in
                try txn.set(
                    Note(title: "a", folder: "inbox", archived: false), forKey: "a", inCollection: "notes")
                try txn.removeValue(forKey: "m", inCollection: "notes")
            }
            try ui.read { txn in
                let view = try txn.view(named: "byTitle")
                #expect(view.items(inGroup: "inbox").map(\.key) == ["m"])
            }
            let changes = try ui.beginLongLivedReadTransaction()
            let rows = try ui.read { try $0.view(named: "byTitle").changes(for: changes) }
            #expect(
                Set(rows) == [
                    .delete(ViewItem(collection: "notes", key: "m"), at: ViewIndex(group: "inbox", index: 0)),
                    .insert(ViewItem(collection: "notes", key: "a"), at: ViewIndex(group: "inbox", index: 0)),
                ])
        }
    }

    @Test func aSnapshotFromBeforeTheRegistrationCannotReadTheView() throws {
        try withTemporaryDatabase { db throws in
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            try db.register(Self.byTitle)
            expectError(.unknownExtension) { try ui.read { try $0.view(named: "byTitle") } }
            try ui.beginLongLivedReadTransaction()
            #expect(try ui.read { try $0.view(named: "byTitle").groups } == [])
        }
    }

    /// A bookmark from before this process registered a new version of a view reads the old
    /// version in its snapshot: it is told to advance (`unknownExtension`), not that another
    /// registration conflicts; after advancing it reads the new version.
    @Test func aSnapshotFromBeforeANewVersionIsToldToAdvance() throws {
        try withTemporaryDatabase { db throws in
            try db.register(Self.byTitle)
            try db.newConnection(name: "writer").readWrite { txn in
                try txn.set(
                    Note(title: "a", folder: "inbox", archived: false), forKey: "a", inCollection: "notes")
                try txn.set(
                    Note(title: "b", folder: "inbox", archived: false), forKey: "b", inCollection: "notes")
            }
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            let snapshot = db.latestCommit
            let descending = View<Note>(
                name: "byTitle", version: "2", collections: ["notes"],
                group: { _, _, note in note.folder }, areInIncreasingOrder: { $0.title > $1.title })
            try db.register(descending)
            let error = expectError(.unknownExtension) { try ui.read { try $0.view(named: "byTitle") } }
            #expect(
                error?.message.contains(
                    "version '2', which this process registered, was built at commit \(snapshot + 1)")
                    == true,
                "\(error as Any)")
            #expect(error?.message.contains("holds view version '1'") == true)
            #expect(error?.message.contains("advance the bookmark") == true)
            #expect(error?.message.contains("t5:") == false)
            try ui.beginLongLivedReadTransaction()
            #expect(
                try ui.read { try $0.view(named: "byTitle").items(inGroup: "inbox").map(\.key) } == [
                    "b", "a",
                ])
        }
    }

    @Test func updatesInPlaceMovesAndSections() throws {
        try withTemporaryDatabase { db throws in
            try db.register(Self.byTitle)
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            try writer.readWrite { txn in
                for (key, title) in [("a", "a"), ("b", "b"), ("c", "c")] {
                    try txn.set(
                        Note(title: title, folder: "inbox", archived: false), forKey: key,
                        inCollection: "notes")
                }
            }
            try ui.beginLongLivedReadTransaction()
            try writer.readWrite { txn in
                // b changes but keeps its place; c moves before a; a moves to a new group.
                try txn.set(
                    Note(title: "b", folder: "inbox", archived: false), forKey: "b", inCollection: "notes")
                try txn.set(
                    Note(title: "0", folder: "inbox", archived: false), forKey: "c", inCollection: "notes")
                try txn.set(
                    Note(title: "a", folder: "work", archived: false), forKey: "a", inCollection: "notes")
            }
            let changes = try ui.beginLongLivedReadTransaction()
            let summary = try ui.read { try $0.view(named: "byTitle").changeSummary(for: changes) }
            #expect(summary.sections == [.insert(group: "work", index: 1)])
            #expect(
                summary.rows.contains(
                    .move(
                        ViewItem(collection: "notes", key: "a"), from: ViewIndex(group: "inbox", index: 0),
                        to: ViewIndex(group: "work", index: 0))))
            #expect(
                summary.rows.contains(
                    .update(ViewItem(collection: "notes", key: "b"), at: ViewIndex(group: "inbox", index: 1)))
            )
            let restricted = try ui.read {
                try $0.view(named: "byTitle").changes(for: changes, inGroups: ["work"])
            }
            #expect(
                restricted == [
                    .insert(ViewItem(collection: "notes", key: "a"), at: ViewIndex(group: "work", index: 0))
                ])
        }
    }

    /// Row changes are for the changesets that lead to the transaction's commit. An earlier
    /// advance's batch, one with a commit left out, or one the snapshot is past gave plausible,
    /// wrong changes; each is `misuse` in a read transaction now.
    @Test func rowChangesRefuseChangesetsThatDoNotLeadToTheSnapshot() throws {
        try withTemporaryDatabase { db throws in
            try db.register(Self.byTitle)
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            func write(_ key: String, _ title: String) throws {
                try writer.readWrite { txn in
                    try txn.set(
                        Note(title: title, folder: "inbox", archived: false), forKey: key,
                        inCollection: "notes")
                }
            }
            try write("a", "a")
            try ui.beginLongLivedReadTransaction()
            try write("b", "b")
            let first = try ui.beginLongLivedReadTransaction()
            try write("c", "0")
            try write("d", "d")
            let second = try ui.beginLongLivedReadTransaction()
            #expect(second.count == 2)
            try ui.read { txn throws in
                let view = try txn.view(named: "byTitle")
                let earlier = expectError(.misuse) { try view.changes(for: first) }
                #expect(
                    earlier?.message.contains("end at commit \(first.last!.commit)") == true,
                    "\(earlier as Any)")
                let gap = expectError(.misuse) { try view.changes(for: first + [second.last!]) }
                #expect(gap?.message.contains("not consecutive") == true, "\(gap as Any)")
                expectError(.misuse) { try view.changes(for: second + first) }
                expectError(.misuse) { try view.changeSummary(for: second.dropLast()) }
                #expect(try view.changes(for: []) == [])
                let rows = try view.changes(for: first + second)
                #expect(
                    Self.apply(rows, to: ["inbox": [ViewItem(collection: "notes", key: "a")]])
                        == Self.rows(view))
            }
            // A plain read at a newer commit than the batch's last is refused too.
            try write("e", "e")
            expectError(.misuse) { try writer.read { try $0.view(named: "byTitle").changes(for: second) } }
        }
    }

    /// Random commits by two writers, through savepoints that roll back, removals and cleared
    /// collections; two bookmarks that advance now and then. After every advance the view equals
    /// a brute-force sort of the values at that snapshot, and its row changes applied to the
    /// rows before give the rows after.
    @Test(arguments: [1, 2, 3, 4], [false, true]) func rowChangesRebuildTheNewRows(seed: UInt64, keyed: Bool)
        throws
    {
        var random = SeededGenerator(state: seed)
        try withTemporaryDatabase { db throws in
            try db.register(Self.byTitle(keyed: keyed))
            let writers = [db.newConnection(name: "w1"), db.newConnection(name: "w2")]
            let readers = [db.newConnection(name: "r1"), db.newConnection(name: "r2")]
            var previous: [[String: [ViewItem]]] = []
            for reader in readers {
                try reader.beginLongLivedReadTransaction()
                previous.append(try reader.read { Self.rows(try $0.view(named: "byTitle")) })
            }
            let folders = ["inbox", "work", "home", "later"]
            for round in 0..<60 {
                let writer = writers[Int.random(in: 0..<2, using: &random)]
                try writer.readWrite { txn in
                    for _ in 0..<Int.random(in: 1...6, using: &random) {
                        let key = "n\(Int.random(in: 0..<40, using: &random))"
                        switch Int.random(in: 0..<10, using: &random) {
                        case 0..<6:
                            let note = Note(
                                title: String(UnicodeScalar(UInt8(Int.random(in: 97..<110, using: &random)))),
                                folder: folders.randomElement(using: &random)!,
                                archived: Int.random(in: 0..<5, using: &random) == 0)
                            try txn.set(note, forKey: key, inCollection: "notes")
                        case 6..<8:
                            try txn.removeValue(forKey: key, inCollection: "notes")
                        case 8:
                            try? txn.savepoint { txn in
                                try txn.set(
                                    Note(title: "zz", folder: "inbox", archived: false), forKey: key,
                                    inCollection: "notes")
                                throw WriterContractTests.Refused()
                            }
                        default:
                            if round % 20 == 19 { try txn.removeAll(inCollection: "notes") }
                        }
                    }
                }
                for (index, reader) in readers.enumerated()
                where Int.random(in: 0..<3, using: &random) == 0 || round == 59 {
                    let changes = try reader.beginLongLivedReadTransaction()
                    try reader.read { txn throws in
                        let view = try txn.view(named: "byTitle")
                        let now = Self.rows(view)
                        let expected = try Self.expectedRows(txn)
                        #expect(now == expected, "seed \(seed) round \(round)")
                        let rows = try view.changes(for: changes)
                        #expect(
                            Self.apply(rows, to: previous[index]) == now,
                            "seed \(seed) round \(round): \(rows)")
                        for case .update(let item, let at) in rows {
                            #expect(now[at.group]?[at.index] == item)
                        }
                        previous[index] = now
                    }
                }
            }
        }
    }
}

/// A filtered view lists the parent's items that pass its filter, in the parent's order, and is
/// filtered again, in a commit of its own, when registered with a new version.
@Suite("Filtered views")
struct FilteredViewTests {
    @Test(arguments: [false, true]) func aFilteredViewFollowsItsParentAndItsFilterCanChange(keyed: Bool)
        throws
    {
        try withTemporaryDatabase { db throws in
            let short = FilteredView(name: "short", parent: ViewTests.byTitle(keyed: keyed), version: "1") {
                _, _, note in
                note.title.count <= 2
            }
            try db.register(short)
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            try writer.readWrite { txn in
                for (key, title) in [("a", "zz"), ("b", "long title"), ("c", "aa"), ("d", "m")] {
                    try txn.set(
                        Note(title: title, folder: "inbox", archived: key == "d"), forKey: key,
                        inCollection: "notes")
                }
            }
            try ui.beginLongLivedReadTransaction()
            #expect(
                try ui.read { try $0.view(named: "short").items(inGroup: "inbox").map(\.key) } == ["c", "a"])
            try writer.readWrite { txn in
                try txn.set(
                    Note(title: "ab", folder: "inbox", archived: false), forKey: "b", inCollection: "notes")
            }
            var changes = try ui.beginLongLivedReadTransaction()
            let rows = try ui.read { try $0.view(named: "short").changes(for: changes) }
            #expect(
                rows == [
                    .insert(ViewItem(collection: "notes", key: "b"), at: ViewIndex(group: "inbox", index: 1))
                ])
            // A new filter: every title longer than one character.
            let longer = FilteredView(name: "short", parent: ViewTests.byTitle(keyed: keyed), version: "2") {
                _, _, note in
                note.title.count > 1
            }
            try db.register(longer)
            changes = try ui.beginLongLivedReadTransaction()
            try ui.read { txn throws in
                let view = try txn.view(named: "short")
                #expect(view.requiresReload(for: changes))
                #expect(view.items(inGroup: "inbox").map(\.key) == ["c", "b", "a"])
            }
        }
    }
}

/// Views large enough for many pages: splits, removals that empty pages, and positions answered
/// from the layout's counts.
@Suite("Views with many pages")
struct DeepViewTests {
    @Test(arguments: [21, 22], [false, true]) func aDeepViewStaysSortedAndItsRowChangesHold(
        seed: UInt64, keyed: Bool
    )
        throws
    {
        var random = SeededGenerator(state: seed)
        try withTemporaryDatabase { db throws in
            try db.register(ViewTests.byTitle(keyed: keyed))
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            var previous = try ui.read { ViewTests.rows(try $0.view(named: "byTitle")) }
            let folders = ["inbox", "work"]
            for round in 0..<30 {
                try writer.readWrite { txn in
                    // Grow to about 3,000 items first, then churn: moves, removals, re-inserts.
                    let writes = round < 10 ? 300 : 120
                    for _ in 0..<writes {
                        let key = "n\(Int.random(in: 0..<3_000, using: &random))"
                        if round >= 10 && Int.random(in: 0..<3, using: &random) == 0 {
                            try txn.removeValue(forKey: key, inCollection: "notes")
                        } else {
                            let title = String(format: "%05d", Int.random(in: 0..<100_000, using: &random))
                            try txn.set(
                                Note(
                                    title: title, folder: folders.randomElement(using: &random)!,
                                    archived: false),
                                forKey: key, inCollection: "notes")
                        }
                    }
                    if round == 25 {
                        // Most of a group at once: pages empty and are removed.
                        for index in 0..<2_500 {
                            try txn.removeValue(forKey: "n\(index)", inCollection: "notes")
                        }
                    }
                }
                let changes = try ui.beginLongLivedReadTransaction()
                try ui.read { txn throws in
                    let view = try txn.view(named: "byTitle")
                    let now = ViewTests.rows(view)
                    let expected = try ViewTests.expectedRows(txn)
                    #expect(now == expected, "seed \(seed) round \(round)")
                    let rows = try view.changes(for: changes)
                    #expect(ViewRowChange.apply(rows, to: previous) == now, "seed \(seed) round \(round)")
                    for (group, items) in now {
                        #expect(view.count(inGroup: group) == items.count)
                        for _ in 0..<20 {
                            let index = Int.random(in: 0..<items.count, using: &random)
                            #expect(view.item(at: index, inGroup: group) == items[index])
                            #expect(
                                view.index(ofKey: items[index].key, inCollection: "notes")
                                    == ViewIndex(group: group, index: index))
                        }
                    }
                    previous = now
                }
            }
        }
    }

    /// The writer holds changed pages back until the end of the transaction: a savepoint that
    /// rolls back, a view read inside the transaction, and the commit must all see exactly the
    /// writes that stand (about 2,000 items, so moves cross pages).
    @Test(arguments: [false, true]) func heldBackPagesMeetSavepointsAndReadsInsideTheTransaction(keyed: Bool)
        throws
    {
        var random = SeededGenerator(state: 7)
        try withTemporaryDatabase { db throws in
            try db.register(ViewTests.byTitle(keyed: keyed))
            let writer = db.newConnection(name: "writer")
            func note() -> Note {
                Note(
                    title: String(format: "%05d", Int.random(in: 0..<100_000, using: &random)),
                    folder: ["inbox", "work"][Int.random(in: 0..<2, using: &random)], archived: false)
            }
            try writer.readWrite { txn in
                for index in 0..<2_000 { try txn.set(note(), forKey: "n\(index)", inCollection: "notes") }
            }
            for round in 0..<6 {
                try writer.readWrite { txn in
                    for _ in 0..<50 {
                        try txn.set(
                            note(), forKey: "n\(Int.random(in: 0..<2_000, using: &random))",
                            inCollection: "notes")
                    }
                    // Read inside the transaction: the held-back pages are written first.
                    #expect(
                        ViewTests.rows(try txn.view(named: "byTitle")) == (try ViewTests.expectedRows(txn)))
                    try txn.savepoint { txn in
                        for _ in 0..<50 {
                            let key = "n\(Int.random(in: 0..<2_000, using: &random))"
                            if round % 2 == 0 {
                                try txn.removeValue(forKey: key, inCollection: "notes")
                            } else {
                                try txn.set(note(), forKey: key, inCollection: "notes")
                            }
                        }
                        txn.rollback()
                    }
                    // After the rollback the writer must not reuse pages, layout or values from inside it.
                    for _ in 0..<50 {
                        try txn.set(
                            note(), forKey: "n\(Int.random(in: 0..<2_000, using: &random))",
                            inCollection: "notes")
                    }
                    try txn.savepoint { txn in
                        try txn.set(
                            note(), forKey: "n\(Int.random(in: 0..<2_000, using: &random))",
                            inCollection: "notes")
                    }
                }
                try writer.read { txn in
                    let stored = ViewTests.rows(try txn.view(named: "byTitle"))
                    #expect(stored == (try ViewTests.expectedRows(txn)), "round \(round)")
                }
            }
        }
    }
}
