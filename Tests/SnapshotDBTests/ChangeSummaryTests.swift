import Foundation
import Testing

@testable import SnapshotDB

/// Folding a batch of changesets, and a commit log that gives its memory back.
@Suite("Change summaries and the commit log's size")
struct ChangeSummaryTests {
    @Test func aSummaryAnswersLikeTheChangesetsItFolds() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            try writer.readWrite { txn in
                for key in ["a", "b", "c"] {
                    try txn.set(Item(title: key), forKey: key, inCollection: "items")
                }
                try txn.set(Item(title: "x"), forKey: "x", inCollection: "cleared")
            }
            try ui.beginLongLivedReadTransaction()
            try writer.readWrite { try $0.set(Item(title: "a2"), forKey: "a", inCollection: "items") }
            try writer.readWrite { try $0.removeValue(forKey: "b", inCollection: "items") }
            try writer.readWrite { try $0.removeAll(inCollection: "cleared") }
            try writer.readWrite { try $0.set(Item(title: "o"), forKey: "o", inCollection: "other") }
            let changes = try ui.beginLongLivedReadTransaction()
            let summary = changes.summary
            #expect(summary.commits == 2...5)
            #expect(!summary.changedEverything)
            for key in ["a", "b", "c", "x", "o", "zz"] {
                for collection in ["items", "cleared", "other", "none"] {
                    #expect(
                        summary.hasChange(forKey: key, inCollection: collection)
                            == changes.hasChange(forKey: key, inCollection: collection),
                        "\(collection)/\(key)")
                }
            }
            #expect(summary.changedKeys(inCollection: "items") == ["a", "b"])
            #expect(summary.changedKeys(inCollection: "cleared") == nil, "a cleared collection is reloaded")
            #expect(summary.changedKeys(inCollection: "none") == [])
            #expect(summary.hasChange(forAnyKeys: ["c", "b"], inCollection: "items"))
            #expect(!summary.hasChange(forAnyKeys: ["c", "d"], inCollection: "items"))
            #expect(summary.changedCollections == ["items", "cleared", "other"])
        }
    }

    @Test func anExternalCommitChangesEverything() {
        let summary = [Changeset(commit: 3, setKeys: ["c": ["k"]]), Changeset(commit: 4, isExternal: true)]
            .summary
        #expect(summary.changedEverything)
        #expect(summary.hasChange(forKey: "anything", inCollection: "anywhere"))
        #expect(summary.changedKeys(inCollection: "c") == nil)
        #expect(summary.changedCollections == nil)
        #expect([Changeset]().summary.commits == nil)
    }

    @Test func theLogShrinksWhenTheLaggardAdvancesWithoutAnotherCommit() throws {
        var configuration = Configuration()
        configuration.commitLogRetention = 8
        try withTemporaryDatabase(configuration: configuration) { db throws in
            let writer = db.newConnection(name: "writer")
            let laggard = db.newConnection(name: "laggard")
            try laggard.beginLongLivedReadTransaction()
            for index in 0..<100 {
                try writer.readWrite {
                    try $0.set(Item(title: "\(index)"), forKey: "k\(index % 7)", inCollection: "c")
                }
            }
            #expect(db.commitLogCount >= 100, "the laggard pins every changeset it has not been given")
            let changes = try laggard.beginLongLivedReadTransaction()
            #expect(changes.count == 100)
            #expect(db.commitLogCount <= 8 + 2, "trimmed when the laggard advanced, with no commit since")
            try laggard.endLongLivedReadTransaction()
            #expect(db.commitLogCount <= 8 + 2)
        }
    }

    @Test func retentionIsBoundedInBytes() throws {
        var configuration = Configuration()
        configuration.commitLogRetentionBytes = 256 << 10
        try withTemporaryDatabase(configuration: configuration) { db throws in
            let writer = db.newConnection(name: "writer")
            for commit in 0..<20 {
                try writer.readWrite { txn in
                    for index in 0..<1_000 {
                        try txn.setData(
                            Data([1]), forKey: "key-\(commit)-\(index)-padded-past-fifteen",
                            inCollection: "bulk")
                    }
                }
            }
            // Each bulk changeset counts well over 100 KiB: only a few stay.
            #expect(db.commitLogCount < 5)
            #expect(db.commitLogCount >= 1)
        }
    }
}

/// Readable descriptions, for logs and debugging.
@Suite("Descriptions")
struct DescriptionTests {
    @Test func changesetsNameTheirCommitWriterAndKeys() {
        let changeset = Changeset(
            commit: 12, setKeys: ["items": ["b", "a"]], removedKeys: ["items": ["c"]],
            clearedCollections: ["drafts"],
            connectionName: "sync", info: ["source": "sync"])
        #expect(
            changeset.description
                == #"commit 12 by sync; set items["a", "b"]; removed items["c"]; cleared ["drafts"]; info ["source=sync"]"#
        )
        let many = Changeset(commit: 3, setKeys: ["c": Set((0..<25).map { "k\($0)" })], connectionName: "w")
        #expect(many.description.hasSuffix(", and 15 more]"))
        #expect(many.description.count < 200)
        #expect(Changeset(commit: 9, isExternal: true).description.contains("outside this database"))
    }

    @Test func checkpointStatusNamesWhoPinsTheWAL() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            try writer.readWrite { try $0.set(Item(title: "a"), forKey: "a", inCollection: "c") }
            try ui.beginLongLivedReadTransaction()
            try writer.readWrite { try $0.set(Item(title: "b"), forKey: "b", inCollection: "c") }
            let status = db.checkpointStatus()
            #expect(status.description.contains("at commit 2"))
            #expect(status.description.contains("connection 'ui' (bookmark at commit 1, 1 commits behind"))
            let pin = try #require(status.laggingSnapshots.first)
            #expect(pin.description.hasPrefix("connection 'ui' (bookmark at commit 1"))
        }
    }
}
