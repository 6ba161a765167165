/// Fixed-width integer reads from byte arrays whose length the caller has already checked.
enum Bytes {
    static func bigEndianUInt16(_ bytes: [UInt8], at offset: Int) -> UInt16 {
        UInt16(bytes[offset]) << 8 | UInt16(bytes[offset + 1])
    }

    static func bigEndianUInt32(_ bytes: [UInt8], at offset: Int) -> UInt32 {
        UInt32(bytes[offset]) << 24 | UInt32(bytes[offset + 1]) << 16 | UInt32(bytes[offset + 2]) << 8
            | UInt32(bytes[offset + 3])
    }

    /// A 32-bit integer in the byte order of this machine, as SQLite keeps the wal-index.
    static func nativeUInt32(_ bytes: [UInt8], at offset: Int) -> UInt32 {
        let littleEndian =
            UInt32(bytes[offset]) | UInt32(bytes[offset + 1]) << 8 | UInt32(bytes[offset + 2]) << 16
            | UInt32(bytes[offset + 3]) << 24
        return UInt32(littleEndian: littleEndian)
    }

    /// A 16-bit integer in the byte order of this machine.
    static func nativeUInt16(_ bytes: [UInt8], at offset: Int) -> UInt16 {
        UInt16(littleEndian: UInt16(bytes[offset]) | UInt16(bytes[offset + 1]) << 8)
    }

    /// Whether this machine stores integers most significant byte first.
    static let hostIsBigEndian = 1.bigEndian == 1
}

/// The checksum SQLite uses for the WAL header, WAL frames and the wal-index header.
///
/// The input is read as pairs of 32-bit words, big-endian when `bigEndianWords` is set (the WAL
/// magic 0x377f0683, or a big-endian host for the wal-index), little-endian otherwise:
/// `s0 += x[i] + s1; s1 += x[i+1] + s0`, both modulo 2^32, continuing from a seed.
struct WALChecksum: Equatable, Sendable {
    var first: UInt32
    var second: UInt32

    static let zero = WALChecksum(first: 0, second: 0)

    /// Continues the checksum over `count` bytes of `bytes` from `offset`; `count` is a multiple of 8.
    func continued(
        over bytes: [UInt8], from offset: Int, count: Int, bigEndianWords: Bool
    ) -> WALChecksum {
        var s0 = first
        var s1 = second
        bytes.withUnsafeBytes { raw in
            var position = offset
            let end = offset + count
            while position + 8 <= end {
                var word0 = raw.loadUnaligned(fromByteOffset: position, as: UInt32.self)
                var word1 = raw.loadUnaligned(fromByteOffset: position + 4, as: UInt32.self)
                word0 = bigEndianWords ? UInt32(bigEndian: word0) : UInt32(littleEndian: word0)
                word1 = bigEndianWords ? UInt32(bigEndian: word1) : UInt32(littleEndian: word1)
                s0 = s0 &+ word0 &+ s1
                s1 = s1 &+ word1 &+ s0
                position += 8
            }
        }
        return WALChecksum(first: s0, second: s1)
    }
}
