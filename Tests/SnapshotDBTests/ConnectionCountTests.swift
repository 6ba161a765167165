import Foundation
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDB

/// Costs that must not follow the number of connections (issue 44): an advance concerns its own
/// connection, and a commit hands every bookmark the same changeset without visiting any. Counted
/// with the library's debug counter of connection records visited, not timed.
@Suite("Work that does not follow the number of connections", .hangLimit)
struct ConnectionCountTests {
    /// A small log, so that trims run all along (a trim needs the oldest pin), and no automatic
    /// checkpoint, whose monitor looks at every connection by design, off these paths.
    static var configuration: Configuration {
        var configuration = Configuration()
        configuration.synchronous = .normal
        configuration.commitLogRetention = 8
        configuration.checkpointThresholdPages = 1 << 40
        return configuration
    }

    @Test func anAdvanceBesideAThousandIdleConnectionsVisitsNoneOfThem() throws {
        try withTemporaryDatabase(configuration: Self.configuration) { db in
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { try $0.set(0, forKey: "k", inCollection: "c") }
            let idle = (0..<1_000).map { db.newConnection(name: "idle\($0)") }
            for connection in idle {
                #expect(
                    try connection.read { try $0.value(forKey: "k", inCollection: "c", as: Int.self) } == 0)
            }
            let reader = db.newConnection(name: "reader")
            try reader.beginLongLivedReadTransaction()
            let before = db.debugCounters.value(.connectionRecordVisits)
            for round in 1...200 {
                try writer.readWrite { try $0.set(round, forKey: "k", inCollection: "c") }
                let changesets = try reader.beginLongLivedReadTransaction()
                #expect(changesets.map(\.commit) == [reader.snapshot])
                #expect(
                    try reader.read { try $0.value(forKey: "k", inCollection: "c", as: Int.self) } == round)
            }
            #expect(db.debugCounters.value(.connectionRecordVisits) == before)
            // The log was trimmed along the way all the same: it keeps its retention and a batch.
            #expect(db.commitLogCount <= 8 + 2)
            withExtendedLifetime(idle) {}
        }
    }

    @Test func commitsBesideAHundredAdvancingBookmarksVisitNoneOfThem() throws {
        try withTemporaryDatabase(configuration: Self.configuration) { db in
            let writer = db.newConnection(name: "writer")
            try writer.readWrite { try $0.set(0, forKey: "k", inCollection: "c") }
            let readers = (0..<100).map { db.newConnection(name: "r\($0)") }
            for reader in readers { try reader.beginLongLivedReadTransaction() }
            let laggard = readers[0]
            let lagsFrom = laggard.snapshot
            let before = db.debugCounters.value(.connectionRecordVisits)
            for round in 1...30 {
                try writer.readWrite { try $0.set(round, forKey: "k", inCollection: "c") }
                // Half the readers advance after each commit, the other half after the next,
                // so that their pins differ; the laggard stays behind.
                for (index, reader) in readers.enumerated().dropFirst() where index % 2 == round % 2 {
                    try reader.beginLongLivedReadTransaction()
                }
            }
            #expect(db.debugCounters.value(.connectionRecordVisits) == before)
            // The laggard pins every changeset since its bookmark: the log kept them, and its
            // advance gets all 30; then the log is trimmed back.
            #expect(db.commitLogCount >= 30)
            let jumped = try laggard.beginLongLivedReadTransaction()
            #expect(jumped.first?.commits.lowerBound == lagsFrom + 1)
            #expect(jumped.reduce(0) { $0 + $1.commits.count } == 30)
            for reader in readers.dropFirst() { try reader.beginLongLivedReadTransaction() }
            #expect(db.commitLogCount <= 8 + 2)
            #expect(db.debugCounters.value(.connectionRecordVisits) == before)
        }
    }

    /// The multiset of pins against a brute-force one, over random moves of 40 connections.
    @Test(arguments: [1, 2, 3] as [UInt64])
    func theOldestPinIsTheSmallestOfEveryConnectionsPin(seed: UInt64) {
        var generator = SeededGenerator(state: seed)
        var pins = PinCounts()
        var truth: [UInt64?] = Array(repeating: nil, count: 40)
        var latest: UInt64 = 10
        for _ in 0..<20_000 {
            let connection = Int(generator.next() % 40)
            let roll = generator.next() % 10
            let to: UInt64?
            switch roll {
            case 0: to = nil  // ends its bookmark
            case 1: to = latest - generator.next() % 10  // a bookmark at an older commit
            case 2: to = truth[connection]  // no move
            default:
                latest += roll == 3 ? 1 : 0
                to = latest  // advances to the newest
            }
            pins.move(from: truth[connection], to: to)
            truth[connection] = to
            #expect(pins.oldest == truth.compactMap { $0 }.min())
            #expect(pins.distinctCount == Set(truth.compactMap { $0 }).count)
        }
    }
}
