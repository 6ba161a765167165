internal import Foundation

/// A view's storage: per group, a counted B+tree whose nodes are rows of the view's tables, so
/// that position questions cost O(log n) row reads at any size and the tree is part of every
/// snapshot.
///
/// Tables (`P` is the view's table prefix):
/// - `P_node(id, data)`: one row per node. A leaf holds up to ``leafCapacity`` items in view
///   order; an internal node holds up to ``branchCapacity`` children, each with its item count
///   and its first item. Every node knows its parent.
/// - `P_group(name, root, count)`: each group's root node and item count.
/// - `P_map(collection, key, grp, leaf)`: each item's group and leaf, for `index(ofKey:)` and
///   for removals without a search.
///
/// Inserting an item descends from the root comparing it with each child's first item (the
/// view's order is a closure over decoded values, so a comparison decodes a value), which is
/// O(log n) comparisons; counts and first items are kept exact on the way back up. Removing an
/// item starts from its leaf (the map) and climbs by parent links. Leaves and internal nodes
/// split when full; empty ones are removed. The tree is not rebalanced on removals: its depth
/// only grows with splits, which keeps removals cheap.
///
/// A tree made for a write transaction caches the nodes it reads and writes changed ones back
/// only on ``flush()`` (at the end of the transaction, before a savepoint begins, and before
/// the transaction reads the view): a one-row move reads each node once, and the nodes that
/// its removal and its insertion share (the root at least) are written once; a bulk commit
/// writes each leaf once, not once per item. After a savepoint rolls back, SQLite has undone
/// the rows and ``discardCache()`` drops the cache with them.
final class ViewTree {
    static let leafCapacity = 64
    static let branchCapacity = 64
    /// Past this many cached nodes the cache is written back and emptied, so that a rebuild or a
    /// bulk commit over a large view does not hold the whole tree in memory.
    static let cacheLimit = 4_096

    struct Child: Equatable {
        var id: Int64
        var count: Int
        var first: ViewItem
    }

    struct Node: Equatable {
        var id: Int64
        var parent: Int64
        var isLeaf: Bool
        var items: [ViewItem] = []
        var children: [Child] = []

        var count: Int { isLeaf ? items.count : children.reduce(0) { $0 + $1.count } }
        var first: ViewItem? { isLeaf ? items.first : children.first?.first }
    }

    let handle: SQLiteHandle
    let prefix: String
    /// Nodes read or written since the last ``discardCache()``, by id (write transactions only).
    private var cache: [Int64: Node] = [:]
    /// The cached nodes whose rows are not written yet.
    private var dirty: Set<Int64> = []
    /// Groups read or written, like nodes (`nil`: the group has no row); a move within a group
    /// changes its count twice and its row not at all.
    private var groupCache: [String: (root: Int64, count: Int)?] = [:]
    private var dirtyGroups: Set<String> = []
    /// The rows of the dirty groups as they were read or last written: a group whose count went
    /// down and back up (an item moved within it) is not written again.
    private var storedGroups: [String: (root: Int64, count: Int)?] = [:]
    private let caches: Bool

    /// A tree over the tables named with `prefix`; `caching` for a write transaction's writer
    /// (see the type's notes), not for readers, which read each node once anyway.
    init(handle: SQLiteHandle, prefix: String, caching: Bool = false) {
        self.handle = handle
        self.prefix = prefix
        self.caches = caching
    }

    /// Writes the changed nodes and groups to their rows.
    func flush() throws(DatabaseError) {
        for name in dirtyGroups.sorted() {
            let group = groupCache[name] ?? nil
            if let stored = storedGroups[name], stored?.root == group?.root, stored?.count == group?.count {
                continue
            }
            try writeGroup(name, root: group?.root ?? 0, count: group?.count ?? 0)
        }
        dirtyGroups.removeAll(keepingCapacity: true)
        storedGroups.removeAll(keepingCapacity: true)
        guard !dirty.isEmpty else { return }
        let update = try statement("INSERT OR REPLACE INTO \(prefix)node(id, data) VALUES (?1, ?2)")
        for id in dirty.sorted() {
            guard let node = cache[id] else { continue }
            try update.bind(id, at: 1)
            try update.bind(NodeCoding.encode(node), at: 2)
            try update.execute()
        }
        dirty.removeAll(keepingCapacity: true)
    }

