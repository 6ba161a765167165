internal import CSnapshotDBVFS
internal import Dispatch
internal import Foundation
internal import SnapshotDBLocking

internal import struct Synchronization.Atomic

#if canImport(Glibc)
    internal import Glibc
#elseif canImport(Darwin)
    internal import Darwin
#endif

/// Turns for the writers of every SnapshotDB process on one file, taken before `BEGIN
/// IMMEDIATE` and given back after `COMMIT` or `ROLLBACK`, so that a process's writers are not
/// starved by another process that commits without pause.
///
/// **Why.** SQLite's WAL write lock is a non-blocking file lock, and a writer that finds it
/// taken sleeps in its busy handler (1, 2, 5, … then 100 ms between tries) while the holder,
/// which never sleeps, takes it again a few microseconds after each `COMMIT`. Under a steady
/// stream of commits from one process, the writers of another mostly wake to a held lock: the
/// cross-process stress run measured commit maxima of 2.4 to 10 s (p99 up to 1.3 s), against
/// 0.15 to 0.27 s in one process; with the default 5 s busy timeout such a writer fails with
/// `busy`. GRDB and every other client of SQLite's busy handler behave the same.
///
/// **How.** Two bytes of the `-wal` file, far past any frame, carry open file description
/// locks (Linux's `F_OFD_SETLKW`, which blocks in the kernel and wakes the waiter the moment
/// the lock is free):
/// - the *turn* byte, held exclusively by the one SnapshotDB writer whose turn it is;
/// - the *waiting* byte, held shared by each writer waiting for its turn.
///
/// A writer that finds the turn taken waits for it in the kernel; after ``patience`` it also
/// marks itself waiting. A writer that finds a waiter marked lets it go first: it waits for an
/// exclusive lock on the waiting byte, which it gets once every writer that was marked has had
/// its turn (each lets go of the waiting byte as it gets the turn), and then waits in line
/// itself. So a process that has just committed cannot take the turn straight back, again and
/// again, while another waits: short waits are a race (a process may commit several times in a
/// row, which keeps throughput), long ones are served in turn. Without waiters a writer takes
/// the turn without blocking (two system calls). The handoff lasts ``handoffLimit`` at most: a
/// marked writer whose process stopped must not hold every other process back. A process whose
/// writers queue on its ``WriterLock`` keeps the turn for them up to ``carryLimit``, unless a
/// writer of another process is marked; the lock's idle handler gives back a turn kept for a
/// holder that took none (`vacuum()`).
///
/// **Not while Litestream replicates.** The ``Writer`` takes no turns while a replicator holds
/// the WAL: Litestream takes SQLite's write lock for its own checkpoints through the busy
/// handler, and writers that hand the lock to each other without a gap leave it fewer moments.
/// (The stress run once saw replicas Litestream tore in 4 of 29 runs with turns, 1 of about
/// 74 without; the torn-replica experiment found none in 50 runs with turns forced on, and no
/// arm of SnapshotDB's measurably worse than plain SQLite: see <doc:Litestream>.)
///
/// **What it does not change.** SQLite's write lock still decides who writes: the turn is
/// only an order among SnapshotDB processes, and `BEGIN IMMEDIATE` follows it with SQLite's
/// busy handler as before. Foreign clients (the `sqlite3` shell) take no turn and compete as
/// before. Nothing waits for a turn while holding SQLite's write lock, so the turns add no
/// deadlock. SQLite takes no lock in the `-wal` file, so this descriptor can be closed at any
/// time without dropping one of SQLite's POSIX locks (closing a descriptor of the database file
/// or the `-shm` would). A process that dies gives its locks back with its descriptors.
///
/// **Only when another process writes.** A turn costs three system calls per transaction,
/// which a process that writes alone should not pay. So a writer takes turns
/// (``acquireIfOthersWrite(headerChange:within:)``) only while there is evidence of another
/// writer: the WAL-index header's change counter, read
/// before `BEGIN IMMEDIATE`, moved since this process's last commit (another process committed
/// in between), or one look in 16 transactions found another process holding or waiting for
/// the turn; the evidence lasts ``activity``. A process that knows nothing yet (before its
/// first commit) takes a turn.
///
/// **Waiting with a deadline.** The kernel's blocking wait has no timeout, so it runs on a
/// helper thread of the database (started at the first wait, ended by `close()` or the
/// database's release) while the writer waits on a semaphore for at most its busy timeout. A
/// writer that gives up (``Outcome/timedOut``) leaves the helper blocked; when the helper gets
/// the lock it lets it go at once. Until it returns, the writers of this process go without
/// turns (``Outcome/unavailable``), as they would where the platform has no open file
/// description locks (macOS), on a file system without them, or where the `-wal` cannot be
/// opened for writing.
final class WriterTurns: Sendable {
    /// The byte that is the turn: far past the end of any WAL (a terabyte in).
    static let turnOffset: Int64 = 1 << 40
    /// The byte that writers waiting for a turn hold shared.
    static let waitingOffset: Int64 = turnOffset + 1
    /// How long one piece of evidence of another writer keeps this process taking turns.
    static let activity: Duration = .seconds(2)
    /// Without evidence, one transaction in this many looks for writers of other processes
    /// holding or waiting for the turn.
    static let lookEvery = 16
    /// The longest a writer lets marked writers of other processes go first.
    static let handoffLimit: Duration = .milliseconds(100)

