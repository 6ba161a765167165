/// Reads the SnapshotDB commit counter, `snapshotdb_meta` row `('commit', N)`, from raw pages.
///
/// Page 1 holds the `sqlite_schema` table b-tree; its row `('table', 'snapshotdb_meta', ...)`
/// gives the root page of `snapshotdb_meta`, whose table b-tree holds `(name, value)` records.
enum CommitCounterReader {
    static let metaTableName = "snapshotdb_meta"
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
        var rootPage: Int64?
        try reader.scanTable(rootPage: 1) { (row: [RecordValue]) throws(PageReadFailure) -> Bool in
            // sqlite_schema(type, name, tbl_name, rootpage, sql)
            guard row.count >= 4, row[0] == .text(table), row[1] == .text(metaName) else { return false }
            if case .integer(let page) = row[3] { rootPage = page }
            return true
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