    /// The cached nodes and groups, all written (after ``flush()``), at most `limit` nodes
    /// (branches first: every descent reads them), to seed the next transaction's tree.
    func cachedState(limit: Int) -> (nodes: [Int64: Node], groups: [String: (root: Int64, count: Int)?]) {
        guard dirty.isEmpty, dirtyGroups.isEmpty else { return ([:], [:]) }
        var nodes = cache
        if nodes.count > limit { nodes = nodes.filter { !$0.value.isLeaf } }
        if nodes.count > limit { nodes = [:] }
        return (nodes, groupCache)
    }

    /// Starts from the nodes and groups a previous transaction left (see ``cachedState(limit:)``).
    func seed(nodes: [Int64: Node], groups: [String: (root: Int64, count: Int)?]) {
        cache = nodes
        groupCache = groups
    }

    /// Forgets every cached node, written or not: after a savepoint rolled the rows back.
    func discardCache() {
        cache.removeAll()
        dirty.removeAll()
        groupCache.removeAll()
        dirtyGroups.removeAll()
        storedGroups.removeAll()
    }

    private func remember(_ node: Node) throws(DatabaseError) {
        if cache.count >= Self.cacheLimit, cache[node.id] == nil {
            try flush()
            cache.removeAll(keepingCapacity: true)
        }
        cache[node.id] = node
    }

    static func createTables(prefix: String, handle: SQLiteHandle) throws(DatabaseError) {
        try handle.execute(
            """
            CREATE TABLE \(prefix)node(id INTEGER PRIMARY KEY, data BLOB NOT NULL);
            CREATE TABLE \(prefix)group(name TEXT PRIMARY KEY NOT NULL, root INTEGER NOT NULL,
                count INTEGER NOT NULL) WITHOUT ROWID;
            CREATE TABLE \(prefix)map(collection TEXT NOT NULL, key TEXT NOT NULL, grp TEXT NOT NULL,
                leaf INTEGER NOT NULL, PRIMARY KEY (collection, key)) WITHOUT ROWID;
            """)
    }

    // MARK: Rows

    private func statement(_ sql: String) throws(DatabaseError) -> SQLiteStatement {
        try handle.cachedStatement(sql)
    }

    func node(_ id: Int64) throws(DatabaseError) -> Node {
        if caches, let node = cache[id] { return node }
        let select = try statement("SELECT data FROM \(prefix)node WHERE id = ?1")
        defer { select.reset() }
        try select.bind(id, at: 1)
        guard try select.step() else { throw Self.damaged(prefix, "node \(id) is missing") }
        guard let node = NodeCoding.decode(select.data(at: 0), id: id) else {
            throw Self.damaged(prefix, "node \(id) cannot be read")
        }
        if caches { try remember(node) }
        return node
    }

    func save(_ node: Node) throws(DatabaseError) {
        if caches {
            try remember(node)
            dirty.insert(node.id)
            return
        }
        let update = try statement("INSERT OR REPLACE INTO \(prefix)node(id, data) VALUES (?1, ?2)")
        try update.bind(node.id, at: 1)
        try update.bind(NodeCoding.encode(node), at: 2)
        try update.execute()
    }

    /// A node with a new id, saved.
    func newNode(parent: Int64, isLeaf: Bool) throws(DatabaseError) -> Node {
        let insert = try statement("INSERT INTO \(prefix)node(data) VALUES (x'')")
        try insert.execute()
        let id = handle.lastInsertRowID
        return Node(id: id, parent: parent, isLeaf: isLeaf)
    }

    func deleteNode(_ id: Int64) throws(DatabaseError) {
        cache[id] = nil
        dirty.remove(id)
        let delete = try statement("DELETE FROM \(prefix)node WHERE id = ?1")
        try delete.bind(id, at: 1)
        try delete.execute()
    }

    /// Every group with its root and count, sorted by name.
    func groups() throws(DatabaseError) -> [(name: String, root: Int64, count: Int)] {
        try flush()
        let select = try statement("SELECT name, root, count FROM \(prefix)group ORDER BY name")
        defer { select.reset() }
        var groups: [(name: String, root: Int64, count: Int)] = []
        while try select.step() {
            groups.append((select.string(at: 0), select.int64(at: 1), Int(select.int64(at: 2))))
        }
        return groups
    }

