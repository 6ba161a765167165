internal import Foundation

/// The items of one page in their stored form: an item count, then each item's collection and
/// key, each a length (8 bytes, little-endian) and UTF-8 bytes.
///
/// The writer changes a page one item at a time, so a page is kept as those bytes, with the
/// offset of each item: inserting or removing an item moves bytes instead of decoding and
/// encoding the page's strings (which cost most of a one-row move), reading a page copies one
/// blob, and finding an item compares bytes. Items are decoded only when asked for.
struct PageItems: Equatable {
    private(set) var bytes: [UInt8]
    /// Where each item starts in `bytes`; an item ends where the next starts (the last at the end).
    private var offsets: [Int]

    var count: Int { offsets.count }
    var isEmpty: Bool { offsets.isEmpty }

    init(_ items: [ViewItem]) {
        bytes = [UInt8](repeating: 0, count: 8)
        offsets = []
        offsets.reserveCapacity(items.count)
        for item in items {
            offsets.append(bytes.count)
            Self.append(item, to: &bytes)
        }
        storeCount()
    }

    /// The page of `bytes`, or `nil` when they are not a page.
    init?(bytes: [UInt8]) {
        guard let offsets = bytes.withUnsafeBytes({ Self.offsets(in: $0) }) else { return nil }
        self.bytes = bytes
        self.offsets = offsets
    }

    /// The item count and first item of a stored page, without reading the rest.
    static func header(_ buffer: UnsafeRawBufferPointer) -> (count: Int, first: ViewItem)? {
        guard let count = int(buffer, at: 0), count > 0, count <= buffer.count,
            let (first, _) = item(buffer, at: 8)
        else { return nil }
        return (count, first)
    }

    subscript(index: Int) -> ViewItem {
        bytes.withUnsafeBytes { Self.item($0, at: offsets[index])!.item }
    }

    var first: ViewItem { self[0] }

    var all: [ViewItem] { (0..<count).map { self[$0] } }

    func firstIndex(of item: ViewItem) -> Int? {
        var encoded: [UInt8] = []
        Self.append(item, to: &encoded)
        return bytes.withUnsafeBytes { buffer -> Int? in
            encoded.withUnsafeBytes { wanted -> Int? in
                for index in 0..<offsets.count where end(of: index) - offsets[index] == wanted.count {
                    if memcmp(buffer.baseAddress! + offsets[index], wanted.baseAddress!, wanted.count) == 0 {
                        return index
                    }
                }
                return nil
            }
        }
    }

    mutating func insert(_ item: ViewItem, at index: Int) {
        var encoded: [UInt8] = []
        Self.append(item, to: &encoded)
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

    /// Moves the items from `index` on into a page of their own, which it returns.
    mutating func split(at index: Int) -> PageItems {
        let cut = offsets[index]
        var right = PageItems([])
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

    private static func append(_ item: ViewItem, to bytes: inout [UInt8]) {
        for string in [item.collection, item.key] {
            let utf8 = string.utf8
            withUnsafeBytes(of: Int64(utf8.count).littleEndian) { bytes += $0 }
            bytes += utf8
        }
    }

    private static func int(_ buffer: UnsafeRawBufferPointer, at offset: Int) -> Int? {
        guard offset >= 0, offset + 8 <= buffer.count else { return nil }
        let value = Int64(littleEndian: buffer.loadUnaligned(fromByteOffset: offset, as: Int64.self))
        return value >= 0 && value <= Int64(buffer.count) ? Int(value) : nil
    }

    private static func string(_ buffer: UnsafeRawBufferPointer, at offset: Int) -> (String, next: Int)? {
        guard let length = int(buffer, at: offset), offset + 8 + length <= buffer.count else { return nil }
        let start = offset + 8
        return (
            String(decoding: UnsafeRawBufferPointer(rebasing: buffer[start..<start + length]), as: UTF8.self),
            start + length
        )
    }

    private static func item(_ buffer: UnsafeRawBufferPointer, at offset: Int) -> (item: ViewItem, next: Int)?
    {
        guard let (collection, middle) = string(buffer, at: offset),
            let (key, next) = string(buffer, at: middle)
        else { return nil }
        return (ViewItem(collection: collection, key: key), next)
    }

    /// Where each item of a stored page starts, checking that the bytes are exactly a page.
    private static func offsets(in buffer: UnsafeRawBufferPointer) -> [Int]? {
        guard let count = int(buffer, at: 0) else { return nil }
        var offsets: [Int] = []
        offsets.reserveCapacity(count)
        var offset = 8
        for _ in 0..<count {
            offsets.append(offset)
            guard let collection = int(buffer, at: offset), offset + 8 + collection <= buffer.count,
                let key = int(buffer, at: offset + 8 + collection)
            else { return nil }
            offset += 16 + collection + key
            guard offset <= buffer.count else { return nil }
        }
        return offset == buffer.count ? offsets : nil
    }
}
