/// Live views: ``Database/observe(view:range:)``, a view's rows kept in step with the database
/// in one `for try await` loop.
///
/// Design (the everyday form of a bookmark, `changes()` and ``ViewReader/changeSummary(for:inGroups:)``,
/// which an app otherwise wires by hand):
/// - **A bookmark of its own, held only while an update is in hand.** Each iteration opens an
///   internal connection (named `observe(view: <name>)`, as the checkpoint monitor names it)
///   and bookmarks it. An update is at the bookmark's commit, and ``ViewUpdate/read(_:)``
///   reads in that very snapshot: no query races the next commit. When the consumer asks for
///   the next update, the snapshot is released (parked: the connection keeps its place in the
///   commits), so an observation waiting for a commit pins no WAL frame and holds no read mark:
///   observations of views that seldom change do not keep the WAL from being reset.
/// - **Woken only by commits that change the view.** The commit log wakes an observation when a
///   commit recorded changes of its view, rebuilt it, or changed values SnapshotDB cannot see
///   (``ExtensionWakers``): a commit that touches no observed view costs nothing per
///   observation. Commits of other processes arrive through the watcher that ``Database/changes()``
///   uses, as commits of this process do.
/// - **Pulled, so a slow consumer coalesces.** Nothing runs between two `next()` calls; a
///   wake-up is one flag. `next()` advances the bookmark over every commit made since, and
///   returns one update whose changes take the previous update's rows to the new ones (a commit
///   that did not change the rows yields nothing). The observation does not pin the commit log:
///   a consumer that falls further behind than ``Configuration/commitLogRetention`` gets a
///   reload update instead of a backlog, so its memory stays bounded however long it sleeps.
///   (While it holds an update, its bookmark keeps that snapshot's pages in the WAL, as every
///   bookmark does, and the checkpoint monitor names it when that grows.)
/// - **Reloads.** The first update is a reload with the rows. So is an update after a commit
///   that rebuilt the view (a new version registered, a new filter), after a commit made
///   outside SnapshotDB, or after a lag past the log: ``ViewUpdate/isReload`` with
///   ``ViewUpdate/rows``. A view that is unregistered, goes stale or is never registered
///   throws the error a read of it throws (`unknownExtension`, `extensionStale`).
/// - **Cancelling** the task (or leaving the loop) ends the observation: the bookmark and its
///   connection are released, and the WAL can be reset again.
extension Database {
    /// The rows of view `name` (all of them, or those of `range`), then an update for every
    /// commit that changes them: see ``ViewObservation``.
    ///
    /// ```swift
    /// for try await update in db.observe(view: "byTitle") {
    ///     if update.isReload { rows = update.rows ?? [:] } else { rows = apply(update.changes, to: rows) }
    ///     let inbox = try update.read { txn in try txn.view(named: "byTitle").items(inGroup: "inbox") }
    /// }
    /// ```
    public func observe(view name: String, range: ViewRange? = nil) -> ViewObservation {
        ViewObservation(database: WeakDatabase(self), name: name, range: range)
    }
}

/// Which rows of one group a ranged observation follows, as YapDatabase's mappings do: the
/// first or last `length` items, or `length` items from an offset. The window keeps its length
/// as items move in and out (a deletion inside it pulls the next item in).
public struct ViewRange: Hashable, Sendable, CustomStringConvertible {
    /// The group.
    public let group: String
    /// Where the window starts: this many items from the start (or from the end, when
    /// ``fromEnd`` is set).
    public let offset: Int
    /// The most items the window holds.
    public let length: Int
    /// Whether ``offset`` counts from the group's end (the window then ends `offset` items
    /// before it).
    public let fromEnd: Bool

    /// The first `count` items of `group`.
    public static func first(_ count: Int, inGroup group: String) -> ViewRange {
        ViewRange(group: group, offset: 0, length: count, fromEnd: false)
    }

    /// The last `count` items of `group`.
    public static func last(_ count: Int, inGroup group: String) -> ViewRange {
        ViewRange(group: group, offset: 0, length: count, fromEnd: true)
    }

