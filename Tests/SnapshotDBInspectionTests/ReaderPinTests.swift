import Foundation
import SnapshotDBInspection
import SnapshotDBTestSupport
import Testing

/// Foreign readers holding snapshots while another process writes: the tool names them and
/// says what they pin.
@Suite("Readers pinning the WAL")
struct ReaderPinTests {
    /// Timeline:
    ///
    ///     reader  BEGIN; SELECT (WAL empty → slot 0, reads the db file) ─────────── holds ──▶
    ///     writer                      commit 1 · commit 2 · commit 3 · close
    ///     tool                                                              inspect
    @Test("a slot-0 reader is named and blocks all backfill")
    func slotZeroReader() throws {
        try withFixtureDatabase { path in
            let reader = try ReaderProcess(path: path)
            defer { reader.finish() }
            #expect(reader.commit == 0)
            try Python.run(Python.commit, path, "3", "close")

            let json = try Tool.inspectJSON(path)
            let slot = try #require(json.value(at: "readSlots.0") as? [String: Any])
            let holders = try #require(slot["holders"] as? [[String: Any]])
            #expect(
                holders.contains { $0["pid"] as? Int == Int(reader.pid) && $0["mode"] as? String == "shared" }
            )
            #expect(holders.first?["processName"] as? String == "python3")
            #expect(slot.value(at: "pin.readsDatabaseFileOnly") as? Bool == true)
            #expect(slot.value(at: "pin.blocksAllBackfill") as? Bool == true)
            #expect(slot.value(at: "pin.framesBehind") as? Int == 6)  // 3 commits × (values page + meta page)
            #expect(slot.value(at: "pin.commitFramesBehind") as? Int == 3)
            #expect(slot.value(at: "pin.snapshotCommit") as? Int == 0)
            #expect(slot.value(at: "pin.commitsBehind") as? Int == 3)
            #expect(json.value(at: "snapshotDB.commitCounter") as? Int == 3)
            #expect(json.value(at: "walReset.possible") as? Bool == false)
            let blockers = try #require(json.value(at: "walReset.blockers") as? [[String: Any]])
            #expect(
                blockers.contains {
                    $0["reason"] as? String == "slotZeroReader" && ($0["pids"] as? [Int]) == [Int(reader.pid)]
                })

