#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Reads the wal-index header, checkpoint info and read marks from a `-shm` file without locks.
///
/// Layout (native byte order): two 48-byte `WalIndexHdr` copies at 0 and 48, then
/// `WalCkptInfo` at 96: `nBackfill` (96), `aReadMark[5]` (100..<120), the lock bytes
/// (120..<128) and `nBackfillAttempted` (128).
enum WALIndexReader {
    static let headerCopySize = 48
    /// The bytes read: both header copies and `WalCkptInfo` up to `nBackfillAttempted`.
    static let requiredSize = 136

    /// The wal-index of `path`; `nil` when the `-shm` does not exist or is shorter than the
    /// wal-index header: empty, or the 3 bytes SQLite truncates it to when the first connection
    /// opens the database (before it maps the index; a file left so by an opener that died there
    /// too). SQLite rebuilds the index from the WAL then, and so does the report.
    ///
    /// Without a lock the two header copies can be caught while a writer changes them; the read
    /// is retried up to `attempts` times, and the last read is returned with `copiesAgree` false
    /// when they never agreed.
    static func read(
        path: String, access: FileAccess, attempts: Int, walHeader: WALHeader?
    ) throws(InspectionError) -> WALIndexSummary? {
        guard let file = try InspectedFile.openReadOnly(path, access: access) else { return nil }
        let size = try file.size()
        guard size >= requiredSize else { return nil }
        var bytes: [UInt8] = []
        var attempt = 0
        var copiesAgree = false
        while attempt < max(1, attempts) {
            attempt += 1
            bytes = try file.read(at: 0, count: requiredSize)
            // Truncated since its size was read: an opener reset it.
            guard bytes.count == requiredSize else { return nil }
            copiesAgree = bytes[0..<headerCopySize] == bytes[headerCopySize..<(2 * headerCopySize)]
            if copiesAgree { break }
            sched_yield()
        }
        let header = decodeHeader(bytes)
        var readMarks: [UInt32?] = []
        for slot in 0..<WALIndexSummary.readSlotCount {
            let mark = Bytes.nativeUInt32(bytes, at: 100 + 4 * slot)
            readMarks.append(mark == WALIndexSummary.unusedReadMark ? nil : mark)
        }
        var saltsMatch: Bool?
        if let walHeader, walHeader.isValid {
            saltsMatch = walHeader.salt1 == header.salt1 && walHeader.salt2 == header.salt2
        }
        return WALIndexSummary(
            path: path, sizeBytes: size, header: header, copiesAgree: copiesAgree, readAttempts: attempt,
            backfilledFrames: Bytes.nativeUInt32(bytes, at: 96),
            backfillAttemptedFrames: Bytes.nativeUInt32(bytes, at: 128), readMarks: readMarks,
            saltsMatchWAL: saltsMatch)
    }

    private static func decodeHeader(_ bytes: [UInt8]) -> WALIndexHeader {
        let rawPageSize = Int(Bytes.nativeUInt16(bytes, at: 14))
        // SQLite stores 65536 as 1 in this 16-bit field: (size & 0xff00) | (size >> 16).
        let pageSize = (rawPageSize & 0xfe00) + ((rawPageSize & 0x0001) << 16)
        // The header checksum covers the first 40 bytes read as native words.
        let computed = WALChecksum.zero.continued(
            over: bytes, from: 0, count: 40, bigEndianWords: Bytes.hostIsBigEndian)
        let stored = WALChecksum(
            first: Bytes.nativeUInt32(bytes, at: 40), second: Bytes.nativeUInt32(bytes, at: 44))
        return WALIndexHeader(
            version: Bytes.nativeUInt32(bytes, at: 0), changeCounter: Bytes.nativeUInt32(bytes, at: 8),
            isInitialized: bytes[12] != 0, bigEndianChecksums: bytes[13] != 0, pageSize: pageSize,
            maxFrame: Bytes.nativeUInt32(bytes, at: 16), pageCount: Bytes.nativeUInt32(bytes, at: 20),
            frameChecksum1: Bytes.nativeUInt32(bytes, at: 24),
            frameChecksum2: Bytes.nativeUInt32(bytes, at: 28),
            // The salts are a byte-for-byte copy of the `-wal` header's, which is big-endian.
            salt1: Bytes.bigEndianUInt32(bytes, at: 32), salt2: Bytes.bigEndianUInt32(bytes, at: 36),
            checksum1: stored.first, checksum2: stored.second, isChecksumValid: stored == computed)
    }
}
