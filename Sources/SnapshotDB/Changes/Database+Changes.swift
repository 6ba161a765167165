public import Dispatch
internal import Foundation
internal import SnapshotDBLocking

extension Database {
    /// Every commit published after this call, in commit order, without gaps.
    ///
    /// Any number of streams may be open at once. Each buffers at most
    /// ``Configuration/changesBufferLimit`` changesets; a consumer that falls further behind has
    /// its stream finished rather than silently miss a commit (a bookmarked connection then
    /// catches up exactly with ``Connection/beginLongLivedReadTransaction()``). The stream ends
    /// when the consuming task is cancelled or the database is released.
    ///
    /// Subscribe before taking the bookmark you advance in the loop, so that no commit falls
    /// between the two; when the loop ends because the stream finished, subscribe again and
    /// advance. Commits of other processes are published as they happen, with their exact
    /// changesets: the first subscription starts a watcher of the `-wal` (inotify on Linux; it
    /// costs nothing while the database is idle, see `ForeignCommitWatcher`).
    ///
    /// On a read replica whose primary was put back to an older commit (numbers it will reuse
    /// for other commits), every stream ends as soon as the replica sees it, and again at each
    /// new commit under a number already published: subscribe again and advance (an advance
    /// into the new history returns an external changeset). Past the old numbers, streams go on
    /// as before.
    ///
    /// ```swift
    /// let commits = db.changes()
    /// try ui.beginLongLivedReadTransaction()
    /// for await _ in commits {
    ///     let changes = try ui.beginLongLivedReadTransaction()
    ///     if changes.hasChange(inCollection: "items") { reload() }
    /// }
    /// ```
    public func changes() -> AsyncStream<Changeset> {
        let (stream, continuation) = AsyncStream<Changeset>.makeStream(
            bufferingPolicy: .bufferingOldest(max(1, configuration.changesBufferLimit)))
        // A database closed (now, or while this subscribes) gives a stream that has ended.
        guard !isClosed, let id = commitLog.subscribe(.stream(continuation)) else {
            continuation.finish()
            return stream
        }
        foreignCommitWatcher.start(for: self)
        let database = WeakDatabase(self)
        continuation.onTermination = { _ in
            database.database?.removeSubscriber(id)
        }
        return stream
    }

    /// Calls `body` on `queue` with every commit published after this call, in commit order
    /// when `queue` is serial, until the returned observer is cancelled or released.
    ///
    /// The one exception to the order: on a read replica whose primary was put back to an
    /// older commit, `body` gets an external changeset numbered with the replica's commit, lower
    /// than those before, when the replica sees it, and one for each new commit under a number
    /// already published (`changes()` streams end instead).
    ///
    /// For code that does not use `async`/`await`; `changes()` is the async form. The default
    /// queue is the main queue, which only an app's run loop (or `dispatchMain()`) serves: in a
    /// command-line program or a server that never runs it, pass a queue of your own, or
    /// `body` is never called.
    public func addObserver(
        on queue: DispatchQueue = .main, _ body: @escaping @Sendable (Changeset) -> Void
    ) -> ChangeObserver {
        // After close(), an observer that is never called.
        guard !isClosed, let id = commitLog.subscribe(.observer(queue, body)) else {
            return ChangeObserver(database: WeakDatabase(nil), id: -1)
        }
        foreignCommitWatcher.start(for: self)
        return ChangeObserver(database: WeakDatabase(self), id: id)
    }

    func removeSubscriber(_ id: Int) {
        let removed = commitLog.unsubscribe(id)
        if case .stream(let continuation) = removed { continuation.finish() }
    }

    func finishSubscribers() {
        let streams = commitLog.unsubscribeAll()
        for continuation in streams { continuation.finish() }
    }
}

/// A registration made by ``Database/addObserver(on:_:)``; stops delivery when cancelled or
/// released.
public final class ChangeObserver: Sendable {
    private let database: WeakDatabase
    private let id: Int

    init(database: WeakDatabase, id: Int) {
        self.database = database
        self.id = id
    }

    /// Stops delivery; changesets already queued may still arrive. Safe to call repeatedly.
    public func cancel() { database.database?.removeSubscriber(id) }

    deinit { cancel() }
}
