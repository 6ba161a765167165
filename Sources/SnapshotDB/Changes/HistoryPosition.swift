internal import Foundation
internal import Logging

/// A place in one database file's durable history, to save and resume from after a restart or
/// in another process: "every commit after this one".
///
/// A position names the file's identity (drawn when the file was created), a commit number,
/// and the random token that commit's history row holds. So a position is never taken for
/// another history silently: from another file, or from a copy of this file that went back to
/// an older commit (a backup or a replica restored over it) and went on with other commits,
/// ``ReadTransaction/changes(after:)-(HistoryPosition)`` throws
/// ``DatabaseError/Code/historyMismatch``. A restored copy that still holds the position's
/// commit (the same row, the same token) continues from it correctly.
///
/// Its ``description`` is a stable text form (`snapshotdb1:<identity>:<commit>:<token>`, hex
/// numbers) that ``init(_:)`` reads back; it is also `Codable`.
///
/// ```swift
/// let saved = try reader.read { try $0.position() }
/// // … after a restart:
/// let missed = try reader.read { try $0.changes(after: saved) }
/// ```
public struct HistoryPosition: Sendable, Hashable, Codable, LosslessStringConvertible {
    /// The identity of the database file the position belongs to, as the snapshot it was taken
    /// in read it: ``Database/identity``, unless another file was restored over the open one
    /// since the open.
    public let databaseIdentity: UInt64
    /// The commit: the changes after it are the ones not yet seen.
    public let commit: UInt64
    /// The random token of the commit's history row.
    public let token: UInt64

    init(databaseIdentity: UInt64, commit: UInt64, token: UInt64) {
        self.databaseIdentity = databaseIdentity
        self.commit = commit
        self.token = token
    }

    /// The text form, `snapshotdb1:<identity>:<commit>:<token>`.
    public var description: String {
        "snapshotdb1:\(String(databaseIdentity, radix: 16)):\(commit):\(String(token, radix: 16))"
    }

    /// Reads the text form of ``description``; `nil` for anything else (see
    /// ``init(parsing:)`` for why).
    public init?(_ description: String) {
        // The reason of a failure is `init(parsing:)`'s to give; this form answers only `nil`.
        guard let position = try? Self(parsing: description) else { return nil }
        self = position
    }

    /// Reads the text form of ``description`` (`snapshotdb1:IDENTITY:COMMIT:TOKEN`, identity and
    /// token in hexadecimal), saying what is wrong with anything else.
    ///
    /// ```swift
    /// let saved = try HistoryPosition(parsing: String(contentsOf: positionFile, encoding: .utf8))
    /// ```
    ///
    /// - Throws: `misuse` naming the part that is missing or not a number (a file cut short by a
    ///   crash while it was written is the usual cause), with the text quoted.
    public init(parsing description: String) throws(DatabaseError) {
        let text = description.trimmingCharacters(in: .whitespacesAndNewlines)
        let quoted = QuotedInput.quote(text)
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.first == "snapshotdb1" else {
            throw DatabaseError(
                .misuse, "\(quoted) is not a history position: it does not begin with 'snapshotdb1:'")
        }
        guard parts.count == 4 else {
            throw DatabaseError(
                .misuse,
                "\(quoted) is not a whole history position: it has \(parts.count) of its 4 parts "
                    + "(snapshotdb1:IDENTITY:COMMIT:TOKEN); a file written when the process stopped may be cut short"
            )
        }
        func number(_ part: Substring, _ what: String, radix: Int) throws(DatabaseError) -> UInt64 {
            guard let value = UInt64(part, radix: radix) else {
                throw DatabaseError(
                    .misuse, "\(quoted) is not a history position: its \(what) '\(part)' is not a number")
            }
            return value
        }
        self.init(
            databaseIdentity: try number(parts[1], "identity", radix: 16),
            commit: try number(parts[2], "commit", radix: 10), token: try number(parts[3], "token", radix: 16)
        )
    }
}

extension ReadTransaction {
    /// The changesets of every commit after `commit` up to this transaction's ``commit``, read
    /// from the durable history in this transaction's snapshot: the same changesets, with the
    /// same keys, `info`, connection names and view records, whichever process made them and
    /// whether or not this process was running then.
    ///
    /// Costs O(changesets returned): the history is keyed by commit number.
    ///
    /// - Throws: ``DatabaseError/Code/historyUnavailable`` when the history no longer reaches
    ///   back to `commit` (purged, or before the file's upgrade to durable history), naming the
    ///   range, or (on a read replica) when `commit` is after the newest commit the replica
    ///   holds yet; ``DatabaseError/Code/historyMismatch`` when `commit` is after the newest
    ///   commit of the file (the position is not of this file's history); `corrupt` naming the commit
    ///   whose history row a foreign client damaged; `transactionEnded` after the closure
    ///   returned.
    public func changes(after commit: UInt64) throws(DatabaseError) -> [Changeset] {
        try changes(after: commit, limit: .max)
    }

