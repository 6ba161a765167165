import Foundation
import Testing

/// The package declares macOS as well as Linux; CI builds on Linux only, so what would break the
/// other platform's build is looked for in the sources.
@Suite("Portability of the sources")
struct PortabilityTests {
    /// The package's `Sources` directory.
    static let sources = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Sources")

    /// The C library's module per platform, and the conditions that compile code for it.
    static let platformModules = [
        "Glibc": ["canImport(Glibc)", "os(Linux)"],
        "Darwin": ["canImport(Darwin)", "os(macOS)"],
    ]

    /// Every line of `file` that names a platform module (`Glibc.close`) outside an `#if` (or
    /// `#elseif`) branch for that platform, as `file:line: text`.
    static func unguardedModuleNames(in file: URL) throws -> [String] {
        var found: [String] = []
        // The condition of each open `#if` branch, innermost last.
        var branches: [String] = []
        let lines = try String(contentsOf: file, encoding: .utf8).components(separatedBy: "\n")
        for (number, line) in lines.enumerated() {
            let code = line.trimmingCharacters(in: .whitespaces)
            if code.hasPrefix("#if ") {
                branches.append(String(code.dropFirst(4)))
            } else if code.hasPrefix("#elseif ") {
                branches[branches.count - 1] = String(code.dropFirst(8))
            } else if code.hasPrefix("#else") {
                branches[branches.count - 1] = "!(" + branches[branches.count - 1] + ")"
            } else if code.hasPrefix("#endif") {
                branches.removeLast()
            } else if !code.hasPrefix("//") {
                for (module, conditions) in platformModules where code.contains("\(module).") {
                    let guarded = branches.contains { branch in
                        !branch.hasPrefix("!") && conditions.contains { branch.contains($0) }
                    }
                    if !guarded { found.append("\(file.lastPathComponent):\(number + 1): \(code)") }
                }
            }
        }
        return found
    }

    @Test func platformModulesAreNamedOnlyUnderTheirPlatformsCondition() throws {
        let files = try #require(
            FileManager.default.enumerator(at: Self.sources, includingPropertiesForKeys: nil)
        )
        .compactMap { $0 as? URL }.filter { $0.pathExtension == "swift" }
        #expect(files.count > 100, "the sources were found at \(Self.sources.path)")
        var found: [String] = []
        for file in files { found += try Self.unguardedModuleNames(in: file) }
        #expect(found.isEmpty, "\(found.joined(separator: "\n"))")
    }
}
