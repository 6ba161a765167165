internal import Foundation
internal import SnapshotDBLocking

internal import struct Synchronization.Atomic

/// The table that records which extensions the file holds, in which version: part of every
/// snapshot, so a reader knows whether its commit has an extension.
enum ExtensionCatalog {
    static let create = """
        CREATE TABLE IF NOT EXISTS snapshotdb_extensions(
            name TEXT PRIMARY KEY NOT NULL, kind TEXT NOT NULL, version TEXT NOT NULL) WITHOUT ROWID
        """

    /// The version an app gave, of a version as the catalog stores it (the tables' format
    /// first: ``ExtensionDefinition/storedVersion``).
    static func publicVersion(_ stored: String) -> String {
        stored.split(separator: ":", maxSplits: 1).last.map(String.init) ?? stored
    }

    /// The kind and version of `name` in the open transaction's snapshot, or `nil`.
    static func installed(_ name: String, handle: SQLiteHandle) throws(DatabaseError) -> (
        kind: String, version: String
    )? {
        let statement = try handle.cachedStatement(
            "SELECT kind, version FROM snapshotdb_extensions WHERE name = ?1")
        defer { statement.reset() }
        try statement.bind(name, at: 1)
        guard try statement.step() else { return nil }
        return (statement.string(at: 0), statement.string(at: 1))
    }

    static func record(_ definition: any ExtensionDefinition, handle: SQLiteHandle) throws(DatabaseError) {
        let statement = try handle.cachedStatement(
            "INSERT OR REPLACE INTO snapshotdb_extensions(name, kind, version) VALUES (?1, ?2, ?3)")
        try statement.bind(definition.name, at: 1)
        try statement.bind(definition.kind.rawValue, at: 2)
        try statement.bind(definition.storedVersion, at: 3)
        try statement.execute()
    }

    static func forget(_ name: String, handle: SQLiteHandle) throws(DatabaseError) {
        let statement = try handle.cachedStatement("DELETE FROM snapshotdb_extensions WHERE name = ?1")
        try statement.bind(name, at: 1)
        try statement.execute()
    }

    /// Drops every table whose name starts with the extension's prefix (virtual tables first,
    /// which drop their own shadow tables), and those of the first table format.
    ///
    /// The first format's prefix could also start another extension's tables (`notes` and
    /// `notes_x`); such tables belong to a first-format extension, which is rebuilt anyway when
    /// it is registered again (its recorded version has no format tag).
    static func dropTables(of name: String, handle: SQLiteHandle) throws(DatabaseError) {
        for prefix in [ExtensionContext.tablePrefix(name), ExtensionContext.legacyTablePrefix(name)] {
            try dropTables(prefix: prefix, handle: handle)
        }
        handle.clearCachedStatements()
        ExtensionHandleCache.of(handle).tablesDropped()
    }

    private static func dropTables(prefix: String, handle: SQLiteHandle) throws(DatabaseError) {
        for virtualFirst in [true, false] {
            let list = try SQLiteStatement(
                handle: handle,
                sql: """
                    SELECT name FROM sqlite_schema WHERE type = 'table' AND substr(name, 1, ?1) = ?2
                    AND (sql LIKE 'CREATE VIRTUAL%') = ?3
                    """, persistent: false)
            try list.bind(Int64(prefix.utf8.count), at: 1)
            try list.bind(prefix, at: 2)
            try list.bind(Int64(virtualFirst ? 1 : 0), at: 3)
            var tables: [String] = []
            while try list.step() { tables.append(list.string(at: 0)) }
            list.reset()
            // The names were checked to be identifiers (`checkExtensionName`) plus our suffixes.
            for table in tables {
                let quoted = table.replacingOccurrences(of: "\"", with: "\"\"")
                try handle.execute("DROP TABLE IF EXISTS \"\(quoted)\"")
            }
        }
    }
}
