/// What the checkpointer knows of the WAL: its size, how much of it is checkpointed, its
/// generation, and where each commit ends in it. A plain value with no I/O, so that its rules
/// are tested without SQLite; the checkpointer keeps it under its lock.
///
/// Facts arrive from four places: the writer after each commit (``recordCommit(_:frames:)``),
/// transactions that read a commit's WAL-index header, which is how commits of other processes
/// arrive (``recordSnapshot(_:frames:)``), checkpoints that did not reset the WAL
/// (``absorb(_:generationBefore:)``) and resets (``absorbReset(latestCommit:frames:generationBefore:)``).
/// A checkpoint's result is only taken in when no restart of the WAL happened while it ran:
/// ``generationCount`` counts restarts.
///
/// Commits are taken in commit order, each once: a commit at or below the newest one mapped is
/// ignored (a transaction of this process saw it, or a later one, first). Without the commits of
/// other processes, a process whose own writers wait while other processes write would see a
/// WAL frozen at its last commit: a bookmark behind would seem to pin nothing, and no
/// checkpoint would be due.
struct WALProgress: Equatable {
    /// The WAL size, in frames, between automatic checkpoints.
    let threshold: Int
    /// Frames in the WAL (SQLite's `mxFrame`) as last seen by a commit or a checkpoint.
    private(set) var walFrames = 0
    /// Frames the last checkpoint of the current generation copied back (`nBackfill`).
    private(set) var checkpointedFrames = 0
    /// The WAL size, in frames, at which the next automatic checkpoint is due.
    private(set) var nextCheckpointFrames: Int
    /// The WAL header's salts as last read by a commit; `nil` after a reset.
    private(set) var generation: UInt64?
    /// The WAL this process's last reset copied back (its salts and frame count), until a
    /// commit names a generation again.
    private(set) var retired: RetiredWAL?

    /// A WAL a reset copied back: its salts and its size in frames.
    struct RetiredWAL: Equatable {
        var generation: UInt64
        var frames: Int
    }
    /// Incremented at every WAL reset or restart seen.
    private(set) var generationCount = 0
    /// Where each commit of the current generation ends.
    private(set) var frameMap = WALFrameMap()
    /// The newest commit made through this database's connections.
    private(set) var lastLocalCommit: UInt64 = 0

    init(threshold: Int) {
        self.threshold = threshold
        nextCheckpointFrames = threshold
    }

    /// What a commit changed: whether it found the WAL restarted, and whether a checkpoint is
    /// due.
    struct CommitOutcome: Equatable {
        var restarted = false
        var checkpointDue = false
    }

    /// Takes in a commit of this database and where it ended in the WAL (`nil` when no end
    /// frame was recorded for it).
    ///
    /// A new generation (other salts) means the WAL was restarted since the last commit, and
    /// everything before this commit ends at frame 0 of it. Without a generation, a WAL that
    /// shrank has restarted; one that grew past its old size in one commit cannot be told from
    /// a restart, which is why the writer reads the salts.
    mutating func recordCommit(_ commit: UInt64, frames: WALCommitFrames?) -> CommitOutcome {
        lastLocalCommit = max(lastLocalCommit, commit)
        guard let frames else { return CommitOutcome() }
        // (Again for the newest commit mapped: `vacuum()` reports its frames under it.)
        return take(commit, frames: frames, takingTheLastAgain: true)
    }

    /// Takes in a commit, of this process or another, seen by a transaction whose snapshot it
    /// is: `frames` are its WAL-index header's frame count and salts, which are the commit's
    /// end frame and generation.
    mutating func recordSnapshot(_ commit: UInt64, frames: WALCommitFrames) -> CommitOutcome {
        take(commit, frames: frames, takingTheLastAgain: false)
    }

