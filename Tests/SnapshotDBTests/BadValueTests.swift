import CSQLite
import Foundation
import SnapshotDB
import Testing

/// Values SnapshotDB cannot store: one its codec cannot encode, one larger than SQLite accepts.
/// Each is refused with a typed error naming what was refused; the transaction commits nothing
/// unless the caller catches the error and goes on, and then only what succeeded.
@Suite("Values that cannot be stored")
struct BadValueTests {
    struct Measurement: Codable, Equatable {
        var name: String
        var value: Double
    }

    @Test func unencodableValueThrowsEncodingFailedAndTheTransactionCommitsNothing() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                try txn.set(1.5, forKey: "nan", inCollection: "numbers")
                try txn.set(Item(title: "kept"), forKey: "kept", inCollection: "items")
            }
            var bodyFinished = false
            let error = expectError(.encodingFailed) {
                try writer.readWrite { txn in
                    try txn.set(Item(title: "lost"), forKey: "lost", inCollection: "items")
                    try txn.set(Double.nan, forKey: "nan", inCollection: "numbers")
                    bodyFinished = true
                }
            }
            #expect(!bodyFinished)
            #expect(error?.collection == "numbers")
            #expect(error?.key == "nan")
            #expect(error?.typeName == "Double")
            #expect(error?.message.contains("Double") == true, "\(String(describing: error))")
            #expect(error?.message.contains("'nan'") == true)
            #expect(error?.message.contains("'numbers'") == true)
            #expect(db.latestCommit == 1)
            try writer.read { txn throws in
                #expect(try txn.value(forKey: "nan", inCollection: "numbers", as: Double.self) == 1.5)
                #expect(try txn.keys(inCollection: "items") == ["kept"])
            }
            #expect(try isIntact(db.path))
        }
    }

    @Test func callerThatCatchesTheEncodingErrorCommitsTheRest() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            let reader = db.newConnection(name: "reader")
            try writer.readWrite { try $0.set(1.5, forKey: "nan", inCollection: "numbers") }
            try reader.beginLongLivedReadTransaction()
            try writer.readWrite { txn in
                try txn.set(Item(title: "before"), forKey: "before", inCollection: "items")
                let error = expectError(.encodingFailed) {
                    try txn.set(
                        Measurement(name: "bad", value: .infinity), forKey: "nan", inCollection: "numbers")
                }
                #expect(error?.typeName == "Measurement")
                // The refused value left the stored one in place.
                #expect(try txn.value(forKey: "nan", inCollection: "numbers", as: Double.self) == 1.5)
                try txn.set(Item(title: "after"), forKey: "after", inCollection: "items")
            }
            #expect(db.latestCommit == 2)
            let changes = try reader.beginLongLivedReadTransaction()
            #expect(changes.map(\.commit) == [2])
            #expect(changes.first?.setKeys == ["items": ["before", "after"]])
            #expect(!changes.hasChange(inCollection: "numbers"))
            try reader.read { txn throws in
                #expect(try txn.keys(inCollection: "items") == ["after", "before"])
                #expect(try txn.value(forKey: "nan", inCollection: "numbers", as: Double.self) == 1.5)
            }
        }
    }

    /// SQLite's limit on a string or blob (`SQLITE_MAX_LENGTH`, 1,000,000,000 bytes in the
    /// system library) is checked when the value is bound, before SQLite copies it, so the test
    /// costs the memory of the test's own buffer only (`Data(count:)` is zero-filled lazily).
    static let sqliteMaximumLength = 1_000_000_000

    @Test(arguments: [sqliteMaximumLength + 1, Int(Int32.max) + 1, Int(UInt32.max) + 2])
    func valueLargerThanSQLiteAcceptsThrowsValueTooLargeAndCommitsNothing(_ size: Int) throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { try $0.set(Item(title: "kept"), forKey: "kept", inCollection: "c") }
            let huge = Data(count: size)
            let error = expectError(.valueTooLarge) {
                try writer.readWrite { txn in
                    try txn.set(Item(title: "lost"), forKey: "lost", inCollection: "c")
                    try txn.setData(huge, forKey: "huge", inCollection: "c")
                }
            }
            #expect(error?.sqliteCode == SQLITE_TOOBIG)
            #expect(error?.message.contains("too big") == true, "\(String(describing: error))")
            #expect(db.latestCommit == 1)
            // Caught inside the transaction, the rest commits.
            try writer.readWrite { txn in
                expectError(.valueTooLarge) { try txn.setData(huge, forKey: "huge", inCollection: "c") }
                try txn.set(Item(title: "small"), forKey: "small", inCollection: "c")
            }
            #expect(db.latestCommit == 2)
            #expect(try writer.read { try $0.keys(inCollection: "c") } == ["kept", "small"])
            #expect(try isIntact(db.path))
        }
    }

    /// A key that a foreign client wrote as text that is not UTF-8, or as a blob, is no Swift
    /// string: SQLite does not check text, and SnapshotDB lists such a key with U+FFFD in place of
    /// the bad bytes, cannot read it by that name, and goes on working (the foreign write is
    /// sealed as a commit, the other keys are untouched, the file stays sound).
    @Test func aForeignKeyThatIsNotUTF8IsListedRepairedAndLeftAlone() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { try $0.setData(Data("A".utf8), forKey: "a", inCollection: "x") }
            let before = db.latestCommit
            try run(
                "/usr/bin/sqlite3",
                [
                    db.path,
                    "INSERT INTO snapshotdb_values(collection, key, data) "
                        + "VALUES ('x', CAST(X'FF41' AS TEXT), X'42'), ('x', X'FF42', X'43')",
                ])
            try writer.readWrite { try $0.setData(Data("Z".utf8), forKey: "z", inCollection: "x") }
            #expect(db.latestCommit == before + 2)
            try writer.read { txn throws in
                #expect(Set(try txn.keys(inCollection: "x")) == ["a", "\u{FFFD}A", "\u{FFFD}B", "z"])
                #expect(try txn.data(forKey: "\u{FFFD}A", inCollection: "x") == nil)
                #expect(try txn.data(forKey: "a", inCollection: "x") == Data("A".utf8))
                #expect(try txn.data(forKey: "z", inCollection: "x") == Data("Z".utf8))
            }
            #expect(try isIntact(db.path))
        }
    }

    @Test func keyLargerThanSQLiteAcceptsThrowsValueTooLarge() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { try $0.set(Item(title: "kept"), forKey: "kept", inCollection: "c") }
            // Built from bytes: `String(repeating:count:)` takes most of a minute in a debug build.
            let hugeKey = String(
                decoding: Data(repeating: UInt8(ascii: "k"), count: Self.sqliteMaximumLength + 1),
                as: UTF8.self)
            expectError(.valueTooLarge) {
                try writer.readWrite { try $0.set(Item(title: "lost"), forKey: hugeKey, inCollection: "c") }
            }
            expectError(.valueTooLarge) {
                try writer.read { try $0.value(forKey: hugeKey, inCollection: "c", as: Item.self) }
            }

            expectError(.valueTooLarge) {
                try writer.readWrite { try $0.set(Item(title: "lost"), forKey: "k", inCollection: hugeKey) }
            }
            #expect(db.latestCommit == 1)
            #expect(try writer.read { try $0.keys(inCollection: "c") } == ["kept"])
            #expect(try isIntact(db.path))
        }
    }
}

