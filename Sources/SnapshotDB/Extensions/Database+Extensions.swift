internal import Foundation
internal import SnapshotDBLocking

internal import struct Synchronization.Atomic

extension Database {
    /// Registers `extension` and builds it from the values when it is new here or its version
    /// (or kind) changed; from then on every commit keeps it up to date.
    ///
    /// Registering may happen at any time: the build is a commit of its own, made by the single
    /// writer, and transactions that begin afterwards see the extension. A bookmark whose
    /// snapshot predates the registration cannot read it until it advances. Registering again
    /// under the same name and version only replaces the closures (they must compute the
    /// same thing; give them a new version when they do not).
    ///
    /// - Throws: `misuse` for a name that is not letters, digits and underscores (at most 64),
    ///   a name this process has registered an extension of another kind under, or a type that
    ///   is not one of SnapshotDB's extensions; `decodingFailed` when a stored
    ///   value is not of the extension's type; `unknownExtension` when it reads an extension
    ///   that is not registered (a search-results view's full-text index); `invalidQuery` for a
    ///   search-results view whose query is not valid FTS5; and what a write transaction throws.
    public func register(_ extension: any DatabaseExtension) throws(DatabaseError) {
        try register([`extension`])
    }

    /// On a read replica, which cannot build: takes up the extension the primary built, of the
    /// same kind and version (its tables come with the replica).
    private func adoptOnReplica(_ definition: any ExtensionDefinition, connection: Connection)
        throws(DatabaseError)
    {
        // The commit that built it on the primary, as the file records it: a bookmark older than
        // that is told to advance (see ``DatabaseState/extensionBuilds``).
        let built: UInt64?
        do {
            built = try connection.read { txn in
                try txn.checkInstalled(definition)
                return try ExtensionCatalog.state(definition.name, handle: txn.core.handle())?
                    .registeredCommit
            }
        } catch let error as DatabaseError where error.code == .extensionConflict {
            throw DatabaseError(
                .readOnly,
                "extension '\(definition.name)' is built in \(path) in another kind or version than "
                    + "\(definition.kind) version '\(definition.version)', and this open cannot build it: "
                    + role.cannotWriteReason, cause: error)
        } catch let error as DatabaseError where error.code == .unknownExtension {
            throw DatabaseError(
                .readOnly,
                "extension '\(definition.name)' is not built in \(path) (its newest commit is \(latestCommit)), "
                    + "and this open cannot build it: \(role.cannotWriteReason)", cause: error)
        } catch let error as DatabaseError {
            throw error
        } catch {
            throw DatabaseError(
                .sqlite, "registering extension '\(definition.name)' failed: \(error)", cause: error)
        }
        setExtension(definition, named: definition.name, builtAt: built)
    }

