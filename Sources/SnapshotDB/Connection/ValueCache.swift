internal import Foundation

/// The `(collection, key)` address of a value, hashed once.
///
/// A read looks its key up in up to two generations and may insert it: hashing both strings
/// once, and feeding only that integer to each table, makes those three lookups cost about as
/// much as one. The hash is Swift's seeded `Hasher`, so crafted keys cannot flood the tables.
struct CacheKey: Hashable {
    let collection: String
    let key: String
    /// Seeded per process, like every `Hasher` value.
    let precomputedHash: Int

    init(collection: String, key: String) {
        self.collection = collection
        self.key = key
        var hasher = Hasher()
        hasher.combine(collection)
        hasher.combine(key)
        precomputedHash = hasher.finalize()
    }

    /// The same row: the same UTF-8 bytes, as SQLite compares keys. Swift's `==` on `String` is
    /// canonical equivalence, under which `"é"` (U+00E9) and `"e\u{301}"` are equal although they
    /// are two rows; comparing that way let one answer for the other from the cache. (The hash
    /// stays Swift's, which equal bytes always share.)
    static func == (lhs: CacheKey, rhs: CacheKey) -> Bool {
        lhs.precomputedHash == rhs.precomputedHash && sameUTF8(lhs.key, rhs.key)
            && sameUTF8(lhs.collection, rhs.collection)
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(precomputedHash)
    }

    /// The precomputed hash mixed with the table's seed: a dictionary asks for this on every
    /// lookup and insert, and the default (a new `Hasher` fed one integer) cost a third of a
    /// cache miss. The precomputed hash is already a seeded `Hasher` result, which is what
    /// resists crafted keys; the table's seed, mixed in by a 64-bit finalizer (MurmurHash3's
    /// `fmix64`), still gives every table its own layout, so that copying one table into a
    /// smaller one (`filter`) does not pile entries into runs of neighbouring buckets.
    func _rawHashValue(seed: Int) -> Int {
        var mixed = UInt64(truncatingIfNeeded: precomputedHash ^ seed)
        mixed ^= mixed >> 33
        mixed &*= 0xff51_afd7_ed55_8ccd
        mixed ^= mixed >> 33
        mixed &*= 0xc4ce_b9fe_1a85_ec53
        mixed ^= mixed >> 33
        return Int(truncatingIfNeeded: mixed)
    }
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
    private struct Generations {
        var young: [CacheKey: CacheEntry] = [:]
        var old: [CacheKey: CacheEntry] = [:]
        /// The hashes of recent raw-read misses, one per slot (a newer miss overwrites an older
        /// one in its slot): see ``admitsRawValue(for:)``.
        var recentMisses: [Int] = []
    }

    /// The two generations, behind a pointer rather than in stored `var`s: every access to a
    /// class's stored `var` pays Swift's dynamic exclusivity check (a runtime call), which cost
    /// about as much as a lookup on the read path. Sound because the cache is used only on its
    /// connection's queue, one call at a time, and no method hands out a reference into it.
    private let generations: UnsafeMutablePointer<Generations>
    private let generationLimit: Int
    /// The commit whose values the cache holds.
    var commit: UInt64 = 0
    /// The history token of that commit's row, when it was read: on a read replica, the same
    /// number with another token is another history (its primary put back to an older commit).
    var token: UInt64?

    init(limit: Int) {
        generationLimit = max(0, limit / 2)
        generations = .allocate(capacity: 1)
        var initial = Generations()
        if limit > 0 {
            // A power of two at least twice the cache's size, at most 2^20 slots (8 MiB): a
            // larger cache shares filter slots rather than allocating (or overflowing) more.
            let wanted = 2 * min(limit, 1 << 19) - 1
            let slots = 1 << (Int.bitWidth - max(1, wanted).leadingZeroBitCount)
            initial.recentMisses = [Int](repeating: 0, count: slots)
        }
        generations.initialize(to: initial)
    }

    deinit {
        generations.deinitialize(count: 1)
        generations.deallocate()
    }

    var isEnabled: Bool { generationLimit > 0 }

    var count: Int { generations.pointee.young.count + generations.pointee.old.count }

    func entry(for key: CacheKey) -> CacheEntry? {
        if let entry = generations.pointee.young[key] { return entry }
        guard let entry = generations.pointee.old.removeValue(forKey: key) else { return nil }
        insert(entry, for: key)
        return entry
    }

