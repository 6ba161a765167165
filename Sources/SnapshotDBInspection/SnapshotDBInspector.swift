#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Reads a SnapshotDB (or any WAL-mode SQLite) database's files and lock bytes and tells who
/// pins the WAL, without SQLite, without taking a lock and without writing a byte.
///
/// Two entry points serve two kinds of callers:
///
/// - ``probeLocks(databaseAt:)`` only calls `stat()` and reads `/proc/locks`: it never opens a
///   file of the database, so a process with live SQLite connections on it (the checkpoint
///   monitor) can call it at any time without losing a lock.
/// - ``inspect(databaseAt:options:)`` reads the database file, `-wal` and `-shm` too. With the
///   default options (``InspectionOptions/inProcess``) the database file and `-shm` are read
///   through descriptors kept open for the life of the process, which is also safe in-process;
///   the `snapshotdb` tool passes ``InspectionOptions/separateProcess``.
///
/// ```swift
/// let report = try SnapshotDBInspector.inspect(databaseAt: "app.sqlite")
/// for slot in report.pinningSlots {
///     print(slot.slot, slot.holders.map(\.displayName), slot.pin!.framesBehind)
/// }
/// ```
public enum SnapshotDBInspector {
    /// The `-wal` path SQLite uses for the database at `path`: beside the file a symbolic link
    /// leads to, as SQLite resolves it.
    public static func walPath(forDatabaseAt path: String) -> String { sqlitePath(path) + "-wal" }

    /// The `-shm` path SQLite uses for the database at `path` (beside the file a symbolic link
    /// leads to).
    public static func sharedMemoryPath(forDatabaseAt path: String) -> String { sqlitePath(path) + "-shm" }

    /// `path` with its symbolic links resolved, as SQLite resolves a database's name before it
    /// names the `-wal` and `-shm` (a link's own directory holds neither); `path` itself when it
    /// cannot be resolved (no such file yet).
    static func sqlitePath(_ path: String) -> String {
        guard let resolved = realpath(path, nil) else { return path }
        defer { free(resolved) }
        // A name that is not UTF-8 cannot be a `String`: the tool reaches such a database through
        // links of its own (``CommandLinePath``), named as it was given.
        return String(validatingCString: resolved) ?? path
    }

    /// The holders of the `-shm` lock bytes of the database at `path`, from `/proc/locks` only.
    ///
    /// Safe to call from the process that owns SQLite connections on the database: it calls
    /// `stat()` on the `-shm` and reads `/proc/locks`, and never opens (hence never closes) a
    /// file of the database, so no POSIX lock of the process is dropped. Every holder of a shared
    /// lock is listed with its process id; the calling process's own connections appear under its
    /// own pid.
    ///
    /// - Returns: `nil` when the `-shm` does not exist (no process has the database open in WAL
    ///   mode); a table with no ``WALIndexLocks/sources`` where `/proc/locks` is unavailable.
    /// - Throws: ``InspectionError`` when `stat()` fails for a reason other than absence.
    public static func probeLocks(databaseAt path: String) throws(InspectionError) -> WALIndexLocks? {
        try LockProbe.probe(
            sharedMemoryPath: sharedMemoryPath(forDatabaseAt: path), method: .procLocks,
            access: .retainedDescriptors)
    }

    /// The header of the database file at `path` (not WAL-aware), checking that it is SQLite.
    ///
    /// - Throws: ``InspectionError`` `fileNotFound`, `notADatabase`, `truncatedDatabase`,
    ///   `unsupportedFormat`, or an I/O error.
    public static func readDatabaseHeader(
        at path: String, access: FileAccess = .retainedDescriptors
    ) throws(InspectionError) -> DatabaseHeader {
        guard let file = try InspectedFile.openReadOnly(path, access: access) else {
            throw InspectionError(code: .fileNotFound, path: path, message: "no such file")
        }
        let bytes = try file.read(at: 0, count: 100)
        guard !bytes.isEmpty else {
            throw InspectionError(
                code: .truncatedDatabase, path: path, message: "empty file (0 bytes): not a SQLite database")
        }
        return try DatabaseHeader(bytes: bytes, path: path)
    }

