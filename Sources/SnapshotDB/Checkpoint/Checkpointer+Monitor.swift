internal import Foundation
internal import Logging
internal import SnapshotDBLocking

#if canImport(Glibc)
    internal import Glibc
#elseif canImport(Darwin)
    internal import Darwin
#endif

/// The checkpoint monitor: the status value, the warnings, the events and the metrics.
extension Checkpointer {
    /// What the monitor decided after a checkpoint, acted upon outside the state lock.
    private struct Verdict {
        var stalled = false
        var warn = false
        var recovered = false
        var allClear = false
        /// A copy of the subscribers, to deliver to outside the state lock.
        var events = Subscribers<CheckpointEvent>(finishesOverflowingStreams: false)
    }

    /// Updates the monitor after a checkpoint that started at `startedAt` and returned `result`
    /// (`nil` when it failed), given the snapshots held when it started; logs, sends events and
    /// records metrics.
    ///
    /// A stall is announced (event, warning) only when it holds back at least
    /// ``Configuration/checkpointThresholdPages`` frames and has a culprit, so that the brief
    /// stalls caused by ordinary reads, by bookmarks that keep up, and by write transactions in
    /// flight stay quiet: a
    /// bookmark behind the newest commit, a read transaction behind it that was already open
    /// when the checkpoint started, a reader of another process, or else a stall that
    /// persists from one checkpoint to the next.
    func evaluate(
        _ database: Database, before: (latest: UInt64, records: [SnapshotRecord]),
        startedAt: ContinuousClock.Instant,
        result: CheckpointResult?
    ) {
        let unexplained: Int
        if let result, result.checkpointedFrames < result.walFrames {
            // Frames below the oldest local snapshot's end that the checkpoint could not copy
            // are pinned by someone this process does not know: a reader in another process.
            let floor = state.withLock { state in
                before.records.compactMap { record in
                    record.snapshot.flatMap {
                        $0 < before.latest ? state.wal.frameMap.endFrame(ofSnapshot: $0) : nil
                    }
                }.min()
            }
            unexplained = max(0, min(floor ?? result.walFrames, result.walFrames) - result.checkpointedFrames)
        } else {
            unexplained = 0
        }
        let stalled = result.map { $0.checkpointedFrames < $0.walFrames } ?? false
        let oldest = database.snapshotRecords().records.compactMap(\.snapshot).min() ?? database.latestCommit
        state.withLock { state in
            if result != nil {
                state.isStalled = stalled
                state.externallyPinnedFrames = unexplained
            }
            state.wal.prune(keepingSnapshotsFrom: min(oldest, before.latest))
        }
        let status = self.status(of: database, probingLocks: stalled)
        metrics.recordWALBytes(status.walBytes)
        metrics.recordLag(status)

        let now = ContinuousClock.now
        let openBeforeCheckpoint = (now - startedAt).timeInterval
        let candidates = status.laggingSnapshots.filter {
            $0.isBookmark || $0.secondsHeld >= openBeforeCheckpoint
        }
        // Name the snapshots that pin a checkpoint's worth of WAL, or else the one that pins the
        // most: a bookmark a commit or two behind is not what makes a WAL grow to megabytes.
        let significantBytes = Int64(max(1, configuration.checkpointThresholdPages)).saturatingMultiplied(
            by: frameBytes)
        let heaviest = candidates.max { $0.pinnedBytes < $1.pinnedBytes }
        let culprits = candidates.filter {
            $0.pinnedBytes >= significantBytes || $0 == heaviest
        }
        // The replicator's reader is expected: it explains no stall and is never named.
        let unexpectedReaders = status.externalReaders.filter { !$0.isReplicator }
        let explained = !culprits.isEmpty || !unexpectedReaders.isEmpty
        let warningBytes = configuration.walWarningBytes
        let interval = configuration.warningInterval
        let reportsUnexplainedStalls = checkpointing.reportsUnexplainedStalls
        let verdict = state.withLock { state -> Verdict in
            var verdict = Verdict()
            // A stall matters only when it holds back at least a checkpoint's worth of frames:
            // bookmarks that advance on every change notification are always a commit or two
            // behind under steady writes, and naming them would drown the real laggard.
            let significant =
                result.map {
                    $0.walFrames - $0.checkpointedFrames >= max(1, configuration.checkpointThresholdPages)
                } ?? false
            // Twice stalled with no one to name is a stranger this process cannot see, unless a
            // replicator holds the WAL: its reader is what stops every pass then, by design.
            let persistent =
                stalled && significant
                && (explained || (state.monitor.wasStalled && reportsUnexplainedStalls))
            if result != nil { state.monitor.wasStalled = stalled }
            if persistent && !state.monitor.announcedStall {
                state.monitor.announcedStall = true
                verdict.stalled = true
            }
            if persistent && status.walBytes >= warningBytes {
                let due =
                    state.monitor.lastWarning.map { last in
                        status.walBytes >= 2 * last.bytes || now - last.at >= interval
                    } ?? true
                if due {
                    state.monitor.lastWarning = (status.walBytes, now)
                    verdict.warn = true
                }
            }
            let hadProblem = state.monitor.announcedStall || state.monitor.lastWarning != nil
            if result != nil, !stalled, status.walBytes < warningBytes, hadProblem {
                verdict.recovered = true
                verdict.allClear = state.monitor.lastWarning != nil
                state.monitor = MonitorState(wasStalled: state.monitor.wasStalled)
            }
            if verdict.stalled || verdict.warn || verdict.recovered {
                verdict.events = state.subscribers
            }
            return verdict
        }

        if verdict.warn {
            metrics.countWarning()
            // The culprit pinning the most first: the one a one-culprit line names.
            let names = Self.culpritNames(
                culprits.sorted { $0.pinnedBytes > $1.pinnedBytes }, unexpectedReaders)
            logger.warning(
                "\(Self.warningText(status, culprits: names))",
                // The culprits are named once, in the message.
                metadata: ["wal_bytes": "\(status.walBytes)", "culprit_count": "\(names.count)"])
        }
        if verdict.allClear {
            logger.notice(
                "the WAL is back to \(ByteCount(status.walBytes)); no snapshot pins it any more",
                metadata: ["wal_bytes": "\(status.walBytes)"])
        }
        var events = verdict.events
        if verdict.stalled { _ = events.deliver(.checkpointStalled(status)) }
        if verdict.warn { _ = events.deliver(.walOverWarning(status)) }
        if verdict.recovered { _ = events.deliver(.recovered(status)) }
    }

