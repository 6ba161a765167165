/// SplitMix64: a small seedable generator, so a run's random choices can be replayed from its
/// seed (up to thread scheduling).
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var mixed = state
        mixed = (mixed ^ (mixed >> 30)) &* 0xBF58_476D_1CE4_E5B9
        mixed = (mixed ^ (mixed >> 27)) &* 0x94D0_49BB_1331_11EB
        return mixed ^ (mixed >> 31)
    }

    /// An independent generator for worker `index` of a run seeded with `seed`.
    static func forWorker(_ index: Int, seed: UInt64) -> SplitMix64 {
        var base = SplitMix64(seed: seed ^ (UInt64(index) &* 0xD1B5_4A32_D192_ED03))
        return SplitMix64(seed: base.next())
    }
}
