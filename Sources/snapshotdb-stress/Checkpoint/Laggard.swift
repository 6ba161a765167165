internal import SnapshotDB

/// What the laggard phase of a run saw.
struct LaggardReport: Codable, Sendable {
    /// When the laggard bookmarked, in seconds since the run started.
    var bookmarkedAtSeconds = 0.0
    /// How long it held the bookmark without advancing.
    var heldSeconds = 0.0
    var bookmarkCommit: UInt64 = 0
    /// How many commits its one advance jumped.
    var commitsJumped = 0
    /// The `-wal` file's size when the laggard bookmarked, and the most it reached meanwhile.
    var walBytesAtBookmark: Int64 = 0
    var peakWALBytesWhileHeld: Int64 = 0
    /// The WAL size the run holds the database to (its checkpoint warning size).
    var walBoundBytes: Int64 = 0
    /// What `checkpointStatus()` said the laggard pinned just before it advanced.
    var pinnedBytesBeforeAdvance: Int64 = 0
    var commitsBehindBeforeAdvance: UInt64 = 0
    /// Logged warnings (level warning or above) naming the laggard while it held its bookmark.
    var warningsNamingLaggard = 0
    /// `walOverWarning` events whose status lists the laggard as lagging.
    var eventsNamingLaggard = 0
    /// Seconds from the advance until the `-wal` file was back under the bound; `nil` when it
    /// never was before the workload stopped.
    var backUnderBoundAfterSeconds: Double?
    var walBytesAfterRecovery: Int64?
    /// Seconds from the advance until the monitor sent its `recovered` event.
    var recoveredEventAfterSeconds: Double?
    /// Whether the phase ran to completion (the run was long enough and nothing failed).
    var completed = false
    /// Why the recovery after the advance was not checked, when it was not.
    var recoveryNotChecked: String?
}

/// A connection named `laggard` that bookmarks a snapshot and does not advance for a while:
/// the WAL must grow behind it, the checkpoint monitor must name it (in a logged warning, in a
/// `walOverWarning` event and in `checkpointStatus()`), and once it advances the WAL must come
/// back under its bound while the writers keep going.
struct Laggard {
    static let name = "laggard"

    /// When the laggard bookmarks, how long it holds at least, and when it gives up waiting
    /// for the warning, as fractions of the run.
    struct Schedule {
        var bookmarkAt = 0.15
        var holdAtLeastUntil = 0.35
        var holdAtMostUntil = 0.6
    }

    let connection: Connection
    let bank: BankInfo
    let control: RunControl
    let violations: Violations
    let sampler: WALSampler
    let warnings: WarningCapture
    let events: CheckpointEventRecorder
    let walBoundBytes: Int64
    /// Whether the WAL must come back under its bound after the advance. Not with readers in
    /// other processes: a WAL reset needs every process's readers off the WAL at one moment,
    /// and the checkpointer of one process can move only its own bookmarks there.
    var checksRecovery = true
    var schedule = Schedule()

    func run() -> LaggardReport {
        var report = LaggardReport(walBoundBytes: walBoundBytes)
        do {
            try run(&report)
        } catch {
            violations.record("\(Self.name): \(error)")
            control.stop()
        }
        return report
    }

