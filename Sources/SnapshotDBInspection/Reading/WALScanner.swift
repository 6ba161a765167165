/// The result of reading a `-wal` file once: the summary plus what page lookups need.
struct WALScan {
    /// The WAL magic numbers: checksums over little-endian and over big-endian words.
    static let magicLittleEndian: UInt32 = 0x377f_0682
    static let magicBigEndian: UInt32 = 0x377f_0683
    static let headerSize = 32
    static let frameHeaderSize = 24

    var summary: WALSummary
    /// The file, kept open while the report reads pages from it (the `-wal` carries no locks).
    var file: ReadableFile?
    /// Page number of each frame of the valid prefix; frame `i` (1-based) is at `i - 1`.
    var validFramePages: [UInt32] = []
    /// Frame indices per page for the valid prefix, ascending.
    var framesByPage: [UInt32: [UInt32]] = [:]
    /// Every commit frame number of the valid prefix, ascending.
    var commitFrameNumbers: [UInt32] = []
    /// Every frame of the file, when the caller asked for them, except stale frames whose
    /// header is all zeros (preallocated space, holes of a sparse file): those are in
    /// ``zeroFilledFrameRanges``.
    var frames: [WALFrame]?
    /// The 1-based frame numbers of the zero-filled stale frames, as ascending ranges.
    var zeroFilledFrameRanges: [ClosedRange<UInt32>] = []

    /// The page size of the frames; 0 when the header is missing or invalid.
    var pageSize: Int { summary.header.map { $0.isValid ? $0.pageSize : 0 } ?? 0 }

    /// Reads and validates the `-wal` at `path`; `nil` when the file does not exist.
    ///
    /// Frames are valid while their salts equal the header's, their page number is not zero and
    /// the cumulative checksum (seeded by the header checksum, over each frame header's first
    /// 8 bytes and its page) matches; the first frame that fails ends the valid prefix, exactly
    /// as SQLite's recovery decides.
    ///
    /// - Throws: ``InspectionError`` `truncatedWriteAheadLog` (1 to 31 bytes),
    ///   `notAWriteAheadLog` (wrong magic) or `unsupportedFormat` (unknown version).
    static func scan(path: String, includeFrames: Bool) throws(InspectionError) -> WALScan? {
        guard let file = try InspectedFile.openReadOnly(path, access: .transient) else { return nil }
        let size = try file.size()
        var summary = WALSummary(
            path: path, sizeBytes: size, header: nil, frameSizeBytes: 0, frameSlots: 0, validFrames: 0,
            commitFrames: 0, lastCommitFrame: 0, uncommittedFrames: 0, staleFrames: 0,
            staleFramesWithOtherSalts: 0, zeroFilledFrames: 0, trailingPartialBytes: 0)
        guard size > 0 else {
            return WALScan(summary: summary, file: file, frames: includeFrames ? [] : nil)
        }
        let headerBytes = try file.read(at: 0, count: headerSize)
        guard headerBytes.count == headerSize else {
            throw InspectionError(
                code: .truncatedWriteAheadLog, path: path,
                message:
                    "truncated write-ahead log: \(headerBytes.count) bytes, shorter than its 32-byte header")
        }
        let header = try decodeHeader(headerBytes, path: path)
        summary.header = header
        guard header.isValid else {
            // SQLite ignores such a WAL entirely; every complete frame is stale.
            if header.pageSize > 0 {
                summary.frameSizeBytes = frameHeaderSize + header.pageSize
                let body = size - Int64(headerSize)
                summary.frameSlots = Int(body / Int64(summary.frameSizeBytes))
                summary.staleFrames = summary.frameSlots
                summary.trailingPartialBytes = Int(body % Int64(summary.frameSizeBytes))
            }
            return WALScan(summary: summary, file: file, frames: includeFrames ? [] : nil)
        }
        var scan = WALScan(summary: summary, file: file, frames: includeFrames ? [] : nil)
        try scan.readFrames(header: header, fileSize: size)
        return scan
    }

    private static func decodeHeader(_ bytes: [UInt8], path: String) throws(InspectionError) -> WALHeader {
        let magic = Bytes.bigEndianUInt32(bytes, at: 0)
        guard magic == magicLittleEndian || magic == magicBigEndian else {
            throw InspectionError(
                code: .notAWriteAheadLog, path: path,
                message: "not a SQLite write-ahead log (magic 0x\(String(magic, radix: 16)))")
        }
        let version = Bytes.bigEndianUInt32(bytes, at: 4)
        guard version == 3_007_000 else {
            throw InspectionError(
                code: .unsupportedFormat, path: path,
                message: "unsupported write-ahead log version \(version) (expected 3007000)")
        }
        let pageSize = Int(Bytes.bigEndianUInt32(bytes, at: 8))
        let pageSizeIsValid = pageSize >= 512 && pageSize <= 65536 && pageSize & (pageSize - 1) == 0
        let stored = WALChecksum(
            first: Bytes.bigEndianUInt32(bytes, at: 24), second: Bytes.bigEndianUInt32(bytes, at: 28))
        let computed = WALChecksum.zero.continued(
            over: bytes, from: 0, count: 24, bigEndianWords: magic == magicBigEndian)
        return WALHeader(
            magic: magic, formatVersion: version, pageSize: pageSizeIsValid ? pageSize : 0,
            checkpointSequence: Bytes.bigEndianUInt32(bytes, at: 12),
            salt1: Bytes.bigEndianUInt32(bytes, at: 16), salt2: Bytes.bigEndianUInt32(bytes, at: 20),
            checksum1: stored.first, checksum2: stored.second,
            isValid: pageSizeIsValid && stored == computed)
    }

