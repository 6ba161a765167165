internal import Foundation

/// Metadata beside each value (YapDatabase's metadata): a small `Codable` value stored with a
/// value and read or written without decoding or rewriting the value, e.g. a timestamp or a
/// flag a list shows without loading every document.
///
/// Metadata is encoded with the collection's codec. `set(_:forKey:inCollection:)` keeps a
/// value's metadata; `set(_:forKey:inCollection:metadata:)` replaces both;
/// `removeMetadata(forKey:inCollection:)` removes the metadata alone; removing a value removes
/// its metadata. A metadata change is reported in the commit's changeset as a change
/// of the key (`hasChange` covers it). Metadata needs schema version 2, to which files are
/// migrated at open; a version-1 file that cannot be written (a read-only file system) opens,
/// but its metadata calls fail with SQLite's error.
extension ReadTransaction {
    /// The metadata stored beside the value under `key` in `collection`, decoded as `M`; `nil`
    /// when there is no value or it has no metadata.
    ///
    /// - Throws: `decodingFailed` when the metadata is not an `M`.
    public func metadata<M: Decodable>(
        forKey key: String, inCollection collection: String, as type: M.Type = M.self
    )
        throws(DatabaseError) -> M?
    {
        try checkActive()
        guard let data = try storedMetadata(forKey: key, inCollection: collection) else { return nil }
        return try decode(M.self, from: data, key: key, collection: collection)
    }

    /// The metadata bytes stored with the value under `key`, as they are; `nil` for none.
    func storedMetadata(forKey key: String, inCollection collection: String) throws(DatabaseError) -> Data? {
        let statement = try core.handle().statement(.getMetadata)
        defer { statement.reset() }
        try statement.bind(collection, at: 1)
        try statement.bind(key, at: 2)
        guard try statement.step(), !statement.isNull(at: 0) else { return nil }
        return statement.data(at: 0)
    }
}

extension ReadWriteTransaction {
    /// Stores `value` and its `metadata` (replacing both) under `key` in `collection`. A `nil` of
    /// type `M?` stores the value with no metadata, as a bare `nil` literal does (it calls the
    /// overload that takes `Never?`).
    ///
    /// - Throws: `encodingFailed` when the codec refuses either, and what
    ///   ``set(_:forKey:inCollection:)`` throws.
    public func set<T: Encodable, M: Encodable>(
        _ value: T, forKey key: String, inCollection collection: String, metadata: M?
    ) throws(DatabaseError) {
        try checkActive()
        let data = try encode(value, key: key, collection: collection)
        let metadata = try metadata.map { (metadata) throws(DatabaseError) in
            try encode(metadata, key: key, collection: collection)
        }
        try storeData(data, forKey: key, inCollection: collection, metadata: .some(metadata))
    }

    /// Stores `value` with no metadata under `key` in `collection` (its metadata, if any, is
    /// removed): the form a bare `nil` literal calls, which names no metadata type.
    ///
    /// ```swift
    /// try txn.set(note, forKey: "1", inCollection: "notes", metadata: nil)
    /// ```
    ///
    /// As in the generic form with metadata, a `value` that is an `Optional`'s `nil` is stored
    /// (encoded), where ``set(_:forKey:inCollection:)`` removes the key.
    ///
    /// - Throws: what the generic form throws.
    public func set<T: Encodable>(
        _ value: T, forKey key: String, inCollection collection: String, metadata: Never?
    ) throws(DatabaseError) {
        try checkActive()
        let data = try encode(value, key: key, collection: collection)
        try storeData(data, forKey: key, inCollection: collection, metadata: .some(nil))
    }

    /// Replaces the metadata of the value under `key` in `collection` without rewriting the
    /// value; returns whether there is a value there (without one, nothing is stored, as in
    /// YapDatabase). A `nil` of type `M?` removes the metadata, as a bare `nil` literal does
    /// (``removeMetadata(forKey:inCollection:)``).
    @discardableResult
    public func setMetadata<M: Encodable>(_ metadata: M?, forKey key: String, inCollection collection: String)
        throws(DatabaseError) -> Bool
    {
        try checkActive()
        try checkNotLendingBytes(collection)
        let data = try metadata.map { (metadata) throws(DatabaseError) in
            try encode(metadata, key: key, collection: collection)
        }
        return try storeMetadata(data, forKey: key, inCollection: collection)
    }

    /// Removes the metadata of the value under `key` in `collection`: the form a bare `nil`
    /// literal calls, the same as ``removeMetadata(forKey:inCollection:)``.
    @discardableResult
    public func setMetadata(_ metadata: Never?, forKey key: String, inCollection collection: String)
        throws(DatabaseError) -> Bool
    {
        try removeMetadata(forKey: key, inCollection: collection)
    }

    /// Removes the metadata of the value under `key` in `collection`, keeping the value; returns
    /// whether there is a value there. Reported in the commit's changeset as
    /// `setMetadata(_:forKey:inCollection:)` is: a change of the key (listed in
    /// ``Changeset/setKeys``), not a removal of the value.
    @discardableResult
    public func removeMetadata(forKey key: String, inCollection collection: String) throws(DatabaseError)
        -> Bool
    {
        try checkActive()
        try checkNotLendingBytes(collection)
        return try storeMetadata(nil, forKey: key, inCollection: collection)
    }

    /// Stores encoded metadata (`nil` for none) beside the value under `key`; returns whether
    /// there is a value there.
    private func storeMetadata(_ data: Data?, forKey key: String, inCollection collection: String)
        throws(DatabaseError) -> Bool
    {
        let handle = try core.handle()
        let statement = try handle.statement(.setMetadata)
        defer { statement.reset() }
        try statement.bind(collection, at: 1)
        try statement.bind(key, at: 2)
        if let data {
            try statement.bind(data, at: 3)
        } else {
            try statement.bindNull(at: 3)
        }
        _ = try statement.step()
        guard handle.changes > 0 else { return false }
        recordMetadataChange(forKey: key, inCollection: collection)
        return true
    }
}
