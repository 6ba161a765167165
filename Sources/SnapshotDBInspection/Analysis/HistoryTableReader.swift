/// Reads SnapshotDB's durable history (`snapshotdb_history`) and its consumers
/// (`snapshotdb_consumers`) from raw pages, as of one snapshot, without SQLite.
enum HistoryTableReader {
    /// The root pages of the tables named `names`, from the schema on page 1.
    static func rootPages(_ names: [String], reader: BTreeReader) throws(PageReadFailure) -> [String: UInt32]
    {
        let table = reader.encoded("table")
        let encoded = Dictionary(uniqueKeysWithValues: names.map { (reader.encoded($0), $0) })
        var roots: [String: UInt32] = [:]
        try reader.scanTable(rootPage: 1) { (row: [RecordValue]) throws(PageReadFailure) -> Bool in
            guard row.count >= 4, row[0] == .text(table), case .text(let name) = row[1],
                let found = encoded[name], case .integer(let page) = row[3]
            else { return false }
            guard page > 0, page <= Int64(UInt32.max) else {
                throw PageReadFailure(reason: "\(found) has root page \(page)")
            }
            roots[found] = UInt32(page)
            return false
        }
        return roots
    }

    static func history(
        pages: PageSource, asOfFrame bound: UInt32, after: UInt64?, limit: Int?, last: Int? = nil
    ) throws(PageReadFailure) -> HistoryListing {
        let firstPage = try pages.page(1, asOfFrame: bound)
        let header: DatabaseHeader
        do { header = try DatabaseHeader(bytes: firstPage, path: "page 1") } catch {
            throw PageReadFailure(reason: "page 1 as of frame \(bound): \(error.message)")
        }
        let reader = BTreeReader(
            pages: pages, bound: bound, usableSize: header.usablePageSize, textEncoding: header.textEncoding)
        let roots = try rootPages(["snapshotdb_history", "snapshotdb_consumers"], reader: reader)
        guard let historyRoot = roots["snapshotdb_history"] else {
            throw PageReadFailure(
                reason:
                    "no snapshotdb_history table: schema version \(header.userVersion) has no durable history"
            )
        }
        var listing = HistoryListing()
        try reader.scanTable(rootPage: historyRoot) {
            (rowid: Int64, row: [RecordValue]) throws(PageReadFailure) -> Bool in
            // snapshotdb_history(number, kind, date, process, connection, token, info, changes)
            // A row a foreign client numbered below zero is no commit (the library ignores it,
            // and its purge removes it).
            guard rowid >= 0 else { return false }
            let number = UInt64(bitPattern: rowid)
            let info = row.count > 6 ? text(row[6]) : nil
            let changes: [UInt8]? = row.count > 7 ? (row[7] == .null ? nil : bytes(row[7])) : nil
            listing.rowCount += 1
            listing.bytes += (info?.utf8.count ?? 0) + (changes?.count ?? 0) + 48
            if listing.oldestCommit == nil { listing.oldestCommit = number }
            listing.newestCommit = number
            if let after, number <= after { return false }
            if let limit, listing.rows.count >= limit { return false }
            // The row that starts the history (kind 2) holds no commit's changes.
            if row.count > 1, row[1] == .integer(2) { return false }
            listing.rows.append(
                HistoryRow(
                    commit: number, kind: row.count > 1 ? integer(row[1]) ?? -1 : -1,
                    date: row.count > 2 ? real(row[2]) : 0, processID: row.count > 3 ? integer(row[3]) : nil,
                    connection: row.count > 4 ? text(row[4]) : nil, info: info, changes: changes))
            // The newest `last` rows: the scan runs oldest first, so older rows are dropped in
            // halves as it goes (at most twice `last` rows held).
            if let last, listing.rows.count - last >= max(last, 1) {
                listing.rows.removeFirst(listing.rows.count - last)
            }
            return false
        }
        if let last, listing.rows.count > last { listing.rows.removeFirst(listing.rows.count - last) }
        if let consumersRoot = roots["snapshotdb_consumers"] {
            try reader.scanTable(rootPage: consumersRoot) {
                (row: [RecordValue]) throws(PageReadFailure) -> Bool in
                // snapshotdb_consumers(name, position, expired, updated)
                guard row.count >= 4, let name = text(row[0]), let position = integer(row[1]) else {
                    return false
                }
                listing.consumers.append(
                    HistoryConsumer(
                        name: name, position: UInt64(bitPattern: position), isExpired: integer(row[2]) != 0,
                        updated: real(row[3])))
                return false
            }
        }
        return listing
    }

    private static func text(_ value: RecordValue) -> String? {
        switch value {
        case .text(let bytes), .blob(let bytes): return String(decoding: bytes, as: UTF8.self)
        default: return nil
        }
    }

    private static func bytes(_ value: RecordValue) -> [UInt8]? {
        switch value {
        case .text(let bytes), .blob(let bytes): return bytes
        default: return nil
        }
    }

    private static func integer(_ value: RecordValue) -> Int64? {
        if case .integer(let number) = value { return number }
        return nil
    }

    private static func real(_ value: RecordValue) -> Double {
        switch value {
        case .real(let number): return number
        case .integer(let number): return Double(number)
        default: return 0
        }
    }
}

/// The durable history of a SnapshotDB file as one snapshot holds it (``SnapshotDBInspector/history(databaseAt:after:limit:options:)``).
public struct HistoryListing: Sendable {
    /// The rows asked for (after `after`, at most `limit`), oldest first.
    public var rows: [HistoryRow] = []
    /// How many rows the history holds.
    public var rowCount = 0
    /// About how many bytes they take (their `info` and `changes` plus 48 bytes a row).
    public var bytes = 0
    /// The oldest row: changesets are known for the commits after it.
    public var oldestCommit: UInt64?
    /// The newest row: the commit counter.
    public var newestCommit: UInt64?
    /// The named consumers and their positions.
    public var consumers: [HistoryConsumer] = []
}

/// One row of `snapshotdb_history`, undecoded: SnapshotDB decodes `changes`.
public struct HistoryRow: Sendable {
    /// The commit number.
    public var commit: UInt64
    /// The row's kind: 0 a commit, 1 a foreign client's writes, 2 the start of the history,
    /// 3 writes whose keys are unknown.
    public var kind: Int64
    /// When the commit was made, in seconds since 1970.
    public var date: Double
    /// The committing process's id, for kind 0.
    public var processID: Int64?
    /// The committing connection's name, for kind 0.
    public var connection: String?
    /// The transaction's `info` as JSON text.
    public var info: String?
    /// The encoded keys and extension records.
    public var changes: [UInt8]?
}

/// A named consumer's durable position.
public struct HistoryConsumer: Sendable, Codable, Equatable {
    /// The consumer's name.
    public var name: String
    /// The commit it acknowledged last.
    public var position: UInt64
    /// Whether it fell behind the retention bound and was expired.
    public var isExpired: Bool
    /// When its position last moved, in seconds since 1970.
    public var updated: Double
}
