internal import Foundation
internal import Logging
internal import SnapshotDBInspection
internal import SnapshotDBLocking

extension Checkpointer {
    /// At open: a WAL left behind by an earlier run (or by another process) is checkpointed and
    /// truncated when nothing pins it, and its size is logged. A database SQLite opened
    /// read-only keeps its WAL as it is, without a checkpoint that could only fail. A read
    /// replica (``hasWAL`` false) has no WAL of its own: nothing is looked for.
    func checkpointAtOpen(readOnly: Bool = false) {
        let latest = database?.database?.latestCommit ?? 0
        let fileBytes = hasWAL ? Self.fileSize(path + "-wal") : 0
        var frames = 0
        var checkpointed = 0
        if fileBytes > 0 && readOnly {
            logger.debug(
                "found a WAL of \(ByteCount(fileBytes)) at open; the database is read-only here, so it stays as it is",
                metadata: ["wal_bytes_at_open": "\(fileBytes)"])
        } else if fileBytes > 0 {
            let walSize = "found a WAL of \(ByteCount(fileBytes)) at open"
            let metadata: Logger.Metadata = ["wal_bytes_at_open": "\(fileBytes)"]
            let passive = Result { () throws(DatabaseError) in try perform(.passive) }
            if case .success(let result) = passive {
                frames = result.walFrames
                checkpointed = result.checkpointedFrames
            }
            if let replicator {
                // The WAL is the replicator's to reset: the PASSIVE pass is all.
                logger.debug(
                    "\(walSize) (\(frames) frames, \(checkpointed) checkpointed); the replicator '\(replicator)' resets it",
                    metadata: metadata)
            } else {
                let truncate = passive.flatMap { _ in
                    Result { () throws(DatabaseError) in try perform(.truncate, busyTimeout: Self.resetWait) }
                }
                report(
                    truncate, walSize: walSize, metadata: metadata, frames: &frames,
                    checkpointed: &checkpointed)
            }
        }
        let generation = frames > 0 ? walGeneration.read() : nil
        state.withLock { state in
            state.walBytesAtOpen = fileBytes
            state.wal.start(
                latestCommit: latest, frames: frames, checkpointed: checkpointed, generation: generation)
        }
        metrics.recordWALBytes(walBytes(frames: frames))
    }

    /// Logs how the open's truncating checkpoint ended.
    private func report(
        _ truncate: Result<CheckpointResult, DatabaseError>, walSize: String, metadata: Logger.Metadata,
        frames: inout Int, checkpointed: inout Int
    ) {
        let walFrames = frames
        switch truncate {
        case .success(let result) where result.isComplete:
            frames = 0
            checkpointed = 0
            // A WAL left by an earlier run is worth a notice; the WAL of another process that has
            // the file open now is what processes sharing a file make: debug (the default
            // logger prints info, and every start of a multi-process app would print it).
            let sharers = Self.otherProcessesWithTheFileOpen(path)
            if sharers.isEmpty {
                logger.notice(
                    "\(walSize) (\(walFrames) frames); checkpointed and truncated it", metadata: metadata)
            } else {
                logger.debug(
                    "\(walSize) (\(walFrames) frames) while \(sharers) \(sharers.hasPrefix("processes") ? "have" : "has") the file open; checkpointed and truncated it",
                    metadata: metadata)
            }
        case .success:
            // Another process reading the file is what several processes sharing it do: debug, not
            // a warning (the monitor warns if the WAL then grows past its bounds).
            let readers = externalReaders()
            let culprits =
                readers.isEmpty
                ? "a reader in another process" : Self.culpritList(Self.culpritNames([], readers))
            logger.debug(
                "\(walSize) (\(frames) frames, \(checkpointed) checkpointed); it cannot be reset while \(culprits) reads it",
                metadata: metadata)
        case .failure(let error) where error.code == .readOnly:
            // A `-shm` this process cannot write: readable, and nothing to warn about.
            logger.debug(
                "\(walSize); the database is read-only here, so it stays as it is (\(error.message))",
                metadata: metadata)
        case .failure(let error):
            // A failed checkpoint says nothing about readers: name what failed.
            logger.warning(
                "\(walSize); it could not be checkpointed: \(Self.openCheckpointFailure(error))",
                metadata: metadata)
        }
    }

    /// The other processes that have the database at `path` open (they hold the `-shm`'s
    /// dead-man switch), as "process 123" or "processes 123, 456"; empty when none does, or
    /// when the locks cannot be listed.
    static func otherProcessesWithTheFileOpen(_ path: String) -> String {
        let ownProcess = getpid()
        // A probe that fails (`stat()` of the `-shm` refused) only leaves the sharers unnamed, as
        // where locks cannot be listed: the caller's line then says notice and names none.
        let others = Set(
            ((try? SnapshotDBInspector.probeLocks(databaseAt: path))?.connectedProcesses ?? []).compactMap(
                \.pid)
        ).subtracting([ownProcess]).sorted()
        guard !others.isEmpty else { return "" }
        return (others.count == 1 ? "process " : "processes ")
            + others.map(String.init).joined(separator: ", ")
    }

    /// Why the open's checkpoint failed, in words: a full disk first, since it is the usual
    /// cause and the one a user can fix.
    static func openCheckpointFailure(_ error: DatabaseError) -> String {
        guard error.code == .diskFull else { return "\(error)" }
        return "the disk is full (or the process's file size limit is reached), so the main file "
            + "cannot take the WAL's pages; it stays in the WAL and is checkpointed once space returns "
            + "(\(error.message))"
    }
}
