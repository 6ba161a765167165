import Foundation
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDB

/// The seam between the commit path and the extensions (issue 43): kinds as a type whose raw
/// values are the file's, one lookup for every reader, and records the changeset and the
/// history keep opaque, which only their extension reads.
@Suite("The extension seam")
struct ExtensionSeamTests {
    @Test func theCatalogRecordsTheKindsAsEveryEarlierVersionDid() throws {
        try withTemporaryDatabase { db throws in
            try db.register([ViewTests.byTitle, IndexTests.people, IndexTests.articles])
            let kinds = try sqlite3(
                db.path, "SELECT name || '=' || kind FROM snapshotdb_extensions ORDER BY name;")
            #expect(
                kinds.split(separator: "\n").map(String.init) == [
                    "articles=search", "byTitle=view", "people=index",
                ])
        }
    }

    @Test func everyReaderLooksUpItsKindAndNamesWhatItLookedFor() throws {
        try withTemporaryDatabase { db throws in
            try db.register([ViewTests.byTitle, IndexTests.people, IndexTests.articles])
            let reader = db.newConnection(name: "reader")
            try reader.read { txn in
                let asIndex = expectError(.unknownExtension) { _ = try txn.index(named: "byTitle") }
                #expect(asIndex?.message.contains("no secondary index named 'byTitle'") == true)
                let asView = expectError(.unknownExtension) { _ = try txn.view(named: "people") }
                #expect(asView?.message.contains("no view named 'people'") == true)
                let asSearch = expectError(.unknownExtension) { _ = try txn.search(named: "people") }
                #expect(asSearch?.message.contains("no full-text index named 'people'") == true)
                _ = try txn.view(named: "byTitle")
                _ = try txn.index(named: "people")
                _ = try txn.search(named: "articles")
            }
        }
    }

    static let record: ViewCommitRecord = {
        var touched: [ViewItem: ViewCommitRecord.Before?] = [:]
        touched[ViewItem(collection: "notes", key: "1")] = ViewCommitRecord.Before(
            group: "inbox", stored: .value(Data("{}".utf8)))
        touched[ViewItem(collection: "notes", key: "2")] = ViewCommitRecord.Before(
            group: "done", stored: .sortKey([1, 2, 3]))
        // Not in the view before the commit.
        touched[ViewItem(collection: "notes", key: "3")] = .some(nil)
        return ViewCommitRecord(touched: touched)
    }()

    /// What the history holds of `changes`, read back.
    static func roundTrip(_ changes: ExtensionChanges) throws -> ExtensionChanges {
        var writer = HistoryWriter()
        changes.encode(into: &writer)
        return try writer.bytes.withUnsafeBytes { bytes in
            var reader = HistoryReader(bytes)
            let decoded = try ExtensionChanges.decode(from: &reader)
            #expect(reader.isAtEnd)
            return decoded
        }
    }

    @Test func theHistoryKeepsARecordAsBytesThatOnlyItsViewDecodes() throws {
        var changes = ExtensionChanges()
        changes.byName["byTitle"] = Self.record
        changes.reset = ["people"]
        let read = try Self.roundTrip(changes)
        let stored = try #require(read.byName["byTitle"] as? StoredExtensionRecord)
        #expect(stored.historyTag == ViewCommitRecord.tag)
        #expect(try ViewCommitRecord.from(stored)?.touched == Self.record.touched)
        #expect(read.reset == ["people"])
        #expect(ViewCommitRecord.isReadable(stored))
        // Written again as it was read: the same bytes.
        #expect(
            try Self.roundTrip(read).byName["byTitle"].map { ($0 as? StoredExtensionRecord)?.payload }
                == stored.payload)
    }

    @Test func aRecordOfAnotherTagMakesTheViewReloadAndDamagedBytesAreAnError() throws {
        let newer = StoredExtensionRecord(historyTag: 99, payload: [1, 2, 3])
        #expect(!ViewCommitRecord.isReadable(newer))
        #expect(try ViewCommitRecord.from(newer) == nil)
        #expect(ViewCommitRecord.isReadable(nil))
        #expect(ViewCommitRecord.isReadable(Self.record))
        // The view's tag with bytes that are not its record: a typed failure, not a guess.
        let damaged = StoredExtensionRecord(historyTag: ViewCommitRecord.tag, payload: [1, 0xFF])
        #expect(throws: HistoryReader.Failure.self) { _ = try ViewCommitRecord.from(damaged) }
        var bytes = HistoryWriter()
        Self.record.encode(into: &bytes)
        let trailing = StoredExtensionRecord(historyTag: ViewCommitRecord.tag, payload: bytes.bytes + [0])
        #expect(throws: HistoryReader.Failure.self) { _ = try ViewCommitRecord.from(trailing) }
    }
}
