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
    /// Where the record's commit log pin is kept with every other connection's, moved under
    /// this record's lock.
    private let pins: CommitLogPins
    /// Told when the oldest pin of every connection moved forward or went away: the commit log
    /// may shrink.
    private let oldestPinMoved: @Sendable () -> Void

    init(id: Int, name: String, pins: CommitLogPins, oldestPinMoved: @escaping @Sendable () -> Void) {
        self.id = id
        self.name = name
        self.pins = pins
        self.oldestPinMoved = oldestPinMoved
        state = Mutex(SnapshotRecord(name: name))
    }

    /// A copy of what the record says now.
    var current: SnapshotRecord { state.withLock { $0 } }

    /// The commit the connection's bookmark reads, or `nil` without a bookmark.
    var bookmark: UInt64? {
        state.withLock { $0.isBookmark ? $0.snapshot : nil }
    }

    /// Changes the record; moves its commit log pin with it.
    ///
    /// The pin moves under the record's lock, so that two moves of one record reach
    /// ``CommitLogPins`` in the order they were made.
    func update<T>(_ body: (inout SnapshotRecord) -> T) -> T {
        let (result, oldestMoved) = state.withLock { record in
            let before = record.retired ? nil : record.commitLogPin
            let result = body(&record)
            let after = record.retired ? nil : record.commitLogPin
            return (result, pins.move(from: before, to: after))
        }
        if oldestMoved { oldestPinMoved() }
        return result
    }

    /// Takes the record's pin out of ``CommitLogPins`` for good: its connection is gone (a
    /// reseat queued before may still update the record, and pins nothing then).
    func retire() {
        update { $0.retired = true }
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
    /// Set when the connection was released: the record pins nothing any more.
    var retired = false
    /// Whether the connection's bookmark keeps the commit log's changesets for its next advance;
    /// not a live view's (``Connection/stopsPinningCommitLog()``).
    var pinsCommitLog = true

    init(name: String) { self.name = name }

    /// The oldest commit whose changeset this connection may still ask the commit log for.
    var commitLogPin: UInt64? {
        guard pinsCommitLog else { return nil }
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
            let record = ConnectionRecord(id: id, name: name, pins: commitLogPins) {
                database.database?.oldestCommitLogPinMoved()
            }
            state.connections[record.id] = record
            return record
        }
    }

    func unregisterConnection(_ id: Int) {
        state.withLock { $0.connections.removeValue(forKey: id) }?.retire()
    }

    /// The newest commit and a copy of every connection's record.
    func snapshotRecords() -> (latest: UInt64, records: [SnapshotRecord]) {
        let records = state.withLock { Array($0.connections.values) }.map(\.current)
        debugCounters.count(.connectionRecordVisits, records.count)
        // Read after the records: a snapshot a record shows was published before it was
        // recorded, so the newest commit read now is at least every record's.
        let latest = commitLog.latestCommit
        return (max(latest, records.compactMap(\.snapshot).max() ?? 0), records)
    }
}
