internal import Foundation

/// Runs `PRAGMA integrity_check` through a SQLite that is not SnapshotDB's: the `sqlite3`
/// shell, else python3's `sqlite3` module, always read-only, so a crashed file is judged as it
/// was left (a read-only connection recovers the WAL in memory but never checkpoints it).
struct IntegrityChecker: Sendable {
    /// What runs the check, e.g. `sqlite3 3.40.1`.
    let name: String
    private let executable: URL
    private let arguments: @Sendable (String) -> [String]

    private static let pythonScript = """
        import sqlite3, sys, urllib.parse
        uri = 'file:' + urllib.parse.quote(sys.argv[1]) + '?mode=ro'
        connection = sqlite3.connect(uri, uri=True)
        print('\\n'.join(str(row[0]) for row in connection.execute('PRAGMA integrity_check')))
        """

    /// The first checker found on `PATH`, or `nil` when there is neither `sqlite3` nor `python3`.
    static func find() -> IntegrityChecker? {
        if let shell = ChildProcess.find("sqlite3") {
            let version = (try? ChildProcess.run(shell, ["-version"]))?.output.split(separator: " ").first
            return IntegrityChecker(
                name: "sqlite3" + (version.map { " \($0)" } ?? ""), executable: shell,
                arguments: { ["-readonly", "-batch", "-bail", $0, "PRAGMA integrity_check;"] })
        }
        if let python = ChildProcess.find("python3") {
            return IntegrityChecker(
                name: "python3 sqlite3", executable: python, arguments: { ["-c", pythonScript, $0] })
        }
        return nil
    }

    /// `nil` when the database at `path` is sound, else what the checker said.
    func problems(at path: String) -> String? {
        do {
            let result = try ChildProcess.run(executable, arguments(path))
            let output = result.output.trimmingCharacters(in: .whitespacesAndNewlines)
            if result.termination == .exited(0), output == "ok" { return nil }
            let errors = result.errorOutput.trimmingCharacters(in: .whitespacesAndNewlines)
            return "\(name) \(result.termination): \(output) \(errors)"
        } catch {
            return "\(name) could not run: \(error)"
        }
    }
}
