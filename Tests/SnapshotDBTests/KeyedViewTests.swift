import Foundation
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDB

/// Views ordered by a ``SortKey``: the same rows and row changes as a view ordered by the
/// equivalent closure, under random commits; a changed key under the same version is refused.
@Suite("Keyed views")
struct KeyedViewTests {
    struct Task: Codable, Sendable, Equatable {
        var project: String?
        var due: Date?
        var priority: Int
        var title: String
        var done: Bool
    }

    /// Open tasks by project: latest due date first (none last), then priority (high first),
    /// then title.
    static let keyed = View<Task>(
        name: "tasksKeyed", version: "1", collections: ["tasks"],
        group: { _, _, task in task.done ? nil : task.project },
        sortKey: { _, _, task in
            SortKey(
                .descending(task.due != nil), .descending(task.due), .descending(task.priority), task.title)
        })

    /// The same order as a closure.
    static let closure = View<Task>(
        name: "tasksClosure", version: "1", collections: ["tasks"],
        group: { _, _, task in task.done ? nil : task.project },
        areInIncreasingOrder: isBefore)

    static func isBefore(_ a: Task, _ b: Task) -> Bool {
        switch (a.due, b.due) {
        case (nil, .some): return false
        case (.some, nil): return true
        case (let x?, let y?) where x != y: return x > y
        default: break
        }
        if a.priority != b.priority { return a.priority > b.priority }
        return a.title < b.title
    }

    /// The rows the views must hold for `txn`'s values, sorted by brute force.
    static func expectedRows(_ txn: ReadTransaction) throws -> [String: [ViewItem]] {
        var groups: [String: [(ViewItem, Task)]] = [:]
        for (key, task) in try txn.values(inCollection: "tasks", as: Task.self) where !task.done {
            guard let project = task.project else { continue }
            groups[project, default: []].append((ViewItem(collection: "tasks", key: key), task))
        }
        return groups.mapValues { members in
            members.sorted { lhs, rhs in
                if isBefore(lhs.1, rhs.1) { return true }
                if isBefore(rhs.1, lhs.1) { return false }
                return lhs.0 < rhs.0
            }.map(\.0)
        }
    }

    static func task(_ random: inout SeededGenerator) -> Task {
        // Titles: empty, ASCII, precomposed accents and CJK (where `<` is scalar order).
        let titles = ["", "a", "B", "b", "é", "ü", "zz", "日本", "a\u{0}b", "Zebra"]
        let base = Date(timeIntervalSinceReferenceDate: 800_000_000)
        return Task(
            project: [nil, "home", "work", "errands"].randomElement(using: &random)!,
            due: Int.random(in: 0..<4, using: &random) == 0
                ? nil : base.addingTimeInterval(Double(Int.random(in: -5...5, using: &random)) * 86_400.5),
            priority: Int.random(in: -3...3, using: &random),
            title: titles.randomElement(using: &random)!,
            done: Int.random(in: 0..<8, using: &random) == 0)
    }