    func group(_ name: String) throws(DatabaseError) -> (root: Int64, count: Int)? {
        if caches, let cached = groupCache[name] { return cached }
        let select = try statement("SELECT root, count FROM \(prefix)group WHERE name = ?1")
        defer { select.reset() }
        try select.bind(name, at: 1)
        let group: (root: Int64, count: Int)? =
            try select.step() ? (select.int64(at: 0), Int(select.int64(at: 1))) : nil
        if caches { groupCache[name] = .some(group) }
        return group
    }

    func saveGroup(_ name: String, root: Int64, count: Int) throws(DatabaseError) {
        guard caches else { return try writeGroup(name, root: root, count: count) }
        if !dirtyGroups.contains(name) {
            // What the row holds now: the cache entry, read before any change (or nothing known).
            if let stored = groupCache[name] { storedGroups[name] = .some(stored) }
        }
        groupCache[name] = .some(count == 0 ? nil : (root, count))
        dirtyGroups.insert(name)
    }

    private func writeGroup(_ name: String, root: Int64, count: Int) throws(DatabaseError) {
        if count == 0 {
            let delete = try statement("DELETE FROM \(prefix)group WHERE name = ?1")
            try delete.bind(name, at: 1)
            try delete.execute()
            return
        }
        let upsert = try statement(
            "INSERT OR REPLACE INTO \(prefix)group(name, root, count) VALUES (?1, ?2, ?3)")
        try upsert.bind(name, at: 1)
        try upsert.bind(root, at: 2)
        try upsert.bind(Int64(count), at: 3)
        try upsert.execute()
    }

    /// The group and leaf of `item`, or `nil` when it is not in the view.
    func location(of item: ViewItem) throws(DatabaseError) -> (group: String, leaf: Int64)? {
        let select = try statement("SELECT grp, leaf FROM \(prefix)map WHERE collection = ?1 AND key = ?2")
        defer { select.reset() }
        try select.bind(item.collection, at: 1)
        try select.bind(item.key, at: 2)
        guard try select.step() else { return nil }
        return (select.string(at: 0), select.int64(at: 1))
    }

    func setLocation(of item: ViewItem, group: String, leaf: Int64) throws(DatabaseError) {
        let upsert = try statement(
            "INSERT OR REPLACE INTO \(prefix)map(collection, key, grp, leaf) VALUES (?1, ?2, ?3, ?4)")
        try upsert.bind(item.collection, at: 1)
        try upsert.bind(item.key, at: 2)
        try upsert.bind(group, at: 3)
        try upsert.bind(leaf, at: 4)
        try upsert.execute()
    }

    func removeLocation(of item: ViewItem) throws(DatabaseError) {
        let delete = try statement("DELETE FROM \(prefix)map WHERE collection = ?1 AND key = ?2")
        try delete.bind(item.collection, at: 1)
        try delete.bind(item.key, at: 2)
        try delete.execute()
    }

    /// The items of `collection` in the view (for `removeAll(inCollection:)`).
    func items(inCollection collection: String) throws(DatabaseError) -> [ViewItem] {
        let select = try statement("SELECT key FROM \(prefix)map WHERE collection = ?1")
        defer { select.reset() }
        try select.bind(collection, at: 1)
        var items: [ViewItem] = []
        while try select.step() { items.append(ViewItem(collection: collection, key: select.string(at: 0))) }
        return items
    }

    /// Every item in the view.
    func allItems() throws(DatabaseError) -> [ViewItem] {
        let select = try statement("SELECT collection, key FROM \(prefix)map")
        defer { select.reset() }
        var items: [ViewItem] = []
        while try select.step() {
            items.append(ViewItem(collection: select.string(at: 0), key: select.string(at: 1)))
        }
        return items
    }

    func removeEverything() throws(DatabaseError) {
        discardCache()
        try handle.execute("DELETE FROM \(prefix)node; DELETE FROM \(prefix)group; DELETE FROM \(prefix)map;")
    }

