internal import Dispatch
internal import Foundation
internal import SnapshotDBInspection
internal import SnapshotDBLocking

internal import struct Synchronization.Atomic

#if canImport(Glibc)
    internal import Glibc
#elseif canImport(Darwin)
    internal import Darwin
#endif
#if canImport(notify)
    internal import notify
#endif

/// Publishes commits of other processes as they happen, so that `changes()` subscribers hear of
/// them without this process beginning a transaction.
///
/// How it learns of a commit: a commit appends frames to the `-wal`, so on Linux the watcher
/// sleeps in `poll(2)` on an inotify watch of the `-wal` (`IN_MODIFY`) and costs nothing while
/// the database is idle. Woken, it compares the WAL-index header (a read of shared memory, no
/// SQL) with the last one it saw; when it changed and no transaction of this process made it,
/// it begins a read transaction on a handle of its own, which publishes the new commits with
/// their changesets read from the history in that snapshot
/// (``Database/publishCommits(through:reading:)``), and ends it at once (it pins nothing).
///
/// A writer appends its frames *before* it updates the WAL-index header (after its `fsync`,
/// under `synchronous = FULL`), so the last event of a commit can arrive before its header:
/// after an event that found no change the watcher looks again after 2, 8, 32, 128, 512 and
/// 2,048 ms, then every ``writerPollInterval`` for as long as another process holds the WAL's
/// write lock (a commit whose sync outlasts those looks makes no event when it ends: only its
/// header changes), and then sleeps until the next event. Its first look is at once, before any
/// event: a commit made between the subscription and the watch being added is published too.
///
/// Where inotify is not available (another OS, a file system that does not report changes, no
/// `-wal` yet), it polls the header every ``pollInterval``: cheap, but not zero. On Darwin, every
/// commit of a SnapshotDB process posts a Darwin notification named after the file
/// (``CommitNotification``, `notify_post(3)`), which wakes the watchers of the other processes
/// through `notify_register_file_descriptor(3)`; commits of other SQLite clients post nothing, so
/// there the watcher also looks once a second. (The Darwin code is not built or tested on the
/// Linux machines this project runs its tests on.)
///
/// Started by the first subscription (``Database/changes()``, ``Database/addObserver(on:_:)``)
/// and stopped by ``Database/close()`` or the database's release. Foreign writes by clients
/// that are not SnapshotDB (the `sqlite3` shell) are sealed off this thread
/// (``Writer/requestSeal(_:attempt:)``), which then publishes them.
final class ForeignCommitWatcher: Sendable {
    /// How often the header is polled when inotify cannot watch the `-wal`.
    static let pollInterval: Int32 = 50
    /// How often a read replica (``Database/init(replica:vfs:configuration:)``) is looked at: it
    /// has no `-wal` to watch, so each look is a short read transaction through its VFS
    /// (Litestream's VFS itself polls its replica once a second).
    static let replicaPollInterval: Int32 = 250
    /// How long the watcher of a read replica keeps a handle that sees no new commit (see
    /// ``ReplicaHandleFollowing``): an idle replica costs one open of the VFS this often, one that
    /// follows a busy primary none.
    static let replicaHandleLifetime: Duration = .seconds(5)
    /// The re-checks after an event that found the header unchanged, in milliseconds.
    static let settleDelays: [Int32] = [2, 8, 32, 128, 512, 2048]
    /// How often the watcher looks, after the re-checks, while another process holds the WAL's
    /// write lock (a writer between its last frame and its header, or in a long transaction).
    static let writerPollInterval: Int32 = 250

    #if DEBUG
        /// Runs on the watcher thread before it adds its watch (tests hold it there).
        let beforeWatching = Mutex<(@Sendable () -> Void)?>(nil)
        /// Makes the watcher poll as where inotify cannot watch (tests of that path).
        let withoutNotifications = Atomic<Bool>(false)
        /// Runs on the watcher thread each time it goes to sleep until the `-wal` changes
        /// (tests of an idle database).
        let whenIdle = Mutex<(@Sendable () -> Void)?>(nil)
    #endif

    private struct State {
        var started = false
        var stopped = false
        /// The write end of the pipe that wakes the thread to stop.
        var wake: Int32 = -1
        /// The watcher thread, while it runs.
        var thread: pthread_t?
    }

    /// Signalled when the thread ended (closed its handle and descriptors).
    private let finished = DispatchSemaphore(value: 0)

