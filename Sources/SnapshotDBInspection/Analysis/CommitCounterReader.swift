/// Reads the SnapshotDB commit counter from raw pages: the largest row id of
/// `snapshotdb_history` (schema 3 and later: the newest history row is the counter), or the
/// `snapshotdb_meta` row `('commit', N)` of older schemas.
///
/// Page 1 holds the `sqlite_schema` table b-tree; its rows give the root pages of the two
/// tables. The history's largest row id is at the end of the right-most path of its b-tree;
/// `snapshotdb_meta` holds `(name, value)` records.
enum CommitCounterReader {
    static let metaTableName = "snapshotdb_meta"
    static let historyTableName = "snapshotdb_history"
    static let counterRowName = "commit"

    /// The counter as a reader whose snapshot ends at frame `bound` sees it (0: database file only).
    static func counter(pages: PageSource, asOfFrame bound: UInt32) -> Result<UInt64, PageReadFailure> {
        do throws(PageReadFailure) {
            return .success(try readCounter(pages: pages, asOfFrame: bound))
        } catch {
            return .failure(error)
        }
    }

    private static func readCounter(pages: PageSource, asOfFrame bound: UInt32) throws(PageReadFailure)
        -> UInt64
    {
        let firstPage = try pages.page(1, asOfFrame: bound)
        let header: DatabaseHeader
        do { header = try DatabaseHeader(bytes: firstPage, path: "page 1") } catch {
            throw PageReadFailure(reason: "page 1 as of frame \(bound): \(error.message)")
        }
        guard header.pageSize == pages.pageSize else {
            throw PageReadFailure(
                reason: "page 1 records page size \(header.pageSize), the file uses \(pages.pageSize)")
        }
        let reader = BTreeReader(
            pages: pages, bound: bound, usableSize: header.usablePageSize, textEncoding: header.textEncoding)

        let table = reader.encoded("table")
        let metaName = reader.encoded(metaTableName)
        let historyName = reader.encoded(historyTableName)
        var rootPage: Int64?
        var historyRootPage: Int64?
        try reader.scanTable(rootPage: 1) { (row: [RecordValue]) throws(PageReadFailure) -> Bool in
            // sqlite_schema(type, name, tbl_name, rootpage, sql)
            guard row.count >= 4, row[0] == .text(table), case .integer(let page) = row[3] else {
                return false
            }
            if row[1] == .text(metaName) { rootPage = page }
            if row[1] == .text(historyName) { historyRootPage = page }
            return false
        }
        if let historyRootPage {
            guard historyRootPage > 0, historyRootPage <= Int64(UInt32.max) else {
                throw PageReadFailure(reason: "\(historyTableName) has root page \(historyRootPage)")
            }
            guard let last = try reader.largestRowID(rootPage: UInt32(historyRootPage)), last >= 0 else {
                throw PageReadFailure(reason: "\(historyTableName) holds no row")
            }
            return UInt64(last)
        }
        guard let rootPage, rootPage > 0, rootPage <= Int64(UInt32.max) else {
            throw PageReadFailure(reason: "no \(metaTableName) table in the schema")
        }

        let counterName = reader.encoded(counterRowName)
        var counter: RecordValue?
        try reader.scanTable(rootPage: UInt32(rootPage)) {
            (row: [RecordValue]) throws(PageReadFailure) -> Bool in
            guard row.count >= 2, row[0] == .text(counterName) else { return false }
            counter = row[1]
            return true
        }
        guard let counter else {
            throw PageReadFailure(reason: "no '\(counterRowName)' row in \(metaTableName)")
        }
        guard case .integer(let value) = counter, value >= 0 else {
            throw PageReadFailure(
                reason: "the '\(counterRowName)' row of \(metaTableName) is not a non-negative integer")
        }
        return UInt64(value)
    }
}
