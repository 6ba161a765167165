internal import Foundation

extension Database {
    /// The value under `key` in `collection`, now and after every commit that changes it.
    ///
    /// Yields the current value first (`nil` when there is none), then the new value after each
    /// commit that changed it, commits made outside this database included; a commit that
    /// rewrote the same bytes yields nothing. The sequence is pulled: each `next()` waits for a
    /// commit that changed the key, then reads the newest value. Commits that land before the
    /// caller asks are coalesced into one element holding the newest value (the values in
    /// between are not kept anywhere to read), so a slow consumer never works through a backlog
    /// of stale values, and nothing is read while nobody asks (the subscription holds at most
    /// ``Configuration/changesBufferLimit`` changesets meanwhile). (A key that went from A to B
    /// and back to A between two `next()` calls yields nothing for those commits.)
    /// Built on ``changes()`` (subscribed before the first read, so no commit falls in between)
    /// and a connection of its own, which keeps the database open as any connection does. The
    /// sequence ends when the task iterating it is cancelled or the database is closed, and
    /// throws when a read fails (`decodingFailed` for a stored value that is not a `T`). A commit
    /// that only touched the key (``ReadWriteTransaction/touch(forKey:inCollection:)``) left its
    /// bytes as they were, and yields nothing here.
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
                for key in try txn.keys(inCollection: collection) {
                    Self.appendField(key.utf8, to: &bytes)
                    Self.appendField(
                        try txn.data(forKey: key, inCollection: collection) ?? Data(), to: &bytes)
                }
                return (bytes, values)
            })
    }

    /// Appends `field` with its length first, for the bytes an observation compares: fields
    /// concatenated bare could spell other fields (a key holding NUL, and the bytes around it).
    static func appendField<Bytes: Collection<UInt8>>(_ field: Bytes, to bytes: inout Data) {
        withUnsafeBytes(of: UInt64(field.count).littleEndian) { bytes.append(contentsOf: $0) }
        bytes.append(contentsOf: field)
    }

    /// Reads with `read` when the caller asks for an element: first the current value, then
    /// again after each relevant commit, yielding when the bytes `read` reports changed.
    func observeChanges<Element: Sendable>(
        isRelevant: @escaping @Sendable (Changeset) -> Bool,
        read: @escaping @Sendable (ReadTransaction) throws -> (Data?, Element)
    ) -> AsyncThrowingStream<Element, any Error> {
        let observation = Observation(
            database: WeakDatabase(self), connection: newConnection(name: "observer"),
            isRelevant: isRelevant, read: read)
        return AsyncThrowingStream { try await observation.next() }
    }
}

/// The state of one ``Database/observe(forKey:inCollection:as:)`` or
/// ``Database/observe(collection:as:)`` sequence, advanced by its consumer's `next()`.
///
/// Design: the sequence is pulled, not pushed. An earlier version read in a task of its own
/// at every relevant commit and yielded into an unbounded buffer: a consumer that fell behind
/// found a backlog of values already out of date (for a collection, a dictionary of the whole
/// collection per commit), and the task read on while nobody asked. Here nothing runs between
/// two `next()` calls except the `changes()` subscription, which buffers at most
/// ``Configuration/changesBufferLimit`` changesets and ends on overflow (then this subscribes
/// again and reads again: nothing is missed). `next()` waits for a relevant commit newer than
/// the snapshot it last read, reads the newest commit, and returns the value unless its bytes
/// are those it returned last. So a slow consumer gets the newest value when it asks, never a
/// stale one, and the memory an observer holds does not grow with the commits it missed.
/// (GRDB's `ValueObservation.values()` reads at each change into a buffer, unbounded by
/// default; Swift's `Observations` (SE-0475) is pulled, like this.)
private actor Observation<Element: Sendable> {
    private let database: WeakDatabase
    private let connection: Connection
    private let isRelevant: @Sendable (Changeset) -> Bool
    private let read: @Sendable (ReadTransaction) throws -> (Data?, Element)
    /// The subscription, taken before the first read; `nil` before it and after it ended.
    private var commits: AsyncStream<Changeset>.Iterator?
    /// The bytes of the element returned last; `nil` before the first.
    private var returned: Data??
    /// The commit the last read saw: changesets up to it hold nothing that read missed.
    private var readCommit: UInt64 = 0
    private var ended = false

    init(
        database: WeakDatabase, connection: Connection, isRelevant: @escaping @Sendable (Changeset) -> Bool,
        read: @escaping @Sendable (ReadTransaction) throws -> (Data?, Element)
    ) {
        self.database = database
        self.connection = connection
        self.isRelevant = isRelevant
        self.read = read
    }

    func next() async throws -> Element? {
        guard !ended else { return nil }
        do {
            // `ended` again at each turn: another iterator of the same stream may have ended it
            // while this one waited.
            while !ended, !Task.isCancelled, let db = database.database, !db.isClosed {
                if var iterator = commits {
                    // Taken out while it waits: an actor's property cannot be passed `inout`
                    // across the suspension.
                    commits = nil
                    guard let changeset = await iterator.next(isolation: self) else {
                        continue  // overflowed or ended: subscribe again and read again
                    }
                    commits = iterator
                    guard changeset.commit > readCommit, isRelevant(changeset) else { continue }
                } else {
                    // Subscribed before the read, so that no commit falls between the two.
                    commits = db.changes().makeAsyncIterator()
                }
                let read = self.read
                let (bytes, element, commit) = try await connection.read { transaction in
                    let (bytes, element) = try read(transaction)
                    return (bytes, element, transaction.commit)
                }
                readCommit = max(readCommit, commit)
                if returned == nil || returned! != bytes {
                    returned = .some(bytes)
                    return element
                }
            }
        } catch let error as DatabaseError where error.code == .databaseClosed {
        } catch is CancellationError {
        } catch {
            end()
            throw error
        }
        end()
        return nil
    }

    private func end() {
        ended = true
        commits = nil
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