    /// What ``acquire(within:)`` got.
    enum Outcome: Equatable {
        /// The turn is this writer's until ``finish(othersOfThisProcessWait:)``.
        case held
        /// No turns here: the writer goes on as without them.
        case unavailable
        /// Other processes kept the turn past the deadline.
        case timedOut
    }

    /// One blocking wait for the helper thread.
    private struct Request {
        var id: UInt64
        var descriptor: Int32
        var offset: Int64
        var kind: Int32
    }

    private struct State {
        /// When this process took the turn it holds (`nil`: it holds none).
        var heldSince: ContinuousClock.Instant?
        /// The turn is kept for the next writer of this process.
        var isCarried = false
        /// Until when this process takes turns.
        var activeUntil: ContinuousClock.Instant?
        var writesSinceLook = 0
        var descriptor: Int32 = -1
        /// A failure that will not go away (no OFD locks, no write access to the `-wal`).
        var isUnusable = false
        var isClosed = false
        var helperStarted = false
        /// The wait handed to the helper, until it takes it.
        var request: Request?
        /// The helper has a wait: queued or blocked in the kernel.
        var helperBusy = false
        /// The wait a writer is waiting on (0: none), and the one the helper completed for it.
        var wanted: UInt64 = 0
        var completed: UInt64 = 0
        var lastID: UInt64 = 0
    }

    private let state = Mutex(State())
    /// The header's change counter after this process's last commit (``noCommitYet`` before it):
    /// outside `state`, as only holders of the database's ``WriterLock`` read or write it.
    private let lastOwnChange = Atomic<UInt64>(noCommitYet)
    private static let noCommitYet = UInt64.max
    /// `State.isCarried`, readable without the lock (stored with it), so that a writer whose
    /// turn was not kept takes no lock to learn it.
    private let carried = Atomic<Bool>(false)

    /// ``lastOwnChange``, `nil` before this process's first commit.
    private var ownChange: UInt32? {
        let change = lastOwnChange.load(ordering: .relaxed)
        return change == Self.noCommitYet ? nil : UInt32(truncatingIfNeeded: change)
    }
    /// Signalled by the helper when it took the lock for the waiting writer.
    private let completion = DispatchSemaphore(value: 0)
    /// Signalled for each request, and to end the helper.
    private let requests = DispatchSemaphore(value: 0)
    private let walPath: String
    /// How long a writer waits for its turn before it marks itself waiting, so that the writer
    /// whose turn it is lets it go first.
    let patience: Duration

    #if DEBUG
        /// Runs when a waiting writer has marked itself waiting (tests).
        let whenMarked = Mutex<(@Sendable () -> Void)?>(nil)
        /// Signalled each time the helper thread finished a wait (tests).
        let helperFinished = DispatchSemaphore(value: 0)
    #endif

    /// How many turns this process's writers took, and how many waits for one timed out (for
    /// tests).
    let turnsTaken = Atomic<Int>(0)
    let turnsTimedOut = Atomic<Int>(0)

    /// The longest a process keeps the turn for its next writers while they queue.
    let carryLimit: Duration

    /// Turns on the `-wal` at `walPath`; none at all unless `enabled`
    /// (``Configuration/writerTurns``).
    init(
        walPath: String, enabled: Bool = true, patience: Duration = .milliseconds(5),
        carryLimit: Duration = .milliseconds(20)
    ) {
        self.walPath = walPath
        self.patience = patience
        self.carryLimit = carryLimit
        if !enabled { state.withLock { $0.isUnusable = true } }
    }

    deinit {
        let descriptor = state.withLock { $0.descriptor }
        if descriptor >= 0 { closeTurnDescriptor(descriptor) }
    }

