internal import Foundation

extension ReadTransaction {
    /// The `unknownExtension` error for a `what` named `name` that this process has not
    /// registered: it says so when the snapshot's file has one (another process or an earlier
    /// run registered it, or this process unregistered it after the snapshot), since
    /// registering it here is then all it takes.
    func unknownExtension(_ kind: ExtensionKind, named name: String) -> DatabaseError {
        let what = kind.description
        let plain = DatabaseError(.unknownExtension, "no \(what) named '\(name)' is registered")
        // Only inside the closure (the handle is the transaction's), and only for a name this
        // process has nothing under and the file has this kind of extension under. A look at the
        // file's catalog that fails only leaves out that hint: the plain error is true as it is.
        guard isActive, core.database.extensionDefinition(named: name) == nil,
            let installed = (try? core.handle()).flatMap({ try? ExtensionCatalog.installed(name, handle: $0) }
            ),
            installed.kind == kind.rawValue
        else { return plain }
        return DatabaseError(
            .unknownExtension,
            "no \(what) named '\(name)' is registered in this process, but the file has one at this snapshot "
                + "(\(installed.kind) version '\(ExtensionCatalog.publicVersion(installed.version))'): another process or an earlier run "
                + "registered it, or this process unregistered it after the snapshot; register it in this "
                + "process to read it")
    }

    /// The extension of `kind` registered as `name`, as a `Definition`, once its tables are
    /// known to be in this snapshot (``checkInstalled(_:)``): the one lookup of every reader.
    ///
    /// - Throws: `unknownExtension` when none of that kind is registered under `name` (saying
    ///   so when the file has one), and what ``checkInstalled(_:)`` throws.
    func registeredExtension<Definition>(named name: String, kind: ExtensionKind, as type: Definition.Type)
        throws(DatabaseError) -> Definition
    {
        guard let registered = core.database.extensionDefinition(named: name), registered.kind == kind,
            let definition = registered as? Definition
        else { throw unknownExtension(kind, named: name) }
        try checkInstalled(registered)
        return definition
    }

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

/// The computation behind ``ViewReader/changeSummary(for:inGroups:)``.
///
/// It needs no old snapshot. Each changeset recorded, for every item its commit touched, where
/// the item was before (its group and stored value). Items no commit touched are the same
/// before and after, so an item's old index is its old value's rank among the current items,
/// corrected for the touched ones: `rank(g, old) − #{touched now in g before old} + #{touched
/// before in g before old}`. Items in both states in one group that stayed in the same gap
/// between untouched items are updates if their order among themselves held (the longest
/// increasing run of them), else moves; so removing deletions and moves at old indexes and
/// inserting insertions and moves at new ones rebuilds the new rows exactly.
private struct ViewDiff {
    struct Old {
        let group: String
        let key: ViewSortKey
    }

    struct New {
        let group: String
        let key: ViewSortKey
        let index: Int
    }

    struct Touched {
        let item: ViewItem
        let old: Old?
        let new: New?
    }

    let touched: [Touched]
    let ranking: any ViewRanking
    let pages: ViewPages
    /// Touched items' keys per group, sorted: as they are now, and as they were.
    var newKeys: [String: [ViewSortKey]] = [:]
    var oldKeys: [String: [ViewSortKey]] = [:]

    init(
        before: [ViewItem: ViewCommitRecord.Before?], pages: ViewPages, ranking: any ViewRanking
    ) throws(DatabaseError) {
        self.pages = pages
        self.ranking = ranking
        var touched: [Touched] = []
        for (item, state) in before {
            let old = try state.map { (state) throws(DatabaseError) in
                Old(group: state.group, key: try ranking.key(item, before: state.stored))
            }
            var new: New?
            if let location = try pages.location(of: item),
                let index = try pages.index(of: item, page: location.page)
            {
                new = New(
                    group: location.group, key: try ranking.currentKey(item, page: location.page, in: pages),
                    index: index)
            }
            if old == nil && new == nil { continue }
            touched.append(Touched(item: item, old: old, new: new))
            if let old { oldKeys[old.group, default: []].append(old.key) }
            if let new { newKeys[new.group, default: []].append(new.key) }
        }
        self.touched = touched
        for group in newKeys.keys { newKeys[group]!.sort { ranking.less($0, $1) } }
        for group in oldKeys.keys { oldKeys[group]!.sort { ranking.less($0, $1) } }
    }