    private mutating func readFrames(header: WALHeader, fileSize: Int64) throws(InspectionError) {
        guard let file else { return }
        let frameSize = Self.frameHeaderSize + header.pageSize
        let body = fileSize - Int64(Self.headerSize)
        let slots = Int(body / Int64(frameSize))
        summary.frameSizeBytes = frameSize
        summary.frameSlots = slots
        summary.trailingPartialBytes = Int(body % Int64(frameSize))

        var checksum = WALChecksum(first: header.checksum1, second: header.checksum2)
        let bigEndianWords = header.bigEndianChecksums
        let framesPerChunk = max(1, (1 << 20) / frameSize)
        var chainIntact = true
        var index = 0
        while index < slots {
            let offset = Int64(Self.headerSize) + Int64(index) * Int64(frameSize)
            if chainIntact {
                // Valid prefix: read whole frames, in chunks, to verify the checksum chain.
                let count = min(framesPerChunk, slots - index)
                let chunk = try file.read(at: offset, count: count * frameSize)
                let complete = chunk.count / frameSize
                var position = 0
                for _ in 0..<complete where chainIntact {
                    let frameHeader = Self.decodeFrameHeader(chunk, at: position)
                    var next = checksum.continued(
                        over: chunk, from: position, count: 8, bigEndianWords: bigEndianWords)
                    next = next.continued(
                        over: chunk, from: position + Self.frameHeaderSize, count: header.pageSize,
                        bigEndianWords: bigEndianWords)
                    let valid =
                        frameHeader.salt1 == header.salt1 && frameHeader.salt2 == header.salt2
                        && frameHeader.pageNumber != 0 && next == frameHeader.checksum
                    if valid {
                        checksum = next
                        acceptValidFrame(frameHeader, index: index, offset: offset + Int64(position))
                    } else {
                        chainIntact = false
                        recordStaleFrame(
                            frameHeader, header: header, index: index, offset: offset + Int64(position))
                    }
                    index += 1
                    position += frameSize
                }
                if complete < count { break }  // the file shrank while it was read
            } else {
                // Past the valid prefix only the frame headers matter, and the headers that lie in
                // a hole of a sparse file are zeros without being read: the cost follows what the
                // file holds, not its size (a `truncate -s 64G` -wal is one hole).
                let dataStart = min(file.nextData(atOrAfter: offset), fileSize)
                let zeroHeaders = Self.headersBefore(dataStart, from: offset, frameSize: frameSize)
                if zeroHeaders > 0 {
                    let count = min(zeroHeaders, slots - index)
                    recordZeroFilledFrames(from: index, count: count)
                    index += count
                    continue
                }
                let bytes = try file.read(at: offset, count: Self.frameHeaderSize)
                guard bytes.count == Self.frameHeaderSize else { break }
                recordStaleFrame(
                    Self.decodeFrameHeader(bytes, at: 0), header: header, index: index, offset: offset)
                index += 1
            }
        }
        summary.uncommittedFrames = summary.validFrames - Int(summary.lastCommitFrame)
        if var list = frames {
            let lastCommit = summary.lastCommitFrame
            for position in list.indices
            where list[position].status == .uncommitted && list[position].index <= lastCommit {
                list[position].status = .committed
            }
            frames = list
        }
    }

    /// How many frames, the first at `offset`, have their whole header before `end`.
    private static func headersBefore(_ end: Int64, from offset: Int64, frameSize: Int) -> Int {
        let room = end - offset - Int64(frameHeaderSize)
        return room < 0 ? 0 : Int(room / Int64(frameSize)) + 1
    }

    private struct FrameHeader {
        var pageNumber: UInt32
        var commitPageCount: UInt32
        var salt1: UInt32
        var salt2: UInt32
        var checksum: WALChecksum
    }

    private static func decodeFrameHeader(_ bytes: [UInt8], at offset: Int) -> FrameHeader {
        FrameHeader(
            pageNumber: Bytes.bigEndianUInt32(bytes, at: offset),
            commitPageCount: Bytes.bigEndianUInt32(bytes, at: offset + 4),
            salt1: Bytes.bigEndianUInt32(bytes, at: offset + 8),
            salt2: Bytes.bigEndianUInt32(bytes, at: offset + 12),
            checksum: WALChecksum(
                first: Bytes.bigEndianUInt32(bytes, at: offset + 16),
                second: Bytes.bigEndianUInt32(bytes, at: offset + 20)))
    }