    /// Registers several extensions in one commit, and builds the new ones (or those whose
    /// version changed) together: one pass over the values, each value read once and decoded
    /// once per value type, whichever of them reads it (registering a view, an index and a
    /// full-text index of the same values one by one decodes every value three times).
    ///
    /// `extensions` may hold extensions that read others of the list (a search-results view and
    /// its full-text index): each is installed after those it reads, and builds after the pass
    /// that fills them. A registration that fails changes nothing: every extension registered
    /// under one of these names before, if any, stays.
    ///
    /// - Throws: what `register(_:)` throws, for any of them; `misuse` when two
    ///   share a name.
    public func register(_ extensions: [any DatabaseExtension]) throws(DatabaseError) {
        try checkOpen()
        var definitions: [any ExtensionDefinition] = []
        for candidate in extensions {
            guard let definition = candidate as? any ExtensionDefinition else {
                throw DatabaseError(
                    .misuse, "\(type(of: candidate)) is not an extension SnapshotDB knows how to keep")
            }
            try Self.checkExtensionName(definition.name)
            guard !definitions.contains(where: { $0.name == definition.name }) else {
                throw DatabaseError(
                    .misuse, "two extensions of one registration are named '\(definition.name)'")
            }
            // Replacing a live extension by one of another kind under its name would drop the
            // tables that this process's readers of the first one read: a name clash, not a new
            // version. (The file's extension of another kind, from an earlier run or another
            // process, is rebuilt like a new version.)
            if let registered = extensionDefinition(named: definition.name),
                registered.kind != definition.kind
            {
                throw Self.kindClash(definition, registered: registered)
            }
            definitions.append(definition)
        }
        for definition in definitions {
            for dependency in definition.dependencies
            where extensionDefinition(named: dependency) == nil
                && !definitions.contains(where: { $0.name == dependency })
            {
                throw DatabaseError(
                    .unknownExtension,
                    "extension '\(definition.name)' reads extension '\(dependency)', which is not registered; register it first"
                )
            }
        }
        // An extension another registered one reads (a search-results view its full-text index)
        // is not rebuilt or replaced under it: the reader's rows follow the old definition, and
        // it reads the tables by name. Registered together, both are rebuilt in one commit.
        for definition in definitions {
            guard let registered = extensionDefinition(named: definition.name),
                registered.kind != definition.kind || registered.storedVersion != definition.storedVersion
            else { continue }
            for dependent in extensionDefinitions()
            where dependent.dependencies.contains(definition.name)
                && !definitions.contains(where: { $0.name == dependent.name })
            {
                throw DatabaseError(
                    .misuse,
                    "extension '\(definition.name)' is read by extension '\(dependent.name)', which would keep "
                        + "following its old definition; register them together (a new version of "
                        + "'\(dependent.name)' that reads this one), or unregister '\(dependent.name)' first")
            }
        }
        // Each after those of the list it reads.
        var ordered: [any ExtensionDefinition] = []
        var remaining = definitions
        while !remaining.isEmpty {
            guard
                let next = remaining.firstIndex(where: { definition in
                    definition.dependencies.allSatisfy { dependency in
                        !remaining.contains { $0.name == dependency }
                    }
                })
            else {
                throw DatabaseError(
                    .misuse,
                    "the extensions '\(remaining.map(\.name).joined(separator: "', '"))' read each other in a circle"
                )
            }
            ordered.append(remaining.remove(at: next))
        }
        let connection = newConnection(name: "snapshotdb.extensions")
        if !role.writesTheFile {
            for definition in ordered { try adoptOnReplica(definition, connection: connection) }
            return
        }
        // A registration that fails rolls back, tables and catalog, and the registry with them,
        // under the writer lock (``ReadWriteTransaction/setRegistered(_:named:builtAt:)``).
        do {
            try connection.readWrite { transaction in try transaction.install(ordered) }
        } catch {
            if let error = error as? DatabaseError { throw error }
            let names = ordered.map(\.name).joined(separator: "', '")
            throw DatabaseError(.sqlite, "registering extension '\(names)' failed: \(error)", cause: error)
        }
    }

    /// Registers several extensions in one commit, as `register(_:)` with an
    /// array does: `try db.register(byTitle, peopleIndex, bioSearch)`.
    ///
    /// - Throws: what `register(_:)` with an array throws.
    public func register(
        _ first: any DatabaseExtension, _ second: any DatabaseExtension, _ more: any DatabaseExtension...
    ) throws(DatabaseError) {
        try register([first, second] + more)
    }

    /// Removes the extension registered as `name` and drops its tables, in a commit of its own.
    /// Unregistering a name that is not registered does nothing.
    ///
    /// - Throws: `misuse` while another registered extension reads this one (unregister that
    ///   one first).
    public func unregister(_ name: String) throws(DatabaseError) {
        try checkOpen()
        try Self.checkExtensionName(name)
        try checkWritable("unregister(\(name.debugDescription))")
        if let dependent = extensionDefinitions().first(where: { $0.dependencies.contains(name) }) {
            throw DatabaseError(
                .misuse,
                "extension '\(name)' is read by extension '\(dependent.name)'; unregister '\(dependent.name)' first"
            )
        }
        let connection = newConnection(name: "snapshotdb.extensions")
        do {
            try connection.readWrite { transaction in try transaction.uninstall(name) }
        } catch let error as DatabaseError {
            throw error
        } catch {
            throw DatabaseError(.sqlite, "unregistering extension '\(name)' failed: \(error)", cause: error)
        }
    }

