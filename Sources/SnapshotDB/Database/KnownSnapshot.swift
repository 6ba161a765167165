internal import SnapshotDBLocking

/// The last WAL-index header whose commit counter a transaction of this database read (with no
/// unsealed foreign write) or a commit of this process left, with that counter.
///
/// A transaction whose snapshot has this header can skip reading the counter: a WAL-index lookup
/// of the history's last page walks every frame of it in the WAL, so without this the cost of
/// beginning a transaction would grow with the WAL. The newest record wins; an older one only
/// costs a later reader one read of the counter.
final class KnownSnapshot: CommitSubscriber {
    private let known = Mutex<(header: WALIndexHeader, commit: UInt64)?>(nil)

    /// The commit counter of the snapshot `header` identifies, when it is the one known.
    func commit(at header: WALIndexHeader) -> UInt64? {
        known.withLock { known in
            guard let known, known.header == header else { return nil }
            return known.commit
        }
    }

    /// Records that the snapshot `header` identifies has commit counter `commit`.
    func learn(_ commit: UInt64, at header: WALIndexHeader) {
        known.withLock { $0 = (header, commit) }
    }

    /// A commit of this process that was the next one after its transaction's header: the
    /// header it left is its own.
    func commitDidHappen(_ event: CommitEvent, in database: Database) {
        if let header = event.walHeader { learn(event.commit, at: header) }
    }
}
