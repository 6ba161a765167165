import Foundation
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDB

/// One strict order for `(collection, key)`: UTF-8 bytes, as SQLite's `BINARY` compares them,
/// wherever the library orders items: a view's ties, its upkeep and its rebuild, its binary
/// searches, its row changes, and an index query without `orderBy`. Swift's `String` `<` is not
/// a strict weak order (`"A\u{30A}" == "Å"`, `"Å" < "Åa"`, yet neither of `"A\u{30A}"` and
/// `"Åa"` is before the other), so keys that mix decomposed and precomposed forms are the input.
@Suite("Key order")
struct KeyOrderTests {
    /// Pieces of keys: precomposed and decomposed forms of the same letters, lone combining
    /// marks, Hangul both ways, a character outside the BMP, and the empty string.
    static let pieces = [
        "A", "a", "Å", "A\u{30A}", "Åa", "e", "é", "e\u{301}", "\u{301}", "\u{30A}", "Z", "ß", "한",
        "\u{1112}\u{1161}\u{11AB}", "😀", "0", "",
    ]
    static let collections = ["c", "ć", "c\u{301}"]

    static func randomName(_ random: inout SeededGenerator) -> String {
        (0..<Int.random(in: 1...3, using: &random)).map { _ in pieces.randomElement(using: &random)! }
            .joined()
    }

    /// The order by brute force: the collection's bytes, then the key's.
    static func byteOrder(_ lhs: ViewItem, _ rhs: ViewItem) -> Bool {
        if Array(lhs.collection.utf8) != Array(rhs.collection.utf8) {
            return lhs.collection.utf8.lexicographicallyPrecedes(rhs.collection.utf8)
        }
        return lhs.key.utf8.lexicographicallyPrecedes(rhs.key.utf8)
    }

    struct Tag: Codable, Sendable, Equatable { var group: Int }

    /// Every value sorts equal: the items alone order each group.
    static func keyed(_ version: String) -> View<Tag> {
        View(
            name: "tiesKeyed", version: version, group: { _, _, tag in "g\(tag.group)" },
            sortKey: { _, _, _ in SortKey(0) })
    }

    static func closure(_ version: String) -> View<Tag> {
        View(
            name: "tiesClosure", version: version, group: { _, _, tag in "g\(tag.group)" },
            areInIncreasingOrder: { _, _ in false })
    }

    /// The rows the views must hold for `txn`'s values.
    static func expectedRows(_ txn: ReadTransaction) throws -> [String: [ViewItem]] {
        var groups: [String: [ViewItem]] = [:]
        for collection in collections {
            for (key, tag) in try txn.values(inCollection: collection, as: Tag.self) {
                groups["g\(tag.group)", default: []].append(ViewItem(collection: collection, key: key))
            }
        }
        return groups.mapValues { $0.sorted(by: byteOrder) }
    }