    // MARK: Reading positions

    /// The item at `index` of a group rooted at `root`: one node per level.
    func item(at index: Int, root: Int64) throws(DatabaseError) -> ViewItem? {
        var node = try self.node(root)
        var remaining = index
        while !node.isLeaf {
            guard
                let child = node.children.firstIndex(where: { child in
                    if remaining < child.count { return true }
                    remaining -= child.count
                    return false
                })
            else { return nil }
            node = try self.node(node.children[child].id)
        }
        return remaining < node.items.count ? node.items[remaining] : nil
    }

    /// The index of `item` in its group, from its leaf up: one node per level.
    func index(of item: ViewItem, leaf: Int64) throws(DatabaseError) -> Int? {
        var node = try self.node(leaf)
        guard var position = node.items.firstIndex(of: item) else { return nil }
        while node.parent != 0 {
            let parent = try self.node(node.parent)
            guard let slot = parent.children.firstIndex(where: { $0.id == node.id }) else {
                throw Self.damaged(prefix, "node \(node.id) is not a child of its parent \(parent.id)")
            }
            for child in parent.children[..<slot] { position += child.count }
            node = parent
        }
        return position
    }

    /// Every item of a group rooted at `root`, in order.
    func items(root: Int64) throws(DatabaseError) -> [ViewItem] {
        var items: [ViewItem] = []
        try appendItems(of: root, to: &items)
        return items
    }

    private func appendItems(of id: Int64, to items: inout [ViewItem]) throws(DatabaseError) {
        let node = try self.node(id)
        if node.isLeaf {
            items += node.items
        } else {
            for child in node.children { try appendItems(of: child.id, to: &items) }
        }
    }

    /// How many items of the group rooted at `root` sort before `key` (for which `precedes`
    /// says whether an item sorts before it): one descent, comparing with each child's first
    /// item by binary search.
    func rank(root: Int64, isBefore: (ViewItem) throws(DatabaseError) -> Bool) throws(DatabaseError) -> Int {
        var node = try self.node(root)
        var rank = 0
        while !node.isLeaf {
            // The last child whose first item sorts before the key holds the boundary.
            let slot = try Self.lastIndex(in: node.children.count) { (i) throws(DatabaseError) in
                try isBefore(node.children[i].first)
            }
            guard let slot else { return rank }
            for child in node.children[..<slot] { rank += child.count }
            node = try self.node(node.children[slot].id)
        }
        let inLeaf = try Self.lastIndex(in: node.items.count) { (i) throws(DatabaseError) in
            try isBefore(node.items[i])
        }
        return rank + (inLeaf.map { $0 + 1 } ?? 0)
    }

    /// The last index in `0..<count` for which `isBefore` holds, when it holds for a prefix.
    static func lastIndex(
        in count: Int, _ isBefore: (Int) throws(DatabaseError) -> Bool
    ) throws(DatabaseError) -> Int? {
        var low = 0
        var high = count
        while low < high {
            let middle = (low + high) / 2
            if try isBefore(middle) { low = middle + 1 } else { high = middle }
        }
        return low == 0 ? nil : low - 1
    }

    // MARK: Changing the tree

    /// Moves `item`, in `leaf`, to the place `isBefore` gives when that place is strictly inside
    /// the same leaf: no count changes, so only the leaf is written, and its ancestors' first
    /// items when the leaf's first item changed. Returns `false` and changes nothing otherwise
    /// (at either end of a leaf the place may be in a neighbouring one).
    func moveWithinLeaf(
        _ item: ViewItem, leaf: Int64, isBefore: (ViewItem) throws(DatabaseError) -> Bool
    ) throws(DatabaseError) -> Bool {
        var node = try self.node(leaf)
        guard let from = node.items.firstIndex(of: item) else { return false }
        var others = node.items
        others.remove(at: from)
        guard !others.isEmpty else { return false }
        if node.parent != 0 {
            // Most moves leave the leaf: two comparisons with its ends say so before a search.
            guard try !isBefore(others[others.count - 1]), try isBefore(others[0]) else { return false }
        }
        let position =
            (try Self.lastIndex(in: others.count) { (i) throws(DatabaseError) in try isBefore(others[i]) })
            .map { $0 + 1 } ?? 0
        if node.parent != 0 && (position == 0 || position == others.count) { return false }
        others.insert(item, at: position)
        let oldFirst = node.items.first
        node.items = others
        try save(node)
        guard node.items.first != oldFirst else { return true }
        // Keep the ancestors' first items exact, up the chain of first children.
        var child = node
        while child.parent != 0 {
            var parent = try self.node(child.parent)
            guard let slot = parent.children.firstIndex(where: { $0.id == child.id }) else {
                throw Self.damaged(prefix, "node \(child.id) is not a child of its parent \(parent.id)")
            }
            parent.children[slot].first = child.first!
            try save(parent)
            guard slot == 0 else { break }
            child = parent
        }
        return true
    }

