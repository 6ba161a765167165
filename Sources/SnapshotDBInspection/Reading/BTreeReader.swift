/// A value of a SQLite record.
enum RecordValue: Equatable {
    case null
    case integer(Int64)
    case real(Double)
    case text([UInt8])
    case blob([UInt8])
}

/// Walks table b-trees and decodes their records, as of one snapshot, without SQLite.
///
/// Everything read from the file is untrusted: every offset is bounds-checked, every page is
/// visited at most once, and a damaged structure ends the walk with a ``PageReadFailure``.
/// See "B-tree Pages" and "Record Format" at https://www.sqlite.org/fileformat2.html.
struct BTreeReader {
    let pages: PageSource
    let bound: UInt32
    /// Page size minus reserved bytes.
    let usableSize: Int
    /// The database text encoding (1 UTF-8, 2 UTF-16le, 3 UTF-16be).
    let textEncoding: UInt32

    private static let maximumPayload = 1 << 26
    private static let maximumVisitedPages = 1 << 20

    /// Calls `visit` with each record of the table b-tree rooted at `rootPage` until it returns true.
    /// - Returns: whether `visit` stopped the walk.
    @discardableResult
    func scanTable(
        rootPage: UInt32, _ visit: ([RecordValue]) throws(PageReadFailure) -> Bool
    ) throws(PageReadFailure) -> Bool {
        try scanTable(rootPage: rootPage) {
            (_: Int64, record: [RecordValue]) throws(PageReadFailure) -> Bool in
            try visit(record)
        }
    }

    /// Calls `visit` with the row id and record of each row of the table b-tree rooted at
    /// `rootPage`, in row id order, until it returns true.
    /// - Returns: whether `visit` stopped the walk.
    @discardableResult
    func scanTable(
        rootPage: UInt32, withRowIDs visit: (Int64, [RecordValue]) throws(PageReadFailure) -> Bool
    ) throws(PageReadFailure) -> Bool {
        var pending: [UInt32] = [rootPage]
        var visited: Set<UInt32> = []
        while let number = pending.popLast() {
            guard visited.insert(number).inserted else {
                throw PageReadFailure(reason: "the b-tree of page \(rootPage) loops through page \(number)")
            }
            guard visited.count <= Self.maximumVisitedPages else {
                throw PageReadFailure(reason: "the b-tree of page \(rootPage) is implausibly large")
            }
            let page = try pages.page(number, asOfFrame: bound)
            let headerOffset = number == 1 ? 100 : 0
            let type = try byte(page, headerOffset)
            let cellCount = Int(try uint16(page, headerOffset + 3))
            switch type {
            case 0x05:  // interior table page: left-child pointers, then the right-most pointer
                let cellPointers = headerOffset + 12
                pending.append(try uint32(page, headerOffset + 8))
                for cell in (0..<cellCount).reversed() {
                    let cellOffset = Int(try uint16(page, cellPointers + 2 * cell))
                    pending.append(try uint32(page, cellOffset))
                }
            case 0x0D:  // leaf table page: cells of (payload size, rowid, payload)
                let cellPointers = headerOffset + 8
                for cell in 0..<cellCount {
                    let cellOffset = Int(try uint16(page, cellPointers + 2 * cell))
                    let (payloadSize, sizeLength) = try varint(page, cellOffset)
                    let (rowid, rowidLength) = try varint(page, cellOffset + sizeLength)
                    let payload = try self.payload(
                        page, at: cellOffset + sizeLength + rowidLength, size: payloadSize)
                    if try visit(Int64(bitPattern: rowid), try Self.record(payload)) { return true }
                }
            default:
                throw PageReadFailure(
                    reason: "page \(number) is not a table b-tree page (type 0x\(String(type, radix: 16)))")
            }
        }
        return false
    }

    /// The largest row id of the table b-tree rooted at `rootPage` (the last cell of the leaf at
    /// the end of its right-most path), or `nil` when the table is empty.
    func largestRowID(rootPage: UInt32) throws(PageReadFailure) -> Int64? {
        var number = rootPage
        var visited: Set<UInt32> = []
        while true {
            guard visited.insert(number).inserted else {
                throw PageReadFailure(reason: "the b-tree of page \(rootPage) loops through page \(number)")
            }
            let page = try pages.page(number, asOfFrame: bound)
            let headerOffset = number == 1 ? 100 : 0
            let type = try byte(page, headerOffset)
            let cellCount = Int(try uint16(page, headerOffset + 3))
            switch type {
            case 0x05:  // interior table page: follow the right-most pointer
                number = try uint32(page, headerOffset + 8)
            case 0x0D:  // leaf table page: the last cell holds the largest row id
                guard cellCount > 0 else { return nil }
                let cellOffset = Int(try uint16(page, headerOffset + 8 + 2 * (cellCount - 1)))
                let (_, sizeLength) = try varint(page, cellOffset)
                let (rowid, _) = try varint(page, cellOffset + sizeLength)
                return Int64(bitPattern: rowid)
            default:
                throw PageReadFailure(
                    reason: "page \(number) is not a table b-tree page (type 0x\(String(type, radix: 16)))")
            }
        }
    }