    /// The names of the registered extensions, sorted.
    public var registeredExtensions: [String] {
        state.withLock { $0.extensions.keys.sorted() }
    }

    /// The registered extensions, for a transaction's hooks: those with dependencies last (so
    /// that their writers run after the writers of what they read), then by name.
    func extensionDefinitions() -> [any ExtensionDefinition] {
        state.withLock { $0.orderedExtensions }
    }

    func extensionDefinition(named name: String) -> (any ExtensionDefinition)? {
        state.withLock { $0.extensions[name] }
    }

    /// The `misuse` of registering `definition` under the name of `registered`, of another kind.
    static func kindClash(_ definition: any ExtensionDefinition, registered: any ExtensionDefinition)
        -> DatabaseError
    {
        DatabaseError(
            .misuse,
            "extension '\(definition.name)' is registered in this process as a "
                + "\(registered.kind.description); unregister it before registering a "
                + "\(definition.kind.description) under its name")
    }

    /// The commit that built the version of the extension this process registered as `name`,
    /// when known (see ``DatabaseState/extensionBuilds``).
    func extensionBuild(named name: String) -> UInt64? {
        state.withLock { $0.extensionBuilds[name] }
    }

    /// Registers `definition` as `name` (unregisters it for `nil`), its version built at commit
    /// `builtAt` (`nil`: not known).
    func setExtension(_ definition: (any ExtensionDefinition)?, named name: String, builtAt: UInt64? = nil) {
        let count = state.withLock { state in
            state.extensions[name] = definition
            state.extensionBuilds[name] = definition == nil ? nil : builtAt
            state.orderedExtensions = state.extensions.values.sorted {
                ($0.dependencies.isEmpty ? 0 : 1, $0.name) < ($1.dependencies.isEmpty ? 0 : 1, $1.name)
            }
            state.extensionGeneration &+= 1
            registryGeneration.store(state.extensionGeneration, ordering: .releasing)
            return state.extensions.count
        }
        extensionCount.store(count, ordering: .releasing)
    }

    /// Extension names become table names: only letters, digits and underscores, never quoted
    /// or spliced otherwise.
    static func checkExtensionName(_ name: String) throws(DatabaseError) {
        let allowed = name.utf8.allSatisfy { byte in
            (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                || byte == 0x5F
        }
        guard !name.isEmpty, name.utf8.count <= 64, allowed else {
            throw DatabaseError(
                .misuse,
                "extension name \(name.debugDescription) must be 1 to 64 ASCII letters, digits and underscores"
            )
        }
    }
}

extension ReadWriteTransaction {
    /// Installs `definitions` (in order: an extension after those it reads), each unless the
    /// file already has this kind and version of it: drops the tables of any other, creates its
    /// own, records it, and builds the new ones together, in one pass over the values (see
    /// ``ExtensionWriters/rebuildTogether(_:handle:)``). The registry is updated here, under the
    /// writer lock, so that no transaction commits values without an extension once it is
    /// installed.
    func install(_ definitions: [any ExtensionDefinition]) throws(DatabaseError) {
        let memo = definitions.count > 1 ? DecodeMemo() : nil
        var builds: [(definition: any ExtensionDefinition, context: ExtensionContext)] = []
        for definition in definitions {
            if var context = try prepareInstall(definition) {
                context.memo = memo
                builds.append((definition, context))
            }
        }
        if !builds.isEmpty { try extensionWriters.rebuild(builds) }
    }

