import Foundation
import SnapshotDBLocking
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDB

/// A second process serving reads from a Litestream replica through Litestream's VFS (PyPI's
/// `litestream-vfs`, which `.ci/run` installs): bookmarks on the replica keep their commit while
/// the replica advances, then advance with the primary's exact changesets.
@Suite("Read replicas through Litestream's VFS", .hangLimit)
struct ReadReplicaTests {
    static let childKey = "SNAPSHOTDB_REPLICA_CHILD"

    /// The VFS library of PyPI's `litestream-vfs`, when it is installed.
    static let vfsLibrary: String? = {
        guard
            let result = try? ChildProcess.run(
                "/usr/bin/env",
                ["python3", "-c", "import litestream_vfs; print(litestream_vfs.loadable_path())"]),
            result.status == 0
        else { return nil }
        let path = result.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines)
        return FileManager.default.fileExists(atPath: path) ? path : nil
    }()

    @Test func litestreamsVFSIsThereWhereItIsRequired() {
        #expect(
            !LitestreamTests.required || Self.vfsLibrary != nil,
            "install it: pip install litestream-vfs==0.5.17")
    }

    /// What a reader sees at its commit: every note and the view's rows, in one string.
    static func digest(_ txn: ReadTransaction) throws -> String {
        let notes = try txn.values(inCollection: "notes", as: Note.self).sorted { $0.key < $1.key }
            .map { "\($0.key)=\($0.value.title)/\($0.value.folder)" }
        let view = try txn.view(named: "byTitle")
        let rows = view.groups.map { group in
            "\(group):" + view.items(inGroup: group).map(\.key).joined(separator: ",")
        }
        return "\(txn.commit);" + notes.joined(separator: ",") + ";" + rows.joined(separator: "|")
    }

    /// One changeset as the child prints it and the parent expects it.
    static func describe(_ changeset: Changeset) -> String {
        let set = (changeset.setKeys["notes"] ?? []).sorted().joined(separator: "+")
        let removed = (changeset.removedKeys["notes"] ?? []).sorted().joined(separator: "+")
        let keys = set + "-" + removed
        return
            "\(changeset.commit)/\(changeset.connectionName ?? "?")/\(changeset.info["index"] ?? "")/\(keys)/\(changeset.isExternal)"
    }

    /// A bookmark on a replica from before the primary built a new version of a view, which the
    /// replica then takes up, is told to advance (the replica records the build's commit from the
    /// file), not that another registration conflicts; after advancing it reads the new version.
    @Test func aReplicaBookmarkFromBeforeANewVersionIsToldToAdvance() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("primary.sqlite").path
            let db = try Database(path: path)
            try db.register(ViewTests.byTitle)
            try LitestreamTests.writeNotes(db.newConnection(name: "writer"), 0..<10)
            let replica = try Database(replica: path, vfs: "unix")
            try replica.register(ViewTests.byTitle)
            let ui = replica.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            let snapshot = db.latestCommit
            let descending = View<Note>(
                name: "byTitle", version: "2", collections: ["notes"],
                group: { _, _, note in note.archived ? nil : note.folder },
                areInIncreasingOrder: { $0.title > $1.title })
            var updates = replica.changes().makeAsyncIterator()
            try db.register(descending)
            while let next = await updates.next(), next.commit < db.latestCommit {}
            try replica.register(descending)
            let error = expectError(.unknownExtension) { try ui.read { try $0.view(named: "byTitle") } }
            #expect(
                error?.message.contains("was built at commit \(snapshot + 1), after the snapshot") == true,
                "\(error as Any)")
            try ui.beginLongLivedReadTransaction()
            let titles = try await ui.read { txn in
                try txn.view(named: "byTitle").items(inGroup: "inbox").map {
                    try txn.value(forKey: $0.key, inCollection: "notes", as: Note.self)?.title ?? ""
                }
            }
            #expect(!titles.isEmpty && titles == titles.sorted(by: >))
            try replica.close()
            try db.close()
        }
    }

    /// The replica mode itself, through SQLite's own `unix` VFS on a live primary file: reads,
    /// bookmarks that advance with exact changesets on the watcher's polls, extensions taken up
    /// from the primary, and every write refused with `readOnly`, nothing changed.
    @Test func aReplicaReadsLikeThePrimaryAndRefusesEveryWrite() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("primary.sqlite").path
            let db = try Database(path: path)
            try db.register(ViewTests.byTitle)
            let writer = db.newConnection(name: "writer")
            try LitestreamTests.writeNotes(writer, 0..<10)
            let replica = try Database(replica: path, vfs: "unix")
            #expect(replica.isReplica && !db.isReplica)
            #expect(replica.path == "unix:" + path)
            #expect(replica.latestCommit == db.latestCommit)
            #expect(replica.identity == db.identity)
            try replica.register(ViewTests.byTitle)
            let notBuilt = View<Note>(
                name: "byFolder", version: "1", collections: ["notes"], group: { _, _, note in note.folder },
                areInIncreasingOrder: { $0.title < $1.title })
            let refusal = expectError(.readOnly) { try replica.register(notBuilt) }
            #expect(refusal?.message.contains("register it on the primary") == true)
            #expect(replica.registeredExtensions == ["byTitle"])

            let ui = replica.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            let first = db.latestCommit
            let firstDigest = try await ui.read { try Self.digest($0) }
            #expect(firstDigest == (try await writer.read { try Self.digest($0) }))
            let oldRows = try await ui.read { ViewTests.rows(try $0.view(named: "byTitle")) }

            // The replica's watcher polls: a primary commit reaches `changes()` with its keys.
            var updates = replica.changes().makeAsyncIterator()
            try LitestreamTests.writeNotes(writer, 10..<14)
            var heard: [Changeset] = []
            while heard.last?.commit != db.latestCommit, let next = await updates.next() {
                heard.append(next)
            }
            #expect(heard.map(\.commit) == Array(first + 1...db.latestCommit))
            #expect(try await ui.read { try Self.digest($0) } == firstDigest, "the bookmark kept its commit")
            let changes = try ui.beginLongLivedReadTransaction()
            #expect(changes.map(Self.describe) == heard.map(Self.describe))
            #expect(changes.allSatisfy { !$0.isExternal && $0.connectionName == "writer" })
            #expect(
                try await ui.read { try Self.digest($0) } == (try await writer.read { try Self.digest($0) }))
            let replayed = try await ui.read { txn in
                let view = try txn.view(named: "byTitle")
                return ViewTests.apply(try view.changes(for: changes), to: oldRows) == ViewTests.rows(view)
            }
            #expect(replayed)

            // Nothing writes: each way of writing says so, and the file is unchanged.
            let before = try sqlite3(path, "SELECT count(*), max(number) FROM snapshotdb_history")
            let other = replica.newConnection(name: "writer")
            expectError(.readOnly) { try other.readWrite { try $0.set(1, forKey: "k", inCollection: "c") } }
            expectError(.readOnly) { try replica.checkpoint(.passive) }
            expectError(.readOnly) { try replica.vacuum() }
            expectError(.readOnly) { try replica.purgeHistory() }
            expectError(.readOnly) { try replica.unregister("byTitle") }
            expectError(.readOnly) { try replica.consumer(named: "indexer") }
            #expect(try sqlite3(path, "SELECT count(*), max(number) FROM snapshotdb_history") == before)

            // A backup of a replica is a local SnapshotDB file at the replica's commit.
            let copyPath = directory.appendingPathComponent("copy.sqlite").path
            #expect(try replica.backup(to: copyPath) == db.latestCommit)
            try replica.close()
            let copy = try Database(path: copyPath)
            try copy.register(ViewTests.byTitle)
            #expect(
                try await copy.newConnection(name: "copy").read { try Self.digest($0) }
                    == (try await writer.read { try Self.digest($0) }))
        }
    }

    /// A position taken on the primary at a commit its replica has not reached yet is not
    /// another history: the replica says `historyUnavailable` (advance later), and answers once
    /// it has the commit. (The replica here is a copy of the primary, as a restore makes it.)
    @Test func aPositionAheadOfTheReplicaIsUnavailableNotAMismatch() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("primary.sqlite").path
            let copyPath = directory.appendingPathComponent("replica.sqlite").path
            let db = try Database(path: path)
            let writer = db.newConnection(name: "writer")
            try LitestreamTests.writeNotes(writer, 0..<3)
            let start = try writer.read { try $0.position() }
            try db.close()
            try FileManager.default.copyItem(atPath: path, toPath: copyPath)
            let primary = try Database(path: path)
            try LitestreamTests.writeNotes(primary.newConnection(name: "writer"), 3..<5)
            let ahead = try primary.newConnection(name: "reader").read { try $0.position() }
            try primary.close()

            let replica = try Database(replica: copyPath, vfs: "unix")
            let reader = replica.newConnection(name: "reader")
            let error = expectError(.historyUnavailable) { try reader.read { try $0.changes(after: ahead) } }
            #expect(error?.message.contains("not be replicated yet") == true, "\(String(describing: error))")
            #expect(try reader.read { try $0.changes(after: start) }.isEmpty)
            try replica.close()

            // Caught up (the primary's file copied over the replica's): the position answers.
            try FileManager.default.removeItem(atPath: copyPath)
            try FileManager.default.copyItem(atPath: path, toPath: copyPath)
            let caughtUp = try Database(replica: copyPath, vfs: "unix")
            let changes = try caughtUp.newConnection(name: "reader").read { try $0.changes(after: start) }
            #expect(changes.map(\.commit) == [ahead.commit - 1, ahead.commit])
            #expect(try caughtUp.newConnection(name: "reader").read { try $0.changes(after: ahead) }.isEmpty)
            try caughtUp.close()
        }
    }

    /// A replica's snapshot of its primary put back to an older commit, at the number the replica
    /// published with another history token (read as unsealed, to drop the cache), is a whole
    /// commit of the primary: no unnumbered foreign writes. A foreign write on the primary that
    /// the primary has not numbered yet is one, on the replica too.
    @Test func aPutBackSnapshotOnAReplicaHasNoUnnumberedForeignWrites() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("primary.sqlite").path
            let backup = directory.appendingPathComponent("backup.sqlite").path
            var db = try Database(path: path)
            try LitestreamTests.writeNotes(db.newConnection(name: "writer"), 0..<2)
            try run("/usr/bin/sqlite3", [path, ".backup '\(backup)'"])
            try LitestreamTests.writeNotes(db.newConnection(name: "writer"), 2..<3)
            let replica = try Database(replica: path, vfs: "unix")
            let seen = try replica.newConnection(name: "first").read { $0.commit }
            #expect(seen == db.latestCommit)
            try db.close()
            try run("/usr/bin/sqlite3", [path, ".restore '\(backup)'"])
            db = try Database(path: path)
            try LitestreamTests.writeNotes(db.newConnection(name: "writer"), 10..<11)
            #expect(db.latestCommit == seen)
            // A new connection (no cache to compare): the log's token for that number tells.
            let fresh = replica.newConnection(name: "fresh")
            #expect(try fresh.read { ($0.commit, $0.hasUnnumberedForeignWrites) } == (seen, false))
            // A foreign write on the primary, not numbered while the primary holds its writer
            // lock: unnumbered on the replica as well.
            try db.close()
            let child = try SQLiteChild(
                path: path,
                statements: [
                    "INSERT INTO snapshotdb_values(collection, key, data) VALUES ('c', 'foreign', x'7B7D')",
                    "BEGIN IMMEDIATE",
                ])
            #expect(try replica.newConnection(name: "later").read { $0.hasUnnumberedForeignWrites })
            try child.release()
            try replica.close()
        }
    }

    /// A replica whose primary was put back to an older commit (a point-in-time restore) and
    /// went on with other commits under the same numbers: no read is answered from the old
    /// history, and no advance reports its changesets. Connections whose caches hold the old
    /// history meet the new one at the same number (told apart by the history rows' tokens),
    /// at a higher one, at a lower one (a connection follows the replica forward only), or
    /// past the newest commit the replica had published; each advance into it is external, and
    /// commits are exact again after. (The cache once kept values the new history had changed.)
    /// Subscribers: the next test.
    @Test func aReplicaOfAPrimaryPutBackToAnOlderCommitNeverAnswersFromTheOldHistory() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("primary.sqlite").path
            let backup = directory.appendingPathComponent("backup.sqlite").path
            func set(_ writer: Connection, _ key: String, _ title: String, folder: String = "inbox") throws {
                try writer.readWrite {
                    try $0.set(
                        Note(title: title, folder: folder, archived: false), forKey: key,
                        inCollection: "notes")
                }
            }
            // The values, after checking that the view's rows (its layout is cached per commit)
            // are those of the values.
            func titles(_ connection: Connection) throws -> [String: String] {
                try connection.read { txn in
                    var titles: [String: String] = [:]
                    for key in ["n0", "n1", "n2", "n3", "n4"] {
                        titles[key] = try txn.value(forKey: key, inCollection: "notes", as: Note.self)?.title
                    }
                    let view = try txn.view(named: "byTitle")
                    #expect(
                        ViewTests.rows(view) == (try ViewTests.expectedRows(txn)),
                        "\(connection.name) at \(txn.commit): the view is not its values'")
                    return titles
                }
            }
            func commit(_ connection: Connection) throws -> UInt64 { try connection.read { $0.commit } }
            func isExternal(_ changesets: [Changeset]) -> Bool {
                !changesets.isEmpty && changesets.allSatisfy(\.isExternal)
            }
            var db = try Database(path: path)
            try db.register(ViewTests.byTitle)
            var writer = db.newConnection(name: "writer")
            try set(writer, "n0", "a")
            try set(writer, "n1", "a")
            let putBack = db.latestCommit
            try run("/usr/bin/sqlite3", [path, ".backup '\(backup)'"])

            let replica = try Database(replica: path, vfs: "unix")
            try replica.register(ViewTests.byTitle)
            let same = replica.newConnection(name: "same")  // meets the new history at its number
            let forward = replica.newConnection(name: "forward")  // at a higher number
            let reader = replica.newConnection(name: "reader")  // plain reads, at its number
            let back = replica.newConnection(name: "back")  // at a lower number
            let newest = replica.newConnection(name: "newest")  // at the newest number published
            for connection in [same, forward, back, newest] { try connection.beginLongLivedReadTransaction() }
            // Another replica of it (through a link: one replica of one name per process), whose
            // jumper next meets the new history past the newest commit its replica published.
            let link = directory.appendingPathComponent("link.sqlite").path
            try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: path)
            let otherReplica = try Database(replica: link, vfs: "unix")
            try otherReplica.register(ViewTests.byTitle)
            let jumper = otherReplica.newConnection(name: "jumper")
            let follower = otherReplica.newConnection(name: "follower")
            try jumper.beginLongLivedReadTransaction()
            // A third, whose only connection first meets the new history at a higher number.
            let secondLink = directory.appendingPathComponent("second-link.sqlite").path
            try FileManager.default.createSymbolicLink(atPath: secondLink, withDestinationPath: path)
            let thirdReplica = try Database(replica: secondLink, vfs: "unix")
            try thirdReplica.register(ViewTests.byTitle)
            let ahead = thirdReplica.newConnection(name: "ahead")
            try ahead.beginLongLivedReadTransaction()

            try set(writer, "n1", "old")
            for connection in [same, forward, jumper, ahead] {
                #expect(try connection.beginLongLivedReadTransaction().map(\.setKeys) == [["notes": ["n1"]]])
                #expect(try titles(connection) == ["n0": "a", "n1": "old"])  // cached
            }
            #expect(try titles(reader) == ["n0": "a", "n1": "old"])
            for key in ["n2", "n3"] { try set(writer, key, "old") }
            let published = db.latestCommit
            for connection in [back, newest] {
                #expect(try connection.beginLongLivedReadTransaction().count == 3)
                #expect(try titles(connection) == ["n0": "a", "n1": "old", "n2": "old", "n3": "old"])
            }
            try follower.beginLongLivedReadTransaction()  // the other replica publishes them too
            #expect(otherReplica.latestCommit == published)
            try thirdReplica.newConnection(name: "follower").beginLongLivedReadTransaction()
            #expect(thirdReplica.latestCommit == published)

            // Following the primary takes no new handle.
            for connection in [same, forward, reader, back, newest, jumper, ahead] {
                #expect(connection.replicaHandlesReopened == 0, "\(connection.name)")
            }

            // Put back, and on with other commits under the same numbers.
            try db.close()
            try run("/usr/bin/sqlite3", [path, ".restore '\(backup)'"])
            db = try Database(path: path)
            try db.register(ViewTests.byTitle)
            writer = db.newConnection(name: "writer")
            try set(writer, "n0", "new")  // commit putBack + 1 set n1 in the old history
            #expect(db.latestCommit == putBack + 1)
            let first = ["n0": "new", "n1": "a"]
            #expect(isExternal(try same.beginLongLivedReadTransaction()))
            #expect(try commit(same) == putBack + 1)
            // A whole commit of the put-back primary, read as unsealed to drop the cache: no
            // unnumbered foreign writes.
            #expect(try same.read { $0.hasUnnumberedForeignWrites } == false)
            #expect(try reader.read { $0.hasUnnumberedForeignWrites } == false)
            #expect(try titles(same) == first)
            #expect(try titles(reader) == first)

            try set(writer, "n4", "new")  // putBack + 2 set n2
            let second = ["n0": "new", "n1": "a", "n4": "new"]
            for connection in [ahead, forward, back] {
                #expect(isExternal(try connection.beginLongLivedReadTransaction()))
                #expect(try commit(connection) == putBack + 2)
                #expect(try titles(connection) == second)
            }
            #expect(try titles(replica.newConnection(name: "fresh")) == second)

            try set(writer, "n2", "new", folder: "work")  // the newest commit the replica published, again
            #expect(db.latestCommit == published)
            // A new connection at that number first: the layout of the view published for it is
            // the old history's.
            #expect(
                try titles(replica.newConnection(name: "first")) == [
                    "n0": "new", "n1": "a", "n2": "new", "n4": "new",
                ])
            #expect(isExternal(try newest.beginLongLivedReadTransaction()))
            #expect(try titles(newest) == ["n0": "new", "n1": "a", "n2": "new", "n4": "new"])

            // Past it: external once, then exact.
            try set(writer, "n3", "new")
            #expect(db.latestCommit == published + 1)
            let everything = ["n0": "new", "n1": "a", "n2": "new", "n3": "new", "n4": "new"]
            for connection in [same, forward, back, newest, jumper] {
                let past = try connection.beginLongLivedReadTransaction()
                #expect(isExternal(past) && past.last?.commit == published + 1, "\(connection.name): \(past)")
                #expect(try titles(connection) == everything)
            }
            #expect(try titles(reader) == everything)
            try set(writer, "n1", "last")
            for connection in [same, forward, back, newest, jumper] {
                let exact = try connection.beginLongLivedReadTransaction()
                #expect(exact.map(\.commit) == [published + 2])
                #expect(exact.first?.isExternal == false)
                #expect(exact.first?.setKeys == ["notes": ["n1"]])
                #expect(try titles(connection)["n1"] == "last")
            }
            // Once the put-back was seen, each connection took a new handle (those of
            // Litestream's VFS open across it may have stopped following), once per mark.
            for connection in [same, forward, reader, back, newest, jumper, ahead] {
                #expect(
                    connection.replicaHandlesReopened == 1,
                    "\(connection.name): \(connection.replicaHandlesReopened)")
            }
            try otherReplica.close()
            try thirdReplica.close()
            try replica.close()
            try db.close()
        }
    }

    /// The subscribers of a replica whose primary was put back: its watcher alone (no connection
    /// reads) ends every `changes()` stream when the commit it sees goes down, and again at each
    /// new commit under a number already published, so a subscriber that subscribes again and
    /// reads (as `observe(forKey:)` does by itself) sees every new value as it comes, under the
    /// old numbers and past them. (Before, they heard nothing until the primary passed the old
    /// numbers.)
    @Test func aPutBackPrimaryWakesTheReplicasSubscribersAtEveryCommit() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("primary.sqlite").path
            let backup = directory.appendingPathComponent("backup.sqlite").path
            func set(_ writer: Connection, _ key: String, _ title: String) throws {
                try writer.readWrite {
                    try $0.set(
                        Note(title: title, folder: "inbox", archived: false), forKey: key,
                        inCollection: "notes")
                }
            }
            var db = try Database(path: path)
            var writer = db.newConnection(name: "writer")
            try set(writer, "n0", "a")
            try set(writer, "n1", "a")
            let putBack = db.latestCommit
            try run("/usr/bin/sqlite3", [path, ".backup '\(backup)'"])
            for key in ["n2", "n3"] { try set(writer, key, "old") }

            let replica = try Database(replica: path, vfs: "unix")
            let first = replica.changes()
            // An observer hears every changeset, and at each wake an external one numbered with
            // the replica's commit, lower than those before.
            let observerQueue = DispatchQueue(label: "observer")
            let observed = Mutex<[Changeset]>([])
            let observer = replica.addObserver(on: observerQueue) { changeset in
                observed.withLock { $0.append(changeset) }
            }
            // A commit the watcher publishes: it has looked at the file, and at that commit.
            try set(writer, "n4", "old")
            let published = db.latestCommit
            #expect(await Self.next(first)?.commit == published)

            // Put back: the stream ends, with nothing under the numbers it had.
            try db.close()
            try run("/usr/bin/sqlite3", [path, ".restore '\(backup)'"])
            let ended = await Self.untilEnded(first)
            #expect(ended == [], "the stream did not end: \(String(describing: ended))")

            // An observer of one key (it subscribes again whenever its stream ends) sees every new
            // value, commit by commit, under the old numbers and past them.
            let titles = AsyncStream<String?>.makeStream()
            let observing = Task {
                for try await note in replica.observe(forKey: "n9", inCollection: "notes", as: Note.self) {
                    titles.continuation.yield(note?.title)
                }
            }
            #expect(await Self.next(titles.stream) == .some(nil))
            db = try Database(path: path)
            writer = db.newConnection(name: "writer")
            var past: AsyncStream<Changeset>?
            for number in putBack + 1...published + 2 {
                // Subscribed before the first commit past the old numbers: it goes on from there.
                if number == published + 1 { past = replica.changes() }
                try set(writer, "n9", "t\(number)")
                #expect(db.latestCommit == number)
                #expect(await Self.next(titles.stream) == "t\(number)", "commit \(number)")
            }
            observing.cancel()
            // Past the old numbers a stream goes on: one external changeset, then exact ones.
            if let past {
                let external = await Self.next(past)
                #expect(
                    external?.commit == published + 1 && external?.isExternal == true,
                    "\(String(describing: external))")
                let exact = await Self.next(past)
                #expect(
                    exact?.commit == published + 2 && exact?.isExternal == false,
                    "\(String(describing: exact))")
            }
            observerQueue.sync {}
            let heard = observed.withLock { $0 }
            #expect(
                heard.map(\.commit) == [published] + Array(putBack...published + 2), "\(heard.map(\.commits))"
            )
            #expect(
                heard.map(\.isExternal) == [false]
                    + Array(repeating: true, count: Int(published - putBack) + 2) + [false])
            observer.cancel()
            try replica.close()
            try db.close()
        }
    }

    /// A put-back a connection noticed first, then a commit under an old number before the
    /// watcher's first look: the watcher (which starts from the newest commit published) sees its
    /// commit go down, and wakes the subscribers for that commit although the log was marked
    /// already. (Before, it found the mark not new and said nothing.)
    @Test func theWatcherWakesSubscribersAfterAConnectionMarkedThePutBackFirst() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("primary.sqlite").path
            let backup = directory.appendingPathComponent("backup.sqlite").path
            var db = try Database(path: path)
            try await db.newConnection(name: "writer").readWrite {
                try $0.set(1, forKey: "a", inCollection: "c")
            }
            let putBack = db.latestCommit
            try run("/usr/bin/sqlite3", [path, ".backup '\(backup)'"])
            for index in 0..<3 {
                try await db.newConnection(name: "writer").readWrite {
                    try $0.set(index, forKey: "b", inCollection: "c")
                }
            }
            let replica = try Database(replica: path, vfs: "unix")
            let reader = replica.newConnection(name: "reader")
            #expect(try await reader.read { $0.commit } == putBack + 3)
            try db.close()
            try run("/usr/bin/sqlite3", [path, ".restore '\(backup)'"])
            #expect(try await reader.read { $0.commit } == putBack)  // marks the log, at the put-back
            db = try Database(path: path)
            try await db.newConnection(name: "writer").readWrite {
                try $0.set(2, forKey: "a", inCollection: "c")
            }
            // Subscribed now: the watcher's first look sees putBack + 1, below putBack + 3.
            let stream = replica.changes()
            let ended = await Self.untilEnded(stream)
            #expect(ended == [], "the stream did not end: \(String(describing: ended))")
            try replica.close()
            try db.close()
        }
    }

    /// The next element of `stream`, or `nil` when none comes within 60 s.
    static func next<Element: Sendable>(_ stream: AsyncStream<Element>) async -> Element? {
        await withinTimeLimit {
            var iterator = stream.makeAsyncIterator()
            return await iterator.next()
        } ?? nil
    }

    /// What `stream` yields until it ends, or `nil` when it has not ended within 60 s.
    static func untilEnded(_ stream: AsyncStream<Changeset>) async -> [Changeset]? {
        await withinTimeLimit {
            var heard: [Changeset] = []
            for await changeset in stream { heard.append(changeset) }
            return heard
        }
    }

    /// A replica opens only through a registered VFS, on a SnapshotDB file of this schema, once
    /// per process; Litestream's VFS needs its URL in the environment the process started with.
    @Test func openingAReplicaSaysWhatIsMissing() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("primary.sqlite").path
            let db = try Database(path: path)
            let missing = expectError(.cannotOpen) { try Database(replica: path, vfs: "nosuch") }
            #expect(missing?.message.contains("no SQLite VFS named 'nosuch'") == true)
            expectError(.cannotOpen) { try Database(replica: "", vfs: "unix") }
            let replica = try Database(replica: path, vfs: "unix")
            expectError(.alreadyOpen) { try Database(replica: path, vfs: "unix") }
            try replica.close()
            try db.close()

            let foreign = directory.appendingPathComponent("foreign.sqlite").path
            try sqlite3(foreign, "CREATE TABLE t(x); PRAGMA journal_mode = WAL;")
            expectError(.notADatabase) { try Database(replica: foreign, vfs: "unix") }
            let older = directory.appendingPathComponent("older.sqlite").path
            try sqlite3(older, OlderSchemas.version2 + " PRAGMA journal_mode = WAL;")
            let upgrade = expectError(.readOnly) { try Database(replica: older, vfs: "unix") }
            #expect(upgrade?.message.contains("open the primary once") == true)
        }
        if LitestreamVFS.startEnvironment()["LITESTREAM_REPLICA_URL"] == nil {
            let error = expectError(.misuse) {
                try LitestreamVFS.register(extensionPath: "/nonexistent/litestream-vfs")
            }
            #expect(error?.message.contains("environment the process started with") == true)
        }
    }

    @Test(.enabled(if: LitestreamTests.litestream != nil && ReadReplicaTests.vfsLibrary != nil))
    func aSecondProcessReadsTheReplicaWithBookmarksThatAdvanceWithExactChangesets() throws {
        let tool = try #require(LitestreamTests.litestream)
        let library = try #require(Self.vfsLibrary)
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("primary.sqlite").path
            let replica = directory.appendingPathComponent("replica").path
            let db = try Database(path: path)
            try db.register(ViewTests.byTitle)
            let writer = db.newConnection(name: "writer")
            try LitestreamTests.writeNotes(writer, 0..<20)
            let config = try Self.writeLitestreamConfig(in: directory, path: path, replica: replica)
            let litestream = try ChildProcess(tool, ["replicate", "-config", config], outputToFile: true)
            defer { LitestreamTests.stop(litestream) }
            try LitestreamTests.waitForTables(path)
            try LitestreamTests.writeNotes(writer, 20..<30)
            let first = db.latestCommit
            let primary = db.newConnection(name: "primary-reader")
            try primary.beginLongLivedReadTransaction()
            let firstDigest = try primary.read { try Self.digest($0) }

            let child = try Self.startChild(
                "childServesReadsFromTheReplica", library: library, replica: replica, in: directory,
                environment: [Self.childKey + "_COPY": directory.appendingPathComponent("copy.sqlite").path])
            defer { child.kill() }
            func answer(_ prefix: String) throws -> String { try Self.answer(prefix, from: child) }
            #expect(try answer("secondName") == "refused")
            // The replica reaches the first batch; the child bookmarks it and reads what the
            // primary read at that commit.
            try child.send("bookmark \(first)")
            #expect(try answer("bookmarked") == firstDigest)

            // The primary goes on; the replica follows; the child's bookmark keeps its commit
            // until it advances, then gets each commit's exact changeset and the rows replayed.
            try LitestreamTests.writeNotes(writer, 30..<45)
            try writer.readWrite { txn in
                try txn.removeValue(forKey: "n3", inCollection: "notes")
                txn.info = ["index": "removal"]
            }
            let last = db.latestCommit
            let changes = try primary.beginLongLivedReadTransaction()
            let lastDigest = try primary.read { try Self.digest($0) }
            try child.send("advance \(last)")
            #expect(try answer("held") == firstDigest, "the bookmark moved while the replica advanced")
            #expect(try answer("changesets") == changes.map(Self.describe).joined(separator: " "))
            #expect(try answer("advanced") == lastDigest)
            #expect(try answer("rowsReplayed") == "true")
            let write = try answer("write")
            #expect(write.hasPrefix("readOnly: a read-write transaction would write"), "\(write)")
            // A backup of the replica is a local SnapshotDB file at the replica's commit.
            #expect(try answer("backup") == "\(last)")
            #expect(try answer("closed") == "true")
            let copy = try Database(path: directory.appendingPathComponent("copy.sqlite").path)
            try copy.register(ViewTests.byTitle)
            #expect(try copy.newConnection(name: "copy").read { try Self.digest($0) } == lastDigest)
            #expect(child.finish() == 0, "\(child.standardError)")
        }
    }

    /// A primary put back to an older commit (a point-in-time restore of its replica moved
    /// over it, Litestream started again on it) that goes on past the numbers the replica had
    /// seen, under a reader through Litestream's VFS in another process. The VFS (0.5.17) stops
    /// following on the connections open across the put-back (it logs "non-contiguous ltx
    /// file") while new ones read on: the replica takes a new handle for a connection whose
    /// snapshot stays behind what another handle published, and for every connection once the
    /// put-back is seen, and its watcher by the same rule and after 5 seconds without a new commit.
    /// The child's bookmark advances into the new history with an external changeset, its
    /// values and view are the primary's, its `changes()` stream ended or said external, and
    /// its connection took a new handle.
    @Test(.enabled(if: LitestreamTests.litestream != nil && ReadReplicaTests.vfsLibrary != nil))
    func aReplicaThroughTheVFSFollowsAPrimaryPutBackToAnOlderCommit() throws {
        let tool = try #require(LitestreamTests.litestream)
        let library = try #require(Self.vfsLibrary)
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("primary.sqlite").path
            let replica = directory.appendingPathComponent("replica").path
            var db = try Database(path: path)
            try db.register(ViewTests.byTitle)
            try LitestreamTests.writeNotes(db.newConnection(name: "writer"), 0..<20)
            let firstBatch = db.latestCommit
            let config = try Self.writeLitestreamConfig(in: directory, path: path, replica: replica)
            var litestream = try ChildProcess(tool, ["replicate", "-config", config], outputToFile: true)
            defer { LitestreamTests.stop(litestream) }
            try LitestreamTests.waitForTables(path)

            let child = try Self.startChild(
                "childFollowsAPutBackPrimary", library: library, replica: replica, in: directory)
            defer { child.kill() }
            func answer(_ prefix: String) throws -> String { try Self.answer(prefix, from: child) }
            func digest() throws -> String { try db.newConnection().read { try Self.digest($0) } }
            // The replica holds the first batch once the child's bookmark reached it.
            try child.send("bookmark \(firstBatch)")
            #expect(try answer("bookmarked") == (try digest()))
            // Litestream's timestamps: a point in time a second after the first batch was in the
            // replica, and the next batch a second after that (as in the restore tests).
            Thread.sleep(forTimeInterval: 1.1)
            let pointInTime = ISO8601DateFormatter().string(from: Date())
            Thread.sleep(forTimeInterval: 1.1)
            try LitestreamTests.writeNotes(db.newConnection(name: "writer"), 20..<30)
            let seen = db.latestCommit
            try child.send("bookmark \(seen)")
            #expect(try answer("bookmarked") == (try digest()))

            // The put-back, then the primary going on with other values under the numbers the
            // replica saw, and past them.
            try db.close()
            LitestreamTests.stop(litestream)
            try LitestreamTests.restore(tool, replica: replica, to: path, timestamp: pointInTime)
            litestream = try ChildProcess(tool, ["replicate", "-config", config], outputToFile: true)
            db = try Database(path: path)
            try db.register(ViewTests.byTitle)
            let putBack = db.latestCommit
            #expect(putBack >= firstBatch && putBack < seen, "put back at \(putBack)")
            try LitestreamTests.writeNotes(
                db.newConnection(name: "writer"), 100..<(100 + Int(seen - putBack) + 5))
            let last = db.latestCommit
            #expect(last > seen)
            try child.send("follow \(last)")
            #expect(try answer("external") == "true")
            #expect(try answer("followed") == (try digest()))
            let rows = try db.newConnection().read {
                Self.describe(ViewTests.rows(try $0.view(named: "byTitle")))
            }
            #expect(try answer("rows") == rows)
            #expect(try answer("streamTold") == "true")
            // The bookmark's connection took a new handle once the put-back was seen (whether
            // Litestream's VFS had stalled on the old one depends on its timing).
            #expect(Int(try answer("reopened")).map { $0 >= 1 } == true)
            try child.send("done")
            #expect(child.finish() == 0, "\(child.standardError)")
            try db.close()
        }
    }

    /// A Litestream config in `directory` that replicates `path` to the directory `replica`,
    /// syncing every 100 ms; returns its path.
    static func writeLitestreamConfig(in directory: URL, path: String, replica: String) throws -> String {
        let config = directory.appendingPathComponent("litestream.yml").path
        try
            "dbs:\n  - path: \(path)\n    replicas:\n      - url: file://\(replica)\n        sync-interval: 100ms\n"
            .write(toFile: config, atomically: true, encoding: .utf8)
        return config
    }

    /// Starts this test binary as a child running the test `filter`, which reads the replica
    /// `replica` through Litestream's VFS (`library`). The VFS reads its settings from the
    /// environment the process starts with; it logs to `vfs.log` in `directory`.
    static func startChild(
        _ filter: String, library: String, replica: String, in directory: URL,
        environment: [String: String] = [:]
    ) throws -> ChildProcess {
        // (The child's open waits for Litestream's first backup itself:
        // ``Configuration/replicaOpenTimeout``.)
        try ChildProcess(
            URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path,
            ["--testing-library", "swift-testing", "--filter", filter],
            environment: environment.merging(
                [
                    Self.childKey: library, "LITESTREAM_REPLICA_URL": "file://" + replica,
                    "LITESTREAM_LOG_FILE": directory.appendingPathComponent("vfs.log").path,
                ], uniquingKeysWith: { $1 }))
    }

    /// The child's next answer to a step, the line that starts with `prefix` (other lines, such
    /// as the test library's, are skipped).
    static func answer(_ prefix: String, from child: ChildProcess) throws -> String {
        while true {
            let line = try child.readLine()
            if line.hasPrefix(prefix + " ") { return String(line.dropFirst(prefix.count + 1)) }
        }
    }

    /// In a child: polls `step` every 100 ms until it reports `commit`, the progress of another
    /// program (Litestream's sync, then the VFS's poll of the replica, which each connection
    /// makes on its own). After two minutes the child fails, saying where it stood and what the
    /// VFS logged last (on standard error, which the parent's failure shows), instead of hanging
    /// the parent. (`changes()` waking up on a replica is tested in process.)
    static func pollReplica(until commit: UInt64, _ step: () async throws -> UInt64) async throws {
        let deadline = ContinuousClock.now + .seconds(120)
        while case let reached = try await step(), reached < commit {
            if ContinuousClock.now > deadline {
                let log =
                    ProcessInfo.processInfo.environment["LITESTREAM_LOG_FILE"]
                    .flatMap { try? String(contentsOfFile: $0, encoding: .utf8) } ?? ""
                FileHandle.standardError.write(
                    Data(
                        ("the replica is at commit \(reached), waiting for \(commit); the VFS logged:\n"
                            + log.split(separator: "\n").suffix(30).joined(separator: "\n")).utf8))
                exit(1)
            }
            try await Task.sleep(for: .milliseconds(100))
        }
    }

    /// A view's rows as text that two processes write alike (a dictionary's order is seeded per
    /// process).
    static func describe(_ rows: [String: [ViewItem]]) -> String {
        rows.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value.map(\.key).joined(separator: ","))" }
            .joined(separator: "; ")
    }

    /// The child of ``aReplicaThroughTheVFSFollowsAPrimaryPutBackToAnOlderCommit()``: bookmarks
    /// the replica at the commit the parent names, then follows it to the next one it names,
    /// saying whether an advance was external, and what it reads there.
    @Test(.enabled(if: ProcessInfo.processInfo.environment[ReadReplicaTests.childKey] != nil))
    func childFollowsAPutBackPrimary() async throws {
        let library = try #require(ProcessInfo.processInfo.environment[Self.childKey])
        try LitestreamVFS.register(extensionPath: library)
        let replica = try Database(replica: "primary.sqlite", vfs: LitestreamVFS.name)
        try replica.register(ViewTests.byTitle)
        let ui = replica.newConnection(name: "ui")
        var commits: AsyncStream<Changeset>?
        var follow: UInt64?
        while let line = readLine() {
            if line.hasPrefix("follow ") {
                follow = UInt64(line.dropFirst(7))
                break
            }
            guard line.hasPrefix("bookmark "), let commit = UInt64(line.dropFirst(9)) else { return }
            try await Self.pollReplica(until: commit) {
                try ui.beginLongLivedReadTransaction()
                return ui.snapshot
            }
            if commits == nil { commits = replica.changes() }
            print("bookmarked \(try await ui.read { try Self.digest($0) })")
        }
        let stream = try #require(commits)
        guard let last = follow else { return }
        var advances: [Changeset] = []
        // While Litestream writes the put-back file's first generation, reads through its VFS
        // can fail ("SQL logic error"); a failed advance keeps the connection's place, and a
        // later one returns every commit since (it failed this test once under ThreadSanitizer).
        var transient: [String] = []
        try await Self.pollReplica(until: last) {
            do {
                advances += try ui.beginLongLivedReadTransaction()
            } catch let error as DatabaseError where error.code == .sqlite {
                transient.append(error.message)
            }
            return ui.snapshot
        }
        if !transient.isEmpty {
            FileHandle.standardError.write(Data("transient errors: \(transient)\n".utf8))
        }
        print("external \(advances.contains(where: \.isExternal))")
        print("followed \(try await ui.read { try Self.digest($0) })")
        print("rows \(try await ui.read { Self.describe(ViewTests.rows(try $0.view(named: "byTitle"))) })")
        // The stream subscribed before the put-back ended when the replica saw it, or, when a
        // publish found it first, yielded an external changeset (anything may have changed).
        let told = await withinTimeLimit(.seconds(30)) {
            for await changeset in stream where changeset.isExternal { return true }
            return true
        }
        print("streamTold \(told ?? false)")
        print("reopened \(ui.replicaHandlesReopened)")
        _ = readLine()
        try replica.close()
    }

    /// The child: registers Litestream's VFS for the replica, opens it as a read replica, and
    /// answers the parent's steps.
    @Test(.enabled(if: ProcessInfo.processInfo.environment[ReadReplicaTests.childKey] != nil))
    func childServesReadsFromTheReplica() async throws {
        let library = try #require(ProcessInfo.processInfo.environment[Self.childKey])
        #expect(try LitestreamVFS.register(extensionPath: library).hasPrefix("file://"))
        let replica = try Database(replica: "primary.sqlite", vfs: LitestreamVFS.name)
        try replica.register(ViewTests.byTitle)
        let ui = replica.newConnection(name: "ui")
        func say(_ name: String, _ value: String) { print("\(name) \(value)") }
        // The VFS serves one replica per process: a second name is refused, not the same data.
        do {
            _ = try Database(replica: "orders.sqlite", vfs: LitestreamVFS.name)
            say("secondName", "opened")
        } catch {
            say(
                "secondName",
                error.code == .alreadyOpen && error.message.contains("one replica per process")
                    ? "refused" : "\(error)")
        }

        guard let bookmark = readLine(), bookmark.hasPrefix("bookmark "),
            let first = UInt64(bookmark.dropFirst(9))
        else { return }
        try await Self.pollReplica(until: first) {
            try ui.beginLongLivedReadTransaction()
            return ui.snapshot
        }
        let oldRows = try await ui.read { ViewTests.rows(try $0.view(named: "byTitle")) }
        say("bookmarked", try await ui.read { try Self.digest($0) })

        guard let advance = readLine(), advance.hasPrefix("advance "), let last = UInt64(advance.dropFirst(8))
        else { return }
        // The replica reaches the last commit while the bookmark holds the first.
        let probe = replica.newConnection(name: "probe")
        try await Self.pollReplica(until: last) { try await probe.read { $0.commit } }
        say("held", try await ui.read { try Self.digest($0) })
        var advances: [Changeset] = []
        try await Self.pollReplica(until: last) {
            advances += try ui.beginLongLivedReadTransaction()
            return ui.snapshot
        }
        let changesets = advances
        say("changesets", changesets.map(Self.describe).joined(separator: " "))
        say("advanced", try await ui.read { try Self.digest($0) })
        let replayed = try await ui.read { txn in
            let view = try txn.view(named: "byTitle")
            return ViewTests.apply(try view.changes(for: changesets), to: oldRows) == ViewTests.rows(view)
        }
        say("rowsReplayed", "\(replayed)")
        do {
            try await replica.newConnection(name: "writer").readWrite {
                try $0.set(Note(title: "x", folder: "x", archived: false), forKey: "x", inCollection: "notes")
            }
            say("write", "accepted")
        } catch let error as DatabaseError {
            say("write", "\(error.code.name): \(error.message)")
        }
        let copy = try #require(ProcessInfo.processInfo.environment[Self.childKey + "_COPY"])
        say("backup", "\(try replica.backup(to: copy))")
        try replica.close()
        say("closed", "\(replica.isClosed)")
    }
}
