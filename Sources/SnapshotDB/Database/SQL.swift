/// The SQL that SnapshotDB runs on hot paths, prepared once per connection.
///
/// Table and column names are fixed here; keys, collections and values are always bound as
/// parameters, never spliced into SQL text.
enum SQL: Int, CaseIterable {
    case readState
    case fixSnapshot
    case writeHistory
    case readHistory
    case historyFloor
    case historyToken
    case foreignChanges
    case clearForeignChanges
    case sealExternal
    case getData
    /// The same query as `getData`, for reads that hold their row while the caller's code runs
    /// (``ReadTransaction/withUnsafeBytes(forKey:inCollection:_:)``): a point read inside that
    /// code then runs `getData` without resetting the held row.
    case getDataInPlace
    case exists
    case upsert
    case delete
    case deleteCollection
    case deleteAll
    case keys
    /// At most `?3` keys of collection `?1` after key `?2`, in order: a batch of a walk that
    /// holds no statement open between batches (``ReadTransaction/forEachBatch(inCollection:as:batchSize:_:)``).
    case keysAfter
    /// The first batch of that walk: at most `?3` keys of collection `?1` from key `?2` (the
    /// empty key, which sorts before every other).
    case keysFrom
    case count
    case collections
    case enumerate
    case enumerateAll
    case getMetadata
    case setMetadata
    case upsertWithMetadata
    case begin
    case beginImmediate
    case commit
    case rollback

    var text: String {
        switch self {
        case .readState:
            // One step reads the commit counter and its row's token (the newest history row:
            // one seek down the right edge of its b-tree) and whether foreign writes are still
            // unsealed. NOT INDEXED: the meta rows sit in the table's one page, and scanning it
            // spares a read of the name index's page, which after another connection's commit
            // (SQLite then drops its page cache) is a read from the WAL or the file. No row for
            // an empty history (damaged metadata); no join, which SQLite would materialize.
            return """
                SELECT number,
                       (SELECT value FROM snapshotdb_meta NOT INDEXED WHERE name = 'external')
                     - (SELECT value FROM snapshotdb_meta NOT INDEXED WHERE name = 'external_sealed'),
                       token
                FROM snapshotdb_history ORDER BY number DESC LIMIT 1
                """
        case .fixSnapshot:
            // Reads one field of page 1, which every transaction reads anyway: the cheapest
            // statement that starts the read transaction and so fixes its snapshot.
            return "PRAGMA schema_version"
        case .writeHistory:
            return """
                INSERT INTO snapshotdb_history(number, kind, date, process, connection, token, info, changes)
                VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                """
        case .readHistory:
            return """
                SELECT number, kind, date, process, connection, info, changes, token FROM snapshotdb_history
                WHERE number > ?1 AND number <= ?2 ORDER BY number LIMIT ?3
                """
        // A row a foreign client numbered below zero is no commit (the purge removes it).
        case .historyFloor: return "SELECT min(number) FROM snapshotdb_history WHERE number >= 0"
        case .historyToken: return "SELECT token FROM snapshotdb_history WHERE number = ?1"
        case .foreignChanges:
            return """
                SELECT f.collection, f.key, v.collection IS NOT NULL FROM snapshotdb_foreign_changes AS f
                LEFT JOIN snapshotdb_values AS v ON v.collection = f.collection AND v.key = f.key
                ORDER BY f.collection, f.key
                """
        case .clearForeignChanges: return "DELETE FROM snapshotdb_foreign_changes"
        case .sealExternal:
            return """
                UPDATE snapshotdb_meta SET value = (SELECT value FROM snapshotdb_meta
                WHERE name = 'external') WHERE name = 'external_sealed'
                """
        case .getData, .getDataInPlace:
            return "SELECT data FROM snapshotdb_values WHERE collection = ?1 AND key = ?2"
        case .exists: return "SELECT 1 FROM snapshotdb_values WHERE collection = ?1 AND key = ?2"
        case .upsert:
            return """
                INSERT INTO snapshotdb_values(collection, key, data) VALUES (?1, ?2, ?3)
                ON CONFLICT(collection, key) DO UPDATE SET data = excluded.data
                """
        case .delete: return "DELETE FROM snapshotdb_values WHERE collection = ?1 AND key = ?2"
        case .deleteCollection: return "DELETE FROM snapshotdb_values WHERE collection = ?1"
        case .deleteAll: return "DELETE FROM snapshotdb_values"
        case .keys: return "SELECT key FROM snapshotdb_values WHERE collection = ?1 ORDER BY key"
        case .keysAfter:
            return
                "SELECT key FROM snapshotdb_values WHERE collection = ?1 AND key > ?2 ORDER BY key LIMIT ?3"
        case .keysFrom:
            return
                "SELECT key FROM snapshotdb_values WHERE collection = ?1 AND key >= ?2 ORDER BY key LIMIT ?3"
        case .count: return "SELECT count(*) FROM snapshotdb_values WHERE collection = ?1"
        case .collections: return "SELECT DISTINCT collection FROM snapshotdb_values ORDER BY collection"
        case .enumerate:
            return "SELECT key, data FROM snapshotdb_values WHERE collection = ?1 ORDER BY key"
        case .enumerateAll:
            return "SELECT collection, key, data FROM snapshotdb_values ORDER BY collection, key"
        case .getMetadata: return "SELECT metadata FROM snapshotdb_values WHERE collection = ?1 AND key = ?2"
        case .setMetadata:
            return "UPDATE snapshotdb_values SET metadata = ?3 WHERE collection = ?1 AND key = ?2"
        case .upsertWithMetadata:
            return """
                INSERT INTO snapshotdb_values(collection, key, data, metadata) VALUES (?1, ?2, ?3, ?4)
                ON CONFLICT(collection, key) DO UPDATE SET data = excluded.data, metadata = excluded.metadata
                """
        case .begin: return "BEGIN DEFERRED"
        case .beginImmediate: return "BEGIN IMMEDIATE"
        case .commit: return "COMMIT"
        case .rollback: return "ROLLBACK"
        }
    }
}
