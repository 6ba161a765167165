/// Where each commit ends in the current WAL, so that the WAL bytes a snapshot pins can be named.
///
/// A reader whose snapshot is commit `c` keeps every frame written after `c`'s last frame from
/// being checkpointed: those frames would overwrite pages of the database file that the reader
/// still reads from there. The commit path records "commit `c` ended at frame `f`" (the frame
/// count `sqlite3_wal_hook` reported for it); a lookup answers the end frame of the newest
/// recorded commit at or before a snapshot.
///
/// When the WAL restarts, every older commit ends at frame 0 of the new generation: a snapshot
/// from before the restart (a reader of the database file alone) pins every frame of it.
struct WALFrameMap: Equatable {
    private struct Entry: Equatable {
        var commit: UInt64
        var endFrame: Int
    }

    /// Ordered by commit and by frame; never empty once `reset` ran.
    private var entries: [Entry] = []

    /// Forgets everything: commits up to `commit` end at `endFrame`, later ones are unknown.
    mutating func reset(commit: UInt64, endFrame: Int) {
        entries = [Entry(commit: commit, endFrame: endFrame)]
    }

    /// Records that `commit` ended at `endFrame` in the current generation.
    ///
    /// A commit that is not newer than the last one recorded is ignored: commits of this
    /// database are recorded in order, under its writer lock.
    mutating func record(commit: UInt64, endFrame: Int) {
        if let last = entries.last, last.commit >= commit { return }
        entries.append(Entry(commit: commit, endFrame: endFrame))
    }

    /// The last frame of `snapshot` in the current generation: the end frame of the newest
    /// recorded commit at or before it, or 0 when the snapshot predates every recorded commit.
    func endFrame(ofSnapshot snapshot: UInt64) -> Int {
        var low = 0
        var high = entries.count
        while low < high {
            let middle = (low + high) / 2
            if entries[middle].commit <= snapshot { low = middle + 1 } else { high = middle }
        }
        return low == 0 ? 0 : entries[low - 1].endFrame
    }

    /// Drops the entries no snapshot at or after `oldestSnapshot` can ask for.
    mutating func prune(keepingSnapshotsFrom oldestSnapshot: UInt64) {
        guard entries.count > 1 else { return }
        var keepFrom = 0
        while keepFrom + 1 < entries.count, entries[keepFrom + 1].commit <= oldestSnapshot {
            keepFrom += 1
        }
        if keepFrom > 0 { entries.removeFirst(keepFrom) }
    }

    /// The newest commit mapped; `nil` before the first `reset`.
    var lastCommit: UInt64? { entries.last?.commit }

    /// How many commits are mapped (for tests).
    var count: Int { entries.count }
}
