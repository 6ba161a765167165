/// The writing connection's part of a commit: its record shows the commit, and its value cache
/// moves to it, dropping exactly what the commit changed (``ConnectionCore/didCommit(_:operations:)``).
/// Other connections hear of nothing: they move their caches when they next begin.
final class WritingConnection: CommitSubscriber {
    func commitDidHappen(_ event: CommitEvent, in database: Database) {
        guard case .transaction(let writer, let operations, let changeset) = event.origin else { return }
        writer.didCommit(changeset, operations: operations)
    }
}
