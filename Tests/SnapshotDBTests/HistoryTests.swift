import Foundation
import Logging
import SnapshotDBLocking
import SnapshotDBTestSupport
import Testing

import struct Synchronization.Atomic

@testable import SnapshotDB

/// The durable history: exact changesets across processes and restarts, positions, and the
/// wake-up of `changes()` by another process's commit.
@Suite("Durable history")
struct HistoryTests {
    static let childKey = "SNAPSHOTDB_HISTORY_CHILD"

    /// One write of a planned commit.
    enum Write: Equatable {
        case set(String, Note)
        case remove(String)
    }

    /// The commits a child process makes for `seed`: 1 to 3 writes each over keys n0...n11,
    /// so that views see inserts, moves, updates and deletes.
    static func plan(seed: UInt64, commits: Int) -> [[Write]] {
        var random = SeededGenerator(state: seed)
        let folders = ["inbox", "work", "home"]
        return (0..<commits).map { _ in
            (0..<Int.random(in: 1...3, using: &random)).map { _ in
                let key = "n\(Int.random(in: 0..<12, using: &random))"
                if Int.random(in: 0..<5, using: &random) == 0 { return .remove(key) }
                let note = Note(
                    title: String(UnicodeScalar(UInt8(97 + Int.random(in: 0..<26, using: &random)))),
                    folder: folders.randomElement(using: &random)!,
                    archived: Int.random(in: 0..<6, using: &random) == 0)
                return .set(key, note)
            }
        }
    }

    /// The commits a plan makes, starting from every key n0...n11 present: the step of each
    /// and the keys its changeset must set and remove (the last write of a key wins; removing
    /// an absent key changes nothing, and a step that changes nothing makes no commit).
    static func expectedCommits(_ plan: [[Write]]) -> [(step: Int, set: Set<String>, removed: Set<String>)] {
        var present = Set((0..<12).map { "n\($0)" })
        var commits: [(step: Int, set: Set<String>, removed: Set<String>)] = []
        for (step, writes) in plan.enumerated() {
            var set: Set<String> = []
            var removed: Set<String> = []
            var changed = false
            for write in writes {
                switch write {
                case .set(let key, _):
                    set.insert(key)
                    removed.remove(key)
                    present.insert(key)
                    changed = true
                case .remove(let key):
                    guard present.remove(key) != nil else { continue }
                    removed.insert(key)
                    set.remove(key)
                    changed = true
                }
            }
            if changed { commits.append((step, set, removed)) }
        }
        return commits
    }

    /// The notes ``plan(seed:commits:)`` starts from: `n0`…`n11` in the inbox.
    static func writeStartingNotes(_ writer: Connection) throws {
        try writer.readWrite { txn in
            for index in 0..<12 {
                try txn.set(
                    Note(title: "t\(index)", folder: "inbox", archived: false), forKey: "n\(index)",
                    inCollection: "notes")
            }
        }
    }

    /// Runs the child test ``childWritesPlannedCommits()`` in another process; returns its pid.
    static func runWriterProcess(path: String, seed: UInt64, commits: Int) throws -> Int32 {
        let child = try runChildTest(
            "childWritesPlannedCommits", environmentKey: childKey, path: "\(path)|\(seed)|\(commits)")
        guard child.terminationStatus == 0, let pid = child.results["pid"].flatMap(Int32.init) else {
            throw ChildFailed(output: child.output)
        }
        return pid
    }

    struct ChildFailed: Error {
        let output: String
    }

    @Test(.enabled(if: ProcessInfo.processInfo.environment[childKey] != nil))
    func childWritesPlannedCommits() throws {
        let parts = try #require(ProcessInfo.processInfo.environment[Self.childKey]).split(separator: "|")
        let (path, seed, commits) = (String(parts[0]), UInt64(parts[1])!, Int(parts[2])!)
        let db = try Database(path: path)
        try db.register([ViewTests.byTitle, Self.keyedByTitle])
        let writer = db.newConnection(name: "child-writer")
        for (step, writes) in Self.plan(seed: seed, commits: commits).enumerated() {
            try writer.readWrite { txn in
                for write in writes {
                    switch write {
                    case .set(let key, let note): try txn.set(note, forKey: key, inCollection: "notes")
                    case .remove(let key): try txn.removeValue(forKey: key, inCollection: "notes")
                    }
                }
                txn.info = ["step": "\(step)"]
            }
        }
        reportResult("pid", "\(getpid())")
    }

