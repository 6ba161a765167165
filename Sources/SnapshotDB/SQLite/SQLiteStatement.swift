internal import CSQLite
internal import Foundation

/// One prepared statement: the only place where SnapshotDB binds, steps and reads columns.
///
/// Statements are prepared once per connection with `SQLITE_PREPARE_PERSISTENT` and reused;
/// every use ends with ``reset()`` so that a statement never keeps a read transaction alive.
/// Not thread-safe: a statement belongs to one ``SQLiteHandle``, which its connection serializes.
final class SQLiteStatement {
    private let statement: OpaquePointer
    private unowned let handle: SQLiteHandle

    init(handle: SQLiteHandle, sql: String, persistent: Bool) throws(DatabaseError) {
        var prepared: OpaquePointer?
        let flags = persistent ? UInt32(SQLITE_PREPARE_PERSISTENT) : 0
        let result = sqlite3_prepare_v3(handle.pointer, sql, -1, flags, &prepared, nil)
        guard result == SQLITE_OK, let prepared else {
            throw handle.error(result, context: "prepare \(sql)")
        }
        self.statement = prepared
        self.handle = handle
    }

    deinit { sqlite3_finalize(statement) }

    /// Whether the statement is part way through its rows (`sqlite3_stmt_busy`): an
    /// enumeration whose body is still running.
    var isBusy: Bool { sqlite3_stmt_busy(statement) != 0 }

    /// Binds a string (`sqlite3_bind_text64`, copied by SQLite), keeping embedded NUL characters.
    ///
    /// The 64-bit form takes any length, so a string longer than SQLite accepts fails with
    /// `SQLITE_TOOBIG` (``DatabaseError/Code/valueTooLarge``) instead of overflowing a 32-bit
    /// length.
    func bind(_ text: String, at index: Int32) throws(DatabaseError) {
        var text = text
        let result = text.withUTF8 { buffer -> Int32 in
            guard let base = buffer.baseAddress else {
                return sqlite3_bind_text64(statement, index, "", 0, snapshotdb_transient, UInt8(SQLITE_UTF8))
            }
            return base.withMemoryRebound(to: CChar.self, capacity: buffer.count) {
                sqlite3_bind_text64(
                    statement, index, $0, sqlite3_uint64(buffer.count), snapshotdb_transient,
                    UInt8(SQLITE_UTF8))
            }
        }
        try check(result, "bind text of \(text.utf8.count) bytes")
    }

    /// Binds bytes (`sqlite3_bind_blob64`, copied by SQLite); empty data binds an empty blob, not
    /// NULL. Bytes longer than SQLite accepts fail with `SQLITE_TOOBIG`, as for ``bind(_:at:)``.
    /// Binds bytes as a blob (copied by SQLite).
    func bind(bytes: [UInt8], at index: Int32) throws(DatabaseError) {
        let result = bytes.withUnsafeBytes { buffer in
            if let base = buffer.baseAddress {
                return sqlite3_bind_blob64(
                    statement, index, base, sqlite3_uint64(buffer.count), snapshotdb_transient)
            }
            return sqlite3_bind_zeroblob(statement, index, 0)
        }
        try check(result, "bind blob")
    }

    func bind(_ data: Data, at index: Int32) throws(DatabaseError) {
        let result = data.withUnsafeBytes { buffer in
            if let base = buffer.baseAddress {
                return sqlite3_bind_blob64(
                    statement, index, base, sqlite3_uint64(buffer.count), snapshotdb_transient)
            }
            return sqlite3_bind_zeroblob(statement, index, 0)
        }
        try check(result, "bind blob of \(data.count) bytes")
    }

    /// Runs `body` with `first` and `second` bound to parameters 1 and 2 without copying them
    /// (`SQLITE_STATIC`), then resets the statement and clears its bindings.
    ///
    /// SQLite reads the strings' bytes in place while `body` steps, which saves a copy (and a
    /// `malloc`/`free` pair) per parameter on the point read and write paths. The bindings are
    /// cleared before the bytes can go away, so no dangling pointer ever stays bound.
    func withBindings<R>(
        _ first: String, _ second: String, _ body: (SQLiteStatement) throws(DatabaseError) -> R
    ) throws(DatabaseError) -> R {
        let result = Self.withText(first) { firstText, firstCount in
            Self.withText(second) { secondText, secondCount in
                defer { reset() }
                if let error = bindText(firstText, firstCount, at: 1)
                    ?? bindText(secondText, secondCount, at: 2)
                {
                    return Result<R, DatabaseError>.failure(error)
                }
                return Result { () throws(DatabaseError) -> R in try body(self) }
            }
        }
        return try result.get()
    }

