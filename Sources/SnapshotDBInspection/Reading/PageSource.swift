/// Why a page or record could not be read; becomes the "unavailable because" of a commit counter.
struct PageReadFailure: Error, Sendable {
    var reason: String
}

/// Database pages as of a given WAL frame, read from the `-wal` and the database file, no SQLite.
///
/// The version of page P that a reader with snapshot `bound` sees is the last frame of the valid
/// WAL prefix at or before `bound` that holds P; when there is none, the page in the database
/// file. Bound 0 means the database file alone (a slot-0 reader).
struct PageSource {
    var databaseFile: ReadableFile
    var databaseSize: Int64
    var pageSize: Int
    var wal: WALScan?

    /// The bytes of page `number` as of frame `bound`.
    func page(_ number: UInt32, asOfFrame bound: UInt32) throws(PageReadFailure) -> [UInt8] {
        guard number > 0 else { throw PageReadFailure(reason: "a b-tree points to page 0") }
        if let wal, wal.pageSize == pageSize, let frame = wal.latestFrame(holding: number, atOrBefore: bound)
        {
            let bytes: [UInt8]
            do { bytes = try wal.page(ofFrame: frame) } catch { throw PageReadFailure(reason: error.message) }
            guard bytes.count == pageSize else {
                throw PageReadFailure(reason: "WAL frame \(frame) is cut short")
            }
            return bytes
        }
        let offset = Int64(number - 1) * Int64(pageSize)
        guard offset + Int64(pageSize) <= databaseSize else {
            throw PageReadFailure(reason: "page \(number) is neither in the WAL nor in the database file")
        }
        let bytes: [UInt8]
        do { bytes = try databaseFile.read(at: offset, count: pageSize) } catch {
            throw PageReadFailure(reason: error.message)
        }
        guard bytes.count == pageSize else {
            throw PageReadFailure(reason: "page \(number) of the database file is cut short")
        }
        return bytes
    }
}
