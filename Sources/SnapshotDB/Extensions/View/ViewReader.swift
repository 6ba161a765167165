internal import Foundation

extension ReadTransaction {
    /// The view registered as `name`, read at this transaction's commit.
    ///
    /// Valid only inside the transaction's closure, like the transaction.
    ///
    /// - Throws: `unknownExtension` when no view of that name is registered, or this snapshot
    ///   predates its registration (advance the bookmark); a ``DatabaseError`` from SQLite.
    public func view(named name: String) throws(DatabaseError) -> ViewReader {
        let definition = try registeredExtension(named: name, kind: .view, as: (any ViewDefinition).self)
        let context = try core.extensionContext(named: name, transaction: self)
        return try ViewReader(
            transaction: self, name: name, ranking: definition.ranking(context), context: context)
    }
}

/// A view read at one transaction's commit: its groups, their items in order, positions, and
/// the row changes between an earlier commit and this one.
///
/// `groups` and counts come from the view's layout at this commit, in memory (loaded once per
/// commit when no connection has it yet); `item(at:inGroup:)` reads one row and
/// `index(ofKey:inCollection:)` two, at any size. They do not throw: if
/// SQLite fails while they read (an I/O error, a damaged page), they answer `nil`, `[]` or 0
/// and the error is thrown by the transaction's next throwing call (and by
/// ``changes(for:)``), or else by the `read`/`readWrite` call when the closure returns (a write
/// transaction then rolls back), so it is never lost.
///
/// Like its transaction, a reader is valid only inside the transaction's closure. One kept past
/// it (stored in a variable outside) holds no SQLite handle: its `groups` and counts stay those
/// of its commit, its item and position questions answer `nil` or `[]` (debug builds stop there
/// with an assertion), and its throwing calls throw `transactionEnded`.
public final class ViewReader {
    /// The view's name.
    public let name: String
    private let reference: ReaderTransaction
    /// The view's pages, read through the transaction's SQLite handle; `nil` once the
    /// transaction ended (the reader then holds no handle).
    private var openPages: ViewPages?
    /// The view's groups and their counts at the transaction's commit.
    private let layout: ViewLayout
    /// The view's order, which reads values through the transaction's handle; `nil` once the
    /// transaction ended.
    private var openRanking: (any ViewRanking)?
    /// The groups that hold at least one item, sorted.
    public let groups: [String]
    /// In a read-write transaction, how many writes it had made when this reader was made: the
    /// reader shows the view as of then, and refuses to answer once the transaction wrote more.
    private let writesWhenMade: Int?

    init(transaction: ReadTransaction, name: String, ranking: any ViewRanking, context: ExtensionContext)
        throws(DatabaseError)
    {
        self.name = name
        reference = ReaderTransaction(transaction, reader: "the view '\(name)'")
        openRanking = ranking
        let layout = try ViewLayout.current(
            name: name, context: context, transaction: transaction, keyed: ranking.keyed)
        self.layout = layout
        openPages = ViewPages(
            handle: context.handle, prefix: context.tablePrefix, keyed: ranking.keyed, layout: layout)
        groups = layout.groupNames
        writesWhenMade = (transaction as? ReadWriteTransaction)?.writeGeneration
        transaction.onEnd(for: self) { [weak self] in
            self?.openPages = nil
            self?.openRanking = nil
        }
    }

    /// The transaction, while it is open.
    private func transaction() throws(DatabaseError) -> ReadTransaction {
        let transaction = try reference.get()
        try transaction.checkActive()
        return transaction
    }

    /// The pages, while the transaction is open.
    private func pages() throws(DatabaseError) -> ViewPages {
        _ = try transaction()
        guard let openPages else { throw reference.ended }
        return openPages
    }

    /// Throws `misuse` when the read-write transaction wrote since this reader was made: its
    /// layout is the view's before those writes (whose pages may be gone), so it could answer
    /// wrong or report damage that is not there.
    private func checkCurrent() throws(DatabaseError) {
        guard let writesWhenMade, let write = reference.ifAlive as? ReadWriteTransaction,
            write.writeGeneration != writesWhenMade
        else { return }
        throw DatabaseError(
            .misuse,
            "the view '\(name)' was read through a reader made before this transaction's last writes; "
                + "call view(named:) again after writing")
    }

    private func reading<T>(_ fallback: T, _ body: (ViewPages) throws(DatabaseError) -> T) -> T {
        do {
            let pages = try pages()
            try checkCurrent()
            return try body(pages)
        } catch {
            // A reader kept past its transaction's closure (stored in a variable outside it)
            // has no transaction to report to: it answers empty, which debug builds stop at.
            assert(
                error.code != .transactionEnded,
                "ViewReader '\(name)' was used after its transaction's closure returned; "
                    + "read the view inside the closure")
            reference.ifAlive?.recordFailure(error)
            return fallback
        }
    }

    /// How many items `group` holds (0 for a group not in the view).
    public func count(inGroup group: String) -> Int { layout.groups[group]?.count ?? 0 }

    /// How many items the view holds in all.
    public var count: Int { layout.groups.values.reduce(0) { $0 + $1.count } }

    /// The item at `index` of `group`, or `nil` when there is none.
    public func item(at index: Int, inGroup group: String) -> ViewItem? {
        guard index >= 0, index < count(inGroup: group) else { return nil }
        return reading(nil) { (pages) throws(DatabaseError) in try pages.item(at: index, inGroup: group) }
    }

