/// The one error the inspection library throws: a file that cannot be inspected, and why.
///
/// Every error names the file it is about and carries a stable ``Code`` that callers can match
/// and a one-line human message that the `snapshotdb` tool prints as is. A damaged file is always
/// reported with an error, never with a crash.
///
/// ```swift
/// do {
///     let report = try SnapshotDBInspector.inspect(databaseAt: path)
/// } catch where error.code == .notADatabase {
///     print("not a SQLite file: \(error.message)")
/// }
/// ```
public struct InspectionError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A stable, extensible identifier of what went wrong; new codes may be added.
    public struct Code: Hashable, Sendable, Codable, CustomStringConvertible {
        /// The stable spelling of the code, also used in JSON output.
        public let rawValue: String

        private init(_ rawValue: String) { self.rawValue = rawValue }

        /// The file (database, `-wal` or `-shm`) does not exist.
        public static let fileNotFound = Code("fileNotFound")
        /// The path names a directory or another kind of file that is not a regular file.
        public static let notARegularFile = Code("notARegularFile")
        /// The process may not read the file.
        public static let permissionDenied = Code("permissionDenied")
        /// A system call failed while reading the file.
        public static let ioFailure = Code("ioFailure")
        /// The file does not start with `SQLite format 3\0` (a foreign or random file).
        public static let notADatabase = Code("notADatabase")
        /// The database file is shorter than its header or is not a whole number of pages.
        public static let truncatedDatabase = Code("truncatedDatabase")
        /// The `-wal` file does not start with a write-ahead log magic number.
        public static let notAWriteAheadLog = Code("notAWriteAheadLog")
        /// The `-wal` file is shorter than its 32-byte header.
        public static let truncatedWriteAheadLog = Code("truncatedWriteAheadLog")
        /// The `-shm` file is shorter than the wal-index header SQLite keeps at its start. No longer
        /// thrown: such a file (SQLite leaves 3 bytes while its first connection opens) is read as
        /// no wal-index, which SQLite rebuilds from the WAL.
        public static let truncatedSharedMemory = Code("truncatedSharedMemory")
        /// A header announces a format version or page size this library does not know.
        public static let unsupportedFormat = Code("unsupportedFormat")
        /// The SnapshotDB commit counter cannot be read (not a SnapshotDB file, or unreadable pages).
        public static let commitCounterUnavailable = Code("commitCounterUnavailable")
        /// An argument is out of its range, or two arguments conflict; the file is not read.
        public static let invalidArgument = Code("invalidArgument")

        /// The raw value.
        public var description: String { rawValue }

        /// Decodes a code from its raw value.
        public init(from decoder: any Decoder) throws {
            self.rawValue = try decoder.singleValueContainer().decode(String.self)
        }

        /// Encodes the raw value.
        public func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            try container.encode(rawValue)
        }
    }

    /// What went wrong.
    public var code: Code
    /// The file the error is about.
    public var path: String
    /// A one-line explanation for a person.
    public var message: String
    /// The `errno` of the failed system call, when one failed.
    public var systemErrorNumber: Int32?

    /// Creates an error.
    public init(code: Code, path: String, message: String, systemErrorNumber: Int32? = nil) {
        self.code = code
        self.path = path
        self.message = message
        self.systemErrorNumber = systemErrorNumber
    }

    /// `path: message`, on one line.
    public var description: String { "\(path): \(message)" }
}
