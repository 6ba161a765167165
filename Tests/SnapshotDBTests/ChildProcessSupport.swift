import Foundation
import SnapshotDBTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// What a child test (see ``runChildTest(_:environmentKey:path:)``) reported.
struct ChildTestReport {
    /// The `RESULT name value` lines the child printed, by name.
    let results: [String: String]
    /// Everything the child printed, for failure messages.
    let output: String
    let terminationStatus: Int32
}

/// Runs this test binary again as a child process that runs only the test named `testName`,
/// with `environmentKey` set to `path` (the child test is enabled by that variable), and
/// collects the `RESULT name value` lines it prints with ``reportResult(_:_:)``.
///
/// For tests that must change the process itself (a file size limit standing in for a full
/// disk), so that the change never touches the test runner. With `unprivileged`, a test runner
/// running as root starts the child as `nobody` through `setpriv(1)`.
func runChildTest(_ testName: String, environmentKey: String, path: String, unprivileged: Bool = false)
    throws -> ChildTestReport
{
    let testBinary = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
    let arguments = ["--testing-library", "swift-testing", "--filter", testName]
    let child =
        unprivileged && getuid() == 0
        ? try ChildProcess.run(
            "/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", testBinary] + arguments,
            environment: [environmentKey: path])
        : try ChildProcess.run(testBinary, arguments, environment: [environmentKey: path])
    let text = child.standardOutput
    let results = Dictionary(
        text.split(separator: "\n").compactMap { line -> (String, String)? in
            let parts = line.split(separator: " ", maxSplits: 2).map(String.init)
            return parts.count == 3 && parts[0] == "RESULT" ? (parts[1], parts[2]) : nil
        }, uniquingKeysWith: { $1 })
    return ChildTestReport(results: results, output: text, terminationStatus: child.status)
}

/// Prints one result line of a child test for ``runChildTest(_:environmentKey:path:)``.
func reportResult(_ name: String, _ value: String) { print("RESULT \(name) \(value)") }

/// Runs `body` with a file size limit (`RLIMIT_FSIZE`) 64 KiB above the current size of the
/// file at `path`: SQLite's writes past it fail exactly as on a full file system. The limit is
/// lifted when `body` returns. Only for child tests: it limits the whole process.
func withFileSizeLimit<T>(above path: String, _ body: () throws -> T) rethrows -> T {
    signal(SIGXFSZ, SIG_IGN)
    var limit = rlimit()
    getrlimit(fileSizeResource, &limit)
    let original = limit
    let fileSize =
        (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.intValue ?? 0
    limit.rlim_cur = rlim_t(fileSize + 64 * 1024)
    setrlimit(fileSizeResource, &limit)
    defer {
        var restored = original
        setrlimit(fileSizeResource, &restored)
    }
    return try body()
}

/// `RLIMIT_FSIZE` as the type `getrlimit` takes on this platform.
#if canImport(Glibc)
    let fileSizeResource = __rlimit_resource_t(RLIMIT_FSIZE.rawValue)
#else
    let fileSizeResource = RLIMIT_FSIZE
#endif

/// Starts this test binary again as a child process that runs only the test named `testName`,
/// with `environmentKey` set to `value`, and returns it to be driven line by line (see
/// ``ChildProcess``): for children that the test stops at a chosen point, or kills.
func startChildTest(_ testName: String, environmentKey: String, value: String) throws -> ChildProcess {
    let testBinary = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
    return try ChildProcess(
        testBinary, ["--testing-library", "swift-testing", "--filter", testName],
        environment: [environmentKey: value])
}
