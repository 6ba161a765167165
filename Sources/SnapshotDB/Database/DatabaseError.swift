public import Foundation

#if canImport(Glibc)
    internal import Glibc
#elseif canImport(Darwin)
    internal import Darwin
#endif

/// The one error type SnapshotDB throws.
///
/// Every error carries a stable ``Code`` that callers match on, a human-readable message, and,
/// when SQLite produced it, SQLite's extended result code. Codes are an extensible struct, not
/// an enum, so new codes can be added without breaking `switch` statements in client code.
///
/// ```swift
/// do {
///     try writer.readWrite { txn in try txn.set(item, forKey: "1", inCollection: "items") }
/// } catch DatabaseError.Code.diskFull {
///     showDiskFullAlert()
/// } catch let error as DatabaseError where error.code == .busy {
///     retryLater()
/// }
/// ```
public struct DatabaseError: Error, Hashable, Sendable, CustomStringConvertible {
    /// A stable identifier for the kind of failure.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// The stable name of the code, as printed in messages and logs.
        public let name: String

        private init(_ name: String) { self.name = name }

        /// The database file is already open in this process (one `Database` per file).
        public static let alreadyOpen = Code("alreadyOpen")
        /// The file is not a SQLite database, or is a SQLite database of another application.
        public static let notADatabase = Code("notADatabase")
        /// The database is a SnapshotDB database with a schema newer than this library knows.
        public static let schemaTooNew = Code("schemaTooNew")
        /// SQLite found the database file, its `-wal` or its `-shm` damaged.
        public static let corrupt = Code("corrupt")
        /// The disk (or the file size limit of the process) is full; nothing was committed.
        public static let diskFull = Code("diskFull")
        /// The database or its directory cannot be written.
        public static let readOnly = Code("readOnly")
        /// The file could not be opened or created.
        public static let cannotOpen = Code("cannotOpen")
        /// Another process held a lock past the busy timeout.
        public static let busy = Code("busy")
        /// A read-write transaction was attempted on a connection that holds a bookmark.
        public static let longLivedReadTransactionActive = Code("longLivedReadTransactionActive")
        /// A transaction was used after the closure that received it returned.
        public static let transactionEnded = Code("transactionEnded")
        /// A stored value could not be decoded as the requested type.
        public static let decodingFailed = Code("decodingFailed")
        /// A value could not be encoded by the collection's codec.
        public static let encodingFailed = Code("encodingFailed")
        /// A value or key is larger than SQLite accepts.
        public static let valueTooLarge = Code("valueTooLarge")
        /// The WAL passed the configured hard limit because snapshots pin it; writes are refused.
        public static let walLimitExceeded = Code("walLimitExceeded")
        /// The API was used in a way it does not allow (for example a nested transaction, or a
        /// ``Configuration`` number out of its range).
        public static let misuse = Code("misuse")
        /// A connection's bookmark could not be kept (it could not be taken again at its commit
        /// during a WAL reset) and was released; thrown once, by the connection's next read or
        /// write. The next ``Connection/beginLongLivedReadTransaction()`` returns every commit
        /// since the last one it returned.
        public static let bookmarkLost = Code("bookmarkLost")
        /// The database was closed (``Database/close()``); nothing can be read or written
        /// through it or its connections.
        public static let databaseClosed = Code("databaseClosed")
        /// The file is a SQLite database in a format this SQLite cannot read: a newer file
        /// format ("unsupported file format", a read version above 2 in its header).
        public static let unsupportedFormat = Code("unsupportedFormat")
        /// SQLite refuses the database's `-wal`: its header is intact (the checksum matches) but
        /// names a WAL format version SQLite does not know, so neither the `-wal` nor the
        /// database can be read. The message says what to do; the files are left untouched.
        public static let walUnreadable = Code("walUnreadable")
        /// The operating system failed a read, write, sync, lock or memory mapping of the
        /// database's files (a failing device, a `-wal` or `-shm` that is not a regular file);
        /// ``DatabaseError/sqliteCode`` holds SQLite's extended result code.
        public static let ioError = Code("ioError")
        /// A query was refused before it ran: a secondary index's fragment that names anything
        /// but the index's columns (another table, a subquery, a second statement, a function
        /// with side effects) or is not valid SQL, or a full-text query that is not valid FTS5
        /// syntax. Nothing was read or changed.
        public static let invalidQuery = Code("invalidQuery")
        /// A read ran past its time limit (``Configuration/readTimeLimit``,
        /// ``Connection/read(timeLimit:_:)-7pp46``) and SQLite stopped the statement it was running.
        /// The read transaction, the connection and its bookmark are unharmed: the next read
        /// works. (A cancelled `async` read throws `CancellationError` instead.)
        public static let interrupted = Code("interrupted")
        /// No extension of that name and kind is registered, or the snapshot the transaction
        /// reads predates its registration (advance the bookmark).
        public static let unknownExtension = Code("unknownExtension")
        /// The durable history no longer holds (or never held) the changes asked for: they were
        /// purged by the retention bound, or predate the history (a file upgraded from schema 2
        /// has no history before its upgrade). The message names the range.
        public static let historyUnavailable = Code("historyUnavailable")
        /// A history position that belongs to no history of this file: one from another database
        /// file, or one that this file's history never reached or left behind (an older copy of
        /// the file was put back, or restored, and went on with other commits).
        public static let historyMismatch = Code("historyMismatch")
        /// A named consumer fell behind the history's retention bound and was expired: the
        /// changes it had not acknowledged were purged. Its next read says so; reset it to go on.
        public static let consumerExpired = Code("consumerExpired")
        /// ``Database/existingConsumer(named:)`` found no consumer of that name in the file (a
        /// typo, or one removed): the message names the consumers the file has.
        public static let unknownConsumer = Code("unknownConsumer")
        /// The file records migrations that this ``Migrator`` does not have: a newer release of
        /// the app migrated it, and this one would write values in a shape that release no
        /// longer reads (as GRDB's `hasBeenSuperseded`). The message names them. Nothing was
        /// written.
        public static let migrationsSuperseded = Code("migrationsSuperseded")
        /// A consumer's batch was acknowledged after another runner of the same consumer had
        /// already moved its position past the batch's start (two processes, or two loops, run
        /// one consumer): the batch was applied there, and the transaction must not commit.
        public static let consumerConflict = Code("consumerConflict")
        /// An extension's tables are stale: a commit of a process that does not keep the
        /// extension (it did not register it, or registered another version) changed the values
        /// it derives from. The message names the commit, the process and the connection;
        /// registering the extension again rebuilds it.
        public static let extensionStale = Code("extensionStale")
        /// The file holds another version of the extension than this process registered
        /// (another process registered its own since). The message names both versions and the
        /// other process; every process that writes must register the same version.
        public static let extensionConflict = Code("extensionConflict")
        /// An extension registered under the version the file holds computes something other
        /// than what the file holds: a view's grouping or sort key changed and its version did
        /// not. Registering checks a sample of stored items (not every one); give the extension
        /// a new version to rebuild it.
        public static let extensionChanged = Code("extensionChanged")
        /// Any other SQLite error; ``DatabaseError/sqliteCode`` holds SQLite's result code.
        public static let sqlite = Code("sqlite")