    /// Random commits (sets, removals, savepoints that roll back, cleared collections) into a
    /// keyed view and a closure view of the same order, from 60 values to a few hundred, so
    /// pages split. After each advance both equal the brute force, and each one's row changes
    /// replayed onto its old rows give its new rows.
    @Test(arguments: [11, 12, 13]) func aKeyedViewEqualsTheClosureViewAndTheBruteForce(seed: UInt64) throws {
        var random = SeededGenerator(state: seed)
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                for index in 0..<60 {
                    try txn.set(Self.task(&random), forKey: "t\(index)", inCollection: "tasks")
                }
            }
            // Built from the values already there, together.
            try db.register([Self.keyed, Self.closure])
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            var previous = try ui.read { txn in
                [
                    ViewTests.rows(try txn.view(named: "tasksKeyed")),
                    ViewTests.rows(try txn.view(named: "tasksClosure")),
                ]
            }
            for round in 0..<40 {
                try writer.readWrite { txn in
                    for _ in 0..<Int.random(in: 1...(round < 10 ? 60 : 8), using: &random) {
                        let key = "t\(Int.random(in: 0..<400, using: &random))"
                        switch Int.random(in: 0..<12, using: &random) {
                        case 0..<8: try txn.set(Self.task(&random), forKey: key, inCollection: "tasks")
                        case 8..<10: try txn.removeValue(forKey: key, inCollection: "tasks")
                        case 10:
                            try? txn.savepoint { txn in
                                try txn.set(Self.task(&random), forKey: key, inCollection: "tasks")
                                throw WriterContractTests.Refused()
                            }
                        default:
                            if round == 30 { try txn.removeAll(inCollection: "tasks") }
                        }
                    }
                }
                guard Int.random(in: 0..<3, using: &random) == 0 || round == 39 else { continue }
                let changes = try ui.beginLongLivedReadTransaction()
                try ui.read { txn throws in
                    let expected = try Self.expectedRows(txn)
                    for (index, name) in ["tasksKeyed", "tasksClosure"].enumerated() {
                        let view = try txn.view(named: name)
                        let now = ViewTests.rows(view)
                        #expect(now == expected, "seed \(seed) round \(round): \(name)")
                        let rows = try view.changes(for: changes)
                        #expect(
                            ViewTests.apply(rows, to: previous[index]) == now,
                            "seed \(seed) round \(round): \(name)")
                        for (group, items) in now {
                            for position in Set([0, items.count / 2, items.count - 1]) {
                                #expect(view.item(at: position, inGroup: group) == items[position])
                                #expect(
                                    view.index(ofKey: items[position].key, inCollection: "tasks")
                                        == ViewIndex(group: group, index: position))
                            }
                        }
                        previous[index] = now
                    }
                }
            }
        }
    }

    /// An update that leaves the sort key and group as they were is an update row, and a key
    /// change between the same neighbours rewrites the stored key (the next move compares with
    /// the new one).
    @Test func updatesThatKeepOrChangeTheKeyInPlace() throws {
        try withTemporaryDatabase { db throws in
            try db.register(ViewTests.byTitleKeyed)
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                for (key, title) in [("a", "b"), ("b", "d"), ("c", "f")] {
                    try txn.set(
                        Note(title: title, folder: "inbox", archived: false), forKey: key,
                        inCollection: "notes")
                }
            }
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            // "d" -> "e": between "b" and "f", its key changes in place.
            try writer.readWrite { txn in
                try txn.set(
                    Note(title: "e", folder: "inbox", archived: false), forKey: "b", inCollection: "notes")
            }
            var changes = try ui.beginLongLivedReadTransaction()
            var rows = try ui.read { try $0.view(named: "byTitle").changes(for: changes) }
            #expect(
                rows == [
                    .update(ViewItem(collection: "notes", key: "b"), at: ViewIndex(group: "inbox", index: 1))
                ])
            // "e" sorts after "c" (which it now is not before): a new "ea" goes after "e", before "f".
            try writer.readWrite { txn in
                try txn.set(
                    Note(title: "ea", folder: "inbox", archived: false), forKey: "d", inCollection: "notes")
            }
            changes = try ui.beginLongLivedReadTransaction()
            rows = try ui.read { try $0.view(named: "byTitle").changes(for: changes) }
            #expect(
                rows == [
                    .insert(ViewItem(collection: "notes", key: "d"), at: ViewIndex(group: "inbox", index: 2))
                ])
            #expect(
                try ui.read { try $0.view(named: "byTitle").items(inGroup: "inbox").map(\.key) } == [
                    "a", "b", "d", "c",
                ])
        }
    }

    /// A closure view registered again under the version the file holds with its order
    /// reversed is refused with `extensionChanged` (a sampled page's last item sorts before its
    /// first), and nothing changes; the same order, and a closure that is not a strict order
    /// (`<=`) over pages whose ends are equal, are accepted.
    @Test func aReversedClosureOrderUnderTheSameVersionIsRefused() throws {
        try withTemporaryDatabase { db throws in
            try db.register(ViewTests.byTitle)
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                for index in 0..<200 {
                    try txn.set(
                        Note(title: String(format: "%03d", index), folder: "inbox", archived: false),
                        forKey: "n\(index)", inCollection: "notes")
                }
            }
            let commit = db.latestCommit
            let reversed = View<Note>(
                name: "byTitle", version: "1", collections: ["notes"],
                group: { _, _, note in note.archived ? nil : note.folder },
                areInIncreasingOrder: { $0.title > $1.title })
            let error = expectError(.extensionChanged) { try db.register(reversed) }
            #expect(error?.message.contains("view 'byTitle' version '1'") == true)
            #expect(error?.message.contains("Its order changed") == true)
            #expect(db.latestCommit == commit)
            try writer.readWrite { txn in
                try txn.set(
                    Note(title: "000a", folder: "inbox", archived: false), forKey: "new",
                    inCollection: "notes")
            }
            #expect(
                try writer.read { try $0.view(named: "byTitle").items(inGroup: "inbox").prefix(3).map(\.key) }
                    == ["n0", "new", "n1"])
            try db.register(ViewTests.byTitle)
        }
        // Equal values at both ends of every page: `<=` holds both ways and is not taken for a
        // changed order.
        try withTemporaryDatabase { db throws in
            let byFolder = View<Note>(
                name: "byFolder", version: "1", collections: ["notes"],
                group: { _, _, note in note.folder }, areInIncreasingOrder: { $0.folder < $1.folder })
            try db.register(byFolder)
            try db.newConnection(name: "writer").readWrite { txn in
                for index in 0..<200 {
                    try txn.set(
                        Note(title: "\(index)", folder: "inbox", archived: false), forKey: "n\(index)",
                        inCollection: "notes")
                }
            }
            try db.register(
                View<Note>(
                    name: "byFolder", version: "1", collections: ["notes"],
                    group: { _, _, note in note.folder }, areInIncreasingOrder: { $0.folder <= $1.folder }))
        }
    }

    /// Registering a view again under the version the file holds, with another sort key or
    /// grouping, is refused with `extensionChanged` and changes nothing; a new version rebuilds.
    @Test func aChangedKeyUnderTheSameVersionIsRefusedAndANewVersionRebuilds() throws {
        try withTemporaryDatabase { db throws in
            try db.register(ViewTests.byTitleKeyed)
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                for index in 0..<300 {
                    try txn.set(
                        Note(
                            title: String(format: "%03d", index), folder: index % 2 == 0 ? "even" : "odd",
                            archived: false),
                        forKey: "n\(index)", inCollection: "notes")
                }
            }
            let commit = db.latestCommit
            let descending = View<Note>(
                name: "byTitle", version: "1", collections: ["notes"],
                group: { _, _, note in note.archived ? nil : note.folder },
                sortKey: { _, _, note in SortKey(.descending(note.title)) })
            let error = expectError(.extensionChanged) { try db.register(descending) }
            #expect(error?.message.contains("view 'byTitle' version '1'") == true)
            #expect(error?.message.contains("new version") == true)
            let regrouped = View<Note>(
                name: "byTitle", version: "1", collections: ["notes"],
                group: { _, _, note in note.archived ? nil : "all" },
                sortKey: { _, _, note in SortKey(note.title) })
            let groupError = expectError(.extensionChanged) { try db.register(regrouped) }
            #expect(
                groupError?.message.contains("in group \"even\"") == true
                    || groupError?.message.contains("in group \"odd\"") == true)
            // Nothing changed: no commit, and the registered view is still the first.
            #expect(db.latestCommit == commit)
            try writer.readWrite { txn in
                try txn.set(
                    Note(title: "000a", folder: "even", archived: false), forKey: "new", inCollection: "notes"
                )
            }
            #expect(
                try writer.read { try $0.view(named: "byTitle").items(inGroup: "even").prefix(2).map(\.key) }
                    == ["n0", "new"])
            // The same definition again is accepted; a new version rebuilds in the new order.
            try db.register(ViewTests.byTitleKeyed)
            let v2 = View<Note>(
                name: "byTitle", version: "2", collections: ["notes"],
                group: { _, _, note in note.archived ? nil : note.folder },
                sortKey: { _, _, note in SortKey(.descending(note.title)) })
            try db.register(v2)
            #expect(
                try writer.read { try $0.view(named: "byTitle").items(inGroup: "even").prefix(2).map(\.key) }
                    == ["n298", "n296"])
            // A closure view under a keyed view's version is another table format: rebuilt.
            let closure = View<Note>(
                name: "byTitle", version: "2", collections: ["notes"],
                group: { _, _, note in note.archived ? nil : note.folder },
                areInIncreasingOrder: { $0.title > $1.title })
            try db.register(closure)
            #expect(
                try writer.read { try $0.view(named: "byTitle").items(inGroup: "even").prefix(2).map(\.key) }
                    == ["n298", "n296"])
        }
    }

    /// A search-results view over a keyed parent lists the matches in the parent's key order.
    @Test func aSearchResultsViewOverAKeyedParentUsesItsKeys() throws {
        try withTemporaryDatabase { db throws in
            let search = FullTextSearch<Note>(
                name: "noteText", version: "1", collections: ["notes"], columns: ["title"],
                extract: { _, _, note in ["title": note.title] })
            let results = SearchResultsView(
                name: "found", parent: ViewTests.byTitleKeyed, search: search, version: "1", query: "swift")
            try db.register([search, results])
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                for (key, title) in [("a", "swift z"), ("b", "rust"), ("c", "swift a"), ("d", "swift m")] {
                    try txn.set(
                        Note(title: title, folder: "inbox", archived: false), forKey: key,
                        inCollection: "notes")
                }
            }
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            #expect(
                try ui.read { try $0.view(named: "found").items(inGroup: "inbox").map(\.key) } == [
                    "c", "d", "a",
                ])
            try writer.readWrite { txn in
                try txn.set(
                    Note(title: "swift b", folder: "inbox", archived: false), forKey: "b",
                    inCollection: "notes")
            }
            let changes = try ui.beginLongLivedReadTransaction()
            let rows = try ui.read { try $0.view(named: "found").changes(for: changes) }
            #expect(
                rows == [
                    .insert(ViewItem(collection: "notes", key: "b"), at: ViewIndex(group: "inbox", index: 1))
                ])
            // The same search over a closure parent, same versions: another table format, so
            // the view is rebuilt (its pages hold no keys now) and reads in the closure's order.
            let descending = View<Note>(
                name: "byTitle", version: "1", collections: ["notes"],
                group: { _, _, note in note.archived ? nil : note.folder },
                areInIncreasingOrder: { $0.title > $1.title })
            try db.register(
                SearchResultsView(
                    name: "found", parent: descending, search: search, version: "1", query: "swift"))
            #expect(
                try writer.read { try $0.view(named: "found").items(inGroup: "inbox").map(\.key) } == [
                    "a", "d", "b", "c",
                ])
        }
    }
}

