internal import Foundation

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
struct ViewDiff {
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