    private mutating func acceptValidFrame(_ frame: FrameHeader, index: Int, offset: Int64) {
        let frameNumber = UInt32(index + 1)
        summary.validFrames += 1
        validFramePages.append(frame.pageNumber)
        framesByPage[frame.pageNumber, default: []].append(frameNumber)
        if frame.commitPageCount != 0 {
            summary.commitFrames += 1
            summary.lastCommitFrame = frameNumber
            commitFrameNumbers.append(frameNumber)
        }
        // Marked committed once the last commit frame is known.
        frames?.append(
            WALFrame(
                index: frameNumber, offset: offset, pageNumber: frame.pageNumber,
                commitPageCount: frame.commitPageCount == 0 ? nil : frame.commitPageCount,
                salt1: frame.salt1, salt2: frame.salt2, status: .uncommitted, isCheckpointed: false))
    }

    /// Counts `count` stale frames from the 0-based `index` whose headers are all zeros; the frame
    /// list gets them as one range, not one entry each.
    private mutating func recordZeroFilledFrames(from index: Int, count: Int) {
        summary.staleFrames += count
        summary.zeroFilledFrames += count
        // SQLite numbers frames with 32 bits: slots past that (a `-wal` grown by `truncate -s`)
        // are counted, and listed only up to the last number.
        guard frames != nil, index < Int(UInt32.max) else { return }
        let first = UInt32(index + 1)
        let last = UInt32(clamping: index + count)
        if let previous = zeroFilledFrameRanges.last, previous.upperBound + 1 == first {
            zeroFilledFrameRanges[zeroFilledFrameRanges.count - 1] = previous.lowerBound...last
        } else {
            zeroFilledFrameRanges.append(first...last)
        }
    }

    private mutating func recordStaleFrame(_ frame: FrameHeader, header: WALHeader, index: Int, offset: Int64)
    {
        if frame.pageNumber == 0 && frame.salt1 == 0 && frame.salt2 == 0 && frame.commitPageCount == 0
            && frame.checksum == WALChecksum.zero
        {
            recordZeroFilledFrames(from: index, count: 1)
            return
        }
        summary.staleFrames += 1
        if frame.pageNumber == 0 && frame.salt1 == 0 && frame.salt2 == 0 {
            summary.zeroFilledFrames += 1
        } else if frame.salt1 != header.salt1 || frame.salt2 != header.salt2 {
            summary.staleFramesWithOtherSalts += 1
        }
        guard index < Int(UInt32.max) else { return }
        frames?.append(
            WALFrame(
                index: UInt32(index + 1), offset: offset, pageNumber: frame.pageNumber,
                commitPageCount: frame.commitPageCount == 0 ? nil : frame.commitPageCount,
                salt1: frame.salt1, salt2: frame.salt2, status: .stale, isCheckpointed: false))
    }

    /// The newest frame at or before `bound` that holds `page`, if any.
    func latestFrame(holding page: UInt32, atOrBefore bound: UInt32) -> UInt32? {
        guard let candidates = framesByPage[page], bound > 0 else { return nil }
        // Binary search for the last candidate <= bound.
        var low = 0
        var high = candidates.count
        while low < high {
            let middle = (low + high) / 2
            if candidates[middle] <= bound { low = middle + 1 } else { high = middle }
        }
        return low == 0 ? nil : candidates[low - 1]
    }

    /// Commit frames of the valid prefix in `(after, upTo]`.
    func commitFrameCount(after: UInt32, upTo: UInt32) -> Int {
        guard upTo > after else { return 0 }
        return countOfCommitFrames(atOrBefore: upTo) - countOfCommitFrames(atOrBefore: after)
    }

    private func countOfCommitFrames(atOrBefore bound: UInt32) -> Int {
        var low = 0
        var high = commitFrameNumbers.count
        while low < high {
            let middle = (low + high) / 2
            if commitFrameNumbers[middle] <= bound { low = middle + 1 } else { high = middle }
        }
        return low
    }

    /// The last commit frame of the valid prefix at or before `bound`; 0 when there is none.
    func lastCommitFrame(atOrBefore bound: UInt32) -> UInt32 {
        let count = countOfCommitFrames(atOrBefore: bound)
        return count == 0 ? 0 : commitFrameNumbers[count - 1]
    }

    /// The page bytes of frame `frame` (1-based, in the valid prefix).
    func page(ofFrame frame: UInt32) throws(InspectionError) -> [UInt8] {
        guard let file else { return [] }
        let frameSize = Int64(summary.frameSizeBytes)
        let offset = Int64(Self.headerSize) + Int64(frame - 1) * frameSize + Int64(Self.frameHeaderSize)
        return try file.read(at: offset, count: pageSize)
    }
}
