internal import Foundation

extension Changeset: CustomStringConvertible {
    /// One line for logs and debugging: the commit, who made it and what it changed, e.g.
    /// `commit 12 by sync; set items["a", "b"]; removed items["c"]; cleared ["drafts"]; info ["source=sync"]`.
    /// At most ten keys per collection are named, then how many more.
    public var description: String {
        let commits =
            self.commits.count > 1 ? "commits \(self.commits.lowerBound)...\(commit)" : "commit \(commit)"
        if isExternal { return "\(commits) made outside this database (anything may have changed)" }
        var parts = ["\(commits) by \(connectionName ?? "another process")"]
        func named(_ keys: Set<String>) -> String {
            let sorted = keys.sorted()
            let shown = sorted.prefix(10).map(\.debugDescription).joined(separator: ", ")
            return "[\(shown)\(sorted.count > 10 ? ", and \(sorted.count - 10) more" : "")]"
        }
        if clearedAllCollections { parts.append("cleared every collection") }
        for (collection, keys) in setKeys.sorted(by: { $0.key < $1.key }) {
            parts.append("set \(collection)\(named(keys))")
        }
        for (collection, keys) in removedKeys.sorted(by: { $0.key < $1.key }) {
            parts.append("removed \(collection)\(named(keys))")
        }
        if !clearedCollections.isEmpty { parts.append("cleared \(clearedCollections.sorted())") }
        if !info.isEmpty {
            parts.append("info \(info.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" })")
        }
        return parts.joined(separator: "; ")
    }
}

extension SnapshotPin: CustomStringConvertible {
    /// e.g. `connection 'ui' (bookmark at commit 40, 9 commits behind, held 3.2 s, pins 193.1 KiB)`.
    public var description: String { Checkpointer.describe(self) }
}

extension CheckpointStatus: CustomStringConvertible {
    /// One line: the WAL's size and progress, and who pins it, e.g. `WAL 4.0 MiB (1021 frames,
    /// 478 checkpointed) at commit 1700; stalled, pinned by connection 'laggard' (...)`.
    public var description: String {
        var text =
            "WAL \(ByteCount(walBytes)) (\(walFrames) frames, \(checkpointedFrames) checkpointed) at commit \(latestCommit)"
        if isStalled { text += "; stalled" }
        let culprits = Checkpointer.culpritNames(laggingSnapshots, externalReaders)
        if !culprits.isEmpty { text += ", pinned by " + culprits.joined(separator: "; ") }
        return text
    }
}