    private let state = Mutex(State())
    private let path: String
    /// How often the watcher looks when it cannot watch the `-wal`, in milliseconds.
    private let pollMilliseconds: Int32
    /// How many times the watcher looked at the header (for tests: an idle database makes it
    /// look no more).
    let checks = Atomic<Int>(0)

    init(path: String, pollInterval: Int32 = ForeignCommitWatcher.pollInterval) {
        self.path = path
        self.pollMilliseconds = pollInterval
    }

    /// Starts the watcher thread for `database` unless it runs (or was stopped).
    func start(for database: Database) {
        var fds: [Int32] = [-1, -1]
        let shouldStart = state.withLock { state -> Bool in
            guard !state.started, !state.stopped else { return false }
            guard pipe(&fds) == 0 else { return false }
            state.started = true
            state.wake = fds[1]
            return true
        }
        guard shouldStart else { return }
        _ = fcntl(fds[0], F_SETFD, FD_CLOEXEC)
        _ = fcntl(fds[1], F_SETFD, FD_CLOEXEC)
        let stopFD = fds[0]
        let weakDatabase = WeakDatabase(database)
        let thread = Thread { [self] in run(stopFD: stopFD, database: weakDatabase) }
        thread.name = "snapshotdb.watch"
        thread.start()
    }

    /// Stops the thread and waits until it closed its SQLite handle (so that closing the
    /// database leaves no handle of this process on the file); later starts do nothing.
    func stop() {
        let (wake, thread) = state.withLock { state -> (Int32, pthread_t?) in
            state.stopped = true
            defer { state.wake = -1 }
            return (state.wake, state.thread)
        }
        guard wake >= 0 else { return }
        var byte: UInt8 = 1
        _ = write(wake, &byte, 1)
        close(wake)
        // The database may be released by the watcher thread itself (its check held the last
        // reference): it must not wait for itself.
        if let thread, pthread_equal(thread, pthread_self()) != 0 { return }
        finished.wait()
    }

    private func run(stopFD: Int32, database: WeakDatabase) {
        state.withLock { $0.thread = pthread_self() }
        // `watch` owns the handle: it is closed when `watch` returns, before the signal.
        watch(stopFD: stopFD, database: database)
        close(stopFD)
        finished.signal()
    }

    private func watch(stopFD: Int32, database: WeakDatabase) {
        let role = database.database?.role
        // (A replica's pages are its VFS's: no `-wal` of this process's to be notified of.)
        var watched: String? = role?.hasWAL == false ? nil : path + "-wal"
        #if DEBUG
            beforeWatching.withLock { $0 }?()
            if withoutNotifications.load(ordering: .relaxed) { watched = nil }
        #endif
        var watcher = Watch(walPath: watched)
        defer { watcher.end() }
        var handle: SQLiteHandle?
        // On a replica, when the handle last saw a new commit (or was opened), and whether it
        // still follows: a handle of Litestream's VFS can stop following (as after its
        // primary was put back) where a new one reads on. It is opened again when it stalled by
        // the rule of the connections (``ReplicaHandleFollowing``: a put-back seen, or behind
        // what a connection published), and when it saw nothing new for
        // `replicaHandleLifetime`: when every handle of the process stalled (a replica only
        // subscribers use), nothing else would tell. (A trial of a put-back primary recovered
        // 19 s after its last commit with a 30 s lifetime.)
        var lastProgress = ContinuousClock.now
        var following = ReplicaHandleFollowing(marksAtOpen: 0)
        var lastHeader: WALIndexHeader?
        // On a replica, the newest commit published: a first look below it is the primary put
        // back before the watcher started (a new handle is at least as new as anything read).
        var lastCommit: UInt64? =
            role?.comparesHistoryTokens == true
            ? database.database?.commitLog.publishedCommit.load(ordering: .acquiring) : nil
        // The first look is at once: commits made before the watch was added raised no event.
        var settle = 1
        while true {
            var descriptors = [pollfd(fd: stopFD, events: Int16(POLLIN), revents: 0)]
            if watcher.descriptor >= 0 {
                descriptors.append(pollfd(fd: watcher.descriptor, events: Int16(POLLIN), revents: 0))
            }
            #if DEBUG
                if settle == 0 && watcher.isWatching { whenIdle.withLock { $0 }?() }
            #endif
            var timeout: Int32 =
                settle > 0 && settle <= Self.settleDelays.count
                ? Self.settleDelays[settle - 1]
                : settle > Self.settleDelays.count
                    ? Self.writerPollInterval : (watcher.isWatching ? Watch.idleTimeout : pollMilliseconds)
            // Without notifications (a replica, or no inotify) the poll is the bound: the
            // re-checks after a change must not look less often than it (they went up to 2 s).
            if !watcher.isWatching { timeout = min(timeout, pollMilliseconds) }
            let ready = poll(&descriptors, nfds_t(descriptors.count), timeout)
            if ready < 0 && errno == EINTR { continue }
            if descriptors[0].revents != 0 { return }
            let woken = descriptors.count > 1 && descriptors[1].revents != 0
            if woken { watcher.drain() }
            guard let database = database.database, !database.isClosed else { return }
            if !watcher.isWatching { watcher.retry() }
            checks.add(1, ordering: .relaxed)
            if role?.handlesMayStopFollowing == true, handle != nil {
                let now = ContinuousClock.now
                let stalled = following.isStalled(
                    marks: database.commitLog.foreignHistoryMarks, snapshot: lastCommit,
                    latest: database.commitLog.latestCommit, now: now)
                if stalled || now - lastProgress >= Self.replicaHandleLifetime { handle = nil }
            }
            let opensHandle = handle == nil
            let commitBefore = lastCommit
            let changed = Self.check(
                database, handle: &handle, lastHeader: &lastHeader, lastCommit: &lastCommit)
            if lastCommit != commitBefore || (opensHandle && handle != nil) { lastProgress = .now }
            if opensHandle, handle != nil {
                // Marks its own first look made (it found the put-back) are not against it.
                following = ReplicaHandleFollowing(marksAtOpen: database.commitLog.foreignHistoryMarks.count)
            }
            if woken || changed {
                settle = 1
            } else if settle > 0 {
                // Past the re-checks, looks go on while another process may be between its last
                // frame and its header.
                settle = min(settle + 1, Self.settleDelays.count + 1)
                if settle > Self.settleDelays.count && !anotherProcessHoldsTheWriteLock() { settle = 0 }
            }
        }
    }

