internal import CSQLite
internal import Foundation

/// How SQLite types a column's value in a row (`sqlite3_column_type`).
enum SQLiteStorageClass: Sendable {
    case integer
    case float
    case text
    case blob
    case null

    init(_ type: Int32) {
        switch type {
        case SQLITE_INTEGER: self = .integer
        case SQLITE_FLOAT: self = .float
        case SQLITE_TEXT: self = .text
        case SQLITE_BLOB: self = .blob
        default: self = .null
        }
    }
}

/// SQLite's result codes as the rest of the library needs them: the one place outside the
/// handle and the statement that names SQLite's C constants.
enum SQLiteResult {
    /// `SQLITE_OK`.
    static let ok = SQLITE_OK

    /// Whether `code`'s primary result code is `SQLITE_BUSY`.
    static func isBusy(_ code: Int32) -> Bool { code & 0xFF == SQLITE_BUSY }
}

extension DatabaseError {
    /// Maps a SQLite result code, with the handle's message and the `errno` SQLite saw, to the
    /// matching code.
    ///
    /// SQLite reports a write refused for lack of space as `SQLITE_FULL` when the write was
    /// short, but as `SQLITE_IOERR_WRITE` when it failed outright with `ENOSPC` or `EFBIG`
    /// (a file size limit); the system error number tells those apart from a failing device.
    static func sqlite(
        _ resultCode: Int32, message: String, systemErrno: Int32 = 0, context: String? = nil
    ) -> DatabaseError {
        let code: Code
        switch resultCode & 0xFF {
        case SQLITE_FULL: code = .diskFull
        case SQLITE_CORRUPT: code = .corrupt
        case SQLITE_NOTADB: code = .notADatabase
        case SQLITE_READONLY: code = .readOnly
        case SQLITE_BUSY, SQLITE_LOCKED: code = .busy
        case SQLITE_TOOBIG: code = .valueTooLarge
        case SQLITE_CANTOPEN: code = .cannotOpen
        case SQLITE_INTERRUPT: code = .interrupted
        case SQLITE_IOERR where systemErrno == ENOSPC || systemErrno == EFBIG: code = .diskFull
        case SQLITE_IOERR, SQLITE_NOLFS: code = .ioError
        // SQLite's message for a schema format number above 4 (a newer file format).
        case SQLITE_ERROR where message == "unsupported file format": code = .unsupportedFormat
        default: code = .sqlite
        }
        let text = context.map { "\($0): \(message)" } ?? message
        return DatabaseError(code, text, sqliteCode: resultCode)
    }

    /// SQLite's I/O error (`SQLITE_IOERR`) with `message`, mapped as a real one is.
    static func sqliteIOError(_ message: String) -> DatabaseError {
        sqlite(SQLITE_IOERR, message: message)
    }

    /// Whether SQLite refused a write for a constraint (`SQLITE_CONSTRAINT`): on SnapshotDB's
    /// own tables, whose rows only it writes, a sign of damage.
    var isConstraintViolation: Bool { (sqliteCode ?? 0) & 0xFF == SQLITE_CONSTRAINT }

    /// Whether SQLite failed with a plain `SQLITE_ERROR` (no extended code).
    var isPlainSQLiteError: Bool { code == .sqlite && sqliteCode == SQLITE_ERROR }
}