    /// How many of `keys` (sorted) sort before `key`.
    func countBefore(_ key: ViewSortKey, in keys: [ViewSortKey]?) -> Int {
        guard let keys else { return 0 }
        var low = 0
        var high = keys.count
        while low < high {
            let middle = (low + high) / 2
            if ranking.less(keys[middle], key) { low = middle + 1 } else { high = middle }
        }
        return low
    }

    /// How many current items of `group` sort before `key`.
    func rankNow(_ key: ViewSortKey, group: String) throws(DatabaseError) -> Int {
        return try pages.rank(inGroup: group, probe: ranking.probe(for: key))
    }

    func compute(inGroups filter: Set<String>?, currentGroups: [String]) throws(DatabaseError) -> ViewChanges
    {
        var rows: [ViewRowChange] = []
        // Candidates for updates, per group and gap between untouched items.
        var stayers: [String: [Int: [(item: ViewItem, old: ViewSortKey, oldIndex: Int, newIndex: Int)]]] = [:]
        for entry in touched {
            var oldIndex: ViewIndex?
            var oldGap = 0
            if let old = entry.old {
                let rank = try rankNow(old.key, group: old.group)
                oldGap = rank - countBefore(old.key, in: newKeys[old.group])
                oldIndex = ViewIndex(
                    group: old.group, index: oldGap + countBefore(old.key, in: oldKeys[old.group]))
            }
            let newIndex = entry.new.map { ViewIndex(group: $0.group, index: $0.index) }
            switch (oldIndex, newIndex) {
            case (nil, let to?): rows.append(.insert(entry.item, at: to))
            case (let from?, nil): rows.append(.delete(entry.item, at: from))
            case (let from?, let to?) where from.group != to.group:
                rows.append(.move(entry.item, from: from, to: to))
            case (let from?, let to?):
                let newGap = to.index - countBefore(entry.new!.key, in: newKeys[to.group])
                if newGap == oldGap {
                    stayers[to.group, default: [:]][oldGap, default: []].append(
                        (entry.item, entry.old!.key, from.index, to.index))
                } else {
                    rows.append(.move(entry.item, from: from, to: to))
                }
            case (nil, nil): break
            }
        }
        for (group, gaps) in stayers {
            for candidates in gaps.values {
                let byOld = candidates.sorted { $0.oldIndex < $1.oldIndex }
                let kept = Self.longestIncreasingRun(
                    byOld.map(\.newIndex), preferring: byOld.map { $0.oldIndex == $0.newIndex })
                for (position, candidate) in byOld.enumerated() {
                    let to = ViewIndex(group: group, index: candidate.newIndex)
                    if kept.contains(position) {
                        rows.append(.update(candidate.item, at: to))
                    } else {
                        rows.append(
                            .move(
                                candidate.item, from: ViewIndex(group: group, index: candidate.oldIndex),
                                to: to))
                    }
                }
            }
        }
        let sections = sectionChanges(currentGroups: currentGroups)
        return ViewChanges(
            isReload: false, sections: Self.restrict(sections, to: filter),
            rows: Self.order(Self.restrict(rows, to: filter)))
    }

