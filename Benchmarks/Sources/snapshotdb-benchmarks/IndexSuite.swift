import Foundation
import GRDB
import Logging
import SnapshotDB

/// The value of the index rows: typed columns to index, text to search.
struct IndexPerson: Codable, Sendable {
    var city: String
    var age: Int
    var score: Double
    var bio: String
}

let indexCities = ["Oslo", "Bergen", "Lisbon", "Porto", "Kyoto", "Osaka", "Lima", "Quito", "Accra", "Dakar"]

/// A fixed vocabulary with a Zipf-like draw (word i about 1/(i+1) as often as the first), so
/// that some words are in most texts and most words are rare.
let indexWords: [String] = (0..<2_000).map { index in
    let syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pu"]
    return syllables[index % 10] + syllables[(index / 10) % 10] + syllables[(index / 100) % 10]
        + (index >= 1_000 ? "x" : "")
}

func indexText(_ generator: inout SplitMix64, words: Int) -> String {
    (0..<words).map { _ in
        // Inverse-CDF of a 1/x density over [1, 2000]: a Zipf-like rank.
        let uniform = Double(generator.next() % 1_000_000) / 1_000_000
        let rank = Int(exp(uniform * log(2_000.0))) - 1
        return indexWords[min(indexWords.count - 1, max(0, rank))]
    }.joined(separator: " ")
}

func indexPerson(_ generator: inout SplitMix64) -> IndexPerson {
    IndexPerson(
        city: indexCities[Int(generator.next() % UInt64(indexCities.count))],
        age: Int(generator.next() % 90), score: Double(generator.next() % 10_000) / 100,
        bio: indexText(&generator, words: 12))
}