    /// Whether `item`, in `leaf`, would stay where it is with a new value: its neighbours in the
    /// leaf still come before and after it (`inOrder(neighbour, neighbourIsBefore)`). Answers
    /// `false` (move it) when a neighbour would be in another leaf, unless the leaf is the
    /// group's only one.
    func keepsPlace(
        _ item: ViewItem, leaf: Int64, inOrder: (ViewItem, Bool) throws(DatabaseError) -> Bool
    ) throws(DatabaseError) -> Bool {
        let node = try self.node(leaf)
        guard let position = node.items.firstIndex(of: item) else { return false }
        let isOnly = node.parent == 0
        if position > 0 {
            guard try inOrder(node.items[position - 1], true) else { return false }
        } else if !isOnly {
            return false
        }
        if position + 1 < node.items.count {
            guard try inOrder(node.items[position + 1], false) else { return false }
        } else if !isOnly {
            return false
        }
        return true
    }

    /// Inserts `item` into `group` at the place `isBefore` (whether an item sorts before the
    /// new one) gives.
    func insert(
        _ item: ViewItem, group: String, isBefore: (ViewItem) throws(DatabaseError) -> Bool
    ) throws(DatabaseError) {
        guard let (root, count) = try self.group(group) else {
            var leaf = try newNode(parent: 0, isLeaf: true)
            leaf.items = [item]
            try save(leaf)
            try setLocation(of: item, group: group, leaf: leaf.id)
            try saveGroup(group, root: leaf.id, count: 1)
            return
        }
        var path: [(node: Node, slot: Int)] = []
        var node = try self.node(root)
        while !node.isLeaf {
            let slot = try Self.lastIndex(in: node.children.count) { (i) throws(DatabaseError) in
                try isBefore(node.children[i].first)
            }
            path.append((node, slot ?? 0))
            node = try self.node(node.children[slot ?? 0].id)
        }
        let position =
            (try Self.lastIndex(in: node.items.count) { (i) throws(DatabaseError) in
                try isBefore(node.items[i])
            })
            .map { $0 + 1 } ?? 0
        node.items.insert(item, at: position)
        try setLocation(of: item, group: group, leaf: node.id)
        var newRoot = root
        // Split full nodes bottom-up; `sibling` is the new right half to add to the parent.
        var sibling: Node? = node.items.count > Self.leafCapacity ? try split(&node, group: group) : nil
        try save(node)
        var child = node
        while let (parentNode, slot) = path.popLast() {
            var parent = parentNode
            parent.children[slot] = Child(id: child.id, count: child.count, first: child.first!)
            if let right = sibling {
                parent.children.insert(
                    Child(id: right.id, count: right.count, first: right.first!), at: slot + 1)
            }
            sibling = parent.children.count > Self.branchCapacity ? try split(&parent, group: group) : nil
            try save(parent)
            child = parent
        }
        if let right = sibling {
            // The root split: a new root above both halves.
            var top = try newNode(parent: 0, isLeaf: false)
            top.children = [
                Child(id: child.id, count: child.count, first: child.first!),
                Child(id: right.id, count: right.count, first: right.first!),
            ]
            try save(top)
            try setParent(of: [child.id, right.id], to: top.id)
            newRoot = top.id
        }
        try saveGroup(group, root: newRoot, count: count + 1)
    }

