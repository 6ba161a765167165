/// The workloads of issue 6, in table order.
func makeWorkloads(_ sizes: Sizes, writeRounds: Int) -> [Workload] {
    [
        Workload(
            id: "a", title: "insert 100-byte rows, one transaction", operations: sizes.rows, fixture: .empty
        ) { subject, data in
            [try subject.insert(keys: data.keys, payload: data.payload)]
        },
        Workload(
            id: "b", title: "random point reads, one read transaction", operations: sizes.reads,
            fixture: .sharedRows
        ) { subject, data in
            [try checked(subject.readInOneTransaction(keys: data.randomKeys), data.randomKeys.count, subject)]
        },
        Workload(
            id: "b-bytes", title: "random point reads in place (no copy), one read transaction",
            operations: sizes.reads, fixture: .sharedRows
        ) { subject, data in
            [
                try checked(
                    subject.readBytesInOneTransaction(keys: data.randomKeys), data.randomKeys.count, subject)
            ]
        },
        Workload(
            id: "b2", title: "random point reads, one transaction each", operations: sizes.reads,
            fixture: .sharedRows
        ) { subject, data in
            [
                try checked(
                    subject.readOneTransactionEach(keys: data.randomKeys), data.randomKeys.count, subject)
            ]
        },
        Workload(
            id: "c", title: "one-row write transactions", operations: sizes.writeTransactions, fixture: .rows,
            rounds: writeRounds, chunkBody: chunkOfWrites(bumpingCounter: false)
        ),
        Workload(
            id: "c-counter", title: "one-row write transactions, C and GRDB also bump a counter row",
            operations: sizes.writeTransactions, fixture: .rows, rounds: writeRounds,
            chunkBody: chunkOfWrites(bumpingCounter: true)
        ),
        Workload(
            id: "c-checkpointing", title: "one-row write transactions, each engine's own checkpoints",
            operations: sizes.writeTransactions, checkpoints: .engineDefault, fixture: .rows,
            // Not interleaved: SnapshotDB's checkpoints run in the background and would land in
            // the other engines' chunks. Each engine's database is closed (its checkpoints done)
            // before the next engine starts.
            rounds: writeRounds, body: writes(sizes.writeTransactions, bumpingCounter: false)
        ),
        Workload(
            id: "c-normal", title: "one-row write transactions, synchronous NORMAL",
            operations: sizes.writeTransactions,
            sync: .normal, fixture: .rows, body: writes(sizes.writeTransactions, bumpingCounter: false)
        ),
        Workload(
            id: "c-normal-counter",
            title: "one-row write transactions, synchronous NORMAL, C and GRDB also bump a counter row",
            operations: sizes.writeTransactions,
            sync: .normal, fixture: .rows, body: writes(sizes.writeTransactions, bumpingCounter: true)
        ),
        Workload(
            id: "d", title: "advance past one commit, read the changed row", operations: sizes.advances,
            checkpoints: .engineDefault, fixture: .rows
        ) { subject, data in
            [try subject.advanceAndRead(keys: data.writeKeys, iterations: data.sizes.advances, writes: true)]
        },
        Workload(
            id: "d-idle", title: "advance with nothing new, read one row", operations: sizes.advances,
            fixture: .sharedRows
        ) { subject, data in
            [try subject.advanceAndRead(keys: data.writeKeys, iterations: data.sizes.advances, writes: false)]
        },
        Workload(
            id: "e", title: "hot reads of \(sizes.hotKeys) keys, one read transaction",
            operations: sizes.hotReads,
            fixture: .sharedRows
        ) { subject, data in
            try subject.warm(keys: Array(data.hotKeys.prefix(data.sizes.hotKeys)))
            return [
                try checked(subject.readInOneTransaction(keys: data.hotKeys), data.hotKeys.count, subject)
            ]
        },
        Workload(
            id: "f-insert", title: "Codable: encode and insert, one transaction", operations: sizes.rows,
            fixture: .empty
        ) { subject, data in
            [try subject.insertItems(keys: data.keys, items: data.items)]
        },
        Workload(
            id: "f-read", title: "Codable: random reads and decode, one transaction", operations: sizes.reads,
            fixture: .sharedItems
        ) { subject, data in
            [try checked(subject.readItems(keys: data.randomKeys), data.randomKeys.count, subject)]
        },
        Workload(
            id: "g", title: "worst commit latency, laggard pins the WAL", operations: sizes.laggardCommits,
            checkpoints: .engineDefault, fixture: .rows, statistic: .worst, rounds: writeRounds,
            body: writes(sizes.laggardCommits, laggardAfter: sizes.laggardCommits / 4, bumpingCounter: false)
        ),
        Workload(
            id: "g-counter",
            title: "worst commit latency, laggard pins the WAL, C and GRDB also bump a counter row",
            operations: sizes.laggardCommits, checkpoints: .engineDefault, fixture: .rows, statistic: .worst,
            rounds: writeRounds,
            body: writes(sizes.laggardCommits, laggardAfter: sizes.laggardCommits / 4, bumpingCounter: true)
        ),
    ]
}

/// One-row write transactions over the first `count` write keys, with a laggard bookmark taken
/// after `laggardAfter` of them; `bumpingCounter` gives C and GRDB SnapshotDB's counter row.
private func writes(_ count: Int, laggardAfter: Int? = nil, bumpingCounter: Bool)
    -> (any Subject, WorkloadData) throws -> [Duration]
{
    { subject, data in
        try subject.writeTransactions(
            keys: Array(data.writeKeys.prefix(count)), payloads: data.writePayloads,
            laggardAfter: laggardAfter, bumpingCounter: bumpingCounter)
    }
}

/// ``writes(_:laggardAfter:bumpingCounter:)`` for one chunk of an interleaved workload.
private func chunkOfWrites(bumpingCounter: Bool) -> (any Subject, WorkloadData, Range<Int>) throws ->
    [Duration]
{
    { subject, data, range in
        try subject.writeTransactions(
            keys: Array(data.writeKeys[range]), payloads: Array(data.writePayloads[range]),
            laggardAfter: nil, bumpingCounter: bumpingCounter)
    }
}

/// Checks that a read workload found every row it looked for.
private func checked(_ result: (time: Duration, found: Int), _ expected: Int, _ subject: any Subject) throws
    -> Duration
{
    guard result.found == expected else {
        throw BenchmarkCheckFailed(
            description: "\(type(of: subject).engineName) found \(result.found) of \(expected) rows")
    }
    return result.time
}