    /// Waits for `count` changesets from `stream`, or fails after a minute rather than hang.
    static func collect(_ count: Int, from stream: AsyncStream<Changeset>) async -> [Changeset] {
        await withinTimeLimit {
            var received: [Changeset] = []
            for await changeset in stream {
                received.append(changeset)
                if received.count == count { break }
            }
            return received
        } ?? []
    }

    /// Timeline: the parent bookmarks `ui` and subscribes | a child process commits 40 planned
    /// commits | the parent's `changes()` yields all 40 without the parent beginning any
    /// transaction (the watcher) | the bookmark advances by exactly those changesets, and the
    /// view's row changes replayed onto the old rows give the new rows.
    @Test(arguments: [11, 12] as [UInt64])
    func commitsOfAnotherProcessArriveExactlyAndWakeTheReader(seed: UInt64) async throws {
        try await withTemporaryDatabase { db in
            try db.register([ViewTests.byTitle, Self.keyedByTitle])
            let writer = db.newConnection(name: "writer")
            try await writer.readWrite { txn in
                for index in 0..<12 {
                    try txn.set(
                        Note(title: "t\(index)", folder: index % 2 == 0 ? "inbox" : "work", archived: false),
                        forKey: "n\(index)", inCollection: "notes")
                }
                try txn.set(Item(title: "untouched"), forKey: "stay", inCollection: "other")
            }
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            let oldRows = try await ui.read { txn in ViewTests.rows(try txn.view(named: "byTitle")) }
            let oldKeyedRows = try await ui.read { txn in ViewTests.rows(try txn.view(named: "keyedByTitle"))
            }
            try await ui.read { txn in
                _ = try txn.value(forKey: "stay", inCollection: "other", as: Item.self)
                _ = try txn.value(forKey: "n0", inCollection: "notes", as: Note.self)
            }
            let start = db.latestCommit
            let plan = Self.plan(seed: seed, commits: 40)
            let expected = Self.expectedCommits(plan)
            let stream = db.changes()

            let path = db.path
            let child = Task.detached {
                try Self.runWriterProcess(path: path, seed: seed, commits: plan.count)
            }
            let received = await Self.collect(expected.count, from: stream)
            let pid = try await child.value

            #expect(received.map(\.commit) == Array(start + 1...start + UInt64(expected.count)))
            for (changeset, commit) in zip(received, expected) {
                #expect(!changeset.isExternal)
                #expect(changeset.connectionName == "child-writer")
                #expect(changeset.processID == pid)
                #expect(changeset.info == ["step": "\(commit.step)"])
                #expect(Set(changeset.setKeys["notes"] ?? []) == commit.set)
                #expect(Set(changeset.removedKeys["notes"] ?? []) == commit.removed)
                #expect(!changeset.hasChange(forKey: "stay", inCollection: "other"))
            }

            let changes = try ui.beginLongLivedReadTransaction()
            #expect(changes == received, "the advance returns the changesets the stream yielded")
            try await ui.read { txn in
                // Only the changed keys left the cache.
                #expect(txn.core.cache.entry(for: CacheKey(collection: "other", key: "stay")) != nil)
                let touchedN0 = changes.hasChange(forKey: "n0", inCollection: "notes")
                #expect(
                    (txn.core.cache.entry(for: CacheKey(collection: "notes", key: "n0")) == nil) == touchedN0)
                let view = try txn.view(named: "byTitle")
                #expect(!view.requiresReload(for: changes))
                let rowChanges = try view.changes(for: changes)
                #expect(ViewTests.apply(rowChanges, to: oldRows) == ViewTests.rows(view))
                #expect(ViewTests.rows(view) == (try ViewTests.expectedRows(txn)))
                // A keyed view's row changes come from the sort keys the child's history holds.
                let keyed = try txn.view(named: "keyedByTitle")
                #expect(
                    ViewTests.apply(try keyed.changes(for: changes), to: oldKeyedRows)
                        == ViewTests.rows(keyed))
                #expect(ViewTests.rows(keyed) == ViewTests.rows(view))
            }
        }
    }

    /// A bookmark that advances over more commits of another process than the commit log keeps
    /// by count (``Configuration/commitLogRetention``) gets every one of them exactly: the rows
    /// are in the file and the bookmark pins them. With no `changes()` subscription, nothing
    /// published them before the advance.
    @Test func aBookmarkJumpingPastTheLogRetentionGetsEveryCommitExactly() throws {
        var configuration = Configuration()
        configuration.commitLogRetention = 10
        try withTemporaryDatabase(configuration: configuration) { db throws in
            try db.register([ViewTests.byTitle, Self.keyedByTitle])
            let writer = db.newConnection(name: "writer")
            try Self.writeStartingNotes(writer)
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            let start = db.latestCommit
            let plan = Self.plan(seed: 21, commits: 40)
            let expected = Self.expectedCommits(plan)
            #expect(expected.count > 10)
            _ = try Self.runWriterProcess(path: db.path, seed: 21, commits: plan.count)
            let changes = try ui.beginLongLivedReadTransaction()
            #expect(changes.map(\.commit) == Array(start + 1...start + UInt64(expected.count)))
            for (changeset, commit) in zip(changes, expected) {
                #expect(!changeset.isExternal, "commit \(changeset.commit)")
                #expect(changeset.info == ["step": "\(commit.step)"])
                #expect(Set(changeset.setKeys["notes"] ?? []) == commit.set)
                #expect(Set(changeset.removedKeys["notes"] ?? []) == commit.removed)
            }
        }
    }

    static let positionChildKey = "SNAPSHOTDB_HISTORY_POSITION_CHILD"

    /// The child of ``aNewerPositionOfAnotherProcessIsUnavailableNotAnotherHistory()``: commits
    /// once and reports the position of its commit.
    @Test(.enabled(if: ProcessInfo.processInfo.environment[positionChildKey] != nil))
    func childCommitsAndReportsItsPosition() throws {
        let db = try Database(path: try #require(ProcessInfo.processInfo.environment[Self.positionChildKey]))
        let writer = db.newConnection(name: "child-writer")
        try writer.readWrite { try $0.set(Item(title: "child"), forKey: "k", inCollection: "c") }
        reportResult("position", try writer.read { try $0.position() }.description)
    }

    /// A position saved by another process at a commit this process has not seen yet is of this
    /// file's history: a reader whose snapshot is older is told to advance
    /// (`historyUnavailable`), not that the position is another file's (`historyMismatch`).
    @Test func aNewerPositionOfAnotherProcessIsUnavailableNotAnotherHistory() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { try $0.set(Item(title: "mine"), forKey: "m", inCollection: "c") }
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            let child = try runChildTest(
                "childCommitsAndReportsItsPosition", environmentKey: Self.positionChildKey, path: db.path)
            #expect(child.terminationStatus == 0, "\(child.output)")
            let position = try #require(child.results["position"].flatMap(HistoryPosition.init))
            #expect(position.commit == db.latestCommit + 1, "this process has not seen it yet")
            let error = expectError(.historyUnavailable) { try ui.read { try $0.changes(after: position) } }
            #expect(error?.message.contains("advance the bookmark") == true, "\(String(describing: error))")
            // Past the file's newest commit, it is another history.
            let beyond = HistoryPosition(
                databaseIdentity: position.databaseIdentity, commit: position.commit + 5,
                token: position.token)
            expectError(.historyMismatch) { try ui.read { try $0.changes(after: beyond) } }
            try ui.beginLongLivedReadTransaction()
            #expect(try ui.read { try $0.changes(after: position) } == [])
        }
    }

    /// `byTitle` by sort key, under its own name, beside `byTitle` in one file.
    static let keyedByTitle = View<Note>(
        name: "keyedByTitle", version: "1", collections: ["notes"],
        group: { _, _, note in note.archived ? nil : note.folder },
        sortKey: { _, _, note in SortKey(note.title) })

    /// After a restart, `changes(after:)` lists every commit since a saved position, with the
    /// keys, info and connection names of the commits, in the transaction's snapshot.
    /// A saved position that does not parse says why: a file cut short, a part that is not a
    /// number, text that is no position at all.
    @Test func aPositionThatDoesNotParseSaysWhy() throws {
        let position = HistoryPosition(databaseIdentity: 0xABC, commit: 17, token: 0x5F)
        #expect(try HistoryPosition(parsing: position.description) == position)
        // As a file holds it, with its newline.
        #expect(try HistoryPosition(parsing: position.description + "\n") == position)
        let cut = expectError(.misuse) { try HistoryPosition(parsing: "snapshotdb1:abc:17") }
        #expect(cut?.message.contains("3 of its 4 parts") == true, "\(String(describing: cut))")
        #expect(cut?.message.contains("cut short") == true)
        let notANumber = expectError(.misuse) { try HistoryPosition(parsing: "snapshotdb1:abc:seventeen:5f") }
        #expect(notANumber?.message.contains("its commit 'seventeen' is not a number") == true)
        let other = expectError(.misuse) { try HistoryPosition(parsing: "17") }
        #expect(other?.message.contains("does not begin with 'snapshotdb1:'") == true)
        #expect(HistoryPosition("17") == nil)
    }

    @Test func changesAfterACommitSurviveARestart() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("restart.sqlite").path
            let saved: HistoryPosition
            do {
                let db = try Database(path: path)
                let writer = db.newConnection(name: "sync")
                try writer.readWrite { try $0.set(Item(title: "a"), forKey: "a", inCollection: "c") }
                saved = try writer.read { try $0.position() }
                #expect(saved.commit == 1)
                #expect(HistoryPosition(saved.description) == saved)
                try writer.readWrite { txn in
                    try txn.set(Item(title: "b"), forKey: "b", inCollection: "c")
                    try txn.removeValue(forKey: "a", inCollection: "c")
                    txn.info = ["source": "server"]
                }
                try writer.readWrite { try $0.removeAll(inCollection: "c") }
                try db.close()
            }
            let db = try Database(path: path)
            let reader = db.newConnection(name: "reader")
            let changes = try reader.read { try $0.changes(after: saved) }
            #expect(changes.map(\.commit) == [2, 3])
            #expect(changes[0].setKeys == ["c": ["b"]])
            #expect(changes[0].removedKeys == ["c": ["a"]])
            #expect(changes[0].info == ["source": "server"])
            #expect(changes[0].connectionName == "sync")
            #expect(changes[0].processID == getpid())
            #expect(changes[1].clearedCollections == ["c"])
            #expect(try reader.read { try $0.changes(after: 3) } == [])
            #expect(try reader.read { try $0.changes(after: 0) }.map(\.commit) == [1, 2, 3])
            // The bookmark reads the history of its own snapshot.
            try reader.beginLongLivedReadTransaction()
            try db.newConnection().readWrite { try $0.set(Item(title: "d"), forKey: "d", inCollection: "c") }
            #expect(try reader.read { try $0.changes(after: 1) }.map(\.commit) == [2, 3])
            let unavailable = expectError(.historyUnavailable) {
                try reader.read { try $0.changes(after: 4) }
            }
            #expect(unavailable?.message.contains("advance the bookmark") == true)
            try reader.endLongLivedReadTransaction()
            expectError(.historyMismatch) { try reader.read { try $0.changes(after: 99) } }
        }
    }

    /// A position of another file, or of a copy of this file that went back and on with other
    /// commits, is refused with `historyMismatch`, never answered.
    @Test func aPositionOfAnotherHistoryIsRefused() throws {
        try withTemporaryDirectory { directory throws in
            let first = try Database(path: directory.appendingPathComponent("first.sqlite").path)
            let second = try Database(path: directory.appendingPathComponent("second.sqlite").path)
            #expect(first.identity != second.identity)
            let writer = first.newConnection()
            try writer.readWrite { try $0.set(1, forKey: "k", inCollection: "c") }
            let position = try writer.read { try $0.position() }
            try second.newConnection().readWrite { try $0.set(1, forKey: "k", inCollection: "c") }
            let error = expectError(.historyMismatch) {
                try second.newConnection().read { try $0.changes(after: position) }
            }
            #expect(error?.message.contains("another database file") == true)

            // A backup of `first` at commit 1, put back after commits 2 and 3 were saved.
            let backup = directory.appendingPathComponent("backup.sqlite").path
            try run("/usr/bin/sqlite3", [first.path, ".backup '\(backup)'"])
            try writer.readWrite { try $0.set(2, forKey: "k", inCollection: "c") }
            try writer.readWrite { try $0.set(3, forKey: "k", inCollection: "c") }
            let atThree = try writer.read { try $0.position() }
            #expect(atThree.commit == 3)
            try run("/usr/bin/sqlite3", [first.path, ".restore '\(backup)'"])
            // Sealing numbers the restore after every commit this process published (4); a
            // position at 3 names a row this history does not hold.
            let restored = try writer.read { txn in
                (txn.commit, try txn.value(forKey: "k", inCollection: "c", as: Int.self))
            }
            #expect(restored.1 == 1)
            let mismatch = expectError(.historyMismatch) {
                try writer.read { try $0.changes(after: atThree) }
            }
            #expect(mismatch?.message.contains("older copy") == true)
            // The position at commit 1 is still this history's: the restore is an external commit.
            let fromOne = try writer.read { try $0.changes(after: position) }
            #expect(fromOne.last?.isExternal == true)
            #expect(fromOne.last?.commit == restored.0)
        }
    }

    /// A database of schema 2 is upgraded in place: its counter starts the history, and asking
    /// for the changes before it is `historyUnavailable` naming the commit.
    @Test func aSchemaTwoFileIsUpgradedAndHasNoHistoryBeforeIt() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("v2.sqlite").path
            try run("/usr/bin/sqlite3", [path, OlderSchemas.version2 + " PRAGMA journal_mode = WAL;"])
            try run(
                "/usr/bin/sqlite3",
                [
                    path,
                    #"INSERT INTO snapshotdb_values(collection, key, data) VALUES ('c', 'k', '{"title":"old","count":0}'); "#
                        + "UPDATE snapshotdb_meta SET value = 7 WHERE name = 'commit'; "
                        + "UPDATE snapshotdb_meta SET value = (SELECT value FROM snapshotdb_meta WHERE name = 'external') "
                        + "WHERE name = 'external_sealed';",
                ])
            let db = try Database(path: path)
            #expect(try run("/usr/bin/sqlite3", [path, "PRAGMA user_version"]) == "3\n")
            #expect(db.latestCommit == 7)
            let writer = db.newConnection(name: "writer")
            #expect(
                try writer.read { try $0.value(forKey: "k", inCollection: "c", as: Item.self) }
                    == Item(title: "old"))
            try writer.readWrite { try $0.set(Item(title: "new"), forKey: "k", inCollection: "c") }
            #expect(try writer.read { try $0.changes(after: 7) }.map(\.commit) == [8])
            let error = expectError(.historyUnavailable) { try writer.read { try $0.changes(after: 3) } }
            #expect(error?.message.contains("after 7") == true, "\(String(describing: error))")
            #expect(try isIntact(path))
        }
    }

    /// A history row damaged by a foreign client is `corrupt` when read, names its commit, and
    /// breaks nothing else: values, other rows, bookmarks and commits go on.
    @Test func aDamagedHistoryRowIsCorruptWhenReadAndNothingElseBreaks() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            try writer.readWrite { try $0.set(1, forKey: "a", inCollection: "c") }
            try ui.beginLongLivedReadTransaction()
            try writer.readWrite { try $0.set(2, forKey: "b", inCollection: "c") }
            try writer.readWrite { try $0.set(3, forKey: "c", inCollection: "c") }
            // Cut short after its version byte: damage (unknown flag bits would be a newer
            // release's row, `unsupportedFormat`).
            _ = try sqlite3(db.path, "UPDATE snapshotdb_history SET changes = x'01' WHERE number = 2;")
            let reader = db.newConnection(name: "reader")
            let error = expectError(.corrupt) { try reader.read { try $0.changes(after: 1) } }
            #expect(error?.message.contains("commit 2") == true, "\(String(describing: error))")
            #expect(try reader.read { try $0.changes(after: 2) }.map(\.commit) == [3])
            #expect(try reader.read { try $0.value(forKey: "b", inCollection: "c", as: Int.self) } == 2)
            // This process published commits 2 and 3 itself: the advance is exact.
            #expect(try ui.beginLongLivedReadTransaction().map(\.commit) == [2, 3])
            try writer.readWrite { try $0.set(4, forKey: "d", inCollection: "c") }
            #expect(db.latestCommit == 4)
        }
    }

    /// The row of a commit this process did not make (another process's) that does not decode
    /// is published as an external changeset, so no reader stops at it, and the log names the
    /// commits whose keys were lost (it used to be dropped in silence, issue 43).
    @Test func anUndecodableRowOfAnotherProcessesCommitIsPublishedAsExternalAndLogged() throws {
        let logs = LogCapture()
        var configuration = Configuration()
        configuration.checkpointLogger = logs.logger
        try withTemporaryDatabase(configuration: configuration) { db throws in
            let writer = db.newConnection(name: "writer")
            let ui = db.newConnection(name: "ui")
            try writer.readWrite { try $0.set(1, forKey: "a", inCollection: "c") }
            try ui.beginLongLivedReadTransaction()
            // Commit 2 of "another process": row 1 under the next number, its changes damaged.
            _ = try sqlite3(
                db.path,
                "INSERT INTO snapshotdb_history(number, kind, date, process, connection, token, info, changes) "
                    + "SELECT 2, kind, date, process, connection, token + 1, info, x'01' "
                    + "FROM snapshotdb_history WHERE number = 1;")
            #expect(logs.messages(at: .warning).isEmpty)
            let changesets = try ui.beginLongLivedReadTransaction()
            #expect(changesets.map(\.commit) == [2])
            #expect(changesets.first?.isExternal == true)
            let warnings = logs.messages(at: .warning)
            #expect(warnings.count == 1, "\(warnings)")
            #expect(warnings.first?.contains("history row of commit 2 cannot be read") == true, "\(warnings)")
            try writer.readWrite { try $0.set(3, forKey: "d", inCollection: "c") }
            #expect(try ui.beginLongLivedReadTransaction().map(\.commit) == [3])
        }
    }

    /// A damaged row in the middle of another process's commits costs its own commit only: the
    /// bookmark that advances over them gets the others exactly, that one as external, and the
    /// log names it (issue 45: the whole batch used to become one external changeset).
    @Test func aDamagedRowAmongAnotherProcessesCommitsCostsItsOwnCommitOnly() throws {
        let logs = LogCapture()
        var configuration = Configuration()
        configuration.checkpointLogger = logs.logger
        try withTemporaryDatabase(configuration: configuration) { db throws in
            try db.register([ViewTests.byTitle, Self.keyedByTitle])
            let writer = db.newConnection(name: "writer")
            try Self.writeStartingNotes(writer)
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            let start = db.latestCommit
            let plan = Self.plan(seed: 45, commits: 10)
            let expected = Self.expectedCommits(plan)
            #expect(expected.count >= 6)
            _ = try Self.runWriterProcess(path: db.path, seed: 45, commits: plan.count)
            let damaged = start + UInt64(expected.count / 2)
            _ = try sqlite3(
                db.path, "UPDATE snapshotdb_history SET changes = x'01' WHERE number = \(damaged);")
            let changesets = try ui.beginLongLivedReadTransaction()
            #expect(changesets.map(\.commit) == Array(start + 1...start + UInt64(expected.count)))
            for (changeset, commit) in zip(changesets, expected) {
                if changeset.commit == damaged {
                    #expect(changeset.isExternal)
                } else {
                    #expect(!changeset.isExternal, "commit \(changeset.commit)")
                    #expect(Set(changeset.setKeys["notes"] ?? []) == commit.set, "commit \(changeset.commit)")
                    #expect(Set(changeset.removedKeys["notes"] ?? []) == commit.removed)
                }
            }
            let warnings = logs.messages(at: .warning)
            #expect(warnings.count == 1, "\(warnings)")
            #expect(
                warnings.first?.contains("history row of commit \(damaged) cannot be read") == true,
                "\(warnings)"
            )
        }
    }

    /// An idle database costs the watcher nothing: once it settled, it sleeps until something
    /// writes to the `-wal`, and does not look again meanwhile.
    @Test func theWatcherSleepsWhileTheDatabaseIsIdle() async throws {
        try await withTemporaryDatabase { db in
            let (idle, sleeping) = AsyncStream<Void>.makeStream()
            db.foreignCommitWatcher.whenIdle.withLock { $0 = { sleeping.yield() } }
            defer { db.foreignCommitWatcher.whenIdle.withLock { $0 = nil } }
            let stream = db.changes()
            try await db.newConnection().readWrite { try $0.set(1, forKey: "k", inCollection: "c") }
            var iterator = stream.makeAsyncIterator()
            #expect(await iterator.next()?.commit == 1)
            // Its re-checks add up to 2.7 s; then it sleeps (at most 20 s, or it never settles).
            let settled =
                await withinTimeLimit(.seconds(20)) {
                    for await _ in idle { return true }
                    return false
                } ?? false
            #expect(settled, "the watcher kept looking at an idle database")
            // Asleep, it looks no more: a second of an idle database makes no look.
            let asleep = db.foreignCommitWatcher.checks.load(ordering: .relaxed)
            try await Task.sleep(for: .seconds(1))
            #expect(db.foreignCommitWatcher.checks.load(ordering: .relaxed) == asleep)
        }
    }
}