    private enum Mode {
        case take, look, skip
    }

    /// Takes a turn when another process writes, or may (see the type's notes); otherwise
    /// returns ``Outcome/unavailable`` at the cost of a lock and a clock read. `headerChange` is
    /// the WAL-index header's change counter read before `BEGIN IMMEDIATE` (`nil` when the
    /// handle has not mapped it yet).
    func acquireIfOthersWrite(headerChange: UInt32?, within timeout: Duration) -> Outcome {
        let now = ContinuousClock.now
        let mode = state.withLock { state -> Mode in
            // Before this process's first commit nothing is known: a turn. (A handle that has not
            // mapped the header yet, a new connection's, brings no evidence either way.)
            guard let own = ownChange else { return .take }
            if let headerChange, headerChange != own { state.activeUntil = now + Self.activity }
            if let until = state.activeUntil, now < until { return .take }
            state.writesSinceLook += 1
            guard state.writesSinceLook >= Self.lookEvery else { return .skip }
            state.writesSinceLook = 0
            return .look
        }
        switch mode {
        case .skip:
            return .unavailable
        case .look:
            guard let descriptor = usableDescriptor() else { return .unavailable }
            let othersWrite =
                snapshotdb_turn_is_held_elsewhere(descriptor, Self.turnOffset) == 1
                || snapshotdb_turn_is_held_elsewhere(descriptor, Self.waitingOffset) == 1
            guard othersWrite else { return .unavailable }
            state.withLock { $0.activeUntil = now + Self.activity }
        case .take:
            break
        }
        return acquire(within: timeout)
    }

    /// This process committed, and its commit left the header's change counter at `change`.
    func didCommit(change: UInt32) {
        lastOwnChange.store(UInt64(change), ordering: .relaxed)
    }

    /// This process committed on `handle` outside a read-write transaction (a consumer's
    /// acknowledgement, a history purge), whose header read `before` under SQLite's
    /// write lock: its commit, if it wrote anything, is that counter plus one.
    func didCommit(on handle: SQLiteHandle, headerBefore before: WALIndexHeader?) {
        guard let before else { return }
        let wrote = handle.walIndexHeader().map { $0.change != before.change } ?? true
        let now = ContinuousClock.now
        state.withLock { state in
            // Another process committed since this process's last commit: evidence, which the
            // new counter must not hide.
            if let own = ownChange, own != before.change { state.activeUntil = now + Self.activity }
            lastOwnChange.store(UInt64(wrote ? before.change &+ 1 : before.change), ordering: .relaxed)
        }
    }

    /// Takes this process's writer's turn, waiting at most `timeout` (a negative or zero
    /// timeout only tries). Call with the database's ``WriterLock`` held, before `BEGIN
    /// IMMEDIATE`; after ``Outcome/held``, call ``finish(othersOfThisProcessWait:)`` once the
    /// transaction ended.
    func acquire(within timeout: Duration) -> Outcome {
        let outcome = take(within: timeout)
        if outcome == .held {
            state.withLock { $0.heldSince = ContinuousClock.now }
            turnsTaken.add(1, ordering: .relaxed)
        } else if outcome == .timedOut {
            turnsTimedOut.add(1, ordering: .relaxed)
        }
        return outcome
    }

    private func take(within timeout: Duration) -> Outcome {
        guard let descriptor = usableDescriptor() else { return .unavailable }
        let othersWait = snapshotdb_turn_is_held_elsewhere(descriptor, Self.waitingOffset) == 1
        if !othersWait {
            switch lock(descriptor, Self.turnOffset, SNAPSHOTDB_TURN_EXCLUSIVE) {
            case .held: return .held
            case .unavailable: return .unavailable
            case .timedOut: break
            }
        }
        guard timeout > .zero else { return .timedOut }
        let deadline = DispatchTime.now() + timeout.dispatchInterval
        if othersWait {
            // Let every writer that was marked waiting have its turn first, for at most
            // `handoffLimit`: a marked writer that does not take it (its process stopped, or
            // swapped out) must not hold every other process's writers back. Past it, this one
            // queues anyway; the wait left with the helper makes the writers of this process go
            // without turns until it returns.
            let handoffDeadline = min(deadline, DispatchTime.now() + Self.handoffLimit.dispatchInterval)
            switch wait(descriptor, Self.waitingOffset, SNAPSHOTDB_TURN_EXCLUSIVE, until: handoffDeadline) {
            case .held: _ = snapshotdb_turn_lock(descriptor, Self.waitingOffset, SNAPSHOTDB_TURN_UNLOCK, 0)
            case .unavailable: return .unavailable
            case .timedOut: break
            }
        }
        return wait(
            descriptor, Self.turnOffset, SNAPSHOTDB_TURN_EXCLUSIVE, until: deadline, markingAfter: patience)
    }

