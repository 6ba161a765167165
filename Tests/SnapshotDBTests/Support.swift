import Foundation
import SnapshotDB
import SnapshotDBTestSupport
import Testing

/// A new database in a fresh temporary directory, released before the directory is removed.
func withTemporaryDatabase<T>(
    configuration: Configuration = Configuration(), _ body: (Database) throws -> T
) throws -> T {
    try withTemporaryDirectory { directory in
        let database = try Database(
            path: directory.appendingPathComponent("test.sqlite").path, configuration: configuration)
        return try body(database)
    }
}

/// The async form of ``withTemporaryDatabase(configuration:_:)``.
func withTemporaryDatabase<T>(
    configuration: Configuration = Configuration(), _ body: (Database) async throws -> T
) async throws -> T {
    try await withTemporaryDirectory { directory in
        let database = try Database(
            path: directory.appendingPathComponent("test.sqlite").path, configuration: configuration)
        return try await body(database)
    }
}

/// Runs an external command to completion and returns its standard output.
///
/// - Throws: ``ChildProcessFailed`` when it exits with a failure.
@discardableResult
func run(_ executable: String, _ arguments: [String], input: String? = nil) throws -> String {
    try ChildProcess.run(executable, arguments, input: input).succeeded()
}

/// Runs `wait`, a blocking test hook (a wait on a condition of the library), on a thread of its
/// own and returns its result: it then holds no thread of Swift's cooperative pool, which the
/// tasks it waits for need.
func waitOnAThread<T: Sendable>(_ wait: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { (continuation: CheckedContinuation<T, Never>) in
        Thread { continuation.resume(returning: wait()) }.start()
    }
}

/// What `body` returns, or `nil` when it has not returned within `limit`: a bound that fails a
/// test instead of hanging it (a stream that never ends, a value that never comes), not a wait
/// for anything: `body` returns on its own, or the test fails.
func withinTimeLimit<T: Sendable>(
    _ limit: Duration = .seconds(60), _ body: @escaping @Sendable () async -> T
) async -> T? {
    await withTaskGroup(of: T?.self) { group in
        group.addTask { await body() }
        group.addTask {
            try? await Task.sleep(for: limit)
            return nil
        }
        let first = await group.next() ?? nil
        group.cancelAll()
        return first
    }
}

extension Trait where Self == TimeLimitTrait {
    /// The time limit of a suite whose tests await streams (`changes()`, observers, checkpoint
    /// events, consumer batches) with no bound of their own: a hang fails the test, whose task is
    /// cancelled and whose streams then end, instead of holding CI until it is killed. Ten
    /// minutes is far above what any of those tests takes, under ThreadSanitizer (10 to 30 times
    /// slower) too.
    static var hangLimit: Self { .timeLimit(.minutes(10)) }
}

/// A small Codable value used across the tests.
struct Item: Codable, Equatable, Sendable {
    var title: String
    var count: Int = 0
}

/// Expects `body` to throw a ``DatabaseError`` with `code`, and returns it.
@discardableResult
func expectError<R>(
    _ code: DatabaseError.Code, sourceLocation: SourceLocation = #_sourceLocation, _ body: () throws -> R
) -> DatabaseError? {
    do {
        _ = try body()
        Issue.record("expected \(code), but nothing was thrown", sourceLocation: sourceLocation)
    } catch let error as DatabaseError {
        #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
        return error
    } catch {
        Issue.record("expected \(code), got \(error)", sourceLocation: sourceLocation)
    }
    return nil
}

/// The schemas earlier releases wrote, as they wrote them, for the migration tests.
enum OlderSchemas {
    /// Schema version 2 (before the durable history): the commit counter in `snapshotdb_meta`.
    static let version2 = """
        CREATE TABLE snapshotdb_meta(name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL);
        INSERT INTO snapshotdb_meta(name, value) VALUES ('commit', 0), ('external', 0), ('external_sealed', 0);
        CREATE TABLE snapshotdb_values(
            collection TEXT NOT NULL,
            key TEXT NOT NULL,
            data BLOB NOT NULL,
            metadata BLOB,
            PRIMARY KEY (collection, key)
        ) WITHOUT ROWID;
        CREATE TRIGGER snapshotdb_external_insert AFTER INSERT ON snapshotdb_values BEGIN
            UPDATE snapshotdb_meta SET value = value + 1 WHERE name = 'external';
        END;
        CREATE TRIGGER snapshotdb_external_update AFTER UPDATE ON snapshotdb_values BEGIN
            UPDATE snapshotdb_meta SET value = value + 1 WHERE name = 'external';
        END;
        CREATE TRIGGER snapshotdb_external_delete AFTER DELETE ON snapshotdb_values BEGIN
            UPDATE snapshotdb_meta SET value = value + 1 WHERE name = 'external';
        END;
        PRAGMA application_id = 1399735362;
        PRAGMA user_version = 2;
        """
}