extension HistoryTests {
    /// Subscribes to `db.changes()`, whose watcher thread is held before it adds its watch until
    /// `release` is signalled; returns the stream once the thread is held there.
    static func changesWithTheWatcherHeld(_ db: Database, until release: DispatchSemaphore)
        -> AsyncStream<Changeset>
    {
        let held = DispatchSemaphore(value: 0)
        db.foreignCommitWatcher.beforeWatching.withLock { hook in
            hook = {
                held.signal()
                release.wait()
            }
        }
        let stream = db.changes()
        held.wait()
        return stream
    }

    /// Timeline: `changes()` starts the watcher, which is held before it adds its inotify watch |
    /// another process commits (an event no one hears) | the watcher goes on: its first look is
    /// at once, so the commit is published without any later event.
    @Test func aCommitMadeBeforeTheWatchIsAddedIsPublished() async throws {
        try await withTemporaryDatabase { db in
            try await db.newConnection().readWrite { try $0.set(1, forKey: "k", inCollection: "c") }
            let release = DispatchSemaphore(value: 0)
            let stream = Self.changesWithTheWatcherHeld(db, until: release)
            let start = db.latestCommit
            let child = try runChildTest(
                "childCommitsAndReportsItsPosition", environmentKey: Self.positionChildKey, path: db.path)
            #expect(child.terminationStatus == 0, "\(child.output)")
            release.signal()
            let received = await Self.collect(1, from: stream)
            #expect(received.map(\.commit) == [start + 1])
            #expect(received.first?.connectionName == "child-writer")
        }
    }

