internal import SnapshotDBLocking

internal import struct Synchronization.Atomic

/// Where one connection's snapshot is recorded: the one place that says which commit the
/// connection reads, whether that is a bookmark, and which commits it still has to be told
/// about.
///
/// The connection writes it (on its own queue); the database's registry only reads it, for the
/// checkpoint monitor (which names the connections that pin the WAL), for the WAL reset (which
/// takes bookmarks again at the same commit) and for the commit log's retention. Each record
/// has its own lock, so a transaction that records its snapshot takes no database-wide lock.
final class ConnectionRecord: Sendable {
    /// The next connection id of the process.
    static let nextID = Atomic<Int>(1)
    let id: Int
    let name: String
    private let state: Mutex<SnapshotRecord>
    /// Told when the commit log pin of the record moves (see ``SnapshotRecord/commitLogPin``).
    private let pinMoved: @Sendable (_ from: UInt64?, _ to: UInt64?) -> Void

    init(id: Int, name: String, pinMoved: @escaping @Sendable (_ from: UInt64?, _ to: UInt64?) -> Void) {
        self.id = id
        self.name = name
        self.pinMoved = pinMoved
        state = Mutex(SnapshotRecord(name: name))
    }

    /// A copy of what the record says now.
    var current: SnapshotRecord { state.withLock { $0 } }

    /// The record's commit log pin (``SnapshotRecord/commitLogPin``), read without copying the
    /// rest of the record (its name and the weak reference to its connection cost a scan of
    /// every connection more than the pins themselves).
    var commitLogPin: UInt64? { state.withLock { $0.commitLogPin } }

    /// The commit the connection's bookmark reads, or `nil` without a bookmark.
    var bookmark: UInt64? {
        state.withLock { $0.isBookmark ? $0.snapshot : nil }
    }

    /// Changes the record; tells the database when its commit log pin moved.
    func update<T>(_ body: (inout SnapshotRecord) -> T) -> T {
        let (result, before, after) = state.withLock { record in
            let before = record.commitLogPin
            let result = body(&record)
            return (result, before, record.commitLogPin)
        }
        if before != after { pinMoved(before, after) }
        return result
    }
}

/// What a ``ConnectionRecord`` holds: a plain value, copied out for the monitor.
struct SnapshotRecord: Sendable {
    let name: String
    /// The commit the connection's open read transaction (bookmark or ordinary) sees.
    var snapshot: UInt64?
    /// The commit of the connection's last transaction or bookmark.
    var lastSnapshot: UInt64 = 0
    /// Whether `snapshot` is a bookmark (a long-lived read transaction).
    var isBookmark = false
    /// When the current snapshot was taken.
    var since: ContinuousClock.Instant?
    /// The newest commit whose changeset an advance handed to the app (or the first bookmark's
    /// commit), kept while the connection is in long-lived-read mode, even when its last
    /// advance failed or its bookmark was lost: the next advance returns every commit after it.
    /// It pins the commit log, so those changesets are still there to return.
    var deliveredThrough: UInt64?
    /// Whether the bookmark was released because it could not be taken again at its commit
    /// (see ``ConnectionCore/reseatBookmark(at:)``); the connection's next read says so.
    var bookmarkLost = false
    /// The count of foreign writes not yet sealed that the bookmark's snapshot holds, so that
    /// an advance that finds the same ones does not report them twice.
    var bookmarkUnsealed: Int64 = 0
    /// Whether the bookmark's snapshot holds foreign writes not numbered yet
    /// (``ReadTransaction/hasUnnumberedForeignWrites``).
    var bookmarkUnnumbered = false
    /// The connection, so that the checkpointer can ask a bookmark to re-take its snapshot.
    weak var connection: Connection?

    init(name: String) { self.name = name }

    /// The oldest commit whose changeset this connection may still ask the commit log for.
    var commitLogPin: UInt64? {
        let bookmark = isBookmark ? snapshot : nil
        switch (bookmark, deliveredThrough) {
        case (let bookmark?, let delivered?): return min(bookmark, delivered)
        case (let bookmark?, nil): return bookmark
        case (nil, let delivered?): return delivered
        case (nil, nil): return nil
        }
    }
}

extension Database {
    /// Registers a new connection's record and returns it.
    func registerConnection(name: String) -> ConnectionRecord {
        let database = WeakDatabase(self)
        // Unique in the process, not only in this database: the misuse check of nested calls
        // (`ActiveConnections`) tells connections of every database apart by id.
        let id = ConnectionRecord.nextID.wrappingAdd(1, ordering: .relaxed).oldValue
        return state.withLock { state in
            let record = ConnectionRecord(id: id, name: name) { from, to in
                database.database?.commitLogPinMoved(from: from, to: to)
            }
            state.connections[record.id] = record
            return record
        }
    }

    func unregisterConnection(_ id: Int) {
        let removed = state.withLock { $0.connections.removeValue(forKey: id) }
        if let pin = removed?.commitLogPin { commitLogPinMoved(from: pin, to: nil) }
    }

    /// The newest commit and a copy of every connection's record.
    func snapshotRecords() -> (latest: UInt64, records: [SnapshotRecord]) {
        let records = state.withLock { Array($0.connections.values) }.map(\.current)
        // Read after the records: a snapshot a record shows was published before it was
        // recorded, so the newest commit read now is at least every record's.
        let latest = commitLog.latestCommit
        return (max(latest, records.compactMap(\.snapshot).max() ?? 0), records)
    }
}