    /// The first `limit` changesets after `commit` (a consumer's batch: it reads that many rows).
    func changes(after commit: UInt64, limit: Int) throws(DatabaseError) -> [Changeset] {
        try checkActive()
        let handle = try core.handle()
        try checkReachable(commit, handle: handle)
        return try History.changesets(
            after: commit, through: self.commit, limit: limit, on: handle, path: core.database.path)
    }

    /// The changesets of every commit after `position`, as ``changes(after:)-(UInt64)``, once
    /// the position is proven to belong to this file's history.
    ///
    /// - Throws: ``DatabaseError/Code/historyMismatch`` for a position of another file, or of a
    ///   commit this file's history does not hold (an older copy was put back and went on);
    ///   otherwise what ``changes(after:)-(UInt64)`` throws.
    public func changes(after position: HistoryPosition) throws(DatabaseError) -> [Changeset] {
        try checkActive()
        let handle = try core.handle()
        try check(position, handle: handle)
        return try History.changesets(
            after: position.commit, through: commit, on: handle, path: core.database.path)
    }

    /// This transaction's ``commit`` as a position to save (see ``HistoryPosition``).
    public func position() throws(DatabaseError) -> HistoryPosition {
        try checkActive()
        let handle = try core.handle()
        guard let token = try History.token(of: commit, on: handle),
            let identity = try History.identity(on: handle)
        else {
            throw Schema.damagedMetadata(path: core.database.path)
        }
        // The snapshot's identity, not the one read at the open: another file restored over this
        // one since is another database, and its positions are its own.
        return HistoryPosition(databaseIdentity: identity, commit: commit, token: token)
    }

    /// Throws unless the history of this snapshot holds every commit after `commit`.
    func checkReachable(_ commit: UInt64, handle: SQLiteHandle) throws(DatabaseError) {
        let path = core.database.path
        if commit > self.commit {
            // A newer snapshot may hold it (this one is a bookmark, or another process committed
            // since this transaction began); the file does not.
            let newest = core.database.newestCommitInFile(atLeast: commit)
            // A database that does not write its file (a replica) trails the one that does: a
            // commit it has not reached may be one it has not replicated yet. Whether it belongs
            // to this history is known once it has.
            if commit > newest, !core.database.role.writesTheFile {
                throw DatabaseError(
                    .historyUnavailable,
                    "commit \(commit) is after the newest commit the replica \(path) holds (\(newest)): it may "
                        + "not be replicated yet; advance once the replica has caught up")
            }
            guard commit <= newest else {
                throw DatabaseError(
                    .historyMismatch,
                    "commit \(commit) is after the newest commit of \(path) (\(newest)): "
                        + "it belongs to another history (another file, or a copy that went further)")
            }
            throw DatabaseError(
                .historyUnavailable,
                "commit \(commit) is after this transaction's commit \(self.commit); read it in a newer snapshot "
                    + "(advance the bookmark)")
        }
        let floor = try History.floor(on: handle)
        guard commit >= floor else {
            throw DatabaseError(
                .historyUnavailable,
                "the history of \(path) holds the commits after \(floor) only: the changes of commits "
                    + "\(commit + 1)...\(floor) were purged or predate the history")
        }
    }

    /// Throws unless `position` belongs to this file's history, as this snapshot holds it.
    func check(_ position: HistoryPosition, handle: SQLiteHandle) throws(DatabaseError) {
        let path = core.database.path
        guard let identity = try History.identity(on: handle) else {
            throw Schema.damagedMetadata(path: path)
        }
        guard position.databaseIdentity == identity else {
            throw DatabaseError(
                .historyMismatch,
                "the position \(position) belongs to another database file (identity "
                    + "\(String(position.databaseIdentity, radix: 16)); \(path) has \(String(identity, radix: 16)))"
            )
        }
        try checkReachable(position.commit, handle: handle)
        guard let token = try History.token(of: position.commit, on: handle), token == position.token else {
            throw DatabaseError(
                .historyMismatch,
                "commit \(position.commit) of \(path) is not the commit the position \(position) was taken at: "
                    + "an older copy of the file was put back (or restored) and went on with other commits")
        }
    }
}

extension Database {
    /// The newest commit of the file, for a commit number after this process's snapshots: this
    /// process's published commit when it reaches `commit`, else the counter of the file's newest
    /// snapshot, read on a short-lived handle (another process may have committed since this
    /// process last looked; only a position that does not belong to this history comes here).
    func newestCommitInFile(atLeast commit: UInt64) -> UInt64 {
        let published = latestCommit
        guard commit > published else { return published }
        do throws(DatabaseError) {
            let handle = try SQLiteHandle(path: fileName, readOnly: true, vfs: vfsName)
            let state = try handle.readCommitState()
            return max(published, state.commit)
        } catch {
            // With the published commit as the answer, the caller on a primary calls the position
            // another history's (`historyMismatch`): warn. On a replica it says "not replicated
            // yet", which is true while its VFS catches up: debug.
            logger.log(
                level: role.writesTheFile ? .warning : .debug,
                "could not read the newest commit of the file (\(error)): commit \(commit) is taken to be after it (this process published \(published))",
                metadata: ["position_commit": "\(commit)"])
            return published
        }
    }
}