extension KeyedViewTests {
    struct Entry: Codable, Sendable {
        var group: Int
        var rank: Int
    }

    /// A view built over values of `groups` groups (and some of none), each item's place read
    /// through the map (`index(ofKey:)`) against the brute force; then every item moved once,
    /// which finds its old place through the map the build wrote.
    @Test(arguments: [3, 40]) func aBuildMapsEveryItemToItsPlace(groups: Int) throws {
        let keyed = View<Entry>(
            name: "keyed", version: "1", collections: ["e"],
            group: { _, _, entry in entry.group < 0 ? nil : "g\(entry.group)" },
            sortKey: { _, _, entry in SortKey(entry.rank) })
        let closure = View<Entry>(
            name: "closure", version: "1", collections: ["e"],
            group: { _, _, entry in entry.group < 0 ? nil : "g\(entry.group)" },
            areInIncreasingOrder: { $0.rank < $1.rank })
        var random = SeededGenerator(state: UInt64(groups))
        func entry() -> Entry {
            Entry(
                group: Int.random(in: -1..<groups, using: &random),
                rank: Int.random(in: -50...50, using: &random))
        }
        func check(_ db: Database, _ context: String) throws {
            try db.newConnection(name: "check").read { txn throws in
                var expected: [String: [(ViewItem, Int)]] = [:]
                for (key, entry) in try txn.values(inCollection: "e", as: Entry.self) where entry.group >= 0 {
                    expected["g\(entry.group)", default: []].append(
                        (ViewItem(collection: "e", key: key), entry.rank))
                }
                let rows = expected.mapValues { members in
                    members.sorted { ($0.1, $0.0) < ($1.1, $1.0) }.map(\.0)
                }
                for name in ["keyed", "closure"] {
                    let view = try txn.view(named: name)
                    #expect(ViewTests.rows(view) == rows, "\(context): \(name)")
                    for key in try txn.keys(inCollection: "e") {
                        let group = try txn.value(forKey: key, inCollection: "e", as: Entry.self)!.group
                        let place = rows["g\(group)"]?.firstIndex(of: ViewItem(collection: "e", key: key))
                        #expect(
                            view.index(ofKey: key, inCollection: "e")
                                == place.map { ViewIndex(group: "g\(group)", index: $0) },
                            "\(context): \(name), \(key)")
                    }
                }
            }
        }
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                for index in 0..<600 { try txn.set(entry(), forKey: "k\(index)", inCollection: "e") }
            }
            try db.register([keyed, closure])
            try check(db, "built")
            for index in 0..<600 {
                try writer.readWrite { try $0.set(entry(), forKey: "k\(index)", inCollection: "e") }
            }
            try check(db, "moved")
        }
    }
}