    /// Whether a process other than this one holds the WAL's write lock (byte 120 of the
    /// `-shm`), as `/proc/locks` lists it; `false` where locks cannot be listed. Never opens the
    /// `-shm` (closing a descriptor on it would drop this process's SQLite locks).
    private func anotherProcessHoldsTheWriteLock() -> Bool {
        // A probe that fails (`stat()` of the `-shm` refused) answers as where locks cannot be
        // listed: the re-checks end, and the watch of the `-wal` (a replica's poll) still sees
        // the other process's commit when it lands.
        guard let locks = try? SnapshotDBInspector.probeLocks(databaseAt: path) else { return false }
        let ownProcess = getpid()
        return locks.bytes.contains { byte in
            byte.lock == .write && byte.holders.contains { $0.pid.map { $0 != ownProcess } ?? true }
        }
    }

    /// Looks at the WAL-index header and publishes what changed; returns whether it changed.
    ///
    /// On a read replica it also watches for the primary put back to an older commit: the
    /// commit it sees goes down (a handle follows the replica forward only; `lastCommit` is kept
    /// across a reopened handle), or ``Database/commitState(of:header:published:)`` finds
    /// another history token; either marks the commit log, which ends the `changes()` streams
    /// (subscribers are woken to advance). Each later commit under a number the log had
    /// published ends them again: nothing is published for it until the old numbers are passed
    /// (``Database/replicaWatcherSaw(_:after:)``).
    private static func check(
        _ database: Database, handle: inout SQLiteHandle?, lastHeader: inout WALIndexHeader?,
        lastCommit: inout UInt64?
    )
        -> Bool
    {
        do throws(DatabaseError) {
            if handle == nil {
                handle = try database.openHandle()
            }
            guard let handle else { return false }
            let header = handle.walIndexHeader()
            if let header, header == lastHeader { return false }
            // Made or read by this process already: nothing to publish.
            if let header, let known = database.knownCommit(at: header) {
                lastHeader = header
                database.replicaWatcherSaw(known, after: lastCommit)
                lastCommit = known
                return true
            }
            let published = database.commitLog.publishedCommit.load(ordering: .acquiring)
            try handle.statement(.begin).execute()
            defer { handle.rollback(after: "a look for other processes' commits", logger: database.logger) }
            let fix = try handle.statement(.fixSnapshot)
            _ = try fix.step()
            fix.reset()
            handle.lookUpWALIndex()
            // The same header before `BEGIN` and once the snapshot is fixed is the snapshot's
            // (headers never repeat); a header read only after could be a newer commit's, and
            // must never be learnt for this snapshot's counter.
            let after = handle.walIndexHeader()
            let snapshotHeader = header.flatMap { $0 == after ? $0 : nil }
            let state = try database.commitState(of: handle, header: snapshotHeader, published: published)
            database.replicaWatcherSaw(state.commit, after: lastCommit)
            lastCommit = state.commit
            database.publishCommits(through: state.commit, reading: handle)
            if state.unsealed != 0 { database.writer.requestSeal(database) }
            let changed = after != lastHeader
            lastHeader = snapshotHeader ?? lastHeader
            return changed
        } catch {
            // A busy or damaged file: the next transaction of this process reports it; the
            // watcher drops its handle and tries again at the next event.
            handle = nil
            return false
        }
    }
}

