/// What extensions add to a commit's changeset, by extension name, kept opaque: the changeset
/// and the durable history store each extension's record and hand it back, and only the
/// extension reads it (a view's reader turns its own record into row changes, see
/// ``ViewReader``). Changes/ knows no kind of extension.
struct ExtensionChanges: Sendable {
    /// Each extension's own record of the commit (a view's touched items): as its writer made it
    /// in the process that committed, or as the history holds it (``StoredExtensionRecord``).
    var byName: [String: any ExtensionRecord] = [:]
    /// Extensions rebuilt or dropped in the commit: their readers reload.
    var reset: Set<String> = []
    /// Whether every extension must be reloaded: the commit sealed a foreign client's writes,
    /// and the process that sealed them rebuilt the extensions it knew of.
    var resetsAll = false

    /// Whether `name` was rebuilt or dropped in the commit.
    func isReset(_ name: String) -> Bool { resetsAll || reset.contains(name) }
}

/// An extension's record of a commit, written into the durable history with the commit so that
/// another process (or this one after a restart) gets the same row changes. Its extension
/// writes it (``encode(into:)``) and reads it back from its ``StoredExtensionRecord``.
protocol ExtensionRecord: Sendable {
    /// The record's type in the history encoding; never reused.
    var historyTag: UInt8 { get }
    func encode(into writer: inout HistoryWriter)
}

/// An extension's record as the durable history holds it: its tag and its bytes, which only its
/// extension decodes (a record of a tag the extension does not know, written by a newer version,
/// makes the extension reload).
struct StoredExtensionRecord: ExtensionRecord {
    let historyTag: UInt8
    let payload: [UInt8]

    func encode(into writer: inout HistoryWriter) {
        writer.bytes.append(contentsOf: payload)
    }
}

extension ExtensionChanges {
    /// Appends the records and resets (see ``HistoryCoding``).
    func encode(into writer: inout HistoryWriter) {
        // The common commit: no extension recorded anything.
        if byName.isEmpty && reset.isEmpty && !resetsAll {
            writer.bytes.append(contentsOf: [0, 0, 0])
            return
        }
        // (One record, the usual commit, needs no sort.)
        let records = byName.count == 1 ? Array(byName) : byName.sorted(by: { $0.key < $1.key })
        writer.varint(UInt64(records.count))
        for (name, record) in records {
            writer.string(name)
            writer.byte(record.historyTag)
            var payload = HistoryWriter()
            record.encode(into: &payload)
            writer.varint(UInt64(payload.bytes.count))
            writer.bytes.append(contentsOf: payload.bytes)
        }
        writer.varint(UInt64(reset.count))
        for name in reset.sorted() { writer.string(name) }
        writer.byte(resetsAll ? 1 : 0)
    }

    /// Reads what ``encode(into:)`` wrote, each record kept as its bytes for its extension.
    static func decode(from reader: inout HistoryReader) throws(HistoryReader.Failure) -> ExtensionChanges {
        var changes = ExtensionChanges()
        for _ in 0..<(try reader.count()) {
            let name = try reader.string()
            let tag = try reader.byte()
            changes.byName[name] = StoredExtensionRecord(historyTag: tag, payload: Array(try reader.span()))
        }
        for _ in 0..<(try reader.count()) { changes.reset.insert(try reader.string()) }
        changes.resetsAll = try reader.byte() != 0
        return changes
    }
}
