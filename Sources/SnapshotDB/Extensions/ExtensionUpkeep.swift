internal import Foundation
internal import SnapshotDBLocking

internal import struct Synchronization.Atomic

/// Which extensions the file holds that this process does not keep, so that a write by a
/// process that does not maintain an extension never leaves it stale silently.
///
/// The file knows its extensions: `snapshotdb_extensions` (name, kind, version) and
/// `snapshotdb_extension_state` (the collections each derives from, who registered it, and
/// whether a write left it stale). At the start of each write transaction the writer compares
/// that catalog with this process's registry (cached until the schema changes: registering,
/// re-registering and unregistering all create or drop tables, so `PRAGMA schema_version`
/// moves with every change of the catalog's names and versions; one read of page 1 when it did
/// not):
///
/// - an extension registered here in another version than the file's (another process
///   registered its own since) is not written: its writer would write its own rows into the
///   other version's tables;
/// - an extension the file holds and this process does not keep (not registered, or in another
///   version) is marked *stale* by any commit that changes its collections, in the commit's own
///   transaction, naming the commit, the process and the connection. Readers then get
///   ``DatabaseError/Code/extensionStale``, and the next process that registers it rebuilds it.
///
/// Why mark instead of keep: the extension's closures (grouping, sorting, the indexed columns)
/// live only in the processes that registered it; the file holds its rows, not its code.
struct ExtensionUpkeep {
    /// Extensions of the file that this process does not keep: a commit that changes their
    /// collections marks them stale.
    var unmaintained: [ExtensionCatalogEntry] = []
    /// Extensions registered here that this transaction must not write (the file holds another
    /// version, or none).
    var excluded: Set<String> = []
    /// The registered extensions this transaction keeps (not `excluded`), dependencies first
    /// (``Database/extensionDefinitions()``): found with the rest, under one lock, so that the
    /// transaction's extension writers need not take it again.
    var maintained: [any ExtensionDefinition] = []

    static let none = ExtensionUpkeep()
}

/// One extension the file holds.
struct ExtensionCatalogEntry: Sendable {
    let name: String
    let kind: String
    let version: String
    /// The collections it derives from; `nil` for every collection (or unknown: an extension
    /// recorded before its collections were).
    let collections: Set<String>?

    func observesAny(of changed: Set<String>, clearedAll: Bool) -> Bool {
        guard let collections, !clearedAll else { return true }
        return !collections.isDisjoint(with: changed)
    }
}

/// The file's extension catalog as this process last read it, keyed by the schema version it
/// was read at, and the upkeep last derived from it, keyed by that and the registry's
/// generation (``DatabaseState/extensionGeneration``): a write transaction whose file and
/// registry did not change since the last one reuses both.
final class ExtensionCatalogCache: Sendable {
    private struct Cached {
        var schemaVersion: Int64
        var entries: [ExtensionCatalogEntry]
        var upkeep: (generation: UInt64, upkeep: ExtensionUpkeep)?
    }

    private let cached = Mutex<Cached?>(nil)

    /// The catalog in the open transaction on `handle` and the schema version it was read at
    /// (again only when that changed), with the upkeep derived from it for registry
    /// `generation`, if any.
    ///
    /// A schema that changed is also checked whole again (``Schema/checkIntact(_:path:version:)``,
    /// a few reads of the schema table): a foreign client that dropped a trigger or a table
    /// while this process runs makes its writes throw `corrupt`, as the open would, instead of
    /// going on while foreign writes go unseen.
    func entries(on handle: SQLiteHandle, generation: UInt64, path: String) throws(DatabaseError)
        -> (entries: [ExtensionCatalogEntry], schemaVersion: Int64, upkeep: ExtensionUpkeep?)
    {
        let version = try handle.int64Statement(.fixSnapshot)
        if let cached = cached.withLock({ $0 }), cached.schemaVersion == version {
            let upkeep = cached.upkeep.flatMap { $0.generation == generation ? $0.upkeep : nil }
            return (cached.entries, version, upkeep)
        }
        try Schema.checkIntact(handle, path: path)
        let entries = try ExtensionCatalog.entries(handle: handle)
        cached.withLock { $0 = Cached(schemaVersion: version, entries: entries) }
        return (entries, version, nil)
    }