    /// The current status; `probingLocks` lists the readers of other processes (one read of
    /// `/proc/locks`).
    func status(of database: Database, probingLocks: Bool) -> CheckpointStatus {
        let snapshots = database.snapshotRecords()
        let now = ContinuousClock.now
        let frameBytes = self.frameBytes
        let facts = state.withLock { state in
            let pins = snapshots.records.compactMap { record -> SnapshotPin? in
                guard let commit = record.snapshot else { return nil }
                let behind = snapshots.latest > commit ? snapshots.latest - commit : 0
                let pinnedFrames = state.wal.pinnedFrames(bySnapshot: commit, latest: snapshots.latest)
                let held = record.since.map { now - $0 } ?? .zero
                return SnapshotPin(
                    connectionName: record.name, commit: commit, commitsBehind: behind,
                    secondsHeld: held.timeInterval, isBookmark: record.isBookmark,
                    pinnedBytes: Int64(pinnedFrames) * frameBytes)
            }
            return (
                pins: pins, walFrames: state.wal.walFrames, checkpointed: state.wal.checkpointedFrames,
                stalled: state.isStalled, external: state.externallyPinnedFrames,
                atOpen: state.walBytesAtOpen
            )
        }
        let pins = facts.pins.sorted { ($0.commit, -$0.secondsHeld) < ($1.commit, -$1.secondsHeld) }
        return CheckpointStatus(
            walBytes: walBytes(frames: facts.walFrames),
            walFileBytes: hasWAL ? Self.fileSize(path + "-wal") : 0,
            walFrames: facts.walFrames, checkpointedFrames: facts.checkpointed, pageSize: pageSize,
            latestCommit: snapshots.latest, snapshots: pins,
            externalReaders: probingLocks ? externalReaders() : [],
            externallyPinnedBytes: Int64(facts.external) * frameBytes, isStalled: facts.stalled,
            walBytesAtOpen: facts.atOpen)
    }

