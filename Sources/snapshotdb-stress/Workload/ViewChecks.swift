internal import SnapshotDB

/// The views the stress run keeps over the accounts, and what a bookmarked reader checks of
/// them: the same order twice, by a closure and by a sort key (which stores each account's key
/// in its pages), each checked against the brute force.
enum ViewChecks {
    static let name = "accountsByBalance"
    static let keyedName = "accountsByBalanceKeyed"
    static let names = [name, keyedName]

    /// Accounts grouped by whether they hold less than they started with, ordered by balance.
    static let view = View<Account>(
        name: name, version: "1", collections: [Bank.accountsCollection],
        group: { _, _, account in account.balance < Bank.initialBalance ? "below" : "at-or-above" },
        areInIncreasingOrder: { $0.balance < $1.balance })

    /// The same view ordered by a sort key.
    static let keyedView = View<Account>(
        name: keyedName, version: "1", collections: [Bank.accountsCollection],
        group: { _, _, account in account.balance < Bank.initialBalance ? "below" : "at-or-above" },
        sortKey: { _, _, account in SortKey(account.balance) })

    /// Both views, registered together by every process of a run.
    static let views: [any DatabaseExtension] = [view, keyedView]

    /// The rows the view must hold for `balances`: grouped and sorted by brute force.
    static func expectedRows(_ balances: [Int64]) -> [String: [ViewItem]] {
        var groups: [String: [(balance: Int64, item: ViewItem)]] = [:]
        for (index, balance) in balances.enumerated() {
            let group = balance < Bank.initialBalance ? "below" : "at-or-above"
            groups[group, default: []].append(
                (balance, ViewItem(collection: Bank.accountsCollection, key: Bank.accountKey(index))))
        }
        return groups.mapValues { members in
            members.sorted { ($0.balance, $0.item) < ($1.balance, $1.item) }.map(\.item)
        }
    }

    /// Reads both views at `connection`'s bookmark and checks each (``check(_:named:snapshot:previous:changes:violations:)``);
    /// returns the rows of each, by view name.
    static func check(
        _ connection: Connection, snapshot: BankSnapshot, previous: [String: [String: [ViewItem]]]?,
        changes: [Changeset], violations: Violations
    ) throws -> [String: [String: [ViewItem]]] {
        var rows: [String: [String: [ViewItem]]] = [:]
        for name in names {
            rows[name] = try check(
                connection, named: name, snapshot: snapshot, previous: previous?[name], changes: changes,
                violations: violations)
        }
        return rows
    }

    /// Reads the view `name` at `connection`'s bookmark and checks it against `snapshot`'s
    /// balances; with `changes` (what the advance to `snapshot` returned) and the rows before,
    /// checks that the row changes turn those rows into these. Returns the rows.
    static func check(
        _ connection: Connection, named name: String, snapshot: BankSnapshot, previous: [String: [ViewItem]]?,
        changes: [Changeset], violations: Violations
    ) throws -> [String: [ViewItem]] {
        let (rows, rowChanges) = try connection.read { txn in
            let view = try txn.view(named: name)
            let rows = Dictionary(uniqueKeysWithValues: view.groups.map { ($0, view.items(inGroup: $0)) })
            return (rows, previous == nil ? [] : try view.changes(for: changes))
        }
        let reader = "\(connection.name) (\(name))"
        violations.check(
            rows.values.reduce(0) { $0 + $1.count } == snapshot.balances.count,
            "\(reader): the view holds \(rows.values.reduce(0) { $0 + $1.count }) accounts at commit \(snapshot.commit)"
        )
        violations.check(
            rows == expectedRows(snapshot.balances),
            "\(reader): the view at commit \(snapshot.commit) is not the accounts sorted by balance")
        if let previous {
            violations.check(
                ViewRowChange.apply(rowChanges, to: previous) == rows,
                "\(reader): the view's \(rowChanges.count) row changes to commit \(snapshot.commit) do not give its rows"
            )
        }
        return rows
    }
}
