public import Foundation

/// The package's executables as the test run built them (`snapshotdb`), found next to the test
/// bundle: the one place both test targets look for them.
public enum BuiltProducts {
    /// The built executable `name`, or `nil` when it is not next to the test bundle.
    public static func executable(_ name: String) -> URL? {
        var directories: [URL] = []
        let bundle = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
            .deletingLastPathComponent()
        directories += [bundle, bundle.deletingLastPathComponent()]
        if let executable = Bundle.main.executableURL {
            directories.append(executable.deletingLastPathComponent())
        }
        directories.append(URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent())
        let packageRoot = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        directories.append(packageRoot.appendingPathComponent(".build/debug"))
        return directories.map { $0.appendingPathComponent(name) }
            .first { FileManager.default.isExecutableFile(atPath: $0.path) }
    }
}
