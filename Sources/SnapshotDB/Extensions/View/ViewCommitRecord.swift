internal import Foundation

/// What a view records of one commit: for each item the commit touched, where it was before
/// (its group and stored value, or its sort key in a keyed view), or `nil` when it was not in
/// the view.
struct ViewCommitRecord: Sendable {
    /// What places an item in its group before the commit.
    enum Stored: Sendable, Equatable {
        /// The value as stored (closure views decode it to compare).
        case value(Data)
        /// The encoded sort key (keyed views).
        case sortKey([UInt8])
    }

    struct Before: Sendable, Equatable {
        let group: String
        let stored: Stored
    }

    var touched: [ViewItem: Before?]
}

/// A view's record in the durable history: each touched item with its group and stored value
/// (or sort key) before the commit, so that a reader in another process computes the same row
/// changes. Flags: 0 not in the view, 1 a value, 2 a sort key.
extension ViewCommitRecord: ExtensionRecord {
    /// The view's record's tag in the history; never reused.
    static let tag: UInt8 = 1

    var historyTag: UInt8 { Self.tag }

    func encode(into writer: inout HistoryWriter) {
        writer.varint(UInt64(touched.count))
        for (item, before) in touched {
            writer.string(item.collection)
            writer.string(item.key)
            switch before?.stored {
            case .value(let data)?:
                writer.byte(1)
                writer.string(before!.group)
                writer.data(data)
            case .sortKey(let bytes)?:
                writer.byte(2)
                writer.string(before!.group)
                writer.data(Data(bytes))
            case nil:
                writer.byte(0)
            }
        }
    }

    static func decode(from reader: inout HistoryReader) throws(HistoryReader.Failure) -> ViewCommitRecord {
        var touched: [ViewItem: Before?] = [:]
        let count = try reader.count()
        touched.reserveCapacity(count)
        for _ in 0..<count {
            let item = ViewItem(collection: try reader.string(), key: try reader.string())
            switch try reader.byte() {
            case 0: touched[item] = .some(nil)
            case 1: touched[item] = Before(group: try reader.string(), stored: .value(try reader.data()))
            case 2:
                touched[item] = Before(
                    group: try reader.string(), stored: .sortKey([UInt8](try reader.data())))
            case let flag: throw HistoryReader.Failure("a view item has flag \(flag)")
            }
        }
        return ViewCommitRecord(touched: touched)
    }

    /// The view's record of a commit from what the changeset holds under the view's name: the
    /// record itself (made in this process), or decoded from the bytes the history holds. `nil`
    /// for a record of another tag (a newer version's), which the view cannot read: its readers
    /// reload (``ViewReader/requiresReload(for:)``).
    ///
    /// - Throws: ``HistoryReader/Failure`` for bytes that are not a view's record.
    static func from(_ record: any ExtensionRecord) throws(HistoryReader.Failure) -> ViewCommitRecord? {
        if let record = record as? ViewCommitRecord { return record }
        guard let stored = record as? StoredExtensionRecord, stored.historyTag == tag else { return nil }
        // (`withUnsafeBytes` rethrows untyped errors: the outcome comes out as a `Result`.)
        let outcome = stored.payload.withUnsafeBytes {
            bytes -> Result<ViewCommitRecord, HistoryReader.Failure> in
            var reader = HistoryReader(bytes)
            do throws(HistoryReader.Failure) {
                let decoded = try decode(from: &reader)
                guard reader.isAtEnd else {
                    throw HistoryReader.Failure("extra bytes after the view's record")
                }
                return .success(decoded)
            } catch {
                return .failure(error)
            }
        }
        return try outcome.get()
    }

    /// Whether a view can read `record` (no record at all: nothing to read, and nothing missed).
    static func isReadable(_ record: (any ExtensionRecord)?) -> Bool {
        guard let record, !(record is ViewCommitRecord) else { return true }
        return (record as? StoredExtensionRecord)?.historyTag == tag
    }
}
