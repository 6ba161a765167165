import SnapshotDBInspection

/// The limits `--warn-wal-bytes` and `--warn-lag-frames` set.
struct HealthThresholds: Sendable {
    var walBytes: Int64?
    var lagFrames: UInt32?
}

/// The verdict of the thresholds on one report; printed with it and turned into the exit code.
struct Health: Sendable, Encodable {
    /// One exceeded threshold.
    struct Warning: Sendable, Encodable {
        var check: String
        var value: Int64
        var threshold: Int64
        var message: String
    }

    var walBytes: Int64
    var lagFrames: UInt32
    var warnings: [Warning]
    var isHealthy: Bool { warnings.isEmpty }

    enum CodingKeys: String, CodingKey {
        case walBytes
        case lagFrames
        case warnings
        case isHealthy = "healthy"
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(walBytes, forKey: .walBytes)
        try container.encode(lagFrames, forKey: .lagFrames)
        try container.encode(warnings, forKey: .warnings)
        try container.encode(isHealthy, forKey: .isHealthy)
    }

    init(report: InspectionReport, thresholds: HealthThresholds) {
        walBytes = report.wal?.sizeBytes ?? 0
        lagFrames = report.framesToCheckpoint
        warnings = []
        if let limit = thresholds.walBytes, walBytes > limit {
            warnings.append(
                Warning(
                    check: "walBytes", value: walBytes, threshold: limit,
                    message:
                        "the -wal is \(Format.bytes(walBytes)), above --warn-wal-bytes \(Format.count(limit))"
                ))
        }
        if let limit = thresholds.lagFrames, lagFrames > limit {
            warnings.append(
                Warning(
                    check: "lagFrames", value: Int64(lagFrames), threshold: Int64(limit),
                    message: "\(Format.count(lagFrames)) committed frames are not checkpointed, "
                        + "above --warn-lag-frames \(Format.count(limit))"))
        }
    }
}
