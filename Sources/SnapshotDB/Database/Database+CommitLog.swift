internal import Foundation
internal import Logging
internal import SnapshotDBLocking

internal import struct Synchronization.Atomic

/// What a `Database` knows about its connections, codecs and extensions; guarded by
/// `Database.state`. (Its commits and their subscribers are the ``CommitLog``'s.)
struct DatabaseState {
    /// Every connection's record, by id (see ``ConnectionRecord``).
    var connections: [Int: ConnectionRecord] = [:]
    var codecs: [String: any ValueCodec] = [:]
    var codecsFrozen = false
    /// The registered extensions, by name (see `Database/register(_:)`).
    var extensions: [String: any ExtensionDefinition] = [:]
    /// The same, those with dependencies last, then by name (``Database/extensionDefinitions()``),
    /// ordered when the registry changes rather than in every write transaction.
    var orderedExtensions: [any ExtensionDefinition] = []
    /// Counts the changes of ``extensions``: what is derived from the registry (the writer's
    /// upkeep check) is cached under it.
    var extensionGeneration: UInt64 = 0
    /// The commit that built the version of each extension this process registered, by name:
    /// this process's build, or the one the file's state records when the file had that version
    /// already. A snapshot older than that holds what the file had before: a reader there is
    /// told to advance, not that another registration conflicts or that the extension is stale.
    var extensionBuilds: [String: UInt64] = [:]
}

extension Database {
    /// The commit counter of the snapshot that `header` identifies, when a transaction of this
    /// database read it (with no unsealed foreign write) or committed it (``KnownSnapshot``).
    func knownCommit(at header: WALIndexHeader) -> UInt64? { knownSnapshot.commit(at: header) }

    /// Records that the snapshot `header` identifies has commit counter `commit` and no
    /// unsealed foreign write.
    func learnCommit(_ commit: UInt64, at header: WALIndexHeader) { knownSnapshot.learn(commit, at: header) }

    /// Publishes every commit up to `commit`: the pending local one with its changeset, the
    /// others with the changesets their history rows hold when `handle` (in a transaction whose
    /// snapshot reaches `commit`) is given, and as one external changeset per stretch of numbers
    /// whose history is not there (purged, or no handle to read it).
    ///
    /// Called by any connection that observed a counter the log does not reach yet (and by the
    /// watcher): what it publishes is dispatched as one ``CommitEvent`` of commits found. Without
    /// a handle it costs the same for a jump of one commit or of a million; with one, it reads
    /// the history rows it publishes: the last ``Configuration/commitLogRetention`` of them, and
    /// every one after the oldest pin of a connection (a bookmark not yet given them), which the
    /// log keeps however many there are. Others would be trimmed at once.
    func publishCommits(through commit: UInt64, reading handle: SQLiteHandle? = nil) {
        let published = commitLog.publishedCommit.load(ordering: .acquiring)
        guard commit > published else { return }
        var loaded: [History.Entry] = []
        // A read replica reads one row more than it publishes (the row of the commit published
        // last, unless retention starts it later), which the log compares, under its lock, with
        // the tokens it published under those numbers: another token is its primary put back to
        // an older commit that went on past it (``CommitLog/markForeignHistory()``).
        if let handle, role.publishesHistory(of: handle, published: published, in: self) {
            // A damaged row (written by a foreign client) is published as external: a reader
            // must never stop at it. `ReadTransaction.changes(after:)` reports it as `corrupt`.
            let retained = commit - min(commit, UInt64(configuration.commitLogRetention))
            var from = max(published, min(retained, commitLogPins.oldest ?? retained))
            if role.comparesHistoryTokens, from > 0 { from -= 1 }
            do {
                // A damaged row (a foreign client's) costs its own commit only: published as
                // external, the others exact.
                loaded = try History.entries(after: from, through: commit, on: handle, path: path) {
                    number, error in
                    self.logger.warning(
                        "the history row of commit \(number) cannot be read (\(error.message)): it is published as an external changeset, its keys unknown",
                        metadata: ["external_commits": "\(number)"])
                }
            } catch {
                // What the rows held is lost to the log's readers: warn, naming the commits.
                logger.warning(
                    "could not read the history rows of commits \(from + 1)...\(commit) (\(error)): they are published as external changesets, their keys unknown",
                    metadata: ["external_commits": "\(from + 1)...\(commit)"])
                loaded = []
            }
        }
        publish(through: commit, loaded: loaded)
    }

    /// This process's commit is in the file (its SQLite `COMMIT` returned): the log publishes
    /// its pending changeset (to bookmarks and `changes()` subscribers), unless a reader that saw
    /// the new counter did so first, and the event goes once to the dispatcher. The one call the
    /// ``Writer`` makes after a commit.
    func announce(_ event: CommitEvent) {
        if commitLog.publishedCommit.load(ordering: .acquiring) < event.commit {
            publish(through: event.commit, loaded: [])
        }
        commitDispatcher.dispatch(event, in: self)
    }

    /// The publishing step: appends the commits through `commit` to the log and hands them to
    /// its subscribers (see ``CommitLog/publish(through:loaded:)``). What it appended of other
    /// processes' commits is dispatched as one event of commits found; this process's pending
    /// commit, if it took it, is its writer's to announce.
    private func publish(through commit: UInt64, loaded: [History.Entry]) {
        debugCounters.count(.publishSteps)
        let result = commitLog.publish(through: commit, loaded: loaded)
        debugCounters.count(.observationsWoken, result.woken)
        // Finishing runs the stream's termination handler, which takes the log's lock.
        for continuation in result.overflowed { continuation.finish() }
        if result.needsTrim { commitLog.trim(oldestPinned: { commitLogPins.oldest }) }
        guard !result.found.isEmpty else { return }
        commitDispatcher.dispatch(CommitEvent(.found(result.found), commit: commit), in: self)
    }

    /// A read replica found its primary put back to an older commit, its snapshot at `commit`:
    /// see ``CommitLog/markForeignHistory(at:)``.
    func markForeignHistory(at commit: UInt64) {
        for continuation in commitLog.markForeignHistory(at: commit) { continuation.finish() }
    }

    /// Whether the snapshot on `handle` holds another history than the one this process
    /// published up to `published`: the row of that commit has another token, or none.
    func isAnotherHistory(_ handle: SQLiteHandle, published: UInt64) -> Bool {
        guard let known = commitLog.latestToken, known.commit == published else { return false }
        do {
            return try History.token(of: published, on: handle) != known.token
        } catch {
            logger.warning(
                "could not read the history token of commit \(published) (\(error)): the history is taken for another one, its new commits published as external changesets",
                metadata: ["history_commit": "\(published)"])
            return true
        }
    }

    /// The changesets of the commits in `(after, through]`, in order, or `nil` when the log no
    /// longer holds all of them (see ``CommitLog/changesets(after:through:)``).
    func changesets(after: UInt64, through: UInt64) -> [Changeset]? {
        guard through > after else { return [] }
        publishCommits(through: through)
        return commitLog.changesets(after: after, through: through)
    }

    /// The oldest commit log pin of any connection moved forward or went away: the log is
    /// trimmed, so that the memory a laggard pinned is given back as soon as it advances or
    /// ends, not at the next commit. (The trim looks at the log's length first, under its own
    /// lock, and costs nothing more when the log is within its retention.)
    func oldestCommitLogPinMoved() {
        commitLog.trim(oldestPinned: { commitLogPins.oldest })
    }

    /// How many changesets the commit log holds (for tests and the monitor).
    public var commitLogCount: Int { commitLog.count }
}