    /// Moves the right half of a full `node` into a new node, which it returns (saved); the
    /// moved items' map rows or moved children's parent links follow.
    private func split(_ node: inout Node, group: String) throws(DatabaseError) -> Node {
        var right = try newNode(parent: node.parent, isLeaf: node.isLeaf)
        if node.isLeaf {
            let half = node.items.count / 2
            right.items = Array(node.items[half...])
            node.items.removeSubrange(half...)
            try save(right)
            for item in right.items { try setLocation(of: item, group: group, leaf: right.id) }
        } else {
            let half = node.children.count / 2
            right.children = Array(node.children[half...])
            node.children.removeSubrange(half...)
            try save(right)
            try setParent(of: right.children.map(\.id), to: right.id)
        }
        return right
    }

    private func setParent(of ids: [Int64], to parent: Int64) throws(DatabaseError) {
        for id in ids {
            var child = try node(id)
            guard child.parent != parent else { continue }
            child.parent = parent
            try save(child)
        }
    }

    /// Removes `item`, which is in `group` at `leaf`, climbing by parent links to keep counts
    /// and first items exact; empty nodes are removed.
    func remove(_ item: ViewItem, group: String, leaf: Int64) throws(DatabaseError) {
        guard let (root, count) = try self.group(group) else {
            throw Self.damaged(prefix, "group \(group.debugDescription) of \(item) is missing")
        }
        var node = try self.node(leaf)
        guard let position = node.items.firstIndex(of: item) else {
            throw Self.damaged(prefix, "\(item) is not in its leaf \(leaf)")
        }
        node.items.remove(at: position)
        try removeLocation(of: item)
        if count == 1 {
            try deleteNode(node.id)
            try saveGroup(group, root: root, count: 0)
            return
        }
        var removedChild = node.items.isEmpty
        if removedChild { try deleteNode(node.id) } else { try save(node) }
        var child = node
        var newRoot = root
        while child.parent != 0 {
            var parent = try self.node(child.parent)
            guard let slot = parent.children.firstIndex(where: { $0.id == child.id }) else {
                throw Self.damaged(prefix, "node \(child.id) is not a child of its parent \(parent.id)")
            }
            if removedChild {
                parent.children.remove(at: slot)
            } else {
                parent.children[slot].count -= 1
                parent.children[slot].first = child.first!
            }
            removedChild = parent.children.isEmpty
            if removedChild {
                try deleteNode(parent.id)
            } else if parent.parent == 0 && parent.children.count == 1 {
                // A root with one child: the child becomes the root.
                try deleteNode(parent.id)
                var only = try self.node(parent.children[0].id)
                only.parent = 0
                try save(only)
                newRoot = only.id
                break
            } else {
                try save(parent)
            }
            child = parent
        }
        try saveGroup(group, root: newRoot, count: count - 1)
    }

    /// Builds a group from items already in view order, bottom-up, with nodes filled to three
    /// quarters (room for inserts without splitting at once): for a rebuild.
    func build(group: String, items: [ViewItem]) throws(DatabaseError) {
        guard !items.isEmpty else { return }
        let leafFill = Self.leafCapacity * 3 / 4
        var level: [Node] = []
        var start = 0
        while start < items.count {
            var leaf = try newNode(parent: 0, isLeaf: true)
            leaf.items = Array(items[start..<min(start + leafFill, items.count)])
            level.append(leaf)
            start += leafFill
        }
        for leaf in level {
            for item in leaf.items { try setLocation(of: item, group: group, leaf: leaf.id) }
        }
        let branchFill = Self.branchCapacity * 3 / 4
        while level.count > 1 {
            var parents: [Node] = []
            var index = 0
            while index < level.count {
                var parent = try newNode(parent: 0, isLeaf: false)
                let slice = level[index..<min(index + branchFill, level.count)]
                parent.children = slice.map { Child(id: $0.id, count: $0.count, first: $0.first!) }
                for child in slice {
                    var child = child
                    child.parent = parent.id
                    try save(child)
                }
                parents.append(parent)
                index += branchFill
            }
            level = parents
        }
        try save(level[0])
        try saveGroup(group, root: level[0].id, count: items.count)
    }

    static func damaged(_ prefix: String, _ detail: String) -> DatabaseError {
        DatabaseError(
            .corrupt,
            "the view's tables (\(prefix)*) are damaged: \(detail); register the view with a new version to rebuild it"
        )
    }
}

