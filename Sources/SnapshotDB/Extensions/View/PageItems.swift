internal import Foundation

/// The items of one page in their stored form: an item count, then each item's collection and
/// key, each a length (8 bytes, little-endian) and UTF-8 bytes; in a keyed view (one ordered by
/// ``SortKey``) each item's sort key follows, a length and its bytes.
///
/// The writer changes a page one item at a time, so a page is kept as those bytes, with the
/// offset of each item: inserting or removing an item moves bytes instead of decoding and
/// encoding the page's strings (which cost most of a one-row move), reading a page copies one
/// blob, and finding an item compares bytes. Items are decoded only when asked for, and a keyed
/// view compares an item's sort key where it lies in the page, without copying it.
struct PageItems: Equatable {
    private(set) var bytes: [UInt8]
    /// Where each item starts in `bytes`; an item ends where the next starts (the last at the end).
    private var offsets: [Int]
    /// Whether each item carries its sort key.
    let keyed: Bool

    var count: Int { offsets.count }
    var isEmpty: Bool { offsets.isEmpty }

    /// A page of `items`, with their sort keys `keys` in a keyed view (`nil` otherwise).
    init(_ items: [ViewItem], keys: [[UInt8]]? = nil) {
        self.init(items[...], keys: keys?[...])
    }

    /// A page of `items`, with their sort keys `keys` (indexed alike) in a keyed view.
    init(_ items: ArraySlice<ViewItem>, keys: ArraySlice<[UInt8]>?) {
        precondition(keys == nil || keys!.count == items.count, "one sort key per item")
        keyed = keys != nil
        // The size known first: the bytes are allocated once, not grown as they are appended.
        var size = 8
        for index in items.indices {
            size += 16 + items[index].collection.utf8.count + items[index].key.utf8.count
            if let keys { size += 8 + keys[index].count }
        }
        bytes = []
        bytes.reserveCapacity(size)
        bytes += [0, 0, 0, 0, 0, 0, 0, 0]
        offsets = []
        offsets.reserveCapacity(items.count)
        for index in items.indices {
            offsets.append(bytes.count)
            Self.append(items[index], key: keys?[index], to: &bytes)
        }
        storeCount()
    }

    /// The page of `bytes`, or `nil` when they are not a page (of a keyed view when `keyed`).
    init?(bytes: [UInt8], keyed: Bool) {
        guard let offsets = bytes.withUnsafeBytes({ Self.offsets(in: $0, keyed: keyed) }) else { return nil }
        self.bytes = bytes
        self.offsets = offsets
        self.keyed = keyed
    }

    /// The item count, first item and (in a keyed view) first sort key of a stored page, without
    /// reading the rest.
    static func header(_ buffer: UnsafeRawBufferPointer, keyed: Bool) -> (
        count: Int, first: ViewItem, firstKey: [UInt8]?
    )? {
        guard let count = int(buffer, at: 0), count > 0, count <= buffer.count,
            let (first, next) = item(buffer, at: 8)
        else { return nil }
        guard keyed else { return (count, first, nil) }
        guard let (key, _) = field(buffer, at: next) else { return nil }
        return (count, first, Array(key))
    }

    subscript(index: Int) -> ViewItem {
        bytes.withUnsafeBytes { Self.item($0, at: offsets[index])!.item }
    }

    var first: ViewItem { self[0] }

    var all: [ViewItem] { (0..<count).map { self[$0] } }

    /// The sort key of the item at `index` (keyed views only).
    func sortKey(at index: Int) -> [UInt8] {
        bytes.withUnsafeBytes { buffer in Array(Self.field(buffer, at: keyOffset(index, buffer))!.bytes) }
    }

    /// Every item's sort key, in order (keyed views only).
    var allSortKeys: [[UInt8]] { (0..<count).map(sortKey(at:)) }

    /// `memcmp` order of the sort key of the item at `index` against `key`: negative, zero or
    /// positive (keyed views only). Reads the key where it lies.
    func compareSortKey(at index: Int, with key: [UInt8]) -> Int {
        bytes.withUnsafeBytes { buffer in
            let stored = Self.field(buffer, at: keyOffset(index, buffer))!.bytes
            return key.withUnsafeBytes { wanted in SortKey.compare(stored, wanted) }
        }
    }

    /// Where the sort key of the item at `index` starts: past its collection and key, found by
    /// their lengths (no string is made).
    private func keyOffset(_ index: Int, _ buffer: UnsafeRawBufferPointer) -> Int {
        precondition(keyed, "a sort key asked of a page of a view without keys")
        return offsets[index] + Self.itemSize(buffer, at: offsets[index])
    }

    /// The index of `item` (by its bytes), comparing each stored item where it lies: its key
    /// first, which tells items of one collection apart, then its collection.
    func firstIndex(of item: ViewItem) -> Int? {
        var collection = item.collection
        var key = item.key
        return collection.withUTF8 { collection in
            key.withUTF8 { key in
                bytes.withUnsafeBytes { buffer -> Int? in
                    let base = buffer.baseAddress!
                    for index in 0..<offsets.count {
                        // A page's lengths were checked when it was read or made.
                        let start = offsets[index]
                        let collectionCount = Self.int(buffer, at: start)!
                        let keyStart = start + 8 + collectionCount
                        guard Self.int(buffer, at: keyStart)! == key.count,
                            collectionCount == collection.count,
                            key.isEmpty || memcmp(base + keyStart + 8, key.baseAddress!, key.count) == 0,
                            collection.isEmpty
                                || memcmp(base + start + 8, collection.baseAddress!, collection.count) == 0
                        else { continue }
                        return index
                    }
                    return nil
                }
            }
        }
    }