    /// Where inotify cannot watch the `-wal`, the watcher polls the WAL-index header (every 50 ms)
    /// for as long as it runs: past the re-checks an event would have started, it still looks,
    /// and publishes another process's commit.
    @Test func whereInotifyCannotWatchTheWatcherPollsAndPublishes() async throws {
        try await withTemporaryDatabase { db in
            try await db.newConnection().readWrite { try $0.set(1, forKey: "k", inCollection: "c") }
            db.foreignCommitWatcher.withoutNotifications.store(true, ordering: .relaxed)
            let stream = db.changes()
            // More looks than a first look and its re-checks make: it polls.
            let deadline = ContinuousClock.now + .seconds(20)
            while db.foreignCommitWatcher.checks.load(ordering: .relaxed) < ForeignCommitWatcher.settleDelays
                .count + 20,
                ContinuousClock.now < deadline
            {
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(
                db.foreignCommitWatcher.checks.load(ordering: .relaxed)
                    >= ForeignCommitWatcher.settleDelays.count + 20, "the watcher stopped looking")
            let start = db.latestCommit
            let child = try runChildTest(
                "childCommitsAndReportsItsPosition", environmentKey: Self.positionChildKey, path: db.path)
            #expect(child.terminationStatus == 0, "\(child.output)")
            let received = await Self.collect(1, from: stream)
            #expect(received.map(\.commit) == [start + 1])
        }
    }

    /// A foreign writer whose frames are in the WAL and whose commit is not: past the re-checks
    /// of its event, the watcher keeps looking while that process holds the WAL's write lock
    /// (the end of a slow commit's sync makes no event), and publishes the commit.
    @Test func theWatcherKeepsLookingWhileAnotherProcessHoldsTheWriteLock() async throws {
        try await withTemporaryDatabase { db in
            try await db.newConnection().readWrite { try $0.set(1, forKey: "k", inCollection: "c") }
            let stream = db.changes()
            let writer = try ChildProcess(
                python: """
                    import sqlite3, sys
                    connection = sqlite3.connect(sys.argv[1], isolation_level=None)
                    connection.execute("PRAGMA cache_size = 2")
                    connection.execute("BEGIN IMMEDIATE")
                    connection.execute(
                        "INSERT INTO snapshotdb_values(collection, key, data) VALUES ('big', 'k', ?)",
                        (b'"' + b'x' * 200000 + b'"',))
                    print("holding", flush=True)
                    sys.stdin.readline()
                    connection.execute("COMMIT")
                    print("committed", flush=True)
                    """, [db.path])
            defer { writer.kill() }
            try writer.waitForLine("holding")
            // The frames it spilled woke the watcher; its re-checks end 2.7 s later. Three looks
            // past them show it looks on.
            let base = db.foreignCommitWatcher.checks.load(ordering: .relaxed)
            let deadline = ContinuousClock.now + .seconds(20)
            while db.foreignCommitWatcher.checks.load(ordering: .relaxed)
                < base + ForeignCommitWatcher.settleDelays.count + 4, ContinuousClock.now < deadline
            {
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(
                db.foreignCommitWatcher.checks.load(ordering: .relaxed)
                    >= base + ForeignCommitWatcher.settleDelays.count + 4,
                "the watcher stopped looking while a writer held the lock")
            try writer.send("commit")
            try writer.waitForLine("committed")
            let received = await Self.collect(1, from: stream)
            #expect(received.map { $0.setKeys["big"] ?? [] } == [["k"]])
        }
    }

    /// Another history at the very counter this process published (another database's file of
    /// as many commits restored over this one) is not taken for this one: the advance gets an
    /// external changeset, caches are dropped, and the next commit is numbered after it.
    @Test(arguments: [false, true]) func anotherHistoryAtTheSameCounterIsExternal(withForeignWrite: Bool)
        throws
    {
        try withTemporaryDirectory { directory throws in
            let otherPath = directory.appendingPathComponent("other.sqlite").path
            do {
                let other = try Database(path: otherPath)
                let otherWriter = other.newConnection(name: "other")
                for index in 0..<5 {
                    try otherWriter.readWrite {
                        try $0.set(
                            Note(title: "theirs \(index)", folder: "inbox", archived: false), forKey: "n0",
                            inCollection: "notes")
                    }
                }
                try other.close()
            }
            if withForeignWrite {
                // The restored file carries a foreign write of its own, not sealed yet: its noted
                // key does not say what changed either.
                _ = try sqlite3(
                    otherPath,
                    "INSERT INTO snapshotdb_values(collection, key, data) VALUES ('notes', 'x', CAST('{}' AS BLOB))"
                )
            }
            let path = directory.appendingPathComponent("mine.sqlite").path
            let db = try Database(path: path)
            let writer = db.newConnection(name: "writer")
            for index in 0..<5 {
                try writer.readWrite {
                    try $0.set(
                        Note(title: "mine \(index)", folder: "inbox", archived: false), forKey: "n0",
                        inCollection: "notes")
                }
            }
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            let mine = try ui.read { try $0.position() }
            #expect(mine.databaseIdentity == db.identity)
            #expect(
                try ui.read { try $0.value(forKey: "n0", inCollection: "notes", as: Note.self)?.title }
                    == "mine 4")
            #expect(
                try writer.read { try $0.value(forKey: "n0", inCollection: "notes", as: Note.self)?.title }
                    == "mine 4")
            try run("/usr/bin/sqlite3", [path, ".restore '\(otherPath)'"])

            let changes = try ui.beginLongLivedReadTransaction()
            #expect(changes.map(\.commits) == [6...6], "\(changes)")
            #expect(changes.first?.isExternal == true)
            #expect(
                try ui.read { try $0.value(forKey: "n0", inCollection: "notes", as: Note.self)?.title }
                    == "theirs 4")
            #expect(
                try writer.read { try $0.value(forKey: "n0", inCollection: "notes", as: Note.self)?.title }
                    == "theirs 4")
            try writer.readWrite {
                try $0.set(
                    Note(title: "after", folder: "inbox", archived: false), forKey: "n1",
                    inCollection: "notes")
            }
            #expect(db.latestCommit == 7)
            // Positions are the restored file's: one of the file that was there is refused.
            let theirs = try writer.read { try $0.position() }
            #expect(theirs.databaseIdentity != db.identity)
            #expect(try writer.read { try $0.changes(after: theirs) }.isEmpty)
            let refused = expectError(.historyMismatch) { try writer.read { try $0.changes(after: mine) } }
            #expect(
                refused?.message.contains("another database file") == true, "\(String(describing: refused))")
            try db.close()
        }
    }

    /// Timeline: this process publishes commits 1...5 and caches n0 | a backup of commit 2 is put
    /// back from outside | another process commits past 5 on the restored file | this process
    /// advances: the rows after 5 belong to another history (row 5 has another token), so the
    /// jump is one external changeset, the cache is dropped, and the values read are the file's.
    @Test func aRestoreOvertakenByAnotherProcessIsExternalNotTakenForItsRows() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            let backup = db.path + ".backup"
            for index in 0..<5 {
                try writer.readWrite {
                    try $0.set(
                        Note(title: "mine \(index)", folder: "inbox", archived: false), forKey: "n0",
                        inCollection: "notes")
                }
                if index == 1 { try run("/usr/bin/sqlite3", [db.path, ".backup '\(backup)'"]) }
            }
            let ui = db.newConnection(name: "ui")
            try ui.beginLongLivedReadTransaction()
            #expect(
                try ui.read { try $0.value(forKey: "n0", inCollection: "notes", as: Note.self)?.title }
                    == "mine 4")
            #expect(db.latestCommit == 5)
            try run("/usr/bin/sqlite3", [db.path, ".restore '\(backup)'"])
            _ = try Self.runWriterProcess(path: db.path, seed: 3, commits: 12)
            let changes = try ui.beginLongLivedReadTransaction()
            #expect(changes.count == 1)
            #expect(changes.first?.isExternal == true)
            #expect(changes.first?.commits.lowerBound == 6)
            let expected = try sqlite3(
                db.path, "SELECT data FROM snapshotdb_values WHERE collection = 'notes' AND key = 'n0'")
            let read = try ui.read { txn in try txn.data(forKey: "n0", inCollection: "notes") }
            #expect(read.map { String(decoding: $0, as: UTF8.self) + "\n" } == expected)
        }
    }
}