/// An inotify watch of one file, where the platform has inotify.
private struct Watch {
    /// The watched file; `nil` for none (a read replica), which makes the watcher poll.
    let walPath: String?
    private(set) var descriptor: Int32 = -1
    private var watch: Int32 = -1

    var isWatching: Bool { watch >= 0 }

    /// How long the watcher sleeps when nothing wakes it: for ever with inotify, which reports
    /// every writer; a second with Darwin notifications, which only SnapshotDB processes post.
    #if canImport(Darwin)
        static let idleTimeout: Int32 = 1_000
    #else
        static let idleTimeout: Int32 = -1
    #endif

    init(walPath: String?) {
        self.walPath = walPath
        #if os(Linux)
            guard walPath != nil else { return }
            descriptor = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
            retry()
        #elseif canImport(Darwin)
            guard let walPath else { return }
            var fd: Int32 = -1
            var token: Int32 = 0
            let name = CommitNotification.name(walPath: walPath)
            guard notify_register_file_descriptor(name, &fd, 0, &token) == NOTIFY_STATUS_OK else { return }
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            descriptor = fd
            watch = token
        #endif
    }

    /// Adds the watch if it is not there (the `-wal` did not exist, or was replaced).
    mutating func retry() {
        #if os(Linux)
            guard descriptor >= 0, watch < 0, let walPath else { return }
            watch = inotify_add_watch(
                descriptor, walPath, UInt32(IN_MODIFY | IN_DELETE_SELF | IN_MOVE_SELF | IN_ATTRIB))
        #endif
    }

    /// Reads every pending event; a watch that ended (the file was deleted or moved) is added
    /// again at the next look.
    mutating func drain() {
        #if os(Linux)
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
                guard count > 0 else { break }
                var offset = 0
                while offset + MemoryLayout<inotify_event>.size <= count {
                    let event = buffer.withUnsafeBytes {
                        $0.loadUnaligned(fromByteOffset: offset, as: inotify_event.self)
                    }
                    if event.mask & UInt32(IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF) != 0 { watch = -1 }
                    offset += MemoryLayout<inotify_event>.size + Int(event.len)
                }
            }
            if watch < 0 { retry() }
        #elseif canImport(Darwin)
            // Each notification is a 4-byte token on the descriptor.
            var token: Int32 = 0
            while read(descriptor, &token, MemoryLayout<Int32>.size) > 0 {}
        #endif
    }

    func end() {
        #if canImport(Darwin)
            // Cancelling the registration closes its descriptor.
            if watch >= 0 { notify_cancel(watch) }
        #else
            if descriptor >= 0 { close(descriptor) }
        #endif
    }
}

/// The Darwin notification a SnapshotDB process posts after each of its commits, named after the
/// database file, so that the watchers of other processes wake at once (see
/// ``ForeignCommitWatcher``). On other platforms, inotify sees the commit itself: posting does
/// nothing.
final class CommitNotification: CommitSubscriber {
    /// The notification's name for the database whose `-wal` is `walPath`.
    static func name(walPath: String) -> String {
        "org.snapshotdb.commit:" + walPath
    }

    /// Posts the notification for a commit of this process (on Darwin; elsewhere the watcher
    /// watches the `-wal` itself, and the dispatcher has no such subscriber).
    func commitDidHappen(_ event: CommitEvent, in database: Database) {
        #if canImport(Darwin)
            if event.isLocal { notify_post(Self.name(walPath: database.path + "-wal")) }
        #endif
    }
}