    private mutating func take(_ commit: UInt64, frames: WALCommitFrames, takingTheLastAgain: Bool)
        -> CommitOutcome
    {
        // Seen already, or older than a commit seen: its header says nothing newer (and an older
        // generation's would look like a restart).
        if let last = frameMap.lastCommit, commit < last || (commit == last && !takingTheLastAgain) {
            return CommitOutcome()
        }
        var frames = frames
        if generation == nil, let retired, frames.generation == retired.generation {
            if frames.endFrame <= retired.frames {
                // The header still names the WAL this process's reset copied back (a RESTART
                // leaves the header as it was until the next write): the commit is in the
                // database file, and ends at frame 0 of the WAL to come.
                frames = WALCommitFrames(endFrame: 0, generation: nil)
            } else {
                // The next writer did not restart the WAL after all (SQLite skips the restart
                // while a reader holds a read mark) and appended to it: what the reset copied
                // back stays copied, and earlier snapshots end where it ended.
                generation = retired.generation
                frameMap.reset(commit: 0, endFrame: retired.frames)
                walFrames = retired.frames
                checkpointedFrames = retired.frames
                self.retired = nil
            }
        }
        var outcome = CommitOutcome()
        if let new = frames.generation, let known = generation {
            outcome.restarted = new != known
        } else {
            outcome.restarted = frames.endFrame < walFrames
        }
        if outcome.restarted {
            generationCount += 1
            checkpointedFrames = 0
            nextCheckpointFrames = threshold
            frameMap.reset(commit: commit &- 1, endFrame: 0)
        }
        if let new = frames.generation {
            generation = new
            retired = nil
        }
        // (A checkpoint may have seen the WAL larger: commits of other processes not seen yet.)
        walFrames = outcome.restarted ? frames.endFrame : max(walFrames, frames.endFrame)
        frameMap.record(commit: commit, endFrame: frames.endFrame)
        outcome.checkpointDue = frames.endFrame >= nextCheckpointFrames
        return outcome
    }

    /// Takes in a checkpoint that did not reset the WAL, begun when ``generationCount`` was
    /// `generationBefore`. One that could not start (another process was checkpointing)
    /// reports nothing; one of an older generation describes a WAL that is gone.
    mutating func absorb(_ result: CheckpointResult, generationBefore: Int) {
        guard generationCount == generationBefore, result.walFrames > 0 || result.isComplete else { return }
        // A checkpoint between this process's reset and the next write sees the WAL it retired.
        if generation == nil, let retired, result.walFrames <= retired.frames { return }
        walFrames = max(walFrames, result.walFrames)
        checkpointedFrames = result.checkpointedFrames
        nextCheckpointFrames = walFrames.saturatingAdding(threshold)
    }

    /// Takes in a completed reset (RESTART or TRUNCATE), run while no commit of this process
    /// could interleave: the next commit writes the WAL from its start.
    mutating func absorbReset(latestCommit: UInt64, frames: Int, generationBefore: Int) {
        guard generationCount == generationBefore else { return }
        generationCount += 1
        // (Two resets with no write between retire the same WAL.)
        if let generation { retired = RetiredWAL(generation: generation, frames: max(frames, walFrames)) }
        generation = nil
        walFrames = 0
        checkpointedFrames = 0
        nextCheckpointFrames = threshold
        frameMap.reset(commit: latestCommit, endFrame: 0)
    }

    /// Starts from what the open found: a WAL of `frames` frames (`checkpointed` of them
    /// copied back) holding every commit up to `latestCommit`.
    mutating func start(latestCommit: UInt64, frames: Int, checkpointed: Int, generation: UInt64?) {
        walFrames = frames
        checkpointedFrames = checkpointed
        self.generation = generation
        nextCheckpointFrames = frames.saturatingAdding(threshold)
        frameMap.reset(commit: latestCommit, endFrame: frames)
    }

    /// The WAL frames that a snapshot at `commit` keeps from being checkpointed, when the
    /// newest commit is `latest`.
    func pinnedFrames(bySnapshot commit: UInt64, latest: UInt64) -> Int {
        latest > commit ? max(0, walFrames - frameMap.endFrame(ofSnapshot: commit)) : 0
    }

    /// Forgets where commits older than `oldestSnapshot` end.
    mutating func prune(keepingSnapshotsFrom oldestSnapshot: UInt64) {
        frameMap.prune(keepingSnapshotsFrom: oldestSnapshot)
    }
}
