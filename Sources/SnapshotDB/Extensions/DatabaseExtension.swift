internal import Foundation

/// Something the database keeps in step with its values inside every commit: a ``View``, a
/// secondary index, a full-text index.
///
/// An extension keeps its own tables in the database file and is updated by the single writer
/// in the same SQLite transaction as the values it derives from. So a bookmarked connection
/// reads every extension at exactly its commit (the tables are part of the snapshot), a crash
/// can never leave an extension out of step, and an extension can add its own changes to a
/// commit's changeset (a view's row changes).
///
/// Register an extension with `Database/register(_:)`; it is built from the values (in a
/// commit of its own) when it is new or its ``version`` changed, and kept up to date from then
/// on. ``Database/unregister(_:)`` drops it. Extension types are SnapshotDB's own (``View``,
/// ``FilteredView``, ``SearchResultsView``, ``SecondaryIndex`` and ``FullTextSearch``); this
/// protocol only names what they share. A type of your own that conforms to it is refused by
/// `Database/register(_:)` with ``DatabaseError/Code/misuse``: the writer that keeps an
/// extension in step inside every commit is internal.
public protocol DatabaseExtension: Sendable {
    /// The name the extension is registered and read under: letters, digits and underscores.
    var name: String { get }
    /// Its version: registering a different version (or a different kind of extension under
    /// the same name) rebuilds it from the values.
    var version: String { get }
}

/// What every extension implements for the database: its tables, and a writer that keeps them
/// up to date during one read-write transaction.
///
/// To add a kind of extension: conform to this protocol (tables named with
/// ``ExtensionContext/tablePrefix``), return an ``ExtensionWriter`` from ``makeWriter(_:)``,
/// and give transactions a typed accessor (as ``ReadTransaction/view(named:)`` does) that
/// calls ``ReadTransaction/checkInstalled(_:)`` first.
/// The kinds of extension. The raw values are what the file's catalog records (its `kind`
/// column), so they never change.
enum ExtensionKind: String, Sendable {
    case view
    case index
    case search

    /// What a user calls it in messages.
    var description: String {
        switch self {
        case .view: "view"
        case .index: "secondary index"
        case .search: "full-text index"
        }
    }

    /// What a user calls an extension of the catalog's kind `stored` (a newer version's kind as
    /// the file spells it).
    static func description(ofStored stored: String) -> String {
        ExtensionKind(rawValue: stored)?.description ?? stored
    }
}

protocol ExtensionDefinition: DatabaseExtension {
    /// The kind, recorded with the version.
    var kind: ExtensionKind { get }
    /// The format of the extension's tables, recorded before its version (``storedVersion``),
    /// so that one kept in an older format is rebuilt when it is registered again. Give a kind
    /// a new tag when its tables change; tags are never reused. `t4` by default.
    var tableFormat: String { get }
    /// The collections whose values the extension derives from; `nil` for every collection.
    var collections: Set<String>? { get }
    /// Creates the extension's tables, empty.
    func createTables(_ context: ExtensionContext) throws(DatabaseError)
    /// A writer for one read-write transaction.
    func makeWriter(_ context: ExtensionContext) -> any ExtensionWriter
    /// The extensions this one reads while it writes (a search-results view reads its full-text
    /// index): they must be registered first, their writers run before its writer, and they
    /// cannot be unregistered while it is registered.
    var dependencies: [String] { get }
    /// Whether its writer can keep it item by item after foreign clients changed values whose
    /// keys are known: it finds what it held of an item in its own tables. An extension whose
    /// items' places depend on other items' values (a view ordered by a closure) cannot, since
    /// the neighbours changed too: it is rebuilt instead.
    func keepsItemsAfterForeignWrites(_ context: ExtensionContext) -> Bool
    /// Checks that the tables the file holds under this kind and version still agree with the
    /// definition (a view's order), when it is registered again over them; throws
    /// `extensionChanged` when they cannot. Nothing to check by default.
    func checkStored(_ context: ExtensionContext) throws(DatabaseError)
    /// The tag this kind's tables had in an earlier release, when the tables of that format can
    /// be taken over without a rebuild once ``formerFormatHolds(_:)`` says so; `nil` (the
    /// default) rebuilds an extension found in any other format.
    var formerTableFormat: String? { get }
    /// Whether the tables the file holds in ``formerTableFormat`` mean the same in this format
    /// (a view's: whether their order is this release's). `false` by default.
    func formerFormatHolds(_ context: ExtensionContext) throws(DatabaseError) -> Bool
}

extension ExtensionDefinition {
    var dependencies: [String] { [] }

    func keepsItemsAfterForeignWrites(_ context: ExtensionContext) -> Bool { true }