    /// Records `definition` in the catalog with new, empty tables, and returns the context to
    /// build them in; `nil` when the file already has this kind and version of it.
    private func prepareInstall(_ definition: any ExtensionDefinition) throws(DatabaseError)
        -> ExtensionContext?
    {
        try checkActive()
        let handle = try core.handle()
        try handle.execute(ExtensionCatalog.create)
        let installed = try ExtensionCatalog.installed(definition.name, handle: handle)
        // A version left stale by a process that does not keep it is rebuilt like a new one, and
        // so is one whose collections changed under the same version (the values of a collection
        // it did not observe were never fed to it, and those of one it no longer observes are
        // still in it). The file stores "every collection" as NULL, as it stores collections it
        // never recorded (an extension of a schema 2 file): both are taken as every collection,
        // so a set registered over either is rebuilt once, and the set is recorded.
        // A registration of another kind under this name made by another thread since
        // `register` checked (this runs under the writer lock).
        if let registered = core.database.extensionDefinition(named: definition.name),
            registered.kind != definition.kind
        {
            throw Database.kindClash(definition, registered: registered)
        }
        let fileState = try ExtensionCatalog.state(definition.name, handle: handle)
        let isStale = fileState?.staleCommit != nil
        let stored = try ExtensionCatalog.entries(handle: handle).first { $0.name == definition.name }
        let sameCollections = stored.map { $0.collections == definition.collections } ?? true
        // Tables of a former format that still hold are recorded in this one, not rebuilt.
        var formerHolds = false
        if let installed, installed.kind == definition.kind.rawValue, !isStale, sameCollections,
            installed.version == definition.formerStoredVersion
        {
            formerHolds = try definition.formerFormatHolds(
                try core.extensionContext(named: definition.name, transaction: self))
        }
        if let installed, installed.kind == definition.kind.rawValue,
            installed.version == definition.storedVersion || formerHolds, !isStale, sameCollections
        {
            if installed.version != definition.storedVersion {
                // Bookkeeping, not a commit: the view's rows are the same.
                try ExtensionCatalog.record(definition, handle: handle)
                wroteBookkeeping = true
            }
            try definition.checkStored(try core.extensionContext(named: definition.name, transaction: self))
            // Built by the commit the file's state records (another process's, an earlier run's).
            setRegistered(definition, named: definition.name, builtAt: fileState?.registeredCommit)
            extensionWriters.excluded.remove(definition.name)
            return nil
        }
        return try freshTables(for: definition)
    }

    /// Drops `definition`'s tables and makes them new and empty, records it in the catalog as
    /// built by this transaction's commit, and returns the context to build them in (a
    /// registration's, or a migration's rebuild: ``ExtensionWriters/rebuild(_:)``).
    func freshTables(for definition: any ExtensionDefinition) throws(DatabaseError) -> ExtensionContext {
        let handle = try core.handle()
        try ExtensionCatalog.dropTables(of: definition.name, handle: handle)
        let context = try core.extensionContext(named: definition.name, transaction: self)
        try definition.createTables(context)
        try ExtensionCatalog.record(definition, handle: handle)
        try ExtensionCatalog.recordState(
            definition, commit: commit + 1, connection: core.name, handle: handle)
        setRegistered(definition, named: definition.name, builtAt: commit + 1)
        extensionWriters.excluded.remove(definition.name)
        return context
    }

    /// Registers `definition` as `name` in the database's registry (unregisters it for `nil`)
    /// for this transaction and those after it; a rollback of the transaction puts back what was
    /// registered before, still under the writer lock, so that no other writer ever sees a
    /// registration that did not commit.
    ///
    /// `builtAt` is the commit that built the version registered (see
    /// ``Database/extensionBuild(named:)``), when known.
    func setRegistered(_ definition: (any ExtensionDefinition)?, named name: String, builtAt: UInt64? = nil) {
        let database = core.database
        let before = database.extensionDefinition(named: name)
        let builtBefore = database.extensionBuild(named: name)
        onRollback { database.setExtension(before, named: name, builtAt: builtBefore) }
        database.setExtension(definition, named: name, builtAt: builtAt)
    }

