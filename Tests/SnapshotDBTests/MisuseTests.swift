import Foundation
import SnapshotDBLocking
import Testing

@testable import SnapshotDB

/// The API used in ways it does not allow, or in its less obvious corners: the outcome is a
/// typed error or a documented, all-or-nothing result, never a half-applied transaction.
@Suite("Misuse of the API")
struct MisuseTests {
    struct Boom: Error {}

    /// A flag closures on other threads can raise.
    final class Flag: Sendable {
        private let state = Mutex(false)
        var isRaised: Bool { state.withLock { $0 } }
        func raise() { state.withLock { $0 = true } }
    }

    // MARK: Savepoints

    @Test func savepointTransactionUsedAfterTheSavepointReturnedThrowsTransactionEnded() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                try txn.set(Item(title: "outer"), forKey: "outer", inCollection: "c")
                let escaped = try txn.savepoint { savepoint in
                    try savepoint.set(Item(title: "inside"), forKey: "inside", inCollection: "c")
                    return savepoint
                }
                expectError(.transactionEnded) {
                    try escaped.set(Item(title: "late"), forKey: "late", inCollection: "c")
                }
                expectError(.transactionEnded) { try escaped.removeValue(forKey: "outer", inCollection: "c") }
                expectError(.transactionEnded) { try escaped.keys(inCollection: "c") }
                expectError(.transactionEnded) { try escaped.savepoint { _ in } }
                // Ended scopes ignore rollback() and info: they cannot reach the enclosing
                // transaction through an escaped savepoint.
                escaped.rollback()
                escaped.info = ["from": "escaped savepoint"]
                #expect(txn.info == [:])
                #expect(try txn.keys(inCollection: "c") == ["inside", "outer"])
            }
            #expect(db.latestCommit == 1)
            #expect(try writer.read { try $0.keys(inCollection: "c") } == ["inside", "outer"])
        }
    }

    @Test func innerSavepointUsedAfterItReturnedInsideAnOuterSavepoint() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                try txn.savepoint { outer in
                    let inner = try outer.savepoint { $0 }
                    expectError(.transactionEnded) {
                        try inner.set(Item(title: "late"), forKey: "late", inCollection: "c")
                    }
                    inner.rollback()
                    try outer.set(Item(title: "outer"), forKey: "outer", inCollection: "c")
                }
            }
            #expect(db.latestCommit == 1)
            #expect(try writer.read { try $0.keys(inCollection: "c") } == ["outer"])
        }
    }

    @Test func transactionRollbackInsideASavepointRollsBackTheWholeTransaction() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { txn in
                try txn.set(Item(title: "outer"), forKey: "outer", inCollection: "c")
                try txn.savepoint { savepoint in
                    try savepoint.set(Item(title: "inside"), forKey: "inside", inCollection: "c")
                    txn.rollback()  // the transaction's, not the savepoint's
                }
                try txn.set(Item(title: "after"), forKey: "after", inCollection: "c")
            }
            #expect(db.latestCommit == 0)
            #expect(try writer.read { try $0.keys(inCollection: "c") } == [])
        }
    }

    @Test func throwingSavepointInACommittedTransactionLeavesOnlyTheRest() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            let reader = db.newConnection(name: "reader")
            try writer.readWrite { txn in
                try txn.set("v1", forKey: "keep", inCollection: "c")
                try txn.set("v1", forKey: "removed in savepoint", inCollection: "c")
                try txn.set("v1", forKey: "x", inCollection: "cleared in savepoint")
            }
            // Cached by the writer, so a stale cache would show.
            #expect(
                try writer.read { try $0.value(forKey: "keep", inCollection: "c", as: String.self) } == "v1")
            try reader.beginLongLivedReadTransaction()

            try writer.readWrite { txn in
                try txn.set("outer", forKey: "outer", inCollection: "c")
                txn.info = ["by": "outer"]
                #expect(throws: Boom.self) {
                    try txn.savepoint { savepoint in
                        try savepoint.set("savepoint", forKey: "outer", inCollection: "c")
                        try savepoint.set("savepoint", forKey: "keep", inCollection: "c")
                        try savepoint.set("savepoint", forKey: "savepoint only", inCollection: "c")
                        try savepoint.removeValue(forKey: "removed in savepoint", inCollection: "c")
                        try savepoint.removeAll(inCollection: "cleared in savepoint")
                        savepoint.info = ["by": "savepoint"]
                        #expect(
                            try savepoint.value(forKey: "keep", inCollection: "c", as: String.self)
                                == "savepoint")
                        throw Boom()
                    }
                }
                // Inside the transaction, everything is as before the savepoint.
                #expect(txn.info == ["by": "outer"])
                #expect(try txn.value(forKey: "outer", inCollection: "c", as: String.self) == "outer")
                #expect(try txn.value(forKey: "keep", inCollection: "c", as: String.self) == "v1")
                #expect(try txn.keys(inCollection: "c") == ["keep", "outer", "removed in savepoint"])
                #expect(try txn.count(inCollection: "cleared in savepoint") == 1)
                try txn.set("after", forKey: "after", inCollection: "c")
            }

            #expect(db.latestCommit == 2)
            let changes = try reader.beginLongLivedReadTransaction()
            #expect(changes.count == 1)
            let changeset = try #require(changes.first)
            #expect(changeset.commit == 2)
            #expect(changeset.setKeys == ["c": ["outer", "after"]])
            #expect(changeset.removedKeys.isEmpty)
            #expect(changeset.clearedCollections.isEmpty)
            #expect(!changeset.clearedAllCollections)
            #expect(changeset.info == ["by": "outer"])
            #expect(!changes.hasChange(forKey: "keep", inCollection: "c"))
            #expect(!changes.hasChange(inCollection: "cleared in savepoint"))
            for connection in [writer, reader] {
                try connection.read { txn throws in
                    #expect(
                        try txn.keys(inCollection: "c") == ["after", "keep", "outer", "removed in savepoint"])
                    #expect(try txn.value(forKey: "keep", inCollection: "c", as: String.self) == "v1")
                    #expect(try txn.value(forKey: "outer", inCollection: "c", as: String.self) == "outer")
                    #expect(try txn.keys(inCollection: "cleared in savepoint") == ["x"])
                }
            }
            #expect(try isIntact(db.path))
        }
    }

    // MARK: rollback()

    @Test func writesAfterRollbackAreAllDiscarded() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            let reader = db.newConnection(name: "reader")
            try writer.readWrite { txn in
                try txn.set("v1", forKey: "a", inCollection: "c")
                try txn.set("v1", forKey: "b", inCollection: "c")
                try txn.set("v1", forKey: "x", inCollection: "other")
            }
            #expect(try writer.read { try $0.value(forKey: "a", inCollection: "c", as: String.self) } == "v1")
            try reader.beginLongLivedReadTransaction()

            let result = try writer.readWrite { txn in
                try txn.set("v2", forKey: "a", inCollection: "c")
                txn.rollback()
                // Everything after the call is rolled back too, though it runs and reads back.
                try txn.set("v3", forKey: "a", inCollection: "c")
                try txn.set("new", forKey: "new", inCollection: "c")
                try txn.removeValue(forKey: "b", inCollection: "c")
                try txn.removeAll(inCollection: "other")
                try txn.savepoint { savepoint in
                    try savepoint.set("savepoint", forKey: "savepoint", inCollection: "c")
                }
                txn.info = ["ignored": "yes"]
                txn.rollback()
                #expect(try txn.value(forKey: "a", inCollection: "c", as: String.self) == "v3")
                #expect(try txn.keys(inCollection: "c") == ["a", "new", "savepoint"])
                return "returned"
            }
            #expect(result == "returned")
            #expect(db.latestCommit == 1)
            #expect(try reader.beginLongLivedReadTransaction() == [])
            // A later commit arrives as commit 2: the rolled-back transaction took no number.
            try writer.readWrite { try $0.set("later", forKey: "later", inCollection: "c") }
            #expect(try reader.beginLongLivedReadTransaction().map(\.commit) == [2])
            for connection in [writer, reader] {
                try connection.read { txn throws in
                    #expect(try txn.value(forKey: "a", inCollection: "c", as: String.self) == "v1")
                    #expect(try txn.keys(inCollection: "c") == ["a", "b", "later"])
                    #expect(try txn.keys(inCollection: "other") == ["x"])
                }
            }
            #expect(try sqlite3(db.path, "SELECT count(*) FROM snapshotdb_values") == "4\n")
            #expect(try isIntact(db.path))
        }
    }

    // MARK: Cancelled tasks

    /// A task cancelled before its transaction begins gets `CancellationError` and the closure
    /// never runs, whether it was cancelled before the call, while queued behind another
    /// transaction of its connection, or while waiting for the database's writer.
    @Test func cancelledTaskDoesNotStartItsTransaction() async throws {
        try await withTemporaryDatabase { db async throws in
            let writer = db.newConnection(name: "writer")
            let other = db.newConnection(name: "other")
            let bodyRan = Flag()

            let cancelledBeforeTheCall = Task {
                withUnsafeCurrentTask { $0?.cancel() }
                return try await writer.readWrite { txn in
                    bodyRan.raise()
                    try txn.set("lost", forKey: "before the call", inCollection: "c")
                }
            }
            await #expect(throws: CancellationError.self) { try await cancelledBeforeTheCall.value }
            let cancelledRead = Task {
                withUnsafeCurrentTask { $0?.cancel() }
                return try await writer.read { _ in bodyRan.raise() }
            }
            await #expect(throws: CancellationError.self) { try await cancelledRead.value }

            // Timeline:  blocker (writer): readWrite { started | wait for proceed }
            //            | queued (writer) is on the connection's queue; waiting (other) waits in
            //              the writer lock | both cancelled | proceed | blocker commits
            //            | both: CancellationError
            let (started, startedContinuation) = AsyncStream<Void>.makeStream()
            let proceed = DispatchSemaphore(value: 0)
            let blocker = Task.detached {
                try await writer.readWrite { txn in
                    try txn.set("blocker", forKey: "blocker", inCollection: "c")
                    startedContinuation.yield()
                    proceed.wait()
                }
            }
            for await _ in started { break }
            let queued = Task {
                try await writer.readWrite { txn in
                    bodyRan.raise()
                    try txn.set("lost", forKey: "queued", inCollection: "c")
                }
            }
            // The two calls above were refused before reaching the queue: the blocker's call was
            // the first handed to it, and the queued one is the second.
            let deadline = Date(timeIntervalSinceNow: 60)
            let isQueued = await waitOnAThread {
                writer.queuedAsyncCalls.wait(untilAtLeast: 2, before: deadline)
            }
            #expect(isQueued, "the second call never reached the connection's queue")
            let waiting = Task {
                try await other.readWrite { txn in
                    bodyRan.raise()
                    try txn.set("lost", forKey: "waiting", inCollection: "c")
                }
            }
            let isWaiting = await waitOnAThread { db.writer.lock.waitForWaitingWriters(1, before: deadline) }
            #expect(isWaiting, "the other connection's call never waited for the writer lock")
            queued.cancel()
            waiting.cancel()
            proceed.signal()
            try await blocker.value
            await #expect(throws: CancellationError.self) { try await queued.value }
            await #expect(throws: CancellationError.self) { try await waiting.value }

            #expect(!bodyRan.isRaised)
            #expect(db.latestCommit == 1)
            #expect(try await other.read { try $0.keys(inCollection: "c") } == ["blocker"])
            // The connections go on working.
            try await other.readWrite { try $0.set("after", forKey: "after", inCollection: "c") }
            #expect(db.latestCommit == 2)
        }
    }

    /// Cancellation does not interrupt a transaction that started: its closure runs to the end
    /// and the transaction commits (or rolls back) as the closure decides, so the caller never
    /// has to guess whether a cancelled write happened.
    @Test func cancellationWhileTheClosureRunsLetsTheTransactionFinish() async throws {
        try await withTemporaryDatabase { db async throws in
            let writer = db.newConnection(name: "writer")
            let (started, startedContinuation) = AsyncStream<Void>.makeStream()
            let proceed = DispatchSemaphore(value: 0)
            let task = Task {
                try await writer.readWrite { txn in
                    startedContinuation.yield()
                    proceed.wait()
                    try txn.set("committed", forKey: "k", inCollection: "c")
                    return txn.commit
                }
            }
            for await _ in started { break }
            task.cancel()
            proceed.signal()
            #expect(try await task.value == 0)
            #expect(db.latestCommit == 1)
            #expect(
                try await writer.read { try $0.value(forKey: "k", inCollection: "c", as: String.self) }
                    == "committed")
        }
    }

    // MARK: Misuse that already has a typed error

    @Test func nestedTransactionOnTheSameConnectionIsMisuseAndChangesNothing() throws {
        try withTemporaryDatabase { db throws in
            let connection = db.newConnection(name: "writer")
            try connection.readWrite { txn in
                try txn.set("outer", forKey: "outer", inCollection: "c")
                expectError(.misuse) {
                    try connection.readWrite { try $0.set("inner", forKey: "inner", inCollection: "c") }
                }
                expectError(.misuse) { try connection.beginLongLivedReadTransaction() }
            }
            #expect(db.latestCommit == 1)
            #expect(try connection.read { try $0.keys(inCollection: "c") } == ["outer"])
        }
    }

    @Test func writeOnABookmarkedConnectionChangesNothing() throws {
        try withTemporaryDatabase { db throws in
            let connection = db.newConnection(name: "ui")
            try connection.beginLongLivedReadTransaction()
            var bodyRan = false
            expectError(.longLivedReadTransactionActive) {
                try connection.readWrite { txn in
                    bodyRan = true
                    try txn.set("lost", forKey: "k", inCollection: "c")
                }
            }
            #expect(!bodyRan)
            #expect(db.latestCommit == 0)
            #expect(connection.isInLongLivedReadTransaction)
        }
    }

    /// Runs `body` on a thread of its own and records an issue if it has not returned within
    /// 30 seconds: a deadlock detector, so that a regression fails instead of hanging the run.
    /// (A bounded wait for completion, not a sleep standing in for ordering.) Returns whether
    /// `body` returned; a test goes no further when it did not (the stuck thread holds locks).
    private func expectReturns(
        sourceLocation: SourceLocation = #_sourceLocation, _ body: @escaping @Sendable () -> Void
    ) -> Bool {
        let done = DispatchSemaphore(value: 0)
        Thread {
            body()
            done.signal()
        }.start()
        guard done.wait(timeout: .now() + 30) == .success else {
            Issue.record("deadlocked: still waiting after 30 s", sourceLocation: sourceLocation)
            return false
        }
        return true
    }

    @Test func callingBackIntoAnOuterConnectionThroughAnotherIsMisuse() throws {
        try withTemporaryDatabase { db throws in
            let a = db.newConnection(name: "a")
            let b = db.newConnection(name: "b")
            try a.readWrite { try $0.set("v", forKey: "k", inCollection: "c") }
            let returned = expectReturns {
                do {
                    // a's queue is held by this thread further out: waiting for it would trap.
                    let value = try a.read { outer in
                        try b.read { _ in
                            expectError(.misuse) { try a.read { _ in } }
                            expectError(.misuse) { try a.beginLongLivedReadTransaction() }
                            expectError(.misuse) { try a.readWrite { _ in } }
                        }
                        return try outer.value(forKey: "k", inCollection: "c", as: String.self)
                    }
                    #expect(value == "v")
                } catch {
                    Issue.record("unexpected \(error)")
                }
            }
            guard returned else { return }
            #expect(!a.isInLongLivedReadTransaction)
            #expect(db.latestCommit == 1)
        }
    }

    @Test func callingBackIntoAnOuterConnectionFromAnAsyncTransactionIsMisuse() async throws {
        try await withTemporaryDatabase { db async throws in
            let a = db.newConnection(name: "a")
            let b = db.newConnection(name: "b")
            // The async overload runs the closure on a's queue, on one of Dispatch's threads.
            let code = try await a.read { _ -> DatabaseError.Code? in
                try b.read { _ in expectError(.misuse) { try a.read { _ in } }?.code }
            }
            #expect(code == .misuse)
        }
    }

    @Test func writeThroughAnotherConnectionInsideAWriteIsMisuseNotADeadlock() throws {
        try withTemporaryDatabase { db throws in
            let a = db.newConnection(name: "a")
            let b = db.newConnection(name: "b")
            let returned = expectReturns {
                do {
                    try a.readWrite { txn in
                        try txn.set("outer", forKey: "outer", inCollection: "c")
                        // b would wait for the writer lock this thread holds.
                        let error = expectError(.misuse) {
                            try b.readWrite { try $0.set("inner", forKey: "inner", inCollection: "c") }
                        }
                        #expect(error?.message.contains("same database") == true)
                        // Reading through b is fine: readers never take the writer lock.
                        #expect(try b.read { try $0.count(inCollection: "c") } == 0)
                    }
                } catch {
                    Issue.record("unexpected \(error)")
                }
            }
            guard returned else { return }
            #expect(db.latestCommit == 1)
            // The lock was released: b writes once a's transaction is over.
            try b.readWrite { try $0.set("later", forKey: "later", inCollection: "c") }
            #expect(try b.read { try $0.keys(inCollection: "c") } == ["later", "outer"])
        }
    }

    @Test func checkpointThatNeedsTheWriterLockInsideAWriteIsMisuse() throws {
        try withTemporaryDatabase { db throws in
            let writer = db.newConnection(name: "writer")
            // Frames in the WAL, for the PASSIVE checkpoint below to copy back.
            try writer.readWrite { try $0.set("committed", forKey: "before", inCollection: "c") }
            let started = ContinuousClock.now
            try writer.readWrite { txn in
                try txn.set("v", forKey: "k", inCollection: "c")
                for mode in [CheckpointMode.full, .restart, .truncate] {
                    expectError(.misuse) { try db.checkpoint(mode) }
                }
                // PASSIVE takes no lock of this process's writers: it runs, and copies back every
                // committed frame (this transaction's snapshot is the newest commit).
                let passive = try db.checkpoint(.passive)
                #expect(passive.walFrames > 0)
                #expect(passive.isComplete, "\(passive)")
            }
            // Refused at once, not after the busy timeout (5 s) spent waiting for itself.
            #expect(ContinuousClock.now - started < .seconds(4))
            #expect(db.latestCommit == 2)
            #expect(try db.checkpoint(.truncate).isComplete)
        }
    }

    @Test func localizedDescriptionIsTheMessage() throws {
        let error = expectError(.cannotOpen) { try Database(path: "/nonexistent-\(UUID())/db.sqlite") }
        let described = (error as (any Error)?)?.localizedDescription ?? ""
        #expect(described.hasPrefix("cannotOpen: the directory of"), "\(described)")
    }
}