    /// The turn the last writer of this process kept for this one, if it did: the turn is then
    /// this writer's (``Outcome/held``).
    func takeCarried() -> Bool {
        guard carried.load(ordering: .relaxed) else { return false }
        return state.withLock { state in
            defer {
                state.isCarried = false
                carried.store(false, ordering: .relaxed)
            }
            return state.isCarried
        }
    }

    /// The writer's transaction ended: the turn is kept for the next writer of this process
    /// when `othersOfThisProcessWait`, no writer of another process is marked waiting, and it
    /// has been held less than ``carryLimit``; otherwise it is given back. So a process's
    /// queued writers commit one after another (a turn handed to another process costs a wake
    /// up there and a cold start), and another process waits at most ``patience`` and one
    /// transaction, or ``carryLimit``, for a turn in which this process already committed.
    func finish(othersOfThisProcessWait: Bool) {
        let now = ContinuousClock.now
        let descriptor = state.withLock { state -> Int32 in
            if othersOfThisProcessWait, let since = state.heldSince, now - since < carryLimit,
                state.descriptor >= 0,
                snapshotdb_turn_is_held_elsewhere(state.descriptor, Self.waitingOffset) == 0
            {
                state.isCarried = true
                carried.store(true, ordering: .relaxed)
                return -1
            }
            state.heldSince = nil
            return state.descriptor
        }
        if descriptor >= 0 {
            _ = snapshotdb_turn_lock(descriptor, Self.turnOffset, SNAPSHOTDB_TURN_UNLOCK, 0)
        }
    }

    /// Gives back a turn kept for a next writer that did not come (the database's writer lock
    /// went idle: see ``WriterLock/setIdleHandler(_:)``).
    func releaseCarried() {
        // (Set by the writer that just gave up the writer lock, before it did: this thread, or
        // one ordered after it by that lock.)
        guard carried.load(ordering: .relaxed) else { return }
        state.withLock { state in
            guard state.isCarried else { return }
            state.isCarried = false
            carried.store(false, ordering: .relaxed)
            state.heldSince = nil
            if state.descriptor >= 0 {
                _ = snapshotdb_turn_lock(state.descriptor, Self.turnOffset, SNAPSHOTDB_TURN_UNLOCK, 0)
            }
        }
    }

    /// Ends the helper thread and closes the descriptor (the database closed or was released);
    /// a wait still blocked in the kernel closes it when it returns. Later acquires are
    /// ``Outcome/unavailable``.
    func close() {
        let (descriptor, wakeHelper) = state.withLock { state -> (Int32, Bool) in
            guard !state.isClosed else { return (-1, false) }
            state.isClosed = true
            let wake = state.helperStarted
            guard !state.helperBusy else { return (-1, wake) }
            defer { state.descriptor = -1 }
            return (state.descriptor, wake)
        }
        if wakeHelper { requests.signal() }
        if descriptor >= 0 { closeTurnDescriptor(descriptor) }
    }

    // MARK: Waiting

    /// Takes `kind` on the byte at `offset` if no other description holds it:
    /// ``Outcome/timedOut`` when one does.
    private func lock(_ descriptor: Int32, _ offset: Int64, _ kind: Int32) -> Outcome {
        switch snapshotdb_turn_lock(descriptor, offset, kind, 0) {
        case 0: return .held
        case EAGAIN, EACCES: return .timedOut
        default:
            state.withLock { $0.isUnusable = true }
            return .unavailable
        }
    }