    /// Binds `first` and `second` in place to parameters 1 and 2, steps once, and returns column
    /// 0 of the row as bytes, or `nil` when there is no row; then resets the statement.
    ///
    /// The point read's hot path: the same work as ``withBindings(_:_:_:)`` with a body that
    /// steps and copies the blob, without the generic closure and `Result` plumbing, which cost
    /// about a tenth of a point read.
    func fetchBlob(_ first: String, _ second: String) throws(DatabaseError) -> Data? {
        var first = first
        var second = second
        var failure: DatabaseError?
        let blob = first.withUTF8 { firstBytes -> Data? in
            second.withUTF8 { secondBytes -> Data? in
                defer { reset() }
                if let error = bindText(firstBytes, at: 1) ?? bindText(secondBytes, at: 2) {
                    failure = error
                    return nil
                }
                let result = sqlite3_step(statement)
                if result == SQLITE_ROW { return data(at: 0) }
                if result != SQLITE_DONE { failure = handle.error(result, context: nil) }
                return nil
            }
        }
        if let failure { throw failure }
        return blob
    }

    /// Binds `first` and `second` in place to parameters 1 and 2, steps once, and calls `body`
    /// with column 0 of the row in SQLite's own buffer, unless there is no row; then resets the
    /// statement. The bytes are valid only inside `body`.
    func withBlob(_ first: String, _ second: String, _ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        var first = first
        var second = second
        try first.withUTF8 { firstBytes throws in
            try second.withUTF8 { secondBytes throws in
                defer { reset() }
                if let error = bindText(firstBytes, at: 1) ?? bindText(secondBytes, at: 2) { throw error }
                let result = sqlite3_step(statement)
                guard result == SQLITE_ROW else {
                    if result != SQLITE_DONE { throw handle.error(result, context: nil) }
                    return
                }
                // The pointer first, then its length (SQLite's order); a zero-length blob comes
                // back as a null pointer, which is an empty buffer.
                let bytes = sqlite3_column_blob(statement, 0)
                let count = Int(sqlite3_column_bytes(statement, 0))
                try body(UnsafeRawBufferPointer(start: bytes, count: count))
            }
        }
    }

    /// Binds `first`, `second` and `blob` in place to parameters 1, 2 and 3, runs the statement
    /// (which returns no rows) and resets it: the write path's ``fetchBlob(_:_:)``.
    func run(_ first: String, _ second: String, _ blob: Data) throws(DatabaseError) {
        var first = first
        var second = second
        let failure = blob.withUnsafeBytes { bytes -> DatabaseError? in
            first.withUTF8 { firstBytes -> DatabaseError? in
                second.withUTF8 { secondBytes -> DatabaseError? in
                    defer { reset() }
                    // In parameter order, each checked at once: a later successful bind would
                    // replace SQLite's message for an earlier failure.
                    if let error = bindText(firstBytes, at: 1) ?? bindText(secondBytes, at: 2)
                        ?? bindBlob(bytes, at: 3)
                    {
                        return error
                    }
                    let result = sqlite3_step(statement)
                    return result == SQLITE_DONE ? nil : handle.error(result, context: nil)
                }
            }
        }
        if let failure { throw failure }
    }

    /// Binds `first`, `second` and `third` in place to parameters 1, 2 and 3 and `fourth` to 4,
    /// runs the statement (which returns no rows) and resets it: a view's map row, written once
    /// per item of a build. Binding the three strings by copy (`SQLITE_TRANSIENT`) cost about an
    /// eighth of each row (callgrind, 50,000 rows: 1.5k of 11k instructions per row).
    func run(_ first: String, _ second: String, _ third: String, _ fourth: Int64) throws(DatabaseError) {
        var first = first
        var second = second
        var third = third
        let failure = first.withUTF8 { firstBytes -> DatabaseError? in
            second.withUTF8 { secondBytes -> DatabaseError? in
                third.withUTF8 { thirdBytes -> DatabaseError? in
                    defer { reset() }
                    if let error = bindText(firstBytes, at: 1) ?? bindText(secondBytes, at: 2)
                        ?? bindText(thirdBytes, at: 3)
                        ?? self.failure(sqlite3_bind_int64(statement, 4, fourth), "bind integer")
                    {
                        return error
                    }
                    let result = sqlite3_step(statement)
                    return result == SQLITE_DONE ? nil : handle.error(result, context: nil)
                }
            }
        }
        if let failure { throw failure }
    }