    /// Keeps `upkeep`, derived from the catalog of `schemaVersion` and registry `generation`.
    func keep(_ upkeep: ExtensionUpkeep, generation: UInt64, schemaVersion: Int64) {
        cached.withLock { cached in
            guard cached?.schemaVersion == schemaVersion else { return }
            cached?.upkeep = (generation, upkeep)
        }
    }
}

extension Database {
    /// What the write transaction on `handle` (just begun) must not write and must mark stale.
    func extensionUpkeep(on handle: SQLiteHandle) throws(DatabaseError) -> ExtensionUpkeep {
        // The registry changes under the writer lock only, which this transaction holds: the
        // generation read without the state lock is the registry's, and a cached upkeep for it
        // needs nothing else.
        let generation = registryGeneration.load(ordering: .acquiring)
        let catalog = try extensionCatalogCache.entries(on: handle, generation: generation, path: path)
        if let cached = catalog.upkeep { return cached }
        let (registered, ordered) = state.withLock { ($0.extensions, $0.orderedExtensions) }
        var upkeep = Self.upkeep(entries: catalog.entries, registered: registered)
        upkeep.maintained = ordered.filter { !upkeep.excluded.contains($0.name) }
        extensionCatalogCache.keep(upkeep, generation: generation, schemaVersion: catalog.schemaVersion)
        return upkeep
    }

    /// What a write transaction must not write and must mark stale, when the file's catalog
    /// holds `entries` and this process registered `registered`.
    private static func upkeep(
        entries: [ExtensionCatalogEntry], registered: [String: any ExtensionDefinition]
    ) -> ExtensionUpkeep {
        guard !entries.isEmpty || !registered.isEmpty else { return .none }
        var upkeep = ExtensionUpkeep()
        var inFile: Set<String> = []
        for entry in entries {
            if let definition = registered[entry.name], definition.kind.rawValue == entry.kind,
                definition.storedVersion == entry.version
            {
                inFile.insert(entry.name)
            } else {
                upkeep.unmaintained.append(entry)
            }
        }
        upkeep.excluded = Set(registered.keys).subtracting(inFile)
        return upkeep
    }
}

extension ExtensionCatalog {
    /// The per-extension state beside the catalog (schema 3).
    static let stateTable = "snapshotdb_extension_state"

    /// Every extension the open transaction's snapshot holds, with its collections when known.
    static func entries(handle: SQLiteHandle) throws(DatabaseError) -> [ExtensionCatalogEntry] {
        let statement = try handle.cachedStatement(
            """
            SELECT e.name, e.kind, e.version, s.collections, s.name IS NOT NULL FROM snapshotdb_extensions AS e
            LEFT JOIN snapshotdb_extension_state AS s ON s.name = e.name ORDER BY e.name
            """)
        defer { statement.reset() }
        var entries: [ExtensionCatalogEntry] = []
        while try statement.step() {
            let known = statement.int64(at: 4) != 0 && !statement.isNull(at: 3)
            let collections = known ? decodeCollections(statement.string(at: 3)) : nil
            entries.append(
                ExtensionCatalogEntry(
                    name: statement.string(at: 0), kind: statement.string(at: 1),
                    version: statement.string(at: 2),
                    collections: collections))
        }
        return entries
    }

