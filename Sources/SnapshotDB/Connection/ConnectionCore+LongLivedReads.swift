internal import Foundation
internal import Logging
internal import SnapshotDBLocking

internal import struct Synchronization.Atomic

/// Bookmarks: a connection's long-lived read transaction, taken, advanced, re-seated and ended.
extension ConnectionCore {
    // MARK: Long-lived read transactions

    func beginLongLivedReadTransaction() throws -> [Changeset] {
        let previous = record.update { record -> SnapshotRecord in
            record.bookmarkLost = false
            return record
        }
        let previousBookmark = previous.isBookmark ? previous.snapshot : nil
        // End the old SQLite read transaction but keep the old bookmark recorded until the new
        // one is: `deliveredThrough` pins the commit log entries this advance must return.
        if previousBookmark != nil, let openedHandle {
            openedHandle.rollback(
                after: "the bookmark of connection '\(name)' was advanced", logger: database.logger)
        }
        let snapshot: ReadSnapshot
        do {
            snapshot = try beginReadSnapshot()
        } catch {
            // No gap: the next successful advance returns every commit after the last one
            // this connection was given, which `deliveredThrough` keeps pinned meanwhile.
            recordSnapshot(nil)
            throw error
        }
        let commit = snapshot.commit
        var changesets: [Changeset] = []
        if let delivered = previous.deliveredThrough, commit > delivered {
            if snapshot.cacheMovedFrom == delivered, let moved = snapshot.changesets {
                // The cache moved by exactly the commits this advance reports.
                changesets = moved
            } else {
                // The log is pinned since `delivered`, so it holds every changeset; the fallback
                // only guards against a trimmed log, and never skips a commit silently.
                changesets =
                    database.changesets(after: delivered, through: commit) ?? [
                        .external(delivered + 1...commit)
                    ]
            }
        }
        // Foreign writes that could not be sealed yet (a read-only file, or the writer busy)
        // have no commit number: they are reported as an external changeset under the number
        // of the snapshot that holds them, and again, numbered, once sealed.
        // (So is a read replica's snapshot of another history than the cache's, which
        // `beginReadSnapshot` reads as unsealed: the advance says that anything may have changed,
        // even when the bookmark moved back.)
        let sameUnsealed = previousBookmark == commit && previous.bookmarkUnsealed == snapshot.unsealed
        if previous.deliveredThrough != nil, snapshot.unsealed != 0, !sameUnsealed {
            changesets.append(.external(commit...commit))
        }
        recordSnapshot(commit, bookmark: true, unsealed: snapshot.unsealed, unnumbered: snapshot.unnumbered)
        record.update { $0.deliveredThrough = commit }
        return changesets
    }

    /// Ends the bookmark's SQLite read transaction and begins a new one at the same commit.
    ///
    /// A read transaction holds a WAL read mark, and while any reader holds one (other than
    /// slot 0) SQLite cannot reset the WAL, even when that reader is at the newest commit and
    /// pins no frame. Begun again while every frame is checkpointed, the transaction reads the
    /// database file only (slot 0) and lets the WAL be reset. The checkpointer calls this while
    /// it holds the WAL write lock, having checked that the newest commit in the file is
    /// `commit` with no unsealed foreign write, so the new transaction sees exactly the
    /// bookmarked state. If it does not (never expected; debug builds can inject it), the
    /// bookmark is released and the connection's next read throws `bookmarkLost`.
    func reseatBookmark(at commit: UInt64) -> BookmarkReseat {
        guard record.bookmark == commit, let handle = openedHandle else { return .skipped }
        handle.rollback(
            after: "the bookmark of connection '\(name)' was released to be taken again",
            logger: database.logger)
        do throws(DatabaseError) {
            if database.faults.shouldFail(.reseat) { throw FaultInjector.error(.reseat) }
            try handle.statement(.begin).execute()
            if try handle.readCommitState().isSealed(at: commit) { return .reseated }
        } catch {}
        handle.rollback(
            after: "the bookmark of connection '\(name)' could not be taken again", logger: database.logger)
        recordSnapshot(nil)
        record.update { $0.bookmarkLost = true }
        return .lost
    }

    /// Ends the bookmark's SQLite read transaction but keeps what it was given
    /// (`deliveredThrough`): the next ``beginLongLivedReadTransaction()`` begins at the newest
    /// commit and returns every changeset since, as after a bookmark that was lost, with no
    /// error. Reads in between see the newest commit. For a live view waiting for its next
    /// update, whose snapshot nobody reads meanwhile: it pins no WAL frame and holds no read
    /// mark, so checkpoints and WAL resets go past it.
    func parkBookmark() {
        let hadBookmark = record.update { $0.isBookmark }
        guard hadBookmark else { return }
        openedHandle?.rollback(
            after: "the bookmark of connection '\(name)' was parked", logger: database.logger)
        recordSnapshot(nil)
    }

    func endLongLivedReadTransaction() throws {
        let hadBookmark = record.update { record in
            defer {
                record.deliveredThrough = nil
                record.bookmarkLost = false
            }
            return record.isBookmark
        }
        guard hadBookmark else { return }
        openedHandle?.rollback(
            after: "the bookmark of connection '\(name)' was ended", logger: database.logger)
        recordSnapshot(nil)
    }

    /// Ends the bookmark and closes the handle, for ``Database/close()``.
    func close() {
        record.update { record in
            record.deliveredThrough = nil
            record.bookmarkLost = false
        }
        recordSnapshot(nil)
        openedHandle = nil
    }
}
