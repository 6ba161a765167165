/// What extensions keep on one SQLite handle (one connection's) from one transaction to the
/// next: a view's layout as of one commit, the last secondary-index query, the query fragments
/// already checked.
///
/// The handle holds it in its opaque ``SQLiteHandle/attachedState`` slot and knows nothing of
/// it; it lives as long as the handle, and is used under the same serialization as the handle
/// (its connection's, or the writer lock's). What it holds names extension tables, so
/// ``tablesDropped()`` forgets it when those tables are dropped or created again.
final class ExtensionHandleCache {
    /// The layout of each view as of one commit, for this connection's next read of that
    /// commit (a bookmarked connection reads the same commit many times).
    var viewLayouts: [String: (commit: UInt64, layout: ViewLayoutBox)] = [:]
    /// The last secondary-index query prepared on this handle, so that a loop running one query
    /// with many arguments builds and looks up its SQL once.
    var lastIndexQuery: (key: IndexQueryKey, statement: SQLiteStatement)?
    /// Query fragments that passed ``SQLiteHandle/checkFragment(_:policy:fragment:)``, by the
    /// columns allowed and the SQL checked: the same text names the same table and columns, so
    /// it is checked once (bounded, like the handle's statement cache).
    private var approvedFragments: Set<String> = []

    /// The cache of `handle`, made on first use.
    static func of(_ handle: SQLiteHandle) -> ExtensionHandleCache {
        if let cache = handle.attachedState as? ExtensionHandleCache { return cache }
        let cache = ExtensionHandleCache()
        handle.attachedState = cache
        return cache
    }

    /// Whether `approval` (see ``approve(_:)``) passed the fragment check on this handle.
    func isApproved(_ approval: String) -> Bool { approvedFragments.contains(approval) }

    /// Records that `approval`, a policy's columns and the SQL checked, passed the fragment check.
    func approve(_ approval: String) {
        if approvedFragments.count >= 256 { approvedFragments.removeAll(keepingCapacity: true) }
        approvedFragments.insert(approval)
    }

    /// Extension tables were dropped or created again: forgets the layouts and the statement
    /// that named them.
    func tablesDropped() {
        lastIndexQuery = nil
        viewLayouts = [:]
    }
}
