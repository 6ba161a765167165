internal import Foundation
internal import SnapshotDBLocking

internal import struct Synchronization.Atomic

#if canImport(Glibc)
    internal import Glibc
#elseif canImport(Darwin)
    internal import Darwin
#endif

/// The durable history: one row of `snapshotdb_history` per commit, written by the commit's
/// own SQLite transaction and read in a transaction's snapshot (see ``Schema`` for the table
/// and ``HistoryCoding`` for the `changes` column).
///
/// Why a row per commit and not a log file beside the database: the row is part of the commit
/// (power loss or `SIGKILL` never leaves a commit without its changeset, or the other way), a
/// reader reads it in the same snapshot as the values it describes, and it travels with every
/// copy of the file (a backup, a Litestream replica). Why the newest row is the counter: the
/// row replaces the counter row that every commit rewrote before, so the history adds no WAL
/// page to a commit.
enum History {
    /// This process's id, recorded with each of its commits.
    static let processID = Int32(getpid())

    /// The state of the token sequence: a random start, then a step per token.
    private static let tokenState = Atomic<UInt64>(UInt64.random(in: .min ... .max))

    /// A token for a new history row: unique in practice, and unpredictable enough to tell one
    /// history from another (SplitMix64 over a per-process random sequence). Drawn without a
    /// system call: `Int64.random` asks the kernel (`getrandom`) every time, a syscall per commit.
    static func nextToken() -> UInt64 {
        var z = tokenState.wrappingAdd(0x9E37_79B9_7F4A_7C15, ordering: .relaxed).newValue
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// One row to write.
    struct Row {
        var number: UInt64
        var kind: HistoryKind
        var date: Date
        var connection: String?
        var info: [String: String]
        var changes: [UInt8]?

        init(
            number: UInt64, kind: HistoryKind, date: Date, connection: String? = nil, info: [String: String],
            changes: [UInt8]? = nil
        ) {
            self.number = number
            self.kind = kind
            self.date = date
            self.connection = connection
            self.info = info
            self.changes = changes
        }
    }

    /// Writes `row` in the open write transaction on `handle`, with a fresh random token, which
    /// it returns.
    @discardableResult
    static func write(_ row: Row, on handle: SQLiteHandle) throws(DatabaseError) -> UInt64 {
        let token = nextToken()
        let insert = try handle.statement(.writeHistory)
        try insert.bind(Int64(bitPattern: row.number), at: 1)
        try insert.bind(row.kind.rawValue, at: 2)
        try insert.bind(row.date.timeIntervalSince1970, at: 3)
        if row.kind == .commit {
            try insert.bind(Int64(processID), at: 4)
        } else {
            try insert.bindNull(at: 4)
        }
        if let connection = row.connection {
            try insert.bind(connection, at: 5)
        } else {
            try insert.bindNull(at: 5)
        }
        try insert.bind(Int64(bitPattern: token), at: 6)
        if let info = HistoryCoding.encodeInfo(row.info) {
            try insert.bind(info, at: 7)
        } else {
            try insert.bindNull(at: 7)
        }
        if let changes = row.changes {
            try insert.bind(bytes: changes, at: 8)
        } else {
            try insert.bindNull(at: 8)
        }
        do {
            try insert.execute()
        } catch {
            throw damaged(error, writing: row.number, path: handle.path)
        }
        return token
    }

    /// What a failed insert of commit `number`'s row means: a constraint on the history's own
    /// rows (a number already taken, as a damaged page makes it look) is damage, `corrupt`
    /// naming the table; anything else is as SQLite reported it.
    static func damaged(_ error: DatabaseError, writing number: UInt64, path: String) -> DatabaseError {
        guard error.isConstraintViolation else { return error }
        return DatabaseError(
            .corrupt,
            "\(path) is a damaged SnapshotDB database: writing the row of commit \(number) into "
                + "snapshotdb_history failed (\(error.message)), which only damage to that table explains",
            sqliteCode: error.sqliteCode, cause: error)
    }

    /// The changesets of the commits in `(after, through]` that the history of the open
    /// transaction on `handle` holds, in order. Numbers without a row (purged, or skipped when
    /// older contents were put back from outside) are left out; the caller decides what they
    /// mean.
    ///
    /// - Throws: `corrupt` naming the commit when a row is damaged (written by a foreign client),
    ///   or what SQLite reports.
    static func changesets(
        after: UInt64, through: UInt64, limit: Int = .max, on handle: SQLiteHandle, path: String
    ) throws(DatabaseError) -> [Changeset] {
        try entries(after: after, through: through, limit: limit, on: handle, path: path).compactMap(
            \.changeset)
    }

    /// One history row read back: its number, token and changeset (`nil` for a start row).
    struct Entry {
        let number: UInt64
        let token: UInt64
        let changeset: Changeset?
    }

    /// The rows of the commits in `(after, through]`, at most `limit` of them (the limit is
    /// SQL's: a reader that asks for a few reads a few).
    ///
    /// A damaged row throws `corrupt` naming its commit (a newer release's row,
    /// `unsupportedFormat`), unless `damagedRow` is given: it is then told of the row, which is
    /// returned without a changeset (its commit alone becomes external), and the other rows are
    /// read on.
    static func entries(
        after: UInt64, through: UInt64, limit: Int = .max, on handle: SQLiteHandle, path: String,
        damagedRow: ((_ commit: UInt64, _ error: DatabaseError) -> Void)? = nil
    ) throws(DatabaseError) -> [Entry] {
        guard through > after, limit > 0 else { return [] }
        let rows = try handle.idleStatement(.readHistory)
        defer { rows.reset() }
        try rows.bind(Int64(bitPattern: after), at: 1)
        try rows.bind(Int64(bitPattern: through), at: 2)
        try rows.bind(Int64(min(limit, Int(Int64.max))), at: 3)
        var entries: [Entry] = []
        while try rows.step() {
            let number = UInt64(bitPattern: rows.int64(at: 0))
            let changeset: Changeset?
            do throws(DatabaseError) {
                changeset = try Self.changeset(of: rows, path: path)
            } catch {
                guard let damagedRow, error.code == .corrupt || error.code == .unsupportedFormat else {
                    throw error
                }
                damagedRow(number, error)
                changeset = nil
            }
            entries.append(
                Entry(number: number, token: UInt64(bitPattern: rows.int64(at: 7)), changeset: changeset))
        }
        return entries
    }

    /// The changeset of the current row of a ``SQL/readHistory`` statement; `nil` for a start row.
    private static func changeset(of row: SQLiteStatement, path: String) throws(DatabaseError) -> Changeset? {
        let kind: Int64? = row.storageClass(at: 1) == .integer ? row.int64(at: 1) : nil
        let changes: Result<HistoryCoding.Decoded, HistoryReader.Failure>? =
            row.storageClass(at: 6) == .blob
            ? row.withBlob(at: 6) { bytes in
                Result { () throws(HistoryReader.Failure) in try HistoryCoding.decode(bytes) }
            } : nil
        return try changeset(
            number: UInt64(bitPattern: row.int64(at: 0)), kind: kind, date: row.double(at: 2),
            process: row.isNull(at: 3) ? nil : row.int64(at: 3),
            connection: row.isNull(at: 4) ? nil : row.string(at: 4),
            info: row.isNull(at: 5) ? nil : row.string(at: 5), changes: changes, path: path)
    }

    /// The changeset of one history row from its columns (`changes` decoded already, `nil`
    /// when the column is not a blob); `nil` for a start row.
    ///
    /// - Throws: `corrupt` naming the commit when the row is damaged; `unsupportedFormat` when
    ///   its changes are a newer release's encoding.
    static func changeset(
        number: UInt64, kind rawKind: Int64?, date: Double, process: Int64?, connection: String?,
        info: String?,
        changes: Result<HistoryCoding.Decoded, HistoryReader.Failure>?, path: String
    ) throws(DatabaseError) -> Changeset? {
        func damaged(_ reason: String) -> DatabaseError {
            DatabaseError(
                .corrupt,
                "\(path): the history row of commit \(number) is damaged (\(reason)); it was not written "
                    + "by SnapshotDB")
        }
        guard let rawKind, let kind = HistoryKind(rawValue: rawKind) else { throw damaged("unknown kind") }
        if kind == .start { return nil }
        let date = Date(timeIntervalSince1970: date)
        if kind == .unknown { return .external(number...number, date: date) }
        var decodedInfo: [String: String] = [:]
        if let info {
            do { decodedInfo = try HistoryCoding.decodeInfo(info) } catch { throw damaged(error.reason) }
        }
        let decoded: HistoryCoding.Decoded
        switch changes {
        case .success(let value): decoded = value
        case .failure(let error) where error.isNewerFormat:
            throw DatabaseError(
                .unsupportedFormat,
                "\(path): the history row of commit \(number) was written by a newer SnapshotDB (its changes "
                    + "use \(error.reason), which this release does not know); open the file with that release"
            )
        case .failure(let error): throw damaged(error.reason)
        case nil: throw damaged("no changes")
        }
        return Changeset(
            commits: number...number, keys: ChangedKeys(log: decoded.operations),
            clearedAllCollections: decoded.clearedAll, connectionName: connection,
            processID: process.map { Int32(truncatingIfNeeded: $0) }, date: date, info: decodedInfo,
            isExternal: false, extensionChanges: decoded.extensions)
    }

    /// The oldest commit the history of the open transaction reaches back to: changesets are
    /// known for every commit after it.
    static func floor(on handle: SQLiteHandle) throws(DatabaseError) -> UInt64 {
        let statement = try handle.statement(.historyFloor)
        defer { statement.reset() }
        guard try statement.step(), !statement.isNull(at: 0) else {
            throw Schema.damagedMetadata(path: handle.path)
        }
        return UInt64(bitPattern: statement.int64(at: 0))
    }

    /// The identity of the file as the transaction open on `handle` sees it (another file's,
    /// after that file was restored over the open one), or `nil` when its row is gone.
    static func identity(on handle: SQLiteHandle) throws(DatabaseError) -> UInt64? {
        let statement = try handle.cachedStatement(
            "SELECT value FROM snapshotdb_meta WHERE name = 'identity'")
        defer { statement.reset() }
        return try statement.step() ? UInt64(bitPattern: statement.int64(at: 0)) : nil
    }

    /// The random token of commit `commit` in the open transaction's history, `nil` when it has
    /// no row.
    static func token(of commit: UInt64, on handle: SQLiteHandle) throws(DatabaseError) -> UInt64? {
        let statement = try handle.statement(.historyToken)
        defer { statement.reset() }
        try statement.bind(Int64(bitPattern: commit), at: 1)
        return try statement.step() ? UInt64(bitPattern: statement.int64(at: 0)) : nil
    }
}

extension Changeset {
    /// The changeset a history row read outside SQLite holds (for `snapshotdb history`, which
    /// reads the pages itself so that it changes no byte); `nil` for the row that starts the
    /// history.
    ///
    /// - Throws: `corrupt` naming the commit when the row is damaged.
    @_spi(Tools)
    public static func fromHistoryRow(
        commit: UInt64, kind: Int64, date: Double, processID: Int64?, connection: String?, info: String?,
        changes: [UInt8]?, path: String
    ) throws(DatabaseError) -> Changeset? {
        let decoded = changes.map { bytes in
            bytes.withUnsafeBytes { buffer in
                Result { () throws(HistoryReader.Failure) in try HistoryCoding.decode(buffer) }
            }
        }
        return try History.changeset(
            number: commit, kind: kind, date: date, process: processID, connection: connection, info: info,
            changes: decoded, path: path)
    }

    /// The names of the extensions whose records (a view's row changes) or resets the
    /// changeset carries.
    @_spi(Tools)
    public var extensionNames: [String] {
        Array(Set(extensionChanges.byName.keys).union(extensionChanges.reset)).sorted()
    }
}
