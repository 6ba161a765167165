internal import Foundation

extension Database {
    /// The keys an index query returns, now and whenever they change: see
    /// ``IndexReader/keys(where:_:orderBy:limit:)`` for the query's parts and errors.
    ///
    /// Yields the current keys first, then the keys again after a commit that changed the
    /// result (its keys, or their order), and never after one that left it as it was: only a
    /// commit that changed a value of the index's collections (or rebuilt it) is read again,
    /// and a result whose keys are those yielded last is not yielded. Pulled, like
    /// ``observe(collection:as:)``: commits made while the consumer is busy are coalesced into
    /// one read of the newest commit. Throws what the query throws (`invalidQuery`,
    /// `unknownExtension` once the index is not registered).
    ///
    /// ```swift
    /// for try await adults in db.observe(index: "people", where: "age >= ?", [18], orderBy: "age") {
    ///     show(adults)
    /// }
    /// ```
    public func observe(
        index name: String, where whereClause: String, _ arguments: [IndexValue] = [], orderBy: String? = nil,
        limit: Int? = nil
    ) -> AsyncThrowingStream<[ViewItem], any Error> {
        observeChanges(
            isRelevant: relevance(ofExtension: name),
            read: { txn in
                let keys = try txn.index(named: name).keys(
                    where: whereClause, arguments, orderBy: orderBy, limit: limit)
                return (Self.bytes(of: keys), keys)
            })
    }

    /// The keys a full-text search returns, best first, now and whenever they change; as
    /// ``observe(index:where:_:orderBy:limit:)`` for an index query (see
    /// ``SearchReader/keys(matching:limit:)`` for the query).
    public func observe(search name: String, matching query: String, limit: Int = 100)
        -> AsyncThrowingStream<[ViewItem], any Error>
    {
        observeChanges(
            isRelevant: relevance(ofExtension: name),
            read: { txn in
                let keys = try txn.search(named: name).keys(matching: query, limit: limit)
                return (Self.bytes(of: keys), keys)
            })
    }

    /// Whether a changeset may have changed what extension `name` holds: it changed values of
    /// the extension's collections (every collection when it observes them all, or when it is
    /// not registered here), rebuilt it, or was made outside SnapshotDB.
    private func relevance(ofExtension name: String) -> @Sendable (Changeset) -> Bool {
        let collections = extensionDefinition(named: name)?.collections
        return { changeset in
            if changeset.isExternal || changeset.clearedAllCollections
                || changeset.extensionChanges.isReset(name)
            {
                return true
            }
            let changed = changeset.changedCollections
            return collections.map { !$0.isDisjoint(with: changed) } ?? !changed.isEmpty
        }
    }

    /// The keys' bytes, each field with its length first (``appendField(_:to:)``).
    private static func bytes(of keys: [ViewItem]) -> Data {
        var bytes = Data()
        for item in keys {
            appendField(item.collection.utf8, to: &bytes)
            appendField(item.key.utf8, to: &bytes)
        }
        return bytes
    }
}