    private func run(_ report: inout LaggardReport) throws {
        control.wait(until: control.instant(at: schedule.bookmarkAt))
        guard control.shouldContinue else { return }

        report.walBytesAtBookmark = sampler.sample()
        report.bookmarkedAtSeconds = control.elapsedSeconds
        try connection.beginLongLivedReadTransaction()
        let bookmarked = ContinuousClock.now
        let held = try BookmarkChecks.read(
            connection, bank: bank, enumerated: false, verifyLog: true, violations: violations)
        report.bookmarkCommit = held.commit

        // Hold the bookmark, by design for wall-clock time: at least until `holdAtLeastUntil`,
        // then until the monitor has named the laggard, giving up at `holdAtMostUntil`.
        let minimumEnd = control.instant(at: schedule.holdAtLeastUntil)
        let maximumEnd = control.instant(at: schedule.holdAtMostUntil)
        var peak = report.walBytesAtBookmark
        var lastRead = ContinuousClock.now
        while control.shouldContinue {
            let now = ContinuousClock.now
            peak = max(peak, sampler.sample())
            if now >= maximumEnd || (now >= minimumEnd && isNamed(since: report.bookmarkedAtSeconds)) {
                break
            }
            if now - lastRead >= .seconds(1) {
                // However many commits were made meanwhile, the bookmark still reads its commit.
                let again = try BookmarkChecks.read(
                    connection, bank: bank, enumerated: true, verifyLog: true, violations: violations)
                violations.check(
                    again.commit == held.commit && again.balances == held.balances,
                    "\(Self.name): reads at bookmark \(held.commit) changed after "
                        + "\(formatSeconds((now - bookmarked).seconds)) "
                        + "(\(Reader.difference(held.balances, again.balances)))")
                lastRead = now
            }
            control.wait(until: now + .milliseconds(25))
        }
        guard control.shouldContinue else { return }

        report.heldSeconds = (ContinuousClock.now - bookmarked).seconds
        report.peakWALBytesWhileHeld = max(peak, sampler.sample())
        report.warningsNamingLaggard = namingWarnings(since: report.bookmarkedAtSeconds)
        report.eventsNamingLaggard = namingEvents(since: report.bookmarkedAtSeconds)
        checkStatus(heldCommit: held.commit, report: &report)

        let changes = try connection.beginLongLivedReadTransaction()
        let advanced = ContinuousClock.now
        let advancedAtSeconds = control.elapsedSeconds
        let next = try BookmarkChecks.read(
            connection, bank: bank, enumerated: false, verifyLog: true, violations: violations)
        report.commitsJumped = changes.count
        try BookmarkChecks.checkAdvance(
            from: held, to: next, changes: changes, connection: connection, bank: bank, violations: violations
        )
        try connection.endLongLivedReadTransaction()

        violations.check(
            report.peakWALBytesWhileHeld > report.walBytesAtBookmark
                && report.peakWALBytesWhileHeld > walBoundBytes,
            "\(Self.name): the WAL did not grow past its bound while the laggard held commit \(held.commit) "
                + "for \(formatSeconds(report.heldSeconds)) (\(report.walBytesAtBookmark) -> "
                + "\(report.peakWALBytesWhileHeld) bytes, bound \(walBoundBytes))")
        violations.check(
            report.warningsNamingLaggard > 0,
            "\(Self.name): no logged checkpoint warning named '\(Self.name)' while it pinned the WAL for "
                + "\(formatSeconds(report.heldSeconds)) (peak \(report.peakWALBytesWhileHeld) bytes)")
        violations.check(
            report.eventsNamingLaggard > 0,
            "\(Self.name): no walOverWarning event listed '\(Self.name)' while it pinned the WAL for "
                + "\(formatSeconds(report.heldSeconds))")

        guard checksRecovery else {
            report.recoveryNotChecked =
                "readers of other processes hold the WAL: a reset needs every process's readers off it at once"
            report.completed = true
            return
        }
        // Once released, the checkpoints must bring the WAL back under its bound while the
        // writers keep going: a bounded wait, polled against the run's deadline.
        while control.shouldContinue {
            if report.backUnderBoundAfterSeconds == nil {
                let size = sampler.sample()
                if size <= walBoundBytes {
                    report.backUnderBoundAfterSeconds = (ContinuousClock.now - advanced).seconds
                    report.walBytesAfterRecovery = size
                }
            }
            if report.recoveredEventAfterSeconds == nil,
                let recovered = events.events(.recovered, since: advancedAtSeconds).first
            {
                report.recoveredEventAfterSeconds = recovered.seconds - advancedAtSeconds
            }
            if report.backUnderBoundAfterSeconds != nil && report.recoveredEventAfterSeconds != nil { break }
            control.wait(until: .now + .milliseconds(20))
        }
        let waited = formatSeconds((ContinuousClock.now - advanced).seconds)
        violations.check(
            report.backUnderBoundAfterSeconds != nil,
            "\(Self.name): the WAL was still \(sampler.sample()) bytes (bound \(walBoundBytes)) "
                + "\(waited) after the laggard advanced")
        violations.check(
            report.recoveredEventAfterSeconds != nil,
            "\(Self.name): no recovered event within \(waited) after the laggard advanced")
        report.completed = true
    }

    /// `checkpointStatus()` must list the laggard as a bookmark behind the newest commit that
    /// pins WAL bytes.
    private func checkStatus(heldCommit: UInt64, report: inout LaggardReport) {
        let status = connection.database.checkpointStatus()
        let pin = status.laggingSnapshots.first { $0.connectionName == Self.name }
        report.pinnedBytesBeforeAdvance = pin?.pinnedBytes ?? 0
        report.commitsBehindBeforeAdvance = pin?.commitsBehind ?? 0
        guard let pin else {
            violations.record(
                "\(Self.name): checkpointStatus() does not list it among the lagging snapshots "
                    + "\(status.laggingSnapshots.map(\.connectionName))")
            return
        }
        violations.check(
            pin.isBookmark && pin.commit == heldCommit && pin.pinnedBytes > 0,
            "\(Self.name): checkpointStatus() describes it as \(pin), holding commit \(heldCommit)")
    }

    private func isNamed(since seconds: Double) -> Bool {
        namingWarnings(since: seconds) > 0 && namingEvents(since: seconds) > 0
    }

    private func namingWarnings(since seconds: Double) -> Int {
        warnings.warnings.filter { $0.seconds >= seconds && $0.names(Self.name) }.count
    }

    private func namingEvents(since seconds: Double) -> Int {
        events.events(.walOverWarning, since: seconds).filter { $0.laggingConnections.contains(Self.name) }
            .count
    }
}

/// `1.23 s`.
func formatSeconds(_ seconds: Double) -> String {
    let hundredths = Int((seconds * 100).rounded())
    let fraction = hundredths % 100
    return "\(hundredths / 100).\(fraction < 10 ? "0" : "")\(fraction) s"
}