    /// Whether a raw value (bytes read without decoding) that missed the cache should enter it:
    /// on its second read among recent misses, not its first.
    ///
    /// A raw value costs little to read again from SQLite, while caching one that is never read
    /// again costs an insert and an eviction, which made random reads of many keys a third
    /// slower than SQLite's own. A key read twice in a short time is admitted; decoded values
    /// (expensive to rebuild) are always cached. The filter is a table of recent misses' hashes
    /// where each key has two candidate slots (so that two hot keys that share one slot do not
    /// keep evicting each other); a key that finds no free slot overwrites its first. Forgetting
    /// a miss only delays an admission and a collision of full hashes only admits a value early:
    /// neither can make a read wrong.
    func admitsRawValue(for key: CacheKey) -> Bool {
        guard isEnabled else { return false }
        let hash = key.precomputedHash
        let mask = generations.pointee.recentMisses.count - 1
        let first = hash & mask
        let second = (hash >> 32 ^ hash >> 16) & mask
        for slot in [first, second] where generations.pointee.recentMisses[slot] == hash {
            generations.pointee.recentMisses[slot] = 0
            return true
        }
        let slot =
            generations.pointee.recentMisses[first] != 0 && generations.pointee.recentMisses[second] == 0
            ? second : first
        generations.pointee.recentMisses[slot] = hash
        return false
    }

    /// Inserts or replaces the entry of `key` in the young generation, which first becomes the
    /// old one when full. (Replacing a key of a full young generation rotates too: harmless,
    /// lookups read the young generation first, and it saves a lookup on every insert.)
    func insert(_ entry: CacheEntry, for key: CacheKey) {
        guard isEnabled else { return }
        if generations.pointee.young.count >= generationLimit {
            // The dropped generation's storage is reused for the new young one.
            swap(&generations.pointee.young, &generations.pointee.old)
            generations.pointee.young.removeAll(keepingCapacity: true)
        }
        generations.pointee.young[key] = entry
    }

    func remove(_ key: CacheKey) {
        generations.pointee.young[key] = nil
        generations.pointee.old[key] = nil
    }

    func removeCollection(_ collection: String) {
        generations.pointee.young = generations.pointee.young.filter { $0.key.collection != collection }
        generations.pointee.old = generations.pointee.old.filter { $0.key.collection != collection }
    }

    func removeAll() {
        // The recent misses stay: they only remember that keys were read, not what they held.
        generations.pointee.young = [:]
        generations.pointee.old = [:]
    }

    /// Drops exactly what `changeset` may have changed.
    ///
    /// Walks the smaller side: the changed keys, or the cached ones when a large transaction
    /// changed more keys than the cache holds (a bulk insert must not cost a cache lookup per
    /// row at commit).
    func invalidate(with changeset: Changeset) {
        invalidate(with: changeset, operations: nil)
    }

    /// ``invalidate(with:)`` for the writing connection, which has the transaction's own
    /// `operations`: small changesets are walked from them, without the changeset's lock.
    func invalidate(with changeset: Changeset, operations: [ChangesetBuilder.Operation]?) {
        if changeset.isExternal || changeset.clearedAllCollections {
            removeAll()
            return
        }
        guard count > 0 else { return }
        if let operations, operations.count <= count {
            for operation in operations {
                if operation.kind == .clear {
                    removeCollection(operation.collection)
                } else {
                    remove(CacheKey(collection: operation.collection, key: operation.key))
                }
            }
            return
        }
        if changeset.changeCount > count {
            let sets = changeset.keySets
            for collection in sets.clearedCollections { removeCollection(collection) }
            let isUnchanged = { (key: CacheKey) in !sets.contains(key.key, inCollection: key.collection) }
            generations.pointee.young = generations.pointee.young.filter { isUnchanged($0.key) }
            generations.pointee.old = generations.pointee.old.filter { isUnchanged($0.key) }
            return
        }
        // Small changesets (most of them: one key) are walked as logged, without folding them
        // into sets first: an advance past many commits costs what they changed.
        changeset.visitChanges(
            key: { collection, key in self.remove(CacheKey(collection: collection, key: key)) },
            cleared: { self.removeCollection($0) })
    }
}