/// A write that fails after some extension was already updated for it (a later extension that
/// cannot decode the value) must not commit half kept: the extensions would list a value that
/// is not there.
@Suite("Writes that fail between extensions")
struct ExtensionStepTests {
    /// `a_people` (first by name) reads people; `b_titles` reads items. A person stored in
    /// "mixed" is read by the first and refused by the second.
    static let people = SecondaryIndex<Person>(
        name: "a_people", version: "1", collections: ["mixed"], columns: [.text("city")],
        extract: { _, _, person in ["city": .text(person.city)] })
    static let titles = View<Item>(
        name: "b_titles", version: "1", collections: ["mixed"], group: { _, _, _ in "all" },
        sortKey: { _, _, item in SortKey(item.title) })

    @Test func aWriteASecondExtensionRefusesCannotCommitOnceTheFirstWasUpdated() throws {
        try withTemporaryDatabase { db throws in
            try db.register([Self.people, Self.titles])
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { try $0.set(Item(title: "kept"), forKey: "before", inCollection: "other") }
            let committed = db.latestCommit
            let error = expectError(.decodingFailed) {
                try writer.readWrite { txn throws in
                    try txn.set(Item(title: "other"), forKey: "x", inCollection: "other")
                    expectError(.decodingFailed) {
                        try txn.set(Person(city: "Oslo", age: 40), forKey: "p", inCollection: "mixed")
                    }
                    // Caught: the transaction goes on, and fails at its end.
                }
            }
            #expect(error?.message.contains("cannot commit") == true, "\(String(describing: error))")
            #expect(db.latestCommit == committed)
            try writer.read { txn throws in
                #expect(try txn.index(named: "a_people").count(where: "city = ?", [.text("Oslo")]) == 0)
                #expect(try txn.keys(inCollection: "mixed") == [])
            }
        }
    }