    /// Inspects the database at `path` and its `-wal` and `-shm`.
    ///
    /// Changes no byte of any of the three files, creates none of them, never checkpoints and
    /// takes no lock. The files are read one after the other while other processes may write,
    /// so the report is a best-effort snapshot; the wal-index header is re-read until both of
    /// its copies agree (``InspectionOptions/walIndexReadAttempts``).
    ///
    /// - Throws: ``InspectionError`` for a missing, unreadable, foreign or truncated database,
    ///   a `-wal` that is not a write-ahead log, or a `-shm` shorter than the wal-index header.
    public static func inspect(
        databaseAt path: String, options: InspectionOptions = .inProcess
    ) throws(InspectionError) -> InspectionReport {
        let (pages, fileHeader) = try openPages(databaseAt: path, options: options)
        let wal = pages.wal
        let pageSize = pages.pageSize

        let (walIndex, locks, committedFrames) = try newestCommit(
            of: pages, databaseAt: path, options: options)
        let checkpointedFrames: UInt32 =
            walIndex.map {
                $0.isReliable && $0.saltsMatchWAL != false ? min($0.backfilledFrames, committedFrames) : 0
            } ?? 0

        // Page 1 as of the newest commit: the header pragmas may still live only in the WAL.
        var header = fileHeader
        let headerFrame = wal.flatMap { $0.pageSize == pageSize ? $0 : nil }?
            .latestFrame(holding: 1, atOrBefore: committedFrames)
        if let headerFrame, let wal {
            header = try DatabaseHeader(bytes: try wal.page(ofFrame: headerFrame), path: wal.summary.path)
        }
        guard let header else {
            throw InspectionError(
                code: .truncatedDatabase, path: path,
                message: "empty file (0 bytes) and no committed page 1 in the WAL")
        }

        var snapshotDB = SnapshotDBSummary(
            isSnapshotDB: header.isSnapshotDB, schemaVersion: header.userVersion, commitCounter: nil,
            commitCounterUnavailableReason: nil)
        if header.isSnapshotDB {
            switch CommitCounterReader.counter(pages: pages, asOfFrame: committedFrames) {
            case .success(let counter): snapshotDB.commitCounter = counter
            case .failure(let failure): snapshotDB.commitCounterUnavailableReason = failure.reason
            }
            if header.userVersion >= 3,
                let listing = try? HistoryTableReader.history(
                    pages: pages, asOfFrame: committedFrames, after: nil, limit: 0),
                let oldest = listing.oldestCommit, let newest = listing.newestCommit
            {
                snapshotDB.history = HistorySummary(
                    rows: listing.rowCount, bytes: listing.bytes, oldestCommit: oldest,
                    consumers: listing.consumers.map {
                        ConsumerLag(
                            name: $0.name, position: $0.position,
                            commitsBehind: newest > $0.position ? newest - $0.position : 0,
                            isExpired: $0.isExpired)
                    })
            }
        } else {
            snapshotDB.commitCounterUnavailableReason =
                "not a SnapshotDB file (application_id 0x\(String(header.applicationID, radix: 16)))"
        }

        let context = SlotAnalysis(
            wal: wal, pages: pages, committedFrames: committedFrames, checkpointedFrames: checkpointedFrames,
            isSnapshotDB: header.isSnapshotDB, newestCommit: snapshotDB.commitCounter)
        let readSlots: [ReadSlot] =
            walIndex.map { walIndex in
                (0..<WALIndexSummary.readSlotCount).map { slot in
                    context.readSlot(
                        slot, readMark: walIndex.readMarks[slot],
                        holders: locks?.holders(of: WALIndexLock.read(slot: slot)!) ?? [])
                }
            } ?? []
        let walReset = WALResetAnalysis.assess(
            walSize: wal?.summary.sizeBytes ?? 0, walIndex: walIndex, locks: locks, readSlots: readSlots,
            framesToCheckpoint: committedFrames - checkpointedFrames)

        var frames = wal?.frames
        if var list = frames {
            for position in list.indices where list[position].status != .stale {
                list[position].status = list[position].index <= committedFrames ? .committed : .uncommitted
                list[position].isCheckpointed = list[position].index <= checkpointedFrames
            }
            frames = list
        }

        return InspectionReport(
            formatVersion: InspectionReport.currentFormatVersion,
            database: DatabaseFileSummary(
                path: path, sizeBytes: pages.databaseSize, header: header, headerWALFrame: headerFrame),
            snapshotDB: snapshotDB, wal: wal?.summary, walIndex: walIndex, locks: locks, readSlots: readSlots,
            walReset: walReset, frames: frames,
            zeroFilledFrameRanges: frames.map { _ in
                (wal?.zeroFilledFrameRanges ?? []).map {
                    WALFrameRange(first: $0.lowerBound, last: $0.upperBound)
                }
            },
            committedFrames: committedFrames,
            checkpointedFrames: checkpointedFrames)
    }

