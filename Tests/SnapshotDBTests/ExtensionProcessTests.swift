import Foundation
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDB

/// Extensions shared by processes that do not all keep them: a write by a process that does
/// not maintain an extension marks it stale (never silently), and two versions registered by
/// two processes are a typed conflict naming both.
@Suite("Extensions across processes")
struct ExtensionProcessTests {
    static let childKey = "SNAPSHOTDB_EXTENSION_PROCESS_CHILD"

    /// The same view in a second version (another order), as another build of the app would
    /// register it.
    static let byTitleV2 = View<Note>(
        name: "byTitle", version: "2", collections: ["notes"],
        group: { _, _, note in note.archived ? nil : note.folder },
        areInIncreasingOrder: { $0.title > $1.title })

    /// The child: writes one note, in a process that registers nothing ("bare") or the view's
    /// version 2 ("v2"), and one value outside the view's collections.
    @Test(.enabled(if: ProcessInfo.processInfo.environment[childKey] != nil))
    func childWritesNotes() throws {
        let parts = try #require(ProcessInfo.processInfo.environment[Self.childKey]).split(separator: "|")
        let db = try Database(path: String(parts[0]))
        if parts[1] == "v2" { try db.register(Self.byTitleV2) }
        let writer = db.newConnection(name: "other-app")
        try writer.readWrite { try $0.set(Item(title: "elsewhere"), forKey: "x", inCollection: "other") }
        reportResult("after-other", "\(db.latestCommit)")
        try writer.readWrite {
            try $0.set(
                Note(title: "m", folder: "inbox", archived: false), forKey: "child", inCollection: "notes")
        }
        reportResult("pid", "\(getpid())")
        reportResult("commit", "\(db.latestCommit)")
    }

    static func runChild(_ path: String, _ mode: String) throws -> ChildTestReport {
        let child = try runChildTest("childWritesNotes", environmentKey: childKey, path: "\(path)|\(mode)")
        #expect(child.terminationStatus == 0, "\(child.output)")
        return child
    }

    @Test func aProcessThatDoesNotKeepAViewMarksItStaleAndRegisteringAgainRebuildsIt() throws {
        try withTemporaryDatabase { db throws in
            try db.register(ViewTests.byTitle)
            let writer = db.newConnection(name: "writer")
            try writer.readWrite {
                try $0.set(
                    Note(title: "a", folder: "inbox", archived: false), forKey: "n1", inCollection: "notes")
            }
            let child = try Self.runChild(db.path, "bare")
            let pid = try #require(child.results["pid"])
            let commit = try #require(child.results["commit"])
            let reader = db.newConnection(name: "reader")
            // The child's write outside the view's collections did not mark it; its note did.
            let error = expectError(.extensionStale) { try reader.read { try $0.view(named: "byTitle") } }
            #expect(error?.message.contains("since commit \(commit)") == true, "\(String(describing: error))")
            #expect(error?.message.contains("process \(pid) (connection 'other-app')") == true)
            // This process keeps the view: its own writes go on, and the view stays stale.
            try writer.readWrite {
                try $0.set(
                    Note(title: "b", folder: "work", archived: false), forKey: "n2", inCollection: "notes")
            }
            expectError(.extensionStale) { try reader.read { try $0.view(named: "byTitle") } }
            let bookmarked = db.newConnection(name: "bookmarked")
            try bookmarked.beginLongLivedReadTransaction()
            // Registering the same version again rebuilds it from the values.
            try db.register(ViewTests.byTitle)
            // A bookmark from before the rebuild is told to advance (registering again would
            // change nothing: the newest state is not stale).
            let behind = expectError(.extensionStale) {
                try bookmarked.read { try $0.view(named: "byTitle") }
            }
            #expect(
                behind?.message.contains("was rebuilt at commit \(db.latestCommit); advance the bookmark")
                    == true,
                "\(String(describing: behind))")
            try bookmarked.beginLongLivedReadTransaction()
            #expect(
                try bookmarked.read { try $0.view(named: "byTitle").items(inGroup: "work").map(\.key) } == [
                    "n2"
                ])
            try reader.read { txn in
                let view = try txn.view(named: "byTitle")
                #expect(ViewTests.rows(view) == (try ViewTests.expectedRows(txn)))
                #expect(view.items(inGroup: "inbox").map(\.key) == ["n1", "child"])
            }
        }
    }

    /// A process that registers a view the file already holds, after it wrote, keeps the view
    /// from its next write on: the writer's upkeep check (which it caches while neither the
    /// file's catalog nor the registry changes) sees the registration, though the file's schema
    /// did not change.
    @Test func aViewRegisteredAfterAWriteIsKeptByTheNextWrite() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("db.sqlite").path
            do {
                let db = try Database(path: path)
                try db.register(ViewTests.byTitle)
                try db.newConnection().readWrite {
                    try $0.set(
                        Note(title: "a", folder: "inbox", archived: false), forKey: "n1",
                        inCollection: "notes")
                }
            }
            let db = try Database(path: path)
            let writer = db.newConnection(name: "writer")
            // Nothing registered yet: a write outside the view's collections leaves it alone.
            try writer.readWrite { try $0.set(Item(title: "x"), forKey: "x", inCollection: "other") }
            let schema = try sqlite3(path, "PRAGMA schema_version")
            try db.register(ViewTests.byTitle)
            // The same version, not stale: kept as it is, no table made again.
            #expect(try sqlite3(path, "PRAGMA schema_version") == schema)
            try writer.readWrite {
                try $0.set(
                    Note(title: "b", folder: "inbox", archived: false), forKey: "n2", inCollection: "notes")
            }
            try db.newConnection().read { txn throws in
                let view = try txn.view(named: "byTitle")
                #expect(view.items(inGroup: "inbox").map(\.key) == ["n1", "n2"])
                #expect(ViewTests.rows(view) == (try ViewTests.expectedRows(txn)))
            }
        }
    }

    @Test func twoVersionsInTwoProcessesAreATypedConflictNamingBoth() throws {
        try withTemporaryDatabase { db throws in
            try db.register(ViewTests.byTitle)
            let writer = db.newConnection(name: "writer")
            try writer.readWrite {
                try $0.set(
                    Note(title: "a", folder: "inbox", archived: false), forKey: "n1", inCollection: "notes")
            }
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            let child = try Self.runChild(db.path, "v2")
            let pid = try #require(child.results["pid"])
            // The advance does not help: the file holds the other version.
            try ui.beginLongLivedReadTransaction()
            let error = expectError(.extensionConflict) { try ui.read { try $0.view(named: "byTitle") } }
            let message = error?.message ?? ""
            #expect(message.contains("version '2' in the file"), "\(message)")
            #expect(message.contains("version '1'"))
            #expect(message.contains("process \(pid)"))
            // This process's writes do not write its version's rows into the other version's
            // tables: they mark the file's version stale instead.
            try writer.readWrite {
                try $0.set(
                    Note(title: "b", folder: "inbox", archived: false), forKey: "n2", inCollection: "notes")
            }
            let stale = try sqlite3(
                db.path,
                "SELECT stale_process, stale_connection FROM snapshotdb_extension_state WHERE name = 'byTitle'"
            )
            #expect(stale == "\(getpid())|writer\n")
            // Registering here again makes the file's version this one's, rebuilt.
            try db.register(ViewTests.byTitle)
            try ui.beginLongLivedReadTransaction()
            try ui.read { txn throws in
                let view = try txn.view(named: "byTitle")
                #expect(ViewTests.rows(view) == (try ViewTests.expectedRows(txn)))
            }
        }
    }
}