    /// Takes `kind` on the byte at `offset`: at once if it can, else through the helper thread
    /// while this thread waits until `deadline`. With `markingAfter`, a wait that lasts that long
    /// also holds the waiting byte shared until it ends.
    private func wait(
        _ descriptor: Int32, _ offset: Int64, _ kind: Int32, until deadline: DispatchTime,
        markingAfter patience: Duration? = nil
    ) -> Outcome {
        let attempt = lock(descriptor, offset, kind)
        guard attempt == .timedOut else { return attempt }
        let submitted = state.withLock { state -> (id: UInt64, start: Bool)? in
            guard !state.helperBusy, !state.isClosed else { return nil }
            state.helperBusy = true
            state.lastID += 1
            state.wanted = state.lastID
            state.request = Request(id: state.lastID, descriptor: descriptor, offset: offset, kind: kind)
            defer { state.helperStarted = true }
            return (state.lastID, !state.helperStarted)
        }
        guard let submitted else { return .unavailable }
        if submitted.start {
            let helper = Thread { [self] in runHelper() }
            helper.name = "snapshotdb.turns"
            helper.start()
        }
        requests.signal()
        var marked = false
        var signalled = false
        if let patience {
            // Waited `patience`: the writer whose turn it is lets this one go first. The mark
            // cannot be taken while a writer that was marked holds it alone, for a moment, to
            // hand over (see `take`): tried again every `patience`.
            // (At least a millisecond apart: a zero patience must not spin.)
            let retry = max(patience, .milliseconds(1)).dispatchInterval
            var next = DispatchTime.now() + patience.dispatchInterval
            while true {
                signalled = completion.wait(timeout: marked ? deadline : min(next, deadline)) == .success
                if signalled || marked || DispatchTime.now() >= deadline { break }
                marked = snapshotdb_turn_lock(descriptor, Self.waitingOffset, SNAPSHOTDB_TURN_SHARED, 0) == 0
                #if DEBUG
                    if marked { whenMarked.withLock { $0 }?() }
                #endif
                next = DispatchTime.now() + retry
            }
        } else {
            signalled = completion.wait(timeout: deadline) == .success
        }
        if marked { _ = snapshotdb_turn_lock(descriptor, Self.waitingOffset, SNAPSHOTDB_TURN_UNLOCK, 0) }
        let outcome = state.withLock { state -> (Outcome, consumeSignal: Bool) in
            state.wanted = 0
            guard state.completed == submitted.id else { return (.timedOut, false) }
            state.completed = 0
            // The helper completed after the deadline, before this look: its signal is still due.
            return (.held, !signalled)
        }
        if outcome.consumeSignal { completion.wait() }
        return outcome.0
    }

    /// The helper thread: takes each request's lock, blocking in the kernel, then hands it to
    /// the writer still waiting for it, or lets it go; ends once the turns are closed.
    private func runHelper() {
        while true {
            requests.wait()
            let next = state.withLock { state -> (request: Request?, stop: Bool) in
                defer { state.request = nil }
                return (state.request, state.isClosed && state.request == nil)
            }
            if next.stop { return }
            guard let request = next.request else { continue }
            let result = snapshotdb_turn_lock(request.descriptor, request.offset, request.kind, 1)
            let (handOver, closeDescriptor) = state.withLock { state -> (Bool, Bool) in
                let handOver = result == 0 && state.wanted == request.id
                if handOver {
                    state.completed = request.id
                } else if result == 0 {
                    // No one waits for it any more. Let go while the descriptor is surely open:
                    // `close()` leaves it to this thread until `helperBusy` is cleared.
                    _ = snapshotdb_turn_lock(request.descriptor, request.offset, SNAPSHOTDB_TURN_UNLOCK, 0)
                }
                state.helperBusy = false
                if result != 0 { state.isUnusable = true }
                let close = state.isClosed && state.descriptor >= 0
                if close { state.descriptor = -1 }
                return (handOver, close)
            }
            if handOver { completion.signal() }
            #if DEBUG
                helperFinished.signal()
            #endif
            if closeDescriptor {
                closeTurnDescriptor(request.descriptor)
                return
            }
        }
    }

    // MARK: The descriptor

    /// The `-wal` opened for writing (never created: SQLite creates it), or `nil` when there
    /// are no turns now.
    private func usableDescriptor() -> Int32? {
        state.withLock { state -> Int32? in
            guard !state.isUnusable, !state.isClosed, !state.helperBusy else { return nil }
            if state.descriptor < 0 {
                let descriptor = open(walPath, O_RDWR | O_CLOEXEC)
                if descriptor < 0 {
                    // Not there yet: the next transaction tries again. Anything else stays.
                    if errno != ENOENT { state.isUnusable = true }
                    return nil
                }
                state.descriptor = descriptor
            }
            return state.descriptor
        }
    }
}

/// `close(2)`, out of reach of ``WriterTurns/close()``'s name.
private func closeTurnDescriptor(_ descriptor: Int32) {
    _ = close(descriptor)
}

extension WriterTurns: CommitSubscriber {
    /// A commit of this process: its WAL-index change counter is this process's, not evidence
    /// that another process writes.
    func commitDidHappen(_ event: CommitEvent, in database: Database) {
        if let change = event.walChange { didCommit(change: change) }
    }
}
