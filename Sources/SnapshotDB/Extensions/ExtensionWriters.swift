internal import Foundation
internal import SnapshotDBLocking

internal import struct Synchronization.Atomic

/// The writers of the extensions one read-write transaction keeps up to date, made on first
/// use, and what they add to the commit's changeset.
///
/// Shared by the transaction and its savepoints. Costs nothing while no extension is
/// registered (one atomic load per write).
final class ExtensionWriters {
    private let core: ConnectionCore
    /// The transaction these writers serve (its reads use the connection's value cache).
    weak var transaction: ReadTransaction?
    private var definitions: [any ExtensionDefinition]?
    /// Registered extensions this transaction must not write: the file holds another version
    /// of them, or none (see ``ExtensionUpkeep``).
    var excluded: Set<String> = []

    /// What the transaction keeps and must not write, as the writer found it when it began.
    func keep(_ upkeep: ExtensionUpkeep) {
        excluded = upkeep.excluded
        definitions = upkeep.maintained
    }
    private var writers: [String: any ExtensionWriter] = [:]
    private var reset: Set<String> = []
    /// How many savepoints are open: a writer made inside them starts with as many saved
    /// states (its state when made, which is what each of them began with).
    private var savepointDepth = 0

    init(core: ConnectionCore) { self.core = core }

    /// Whether an extension was built or dropped: such a transaction commits even when it
    /// changed no value. (Writes that change values commit anyway.)
    var hasChanges: Bool { !reset.isEmpty }

    /// The writers of the registered extensions that observe `collection` (every one for `nil`).
    private func writers(for collection: String?) throws(DatabaseError) -> [any ExtensionWriter] {
        guard core.database.extensionCount.load(ordering: .acquiring) > 0 else { return [] }
        if definitions == nil {
            definitions = core.database.extensionDefinitions().filter { !excluded.contains($0.name) }
        }
        guard let definitions, !definitions.isEmpty else { return [] }
        var result: [any ExtensionWriter] = []
        for definition in definitions where collection.map(definition.observes) ?? true {
            result.append(try writer(for: definition))
        }
        return result
    }

    private func writer(for definition: any ExtensionDefinition) throws(DatabaseError) -> any ExtensionWriter
    {
        if let writer = writers[definition.name] { return writer }
        let writer = definition.makeWriter(
            try core.extensionContext(named: definition.name, transaction: transaction))
        writers[definition.name] = writer
        for _ in 0..<savepointDepth { writer.beginSavepoint() }
        return writer
    }

    /// A hook that failed, and whether extensions may have changed rows before it did.
    struct HookFailure: Error {
        let error: DatabaseError
        /// `false` only when the first writer refused a value it cannot decode: each writer
        /// decodes the value before it writes anything, so no extension changed.
        let changedRows: Bool
    }

    /// Runs `hook` on the writers of the extensions that observe `collection` (every one for
    /// `nil`); returns whether any ran.
    private func run(
        _ collection: String?, _ hook: (any ExtensionWriter) throws(DatabaseError) -> Void
    ) throws(HookFailure) -> Bool {
        let writers: [any ExtensionWriter]
        do {
            writers = try self.writers(for: collection)
        } catch {
            throw HookFailure(error: error, changedRows: false)
        }
        for (index, writer) in writers.enumerated() {
            do {
                try hook(writer)
            } catch {
                throw HookFailure(error: error, changedRows: index > 0 || error.code != .decodingFailed)
            }
        }
        return !writers.isEmpty
    }

    func willSet(_ data: Data, forKey key: String, inCollection collection: String) throws(HookFailure)
        -> Bool
    {
        try run(collection) { writer throws(DatabaseError) in
            try writer.willSet(data, forKey: key, inCollection: collection)
        }
    }

    func willRemove(forKey key: String, inCollection collection: String) throws(HookFailure) -> Bool {
        try run(collection) { writer throws(DatabaseError) in
            try writer.willRemove(forKey: key, inCollection: collection)
        }
    }

    func willRemoveAll(inCollection collection: String) throws(HookFailure) -> Bool {
        try run(collection) { writer throws(DatabaseError) in
            try writer.willRemoveAll(inCollection: collection)
        }
    }

    func willRemoveAllCollections() throws(HookFailure) -> Bool {
        try run(nil) { writer throws(DatabaseError) in try writer.willRemoveAllCollections() }
    }

    /// The extensions whose upkeep a migration deferred (``deferUpkeep()``).
    private var deferred: [any ExtensionDefinition] = []

    /// A migration begins: the extensions this transaction keeps are not kept value by value
    /// any more; the migration's end rebuilds those it touched (``endDeferredUpkeep()``).
    func deferUpkeep() {
        deferred = core.database.extensionDefinitions().filter { !excluded.contains($0.name) }
        excluded.formUnion(deferred.map(\.name))
        definitions = nil
    }

    /// A migration ended: returns the extensions whose upkeep it deferred, kept again from now.
    func endDeferredUpkeep() -> [any ExtensionDefinition] {
        defer { deferred = [] }
        excluded.subtract(deferred.map(\.name))
        definitions = nil
        return deferred
    }

    /// Fills `definition`'s new, empty tables from the values (its registration).
    func rebuild(_ definition: any ExtensionDefinition, context: ExtensionContext) throws(DatabaseError) {
        try rebuild([(definition, context)])
    }

