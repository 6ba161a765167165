internal import Foundation

extension Database {
    /// The value under `key` in `collection`, now and after every commit that changes it.
    ///
    /// Yields the current value first (`nil` when there is none), then the new value after each
    /// commit that changed it, commits made outside this database included; a commit that
    /// rewrote the same bytes yields nothing. Each step reads the newest value: commits that land
    /// before the observer reads are coalesced into one element holding the newest value (the
    /// values in between are not kept anywhere to read); the elements yielded wait in the
    /// stream's buffer until the caller takes them. Built on ``changes()`` (subscribed before the first
    /// read, so no commit falls in between) and a connection of its own, which keeps the database
    /// open as any connection does. The sequence ends when the task iterating it is cancelled or
    /// the database is closed, and throws when a read fails (`decodingFailed` for a stored value
    /// that is not a `T`). A commit that only touched the key (``ReadWriteTransaction/touch(forKey:inCollection:)``)
    /// left its bytes as they were, and yields nothing here.
    ///
    /// ```swift
    /// for try await settings in db.observe(forKey: "main", inCollection: "settings", as: Settings.self) {
    ///     apply(settings)
    /// }
    /// ```
    public func observe<T: Decodable & Sendable>(
        forKey key: String, inCollection collection: String, as type: T.Type = T.self
    ) -> AsyncThrowingStream<T?, any Error> {
        observeChanges(
            isRelevant: { $0.hasChange(forKey: key, inCollection: collection) },
            read: { txn in
                let data = try txn.data(forKey: key, inCollection: collection)
                return (
                    data,
                    try data.map { _ in try txn.value(forKey: key, inCollection: collection, as: T.self) }
                        ?? nil
                )
            })
    }

    /// Every value of `collection`, by key, now and after every commit that changes the
    /// collection; as ``observe(forKey:inCollection:as:)`` for one key (a commit that leaves the
    /// collection's bytes as they were yields nothing).
    public func observe<T: Decodable & Sendable>(
        collection: String, as type: T.Type = T.self
    ) -> AsyncThrowingStream<[String: T], any Error> {
        observeChanges(
            isRelevant: { $0.hasChange(inCollection: collection) },
            read: { txn in
                var bytes = Data()
                var values: [String: T] = [:]
                try txn.enumerate(inCollection: collection, as: T.self) { key, value, _ in values[key] = value
                }
                // Each key and value with its length first: concatenated bare, a key holding NUL
                // and the value bytes around it could spell another collection's bytes.
                func appendField<Bytes: Collection<UInt8>>(_ field: Bytes) {
                    withUnsafeBytes(of: UInt64(field.count).littleEndian) { bytes.append(contentsOf: $0) }
                    bytes.append(contentsOf: field)
                }
                for key in try txn.keys(inCollection: collection) {
                    appendField(key.utf8)
                    appendField(try txn.data(forKey: key, inCollection: collection) ?? Data())
                }
                return (bytes, values)
            })
    }

    /// Reads with `read` now and after every relevant commit, yielding when the bytes `read`
    /// reports changed.
    private func observeChanges<Element: Sendable>(
        isRelevant: @escaping @Sendable (Changeset) -> Bool,
        read: @escaping @Sendable (ReadTransaction) throws -> (Data?, Element)
    ) -> AsyncThrowingStream<Element, any Error> {
        let (stream, continuation) = AsyncThrowingStream<Element, any Error>.makeStream()
        let connection = newConnection(name: "observer")
        let database = WeakDatabase(self)
        let task = Task {
            var last: Data??
            do {
                // A changes() stream that overflowed or ended is subscribed again, and the
                // value read again: nothing is missed.
                while !Task.isCancelled, let db = database.database, !db.isClosed {
                    let commits = db.changes()
                    let (bytes, element) = try await connection.read { try read($0) }
                    if last == nil || last! != bytes {
                        last = .some(bytes)
                        continuation.yield(element)
                    }
                    for await changeset in commits where isRelevant(changeset) {
                        let (bytes, element) = try await connection.read { try read($0) }
                        if last! != bytes {
                            last = .some(bytes)
                            continuation.yield(element)
                        }
                    }
                }
                continuation.finish()
            } catch let error as DatabaseError where error.code == .databaseClosed {
                continuation.finish()
            } catch is CancellationError {
                continuation.finish()
            } catch {
                continuation.finish(throwing: error)
            }
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }
}

extension Connection {
    /// The `async` form of ``beginLongLivedReadTransaction()``: bookmarks the newest commit on
    /// the connection's queue, off the caller's thread, and returns the changesets jumped.
    ///
    /// A distinct name rather than an `async` overload: with one, every existing call of the
    /// synchronous form inside an `async` function would need `await` to compile.
    ///
    /// ```swift
    /// for await _ in commits { let changes = try await ui.advance(); refresh(changes) }
    /// ```
    @discardableResult
    public func advance() async throws -> [Changeset] {
        try await serializedAdvance()
    }
}