    /// The SnapshotDB commit counter as a reader whose snapshot ends at WAL frame `frame` sees
    /// it, read from the pages without SQLite; `nil` means the newest committed snapshot.
    ///
    /// Frame 0 means the database file alone, which is what a slot-0 reader sees. A frame is a
    /// read mark: pass ``ReadSlot/readMark`` of a held slot to learn which commit it is stuck at.
    /// The pages of an older frame are only reliable while some reader holds that mark (else a
    /// checkpoint may have overwritten the database file since).
    ///
    /// - Throws: ``InspectionError`` as ``inspect(databaseAt:options:)`` does, and
    ///   `commitCounterUnavailable` when the file is not a SnapshotDB database, the frame is past
    ///   the valid WAL frames, or the pages do not hold the counter.
    public static func commitCounter(
        databaseAt path: String, asOfFrame frame: UInt32? = nil, options: InspectionOptions = .inProcess
    ) throws(InspectionError) -> UInt64 {
        guard let frame else {
            let report = try inspect(databaseAt: path, options: options)
            guard let counter = report.snapshotDB.commitCounter else {
                throw InspectionError(
                    code: .commitCounterUnavailable, path: path,
                    message: report.snapshotDB.commitCounterUnavailableReason ?? "no commit counter")
            }
            return counter
        }
        let (pages, _) = try openPages(databaseAt: path, options: options)
        let validFrames = UInt32(clamping: pages.wal?.summary.validFrames ?? 0)
        guard frame <= validFrames else {
            throw InspectionError(
                code: .commitCounterUnavailable, path: path,
                message: "frame \(frame) is past the \(validFrames) valid frames of the WAL")
        }
        switch CommitCounterReader.counter(pages: pages, asOfFrame: frame) {
        case .success(let counter):
            return counter
        case .failure(let failure):
            throw InspectionError(code: .commitCounterUnavailable, path: path, message: failure.reason)
        }
    }

    /// The durable history of the SnapshotDB database at `path` as its newest committed snapshot
    /// holds it: the rows after `after` (the oldest `limit` of them, or the newest `last`; give
    /// at most one of the two), the history's size and the named
    /// consumers, read from the pages without SQLite. Changes no byte, as
    /// ``inspect(databaseAt:options:)``.
    ///
    /// - Throws: ``InspectionError`` as ``inspect(databaseAt:options:)`` does, and
    ///   `commitCounterUnavailable` when the file has no durable history (not a SnapshotDB file,
    ///   or an older schema) or its pages cannot be read; `invalidArgument` for a negative
    ///   `limit` or `last`, or both given.
    public static func history(
        databaseAt path: String, after: UInt64? = nil, limit: Int? = nil, last: Int? = nil,
        options: InspectionOptions = .inProcess
    ) throws(InspectionError) -> HistoryListing {
        for (name, count) in [("limit", limit), ("last", last)] {
            if let count, count < 0 {
                throw InspectionError(
                    code: .invalidArgument, path: path, message: "\(name) \(count) is negative")
            }
        }
        if limit != nil, last != nil {
            throw InspectionError(
                code: .invalidArgument, path: path,
                message: "limit (the oldest rows) and last (the newest) cannot be given together")
        }
        let (pages, _) = try openPages(databaseAt: path, options: options)
        let bound = try newestCommit(of: pages, databaseAt: path, options: options).committedFrames
        do throws(PageReadFailure) {
            return try HistoryTableReader.history(
                pages: pages, asOfFrame: bound, after: after, limit: limit, last: last)
        } catch {
            throw InspectionError(code: .commitCounterUnavailable, path: path, message: error.reason)
        }
    }

