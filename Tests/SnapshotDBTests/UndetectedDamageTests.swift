import Foundation
import SnapshotDB
import SnapshotDBTestSupport
import Testing

/// What SQLite cannot detect, shown so that the README's warning stays true: a byte changed
/// inside a stored value keeps the page's b-tree valid, so the value reads back wrong without an
/// error, a write to the same page commits the damaged content with valid WAL checksums, and
/// `PRAGMA integrity_check` still says `ok`.
@Suite("Damage SQLite cannot detect")
struct UndetectedDamageTests {
    @Test func aChangedByteInsideAValueReadsBackWrongAndAWriteCommitsIt() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("silent.sqlite").path
            let marker = Data("precious-value-0123456789".utf8)
            do {
                let db = try Database(path: path)
                try db.newConnection().readWrite { try $0.setData(marker, forKey: "k", inCollection: "c") }
            }
            var file = try Data(contentsOf: URL(fileURLWithPath: path))
            let range = try #require(file.range(of: marker))
            file[range.lowerBound] ^= 0x01
            try file.write(to: URL(fileURLWithPath: path))

            let db = try Database(path: path)
            let connection = db.newConnection()
            let read = try connection.read { try $0.data(forKey: "k", inCollection: "c") }
            #expect(read != marker)
            #expect(read?.count == marker.count)
            // A write to the same page succeeds: its WAL frame carries valid checksums over the
            // damaged value.
            try connection.readWrite { try $0.setData(Data("other".utf8), forKey: "k2", inCollection: "c") }
            #expect(db.latestCommit == 2)
            #expect(try connection.read { try $0.data(forKey: "k", inCollection: "c") } == read)
            #expect(try isIntact(path))
        }
    }
}
