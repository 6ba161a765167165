import Foundation
import SnapshotDBTestSupport
import Testing

@testable import SnapshotDB

/// App-written query fragments are compiled under an authorizer before anything runs: only the
/// index's columns, one SELECT, computing functions.
@Suite("Query fragments")
struct QueryFragmentTests {
    static let policy = FragmentPolicy(table: "idx", columns: ["city", "age", "score"])

    static func withIndexTable(_ body: (SQLiteHandle) throws -> Void) throws {
        try withTemporaryDirectory { directory throws in
            let path = directory.appendingPathComponent("fragments.sqlite").path
            _ = try sqlite3(
                path,
                "CREATE TABLE idx(collection TEXT, key TEXT, city TEXT, age INTEGER, score REAL); "
                    + "CREATE TABLE secret(x); INSERT INTO idx VALUES ('p', '1', 'Oslo', 30, 1.5);")
            let handle = try SQLiteHandle(path: path)
            try body(handle)
        }
    }

    static func query(_ whereClause: String, orderBy: String = "age") -> String {
        "SELECT 1 FROM idx WHERE \(whereClause) ORDER BY \(orderBy)"
    }

    @Test(arguments: [
        "city = ? AND age >= ?", "lower(city) LIKE ?", "age BETWEEN ? AND ? OR score IS NULL",
        "coalesce(score, 0) > abs(?)", "city IN (?, ?, ?)",
    ])
    func fragmentsOverTheColumnsAreAllowed(_ fragment: String) throws {
        try Self.withIndexTable { handle throws in
            try handle.checkFragment(Self.query(fragment), policy: Self.policy, fragment: fragment)
        }
    }

    @Test(arguments: [
        ("x IN (SELECT x FROM secret)", "table secret"),
        ("age > (SELECT max(age) FROM idx)", "subquery"),
        ("key = ?", "column key"),
        ("1; DROP TABLE idx", "more than one statement"),
        ("random() > 0", "function random"),
        ("load_extension('x') IS NULL", "function load_extension"),
        ("age > 1) UNION SELECT 1 FROM secret --", "not valid SQL"),
        ("city = 'x' AND sqlite_version() > ''", "function sqlite_version"),
        ("age >", "not valid SQL"),
        ("price > 3", "no such column: price; the columns are city, age, score"),
    ])
    func hostileFragmentsAreRefusedBeforeTheyRun(_ fragment: String, _ reason: String) throws {
        try Self.withIndexTable { handle throws in
            let error = expectError(.invalidQuery) {
                try handle.checkFragment(Self.query(fragment), policy: Self.policy, fragment: fragment)
            }
            let message = error?.message ?? ""
            #expect(message.contains(reason), "\(message)")
            #expect(try handle.int64("SELECT count(*) FROM idx") == 1)
        }
    }

    @Test func orderByIsCheckedToo() throws {
        try Self.withIndexTable { handle throws in
            expectError(.invalidQuery) {
                try handle.checkFragment(
                    Self.query("age > ?", orderBy: "(SELECT x FROM secret)"), policy: Self.policy,
                    fragment: "order")
            }
        }
    }
}