    /// A value both extensions read.
    struct Both: Codable {
        var title: String
        var count = 0
        var city: String
        var age: Int
    }

    @Test func aSavepointAroundTheFailedWriteLetsTheRestCommit() throws {
        try withTemporaryDatabase { db throws in
            try db.register([Self.people, Self.titles])
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn throws in
                try txn.set(Both(title: "kept", city: "Bergen", age: 30), forKey: "i", inCollection: "mixed")
                #expect(throws: DatabaseError.self) {
                    try txn.savepoint { txn in
                        try txn.set(Person(city: "Oslo", age: 40), forKey: "p", inCollection: "mixed")
                    }
                }
            }
            try writer.read { txn throws in
                #expect(try txn.keys(inCollection: "mixed") == ["i"])
                #expect(try txn.index(named: "a_people").count(where: "city = ?", [.text("Oslo")]) == 0)
                #expect(try txn.view(named: "b_titles").items(inGroup: "all").map(\.key) == ["i"])
            }
        }
    }

    /// A value the first extension refuses changed nothing: caught, the rest commits.
    @Test func aValueTheFirstExtensionRefusesLeavesTheTransactionFreeToCommit() throws {
        try withTemporaryDatabase { db throws in
            try db.register([Self.people, Self.titles])
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn throws in
                try txn.set(Person(city: "Oslo", age: 40), forKey: "p", inCollection: "other")
                expectError(.decodingFailed) {
                    try txn.set(Item(title: "not a person"), forKey: "i", inCollection: "mixed")
                }
            }
            try writer.read { txn throws in
                #expect(try txn.keys(inCollection: "other") == ["p"])
                #expect(try txn.keys(inCollection: "mixed") == [])
                #expect(try txn.view(named: "b_titles").items(inGroup: "all").isEmpty)
            }
        }
    }
}

extension ExtensionStepTests {
    /// A value a foreign client wrote that a view cannot decode: sealing it marks the view stale
    /// instead of failing, so writes go on (the one that removes the value included), the other
    /// extensions are rebuilt, and registering the view again once the value is gone rebuilds it.
    @Test func aForeignValueAViewCannotDecodeMarksItStaleAndWritesGoOn() throws {
        try withTemporaryDatabase { db throws in
            let cities = SecondaryIndex<Item>(
                name: "titles", version: "1", collections: ["items"], columns: [.text("title")],
                extract: { _, _, item in ["title": .text(item.title)] })
            try db.register([ViewTests.byTitle, cities])
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn throws in
                try txn.set(
                    Note(title: "a", folder: "inbox", archived: false), forKey: "n1", inCollection: "notes")
                try txn.set(Item(title: "x"), forKey: "i1", inCollection: "items")
            }
            try sqlite3(
                db.path,
                """
                INSERT INTO snapshotdb_values(collection, key, data) VALUES ('notes', 'bad', x'7B7D');
                INSERT INTO snapshotdb_values(collection, key, data) VALUES ('items', 'i2', '{"title":"y","count":0}');
                """)
            try writer.readWrite { try $0.set(Item(title: "z"), forKey: "i3", inCollection: "items") }
            let reader = db.newConnection(name: "reader")
            let error = expectError(.extensionStale) { try reader.read { try $0.view(named: "byTitle") } }
            #expect(error?.message.contains("cannot decode") == true, "\(String(describing: error))")
            // The foreign client is named as such, and this process as the one that numbered it.
            #expect(
                error?.message.contains("a foreign client (its writes numbered by process \(getpid()))")
                    == true,
                "\(String(describing: error))")
            // The index was rebuilt with the foreign value, and kept up to date after it.
            try reader.read { txn throws in
                #expect(try txn.index(named: "titles").count(where: "title IN ('x', 'y', 'z')") == 3)
            }
            // While the value is there, registering the view again fails, naming it.
            let refused = expectError(.decodingFailed) { try db.register(ViewTests.byTitle) }
            #expect(refused?.key == "bad" && refused?.collection == "notes", "\(String(describing: refused))")
            try writer.readWrite { try $0.removeValue(forKey: "bad", inCollection: "notes") }
            try db.register(ViewTests.byTitle)
            try reader.read { txn throws in
                #expect(try txn.view(named: "byTitle").items(inGroup: "inbox").map(\.key) == ["n1"])
            }
        }
    }
}
