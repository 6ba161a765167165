internal import Foundation

/// What a row of `snapshotdb_history` stands for (its `kind` column).
enum HistoryKind: Int64, Sendable {
    /// A commit made by a SnapshotDB connection (of any process): its keys, info, connection
    /// and extension records are in the row.
    case commit = 0
    /// Writes by a foreign client (the `sqlite3` shell), sealed with a number of their own:
    /// the keys the schema's triggers noted. Extensions were rebuilt in the same commit.
    case foreign = 1
    /// The start of the history: a new file's commit 0, or the counter of a file upgraded from
    /// schema 2. Nothing before it is known, and its own row holds no changes.
    case start = 2
    /// Writes whose keys are unknown (sealed foreign writes found without noted keys, such as
    /// a backup put back by another client): an external changeset.
    case unknown = 3
}

/// The binary encoding of a changeset's keys and extension records in the `changes` column
/// of `snapshotdb_history`.
///
/// ```
/// changes   := version(1 byte = 1) flags(1 byte; bit 0: all collections cleared)
///              runs extensions resets
/// runs      := count(varint) run*          run := collection(string) count(varint) op*
/// op        := kind(1 byte: 0 set, 1 remove, 2 clear) [key(string) unless clear]
/// extensions:= count(varint) (name(string) tag(1 byte) payload(bytes))*
/// resets    := count(varint) name(string)*
/// string    := length(varint) UTF-8 bytes;  bytes := length(varint) bytes
/// ```
///
/// The operations are the transaction's log in order (the last one on a key wins), grouped in
/// runs of one collection: encoding is a linear copy with no hashing, so a bulk commit pays
/// for its history what it pays for its log. A reader folds them into key sets on first use,
/// as for a local changeset. Unknown extension record tags are skipped (a newer writer's
/// record), so an older reader still gets the keys.
enum HistoryCoding {
    static let formatVersion: UInt8 = 1
    /// The flag bits this release writes and reads (bit 0: all collections cleared).
    static let knownFlags: UInt8 = 0x01

    /// Encodes a transaction's log, its clear-all flag and its extensions' records.
    static func encode(
        operations: [ChangesetBuilder.Operation], clearedAll: Bool, extensions: ExtensionChanges
    ) -> [UInt8] {
        var writer = HistoryWriter()
        writer.bytes.reserveCapacity(16 + operations.count * 24)
        writer.byte(formatVersion)
        writer.byte(clearedAll ? 1 : 0)
        // Runs of one collection: counted first, then written, with no array of them.
        var runCount = 0
        for index in operations.indices
        where index == 0 || operations[index].collection != operations[index - 1].collection {
            runCount += 1
        }
        writer.varint(UInt64(runCount))
        var start = 0
        while start < operations.count {
            var end = start + 1
            while end < operations.count, operations[end].collection == operations[start].collection {
                end += 1
            }
            writer.string(operations[start].collection)
            writer.varint(UInt64(end - start))
            for operation in operations[start..<end] {
                switch operation.kind {
                case .set:
                    writer.byte(0)
                    writer.string(operation.key)
                case .remove:
                    writer.byte(1)
                    writer.string(operation.key)
                case .clear:
                    writer.byte(2)
                }
            }
            start = end
        }
        extensions.encode(into: &writer)
        return writer.bytes
    }

    /// What a `changes` column decodes to.
    struct Decoded {
        var operations: [ChangesetBuilder.Operation]
        var clearedAll: Bool
        var extensions: ExtensionChanges
    }

    /// Decodes a `changes` column.
    ///
    /// - Throws: ``HistoryReader/Failure`` when the bytes are not this encoding (a row damaged
    ///   or written by a foreign client).
    static func decode(_ bytes: UnsafeRawBufferPointer) throws(HistoryReader.Failure) -> Decoded {
        var reader = HistoryReader(bytes)
        let version = try reader.byte()
        // A later version (or flag) is a newer SnapshotDB's row, not damage: this release says
        // it cannot read it. (Version 0 was never written: damage.)
        guard version == formatVersion else {
            throw version > formatVersion
                ? HistoryReader.Failure(newerFormat: "format version \(version)")
                : HistoryReader.Failure("unknown format version \(version)")
        }
        let flags = try reader.byte()
        guard flags & ~Self.knownFlags == 0 else {
            throw HistoryReader.Failure(newerFormat: "flags 0x\(String(flags, radix: 16))")
        }
        var operations: [ChangesetBuilder.Operation] = []
        let runCount = try reader.count()
        for _ in 0..<runCount {
            let collection = try reader.string()
            let count = try reader.count()
            // No reserve per run: `reserveCapacity` grows to exactly what it is asked, so a row of
            // many one-key runs (a transaction alternating collections) would copy the array once
            // per run. Appending grows it geometrically.
            for _ in 0..<count {
                switch try reader.byte() {
                case 0: operations.append(.init(kind: .set, collection: collection, key: try reader.string()))
                case 1:
                    operations.append(.init(kind: .remove, collection: collection, key: try reader.string()))
                case 2: operations.append(.init(kind: .clear, collection: collection, key: ""))
                case let kind: throw HistoryReader.Failure("unknown operation \(kind)")
                }
            }
        }
        let extensions = try ExtensionChanges.decode(from: &reader)
        guard reader.isAtEnd else {
            throw HistoryReader.Failure("\(reader.remaining) bytes after the changes")
        }
        return Decoded(operations: operations, clearedAll: flags & 1 != 0, extensions: extensions)
    }