    /// Drops the extension registered as `name`, its tables and its record.
    func uninstall(_ name: String) throws(DatabaseError) {
        try checkActive()
        let handle = try core.handle()
        try handle.execute(ExtensionCatalog.create)
        let wasInstalled = try ExtensionCatalog.installed(name, handle: handle) != nil
        setRegistered(nil, named: name)
        guard wasInstalled else { return }
        try ExtensionCatalog.dropTables(of: name, handle: handle)
        try ExtensionCatalog.forget(name, handle: handle)
        try ExtensionCatalog.forgetState(name, handle: handle)
        extensionWriters.markReset(name)
    }
}

extension ReadTransaction {
    /// Checks that this transaction's snapshot holds `definition`'s kind and version. In a write
    /// transaction, first writes back what extension writers hold, so that a reader made now
    /// reads every write made before it.
    func checkInstalled(_ definition: any ExtensionDefinition) throws(DatabaseError) {
        try checkActive()
        let write = self as? ReadWriteTransaction
        if let write {
            try write.extensionWriters.flush()
        } else if installedExtensions.contains(definition.name + "\u{0}" + definition.version) {
            return
        }
        let handle = try core.handle()
        let installed = try ExtensionCatalog.installed(definition.name, handle: handle)
        let state = try ExtensionCatalog.state(definition.name, handle: handle)
        guard let installed else {
            throw DatabaseError(
                .unknownExtension,
                "extension '\(definition.name)' (version \(definition.version)) is not in the snapshot this "
                    + "transaction reads (commit \(commit)); advance the bookmark to a commit made after it was registered"
            )
        }
        guard installed.version == definition.storedVersion,
            installed.kind == definition.kind.rawValue
        else {
            let theirs = ExtensionCatalog.publicVersion(installed.version)
            if let built = core.database.extensionBuild(named: definition.name), built > commit {
                throw DatabaseError(
                    .unknownExtension,
                    "\(definition.kind) '\(definition.name)' version '\(definition.version)', which this process "
                        + "registered, was built at commit \(built), after the snapshot this transaction reads (commit "
                        + "\(commit)), which holds \(installed.kind) version '\(theirs)'; advance the bookmark to read it"
                )
            }
            var who = "another registration"
            if let process = state?.registeredProcess, let at = state?.registeredCommit {
                who =
                    "process \(process)"
                    + (state?.registeredConnection.map { " (connection '\($0)')" } ?? "") + " at commit \(at)"
            }
            throw DatabaseError(
                .extensionConflict,
                "extension '\(definition.name)' is \(installed.kind) version '\(theirs)' in the file, registered by "
                    + "\(who); this process registered \(definition.kind) version '\(definition.version)'. Every process "
                    + "that writes must register the same version (registering it here again rebuilds it as yours)"
            )
        }
        if let stale = state?.staleCommit {
            if let built = core.database.extensionBuild(named: definition.name), built > commit {
                throw DatabaseError(
                    .extensionStale,
                    "extension '\(definition.name)' is stale at the snapshot this transaction reads (commit "
                        + "\(commit), since commit \(stale)), and was rebuilt at commit \(built); advance the bookmark "
                        + "to read it")
            }
            let process: String = state?.staleProcess.map { String($0) } ?? "?"
            // A SnapshotDB connection that did not keep it, or a foreign client (the `sqlite3`
            // shell), whose writes the process named numbered.
            let who =
                state?.staleConnection.map { "process \(process) (connection '\($0)')" }
                ?? "a foreign client (its writes numbered by process \(process))"
            throw DatabaseError(
                .extensionStale,
                "extension '\(definition.name)' is stale since commit \(stale): \(who) "
                    + "changed its values without keeping it (it did not register it, registered another "
                    + "version, or wrote a value it cannot decode); register it again to rebuild it")
        }
        // A write transaction may register or drop extensions itself: it looks each time.
        if write == nil { installedExtensions.insert(definition.name + "\u{0}" + definition.version) }
    }
}
