/// The state of one iteration of a ``ViewObservation``, advanced by its consumer's `next()`
/// (see the design notes of ``Database/observe(view:range:)``).
actor ViewObserver {
    private let database: WeakDatabase
    private let name: String
    private let range: ViewRange?
    private var reader: ObservationReader?
    private var wakeups: AsyncStream<Void>.Iterator?
    private var wakerID: Int?
    /// A ranged observation's window as the last update left it.
    private var window: [ViewItem] = []
    private var ended = false

    init(database: WeakDatabase, name: String, range: ViewRange?) {
        self.database = database
        self.name = name
        self.range = range
    }

    /// A loop left without cancelling: the wake-up goes; the connection, released with the
    /// reader, takes its bookmark with it.
    deinit {
        if let wakerID { database.database?.commitLog.removeWaker(for: name, wakerID) }
    }

    func next() async throws -> ViewUpdate? {
        guard !ended else { return nil }
        do {
            guard let db = database.database, !db.isClosed else { return end() }
            guard let reader else { return try await start(db) }
            while !ended, !Task.isCancelled, !db.isClosed {
                // The consumer is done with the last update: its snapshot is not read any more,
                // and an observation waiting for a commit pins nothing (checkpoints and WAL
                // resets go past it).
                try reader.connection.parkBookmark()
                // Taken out while it waits: an actor's property cannot be passed `inout` across
                // the suspension.
                guard var iterator = wakeups else { break }
                wakeups = nil
                guard await iterator.next(isolation: self) != nil else { break }  // closed or cancelled
                wakeups = iterator
                guard !Task.isCancelled else { break }
                let changesets = try await reader.connection.advance()
                guard !changesets.isEmpty else { continue }
                if let update = try await update(after: changesets, reader: reader) { return update }
            }
        } catch let error as DatabaseError where error.code == .databaseClosed {
        } catch is CancellationError {
        } catch {
            _ = end()
            throw error
        }
        return end()
    }

    /// The first update: the wake-up is added before the bookmark, so that no commit after the
    /// bookmark goes unheard.
    private func start(_ db: Database) async throws -> ViewUpdate? {
        let (stream, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        guard let id = db.commitLog.addWaker(for: name, continuation) else { return end() }
        wakerID = id
        wakeups = stream.makeAsyncIterator()
        db.foreignCommitWatcher.start(for: db)
        let connection = db.newConnection(name: "observe(view: \(name))")
        connection.stopsPinningCommitLog()
        let reader = ObservationReader(connection: connection)
        self.reader = reader
        try await connection.advance()
        return try await reload(reader)
    }

    private func reload(_ reader: ObservationReader) async throws -> ViewUpdate {
        let (name, range) = (self.name, self.range)
        let (commit, rows) = try await reader.connection.read { txn in
            let view = try txn.view(named: name)
            return (txn.commit, Self.rows(of: view, range: range))
        }
        if let range { window = rows[range.group] ?? [] }
        return ViewUpdate(
            commit: commit, isReload: true, changes: [], sectionChanges: [], rows: rows, reader: reader)
    }

    /// The update for the commits of `changesets` (what the advance returned), or `nil` when
    /// they left the rows as they were.
    private func update(after changesets: [Changeset], reader: ObservationReader) async throws -> ViewUpdate?
    {
        let (name, range, window) = (self.name, self.range, self.window)
        let (commit, summary, newWindow) = try await reader.connection.read {
            txn -> (UInt64, ViewChanges, [ViewItem]?) in
            let view = try txn.view(named: name)
            let summary = try view.changeSummary(for: changesets, inGroups: range.map { [$0.group] })
            guard let range, !summary.isReload else { return (txn.commit, summary, nil) }
            let new = Self.rows(of: view, range: range)[range.group] ?? []
            return (txn.commit, summary, new)
        }
        if summary.isReload { return try await reload(reader) }
        if let range, let newWindow {
            let changes = Self.windowChanges(
                from: window, to: newWindow, group: range.group, touched: Set(summary.rows.map(\.item)))
            self.window = newWindow
            guard !changes.isEmpty else { return nil }
            return ViewUpdate(
                commit: commit, isReload: false, changes: changes, sectionChanges: [], rows: nil,
                reader: reader)
        }
        guard !summary.isEmpty else { return nil }
        return ViewUpdate(
            commit: commit, isReload: false, changes: summary.rows, sectionChanges: summary.sections,
            rows: nil,
            reader: reader)
    }

    /// Every row, or the window of `range` under its group.
    static func rows(of view: ViewReader, range: ViewRange?) -> [String: [ViewItem]] {
        guard let range else {
            return Dictionary(uniqueKeysWithValues: view.groups.map { ($0, view.items(inGroup: $0)) })
        }
        let indexes = range.indexes(inGroupOf: view.count(inGroup: range.group))
        return [range.group: indexes.compactMap { view.item(at: $0, inGroup: range.group) }]
    }

    /// The row changes that take the window `old` to `new` (indexes into the windows): items
    /// that left are deletions, items that came in insertions; of the items in both, a longest
    /// run that kept its order stays (an update where the item's value changed, `touched`),
    /// and the others move.
    static func windowChanges(from old: [ViewItem], to new: [ViewItem], group: String, touched: Set<ViewItem>)
        -> [ViewRowChange]
    {
        var oldIndex: [ViewItem: Int] = [:]
        for (index, item) in old.enumerated() { oldIndex[item] = index }
        let newItems = Set(new)
        var changes: [ViewRowChange] = []
        for (index, item) in old.enumerated() where !newItems.contains(item) {
            changes.append(.delete(item, at: ViewIndex(group: group, index: index)))
        }
        var kept: [(item: ViewItem, from: Int, to: Int)] = []
        for (index, item) in new.enumerated() {
            if let from = oldIndex[item] {
                kept.append((item, from, index))
            } else {
                changes.append(.insert(item, at: ViewIndex(group: group, index: index)))
            }
        }
        let stays = ViewDiff.longestIncreasingRun(kept.map(\.from))
        for (position, entry) in kept.enumerated() {
            if !stays.contains(position) {
                changes.append(
                    .move(
                        entry.item, from: ViewIndex(group: group, index: entry.from),
                        to: ViewIndex(group: group, index: entry.to)))
            } else if touched.contains(entry.item) {
                changes.append(.update(entry.item, at: ViewIndex(group: group, index: entry.to)))
            }
        }
        return ViewDiff.order(changes)
    }

    /// Ends the observation: releases the wake-up, the bookmark and the connection.
    private func end() -> ViewUpdate? {
        ended = true
        wakeups = nil
        if let wakerID { database.database?.commitLog.removeWaker(for: name, wakerID) }
        wakerID = nil
        do {
            try reader?.connection.endLongLivedReadTransaction()
        } catch {
            // Only a closed database fails here, whose connections hold nothing any more.
        }
        reader = nil
        return nil
    }
}
