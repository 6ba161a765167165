internal import Foundation
internal import SnapshotDBLocking

#if canImport(Glibc)
    internal import Glibc
#elseif canImport(Darwin)
    internal import Darwin
#endif

/// Watches the size of the database's `-wal` file from the outside (`stat`), the way an
/// operator would, and keeps the peak.
final class WALSampler: Sendable {
    let walPath: String
    private let peak = Mutex<Int64>(0)

    init(databasePath: String) {
        walPath = databasePath + "-wal"
    }

    /// The current size of the `-wal` file; `0` when it does not exist.
    func sample() -> Int64 {
        var info = stat()
        let size = stat(walPath, &info) == 0 ? Int64(info.st_size) : 0
        peak.withLock { $0 = max($0, size) }
        return size
    }

    /// The largest size seen so far.
    var peakBytes: Int64 { peak.withLock { $0 } }

    /// Samples every `interval` until the run ends.
    func run(control: RunControl, interval: Duration = .milliseconds(10)) {
        while control.shouldContinue {
            _ = sample()
            Thread.sleep(forTimeInterval: interval.seconds)
        }
        _ = sample()
    }
}