    /// Groups that appeared or disappeared: a group's old count is its count now, less the
    /// touched items now in it, plus the touched items that were in it.
    private func sectionChanges(currentGroups: [String]) -> [ViewSectionChange] {
        var oldCounts: [String: Int] = [:]
        for group in Set(pages.layout.groups.keys).union(oldKeys.keys) {
            oldCounts[group] =
                (pages.layout.groups[group]?.count ?? 0) - (newKeys[group]?.count ?? 0)
                + (oldKeys[group]?.count ?? 0)
        }
        let oldGroups = oldCounts.filter { $0.value > 0 }.keys.sorted()
        let current = Set(currentGroups)
        let old = Set(oldGroups)
        var sections: [ViewSectionChange] = []
        for (index, group) in oldGroups.enumerated().reversed() where !current.contains(group) {
            sections.append(.delete(group: group, index: index))
        }
        for (index, group) in currentGroups.enumerated() where !old.contains(group) {
            sections.append(.insert(group: group, index: index))
        }
        return sections
    }

    /// Indexes (into `values`) of a longest strictly increasing subsequence; among the longest,
    /// one that keeps the most `preferred` elements (items whose index did not change, so that
    /// the item that kept its place is the update and the other the move), when there are few
    /// enough candidates for the quadratic search.
    static func longestIncreasingRun(_ values: [Int], preferring preferred: [Bool]) -> Set<Int> {
        guard values.count <= 256 else { return longestIncreasingRun(values) }
        let weight = values.count + 1
        var best = [Int](repeating: 0, count: values.count)
        var previous = [Int](repeating: -1, count: values.count)
        for index in values.indices {
            best[index] = weight + (preferred[index] ? 1 : 0)
            for earlier in 0..<index where values[earlier] < values[index] {
                let candidate = best[earlier] + weight + (preferred[index] ? 1 : 0)
                if candidate > best[index] {
                    best[index] = candidate
                    previous[index] = earlier
                }
            }
        }
        var kept: Set<Int> = []
        var index = best.indices.max { best[$0] < best[$1] } ?? -1
        while index >= 0 {
            kept.insert(index)
            index = previous[index]
        }
        return kept
    }

    /// Indexes (into `values`) of a longest strictly increasing subsequence, in O(n log n).
    static func longestIncreasingRun(_ values: [Int]) -> Set<Int> {
        var tails: [Int] = []  // index into values of the smallest tail of each length
        var previous = [Int](repeating: -1, count: values.count)
        for (index, value) in values.enumerated() {
            var low = 0
            var high = tails.count
            while low < high {
                let middle = (low + high) / 2
                if values[tails[middle]] < value { low = middle + 1 } else { high = middle }
            }
            if low > 0 { previous[index] = tails[low - 1] }
            if low == tails.count { tails.append(index) } else { tails[low] = index }
        }
        var kept: Set<Int> = []
        var index = tails.last ?? -1
        while index >= 0 {
            kept.insert(index)
            index = previous[index]
        }
        return kept
    }

    static func restrict(_ rows: [ViewRowChange], to groups: Set<String>?) -> [ViewRowChange] {
        guard let groups else { return rows }
        return rows.compactMap { row in
            switch row {
            case .insert(_, let at), .delete(_, let at), .update(_, let at):
                return groups.contains(at.group) ? row : nil
            case .move(let item, let from, let to):
                switch (groups.contains(from.group), groups.contains(to.group)) {
                case (true, true): return row
                case (true, false): return .delete(item, at: from)
                case (false, true): return .insert(item, at: to)
                case (false, false): return nil
                }
            }
        }
    }

    static func restrict(_ sections: [ViewSectionChange], to groups: Set<String>?) -> [ViewSectionChange] {
        guard let groups else { return sections }
        return sections.filter { section in
            switch section {
            case .insert(let group, _), .delete(let group, _): groups.contains(group)
            }
        }
    }

    /// Deletions and moves by old index, descending (safe to apply one by one), then insertions
    /// by new index, ascending, then updates.
    static func order(_ rows: [ViewRowChange]) -> [ViewRowChange] {
        func rank(_ row: ViewRowChange) -> (Int, String, Int) {
            switch row {
            case .delete(_, let at): (0, at.group, -at.index)
            case .move(_, let from, _): (0, from.group, -from.index)
            case .insert(_, let at): (1, at.group, at.index)
            case .update(_, let at): (2, at.group, at.index)
            }
        }
        return rows.sorted { rank($0) < rank($1) }
    }
}