    /// `length` items of `group` from index `offset`.
    public static func window(offset: Int, length: Int, inGroup group: String) -> ViewRange {
        ViewRange(group: group, offset: offset, length: length, fromEnd: false)
    }

    /// The indexes the window covers in a group of `count` items.
    public func indexes(inGroupOf count: Int) -> Range<Int> {
        let length = max(0, length)
        let offset = max(0, offset)
        if fromEnd {
            let end = max(0, count - offset)
            return max(0, end - length)..<end
        }
        let start = min(offset, count)
        return start..<min(count, start + length)
    }

    /// `first(10) of inbox`, `last(10) of inbox`, `10 from 20 of inbox`.
    public var description: String {
        if offset == 0 { return "\(fromEnd ? "last" : "first")(\(length)) of \(group)" }
        return "\(length) from \(offset)\(fromEnd ? " before the end" : "") of \(group)"
    }
}

/// One step of a live view: the commit it is at, the row changes since the previous update (or
/// a reload with the rows), and a way to read at exactly that commit.
public struct ViewUpdate: Sendable {
    /// The commit the update is at.
    public let commit: UInt64
    /// `true` for the first update, and wherever row changes cannot be given (the view was
    /// rebuilt, a commit was made outside SnapshotDB, the consumer fell behind the commit log):
    /// then ``rows`` holds every row and ``changes`` is empty.
    public let isReload: Bool
    /// The row changes that take the previous update's rows to this one's (see
    /// ``ViewRowChange`` for the indexes; in a ranged observation, indexes into the window).
    /// Empty on a reload.
    public let changes: [ViewRowChange]
    /// Groups that appeared or disappeared (a whole-view observation only).
    public let sectionChanges: [ViewSectionChange]
    /// On a reload, the rows by group (a ranged observation: its window, under its group);
    /// `nil` otherwise.
    public let rows: [String: [ViewItem]]?
    let reader: ObservationReader

    /// Reads in the snapshot of ``commit``: the view and values exactly as this update has them.
    ///
    /// - Throws: `misuse` once the observation has moved on (an update read after the next
    ///   was asked for), and what `body` throws.
    public func read<T>(_ body: (ReadTransaction) throws -> T) throws -> T {
        try reader.read(at: commit, body)
    }
}

/// The connection an observation reads with, shared by its updates.
final class ObservationReader: Sendable {
    let connection: Connection

    init(connection: Connection) { self.connection = connection }

    func read<T>(at commit: UInt64, _ body: (ReadTransaction) throws -> T) throws -> T {
        try connection.read { transaction in
            guard transaction.commit == commit else {
                throw DatabaseError(
                    .misuse,
                    "this update is at commit \(commit), and its observation has moved on to commit "
                        + "\(transaction.commit): read an update before asking for the next")
            }
            return try body(transaction)
        }
    }
}

/// The rows of a view, now and after every commit that changes them: an `AsyncSequence` of
/// ``ViewUpdate``s. Each iteration is an observation of its own (its own bookmark). See
/// ``Database/observe(view:range:)`` and the design notes above it.
public struct ViewObservation: AsyncSequence, Sendable {
    /// Each step: a ``ViewUpdate``.
    public typealias Element = ViewUpdate

    let database: WeakDatabase
    /// The view's name.
    public let name: String
    /// The rows followed; `nil` for every group.
    public let range: ViewRange?

    /// A new observation: its own bookmark, its first update a reload.
    public func makeAsyncIterator() -> Iterator {
        Iterator(observer: ViewObserver(database: database, name: name, range: range))
    }

    /// Iterates one observation (copies share it).
    public struct Iterator: AsyncIteratorProtocol, Sendable {
        let observer: ViewObserver

        /// The next update: the first is a reload; each later one waits for a commit that
        /// changed the rows. `nil` once the task is cancelled or the database closed.
        public mutating func next() async throws -> ViewUpdate? {
            try await observer.next()
        }
    }
}