/// A stored page's bytes are read back only when they are exactly a page: damaged ones (a byte
/// changed, cut short, grown) are refused unless they still are one, by the rule each field
/// states (a length of 8 bytes, little-endian, then that many bytes, to the end exactly).
@Suite("Page bytes")
struct PageBytesTests {
    /// The rule, written out plainly: the item count, or nil when `bytes` are not a page.
    static func itemCount(_ bytes: [UInt8], keyed: Bool) -> Int? {
        func int(at offset: Int) -> Int? {
            guard offset + 8 <= bytes.count else { return nil }
            let raw = (0..<8).reduce(UInt64(0)) { $0 | UInt64(bytes[offset + $1]) << (8 * UInt64($1)) }
            let value = Int64(bitPattern: raw)
            return value >= 0 && value <= Int64(bytes.count) ? Int(value) : nil
        }
        guard let count = int(at: 0) else { return nil }
        var offset = 8
        for _ in 0..<count {
            for _ in 0..<(keyed ? 3 : 2) {
                guard let length = int(at: offset), offset + 8 + length <= bytes.count else { return nil }
                offset += 8 + length
            }
        }
        return offset == bytes.count ? count : nil
    }

    @Test(arguments: [false, true]) func damagedPagesParseByTheRule(keyed: Bool) {
        var random = SeededGenerator(state: keyed ? 2 : 1)
        func text() -> String {
            String(
                (0..<Int.random(in: 0...6, using: &random)).map { _ in
                    "ab\u{0}é".randomElement(using: &random)!
                })
        }
        var refused = 0
        for _ in 0..<300 {
            let items = (0..<Int.random(in: 1...8, using: &random)).map { _ in
                ViewItem(collection: text(), key: text())
            }
            let keys =
                keyed
                ? items.map { _ in
                    (0..<Int.random(in: 0...5, using: &random)).map { _ in
                        UInt8.random(in: 0...255, using: &random)
                    }
                } : nil
            let page = PageItems(items, keys: keys)
            let parsed = PageItems(bytes: page.bytes, keyed: keyed)
            #expect(parsed?.all == items)
            #expect(parsed.map { keyed ? $0.allSortKeys : [] } == (keys ?? []))
            for _ in 0..<30 {
                var bytes = page.bytes
                switch Int.random(in: 0..<4, using: &random) {
                case 0:
                    bytes[Int.random(in: 0..<bytes.count, using: &random)] = UInt8.random(
                        in: 0...255, using: &random)
                case 1:
                    // A length field's low byte, one up or down.
                    let field = Int.random(in: 0..<min(bytes.count, 64), using: &random) / 8 * 8
                    bytes[field] = bytes[field] &+ (Bool.random(using: &random) ? 1 : 255)
                case 2: bytes.removeLast(Int.random(in: 1...bytes.count, using: &random))
                default:
                    bytes += (0..<Int.random(in: 1...9, using: &random)).map { _ in
                        UInt8.random(in: 0...255, using: &random)
                    }
                }
                let expected = Self.itemCount(bytes, keyed: keyed)
                #expect(PageItems(bytes: bytes, keyed: keyed)?.count == expected)
                if expected == nil { refused += 1 }
            }
        }
        #expect(refused > 1_000, "the damage is mostly refused (\(refused) of 9,000)")
    }
}
