internal import Foundation

extension ReadTransaction {
    /// Calls `body` with the values of `collection`, in ascending key order, at most
    /// `batchSize` at a time: a walk over a collection of any size whose memory is one batch.
    /// No statement stays open between batches, so `body` may write, to this collection too
    /// (in a read-write transaction); a key it adds after the batch's last key is visited later.
    ///
    /// - Throws: `misuse` for a `batchSize` below 1; `decodingFailed` naming the collection and
    ///   key of a value that is not a `T`; what `body` throws.
    public func forEachBatch<T: Decodable>(
        inCollection collection: String, as type: T.Type = T.self, batchSize: Int = 500,
        _ body: (_ batch: [(key: String, value: T)]) throws -> Void
    ) throws {
        try checkActive()
        guard batchSize >= 1 else {
            throw DatabaseError(.misuse, "forEachBatch needs a batchSize of at least 1, not \(batchSize)")
        }
        var after: String?
        while true {
            let keys = try self.keys(inCollection: collection, after: after, limit: batchSize)
            guard let last = keys.last else { return }
            var batch: [(key: String, value: T)] = []
            batch.reserveCapacity(keys.count)
            for key in keys {
                // A key `body` removed in an earlier batch is not in this one's keys.
                guard let value = try value(forKey: key, inCollection: collection, as: T.self) else {
                    continue
                }
                batch.append((key, value))
            }
            try body(batch)
            after = last
        }
    }

    /// At most `limit` keys of `collection` after `after` (from the first for `nil`), in order.
    func keys(inCollection collection: String, after: String?, limit: Int) throws(DatabaseError) -> [String] {
        // From the start: every key is at or after the empty key. (A seek either way: the
        // values' primary key is (collection, key).)
        let statement = try core.handle().idleStatement(after == nil ? .keysFrom : .keysAfter)
        defer { statement.reset() }
        try statement.bind(collection, at: 1)
        try statement.bind(after ?? "", at: 2)
        try statement.bind(Int64(limit), at: 3)
        var keys: [String] = []
        while try statement.step() { keys.append(statement.string(at: 0)) }
        return keys
    }
}

extension ReadWriteTransaction {
    /// Runs `body` as the migration `name` (see ``Migrator``): the extensions' upkeep waits for
    /// its end, when those of the collections it changed are rebuilt once; then its record.
    func runMigration(
        named name: String, position: Int, _ body: (ReadWriteTransaction) throws -> Void
    ) throws {
        extensionWriters.deferUpkeep()
        try body(self)
        try rebuildDeferredExtensions()
        let handle = try core.handle()
        try MigrationRecords.record(
            name, position: position,
            commit: changes.isEmpty && !extensionWriters.hasChanges ? commit : commit + 1,
            on: handle)
        wroteBookkeeping = true
    }

    /// Rebuilds, from the values, the extensions whose upkeep a migration deferred and whose
    /// collections it changed (with those that read them), in one pass.
    private func rebuildDeferredExtensions() throws(DatabaseError) {
        let deferred = extensionWriters.endDeferredUpkeep()
        guard !deferred.isEmpty else { return }
        let changed = Set(changes.operations.map(\.collection))
        let clearedAll = changes.clearedAllCollections
        var names = Set(
            deferred.filter { definition in
                clearedAll || definition.collections.map { !$0.isDisjoint(with: changed) } ?? !changed.isEmpty
            }.map(\.name))
        // What reads a rebuilt extension (a search-results view its full-text index) is rebuilt too.
        var grew = true
        while grew {
            let before = names.count
            for definition in deferred where definition.dependencies.contains(where: names.contains) {
                names.insert(definition.name)
            }
            grew = names.count > before
        }
        guard !names.isEmpty else { return }
        let memo = names.count > 1 ? DecodeMemo() : nil
        var builds: [(definition: any ExtensionDefinition, context: ExtensionContext)] = []
        for definition in deferred where names.contains(definition.name) {
            var context = try freshTables(for: definition)
            context.memo = memo
            builds.append((definition, context))
        }
        try extensionWriters.rebuild(builds)
    }

    /// Moves every value of `collection` (with its metadata, its bytes as they are) to
    /// `newName`, in batches of `batchSize`: each key is removed from one and set in the other,
    /// as a bookmark's changeset says.
    ///
    /// - Throws: `misuse` when `newName` already holds values, or is `collection`; what a write
    ///   throws.
    public func renameCollection(_ collection: String, to newName: String, batchSize: Int = 500) throws {
        try checkActive()
        guard newName != collection else {
            throw DatabaseError(.misuse, "renameCollection: '\(collection)' is already its name")
        }
        guard try count(inCollection: newName) == 0 else {
            throw DatabaseError(
                .misuse,
                "renameCollection: '\(newName)' already holds values; move them first, or pick another name")
        }
        while true {
            let keys = try self.keys(inCollection: collection, after: nil, limit: max(1, batchSize))
            guard !keys.isEmpty else { return }
            for key in keys {
                guard let data = try data(forKey: key, inCollection: collection) else { continue }
                let metadata = try storedMetadata(forKey: key, inCollection: collection)
                try storeData(data, forKey: key, inCollection: newName, metadata: .some(metadata))
                try removeValue(forKey: key, inCollection: collection)
            }
        }
    }

    /// Rewrites every value of `collection` from `Old` to `New` with `transform`, in batches of
    /// `batchSize`; a `nil` from `transform` removes the value. `progress` hears how many values
    /// were rewritten so far and how many there are.
    ///
    /// - Throws: `decodingFailed` naming the collection and key of a value that is not an `Old`
    ///   (the transaction then rolls back whole, as any error does); what `transform` throws.
    public func rewriteValues<Old: Decodable, New: Encodable>(
        inCollection collection: String, from old: Old.Type, to new: New.Type, batchSize: Int = 500,
        progress: ((_ done: Int, _ total: Int) -> Void)? = nil,
        _ transform: (_ key: String, _ value: Old) throws -> New?
    ) throws {
        let total = try count(inCollection: collection)
        var done = 0
        try forEachBatch(inCollection: collection, as: Old.self, batchSize: batchSize) { batch in
            for (key, value) in batch {
                if let rewritten = try transform(key, value) {
                    try set(rewritten, forKey: key, inCollection: collection)
                } else {
                    try removeValue(forKey: key, inCollection: collection)
                }
            }
            done += batch.count
            progress?(done, total)
        }
    }
}