    func checkStored(_ context: ExtensionContext) throws(DatabaseError) {}

    var formerTableFormat: String? { nil }

    func formerFormatHolds(_ context: ExtensionContext) throws(DatabaseError) -> Bool { false }

    /// The version the catalog recorded for this version in ``formerTableFormat``.
    var formerStoredVersion: String? { formerTableFormat.map { $0 + ":" + version } }

    /// The formats so far: the first had no tag (table names without the name's length); t2:
    /// table names carry it; t3: an index table is a rowid table; t4: an index's column indexes
    /// hold the item too. Views have their own (``ViewPages/tableFormat``).
    var tableFormat: String { "t4" }

    /// The version recorded in the file's catalog: ``tableFormat`` and ``version``.
    var storedVersion: String { tableFormat + ":" + version }

    /// Whether the extension derives anything from `collection`.
    func observes(_ collection: String) -> Bool {
        collections.map { $0.contains(collection) } ?? true
    }
}

/// Keeps one extension's tables up to date during one read-write transaction.
///
/// Every hook runs *before* the value row changes, on the transaction's SQLite handle, so the
/// writer can still read the old value. Savepoints roll the extension's tables back with the
/// values; what a writer keeps in memory for the changeset must stay correct when a savepoint
/// it saw rolls back (a view records only what items were before the transaction, which a
/// rollback does not change).
protocol ExtensionWriter: AnyObject {
    /// Whether the commit records a reload of this extension instead of its record: what it
    /// would record outgrew its bound (a view's ``Configuration/viewRecordLimitBytes``). Its
    /// readers reload, as after a rebuild.
    var recordsReload: Bool { get }
    /// `data` is about to be stored under `key` in `collection` (a collection it observes).
    func willSet(_ data: Data, forKey key: String, inCollection collection: String) throws(DatabaseError)
    /// The value under `key` in `collection` is about to be removed (it exists).
    func willRemove(forKey key: String, inCollection collection: String) throws(DatabaseError)
    /// Every value of `collection` is about to be removed.
    func willRemoveAll(inCollection collection: String) throws(DatabaseError)
    /// Every value of every collection is about to be removed.
    func willRemoveAllCollections() throws(DatabaseError)
    /// Fills the extension's empty tables from every value it observes; what the changeset
    /// then says must make readers reload (``ExtensionChanges/isReset``).
    func rebuild() throws(DatabaseError)
    /// Whether this writer can be rebuilt fed one value at a time, in a pass over the values that
    /// rebuilds several extensions (``ExtensionWriters/rebuildTogether(_:handle:memo:)``).
    var feedsRebuild: Bool { get }
    /// The collections whose values a fed rebuild reads (`nil`: every collection).
    var rebuildCollections: Set<String>? { get }
    /// A fed rebuild begins: the tables are empty or emptied.
    func beginRebuild() throws(DatabaseError)
    /// One value, in (collection, key) order (its bytes valid only during the call).
    func feedRebuild(_ collection: String, _ key: String, _ value: StoredValue) throws(DatabaseError)
    /// Every value was fed.
    func endRebuild() throws(DatabaseError)
    /// The memo the writer's context shares with the other writers of a rebuild pass.
    var rebuildMemo: DecodeMemo? { get }
    /// What the transaction changed, for its changeset; `nil` when nothing. Writes back anything
    /// the writer still holds (see ``flush()``).
    func finish() throws(DatabaseError) -> (any ExtensionRecord)?
    /// Writes to the extension's tables whatever the writer holds back for the end of the
    /// transaction: called before a savepoint begins and before the transaction reads an
    /// extension, so that SQLite's rows are complete at those points.
    func flush() throws(DatabaseError)
    /// A savepoint begins (after ``flush()``): save what must come back if it rolls back.
    func beginSavepoint()
    /// The innermost savepoint ended. When it `rolledBack`, SQLite undid its rows: forget
    /// anything read or held since, and put back what ``beginSavepoint()`` saved (``flush()``
    /// ran when the savepoint began, so nothing older is lost).
    func endSavepoint(rolledBack: Bool)
    /// After the transaction committed (``finish()`` ran): what the writer keeps for the next
    /// write transaction, which gets it only if it starts from this commit (see
    /// ``ExtensionCaches``); `nil` for nothing.
    func keptCache() -> AnyObject?
    /// After the transaction committed: what every reader of the new commit may share (a
    /// view's layout, see ``ExtensionCaches``); `nil` for nothing.
    func publishedState() -> AnyObject?
}