/// The `indexes` suite (see ``SuiteName/indexes``): `SecondaryIndex` and `FullTextSearch`
/// beside GRDB with the same SQL indexes and an FTS5 table.
func runIndexSuite(_ context: SuiteContext) throws -> SuiteReport {
    var report = SuiteReport(
        title: "secondary indexes and full-text search (issue 15)",
        columns: ["SnapshotDB", "without extension", "GRDB", "SnapshotDB / without", "SnapshotDB / GRDB"],
        notes: [
            "Values: people {city (10), age (0–89), score, bio: 12 words of a 2,000-word Zipf-like vocabulary}.",
            "i-build, fts-build: registering the index (columns city, age, score, one SQLite index each) or the "
                + "full-text index (bio) over N values; GRDB: CREATE INDEX × 3, or filling an FTS5 table; "
                + "\"without extension\" for i-build: a scan that decodes every value (the issue 26 target).",
            "i-query: `keys(where: \"age >= ?\", orderBy: \"age\", limit: 20)` (the age index serves filter and "
                + "order), 1,000 queries with varying arguments in one read transaction (i-query-txn: one read "
                + "transaction each); i-query-sort: 20 of `city = ? AND age >= ?` ordered by `age DESC` (SQLite "
                + "sorts the city's matches); "
                + "GRDB: the same SQL on a table with the same indexes, through a cached statement.",
            "fts-query: `keys(matching: word, limit: 50)` ranked by bm25, 200 queries of one word; GRDB: the "
                + "same MATCH … ORDER BY bm25 LIMIT 50 on its FTS5 table.",
            "i-commit, fts-commit: one-row commits changing a person's city and age (and bio), synchronous "
                + "FULL, against the same commit into a database without the extension; GRDB updates its "
                + "indexed table (and its FTS5 row).",
        ])
    let n = context.quick ? 50_000 : 1_000_000
    let ids = [
        "i-build", "fts-build", "i-query", "i-query-txn", "i-query-sort", "fts-query", "i-commit",
        "i-commit-3", "fts-commit",
    ]
    guard ids.contains(where: context.wants) else { return report }
    let bench = try IndexBench(context: context, n: n)
    defer { bench.close() }
    try bench.load()

    func add(
        _ id: String, _ title: String, ours: [Duration], plain: [Duration]?, grdb: [Duration],
        operations: Int,
        target: (String, Double, versusGRDB: Bool)?, plainLabel: String = ""
    ) {
        var cells = [
            "SnapshotDB": perOperationCell(ours, operations: operations),
            "GRDB": perOperationCell(grdb, operations: operations),
            "SnapshotDB / GRDB": format(ratio: medianRatio(ours, grdb)),
        ]
        if let plain {
            cells["without extension"] = perOperationCell(plain, operations: operations) + plainLabel
            cells["SnapshotDB / without"] = format(ratio: medianRatio(ours, plain))
        }
        var row = SuiteRow(id: id, title: title, n: n, cells: cells)
        if let (label, limit, versusGRDB) = target {
            let ratio = versusGRDB ? medianRatio(ours, grdb) : medianRatio(ours, plain ?? grdb)
            report.verdict(label, ratio <= limit, to: &row)
        } else {
            row.verdicts = ["no target"]
        }
        report.rows.append(row)
    }

    let buildRounds = max(1, min(context.rounds, 3))
    context.progress("(i-build, fts-build) registering over \(grouped(n)) values")
    var builds: [[Duration]] = [[], [], [], [], []]
    for _ in 0..<buildRounds {
        let (index, search, grdbIndex, grdbSearch) = try bench.build()
        builds[0].append(index)
        builds[1].append(search)
        builds[2].append(grdbIndex)
        builds[3].append(grdbSearch)
        builds[4].append(try bench.scanValues())
    }
    if context.wants("i-build") {
        add(
            "i-build", "register an index over N values (total)", ours: builds[0], plain: builds[4],
            grdb: builds[2], operations: 1, target: ("≤ 1.5× the scan", 1.5, versusGRDB: false),
            plainLabel: " (scan)")
    }
    if context.wants("fts-build") {
        add(
            "fts-build", "register a full-text index over N values (total)", ours: builds[1], plain: nil,
            grdb: builds[3], operations: 1, target: ("≤ 1.3× GRDB", 1.3, versusGRDB: true))
    }

    let queryRows: [(id: String, kind: IndexBench.QueryKind, each: Bool, count: Int, title: String)] = [
        ("i-query", .range, false, 1_000, "indexed query, 20 keys (age >= ? ORDER BY age)"),
        ("i-query-txn", .range, true, 1_000, "the same, one read transaction each"),
        ("i-query-sort", .sorted, false, 20, "city = ? AND age >= ? ORDER BY age DESC, 20 keys (a sort)"),
    ]
    for (id, kind, each, count, title) in queryRows where context.wants(id) {
        context.progress("(\(id)) \(count) indexed queries of 20 keys")
        var ours: [Duration] = []
        var grdb: [Duration] = []
        for round in 0..<context.rounds {
            let (a, b) = try bench.queries(
                count, kind: kind, eachInTransaction: each, seed: UInt64(round + 1))
            ours.append(a)
            grdb.append(b)
        }
        add(
            id, title, ours: ours, plain: nil, grdb: grdb, operations: count,
            target: ("≤ 1.20× GRDB", 1.2, true))
    }

    if context.wants("fts-query") {
        context.progress("(fts-query) 200 ranked full-text queries")
        var ours: [Duration] = []
        var grdb: [Duration] = []
        for round in 0..<context.rounds {
            let (a, b) = try bench.searches(200, seed: UInt64(round + 40))
            ours.append(a)
            grdb.append(b)
        }
        add(
            "fts-query", "full-text query, 50 ranked hits", ours: ours, plain: nil, grdb: grdb,
            operations: 200,
            target: nil)
    }

    let commitRows: [(id: String, kept: IndexBench.Kept, title: String)] = [
        ("i-commit", .ageIndex, "one-row commit with one index (one column)"),
        ("i-commit-3", .threeColumnIndex, "one-row commit with an index of three columns"),
        ("fts-commit", .search, "one-row commit with a full-text index"),
    ]
    for (id, kept, title) in commitRows where context.wants(id) {
        context.progress("(\(id)) one-row commits, synchronous FULL")
        let commits = context.quick ? 100 : 200
        var ours: [Duration] = []
        var plain: [Duration] = []
        var grdb: [Duration] = []
        for round in 0..<context.rounds {
            let (a, b, c) = try bench.commits(commits, keeping: kept, seed: UInt64(round + 80))
            ours.append(a)
            plain.append(b)
            grdb.append(c)
        }
        add(
            id, title, ours: ours, plain: plain, grdb: grdb, operations: commits,
            target: kept == .ageIndex ? ("≤ 1.30× without the index", 1.3, false) : nil)
    }
    return report
}

