internal import Foundation
internal import Logging
internal import Synchronization

extension Checkpointer {
    /// At open: a WAL left behind by an earlier run (or by another process) is checkpointed and
    /// truncated when nothing pins it, and its size is logged.
    func checkpointAtOpen() {
        let latest = database?.database?.latestCommit ?? 0
        let fileBytes = Self.fileSize(path + "-wal")
        var frames = 0
        var checkpointed = 0
        if fileBytes > 0 {
            let passive = try? perform(.passive)
            frames = passive?.walFrames ?? 0
            checkpointed = passive?.checkpointedFrames ?? 0
            if let truncate = try? perform(.truncate, busyTimeout: Self.resetWait), truncate.isComplete {
                frames = 0
                checkpointed = 0
                logger.notice(
                    "found a WAL of \(ByteCount(fileBytes)) at open (\(passive?.walFrames ?? 0) frames); checkpointed and truncated it",
                    metadata: ["wal_bytes_at_open": "\(fileBytes)"])
            } else {
                let readers = externalReaders()
                let culprits =
                    readers.isEmpty
                    ? "a reader in another process" : Self.culpritList(Self.culpritNames([], readers))
                logger.warning(
                    "found a WAL of \(ByteCount(fileBytes)) at open (\(frames) frames, \(checkpointed) checkpointed); it cannot be reset while \(culprits) reads it",
                    metadata: ["wal_bytes_at_open": "\(fileBytes)"])
            }
        }
        let generation = frames > 0 ? walGeneration.read() : nil
        let threshold = configuration.checkpointThresholdPages
        state.withLock { state in
            state.walBytesAtOpen = fileBytes
            state.walFrames = frames
            state.checkpointedFrames = checkpointed
            state.generation = generation
            state.nextCheckpointFrames = frames + threshold
            state.frameMap.reset(commit: latest, endFrame: frames)
        }
        metrics.recordWALBytes(walBytes(frames: frames))
    }
}
