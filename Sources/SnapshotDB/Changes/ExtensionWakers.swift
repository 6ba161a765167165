/// Wake-ups for observers of one extension each (a live view's ``Database/observe(view:range:)``
/// sequence), kept under the ``CommitLog``'s lock and woken as each changeset is published.
///
/// A commit wakes only the observers of the extensions it recorded changes for (or reset), so
/// observations of views a commit does not touch cost that commit nothing per observation: a
/// dictionary lookup per extension the commit touched, not a delivery per subscriber as
/// ``Database/changes()`` makes. A commit whose changes are unknown (made outside SnapshotDB,
/// or another history on a replica) wakes every one. A wake-up is a `Void` in a stream that
/// keeps only the newest, so a woken observer that has not looked yet costs nothing more: it
/// reads every commit it missed when it looks (by advancing its bookmark).
struct ExtensionWakers {
    private var byName: [String: [Int: AsyncStream<Void>.Continuation]] = [:]
    private var nextID = 0

    var isEmpty: Bool { byName.isEmpty }

    /// Adds a wake-up for changes of extension `name`; returns its id.
    mutating func add(_ name: String, _ continuation: AsyncStream<Void>.Continuation) -> Int {
        nextID += 1
        byName[name, default: [:]][nextID] = continuation
        return nextID
    }

    /// Removes the wake-up `id` of `name`, and returns it (to finish outside the lock).
    mutating func remove(_ name: String, _ id: Int) -> AsyncStream<Void>.Continuation? {
        let removed = byName[name]?.removeValue(forKey: id)
        if byName[name]?.isEmpty == true { byName[name] = nil }
        return removed
    }

    /// Wakes the observers of the extensions `changeset` changed; returns how many.
    func wake(for changeset: Changeset) -> Int {
        guard !byName.isEmpty else { return 0 }
        let changes = changeset.extensionChanges
        if changeset.isExternal || changes.resetsAll { return wakeAll() }
        var woken = 0
        // The smaller side drives the loop: a commit touches few extensions, and few are watched.
        if changes.byName.count + changes.reset.count <= byName.count {
            for name in changes.byName.keys { woken += wake(name) }
            for name in changes.reset where changes.byName[name] == nil { woken += wake(name) }
        } else {
            for name in byName.keys where changes.byName[name] != nil || changes.reset.contains(name) {
                woken += wake(name)
            }
        }
        return woken
    }

    private func wake(_ name: String) -> Int {
        guard let continuations = byName[name] else { return 0 }
        for continuation in continuations.values { continuation.yield() }
        return continuations.count
    }

    /// Wakes every observer (changes unknown); returns how many.
    @discardableResult
    func wakeAll() -> Int {
        byName.keys.reduce(0) { $0 + wake($1) }
    }

    /// Removes every wake-up and returns them, to be finished outside the lock.
    mutating func removeAll() -> [AsyncStream<Void>.Continuation] {
        defer { byName = [:] }
        return byName.values.flatMap(\.values)
    }
}