/// The databases of the indexes suite: SnapshotDB with the extensions, SnapshotDB without
/// them (the same values), and GRDB's tables.
final class IndexBench {
    let context: SuiteContext
    let n: Int
    private let withExtensions: SnapshotDB.Database
    private let withoutExtensions: SnapshotDB.Database
    private let pool: DatabasePool
    private var people: [IndexPerson] = []

    static let index = SecondaryIndex<IndexPerson>(
        name: "people", version: "1", collections: ["people"],
        columns: [.text("city"), .integer("age"), .real("score")],
        extract: { _, _, person in
            ["city": .text(person.city), "age": .integer(person.age), "score": .real(person.score)]
        })

    static let ageIndex = SecondaryIndex<IndexPerson>(
        name: "ages", version: "1", collections: ["people"], columns: [.integer("age")],
        extract: { _, _, person in ["age": .integer(person.age)] })

    /// Which extension the commit rows keep (the others are unregistered for the row).
    enum Kept { case ageIndex, threeColumnIndex, search }

    static let search = FullTextSearch<IndexPerson>(
        name: "bios", version: "1", collections: ["people"], columns: ["bio"],
        extract: { _, _, person in ["bio": person.bio] })

    init(context: SuiteContext, n: Int) throws {
        self.context = context
        self.n = n
        withExtensions = try ViewBench.open(context.freshPath("indexes-snapshotdb.sqlite"), sync: .full)
        withoutExtensions = try ViewBench.open(context.freshPath("indexes-plain.sqlite"), sync: .full)
        var configuration = GRDB.Configuration()
        configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA wal_autocheckpoint = 0") }
        pool = try DatabasePool(path: context.freshPath("indexes-grdb.sqlite"), configuration: configuration)
        try pool.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
            try db.execute(
                sql: """
                    CREATE TABLE people(key TEXT PRIMARY KEY NOT NULL, city TEXT, age INTEGER, score REAL)
                    WITHOUT ROWID;
                    CREATE TABLE bios(id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE);
                    CREATE VIRTUAL TABLE bios_fts USING fts5(bio);
                    """)
        }
    }

    func load() throws {
        context.progress("(indexes) loading \(grouped(n)) people into each engine")
        var generator = SplitMix64(seed: 15)
        people = (0..<n).map { _ in indexPerson(&generator) }
        for db in [withExtensions, withoutExtensions] {
            try db.newConnection(name: "load").readWrite { txn in
                for (index, person) in people.enumerated() {
                    try txn.set(person, forKey: benchmarkKey(index), inCollection: "people")
                }
            }
            try db.checkpoint(.truncate)
        }
        try pool.write { db in
            let insert = try db.cachedStatement(
                sql: "INSERT INTO people(key, city, age, score) VALUES (?, ?, ?, ?)")
            for (index, person) in people.enumerated() {
                try insert.execute(arguments: [benchmarkKey(index), person.city, person.age, person.score])
            }
        }
        _ = try pool.writeWithoutTransaction { db in try db.checkpoint(.truncate) }
    }

    func close() {
        try? withExtensions.close()
        try? withoutExtensions.close()
        try? pool.close()
    }

    /// Registers both extensions and builds GRDB's indexes and FTS table, from scratch.
    func build() throws -> (Duration, Duration, Duration, Duration) {
        for name in ["bios", "people"] where withExtensions.registeredExtensions.contains(name) {
            try withExtensions.unregister(name)
        }
        let index = try timed { try withExtensions.register(Self.index) }
        let search = try timed { try withExtensions.register(Self.search) }
        try pool.write { db in
            try db.execute(
                sql: """
                    DROP INDEX IF EXISTS people_city; DROP INDEX IF EXISTS people_age;
                    DROP INDEX IF EXISTS people_score; DELETE FROM bios; DELETE FROM bios_fts;
                    """)
        }
        let grdbIndex = try timed {
            try pool.write { db in
                try db.execute(
                    sql: """
                        CREATE INDEX people_city ON people(city); CREATE INDEX people_age ON people(age);
                        CREATE INDEX people_score ON people(score);
                        """)
            }
        }
        let grdbSearch = try timed {
            try pool.write { db in
                let map = try db.cachedStatement(sql: "INSERT INTO bios(id, key) VALUES (?, ?)")
                let text = try db.cachedStatement(sql: "INSERT INTO bios_fts(rowid, bio) VALUES (?, ?)")
                for (index, person) in people.enumerated() {
                    try map.execute(arguments: [index + 1, benchmarkKey(index)])
                    try text.execute(arguments: [index + 1, person.bio])
                }
            }
        }
        return (index, search, grdbIndex, grdbSearch)
    }

    /// A read of every value, decoded: what a build cannot avoid (i-build's target is 1.5× it).
    func scanValues() throws -> Duration {
        var count = 0
        let time = try timed {
            count = try withoutExtensions.newConnection(name: "scan").read { txn in
                try txn.values(inCollection: "people", as: IndexPerson.self).count
            }
        }
        guard count == n else {
            throw BenchmarkCheckFailed(description: "scan found \(count) of \(n) people")
        }
        return time
    }

    /// The queries of the i-query rows: a range the age index serves in order, or the issue's
    /// example, whose matches SQLite sorts (one index per column serves the filter, not the order).
    enum QueryKind { case range, sorted }

    func queries(_ count: Int, kind: QueryKind, eachInTransaction: Bool, seed: UInt64) throws -> (
        Duration, Duration
    ) {
        var generator = SplitMix64(seed: seed)
        let arguments = (0..<count).map { _ in
            (indexCities[Int(generator.next() % UInt64(indexCities.count))], Int(generator.next() % 90))
        }
        var ours: [[String]] = []
        var theirs: [[String]] = []
        let reader = withExtensions.newConnection(name: "reader")
        func ourQuery(_ index: IndexReader, _ city: String, _ age: Int) throws -> [String] {
            switch kind {
            case .range:
                return try index.keys(where: "age >= ?", [.integer(age)], orderBy: "age", limit: 20).map(
                    \.key)
            case .sorted:
                return try index.keys(
                    where: "city = ? AND age >= ?", [.text(city), .integer(age)], orderBy: "age DESC",
                    limit: 20
                ).map(\.key)
            }
        }
        let sql =
            kind == .range
            ? "SELECT key FROM people WHERE age >= ?2 ORDER BY age LIMIT 20"
            : "SELECT key FROM people WHERE city = ?1 AND age >= ?2 ORDER BY age DESC LIMIT 20"
        let ourTime = try timed {
            if eachInTransaction {
                for (city, age) in arguments {
                    ours.append(try reader.read { try ourQuery($0.index(named: "people"), city, age) })
                }
            } else {
                // One reader for the transaction, as GRDB's side prepares its statement once.
                try reader.read { txn in
                    let index = try txn.index(named: "people")
                    for (city, age) in arguments { ours.append(try ourQuery(index, city, age)) }
                }
            }
        }
        let theirTime = try timed {
            if eachInTransaction {
                for (city, age) in arguments {
                    theirs.append(
                        try pool.read { db in
                            try String.fetchAll(db.cachedStatement(sql: sql), arguments: [city, age])
                        })
                }
            } else {
                try pool.read { db in
                    let statement = try db.cachedStatement(sql: sql)
                    for (city, age) in arguments {
                        theirs.append(try String.fetchAll(statement, arguments: [city, age]))
                    }
                }
            }
        }
        // Ties on age may come in another order (and past the limit, other keys of the same age):
        // the ages returned, which the query fixes, must agree.
        func ages(_ results: [[String]]) -> [[Int]] {
            results.map { keys in keys.map { people[Int($0.dropFirst(3))!].age } }
        }
        guard ages(ours) == ages(theirs), ours.contains(where: { $0.count == 20 }) else {
            throw BenchmarkCheckFailed(description: "i-query: SnapshotDB and GRDB returned different rows")
        }
        return (ourTime, theirTime)
    }

    func searches(_ count: Int, seed: UInt64) throws -> (Duration, Duration) {
        var generator = SplitMix64(seed: seed)
        // Words of middling frequency: ranks 5 to 400.
        let words = (0..<count).map { _ in indexWords[5 + Int(generator.next() % 395)] }
        var ours: [Set<String>] = []
        var theirs: [Set<String>] = []
        let ourTime = try timed {
            try withExtensions.newConnection(name: "reader").read { txn in
                let search = try txn.search(named: "bios")
                for word in words { ours.append(Set(try search.keys(matching: word, limit: 50).map(\.key))) }
            }
        }
        let sql = """
            SELECT b.key FROM bios_fts JOIN bios b ON b.id = bios_fts.rowid WHERE bios_fts MATCH ?
            ORDER BY bm25(bios_fts) LIMIT 50
            """
        let theirTime = try timed {
            try pool.read { db in
                let statement = try db.cachedStatement(sql: sql)
                for word in words { theirs.append(Set(try String.fetchAll(statement, arguments: [word]))) }
            }
        }
        // bm25 ties may order differently; the sizes must agree.
        guard ours.map(\.count) == theirs.map(\.count), ours.contains(where: { $0.count == 50 }) else {
            throw BenchmarkCheckFailed(
                description: "fts-query: SnapshotDB and GRDB found different numbers of hits")
        }
        return (ourTime, theirTime)
    }

    /// `count` one-row commits on every side, in interleaved chunks of ten.
    func commits(_ count: Int, keeping kept: Kept, seed: UInt64) throws -> (Duration, Duration, Duration) {
        var generator = SplitMix64(seed: seed)
        let changes = (0..<count).map { _ in (Int(generator.next() % UInt64(n)), indexPerson(&generator)) }
        let wanted: any DatabaseExtension
        let wantedName: String
        switch kept {
        case .ageIndex: (wanted, wantedName) = (Self.ageIndex, "ages")
        case .threeColumnIndex: (wanted, wantedName) = (Self.index, "people")
        case .search: (wanted, wantedName) = (Self.search, "bios")
        }
        for name in withExtensions.registeredExtensions where name != wantedName {
            try withExtensions.unregister(name)
        }
        if !withExtensions.registeredExtensions.contains(wantedName) { try withExtensions.register(wanted) }
        let search = kept == .search
        let ours = withExtensions.newConnection(name: "writer")
        let plain = withoutExtensions.newConnection(name: "writer")
        var totals: [Duration] = [.zero, .zero, .zero]
        for chunk in stride(from: 0, to: count, by: 10) {
            let slice = changes[chunk..<min(count, chunk + 10)]
            for (side, connection) in [(0, ours), (1, plain)] {
                totals[side] += try timed {
                    for (index, person) in slice {
                        try connection.readWrite { txn in
                            try txn.set(person, forKey: benchmarkKey(index), inCollection: "people")
                        }
                    }
                }
            }
            totals[2] += try timed {
                for (index, person) in slice {
                    try pool.write { db in
                        try db.cachedStatement(
                            sql: "UPDATE people SET city = ?, age = ?, score = ? WHERE key = ?"
                        )
                        .execute(arguments: [person.city, person.age, person.score, benchmarkKey(index)])
                        if search {
                            try db.cachedStatement(sql: "UPDATE bios_fts SET bio = ? WHERE rowid = ?")
                                .execute(arguments: [person.bio, index + 1])
                        }
                    }
                }
            }
        }
        for (index, person) in changes { people[index] = person }
        return (totals[0], totals[1], totals[2])
    }
}