    /// The readers of other processes holding a read mark on the `-shm`.
    func externalReaders() -> [ExternalReader] {
        guard hasWAL, let holders = ReadMarkProbe.holders(databasePath: path) else { return [] }
        let ownProcess = getpid()
        return
            holders
            .filter { $0.processID != ownProcess }
            .map {
                ExternalReader(
                    processID: $0.processID, processName: $0.processName, readMarkSlot: $0.slot,
                    isReplicator: checkpointing.isReplicator(processName: $0.processName))
            }
    }

    /// A new stream of monitor events; it ends when the database is released.
    func events() -> AsyncStream<CheckpointEvent> {
        let (stream, continuation) = AsyncStream<CheckpointEvent>.makeStream(
            bufferingPolicy: .bufferingNewest(256))
        let id = state.withLock { state -> Int? in
            guard !state.isClosed else { return nil }
            return state.subscribers.add(.stream(continuation))
        }
        guard let id else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.subscribers.remove(id) }
        }
        return stream
    }

    // MARK: Wording

    /// The warning about a pinned WAL, naming each culprit.
    static func warningText(_ status: CheckpointStatus, culprits: [String]) -> String {
        let size =
            "the WAL is \(ByteCount(status.walBytes)) (\(status.walFrames) frames, "
            + "\(status.checkpointedFrames) checkpointed) and cannot be checkpointed"
        // One culprit (the one pinning the oldest snapshot) keeps the line under about 200
        // characters; the event and checkpointStatus() carry every one.
        return "\(size): pinned by \(culpritList(culprits, naming: 1))"
    }

    /// Culprit descriptions joined (the first `limit`, then how many more), or a note that none
    /// is known.
    static func culpritList(_ names: [String], naming limit: Int = 3) -> String {
        guard !names.isEmpty else { return "a reader that could not be identified" }
        let shown = names.prefix(limit).joined(separator: "; ")
        return names.count > limit ? shown + "; and \(names.count - limit) more" : shown
    }

    /// One description per snapshot and per reader of another process.
    static func culpritNames(_ pins: [SnapshotPin], _ readers: [ExternalReader]) -> [String] {
        pins.map(describe) + readers.map(describe)
    }

    static func describe(_ pin: SnapshotPin) -> String {
        let kind = pin.isBookmark ? "bookmark" : "read transaction"
        let held = String(format: "%.1f", pin.secondsHeld)
        return
            "connection '\(pin.connectionName)' (\(kind) at commit \(pin.commit), "
            + "\(pin.commitsBehind) commits behind, held \(held) s, pins \(ByteCount(pin.pinnedBytes)))"
    }

    static func describe(_ reader: ExternalReader) -> String {
        let name = reader.processName.map { " (\($0))" } ?? ""
        return "process \(reader.processID)\(name) reading with read mark \(reader.readMarkSlot)"
    }
}

/// A byte count for people: `512 B`, `3.2 KiB`, `12.5 MiB`.
struct ByteCount: CustomStringConvertible {
    let bytes: Int64

    init(_ bytes: Int64) { self.bytes = bytes }

    var description: String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(bytes)
        var unit = 0
        while abs(value) >= 1024, unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return unit == 0 ? "\(bytes) B" : String(format: "%.1f", value) + " " + units[unit]
    }
}
