/// Whether a read replica's SQLite handle still follows the replica: a pure value, which
/// ``ConnectionCore`` keeps per handle and asks as each snapshot begins.
///
/// A handle of Litestream's VFS (0.5.17) can stop following its replica while new handles of
/// the same process read on: after the primary was put back to an older commit (a restore moved
/// over it), the VFS's background poll of the connections open across it fails ("non-contiguous
/// ltx file") and they keep their old snapshot. SQLite cannot tell; SnapshotDB can, from what
/// other handles of the process saw:
/// - the commit log was marked for another history since the handle was opened (the put-back
///   was seen, by any handle): the handle may still hold the old history;
/// - the handle keeps finding the same snapshot behind the newest commit another handle
///   published (past any marked entries: under a put-back primary's reused numbers, being
///   behind is expected) for ``stallLimit``. The VFS looks at its replica once a second per
///   connection, so a handle that follows is at most about a second behind another.
///
/// Either way the connection opens a new handle; the cost is one open of the VFS.
struct ReplicaHandleFollowing {
    /// How long a handle may find the same snapshot behind the newest commit published.
    static let stallLimit: Duration = .seconds(5)

    /// The log's count of marks for another history when the handle was opened.
    let marksAtOpen: Int
    /// The snapshot the handle last found behind the newest commit published, and since when.
    private(set) var behind: (commit: UInt64, since: ContinuousClock.Instant)?

    init(marksAtOpen: Int) { self.marksAtOpen = marksAtOpen }

    /// Whether the handle may have stopped following.
    ///
    /// - Parameters:
    ///   - marks: the log's count of marks, and whether its newest commit lies within the
    ///     marked entries (``CommitLog/foreignHistoryMarks``).
    ///   - snapshot: the commit the handle's snapshot found, or `nil` before one is taken.
    ///   - latest: the newest commit the process published.
    mutating func isStalled(
        marks: (count: Int, coversLatest: Bool), snapshot: UInt64?, latest: UInt64,
        now: ContinuousClock.Instant
    ) -> Bool {
        if marks.count != marksAtOpen { return true }
        guard let snapshot else { return false }
        guard snapshot < latest, !marks.coversLatest else {
            behind = nil
            return false
        }
        guard let behind, behind.commit == snapshot else {
            self.behind = (snapshot, now)
            return false
        }
        return now - behind.since >= Self.stallLimit
    }
}
