/// Number formatting for the text report.
enum Format {
    /// `1234567` as `1,234,567`.
    static func count(_ value: some BinaryInteger) -> String {
        let digits = String(value.magnitude)
        var result = ""
        for (index, digit) in digits.enumerated() {
            if index > 0, (digits.count - index) % 3 == 0 { result.append(",") }
            result.append(digit)
        }
        return value < 0 ? "-" + result : result
    }

    /// `41232` as `41,232 bytes (40.3 KiB)`; small sizes without the unit part.
    static func bytes(_ value: some BinaryInteger) -> String {
        let plain = "\(count(value)) bytes"
        let size = Double(Int64(value))
        guard size >= 1024 else { return plain }
        let units = ["KiB", "MiB", "GiB", "TiB"]
        var scaled = size / 1024
        var unit = 0
        while scaled >= 1024, unit < units.count - 1 {
            scaled /= 1024
            unit += 1
        }
        let tenths = Int((scaled * 10).rounded())
        return "\(plain) (\(tenths / 10).\(tenths % 10) \(units[unit]))"
    }

    /// `41232` as `40.3 KiB`; below 1 KiB as `812 bytes`.
    static func shortBytes(_ value: some BinaryInteger) -> String {
        let full = bytes(value)
        guard let open = full.firstIndex(of: "("), let close = full.lastIndex(of: ")") else { return full }
        return String(full[full.index(after: open)..<close])
    }

    /// `1 commit`, `2 commits`.
    static func plural(_ value: some BinaryInteger, _ noun: String) -> String {
        "\(count(value)) \(noun)\(value == 1 ? "" : "s")"
    }

    /// `0x536e4442`.
    static func hex(_ value: UInt32) -> String { "0x" + String(value, radix: 16) }
}