    /// Every item of `group`, in order (O(items)).
    public func items(inGroup group: String) -> [ViewItem] {
        guard count(inGroup: group) > 0 else { return [] }
        return reading([]) { (pages) throws(DatabaseError) in try pages.items(inGroup: group) }
    }

    /// The group and index of `key` in `collection`, or `nil` when it is not in the view.
    public func index(ofKey key: String, inCollection collection: String) -> ViewIndex? {
        let item = ViewItem(collection: collection, key: key)
        return reading(nil) { (pages) throws(DatabaseError) in
            guard let location = try pages.location(of: item),
                let index = try pages.index(of: item, page: location.page)
            else { return nil }
            return ViewIndex(group: location.group, index: index)
        }
    }

    /// The value of the item at `index` of `group`, decoded as `T`, or `nil` when there is none.
    ///
    /// - Throws: what ``ReadTransaction/value(forKey:inCollection:as:)`` throws.
    public func value<T: Decodable>(at index: Int, inGroup group: String, as type: T.Type = T.self)
        throws(DatabaseError) -> T?
    {
        let transaction = try transaction()
        guard let item = item(at: index, inGroup: group) else { return nil }
        return try transaction.value(forKey: item.key, inCollection: item.collection, as: T.self)
    }

    /// Whether `changesets` hold a commit after which the view must be reloaded whole: one made
    /// outside this database (its changes are unknown) or one that rebuilt the view.
    public func requiresReload<Changesets: Sequence<Changeset>>(for changesets: Changesets) -> Bool {
        changesets.contains { changeset in
            changeset.isExternal || changeset.extensionChanges.isReset(name)
                || !ViewCommitRecord.isReadable(changeset.extensionChanges.byName[name])
        }
    }

    /// The row changes that take the view from the commit before `changesets` (what an
    /// advance returned) to this transaction's commit; see ``ViewRowChange`` for the indexes.
    ///
    /// Empty when the view must be reloaded (``requiresReload(for:)``); use
    /// ``changeSummary(for:inGroups:)`` to tell that from "nothing changed". Costs O(row changes
    /// × log n), not O(view size).
    ///
    /// - Throws: `misuse` in a read transaction when `changesets` are not consecutive commits
    ///   ending at this transaction's (another advance's batch: the row changes would be wrong).
    public func changes<Changesets: Sequence<Changeset>>(for changesets: Changesets) throws(DatabaseError)
        -> [ViewRowChange]
    {
        try changeSummary(for: changesets).rows
    }

    /// The row changes restricted to `groups`: a move from a group outside them into one of
    /// them is an insert, and the other way a delete.
    public func changes<Changesets: Sequence<Changeset>>(
        for changesets: Changesets, inGroups groups: Set<String>
    )
        throws(DatabaseError) -> [ViewRowChange]
    {
        try changeSummary(for: changesets, inGroups: groups).rows
    }

    /// The section changes, row changes and reload flag that take the view from the commit
    /// before `changesets` to this transaction's commit, for every group or only `groups`.
    public func changeSummary<Changesets: Sequence<Changeset>>(
        for changesets: Changesets, inGroups groups: Set<String>? = nil
    ) throws(DatabaseError) -> ViewChanges {
        let transaction = try transaction()
        let changesets = Array(changesets)
        if requiresReload(for: changesets) { return ViewChanges(isReload: true, sections: [], rows: []) }
        try Self.checkLeadHere(changesets, to: transaction)
        var before: [ViewItem: ViewCommitRecord.Before?] = [:]
        for changeset in changesets {
            guard let stored = changeset.extensionChanges.byName[name] else { continue }
            let record: ViewCommitRecord
            do throws(HistoryReader.Failure) {
                // (Readable: `requiresReload(for:)` said no reload.)
                guard let decoded = try ViewCommitRecord.from(stored) else { continue }
                record = decoded
            } catch {
                throw DatabaseError(
                    .corrupt,
                    "the durable history's record of view '\(name)' in commit \(changeset.commit) is damaged "
                        + "(\(error.reason)): its row changes cannot be computed; reload the view")
            }
            for (item, state) in record.touched where before.index(forKey: item) == nil {
                before[item] = state
            }
        }
        let pages = try pages()
        guard let ranking = openRanking else { throw reference.ended }
        let diff = try ViewDiff(before: before, pages: pages, ranking: ranking)
        return try diff.compute(inGroups: groups, currentGroups: self.groups)
    }
}

extension ViewReader {
    /// `misuse` unless `changesets` are consecutive commits ending at `transaction`'s (in a
    /// read transaction): row changes for any other batch (an earlier advance's, one missing a
    /// commit, or one this snapshot is past) would look plausible and be wrong.
    static func checkLeadHere(_ changesets: [Changeset], to transaction: ReadTransaction)
        throws(DatabaseError)
    {
        guard let last = changesets.last, !(transaction is ReadWriteTransaction) else { return }
        for (earlier, later) in zip(changesets, changesets.dropFirst())
        where earlier.commit == .max || later.commits.lowerBound != earlier.commit + 1 {
            throw DatabaseError(
                .misuse,
                "the changesets given for row changes are not consecutive: commit \(earlier.commit), then "
                    + "\(later.commits.lowerBound); pass every changeset an advance returned, in order")
        }
        guard last.commit == transaction.commit else {
            throw DatabaseError(
                .misuse,
                "the changesets given for row changes end at commit \(last.commit), but this transaction "
                    + "reads commit \(transaction.commit): pass what the advance to this snapshot returned")
        }
    }
}
