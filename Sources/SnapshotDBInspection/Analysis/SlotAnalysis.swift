/// Turns a reader slot's read mark and lock holders into what it pins.
struct SlotAnalysis {
    var wal: WALScan?
    var pages: PageSource
    var committedFrames: UInt32
    var checkpointedFrames: UInt32
    var isSnapshotDB: Bool
    var newestCommit: UInt64?

    func readSlot(_ slot: Int, readMark: UInt32?, holders: [LockHolder]) -> ReadSlot {
        // Only shared holders are readers; an exclusive holder is a writer or checkpointer
        // updating the mark for a moment.
        let readers = holders.filter { $0.mode == .shared }
        guard !readers.isEmpty else {
            return ReadSlot(slot: slot, readMark: readMark, holders: holders, pin: nil)
        }
        return ReadSlot(
            slot: slot, readMark: readMark, holders: holders, pin: pin(slot: slot, readMark: readMark))
    }

    private func pin(slot: Int, readMark: UInt32?) -> ReadPin {
        // A slot-0 reader sees the database file as it was when it began; since it blocks every
        // backfill, that is the file as it is now, holding frames up to nBackfill.
        let snapshotFrame = slot == 0 ? checkpointedFrames : min(readMark ?? committedFrames, committedFrames)
        let framesBehind = committedFrames - snapshotFrame
        let frameSize = Int64(wal?.summary.frameSizeBytes ?? 0)
        var pin = ReadPin(
            snapshotFrame: snapshotFrame, readsDatabaseFileOnly: slot == 0, blocksAllBackfill: slot == 0,
            framesBehind: framesBehind,
            commitFramesBehind: wal?.commitFrameCount(after: snapshotFrame, upTo: committedFrames) ?? 0,
            bytesBehind: Int64(framesBehind) * frameSize,
            // A reset needs every frame backfilled, which a slot-0 reader prevents only while
            // frames remain; readers through the WAL prevent it always.
            preventsWALReset: slot != 0 || framesBehind > 0, snapshotCommit: nil, commitsBehind: nil,
            snapshotCommitUnavailableReason: nil)
        guard isSnapshotDB else {
            pin.snapshotCommitUnavailableReason = "not a SnapshotDB file"
            return pin
        }
        if slot != 0, readMark == nil {
            pin.snapshotCommitUnavailableReason = "the slot is held but its read mark is unused"
            return pin
        }
        switch CommitCounterReader.counter(pages: pages, asOfFrame: slot == 0 ? 0 : snapshotFrame) {
        case .success(let counter):
            pin.snapshotCommit = counter
            if let newestCommit, newestCommit >= counter { pin.commitsBehind = newestCommit - counter }
        case .failure(let failure):
            pin.snapshotCommitUnavailableReason = failure.reason
        }
        return pin
    }
}

/// Decides whether the WAL could be reset now.
enum WALResetAnalysis {
    static func assess(
        walSize: Int64, walIndex: WALIndexSummary?, locks: WALIndexLocks?, readSlots: [ReadSlot],
        framesToCheckpoint: UInt32
    ) -> WALResetAssessment {
        var blockers: [WALResetBlocker] = []
        if let walIndex, !walIndex.isReliable {
            let why =
                !walIndex.copiesAgree
                ? "its two copies differed in \(walIndex.readAttempts) reads (a writer was changing it)"
                : !walIndex.header.isInitialized
                    ? "it is not initialized" : "its header checksum does not match"
            blockers.append(
                WALResetBlocker(
                    reason: .walIndexUnreliable, slot: nil, pids: [],
                    message: "the wal-index header cannot be trusted: \(why)"))
        }
        for slot in readSlots {
            guard let pin = slot.pin else { continue }
            let readers = slot.holders.filter { $0.mode == .shared }
            let names = readers.map(\.displayName).joined(separator: ", ")
            let pids = readers.compactMap(\.pid)
            if slot.slot == 0 {
                guard framesToCheckpoint > 0 else { continue }
                blockers.append(
                    WALResetBlocker(
                        reason: .slotZeroReader, slot: 0, pids: pids,
                        message: "slot 0 reader \(names) reads the database file, so no checkpoint may copy "
                            + "the \(framesToCheckpoint) uncheckpointed frames into it"))
            } else {
                let behind =
                    pin.framesBehind == 0
                    ? "no frames behind, but it reads through the WAL"
                    : "pins \(pin.framesBehind) frames "
                        + "(\(pin.commitFramesBehind) commits, \(pin.bytesBehind) bytes)"
                blockers.append(
                    WALResetBlocker(
                        reason: .readerPinned, slot: slot.slot, pids: pids,
                        message: "slot \(slot.slot) reader \(names) at frame \(pin.snapshotFrame): \(behind)")
                )
            }
        }
        if let locks {
            let exclusive: [(WALIndexLock, WALResetBlocker.Reason, String)] = [
                (.write, .writerActive, "a write transaction is open in"),
                (.checkpoint, .checkpointRunning, "a checkpoint is running in"),
                (.recover, .recoveryRunning, "the wal-index is being recovered by"),
            ]
            for (lock, reason, what) in exclusive {
                let holders = locks.holders(of: lock)
                guard !holders.isEmpty else { continue }
                blockers.append(
                    WALResetBlocker(
                        reason: reason, slot: nil, pids: holders.compactMap(\.pid),
                        message: "\(what) \(holders.map(\.displayName).joined(separator: ", "))"))
            }
        }
        return WALResetAssessment(
            isPossible: blockers.isEmpty, isNeeded: walSize > 0, framesToCheckpoint: framesToCheckpoint,
            blockers: blockers)
    }
}