    /// Runs a statement of several rows (`INSERT … VALUES (…), (…), …`) whose parameters are, row
    /// after row, `textsPerRow` strings of `texts` then one integer of `integers`; binds the
    /// strings in place (`SQLITE_STATIC`, as ``run(_:_:_:_:)`` does for one row), steps once, and
    /// resets the statement and clears its bindings, so no pointer into `texts` stays bound.
    ///
    /// For builds, which write one row per item: each statement run costs about as much again
    /// as the row it inserts (starting the VDBE, opening and positioning a cursor from the
    /// table's root, halting), and a run of rows in key order keeps its cursor on the B-tree's
    /// last page. Measured with SQLite's C API, a million map rows in key order took 1.2–1.5 µs
    /// a row one per statement and 0.63–0.73 µs at 8 to 64 rows per statement.
    func run(rows texts: PackedTexts, textsPerRow: Int, integers: [Int64]) throws(DatabaseError) {
        let rows = integers.count
        precondition(texts.count == rows * textsPerRow && parameterCount == rows * (textsPerRow + 1))
        let failed = texts.bytes.withUnsafeBufferPointer { buffer -> DatabaseError? in
            defer { reset() }
            var text = 0
            var parameter: Int32 = 1
            for row in 0..<rows {
                for _ in 0..<textsPerRow {
                    let start = text == 0 ? 0 : texts.ends[text - 1]
                    let bytes = UnsafeBufferPointer(rebasing: buffer[start..<texts.ends[text]])
                    if let error = bindText(bytes, at: parameter) { return error }
                    text += 1
                    parameter += 1
                }
                if let error = failure(
                    sqlite3_bind_int64(statement, parameter, integers[row]), "bind integer")
                {
                    return error
                }
                parameter += 1
            }
            let result = sqlite3_step(statement)
            return result == SQLITE_DONE ? nil : handle.error(result, context: nil)
        }
        if let failed { throw failed }
    }

    private func bindText(_ bytes: UnsafeBufferPointer<UInt8>, at index: Int32) -> DatabaseError? {
        bytes.withMemoryRebound(to: CChar.self) { bindText($0.baseAddress, $0.count, at: index) }
    }

    /// Binds bytes in place (`SQLITE_STATIC`, 64-bit length); empty bytes bind an empty blob.
    private func bindBlob(_ bytes: UnsafeRawBufferPointer, at index: Int32) -> DatabaseError? {
        let result =
            bytes.baseAddress.map {
                sqlite3_bind_blob64(statement, index, $0, sqlite3_uint64(bytes.count), nil)
            } ?? sqlite3_bind_zeroblob(statement, index, 0)
        return failure(result, "bind blob of \(bytes.count) bytes")
    }

    /// Calls `body` with the UTF-8 bytes of `text` (embedded NULs kept), valid only inside it.
    private static func withText<R>(_ text: String, _ body: (UnsafePointer<CChar>?, Int) -> R) -> R {
        var text = text
        return text.withUTF8 { buffer in
            buffer.withMemoryRebound(to: CChar.self) { body($0.baseAddress, $0.count) }
        }
    }

    /// Binds text in place (`SQLITE_STATIC`); an empty string binds `''`, never NULL.
    private func bindText(_ text: UnsafePointer<CChar>?, _ count: Int, at index: Int32) -> DatabaseError? {
        let result =
            if let text, count > 0 {
                sqlite3_bind_text64(statement, index, text, sqlite3_uint64(count), nil, UInt8(SQLITE_UTF8))
            } else {
                sqlite3_bind_text(statement, index, "", 0, snapshotdb_transient)
            }
        return failure(result, "bind text")
    }

    /// The error for a failed bind; the context is only built for a failure (this runs for every
    /// parameter of every point read and write).
    private func failure(_ result: Int32, _ what: @autoclosure () -> String) -> DatabaseError? {
        result == SQLITE_OK ? nil : handle.error(result, context: what())
    }

    /// Binds a 64-bit integer (`sqlite3_bind_int64`).
    func bind(_ value: Int64, at index: Int32) throws(DatabaseError) {
        try check(sqlite3_bind_int64(statement, index, value), "bind integer")
    }

    /// Binds a double (`sqlite3_bind_double`).
    func bind(_ value: Double, at index: Int32) throws(DatabaseError) {
        try check(sqlite3_bind_double(statement, index, value), "bind real")
    }

    /// Binds NULL (`sqlite3_bind_null`).
    func bindNull(at index: Int32) throws(DatabaseError) {
        try check(sqlite3_bind_null(statement, index), "bind null")
    }

    /// How many parameters the statement has (`sqlite3_bind_parameter_count`).
    var parameterCount: Int { Int(sqlite3_bind_parameter_count(statement)) }

    /// Column `index` of the current row as a double.
    func double(at index: Int32) -> Double { sqlite3_column_double(statement, index) }