    /// Fills the new, empty tables of several extensions from the values, in one pass over them
    /// (``rebuildTogether(_:handle:memo:)``).
    func rebuild(_ entries: [(definition: any ExtensionDefinition, context: ExtensionContext)])
        throws(DatabaseError)
    {
        definitions = nil
        var made: [any ExtensionWriter] = []
        for (definition, context) in entries {
            let writer = definition.makeWriter(context)
            writers[definition.name] = writer
            made.append(writer)
        }
        guard let first = entries.first else { return }
        try Self.rebuildTogether(made, handle: first.context.handle)
        for (definition, _) in entries {
            for _ in 0..<savepointDepth { writers[definition.name]?.beginSavepoint() }
            reset.insert(definition.name)
        }
    }

    /// Rebuilds `writers` (whose contexts share one ``DecodeMemo``, when there are several): those
    /// that can be fed, in one pass over the values, each value read once and decoded once per
    /// value type whichever extensions read it; then the others (a search-results view, which
    /// reads the full-text index the pass filled), each on its own.
    static func rebuildTogether(_ writers: [any ExtensionWriter], handle: SQLiteHandle) throws(DatabaseError)
    {
        let fed = writers.filter(\.feedsRebuild)
        if !fed.isEmpty {
            for writer in fed { try writer.beginRebuild() }
            let everything = fed.contains { $0.rebuildCollections == nil }
            let collections =
                everything ? nil : fed.reduce(into: Set<String>()) { $0.formUnion($1.rebuildCollections!) }
            let memo = fed.lazy.compactMap(\.rebuildMemo).first
            defer { memo?.end() }
            // The writers that read a collection, found once per collection (the values come
            // collection by collection), not once per value.
            var current: (collection: String, writers: [any ExtensionWriter])?
            try ExtensionContext.forEachValue(on: handle, inCollections: collections) {
                (collection, key, value) throws(DatabaseError) in
                memo?.begin(collection, key)
                if current?.collection != collection {
                    current = (collection, fed.filter { $0.rebuildCollections?.contains(collection) ?? true })
                }
                for writer in current!.writers { try writer.feedRebuild(collection, key, value) }
            }
            for writer in fed { try writer.endRebuild() }
        }
        for writer in writers where !writer.feedsRebuild { try writer.rebuild() }
    }

    /// Records that `name` was dropped in this transaction.
    func markReset(_ name: String) {
        definitions = nil
        writers[name] = nil
        reset.insert(name)
    }

    /// Writes back what the writers hold (see ``ExtensionWriter/flush()``).
    func flush() throws(DatabaseError) {
        for writer in writers.values { try writer.flush() }
    }

    /// The writer of `name` this transaction made, if any.
    func existingWriter(named name: String) -> (any ExtensionWriter)? { writers[name] }

    /// A savepoint begins: what the writers hold back goes to the rows it can roll back to,
    /// and each writer saves its state.
    func beginSavepoint() throws(DatabaseError) {
        try flush()
        savepointDepth += 1
        for writer in writers.values { writer.beginSavepoint() }
    }

    /// The innermost savepoint was released or rolled back (see
    /// ``ExtensionWriter/endSavepoint(rolledBack:)``).
    func endSavepoint(rolledBack: Bool) {
        savepointDepth -= 1
        for writer in writers.values { writer.endSavepoint(rolledBack: rolledBack) }
    }

    /// What the writers leave for the next write transaction and for readers of the commit
    /// about to be made (its ``CommitEvent`` hands it to ``ExtensionCaches``); `nil` when no
    /// extension is registered and none was dropped.
    func handOff() -> [ExtensionCaches.Written]? {
        // No extension registered and none dropped: no writer left a cache to carry forward.
        if writers.isEmpty && reset.isEmpty && core.database.extensionCount.load(ordering: .acquiring) == 0 {
            return nil
        }
        // (One array of what was written, not dictionaries and sets of it: the usual write
        // touches one extension, and building those was about 5k instructions of a one-row move
        // into a view.)
        var written: [ExtensionCaches.Written] = []
        written.reserveCapacity(writers.count + reset.count)
        for (name, writer) in writers where !reset.contains(name) {
            written.append(.init(name: name, kept: writer.keptCache(), published: writer.publishedState()))
        }
        for name in reset { written.append(.init(name: name, kept: nil, published: nil)) }
        return written
    }

    /// What the extensions add to the commit's changeset.
    func finish() throws(DatabaseError) -> ExtensionChanges {
        var changes = ExtensionChanges(reset: reset)
        for (name, writer) in writers {
            let record = try writer.finish()
            if writer.recordsReload {
                changes.reset.insert(name)
            } else if let record {
                changes.byName[name] = record
            }
        }
        return changes
    }

    /// Rebuilds every registered extension from the values, on `handle` inside an open write
    /// transaction: after foreign clients changed values without the extensions' upkeep (the
    /// writer calls this when it seals their writes).
    static func rebuildAll(_ database: Database, handle: SQLiteHandle, excluding excluded: Set<String>)
        throws(DatabaseError)
    {
        guard database.extensionCount.load(ordering: .acquiring) > 0 else { return }
        let codecs = database.frozenCodecs()
        let json = JSONValueCodec()
        let memo = DecodeMemo()
        var writers: [any ExtensionWriter] = []
        for definition in database.extensionDefinitions() where !excluded.contains(definition.name) {
            let context = ExtensionContext(handle: handle, name: definition.name, memo: memo) {
                codecs[$0] ?? json
            }
            try ExtensionCatalog.dropTables(of: definition.name, handle: handle)
            try definition.createTables(context)
            writers.append(definition.makeWriter(context))
        }
        try rebuildTogether(writers, handle: handle)
    }
}

extension ConnectionCore {
    /// The context an extension's code runs in on this connection, in `transaction`.
    func extensionContext(named name: String, transaction: ReadTransaction? = nil) throws(DatabaseError)
        -> ExtensionContext
    {
        ExtensionContext(handle: try handle(), name: name, transaction: transaction) { [unowned self] in
            self.codec(for: $0)
        }
    }
}
