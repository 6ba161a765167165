internal import Foundation

/// How every reader finds its extension: one lookup by name and kind, one error for a name
/// this process has not registered (``ReadTransaction/view(named:)``,
/// ``ReadTransaction/index(named:)``, ``ReadTransaction/search(named:)``).
extension ReadTransaction {
    /// The `unknownExtension` error for an extension of `kind` named `name` that this process has not
    /// registered: it says so when the snapshot's file has one (another process or an earlier
    /// run registered it, or this process unregistered it after the snapshot), since
    /// registering it here is then all it takes.
    func unknownExtension(_ kind: ExtensionKind, named name: String) -> DatabaseError {
        let what = kind.description
        let plain = DatabaseError(.unknownExtension, "no \(what) named '\(name)' is registered")
        // Only inside the closure (the handle is the transaction's), and only for a name this
        // process has nothing under and the file has this kind of extension under. A look at the
        // file's catalog that fails only leaves out that hint: the plain error is true as it is.
        guard isActive, core.database.extensionDefinition(named: name) == nil,
            let installed = (try? core.handle()).flatMap({ try? ExtensionCatalog.installed(name, handle: $0) }
            ),
            installed.kind == kind.rawValue
        else { return plain }
        return DatabaseError(
            .unknownExtension,
            "no \(what) named '\(name)' is registered in this process, but the file has one at this snapshot "
                + "(\(installed.kind) version '\(ExtensionCatalog.publicVersion(installed.version))'): another process or an earlier run "
                + "registered it, or this process unregistered it after the snapshot; register it in this "
                + "process to read it")
    }

    /// The extension of `kind` registered as `name`, as a `Definition`, once its tables are
    /// known to be in this snapshot (``checkInstalled(_:)``): the one lookup of every reader.
    ///
    /// - Throws: `unknownExtension` when none of that kind is registered under `name` (saying
    ///   so when the file has one), and what ``checkInstalled(_:)`` throws.
    func registeredExtension<Definition>(named name: String, kind: ExtensionKind, as type: Definition.Type)
        throws(DatabaseError) -> Definition
    {
        guard let registered = core.database.extensionDefinition(named: name), registered.kind == kind,
            let definition = registered as? Definition
        else { throw unknownExtension(kind, named: name) }
        try checkInstalled(registered)
        return definition
    }
}