    /// Steps once (`sqlite3_step`): `true` when a row is available, `false` when done.
    func step() throws(DatabaseError) -> Bool {
        let result = sqlite3_step(statement)
        switch result {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default:
            let error = handle.error(result, context: nil)
            sqlite3_reset(statement)
            throw error
        }
    }

    /// Runs a statement that returns no rows, then resets it.
    func execute() throws(DatabaseError) {
        defer { reset() }
        while try step() {}
    }

    /// Resets the statement and clears its bindings (`sqlite3_reset`, `sqlite3_clear_bindings`).
    func reset() {
        sqlite3_reset(statement)
        sqlite3_clear_bindings(statement)
    }

    /// Column `index` of the current row as a 64-bit integer.
    func int64(at index: Int32) -> Int64 { sqlite3_column_int64(statement, index) }

    /// Whether column `index` of the current row is NULL.
    func isNull(at index: Int32) -> Bool { sqlite3_column_type(statement, index) == SQLITE_NULL }

    /// The text of column `index`, or `previous` itself when it holds the same bytes (rows
    /// that repeat a value then share one string instead of each decoding its own).
    func string(at index: Int32, reusing previous: String?) -> String {
        guard let previous, !isText(at: index, differentFrom: previous) else { return string(at: index) }
        return previous
    }

    /// Whether the text of column `index` has other bytes than `string` (a NULL column counts
    /// as empty text).
    func isText(at index: Int32, differentFrom string: String) -> Bool {
        let text = sqlite3_column_text(statement, index)
        let count = Int(sqlite3_column_bytes(statement, index))
        var string = string
        return string.withUTF8 { utf8 in
            utf8.count != count || (count > 0 && memcmp(utf8.baseAddress!, text!, count) != 0)
        }
    }

    /// The storage class of column `index` of the current row: `SQLITE_INTEGER`, `SQLITE_FLOAT`,
    /// `SQLITE_TEXT`, `SQLITE_BLOB` or `SQLITE_NULL`.
    func storageClass(at index: Int32) -> SQLiteStorageClass {
        SQLiteStorageClass(sqlite3_column_type(statement, index))
    }

    /// Column `index` of the current row as a string, embedded NULs kept.
    func string(at index: Int32) -> String {
        let count = Int(sqlite3_column_bytes(statement, index))
        guard count > 0, let text = sqlite3_column_text(statement, index) else { return "" }
        return String(decoding: UnsafeBufferPointer(start: text, count: count), as: UTF8.self)
    }

    /// Calls `body` with the blob of column `index` in place (valid only inside `body`).
    func withBlob<R, Failure: Error>(at index: Int32, _ body: (UnsafeRawBufferPointer) throws(Failure) -> R)
        throws(Failure) -> R
    {
        let base = sqlite3_column_blob(statement, index)
        return try body(
            UnsafeRawBufferPointer(
                start: base, count: base == nil ? 0 : Int(sqlite3_column_bytes(statement, index))))
    }

    /// The blob of column `index` as bytes (copied).
    func bytes(at index: Int32) -> [UInt8] {
        guard let bytes = sqlite3_column_blob(statement, index) else { return [] }
        return [UInt8](
            UnsafeRawBufferPointer(start: bytes, count: Int(sqlite3_column_bytes(statement, index))))
    }

    func data(at index: Int32) -> Data {
        guard let bytes = sqlite3_column_blob(statement, index) else { return Data() }
        return Data(bytes: bytes, count: Int(sqlite3_column_bytes(statement, index)))
    }

    /// Throws the error for a failed call. The context is built only for a failure: an
    /// interpolated context built for every bind cost about 1,400 instructions per string bound
    /// (most of a rebuild's map rows went to it).
    private func check(_ result: Int32, _ what: @autoclosure () -> String) throws(DatabaseError) {
        if result != SQLITE_OK { throw handle.error(result, context: what()) }
    }
}

/// Strings laid end to end in one buffer, for ``SQLiteStatement/run(rows:textsPerRow:integers:)``
/// to bind in place: one array for a whole statement's strings, where binding each `String` in
/// place would need a closure per string.
struct PackedTexts {
    private(set) var bytes: [UInt8] = []
    /// Where each string ends in ``bytes``; the first starts at 0, each other where the one
    /// before it ends.
    private(set) var ends: [Int] = []

    var count: Int { ends.count }

    mutating func append(_ text: String) {
        var text = text
        text.withUTF8 { bytes.append(contentsOf: $0) }
        ends.append(bytes.count)
    }

    /// Empties the buffer and keeps its capacity for the next statement.
    mutating func removeAll() {
        bytes.removeAll(keepingCapacity: true)
        ends.removeAll(keepingCapacity: true)
    }
}