    /// Records `definition`'s collections and who registered it, clearing a stale mark.
    static func recordState(
        _ definition: any ExtensionDefinition, commit: UInt64, connection: String, handle: SQLiteHandle
    ) throws(DatabaseError) {
        let statement = try handle.cachedStatement(
            """
            INSERT OR REPLACE INTO snapshotdb_extension_state(name, collections, registered_process,
                registered_commit, registered_connection, stale_commit, stale_process, stale_connection)
            VALUES (?1, ?2, ?3, ?4, ?5, NULL, NULL, NULL)
            """)
        try statement.bind(definition.name, at: 1)
        if let collections = definition.collections {
            try statement.bind(encodeCollections(collections), at: 2)
        } else {
            try statement.bindNull(at: 2)
        }
        try statement.bind(Int64(History.processID), at: 3)
        try statement.bind(Int64(bitPattern: commit), at: 4)
        try statement.bind(connection, at: 5)
        try statement.execute()
    }

    static func forgetState(_ name: String, handle: SQLiteHandle) throws(DatabaseError) {
        let statement = try handle.cachedStatement("DELETE FROM snapshotdb_extension_state WHERE name = ?1")
        try statement.bind(name, at: 1)
        try statement.execute()
    }

    /// Marks `name` stale by `commit` of this process's `connection`, unless it is already;
    /// returns whether it was not stale before.
    @discardableResult
    static func markStale(_ name: String, commit: UInt64, connection: String?, handle: SQLiteHandle)
        throws(DatabaseError) -> Bool
    {
        let statement = try handle.cachedStatement(
            """
            INSERT INTO snapshotdb_extension_state(name, stale_commit, stale_process, stale_connection)
            VALUES (?1, ?2, ?3, ?4)
            ON CONFLICT(name) DO UPDATE SET stale_commit = excluded.stale_commit,
                stale_process = excluded.stale_process, stale_connection = excluded.stale_connection
            WHERE stale_commit IS NULL
            """)
        try statement.bind(name, at: 1)
        try statement.bind(Int64(bitPattern: commit), at: 2)
        try statement.bind(Int64(History.processID), at: 3)
        if let connection { try statement.bind(connection, at: 4) } else { try statement.bindNull(at: 4) }
        try statement.execute()
        return handle.changes > 0
    }

    /// What the file says of `name` beside its version: who registered it, and who left it stale.
    struct State {
        var registeredProcess: Int64?
        var registeredCommit: UInt64?
        var registeredConnection: String?
        var staleCommit: UInt64?
        var staleProcess: Int64?
        var staleConnection: String?
    }

    static func state(_ name: String, handle: SQLiteHandle) throws(DatabaseError) -> State? {
        let statement = try handle.cachedStatement(
            """
            SELECT registered_process, registered_commit, registered_connection, stale_commit, stale_process,
                stale_connection FROM snapshotdb_extension_state WHERE name = ?1
            """)
        defer { statement.reset() }
        try statement.bind(name, at: 1)
        guard try statement.step() else { return nil }
        func integer(_ column: Int32) -> Int64? {
            statement.isNull(at: column) ? nil : statement.int64(at: column)
        }
        func text(_ column: Int32) -> String? {
            statement.isNull(at: column) ? nil : statement.string(at: column)
        }
        return State(
            registeredProcess: integer(0), registeredCommit: integer(1).map { UInt64(bitPattern: $0) },
            registeredConnection: text(2), staleCommit: integer(3).map { UInt64(bitPattern: $0) },
            staleProcess: integer(4), staleConnection: text(5))
    }

    private static func encodeCollections(_ collections: Set<String>) -> String {
        // An array of strings always encodes (`JSONEncoder` fails on non-finite numbers and on
        // values that throw): the fallback is never taken.
        let data = (try? JSONEncoder().encode(collections.sorted())) ?? Data("[]".utf8)
        return String(decoding: data, as: UTF8.self)
    }

    private static func decodeCollections(_ text: String) -> Set<String>? {
        // Text SnapshotDB did not write (a foreign client's) reads as `nil`, every collection: the
        // safe reading, under which a registration rebuilds the extension and any write by a
        // process that does not keep it marks it stale.
        (try? JSONDecoder().decode([String].self, from: Data(text.utf8))).map(Set.init)
    }
}
