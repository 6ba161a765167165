internal import SnapshotDB
internal import SnapshotDBInspection

/// Who holds the WAL's write and checkpoint locks at this moment, for the report of a writer
/// that gave up waiting for them (`busy` after the busy timeout): a process that held the write
/// lock that long (a checkpoint waiting for readers, Litestream's or ours) is then named, and a
/// writer starved by the others' turns shows other writers, or no one.
enum LockReport {
    /// "; WAL locks now: write: 1234 (litestream); checkpoint: free", or "" when `error` is not
    /// `busy` or the locks cannot be read.
    static func describe(after error: any Error, databaseAt path: String) -> String {
        guard (error as? DatabaseError)?.code == .busy,
            let locks = try? SnapshotDBInspector.probeLocks(databaseAt: path)
        else { return "" }
        let parts = [WALIndexLock.write, .checkpoint].map { lock in
            let holders = locks.holders(of: lock).map { holder in
                "\(holder.pid.map(String.init) ?? "?") (\(holder.processName ?? "?"))"
            }
            return "\(lock): " + (holders.isEmpty ? "free" : holders.joined(separator: ", "))
        }
        return "; WAL locks now: " + parts.joined(separator: "; ")
    }
}