        /// The code's name.
        public var description: String { name }

        /// Matches a thrown error against a code, so codes can be used as `catch` patterns.
        public static func ~= (code: Code, error: any Error) -> Bool {
            (error as? DatabaseError)?.code == code
        }
    }

    /// What kind of failure this is.
    public let code: Code
    /// A message for people: what failed and why, including SQLite's own message when it has one.
    public let message: String
    /// SQLite's extended result code, when SQLite reported the failure.
    public let sqliteCode: Int32?
    /// The collection involved, when the failure concerns one value.
    public let collection: String?
    /// The key involved, when the failure concerns one value.
    public let key: String?
    /// The Swift type involved in a decoding or encoding failure.
    public let typeName: String?
    /// The underlying error, when there is one: the codec's error for `encodingFailed` and
    /// `decodingFailed`, the SQLite error that ended a transaction. Not part of equality.
    public let cause: (any Error)?

    /// Creates an error; SnapshotDB creates these, clients usually only match them.
    public init(
        _ code: Code, _ message: String, sqliteCode: Int32? = nil, collection: String? = nil,
        key: String? = nil, typeName: String? = nil, cause: (any Error)? = nil
    ) {
        self.cause = cause
        self.code = code
        self.message = message
        self.sqliteCode = sqliteCode
        self.collection = collection
        self.key = key
        self.typeName = typeName
    }

    /// Whether two errors have the same code, message, SQLite code, collection, key and type
    /// (their causes are not compared).
    public static func == (lhs: DatabaseError, rhs: DatabaseError) -> Bool {
        lhs.code == rhs.code && lhs.message == rhs.message && lhs.sqliteCode == rhs.sqliteCode
            && lhs.collection == rhs.collection && lhs.key == rhs.key && lhs.typeName == rhs.typeName
    }

    /// Hashes what `==` compares.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(code)
        hasher.combine(message)
        hasher.combine(sqliteCode)
        hasher.combine(collection)
        hasher.combine(key)
        hasher.combine(typeName)
    }

    /// `code: message`, plus SQLite's result code when there is one.
    public var description: String {
        var text = "\(code): \(message)"
        if let sqliteCode { text += " (SQLite result code \(sqliteCode))" }
        return text
    }
}

/// `localizedDescription` (what apps show in an alert and what many log back ends print) is the
/// error's description: its code and message, e.g. "cannotOpen: the directory of … does not
/// exist", rather than Foundation's "The operation could not be completed".
extension DatabaseError: LocalizedError {
    /// The error's ``description``: its code and message.
    public var errorDescription: String? { description }
}
