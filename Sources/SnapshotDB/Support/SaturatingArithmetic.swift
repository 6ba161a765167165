/// Arithmetic on configured bounds that stops at the type's limits instead of trapping: a
/// bound of `.max` (a natural "never" or "no limit") must not overflow when it is added to or
/// multiplied.
extension FixedWidthInteger {
    /// `self + other`, or the bound of the type it would pass.
    func saturatingAdding(_ other: Self) -> Self {
        let (sum, overflow) = addingReportingOverflow(other)
        guard overflow else { return sum }
        return other > 0 ? .max : .min
    }

    /// `self * other`, or the bound of the type it would pass.
    func saturatingMultiplied(by other: Self) -> Self {
        let (product, overflow) = multipliedReportingOverflow(by: other)
        guard overflow else { return product }
        return (self < 0) == (other < 0) ? .max : .min
    }
}