extension ExtensionWriter {
    func flush() throws(DatabaseError) {}
    func beginSavepoint() {}
    func endSavepoint(rolledBack: Bool) {}
    func keptCache() -> AnyObject? { nil }
    func publishedState() -> AnyObject? { nil }
    var recordsReload: Bool { false }
    var feedsRebuild: Bool { false }
    var rebuildCollections: Set<String>? { nil }
    func beginRebuild() throws(DatabaseError) {}
    func feedRebuild(_ collection: String, _ key: String, _ value: StoredValue) throws(DatabaseError) {}
    func endRebuild() throws(DatabaseError) {}
    var rebuildMemo: DecodeMemo? { nil }
}

/// The values one rebuild pass decoded for its current row, by type: extensions rebuilt in one
/// pass over the values (views, indexes and full-text indexes of the same collections) decode
/// each value once, whichever of them asks first.
final class DecodeMemo {
    private var collection = ""
    private var key = ""
    private var values: [ObjectIdentifier: Any] = [:]
    /// Whether a pass is running: outside one, nothing is remembered or returned.
    private var isActive = false

    /// The pass moved to the value of `key` in `collection`.
    func begin(_ collection: String, _ key: String) {
        isActive = true
        self.collection = collection
        self.key = key
        values.removeAll(keepingCapacity: true)
    }

    /// The pass ended: nothing is remembered (a later decode of the same key, of new data,
    /// must not find this pass's value).
    func end() {
        isActive = false
        collection = ""
        key = ""
        values.removeAll()
    }

    func value<T>(_ type: T.Type, collection: String, key: String) -> T? {
        guard isActive, key == self.key, collection == self.collection else { return nil }
        return values[ObjectIdentifier(type)] as? T
    }

    func store<T>(_ value: T, collection: String, key: String) {
        guard isActive, key == self.key, collection == self.collection else { return }
        values[ObjectIdentifier(T.self)] = value
    }
}

/// What an extension's code works with inside a transaction: the SQLite handle, the codecs,
/// and its table names.
struct ExtensionContext {
    let handle: SQLiteHandle
    let name: String
    /// The codec of a collection (the database's registry, frozen at first use).
    let codec: (String) -> any ValueCodec
    /// The transaction the extension works in, when there is one (not when the writer rebuilds
    /// extensions while it seals foreign writes): its reads go through the connection's value
    /// cache, which keeps decoded values across transactions.
    weak var transaction: ReadTransaction?
    /// The decoded values a rebuild pass shares between extensions (``DecodeMemo``).
    var memo: DecodeMemo?
    /// The codec of the collection decoded last (see ``CodecChoice``).
    private let codecChoice = CodecChoice()

    init(
        handle: SQLiteHandle, name: String, transaction: ReadTransaction? = nil, memo: DecodeMemo? = nil,
        codec: @escaping (String) -> any ValueCodec
    ) {
        self.handle = handle
        self.name = name
        self.transaction = transaction
        self.memo = memo
        self.codec = codec
    }

    /// The value of `key` in `collection` decoded as `T`, as the transaction reads it now: from
    /// the connection's cache when it holds it, else from SQLite.
    func value<T: Decodable>(_ type: T.Type, key: String, collection: String) throws(DatabaseError) -> T? {
        if let transaction { return try transaction.value(forKey: key, inCollection: collection, as: T.self) }
        guard let data = try handle.statement(.getData).fetchBlob(collection, key) else { return nil }
        return try decode(T.self, data, key: key, collection: collection)
    }

    /// The prefix of every table of the extension, `snapshotdb_x<length of name>_<name>_`.
    var tablePrefix: String { Self.tablePrefix(name) }

    /// `snapshotdb_x<length>_<name>_`: the name's length makes one extension's prefix never the
    /// start of another's (names may hold underscores: without it, `notes_` would start the
    /// tables of `notes_x` too, and dropping `notes` would drop them).
    static func tablePrefix(_ name: String) -> String { "snapshotdb_x\(name.utf8.count)_\(name)_" }

    /// The prefix of the first table format, `snapshotdb_ext_<name>_`, whose tables are dropped
    /// when an extension from that format is registered again (and rebuilt under the new one).
    static func legacyTablePrefix(_ name: String) -> String { "snapshotdb_ext_\(name)_" }

    /// Calls `body` with every value of `collections` (every collection when `nil`), in
    /// (collection, key) order.
    func forEachValue(
        inCollections collections: Set<String>?,
        _ body: (_ collection: String, _ key: String, _ value: StoredValue) throws(DatabaseError) -> Void
    ) throws(DatabaseError) {
        try Self.forEachValue(on: handle, inCollections: collections, body)
    }

