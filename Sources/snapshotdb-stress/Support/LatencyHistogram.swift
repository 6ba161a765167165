/// Latencies in nanoseconds, bucketed log-linearly: exact below 64 ns, then 64 buckets per
/// power of two (under 1.6 % error), so millions of samples cost a fixed 32 KiB.
struct LatencyHistogram: Sendable {
    private static let subBucketBits = 6
    private static let subBuckets = 1 << subBucketBits

    private var buckets = [UInt64](repeating: 0, count: 64 << subBucketBits)
    private(set) var count: UInt64 = 0
    private(set) var max: UInt64 = 0

    mutating func record(_ nanoseconds: UInt64) {
        buckets[Self.index(of: nanoseconds)] += 1
        count += 1
        if nanoseconds > max { max = nanoseconds }
    }

    mutating func record(_ duration: Duration) { record(duration.nanoseconds) }

    mutating func merge(_ other: LatencyHistogram) {
        for index in buckets.indices { buckets[index] += other.buckets[index] }
        count += other.count
        if other.max > max { max = other.max }
    }

    /// The smallest recorded latency that `fraction` of the samples do not exceed (the upper
    /// edge of its bucket, capped at the maximum); `0` when empty.
    func percentile(_ fraction: Double) -> UInt64 {
        guard count > 0 else { return 0 }
        let rank = Swift.max(1, UInt64((Double(count) * fraction).rounded(.up)))
        var seen: UInt64 = 0
        for (index, bucketCount) in buckets.enumerated() where bucketCount > 0 {
            seen += bucketCount
            if seen >= rank { return Swift.min(Self.upperEdge(of: index), max) }
        }
        return max
    }

    private static func index(of value: UInt64) -> Int {
        guard value >= UInt64(subBuckets) else { return Int(value) }
        let exponent = 63 - value.leadingZeroBitCount
        let shift = exponent - subBucketBits
        let subBucket = Int((value >> UInt64(shift)) & UInt64(subBuckets - 1))
        return (shift + 1) * subBuckets + subBucket
    }

    private static func upperEdge(of index: Int) -> UInt64 {
        guard index >= subBuckets else { return UInt64(index) }
        let shift = index / subBuckets - 1
        let subBucket = UInt64(index % subBuckets)
        let lower = (UInt64(subBuckets) + subBucket) << UInt64(shift)
        return lower + (1 << UInt64(shift)) - 1
    }
}
