import CSnapshotDBVFS
import Foundation
import SnapshotDBLocking
import SnapshotDBTestSupport
import Testing

import struct Synchronization.Atomic

@testable import SnapshotDB

/// The writers' turns across processes (``WriterTurns``): real processes, real file locks.
@Suite("Writers' turns across processes", .hangLimit)
struct WriterTurnsTests {
    static let childKey = "SNAPSHOTDB_TURNS_CHILD"

    /// The child of the turn tests: takes and gives back turns on the file named by its
    /// environment, as its standard input says, and answers each command with one line.
    @Test(.enabled(if: ProcessInfo.processInfo.environment[childKey] != nil))
    func childTakesTurnsOnCommand() throws {
        let turns = WriterTurns(walPath: try #require(ProcessInfo.processInfo.environment[Self.childKey]))
        func answer(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }
        while let command = readLine() {
            switch command {
            case "acquire":
                answer(turns.acquire(within: .seconds(30)) == .held ? "held" : "not held")
            case "release and acquire":
                turns.finish(othersOfThisProcessWait: false)
                answer(turns.acquire(within: .seconds(30)) == .held ? "held again" : "not held")
            case "release":
                turns.finish(othersOfThisProcessWait: false)
                answer("released")
            case "mark":
                // A writer marked waiting that never takes its turn (as if its process stopped).
                let descriptor = open(
                    try #require(ProcessInfo.processInfo.environment[Self.childKey]), O_RDWR | O_CLOEXEC)
                answer(
                    snapshotdb_turn_lock(descriptor, WriterTurns.waitingOffset, SNAPSHOTDB_TURN_SHARED, 0)
                        == 0
                        ? "marked" : "not marked")
            case "try":
                answer(turns.acquire(within: .zero) == .held ? "held" : "not held")
            default:
                return
            }
        }
    }

    /// A child running ``childTakesTurnsOnCommand()`` on the file at `path`.
    static func startTurnsChild(_ path: String) throws -> ChildProcess {
        try startChildTest("childTakesTurnsOnCommand", environmentKey: childKey, value: path)
    }

    /// Sends `command` to a turns child and returns its one-line answer.
    static func ask(_ child: ChildProcess, _ command: String) throws -> String {
        try child.send(command)
        return try child.readLine()
    }

    /// Tells a turns child to end, and expects it to end well.
    static func quit(_ child: ChildProcess, sourceLocation: SourceLocation = #_sourceLocation) throws {
        try child.send("quit")
        #expect(child.finish() == 0, sourceLocation: sourceLocation)
    }

    /// A file standing in for a `-wal` (SQLite takes no lock in it; the turns never create it).
    static func walStandIn(in directory: URL) throws -> String {
        let path = directory.appendingPathComponent("turns-wal").path
        #expect(FileManager.default.createFile(atPath: path, contents: Data()))
        return path
    }

    /// Timeline: the child holds the turn | this process waits for it and marks itself waiting
    /// | the child gives the turn back and asks for it again at once | this process gets it
    /// first; the child gets it only once this process gives it back. Without the waiting
    /// mark, the child (already running) would take the turn back before the woken waiter.
    @Test func aProcessThatJustHadTheTurnLetsAWaitingProcessGoFirst() throws {
        try withTemporaryDirectory { directory throws in
            let path = try Self.walStandIn(in: directory)
            let child = try Self.startTurnsChild(path)
            #expect(try Self.ask(child, "acquire") == "held")

            let turns = WriterTurns(walPath: path, patience: .zero)
            let marked = DispatchSemaphore(value: 0)
            turns.whenMarked.withLock { $0 = { marked.signal() } }
            let outcome = Mutex<WriterTurns.Outcome?>(nil)
            let acquired = DispatchSemaphore(value: 0)
            Thread {
                let result = turns.acquire(within: .seconds(10))
                outcome.withLock { $0 = result }
                acquired.signal()
            }.start()
            try #require(marked.wait(timeout: .now() + 30) == .success, "this process marked itself waiting")

            try child.send("release and acquire")
            try #require(acquired.wait(timeout: .now() + 30) == .success)
            #expect(outcome.withLock { $0 } == .held, "the waiting process went first")
            turns.finish(othersOfThisProcessWait: false)
            #expect(try child.readLine() == "held again", "the child had its turn next")
            #expect(try Self.ask(child, "release") == "released")
            try Self.quit(child)
        }
    }

    /// A turn another process holds past the deadline is given up (``WriterTurns/Outcome/timedOut``),
    /// and the abandoned wait does not keep the turn once the other process lets it go: its
    /// helper takes the turn, finds no one waiting for it, and lets it go, so the child takes it
    /// again without waiting.
    @Test func aTurnHeldPastTheDeadlineTimesOutAndIsNotKept() throws {
        try withTemporaryDirectory { directory throws in
            let path = try Self.walStandIn(in: directory)
            let child = try Self.startTurnsChild(path)
            #expect(try Self.ask(child, "acquire") == "held")
            let turns = WriterTurns(walPath: path, patience: .zero)
            #expect(turns.acquire(within: .milliseconds(50)) == .timedOut)
            #expect(turns.acquire(within: .zero) == .unavailable, "the abandoned wait is still out")
            #expect(try Self.ask(child, "release") == "released")
            try #require(turns.helperFinished.wait(timeout: .now() + 30) == .success)
            #expect(try Self.ask(child, "try") == "held", "the abandoned wait let the turn go")
            #expect(try Self.ask(child, "release") == "released")
            #expect(turns.acquire(within: .zero) == .held, "the turns work again once the wait returned")
            try Self.quit(child)
        }
    }

    /// A writer marked waiting in a process that stopped (the mark held, the turn never taken)
    /// holds another process's writer back for `handoffLimit` at most, not its whole busy
    /// timeout: it then queues anyway, and gets the free turn.
    @Test func aMarkedWriterThatNeverTakesItsTurnDoesNotHoldOthersBack() throws {
        try withTemporaryDirectory { directory throws in
            let path = try Self.walStandIn(in: directory)
            let child = try Self.startTurnsChild(path)
            #expect(try Self.ask(child, "mark") == "marked")
            let turns = WriterTurns(walPath: path)
            #expect(turns.acquire(within: .seconds(10)) == .held, "the free turn, after the handoff gave up")
            try Self.quit(child)
        }
    }

    /// The policy: a process that knows nothing (before its first commit) takes a turn; one
    /// that made the last commit takes none, and looks for other processes' writers once in 16
    /// transactions; one that finds the header's change counter moved (another process
    /// committed) takes one.
    @Test func turnsAreTakenOnlyOnEvidenceOfAnotherWriter() throws {
        try withTemporaryDirectory { directory throws in
            let turns = WriterTurns(walPath: try Self.walStandIn(in: directory))
            #expect(turns.acquireIfOthersWrite(headerChange: nil, within: .seconds(1)) == .held)
            turns.finish(othersOfThisProcessWait: false)
            turns.didCommit(change: 7)
            for _ in 0..<WriterTurns.lookEvery {
                #expect(turns.acquireIfOthersWrite(headerChange: 7, within: .seconds(1)) == .unavailable)
            }
            // A new connection's handle, which has not mapped the header yet: no evidence.
            #expect(turns.acquireIfOthersWrite(headerChange: nil, within: .seconds(1)) == .unavailable)
            #expect(turns.turnsTaken.load(ordering: .relaxed) == 1)
            #expect(turns.acquireIfOthersWrite(headerChange: 9, within: .seconds(1)) == .held)
            turns.finish(othersOfThisProcessWait: false)
            #expect(turns.turnsTaken.load(ordering: .relaxed) == 2)
        }
    }

    /// A process that writes alone takes a turn for its first write only: its own commits, a
    /// consumer's acknowledgements, history purges, `vacuum()`, and the checkpoints that restart
    /// the WAL never look like another writer.
    @Test func aProcessThatWritesAloneTakesNoTurns() throws {
        var configuration = CheckpointTests.smallConfiguration()
        configuration.historyRetention = HistoryRetention(commits: 50, bytes: 1 << 30)
        try withTemporaryDatabase(configuration: configuration) { db throws in
            let writer = db.newConnection(name: "writer")
            let consumer = try db.consumer(named: "sync")
            let generations = db.checkpointer.state.withLock { $0.wal.generationCount }
            for round in 0..<10 {
                try writeCommits(writer, count: 30, offset: round * 30)
                // An acknowledgement alone: committed, but no commit of the database.
                try writer.readWrite { txn in try consumer.acknowledge(through: txn.commit, in: txn) }
                _ = try db.purgeHistory()
                if round % 3 == 1 { try db.vacuum() }
            }
            db.waitForCheckpoints()
            #expect(
                db.checkpointer.state.withLock { $0.wal.generationCount } > generations + 3, "WAL restarts")
            #expect(db.writerTurns.turnsTaken.load(ordering: .relaxed) == 1)
        }
    }

    /// A turn kept for the next holder of the writer lock is given back when that holder
    /// takes no turn (`vacuum()`, a checkpoint's reset) and the lock then goes idle: another
    /// process can take it. The writer lock's idle handler does it, as the database wires it.
    @Test func aKeptTurnIsGivenBackWhenTheWriterLockGoesIdle() throws {
        try withTemporaryDirectory { directory throws in
            let path = try Self.walStandIn(in: directory)
            let turns = WriterTurns(walPath: path, carryLimit: .seconds(3_600))
            let lock = WriterLock()
            lock.setIdleHandler { turns.releaseCarried() }
            lock.lock()
            #expect(turns.acquire(within: .seconds(1)) == .held)
            let done = DispatchSemaphore(value: 0)
            Thread {
                // Takes the lock after the writer, and no turn, as vacuum() does.
                lock.lock()
                lock.unlock()
                done.signal()
            }.start()
            #expect(lock.waitForWaitingWriters(1, before: Date(timeIntervalSinceNow: 30)))
            turns.finish(othersOfThisProcessWait: lock.hasWaitingWriters)
            let otherProcess = WriterTurns(walPath: path)
            #expect(otherProcess.acquire(within: .zero) == .timedOut, "kept for the next holder")
            lock.unlock()
            try #require(done.wait(timeout: .now() + 30) == .success)
            #expect(otherProcess.acquire(within: .zero) == .held, "given back once the lock went idle")
            #expect(!turns.takeCarried())
        }
    }

    /// `writerTurns = false`: no turn is ever taken, not even for the first write.
    @Test func turnsCanBeTurnedOff() throws {
        var configuration = Configuration()
        configuration.writerTurns = false
        try withTemporaryDatabase(configuration: configuration) { db throws in
            try writeCommits(db.newConnection(name: "writer"), count: 3)
            #expect(db.latestCommit == 3)
            #expect(db.writerTurns.turnsTaken.load(ordering: .relaxed) == 0)
        }
    }

    /// While a replicator holds the WAL (Litestream), writers take no turns, not even the first.
    @Test func noTurnsWhileAReplicatorHoldsTheWAL() throws {
        var configuration = Configuration()
        configuration.checkpointing = .external(replicator: "litestream")
        try withTemporaryDatabase(configuration: configuration) { db throws in
            try writeCommits(db.newConnection(name: "writer"), count: 3)
            #expect(db.latestCommit == 3)
            #expect(db.writerTurns.turnsTaken.load(ordering: .relaxed) == 0)
        }
    }

    static let writerChildKey = "SNAPSHOTDB_TURNS_WRITER_CHILD"

    /// The child of ``aWriterOfAnotherProcessInItsTurnMakesAWriteBusyAfterTheTimeout()``: opens
    /// the database, and holds a write transaction open until its standard input says go.
    @Test(.enabled(if: ProcessInfo.processInfo.environment[writerChildKey] != nil))
    func childHoldsAWriteTransaction() throws {
        let db = try Database(path: try #require(ProcessInfo.processInfo.environment[Self.writerChildKey]))
        try db.newConnection(name: "child-writer").readWrite { txn in
            try txn.set(Item(title: "child"), forKey: "child", inCollection: "c")
            FileHandle.standardOutput.write(Data("in transaction\n".utf8))
            _ = readLine()
        }
        FileHandle.standardOutput.write(Data("committed\n".utf8))
    }

    /// Another SnapshotDB process in a write transaction holds its turn: a write here waits for
    /// the turn no longer than the busy timeout, fails with `busy` having changed nothing, and
    /// succeeds once the other process committed.
    @Test func aWriterOfAnotherProcessInItsTurnMakesAWriteBusyAfterTheTimeout() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("turns.sqlite").path
            try BusyTests.makeDatabase(at: path)
            let db = try Database(path: path, configuration: BusyTests.shortTimeout)
            let writer = db.newConnection(name: "writer")
            let child = try startChildTest(
                "childHoldsAWriteTransaction", environmentKey: Self.writerChildKey, value: path)
            #expect(try child.readLine() == "in transaction")
            BusyTests.expectBusyWrite(writer)
            #expect(db.writerTurns.turnsTimedOut.load(ordering: .relaxed) == 1, "it waited for the turn")
            #expect(db.latestCommit == 3)
            #expect(try Self.ask(child, "go") == "committed")
            #expect(child.finish() == 0)
            try writer.readWrite { try $0.set(Item(title: "after"), forKey: "after", inCollection: "c") }
            #expect(db.latestCommit == 5)
            #expect(
                try writer.read { try $0.keys(inCollection: "c") } == BusyTests.keptKeys + ["after", "child"])
        }
    }
}
