internal import Foundation

/// The `(collection, key)` address of a value.
struct CacheKey: Hashable {
    let collection: String
    let key: String
}

/// A value as read from the database: its stored bytes and, once decoded, the decoded object.
struct CacheEntry {
    let data: Data
    var object: Any?
}

/// A bounded per-connection cache of values as of one commit (``ValueCache/commit``).
///
/// Two generations approximate LRU at O(1) cost: hits in the old generation are promoted to the
/// young one, and when the young generation is full it becomes the old one and the previous old
/// generation is dropped. A value survives as long as it is read at least once per
/// `limit / 2` insertions.
///
/// The cache is only correct for the commit it was synchronized to; ``Connection`` moves it
/// from commit to commit with the changesets in between (``invalidate(with:)``) or drops it.
/// Not thread-safe: it belongs to one connection, which serializes every use.
final class ValueCache {
    private var young: [CacheKey: CacheEntry] = [:]
    private var old: [CacheKey: CacheEntry] = [:]
    private let generationLimit: Int
    /// The commit whose values the cache holds.
    var commit: UInt64 = 0

    init(limit: Int) {
        generationLimit = max(0, limit / 2)
    }

    var isEnabled: Bool { generationLimit > 0 }

    var count: Int { young.count + old.count }

    func entry(for key: CacheKey) -> CacheEntry? {
        if let entry = young[key] { return entry }
        guard let entry = old.removeValue(forKey: key) else { return nil }
        insert(entry, for: key)
        return entry
    }

    func insert(_ entry: CacheEntry, for key: CacheKey) {
        guard isEnabled else { return }
        if young.count >= generationLimit, young[key] == nil {
            old = young
            young = [:]
            young.reserveCapacity(generationLimit)
        }
        young[key] = entry
    }

    func remove(_ key: CacheKey) {
        young[key] = nil
        old[key] = nil
    }

    func removeCollection(_ collection: String) {
        young = young.filter { $0.key.collection != collection }
        old = old.filter { $0.key.collection != collection }
    }

    func removeAll() {
        young = [:]
        old = [:]
    }

    /// Drops exactly what `changeset` may have changed.
    func invalidate(with changeset: Changeset) {
        if changeset.isExternal || changeset.clearedAllCollections {
            removeAll()
            return
        }
        for collection in changeset.clearedCollections { removeCollection(collection) }
        for (collection, keys) in changeset.setKeys {
            for key in keys { remove(CacheKey(collection: collection, key: key)) }
        }
        for (collection, keys) in changeset.removedKeys {
            for key in keys { remove(CacheKey(collection: collection, key: key)) }
        }
    }
}
