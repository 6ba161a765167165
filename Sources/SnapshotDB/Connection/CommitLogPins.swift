internal import HeapModule
internal import SnapshotDBLocking

/// The commit log pins of a database's connections (``SnapshotRecord/commitLogPin``), kept as
/// they move, so that the oldest is known without visiting a connection.
///
/// Each ``ConnectionRecord`` moves its pin here under its own lock, as part of the change that
/// moved it; nothing here ever takes a record's lock (the order is record, then pins). The
/// commit log's trim asks for ``oldest`` at any time, at the cost of one lock and a look at the
/// top of a heap: it used to scan every connection's record whenever the oldest pin moved, so
/// that one bookmark's advance beside 1,000 idle connections visited all of them (issue 44).
final class CommitLogPins: Sendable {
    private let state = Mutex(PinCounts())

    /// Moves one connection's pin from `from` to `to` (`nil`: no pin); returns whether the
    /// oldest pin moved forward or went away, which can let the commit log shrink.
    func move(from: UInt64?, to: UInt64?) -> Bool {
        guard from != to else { return false }
        return state.withLock { counts in
            let before = counts.oldest
            counts.move(from: from, to: to)
            guard let before else { return false }
            return counts.oldest.map { $0 > before } ?? true
        }
    }

    /// The oldest pin of any connection, `nil` when none pins the log.
    var oldest: UInt64? { state.withLock { $0.oldest } }
}

/// A multiset of commit numbers whose smallest is found in O(1) and kept in O(log n): the
/// number of pins at each commit, and a min-heap of those commits.
struct PinCounts {
    /// How many pins each commit has; only commits with at least one.
    private var counts: [UInt64: Int] = [:]
    /// Every commit of `counts`, and commits no longer pinned that are removed only once they
    /// reach the top (a heap cannot remove from the middle), or when they outnumber the live ones
    /// (the heap is then built again from `counts`, so that a laggard holding the oldest pin
    /// while others advance past a million commits keeps it small).
    private var heap = Heap<UInt64>()

    /// The smallest pinned commit, `nil` when nothing is pinned.
    var oldest: UInt64? { heap.min }

    /// How many commits are pinned (for tests).
    var distinctCount: Int { counts.count }

    mutating func move(from: UInt64?, to: UInt64?) {
        guard from != to else { return }
        if let to {
            let count = counts[to, default: 0] + 1
            counts[to] = count
            // A commit that was pinned before may still be in the heap, unpinned: a second
            // copy only costs a pop when it reaches the top.
            if count == 1 { heap.insert(to) }
        }
        if let from, let count = counts[from] {
            counts[from] = count > 1 ? count - 1 : nil
        }
        while let top = heap.min, counts[top] == nil { heap.removeMin() }
        if heap.count > 2 * counts.count + 64 { heap = Heap(counts.keys) }
    }
}
