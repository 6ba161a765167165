/// The 100-byte header at the start of a SQLite database (page 1), decoded.
///
/// See "Database File Format", section 1.3, at https://www.sqlite.org/fileformat2.html.
public struct DatabaseHeader: Sendable, Codable, Equatable {
    /// The `PRAGMA application_id` that marks a SnapshotDB file: 0x536E4442, "SnDB".
    public static let snapshotDBApplicationID: UInt32 = 0x536E_4442

    /// The bytes every SQLite database starts with: `SQLite format 3` and a NUL.
    static let magic: [UInt8] = Array("SQLite format 3".utf8) + [0]

    /// The page size in bytes (512 through 65536, a power of two).
    public var pageSize: Int
    /// The file format write version: 1 for rollback journal, 2 for WAL.
    public var writeVersion: UInt8
    /// The file format read version: 1 for rollback journal, 2 for WAL.
    public var readVersion: UInt8
    /// Bytes reserved at the end of every page (for extensions); usually 0.
    public var reservedBytesPerPage: Int
    /// The file change counter.
    public var fileChangeCounter: UInt32
    /// The database size in pages as the header records it.
    public var pageCount: UInt32
    /// The number of pages on the freelist.
    public var freelistPageCount: UInt32
    /// The schema cookie, bumped by every schema change.
    public var schemaCookie: UInt32
    /// The text encoding: 1 UTF-8, 2 UTF-16le, 3 UTF-16be (0 in a database never written).
    public var textEncoding: UInt32
    /// `PRAGMA user_version`; for a SnapshotDB file, its schema version.
    public var userVersion: Int32
    /// `PRAGMA application_id`.
    public var applicationID: UInt32
    /// The SQLite version number that last wrote the file, such as 3040001.
    public var sqliteVersionNumber: UInt32

    /// Whether the header marks a WAL-mode database (read and write versions 2).
    public var isWALMode: Bool { writeVersion == 2 && readVersion == 2 }
    /// Whether `application_id` marks a SnapshotDB file.
    public var isSnapshotDB: Bool { applicationID == Self.snapshotDBApplicationID }
    /// The bytes of a page that hold b-tree content.
    var usablePageSize: Int { pageSize - reservedBytesPerPage }

    enum CodingKeys: String, CodingKey {
        case pageSize
        case writeVersion
        case readVersion
        case reservedBytesPerPage
        case fileChangeCounter
        case pageCount
        case freelistPageCount
        case schemaCookie
        case textEncoding
        case userVersion
        case applicationID
        case sqliteVersionNumber
    }

    /// Decodes the header from at least the first 100 bytes of page 1.
    ///
    /// - Throws: ``InspectionError`` `notADatabase` when the magic string is missing,
    ///   `truncatedDatabase` when fewer than 100 bytes are given, `unsupportedFormat` for an
    ///   impossible page size.
    public init(bytes: [UInt8], path: String) throws(InspectionError) {
        guard bytes.count >= 16, Array(bytes[0..<16]) == Self.magic else {
            if bytes.count < 16, Self.magic.starts(with: bytes) {
                throw InspectionError(
                    code: .truncatedDatabase, path: path,
                    message: "truncated database: \(bytes.count) bytes, shorter than the 100-byte header")
            }
            throw InspectionError(
                code: .notADatabase, path: path,
                message: "not a SQLite database (the file does not start with \"SQLite format 3\")")
        }
        guard bytes.count >= 100 else {
            throw InspectionError(
                code: .truncatedDatabase, path: path,
                message: "truncated database: \(bytes.count) bytes, shorter than the 100-byte header")
        }
        let rawPageSize = Int(Bytes.bigEndianUInt16(bytes, at: 16))
        let pageSize = rawPageSize == 1 ? 65536 : rawPageSize
        guard pageSize >= 512, pageSize <= 65536, pageSize & (pageSize - 1) == 0 else {
            throw InspectionError(
                code: .unsupportedFormat, path: path,
                message:
                    "corrupt database header: page size \(rawPageSize) is not a power of two in 512...65536")
        }
        self.pageSize = pageSize
        self.writeVersion = bytes[18]
        self.readVersion = bytes[19]
        self.reservedBytesPerPage = Int(bytes[20])
        self.fileChangeCounter = Bytes.bigEndianUInt32(bytes, at: 24)
        self.pageCount = Bytes.bigEndianUInt32(bytes, at: 28)
        self.freelistPageCount = Bytes.bigEndianUInt32(bytes, at: 36)
        self.schemaCookie = Bytes.bigEndianUInt32(bytes, at: 40)
        self.textEncoding = Bytes.bigEndianUInt32(bytes, at: 56)
        self.userVersion = Int32(bitPattern: Bytes.bigEndianUInt32(bytes, at: 60))
        self.applicationID = Bytes.bigEndianUInt32(bytes, at: 68)
        self.sqliteVersionNumber = Bytes.bigEndianUInt32(bytes, at: 96)
        guard usablePageSize >= 480 else {
            throw InspectionError(
                code: .unsupportedFormat, path: path,
                message: "corrupt database header: \(reservedBytesPerPage) reserved bytes per page")
        }
    }
}
