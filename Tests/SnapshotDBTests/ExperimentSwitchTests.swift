import Foundation
import SnapshotDBTestSupport
import Testing

import struct Synchronization.Atomic

@_spi(Experiments) @testable import SnapshotDB

/// The process-wide switches of the torn-replica experiment (``Experiments``): each is thrown
/// in a child process of its own, since it would change every other test of this one.
@Suite("Experiment switches")
struct ExperimentSwitchTests {
    static let preallocationChildKey = "SNAPSHOTDB_EXPERIMENT_PREALLOCATION_CHILD"
    static let turnsChildKey = "SNAPSHOTDB_EXPERIMENT_TURNS_CHILD"

    /// The child: writes under synchronous = FULL with the preallocation off, and reports how
    /// far the `-wal` goes past its last commit frame.
    @Test(.enabled(if: ProcessInfo.processInfo.environment[preallocationChildKey] != nil))
    func childWritesWithoutPreallocation() throws {
        let path = try #require(ProcessInfo.processInfo.environment[Self.preallocationChildKey])
        Experiments.setWALPreallocation(false)
        let db = try Database(path: path)
        try WALPreallocationTests.writeCommits(to: db)
        let wal = try WALPreallocationTests.WALFile(path: path)
        reportResult("commits", "\(wal.commitFrameEnds.count)")
        reportResult("past-last-frame", "\(wal.bytes.count - wal.lastCommitEnd)")
    }

    /// Without the preallocation the WAL ends at its last frame, as plain SQLite's does; this
    /// process, which left it on, zero-fills as always.
    @Test func theWALPreallocationCanBeTurnedOffForAProcess() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("off.sqlite").path
            let child = try runChildTest(
                "childWritesWithoutPreallocation", environmentKey: Self.preallocationChildKey, path: path)
            #expect(child.terminationStatus == 0, "\(child.output)")
            #expect(child.results["commits"] == "\(WALPreallocationTests.commits)", "\(child.output)")
            #expect(child.results["past-last-frame"] == "0")

            let onPath = directory.appendingPathComponent("on.sqlite").path
            let db = try Database(path: onPath)
            try WALPreallocationTests.writeCommits(to: db)
            let wal = try WALPreallocationTests.WALFile(path: onPath)
            #expect(wal.bytes.count > wal.lastCommitEnd)
        }
    }

    /// The child: writes while a replicator keeps the WAL, with turns forced on, and reports
    /// the turns its writers took.
    @Test(.enabled(if: ProcessInfo.processInfo.environment[turnsChildKey] != nil))
    func childTakesTurnsWhileReplicating() throws {
        let path = try #require(ProcessInfo.processInfo.environment[Self.turnsChildKey])
        Experiments.writerTurnsWhileReplicating = true
        var configuration = Configuration()
        configuration.checkpointing = .external(replicator: "litestream")
        let db = try Database(path: path, configuration: configuration)
        let writer = db.newConnection(name: "writer")
        for index in 0..<3 {
            try writer.readWrite { try $0.set(index, forKey: "\(index)", inCollection: "c") }
        }
        reportResult("turns", "\(db.writerTurns.turnsTaken.load(ordering: .relaxed))")
    }

    /// Forced on, writers take turns even while a replicator keeps the WAL (by default they
    /// take none then: `WriterTurnsTests.noTurnsWhileAReplicatorHoldsTheWAL`).
    @Test func writerTurnsCanBeForcedOnWhileAReplicatorKeepsTheWAL() throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("turns.sqlite").path
            let child = try runChildTest(
                "childTakesTurnsWhileReplicating", environmentKey: Self.turnsChildKey, path: path)
            #expect(child.terminationStatus == 0, "\(child.output)")
            #expect(child.results["turns"].flatMap { Int($0) } ?? 0 >= 1, "\(child.output)")
        }
    }
}