    /// The payload of a table leaf cell, following overflow pages.
    private func payload(_ page: [UInt8], at offset: Int, size: UInt64) throws(PageReadFailure) -> [UInt8] {
        guard size <= UInt64(Self.maximumPayload) else {
            throw PageReadFailure(reason: "a record claims \(size) bytes")
        }
        let total = Int(size)
        let maxLocal = usableSize - 35
        var local = total
        if total > maxLocal {
            let minLocal = ((usableSize - 12) * 32 / 255) - 23
            let candidate = minLocal + ((total - minLocal) % (usableSize - 4))
            local = candidate <= maxLocal ? candidate : minLocal
        }
        guard offset >= 0, offset + local <= page.count else {
            throw PageReadFailure(reason: "a cell runs past the end of its page")
        }
        var result = Array(page[offset..<(offset + local)])
        guard local < total else { return result }
        var next = try uint32(page, offset + local)
        var visited: Set<UInt32> = []
        while result.count < total {
            guard next != 0, visited.insert(next).inserted else {
                throw PageReadFailure(reason: "an overflow chain ends early or loops")
            }
            let overflow = try pages.page(next, asOfFrame: bound)
            let take = min(total - result.count, usableSize - 4)
            guard 4 + take <= overflow.count else {
                throw PageReadFailure(reason: "overflow page \(next) is too short")
            }
            result.append(contentsOf: overflow[4..<(4 + take)])
            next = try uint32(overflow, 0)
        }
        return result
    }

    /// Decodes a record: a varint header size, varint serial types, then the values.
    static func record(_ bytes: [UInt8]) throws(PageReadFailure) -> [RecordValue] {
        let (headerSize, headerSizeLength) = try varint(bytes, 0)
        guard headerSize <= UInt64(bytes.count) else {
            throw PageReadFailure(reason: "a record header is longer than its record")
        }
        var serialTypes: [UInt64] = []
        var position = headerSizeLength
        while position < Int(headerSize) {
            let (serialType, length) = try varint(bytes, position)
            serialTypes.append(serialType)
            position += length
        }
        var values: [RecordValue] = []
        var data = Int(headerSize)
        for serialType in serialTypes {
            switch serialType {
            case 0:
                values.append(.null)
            case 1...6:
                let width = [0, 1, 2, 3, 4, 6, 8][Int(serialType)]
                values.append(.integer(try signedInteger(bytes, data, width: width)))
                data += width
            case 7:
                let bits = UInt64(bitPattern: try signedInteger(bytes, data, width: 8))
                values.append(.real(Double(bitPattern: bits)))
                data += 8
            case 8:
                values.append(.integer(0))
            case 9:
                values.append(.integer(1))
            case 10, 11:
                throw PageReadFailure(reason: "a record uses reserved serial type \(serialType)")
            default:
                let length = Int((serialType - 12) / 2)
                guard data <= bytes.count, length <= bytes.count - data else {
                    throw PageReadFailure(reason: "a record value runs past the record")
                }
                let content = Array(bytes[data..<(data + length)])
                values.append(serialType % 2 == 0 ? .blob(content) : .text(content))
                data += length
            }
        }
        return values
    }

    /// The bytes of `string` in the database's text encoding, to compare with record text.
    func encoded(_ string: String) -> [UInt8] {
        switch textEncoding {
        case 2: return string.utf16.flatMap { [UInt8($0 & 0xff), UInt8($0 >> 8)] }
        case 3: return string.utf16.flatMap { [UInt8($0 >> 8), UInt8($0 & 0xff)] }
        default: return Array(string.utf8)
        }
    }

    // MARK: Checked reads

    private func byte(_ bytes: [UInt8], _ offset: Int) throws(PageReadFailure) -> UInt8 {
        guard offset >= 0, offset < bytes.count else { throw Self.outOfBounds }
        return bytes[offset]
    }

    private func uint16(_ bytes: [UInt8], _ offset: Int) throws(PageReadFailure) -> UInt16 {
        guard offset >= 0, offset + 2 <= bytes.count else { throw Self.outOfBounds }
        return Bytes.bigEndianUInt16(bytes, at: offset)
    }

    private func uint32(_ bytes: [UInt8], _ offset: Int) throws(PageReadFailure) -> UInt32 {
        guard offset >= 0, offset + 4 <= bytes.count else { throw Self.outOfBounds }
        return Bytes.bigEndianUInt32(bytes, at: offset)
    }

    private func varint(_ bytes: [UInt8], _ offset: Int) throws(PageReadFailure) -> (UInt64, Int) {
        try Self.varint(bytes, offset)
    }

    private static let outOfBounds = PageReadFailure(reason: "a b-tree page points outside itself")

    /// A SQLite varint: 1 to 9 bytes, 7 bits each, the ninth byte contributing all 8 bits.
    static func varint(_ bytes: [UInt8], _ offset: Int) throws(PageReadFailure) -> (UInt64, Int) {
        var value: UInt64 = 0
        for index in 0..<9 {
            guard offset >= 0, offset + index < bytes.count else { throw outOfBounds }
            let byte = bytes[offset + index]
            if index == 8 { return (value << 8 | UInt64(byte), 9) }
            value = value << 7 | UInt64(byte & 0x7f)
            if byte & 0x80 == 0 { return (value, index + 1) }
        }
        return (value, 9)
    }

    /// A big-endian two's-complement integer of `width` bytes.
    private static func signedInteger(_ bytes: [UInt8], _ offset: Int, width: Int) throws(PageReadFailure)
        -> Int64
    {
        guard offset >= 0, offset + width <= bytes.count else { throw outOfBounds }
        var value: UInt64 = bytes[offset] & 0x80 != 0 ? UInt64.max : 0
        for index in 0..<width { value = value << 8 | UInt64(bytes[offset + index]) }
        return Int64(bitPattern: value)
    }
}