            let text = try Tool.run("inspect", path)
            #expect(text.status == 0)
            #expect(
                text.standardOutput.contains(
                    "slot 0 (mark 0): \(reader.pid) (python3) reads the database file only"))
            #expect(text.standardOutput.contains("6 frames (3 commits"))
            #expect(text.standardOutput.contains("WAL reset   not possible"))

            // The counter read from pages is the one SQLite reads.
            reader.finish()
            #expect(
                try Python.run(Python.readCounter, path).trimmingCharacters(in: .whitespacesAndNewlines)
                    == "3")
        }
    }

    /// Timeline:
    ///
    ///     writer  commit ×3, crash (6 frames stay in the WAL, unchecked)
    ///     reader            BEGIN; SELECT (sees frame 6 → slot 1...4, mark 6) ─── holds ──▶
    ///     writer                            commit 4 · commit 5 · close
    ///     tool                                                      inspect · checkpoint
    @Test("a slot 1...4 reader is named with its mark, the frames it pins and the commits behind")
    func walReader() throws {
        try withFixtureDatabase { path in
            try Python.run(Python.commit, path, "3", "crash")
            let reader = try ReaderProcess(path: path)
            defer { reader.finish() }
            #expect(reader.commit == 3)
            try Python.run(Python.commit, path, "2", "close")

            let report = try SnapshotDBInspector.inspect(databaseAt: path, options: .separateProcess)
            let held = report.readSlots.filter { slot in slot.holders.contains { $0.pid == reader.pid } }
            #expect(held.count == 1)
            let slot = try #require(held.first)
            #expect((1...4).contains(slot.slot))
            #expect(slot.readMark == 6)
            let pin = try #require(slot.pin)
            #expect(pin.snapshotFrame == 6)
            #expect(pin.readsDatabaseFileOnly == false)
            #expect(pin.framesBehind == 4)
            #expect(pin.commitFramesBehind == 2)
            #expect(pin.bytesBehind == 4 * Int64(24 + 4096))
            #expect(pin.snapshotCommit == 3)
            #expect(pin.commitsBehind == 2)
            #expect(report.snapshotDB.commitCounter == 5)
            #expect(report.committedFrames == 10)
            #expect(report.walReset.isPossible == false)
            #expect(
                report.walReset.blockers.contains {
                    $0.reason == .readerPinned && $0.slot == slot.slot && $0.pids == [reader.pid]
                })

            // The counter at any frame, as the monitor would ask for a read mark.
            #expect(try SnapshotDBInspector.commitCounter(databaseAt: path) == 5)
            #expect(try SnapshotDBInspector.commitCounter(databaseAt: path, asOfFrame: 6) == 3)
            #expect(try SnapshotDBInspector.commitCounter(databaseAt: path, asOfFrame: 8) == 4)
            #expect(try SnapshotDBInspector.commitCounter(databaseAt: path, asOfFrame: 0) == 0)
            #expect(throws: InspectionError.self) {
                try SnapshotDBInspector.commitCounter(databaseAt: path, asOfFrame: 11)
            }

            let text = try Tool.run("inspect", path)
            #expect(text.standardOutput.contains("slot \(slot.slot) (mark 6): \(reader.pid) (python3)"))
            #expect(
                text.standardOutput.contains(
                    "pins 4 frames (2 commits, 16.1 KiB) after its mark; sees commit 3 (2 behind)"))

            // A PASSIVE checkpoint copies what the reader does not need, up to its mark.
            let passive = try Tool.run("checkpoint", path, "--mode", "passive")
            #expect(passive.status == 0)
            #expect(
                passive.standardOutput == "checkpoint passive: done; log frames 10, checkpointed frames 6\n")
            let afterPassive = try SnapshotDBInspector.inspect(databaseAt: path, options: .separateProcess)
            #expect(afterPassive.checkpointedFrames == 6)
            #expect(afterPassive.walReset.framesToCheckpoint == 4)

            // TRUNCATE cannot reset the WAL while the reader holds its snapshot: busy, exit 1.
            let busy = try Tool.run("checkpoint", path, "--mode", "truncate", "--json")
            #expect(busy.status == 1)
            let busyJSON = try #require(
                try JSONSerialization.jsonObject(with: Data(busy.standardOutput.utf8)) as? [String: Any])
            #expect(busyJSON["busy"] as? Bool == true)
            #expect(busyJSON["resultCode"] as? Int == 5)

            // Once the reader is gone the reset goes through and the WAL is empty.
            reader.finish()
            try Python.run(Python.commit, path, "1", "crash")  // keeps the files, with no reader
            let truncate = try Tool.run("checkpoint", path, "--mode", "truncate")
            #expect(truncate.status == 0)
            #expect(truncate.standardOutput.hasPrefix("checkpoint truncate: done; log frames 0"))
            let afterTruncate = try SnapshotDBInspector.inspect(databaseAt: path, options: .separateProcess)
            #expect(afterTruncate.wal?.sizeBytes == 0)
            #expect(afterTruncate.snapshotDB.commitCounter == 6)
            #expect(afterTruncate.walReset.isPossible)
        }
    }

    @Test("an open write transaction is named as the writer and blocks the reset")
    func activeWriter() throws {
        try withFixtureDatabase { path in
            try Python.run(Python.commit, path, "1", "crash")
            let writer = try ReaderProcess(path: path, script: Python.holdWriter)
            defer { writer.finish() }

            let report = try SnapshotDBInspector.inspect(databaseAt: path, options: .separateProcess)
            #expect(report.locks?.holders(of: .write).map(\.pid) == [writer.pid])
            #expect(report.locks?.holders(of: .write).first?.mode == .exclusive)
            #expect(report.walReset.isPossible == false)
            #expect(
                report.walReset.blockers.contains { $0.reason == .writerActive && $0.pids == [writer.pid] })
            let text = try Tool.run("inspect", path)
            #expect(
                text.standardOutput.contains(
                    "writer      write lock held by \(writer.pid) (python3) [exclusive]"))
            #expect(text.standardOutput.contains("- a write transaction is open in \(writer.pid) (python3)"))

            let busy = try Tool.run("checkpoint", path, "--mode", "truncate", "--busy-timeout", "10")
            #expect(busy.status == 1)
            #expect(busy.standardOutput.contains("busy"))
        }
    }

    @Test("every held slot is listed, and the oldest snapshot comes first")
    func twoReaders() throws {
        try withFixtureDatabase { path in
            let slotZero = try ReaderProcess(path: path)
            defer { slotZero.finish() }
            try Python.run(Python.commit, path, "2", "close")
            let throughWAL = try ReaderProcess(path: path)
            defer { throughWAL.finish() }
            try Python.run(Python.commit, path, "1", "close")

            let report = try SnapshotDBInspector.inspect(databaseAt: path)
            #expect(report.pinningSlots.count == 2)
            #expect(report.pinningSlots.first?.holders.first?.pid == slotZero.pid)
            #expect(report.pinningSlots.first?.pin?.snapshotCommit == 0)
            #expect(report.pinningSlots.last?.holders.first?.pid == throughWAL.pid)
            #expect(report.pinningSlots.last?.pin?.snapshotCommit == 2)
            #expect(report.pinningSlots.last?.pin?.commitsBehind == 1)
            let connected = Set(report.locks?.connectedProcesses.compactMap(\.pid) ?? [])
            #expect(connected == [slotZero.pid, throughWAL.pid])
        }
    }
}
