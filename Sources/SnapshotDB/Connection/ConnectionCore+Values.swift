internal import Foundation
internal import Logging
internal import SnapshotDBLocking

internal import struct Synchronization.Atomic

/// What a transaction reads through its connection: the collections it enumerates, the bytes it
/// lends, and values fetched through the value cache.
extension ConnectionCore {
    /// Runs `body` while bytes are lent (see ``bytesLent``).
    func lendingBytes(_ body: () throws -> Void) rethrows {
        bytesLent += 1
        defer { bytesLent -= 1 }
        try body()
    }

    func beginEnumerating(_ collection: String) { enumerations[collection, default: 0] += 1 }

    func endEnumerating(_ collection: String) {
        let remaining = (enumerations[collection] ?? 1) - 1
        enumerations[collection] = remaining > 0 ? remaining : nil
    }

    /// Whether `collection` (any collection for `nil`) is being enumerated.
    func isEnumerating(_ collection: String?) -> Bool {
        guard !enumerations.isEmpty else { return false }
        return collection.map { enumerations[$0] != nil } ?? true
    }

    func fetchData(_ key: CacheKey) throws(DatabaseError) -> Data? {
        try handle().statement(.getData).fetchBlob(key.collection, key.key)
    }
}