    /// ``forEachValue(inCollections:_:)`` on `handle`.
    static func forEachValue(
        on handle: SQLiteHandle, inCollections collections: Set<String>?,
        _ body: (_ collection: String, _ key: String, _ value: StoredValue) throws(DatabaseError) -> Void
    ) throws(DatabaseError) {
        let all = try handle.idleStatement(.enumerateAll)
        defer { all.reset() }
        // Rows come collection by collection: each row's collection is the last row's string
        // while its bytes are the same, and is looked up in `collections` once.
        var collection: String?
        var included = false
        while try all.step() {
            if collection.map({ all.isText(at: 0, differentFrom: $0) }) ?? true {
                let next = all.string(at: 0)
                included = collections?.contains(next) ?? true
                collection = next
            }
            guard included, let collection else { continue }
            let key = all.string(at: 1)
            // Lent where SQLite holds it: the JSON codec decodes it there, with no `Data` made.
            try all.withBlob(at: 2) { bytes throws(DatabaseError) in try body(collection, key, .lent(bytes)) }
        }
    }

    /// Decodes a stored value of `collection` as `T`.
    func decode<T: Decodable>(_ type: T.Type, _ data: Data, key: String, collection: String)
        throws(DatabaseError) -> T
    {
        try decode(T.self, StoredValue.data(data), key: key, collection: collection)
    }

    /// Decodes a stored value of `collection` as `T`, from a `Data` or from bytes lent in place.
    func decode<T: Decodable>(_ type: T.Type, _ data: StoredValue, key: String, collection: String)
        throws(DatabaseError) -> T
    {
        if let memo { return try decode(T.self, data, key: key, collection: collection, sharing: memo) }
        return try decodeFresh(T.self, data, key: key, collection: collection)
    }

    private func decodeFresh<T: Decodable>(
        _ type: T.Type, _ stored: StoredValue, key: String, collection: String
    )
        throws(DatabaseError) -> T
    {
        do {
            let choice = codecChoice.choose(collection, codec)
            switch stored {
            case .data(let data): return try choice.codec.decode(T.self, from: data)
            case .lent(let bytes):
                // Only the JSON codec reads lent bytes: another codec (an app's own, or
                // `RawDataCodec`, whose value is the bytes) may keep what it is given.
                if let json = choice.json { return try json.decode(T.self, fromBytes: bytes) }
                return try choice.codec.decode(T.self, from: Data(bytes))
            }
        } catch {
            throw DatabaseError(
                .decodingFailed,
                "extension '\(name)' cannot decode the value for key '\(key)' in collection '\(collection)' as \(T.self): \(error)",
                collection: collection, key: key, typeName: String(describing: T.self), cause: error)
        }
    }
}

extension ExtensionContext {
    /// ``decode(_:_:key:collection:)`` through `memo`: a value another extension decoded, or
    /// decoded here and kept for the others. Apart, so that an extension decoding alone never
    /// touches a `T?` (in this unspecialized generic code, a lookup of its type metadata per
    /// value).
    @inline(never)
    private func decode<T: Decodable>(
        _ type: T.Type, _ data: StoredValue, key: String, collection: String, sharing memo: DecodeMemo
    ) throws(DatabaseError) -> T {
        if let value = memo.value(T.self, collection: collection, key: key) { return value }
        let value = try decodeFresh(T.self, data, key: key, collection: collection)
        memo.store(value, collection: collection, key: key)
        return value
    }
}

/// The codec of the collection an extension decoded last, and the JSON codec when it is that:
/// values come collection by collection (a rebuild's scan, most transactions), so the codec is
/// looked up, and cast to find whether it reads bytes in place, once per collection instead of
/// once per value (the lookup, the cast and the existential's copies were about 700
/// instructions a value, callgrind).
final class CodecChoice {
    private var collection: String?
    private var chosen: (any ValueCodec)?
    private(set) var json: JSONValueCodec?

    /// The codec chosen last (only after ``choose(_:_:)``).
    var codec: any ValueCodec { chosen! }

    /// The choice for `collection`, asking `lookUp` when it is not the last one's.
    func choose(_ collection: String, _ lookUp: (String) -> any ValueCodec) -> CodecChoice {
        // `self.collection` is nil until the first choice (comparing it costs nothing; testing
        // the existential `chosen` for nil copied it).
        if collection != self.collection {
            let codec = lookUp(collection)
            chosen = codec
            json = codec as? JSONValueCodec
            self.collection = collection
        }
        return self
    }
}

/// A stored value handed to an extension: a `Data`, or its bytes lent where SQLite holds them
/// during a rebuild's scan (valid only during the call; see ``ExtensionContext/decode(_:_:key:collection:)``).
enum StoredValue {
    case data(Data)
    case lent(UnsafeRawBufferPointer)
}
