internal import SnapshotDB
internal import SnapshotDBLocking

/// One event of `Database.checkpointEvents()`, as the run saw it.
struct RecordedCheckpointEvent: Codable, Sendable {
    enum Kind: String, Codable, Sendable {
        case checkpointStalled
        case walOverWarning
        case recovered
    }

    /// Seconds since the run started.
    let seconds: Double
    let kind: Kind
    let walBytes: Int64
    /// The connections the event's status lists as lagging behind the newest commit.
    let laggingConnections: [String]
}

/// Follows `Database.checkpointEvents()` for the whole run, so that the laggard phase can check
/// the typed events as well as the logged warnings.
final class CheckpointEventRecorder: Sendable {
    private let start: ContinuousClock.Instant
    private let events = Mutex<[RecordedCheckpointEvent]>([])
    private let task = Mutex<Task<Void, Never>?>(nil)

    init(database: Database, start: ContinuousClock.Instant) {
        self.start = start
        let stream = database.checkpointEvents()
        let task = Task.detached { [self] in
            for await event in stream { record(event) }
        }
        self.task.withLock { $0 = task }
    }

    private func record(_ event: CheckpointEvent) {
        let kind: RecordedCheckpointEvent.Kind =
            switch event {
            case .checkpointStalled: .checkpointStalled
            case .walOverWarning: .walOverWarning
            case .recovered: .recovered
            }
        let recorded = RecordedCheckpointEvent(
            seconds: (ContinuousClock.now - start).seconds, kind: kind, walBytes: event.status.walBytes,
            laggingConnections: event.status.laggingSnapshots.map(\.connectionName))
        events.withLock { $0.append(recorded) }
    }

    /// The events of `kind` sent at or after `seconds` into the run.
    func events(_ kind: RecordedCheckpointEvent.Kind, since seconds: Double) -> [RecordedCheckpointEvent] {
        events.withLock { $0 }.filter { $0.kind == kind && $0.seconds >= seconds }
    }

    /// Every event so far.
    var all: [RecordedCheckpointEvent] { events.withLock { $0 } }

    /// Stops following the stream.
    func stop() { task.withLock { $0?.cancel() } }
}
