import Testing

@testable import SnapshotDB

/// When a read replica's handle is taken for stalled (``ReplicaHandleFollowing``): the rule,
/// with the clock given.
@Suite("A replica handle that stops following")
struct ReplicaHandleFollowingTests {
    /// One look: the log's marks, the handle's snapshot (`nil` before one is taken), the newest
    /// commit published, and when, after the start.
    struct Look {
        var marks: Int
        var coversLatest = false
        var snapshot: UInt64?
        var latest: UInt64
        var after: Duration
    }

    /// Whether each look found the handle stalled, in order.
    static func stalls(marksAtOpen: Int, _ looks: [Look]) -> [Bool] {
        let start = ContinuousClock.now
        var following = ReplicaHandleFollowing(marksAtOpen: marksAtOpen)
        return looks.map { look in
            following.isStalled(
                marks: (look.marks, look.coversLatest), snapshot: look.snapshot, latest: look.latest,
                now: start + look.after)
        }
    }

    static let limit = ReplicaHandleFollowing.stallLimit
    static let tick = Duration.milliseconds(1)

    @Test func aMarkSinceTheOpenStallsItAtOnce() {
        let looks = [
            Look(marks: 2, latest: 10, after: .zero),
            Look(marks: 3, latest: 10, after: .zero),
            Look(marks: 3, coversLatest: true, snapshot: 10, latest: 10, after: .zero),
        ]
        #expect(Self.stalls(marksAtOpen: 2, looks) == [false, true, true])
    }

    @Test func theSameSnapshotBehindForTheLimitStallsIt() {
        let looks = [
            Look(marks: 0, snapshot: 7, latest: 9, after: .zero),
            Look(marks: 0, snapshot: 7, latest: 12, after: Self.limit - Self.tick),
            Look(marks: 0, snapshot: 7, latest: 12, after: Self.limit),
        ]
        #expect(Self.stalls(marksAtOpen: 0, looks) == [false, false, true])
    }

    /// A handle that moves on, or catches up, is following: each snapshot found behind starts
    /// the count again (a reader that reads once a minute is a second behind each time).
    @Test func aHandleThatMovesOnOrCatchesUpIsFollowing() {
        let looks = [
            Look(marks: 0, snapshot: 7, latest: 9, after: .zero),
            Look(marks: 0, snapshot: 8, latest: 9, after: Self.limit),
            Look(marks: 0, snapshot: 8, latest: 9, after: Self.limit * 2 - Self.tick),
            Look(marks: 0, snapshot: 9, latest: 9, after: Self.limit * 2),
            Look(marks: 0, snapshot: 9, latest: 10, after: Self.limit * 3),
            Look(marks: 0, snapshot: 9, latest: 10, after: Self.limit * 4),
        ]
        #expect(Self.stalls(marksAtOpen: 0, looks) == [false, false, false, false, false, true])
    }

    /// Under a put-back primary's reused numbers, being behind the newest commit published is
    /// expected: no stall is counted there, and the count starts again past them.
    @Test func behindWithinTheMarkedEntriesIsNoStall() {
        let looks = [
            Look(marks: 1, coversLatest: true, snapshot: 3, latest: 9, after: .zero),
            Look(marks: 1, coversLatest: true, snapshot: 3, latest: 9, after: Self.limit * 10),
            Look(marks: 1, snapshot: 3, latest: 10, after: Self.limit * 11 - Self.tick),
            Look(marks: 1, snapshot: 3, latest: 10, after: Self.limit * 12 - Self.tick),
        ]
        #expect(Self.stalls(marksAtOpen: 1, looks) == [false, false, false, true])
    }
}