/// The bytes of a view node: kind, parent, count, then items (collection, key) or children
/// (id, count, first item), integers little-endian, strings length-prefixed UTF-8.
///
/// Written and read through raw buffers in one pass each way: a node is encoded on every write
/// below it and decoded on every read, so this is on the path of every commit into a view.
enum NodeCoding {
    static func encode(_ node: ViewTree.Node) -> Data {
        var size = 17
        if node.isLeaf {
            for item in node.items { size += 16 + item.collection.utf8.count + item.key.utf8.count }
        } else {
            for child in node.children {
                size += 32 + child.first.collection.utf8.count + child.first.key.utf8.count
            }
        }
        var data = Data(count: size)
        data.withUnsafeMutableBytes { buffer in
            var writer = Writer(buffer: buffer)
            writer.byte(node.isLeaf ? 0 : 1)
            writer.int(node.parent)
            if node.isLeaf {
                writer.int(Int64(node.items.count))
                for item in node.items {
                    writer.string(item.collection)
                    writer.string(item.key)
                }
            } else {
                writer.int(Int64(node.children.count))
                for child in node.children {
                    writer.int(child.id)
                    writer.int(Int64(child.count))
                    writer.string(child.first.collection)
                    writer.string(child.first.key)
                }
            }
        }
        return data
    }

    static func decode(_ data: Data, id: Int64) -> ViewTree.Node? {
        data.withUnsafeBytes { buffer in decode(buffer, id: id) }
    }

    private static func decode(_ buffer: UnsafeRawBufferPointer, id: Int64) -> ViewTree.Node? {
        var reader = Reader(buffer: buffer)
        guard let kind = reader.byte(), let parent = reader.int(), let count = reader.int(), count >= 0,
            count <= buffer.count
        else { return nil }
        var node = ViewTree.Node(id: id, parent: parent, isLeaf: kind == 0)
        if node.isLeaf {
            node.items.reserveCapacity(Int(count))
        } else {
            node.children.reserveCapacity(Int(count))
        }
        for _ in 0..<count {
            if node.isLeaf {
                guard let collection = reader.string(), let key = reader.string() else { return nil }
                node.items.append(ViewItem(collection: collection, key: key))
            } else {
                guard let child = reader.int(), let childCount = reader.int(),
                    let collection = reader.string(),
                    let key = reader.string()
                else { return nil }
                node.children.append(
                    ViewTree.Child(
                        id: child, count: Int(childCount), first: ViewItem(collection: collection, key: key)))
            }
        }
        return node
    }

    /// Writes into a buffer sized by ``encode(_:)``.
    private struct Writer {
        let buffer: UnsafeMutableRawBufferPointer
        var offset = 0

        mutating func byte(_ value: UInt8) {
            buffer[offset] = value
            offset += 1
        }

        mutating func int(_ value: Int64) {
            buffer.storeBytes(of: value.littleEndian, toByteOffset: offset, as: Int64.self)
            offset += 8
        }

        mutating func string(_ string: String) {
            var string = string
            string.withUTF8 { utf8 in
                int(Int64(utf8.count))
                guard let base = utf8.baseAddress, !utf8.isEmpty else { return }
                (buffer.baseAddress! + offset).copyMemory(from: base, byteCount: utf8.count)
                offset += utf8.count
            }
        }
    }

    private struct Reader {
        let buffer: UnsafeRawBufferPointer
        var offset = 0

        mutating func byte() -> UInt8? {
            guard offset < buffer.count else { return nil }
            defer { offset += 1 }
            return buffer[offset]
        }

        mutating func int() -> Int64? {
            guard offset + 8 <= buffer.count else { return nil }
            defer { offset += 8 }
            return Int64(littleEndian: buffer.loadUnaligned(fromByteOffset: offset, as: Int64.self))
        }

        mutating func string() -> String? {
            guard let length = int(), length >= 0, length <= buffer.count - offset else { return nil }
            defer { offset += Int(length) }
            return String(
                decoding: UnsafeRawBufferPointer(rebasing: buffer[offset..<offset + Int(length)]),
                as: UTF8.self)
        }
    }
}