    @Test func viewItemOrderIsAStrictTotalOrderOfTheBytes() {
        let a = ViewItem(collection: "c", key: "A\u{30A}")
        let b = ViewItem(collection: "c", key: "Åa")
        let c = ViewItem(collection: "c", key: "Å")
        // Swift's String order cannot order these three consistently; the items' order can.
        #expect(a.key == c.key && c.key < b.key && !(a.key < b.key) && !(b.key < a.key))
        #expect(a < c && c < b && a < b)
        var random = SeededGenerator(state: 45)
        for _ in 0..<2_000 {
            let x = ViewItem(
                collection: Self.collections.randomElement(using: &random)!, key: Self.randomName(&random))
            let y = ViewItem(
                collection: Self.collections.randomElement(using: &random)!, key: Self.randomName(&random))
            let z = ViewItem(
                collection: Self.collections.randomElement(using: &random)!, key: Self.randomName(&random))
            #expect(!(x < x))
            #expect([x < y, y < x, x == y].filter { $0 }.count == 1, "\(x) \(y)")
            #expect((x < y) == Self.byteOrder(x, y))
            if x < y && y < z { #expect(x < z) }
        }
    }

    /// Random commits of decomposed and precomposed keys whose values all sort equal: the
    /// upkeep, a rebuild and a brute-force sort give one order, the binary searches find every
    /// item, and the row changes a bookmark gets take the old rows to the new.
    @Test(arguments: [1, 2, 3] as [UInt64])
    func upkeepRebuildAndBruteForceAgree(seed: UInt64) throws {
        var random = SeededGenerator(state: seed)
        try withTemporaryDatabase { db throws in
            try db.register([Self.keyed("1"), Self.closure("1")])
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            var previous: [[String: [ViewItem]]] = [[:], [:]]
            for round in 0..<30 {
                try writer.readWrite { txn in
                    for _ in 0..<Int.random(in: 1...(round < 5 ? 40 : 6), using: &random) {
                        let collection = Self.collections.randomElement(using: &random)!
                        let key = Self.randomName(&random)
                        if Int.random(in: 0..<4, using: &random) == 0 {
                            try txn.removeValue(forKey: key, inCollection: collection)
                        } else {
                            let tag = Tag(group: Int.random(in: 0..<2, using: &random))
                            try txn.set(tag, forKey: key, inCollection: collection)
                        }
                    }
                }
                let changes = try ui.beginLongLivedReadTransaction()
                try ui.read { txn throws in
                    let expected = try Self.expectedRows(txn)
                    for (index, name) in ["tiesKeyed", "tiesClosure"].enumerated() {
                        let view = try txn.view(named: name)
                        let now = ViewTests.rows(view)
                        #expect(now == expected, "seed \(seed) round \(round): \(name)")
                        #expect(
                            ViewTests.apply(try view.changes(for: changes), to: previous[index]) == now,
                            "seed \(seed) round \(round): \(name)")
                        for (group, items) in now {
                            for (position, item) in items.enumerated() {
                                #expect(
                                    view.index(ofKey: item.key, inCollection: item.collection)
                                        == ViewIndex(group: group, index: position), "\(name) \(item)")
                            }
                        }
                        previous[index] = now
                    }
                }
            }
            // A rebuild from the values gives the same rows.
            try db.register([Self.keyed("2"), Self.closure("2")])
            try writer.read { txn throws in
                let expected = try Self.expectedRows(txn)
                #expect(ViewTests.rows(try txn.view(named: "tiesKeyed")) == expected)
                #expect(ViewTests.rows(try txn.view(named: "tiesClosure")) == expected)
            }
        }
    }

    /// An index query without `orderBy` gives its keys in the same order as a view's ties.
    @Test func anIndexQueryWithoutOrderByUsesTheSameOrder() throws {
        var random = SeededGenerator(state: 7)
        try withTemporaryDatabase { db throws in
            try db.register(
                SecondaryIndex<Tag>(name: "tags", version: "1", columns: [.integer("grp")]) { _, _, tag in
                    ["grp": .integer(tag.group)]
                })
            let writer = db.newConnection()
            var items: Set<ViewItem> = []
            try writer.readWrite { txn in
                for _ in 0..<200 {
                    let item = ViewItem(
                        collection: Self.collections.randomElement(using: &random)!,
                        key: Self.randomName(&random))
                    try txn.set(Tag(group: 0), forKey: item.key, inCollection: item.collection)
                    items.insert(item)
                }
            }
            try writer.read { txn in
                let found = try txn.index(named: "tags").keys(where: "grp = ?", [.integer(0)])
                #expect(found == items.sorted(by: Self.byteOrder))
            }
        }
    }

    /// A view kept by an earlier release (format t5, or t6 keyed) broke ties with Swift's order.
    /// With NFC keys only, that was already the byte order: the tables are kept and recorded in
    /// the new format. With a decomposed key, the view is rebuilt at registration.
    @Test(arguments: [false, true])
    func aViewOfTheFormerFormatIsKeptOnlyWhenItsKeysAreNFC(decomposed: Bool) throws {
        try withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("former.sqlite").path
            do {
                let db = try Database(path: path)
                try db.register([Self.keyed("1"), Self.closure("1")])
                try db.newConnection().readWrite { txn in
                    for key in ["Å", "Åa", "b", decomposed ? "A\u{30A}" : "A"] {
                        try txn.set(Tag(group: 0), forKey: key, inCollection: "c")
                    }
                }
            }
            let recorded = "SELECT name, version FROM snapshotdb_extensions ORDER BY name;"
            _ = try sqlite3(
                path,
                "UPDATE snapshotdb_extensions SET version = 't6:1' WHERE name = 'tiesKeyed';"
                    + "UPDATE snapshotdb_extensions SET version = 't5:1' WHERE name = 'tiesClosure';")
            let builtBefore = try sqlite3(
                path, "SELECT name, registered_commit FROM snapshotdb_extension_state;")
            let db = try Database(path: path)
            try db.register([Self.keyed("1"), Self.closure("1")])
            #expect(try sqlite3(path, recorded) == "tiesClosure|t7:1\ntiesKeyed|t8:1\n")
            let builtAfter = try sqlite3(
                path, "SELECT name, registered_commit FROM snapshotdb_extension_state;")
            #expect((builtAfter == builtBefore) == !decomposed, "\(builtBefore) \(builtAfter)")
            try db.newConnection().read { txn throws in
                let expected = try Self.expectedRows(txn)
                #expect(ViewTests.rows(try txn.view(named: "tiesKeyed")) == expected)
                #expect(ViewTests.rows(try txn.view(named: "tiesClosure")) == expected)
            }
        }
    }
}