    /// Inserts `item` (with its sort key `key` in a keyed view) at `index`.
    mutating func insert(_ item: ViewItem, key: [UInt8]?, at index: Int) {
        precondition((key != nil) == keyed, "a sort key for every item of a keyed view, and only there")
        var encoded: [UInt8] = []
        Self.append(item, key: key, to: &encoded)
        let at = index < offsets.count ? offsets[index] : bytes.count
        bytes.insert(contentsOf: encoded, at: at)
        offsets.insert(at, at: index)
        for later in (index + 1)..<offsets.count { offsets[later] += encoded.count }
        storeCount()
    }

    mutating func remove(at index: Int) {
        let start = offsets[index]
        let size = end(of: index) - start
        bytes.removeSubrange(start..<start + size)
        offsets.remove(at: index)
        for later in index..<offsets.count { offsets[later] -= size }
        storeCount()
    }

    /// Gives the item at `index` the sort key `key`; returns whether it changed.
    mutating func setSortKey(_ key: [UInt8], at index: Int) -> Bool {
        guard compareSortKey(at: index, with: key) != 0 else { return false }
        let item = self[index]
        remove(at: index)
        insert(item, key: key, at: index)
        return true
    }

    /// Moves the items from `index` on into a page of their own, which it returns.
    mutating func split(at index: Int) -> PageItems {
        let cut = offsets[index]
        var right = PageItems([], keys: keyed ? [] : nil)
        right.bytes += bytes[cut...]
        right.offsets = offsets[index...].map { $0 - cut + 8 }
        right.storeCount()
        bytes.removeSubrange(cut...)
        offsets.removeSubrange(index...)
        storeCount()
        return right
    }

    private func end(of index: Int) -> Int { index + 1 < offsets.count ? offsets[index + 1] : bytes.count }

    private mutating func storeCount() {
        let count = Int64(offsets.count).littleEndian
        withUnsafeBytes(of: count) { count in
            for index in 0..<8 { bytes[index] = count[index] }
        }
    }

    /// Appends `item` and its sort key in the stored form. Each string's bytes are copied whole:
    /// an array of the two strings to loop over, and a `String.UTF8View` appended as a sequence,
    /// made encoding a build's pages a fifth slower (callgrind, 50,000 items: 66M against 52M
    /// instructions).
    private static func append(_ item: ViewItem, key: [UInt8]?, to bytes: inout [UInt8]) {
        appendField(item.collection, to: &bytes)
        appendField(item.key, to: &bytes)
        if let key {
            withUnsafeBytes(of: Int64(key.count).littleEndian) { bytes += $0 }
            bytes += key
        }
    }

    private static func appendField(_ string: String, to bytes: inout [UInt8]) {
        var string = string
        string.withUTF8 { utf8 in
            withUnsafeBytes(of: Int64(utf8.count).littleEndian) { bytes += $0 }
            bytes += utf8
        }
    }

    private static func int(_ buffer: UnsafeRawBufferPointer, at offset: Int) -> Int? {
        guard offset >= 0, offset + 8 <= buffer.count else { return nil }
        let value = Int64(littleEndian: buffer.loadUnaligned(fromByteOffset: offset, as: Int64.self))
        return value >= 0 && value <= Int64(buffer.count) ? Int(value) : nil
    }

    /// The length-prefixed bytes at `offset`, and where the next field starts.
    private static func field(_ buffer: UnsafeRawBufferPointer, at offset: Int) -> (
        bytes: UnsafeRawBufferPointer, next: Int
    )? {
        guard let length = int(buffer, at: offset), offset + 8 + length <= buffer.count else { return nil }
        let start = offset + 8
        return (UnsafeRawBufferPointer(rebasing: buffer[start..<start + length]), start + length)
    }

    private static func item(_ buffer: UnsafeRawBufferPointer, at offset: Int) -> (item: ViewItem, next: Int)?
    {
        guard let (collection, middle) = field(buffer, at: offset),
            let (key, next) = field(buffer, at: middle)
        else { return nil }
        return (
            ViewItem(
                collection: String(decoding: collection, as: UTF8.self),
                key: String(decoding: key, as: UTF8.self)),
            next
        )
    }

    /// The size of the collection and key of the item at `offset` (without its sort key).
    private static func itemSize(_ buffer: UnsafeRawBufferPointer, at offset: Int) -> Int {
        let collection = int(buffer, at: offset)!
        return 16 + collection + int(buffer, at: offset + 8 + collection)!
    }

    /// Where each item of a stored page starts, checking that the bytes are exactly a page.
    private static func offsets(in buffer: UnsafeRawBufferPointer, keyed: Bool) -> [Int]? {
        guard let count = int(buffer, at: 0) else { return nil }
        var offsets: [Int] = []
        offsets.reserveCapacity(count)
        var offset = 8
        for _ in 0..<count {
            offsets.append(offset)
            for _ in 0..<(keyed ? 3 : 2) {
                guard let (_, next) = field(buffer, at: offset) else { return nil }
                offset = next
            }
        }
        return offset == buffer.count ? offsets : nil
    }
}