    /// Encodes a transaction's `info` as JSON text (readable with the `sqlite3` shell), or `nil`
    /// when it is empty.
    static func encodeInfo(_ info: [String: String]) -> String? {
        guard !info.isEmpty else { return nil }
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        // A dictionary of strings always encodes (`JSONEncoder` fails on non-finite numbers and on
        // values that throw): the `nil` is never taken.
        guard let data = try? encoder.encode(info) else { return nil }
        return String(decoding: data, as: UTF8.self)
    }

    static func decodeInfo(_ text: String) throws(HistoryReader.Failure) -> [String: String] {
        do {
            return try JSONDecoder().decode([String: String].self, from: Data(text.utf8))
        } catch {
            throw HistoryReader.Failure("info is not a JSON object of strings")
        }
    }
}

/// Appends the primitives of ``HistoryCoding``.
struct HistoryWriter {
    var bytes: [UInt8] = []

    mutating func byte(_ value: UInt8) { bytes.append(value) }

    /// LEB128: seven bits a byte, low bits first.
    mutating func varint(_ value: UInt64) {
        var value = value
        while value >= 0x80 {
            bytes.append(UInt8(value & 0x7f) | 0x80)
            value >>= 7
        }
        bytes.append(UInt8(value))
    }

    mutating func string(_ value: String) {
        var value = value
        value.withUTF8 { utf8 in
            varint(UInt64(utf8.count))
            bytes.append(contentsOf: utf8)
        }
    }

    mutating func data(_ value: Data) {
        varint(UInt64(value.count))
        bytes.append(contentsOf: value)
    }
}

/// Reads the primitives of ``HistoryCoding`` from untrusted bytes: every length is checked.
struct HistoryReader {
    /// Why bytes are not a valid encoding.
    struct Failure: Error {
        let reason: String
        /// Whether the bytes are a newer release's encoding (a version or flag this one does
        /// not know) rather than damage.
        let isNewerFormat: Bool
        init(_ reason: String) {
            self.reason = reason
            isNewerFormat = false
        }
        init(newerFormat what: String) {
            reason = what
            isNewerFormat = true
        }
    }

    private let bytes: UnsafeRawBufferPointer
    private var offset = 0

    init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    var isAtEnd: Bool { offset == bytes.count }
    var remaining: Int { bytes.count - offset }

    mutating func byte() throws(Failure) -> UInt8 {
        guard offset < bytes.count else { throw Failure("cut short") }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func varint() throws(Failure) -> UInt64 {
        var value: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            let next = try byte()
            guard shift < 64 else { throw Failure("a number is too long") }
            value |= UInt64(next & 0x7f) << shift
            if next & 0x80 == 0 { return value }
            shift += 7
        }
    }

    /// A count of things that each take at least one byte: never more than the bytes left, so
    /// a damaged count cannot make a reader reserve memory it does not need.
    mutating func count() throws(Failure) -> Int {
        let value = try varint()
        guard value <= UInt64(remaining) else { throw Failure("a count of \(value) exceeds the bytes left") }
        return Int(value)
    }

    mutating func span() throws(Failure) -> UnsafeRawBufferPointer {
        let length = try count()
        defer { offset += length }
        return UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + length])
    }

    /// A string, whose bytes must be valid UTF-8 (SnapshotDB writes Swift strings): other bytes
    /// are damage, not text to repair with U+FFFD.
    mutating func string() throws(Failure) -> String {
        guard let string = String(validating: try span(), as: UTF8.self) else {
            throw Failure("a string is not valid UTF-8")
        }
        return string
    }

    mutating func data() throws(Failure) -> Data { Data(try span()) }
}