    /// Opens the database file and scans the `-wal`: the pages of every snapshot, and the
    /// database file's own header (`nil` for a 0-byte file whose page 1 is only in the WAL).
    private static func openPages(
        databaseAt path: String, options: InspectionOptions
    ) throws(InspectionError) -> (PageSource, DatabaseHeader?) {
        guard try InspectedFile.status(of: path) != nil,
            let databaseFile = try InspectedFile.openReadOnly(path, access: options.fileAccess)
        else {
            throw InspectionError(code: .fileNotFound, path: path, message: "no such file")
        }
        let databaseSize = try databaseFile.size()
        let headerBytes = try databaseFile.read(at: 0, count: 100)
        let fileHeader: DatabaseHeader? =
            headerBytes.isEmpty ? nil : try DatabaseHeader(bytes: headerBytes, path: path)

        let wal = try WALScan.scan(path: walPath(forDatabaseAt: path), includeFrames: options.includesFrames)
        let pageSize: Int
        if let fileHeader {
            pageSize = fileHeader.pageSize
            // A file cut inside a page the header counts is truncated; bytes past the pages the
            // header counts (a partial page appended) are ignored, as SQLite ignores them.
            let wholePages = databaseSize / Int64(pageSize)
            guard databaseSize % Int64(pageSize) == 0 || Int64(fileHeader.pageCount) <= wholePages else {
                throw InspectionError(
                    code: .truncatedDatabase, path: path,
                    message: "truncated database: \(databaseSize) bytes is not a whole number of "
                        + "\(pageSize)-byte pages, and the header counts \(fileHeader.pageCount)")
            }
        } else if let wal, wal.pageSize > 0, wal.latestFrame(holding: 1, atOrBefore: UInt32.max) != nil {
            pageSize = wal.pageSize  // a new database whose page 1 is still only in the WAL
        } else {
            throw InspectionError(
                code: .truncatedDatabase, path: path, message: "empty file (0 bytes): not a SQLite database")
        }

        let pages = PageSource(
            databaseFile: databaseFile, databaseSize: databaseSize, pageSize: pageSize, wal: wal)
        return (pages, fileHeader)
    }

    /// The wal-index and lock holders of the database at `path`, and the last frame of its newest
    /// committed snapshot as SQLite's next reader would take it.
    private static func newestCommit(
        of pages: PageSource, databaseAt path: String, options: InspectionOptions
    ) throws(InspectionError) -> (walIndex: WALIndexSummary?, locks: WALIndexLocks?, committedFrames: UInt32)
    {
        let sharedMemory = sharedMemoryPath(forDatabaseAt: path)
        let walIndex = try WALIndexReader.read(
            path: sharedMemory, access: options.fileAccess, attempts: options.walIndexReadAttempts,
            walHeader: pages.wal?.summary.header)
        let locks = try LockProbe.probe(
            sharedMemoryPath: sharedMemory, method: options.lockProbe, access: options.fileAccess)
        let committedFrames = committedFrameBound(
            wal: pages.wal, walIndex: walIndex, recovering: isRecoveredByNextOpener(locks))
        return (walIndex, locks, committedFrames)
    }

    /// Whether no process has the database open (no holder of the dead-man-switch lock, where
    /// locks can be listed): SQLite's next opener then ignores the `-shm`'s commit bound and
    /// rebuilds it from the WAL's frames. A writer killed between syncing its commit frame and
    /// updating the wal-index (or a power cut: the `-shm` is never synced) leaves a `-shm` that
    /// lags commits the WAL holds.
    private static func isRecoveredByNextOpener(_ locks: WALIndexLocks?) -> Bool {
        guard let locks, !locks.sources.isEmpty else { return false }
        return locks.connectedProcesses.isEmpty
    }

    /// The last frame of the newest committed snapshot.
    ///
    /// A reliable wal-index's `mxFrame` is what a new reader would use (bounded by the valid
    /// frame chain, and 0 when its salts are not the `-wal`'s: the WAL was reset and not yet
    /// rewritten). Without one, the last commit frame of the valid chain, as recovery would find.
    private static func committedFrameBound(wal: WALScan?, walIndex: WALIndexSummary?, recovering: Bool)
        -> UInt32
    {
        guard let wal else { return 0 }
        guard !recovering, let walIndex, walIndex.isReliable else { return wal.summary.lastCommitFrame }
        guard walIndex.saltsMatchWAL == true else { return 0 }
        return wal.lastCommitFrame(atOrBefore: walIndex.header.maxFrame)
    }
}
