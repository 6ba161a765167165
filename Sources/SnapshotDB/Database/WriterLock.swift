internal import Foundation
internal import SnapshotDBLocking

internal import struct Synchronization.Atomic

#if canImport(Glibc)
    internal import Glibc
#elseif canImport(Darwin)
    internal import Darwin
#endif

/// The database's writer lock: one read-write transaction at a time in this process, held
/// across the caller's closure.
///
/// Writers queue on it instead of spinning on `SQLITE_BUSY`. The checkpointer can ask for it
/// with priority and a deadline: a writer that finishes its transaction then cannot take it
/// straight back, so a WAL reset gets its few milliseconds even under a continuous stream of
/// commits (a plain mutex lets the committing thread re-acquire it every time).
///
/// It records the thread that holds it, so that a write transaction begun on that same thread
/// through another connection (`a.readWrite { b.readWrite { } }`) is refused as misuse
/// instead of waiting for itself forever.
///
/// `@unchecked Sendable`: `isHeld`, `priorityWaiters`, `waitingWriters`,
/// `testWaiters` and `idleHandler` are only read and written with `condition` locked.
final class WriterLock: @unchecked Sendable {
    private let condition = NSCondition()
    private var isHeld = false
    /// The thread that holds the lock (``threadID``), 0 when none: written under `condition`,
    /// read without it by ``isHeldByCurrentThread``, which only asks whether it is the reading
    /// thread's own id, and only that thread writes its id.
    private let owner = Atomic<UInt>(0)
    private var priorityWaiters = 0
    /// Writers waiting in ``lock()`` (for tests, see ``waitForWaitingWriters(_:)``).
    private var waitingWriters = 0
    /// Tests waiting in ``waitForWaitingWriters(_:)``: only then does a writer that begins to
    /// wait broadcast, so that writers under contention wake each other no more than before.
    private var testWaiters = 0

    /// Whether the current thread holds the lock: a read-write transaction of this database
    /// is open further out on this thread's stack.
    var isHeldByCurrentThread: Bool {
        owner.load(ordering: .relaxed) == Self.threadID()
    }

    /// The calling thread's id, never 0.
    private static func threadID() -> UInt {
        #if canImport(Glibc)
            UInt(pthread_self())
        #else
            UInt(bitPattern: pthread_self())
        #endif
    }

    /// Waits until the lock is free and no priority request waits, then takes it.
    func lock() {
        condition.lock()
        LockAcquisitions.count()
        if isHeld || priorityWaiters > 0 {
            waitingWriters += 1
            // A test in `waitForWaitingWriters(_:)` wakes (and writers waiting here wait again).
            if testWaiters > 0 { condition.broadcast() }
            while isHeld || priorityWaiters > 0 { condition.wait() }
            waitingWriters -= 1
        }
        isHeld = true
        owner.store(Self.threadID(), ordering: .relaxed)
        condition.unlock()
    }

    /// Takes the lock if it is free and no priority request waits, without waiting; returns
    /// whether it was taken.
    func tryLock() -> Bool {
        condition.lock()
        LockAcquisitions.count()
        defer { condition.unlock() }
        guard !isHeld && priorityWaiters == 0 else { return false }
        isHeld = true
        owner.store(Self.threadID(), ordering: .relaxed)
        return true
    }

    /// Releases the lock and wakes its waiters; runs the idle handler when no one waits for it.
    func unlock() {
        condition.lock()
        LockAcquisitions.count()
        isHeld = false
        owner.store(0, ordering: .relaxed)
        let idle = waitingWriters == 0 && priorityWaiters == 0 ? idleHandler : nil
        condition.broadcast()
        condition.unlock()
        idle?()
    }

    /// Run by ``unlock()`` when no writer or priority request waits: the writer gives back a
    /// turn it kept for the next writer of this process (``WriterTurns``).
    private var idleHandler: (@Sendable () -> Void)?

    /// Sets the idle handler; call once, before the lock is used.
    func setIdleHandler(_ handler: @escaping @Sendable () -> Void) {
        condition.lock()
        LockAcquisitions.count()
        idleHandler = handler
        condition.unlock()
    }

    /// Whether writers wait in ``lock()``.
    var hasWaitingWriters: Bool {
        condition.lock()
        LockAcquisitions.count()
        defer { condition.unlock() }
        return waitingWriters > 0
    }

    /// Takes the lock ahead of waiting writers, waiting at most until `deadline` for the
    /// current holder; returns whether it was taken.
    func lockWithPriority(before deadline: Date) -> Bool {
        condition.lock()
        LockAcquisitions.count()
        defer { condition.unlock() }
        priorityWaiters += 1
        // Writers waiting in `lock()` keep waiting; `waitForPriorityRequest()` wakes.
        condition.broadcast()
        defer {
            priorityWaiters -= 1
            // Writers that stood aside for this request may go on (or queue behind the lock).
            condition.broadcast()
        }
        while isHeld {
            if !condition.wait(until: deadline) && isHeld { return false }
        }
        isHeld = true
        owner.store(Self.threadID(), ordering: .relaxed)
        return true
    }

    /// Waits until a ``lockWithPriority(before:)`` request waits for the lock (for tests).
    func waitForPriorityRequest() {
        condition.lock()
        LockAcquisitions.count()
        defer { condition.unlock() }
        while priorityWaiters == 0 { condition.wait() }
    }

    /// Waits until `count` writers wait in ``lock()`` for the lock, at most until `deadline`;
    /// returns whether they do (for tests).
    func waitForWaitingWriters(_ count: Int, before deadline: Date) -> Bool {
        condition.lock()
        LockAcquisitions.count()
        testWaiters += 1
        defer {
            testWaiters -= 1
            condition.unlock()
        }
        while waitingWriters < count {
            if !condition.wait(until: deadline) { return waitingWriters >= count }
        }
        return true
    }
}
