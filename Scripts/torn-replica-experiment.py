#!/usr/bin/env python3
"""The torn-replica experiment: does SnapshotDB make Litestream's replicas tear?

The stress run saw Litestream 0.5.17 restores that failed `integrity_check` or held a
transfer half applied, in 4 of 29 runs with writer turns and 1 of about 74 without, and none
from a Python writer on plain SQLite. This script runs the arms below under one driver, with
one workload, one kill schedule and one set of restore checks, so that only the writer differs:

  snapshotdb        SnapshotDB as it is (no writer turns while Litestream replicates)
  no-prealloc       SnapshotDB without its VFS's zero-fill past the WAL's end
  turns-on          SnapshotDB with writer turns taken even while Litestream replicates
  turns-off         SnapshotDB with writer turns off (Configuration.writerTurns = false)
  plain             plain SQLite (this script's `plain-writer`, Python's sqlite3 module) doing
                    the same transactions on the same file, with SnapshotDB's settings

One run: a new bank (100 accounts, the stress run's two views and index) created by
SnapshotDB; Litestream started (file:// replica, 200 ms sync interval, truncate-page-n 1024,
as the stress run configures it); three writer processes of the arm for --seconds (two
writers and a bookmarked reader each, and a laggard that holds its snapshot 2-5 s at a time in
the first); meanwhile, every 0.7-2.0 s, a round as the stress run's: every third round a
restore that is checked, the others a SIGTERM or a SIGKILL (even odds) and a new Litestream.
After the writers exit, a restore every 0.5 s until one holds the last acknowledged commit
(at most --tail seconds). Every restore is checked: `PRAGMA integrity_check`; the bank's
total; every account's balance in the secondary index equal to its value; the newest commit's
transfer logged and none newer (a restore whose values and history come from different
commits fails it). A run is torn when any restore in it failed a check.

    python3 Scripts/torn-replica-experiment.py run --runs 50 --out results.jsonl
    python3 Scripts/torn-replica-experiment.py report results.jsonl
    python3 Scripts/torn-replica-experiment.py calibrate

`run --arms snapshotdb-purge,plain-purge` runs SnapshotDB as it is and the plain writer with the
history kept to 1,000 commits, so that both purge it (as SnapshotDB does past 10,000) for most
of each run.

`run --arms stress,stress-turns-on` runs the reference arms instead: the stress run itself, as CI
runs it (`--processes 2 --no-crash-rounds --litestream`, --stress-seconds), with its own checks,
and with writer turns forced on (its hidden `--writer-turns on`), as when it saw them.

`run` goes round the arms in a new random order each round (so the machine's load drifts
over every arm alike) and appends one JSON line per run to --out, so a run can be stopped and
continued. `report` prints each arm's torn runs with a Wilson 95% interval. `calibrate`
measures each writer's WAL frames per commit without Litestream, so the plain writer's
I/O can be compared with SnapshotDB's. Needs `litestream` on PATH and a built
`snapshotdb-stress` (--stress, default .build/debug/snapshotdb-stress; the release build for
numbers). The runs of 2026-11-29 and what they show: Benchmarks/README.md, "Torn Litestream
replicas", and Benchmarks/torn-replicas-2026-11-29.jsonl.
"""
import argparse, json, math, os, random, shutil, signal, sqlite3, struct, subprocess, sys, threading, time

ARMS = ["snapshotdb", "no-prealloc", "turns-on", "turns-off", "plain"]
# SnapshotDB as it is and the plain writer with a history kept to 1,000 commits, so that both
# purge it (SnapshotDB in steps of its own transactions, the plain writer as SnapshotDB does)
# for most of each run, as the default 10,000 does only in runs past 10,000 commits.
PURGE_ARMS = ["snapshotdb-purge", "plain-purge"]
PURGE_RETENTION = 1000
# The stress run itself (`snapshotdb-stress run --processes 2 --no-crash-rounds --litestream`), as
# CI runs it, with its own workload, schedule and checks (SnapshotDB's open included): a
# reference for whether the torn replicas it once saw come back on this machine at all.
REFERENCE_ARMS = ["stress", "stress-turns-on"]
ACCOUNTS = 100
SYNC_INTERVAL = "200ms"
TRUNCATE_PAGES = 1024  # the stress run's 4 MiB WAL bound in 4 KiB pages
MAP_REWRITES = 0.39  # SnapshotDB writes a view's map page in 0.39 commits (calibrate)


# MARK: The plain-SQLite writer


def plain_connection(db):
    c = sqlite3.connect(db, isolation_level=None, timeout=60, check_same_thread=False)
    # SnapshotDB's settings: FULL, its journal size limit, a PASSIVE checkpoint past 256 pages
    # (SnapshotDB's monitor runs it on a thread of its own; SQLite's in the committing writer).
    c.execute("PRAGMA synchronous=FULL")
    c.execute("PRAGMA journal_size_limit=%d" % (8 << 20))
    c.execute("PRAGMA wal_autocheckpoint=256")
    return c


def tables(c):
    names = [r[0] for r in c.execute("SELECT name FROM sqlite_schema WHERE type='table'")]
    maps = sorted(n for n in names if n.endswith("_map"))
    pages = sorted(n for n in names if n.endswith("_page"))
    index = [n for n in names if n.endswith("_index")][0]
    return maps, pages, index


def plain_transfer(c, r, name, maps, pages, index):
    """SnapshotDB's transfer transaction in plain SQL: the same rows of the same tables."""
    a = r.randrange(ACCOUNTS)
    b = r.randrange(ACCOUNTS - 1)
    b += b >= a
    ka, kb = "a%05d" % a, "a%05d" % b
    requested = r.randint(1, 100)
    c.execute("BEGIN IMMEDIATE")
    try:
        get = "SELECT data FROM snapshotdb_values WHERE collection='accounts' AND key=?"
        source = json.loads(c.execute(get, (ka,)).fetchone()[0])["balance"]
        target = json.loads(c.execute(get, (kb,)).fetchone()[0])["balance"]
        amount = min(requested, source)
        commit = c.execute("SELECT max(number) FROM snapshotdb_history").fetchone()[0] + 1
        put = "UPDATE snapshotdb_values SET data=? WHERE collection='accounts' AND key=?"
        for key, balance in ((ka, source - amount), (kb, target + amount)):
            c.execute(put, (json.dumps({"balance": balance}, separators=(",", ":")).encode(), key))
            c.execute(f'UPDATE {index} SET "balance"=? WHERE collection=\'accounts\' AND key=?', (balance, key))
        entry = {"amount": amount, "commit": commit, "from": a, "to": b, "writer": name}
        c.execute(
            "INSERT INTO snapshotdb_values(collection, key, data) VALUES ('log', ?, ?)",
            ("%012d" % commit, json.dumps(entry, separators=(",", ":"), sort_keys=True).encode()),
        )
        for m, p in zip(maps, pages):
            # A view's upkeep rewrites the pages holding the two items, and now and then (when
            # an item moves to another page) their map rows. SQLite writes nothing for an
            # UPDATE that changes no value, so each row is changed and changed back.
            for _ in range(2):
                c.execute(
                    f"UPDATE {p} SET position=-position WHERE id IN (SELECT page FROM {m} WHERE collection='accounts' AND key IN (?, ?))",
                    (ka, kb),
                )
            if r.random() < MAP_REWRITES:
                for _ in range(2):
                    c.execute(f"UPDATE {m} SET page=-page WHERE collection='accounts' AND key=?", (ka,))
        info = json.dumps({"from": ka, "to": kb}, separators=(",", ":"))
        c.execute(
            "INSERT INTO snapshotdb_history(number, kind, date, process, connection, token, info, changes) "
            "VALUES (?, 0, (julianday('now') - 2440587.5) * 86400.0, ?, ?, random(), ?, randomblob(264))",
            (commit, os.getpid(), name, info),
        )
        c.execute("COMMIT")
        return commit
    except BaseException:
        c.execute("ROLLBACK")
        raise


def plain_purge(c, retention):
    """SnapshotDB's history purge: one write transaction deleting at most 1,000 of the oldest
    rows past the newest `retention` commits (HistoryPurger.step)."""
    c.execute("BEGIN IMMEDIATE")
    try:
        newest = c.execute("SELECT max(number) FROM snapshotdb_history").fetchone()[0]
        c.execute(
            "DELETE FROM snapshotdb_history WHERE number IN (SELECT number FROM snapshotdb_history "
            "WHERE number <= ? ORDER BY number LIMIT 1000)",
            (newest - retention,),
        )
        c.execute("COMMIT")
    except BaseException:
        c.execute("ROLLBACK")
        raise


def plain_writer(args):
    stop = time.monotonic() + args.duration
    acknowledged, errors, lock = [], [], threading.Lock()
    # SnapshotDB's writers of one process queue on its writer lock, so only one at a time meets
    # SQLite's write lock and its busy handler; so do these.
    writer_lock = threading.Lock()
    setup = plain_connection(args.db)
    maps, pages, index = tables(setup)
    setup.close()

    def write(number):
        r = random.Random(args.seed + number * 7919)
        c = plain_connection(args.db)
        name = "writer-%s-%d" % (args.name, number)
        mine = []
        try:
            # SnapshotDB asks for a purge every min(256, retention / 8) commits.
            interval = max(1, min(256, args.history_retention // 8))
            while time.monotonic() < stop:
                with writer_lock:
                    commit = plain_transfer(c, r, name, maps, pages, index)
                    mine.append(commit)
                    if commit % interval == 0 and commit > args.history_retention:
                        plain_purge(c, args.history_retention)
        except Exception as error:  # reported in the JSON line
            errors.append("%s: %r" % (name, error))
        with lock:
            acknowledged.extend(mine)

    def read(holds):
        r = random.Random(args.seed + (1001 if holds else 1000))
        c = plain_connection(args.db)
        try:
            c.execute("BEGIN")
            while time.monotonic() < stop:
                for _ in range(r.randint(1, 3)):
                    c.execute("SELECT key, data FROM snapshotdb_values WHERE collection='accounts'").fetchall()
                if holds:
                    time.sleep(min(r.uniform(2, 5), max(0, stop - time.monotonic())))
                c.execute("COMMIT")
                c.execute("BEGIN")
            c.execute("COMMIT")
        except Exception as error:
            errors.append("reader: %r" % (error,))

    threads = [threading.Thread(target=write, args=(n,)) for n in range(args.writers)]
    threads += [threading.Thread(target=read, args=(h,)) for h in ([False, True] if args.laggard else [False])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"commits": len(acknowledged), "errors": errors, "last": max(acknowledged, default=0)}, sort_keys=True))
    sys.exit(1 if errors else 0)


def drop_triggers(c):
    """Drops SnapshotDB's foreign-write triggers for the plain writer: SnapshotDB's own
    connections run without them, so the plain writer must too to write the same pages."""
    for trigger in ("insert", "update", "delete"):
        c.execute("DROP TRIGGER snapshotdb_external_" + trigger)


def writer_command(arm, stress, db, name, seed, duration, writers, laggard=False, retention=10000):
    """The command of one writer process of `arm`: the plain writer, or `replica-writer` with
    the arm's switches."""
    common = ["--db", db, "--duration", str(duration), "--writers", str(writers), "--seed", str(seed), "--name", name]
    common += ["--history-retention", str(retention)] + (["--laggard"] if laggard else [])
    if arm.startswith("plain"):
        return [sys.executable, os.path.abspath(__file__), "plain-writer"] + common
    command = [stress, "replica-writer"] + common
    command += ["--no-preallocation"] if arm == "no-prealloc" else []
    return command + ["--turns", {"turns-on": "on", "turns-off": "off"}.get(arm, "automatic")]


# MARK: Restore checks


def check_restore(path):
    """The problems of a restored file, [] when it passes every check, and its commit."""
    c = sqlite3.connect(path)
    try:
        result = [r[0] for r in c.execute("PRAGMA integrity_check").fetchall()]
        if result != ["ok"]:
            return ["integrity: " + "; ".join(result[:3])], None
        problems = []
        info = json.loads(bytes(c.execute("SELECT data FROM snapshotdb_values WHERE collection='bank' AND key='info'").fetchone()[0]))
        rows = c.execute(
            "SELECT key, json_extract(CAST(data AS TEXT), '$.balance') FROM snapshotdb_values WHERE collection='accounts'"
        ).fetchall()
        total = sum(balance for _, balance in rows)
        if len(rows) != info["accounts"] or total != info["total"]:
            problems.append("bank: %d accounts holding %d, not %d holding %d" % (len(rows), total, info["accounts"], info["total"]))
        _, _, index = tables(c)
        indexed = dict(c.execute(f"SELECT key, \"balance\" FROM {index} WHERE collection='accounts'").fetchall())
        wrong = [key for key, balance in rows if indexed.get(key) != balance]
        if wrong or len(indexed) != len(rows):
            problems.append("index: %d of %d balances differ from the values (%s)" % (len(wrong), len(rows), ", ".join(wrong[:3])))
        commit = c.execute("SELECT max(number) FROM snapshotdb_history").fetchone()[0]
        newest = c.execute("SELECT max(key) FROM snapshotdb_values WHERE collection='log'").fetchone()[0]
        if commit > info["setupCommit"] and newest != "%012d" % commit:
            problems.append("log: the newest commit is %d, the newest transfer logged %s" % (commit, newest))
        return problems, commit
    except sqlite3.DatabaseError as error:
        return ["integrity: %s" % error], None
    except Exception as error:  # a row or table missing: the restore is torn, not the driver
        return ["content: %r" % (error,)], None
    finally:
        c.close()


# MARK: One run


class Litestream:
    def __init__(self, config, log, processes):
        self.config, self.log, self.process, self.processes = config, log, None, processes

    def start(self):
        self.process = subprocess.Popen(["litestream", "replicate", "-config", self.config], stdout=self.log, stderr=self.log)
        self.processes.append(self.process)

    def stop(self, kill):
        ended = self.process.poll() is not None
        if not ended:
            self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        self.process.wait()
        return ended


def restore(directory, replica, number):
    out = os.path.join(directory, "restore-%d.sqlite" % number)
    p = subprocess.run(["litestream", "restore", "-o", out, "file://" + replica], capture_output=True, text=True)
    if p.returncode != 0 or not os.path.exists(out):
        return None, p.stderr.strip()[-200:]
    return out, None


def one_stress_run(arm, seed, args):
    command = [args.stress, "run", "--duration", str(args.stress_seconds), "--processes", "2", "--no-crash-rounds",
               "--litestream", "--json", "--seed", str(seed), "--writer-turns", "on" if arm == "stress-turns-on" else "automatic"]
    p = subprocess.run(command, capture_output=True, text=True)
    if "{" not in p.stdout:
        return {"arm": arm, "seed": seed, "seconds": args.stress_seconds, "restores": 0, "torn": [], "failedRestores": [],
                "kills": 0, "stops": 0, "commits": 0, "caughtUp": False, "source": [],
                "writerErrors": ["the stress run exited with %d: %s" % (p.returncode, p.stderr.strip()[-300:])]}
    report = json.loads(p.stdout[p.stdout.index("{"):])
    litestream = report["litestream"]
    return {"arm": arm, "seed": seed, "seconds": report["elapsedSeconds"], "restores": len(litestream["probeCommits"]) + len(litestream["tornRestores"]),
            "torn": [{"during": None, "problems": [problem]} for problem in litestream["tornRestores"]],
            "tornRestores": len(litestream["tornRestores"]),
            "stayedTorn": litestream["replicaStayedTorn"], "failedRestores": [], "kills": litestream["kills"],
            "stops": litestream["stops"], "commits": report["commits"], "caughtUp": litestream.get("finalRestoreSeconds") is not None,
            "writerErrors": report["violations"], "source": []}


def one_run(arm, seed, args):
    if arm in REFERENCE_ARMS:
        return one_stress_run(arm, seed, args)
    processes = []
    try:
        return one_experiment_run(arm, seed, args, processes)
    finally:
        # Whatever happened, nothing of the run outlives it.
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def one_experiment_run(arm, seed, args, processes):
    directory = os.path.join(args.work, "%s-%d" % (arm, seed))
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    db = os.path.join(directory, "bank.sqlite")
    replica = os.path.join(directory, "replica")
    subprocess.run([args.stress, "replica-writer", "--db", db, "--create", "--accounts", str(ACCOUNTS)], check=True)
    if arm.startswith("plain"):
        c = sqlite3.connect(db)
        drop_triggers(c)
        c.close()
    config = os.path.join(directory, "litestream.yml")
    with open(config, "w") as f:
        f.write(f"dbs:\n  - path: {db}\n    replicas:\n      - url: file://{replica}\n        sync-interval: {SYNC_INTERVAL}\n    truncate-page-n: {TRUNCATE_PAGES}\n")
    log = open(os.path.join(directory, "litestream.log"), "w")
    litestream = Litestream(config, log, processes)
    litestream.start()
    r = random.Random(seed)
    writers = []
    for n in range(3):
        command = writer_command(
            arm, args.stress, db, "p%d" % n, seed * 100 + n, args.seconds, writers=2, laggard=n == 0,
            retention=PURGE_RETENTION if arm in PURGE_ARMS else 10000)
        # Output to files, read at the end: a pipe nobody reads could stall a writer.
        out = open(os.path.join(directory, "writer-%d.out" % n), "w+")
        err = open(os.path.join(directory, "writer-%d.err" % n), "w+")
        writers.append((subprocess.Popen(command, stdout=out, stderr=err, text=True), out, err))
        processes.append(writers[-1][0])
    result = {"arm": arm, "seed": seed, "seconds": args.seconds, "restores": 0, "torn": [], "failedRestores": [],
              "kills": 0, "stops": 0, "endedOnItsOwn": 0}
    restores = 0

    def checked_restore(during):
        nonlocal restores
        restores += 1
        out, error = restore(directory, replica, restores)
        if out is None:
            if result["restores"] > 0:
                result["failedRestores"].append(error)
            return None
        result["restores"] += 1
        problems, commit = check_restore(out)
        if problems:
            # Kept, with the run's directory, for a post-mortem.
            result["torn"].append({"during": during, "problems": problems, "commit": commit, "file": out})
            return None
        for suffix in ("", "-wal", "-shm"):
            try:
                os.unlink(out + suffix)
            except FileNotFoundError:
                pass
        return commit

    rounds = 0
    while any(w.poll() is None for w, _, _ in writers):
        time.sleep(0.7 + r.random() * 1.3)
        if not any(w.poll() is None for w, _, _ in writers):
            break
        if rounds % 3 == 0 or result["restores"] == 0:
            checked_restore(True)
        else:
            kill = r.random() < 0.5
            result["kills" if kill else "stops"] += 1
            result["endedOnItsOwn"] += litestream.stop(kill)
            litestream.start()
        rounds += 1
    outputs = []
    for w, out, err in writers:
        w.wait()
        out.seek(0)
        err.seek(0)
        lines = [line for line in out.read().splitlines() if line.startswith("{")]
        outputs.append(json.loads(lines[-1]) if lines else {"commits": 0, "last": 0, "errors": [err.read().strip()[-300:]]})
    result["commits"] = sum(o["commits"] for o in outputs)
    result["writerErrors"] = [e for o in outputs for e in o["errors"]]
    last = max(o["last"] for o in outputs)
    deadline = time.monotonic() + args.tail
    result["caughtUp"] = False
    while time.monotonic() < deadline:
        commit = checked_restore(False)
        if commit is not None and commit >= last:
            result["caughtUp"] = True
            break
        time.sleep(0.5)
    litestream.stop(False)
    log.close()
    result["source"], _ = check_restore(db)
    if not result["torn"] and not result["source"] and not result["writerErrors"] and not result["failedRestores"]:
        shutil.rmtree(directory, ignore_errors=True)
    return result


def run(args):
    done = {}
    if os.path.exists(args.out):
        for line in open(args.out):
            entry = json.loads(line)
            done[entry["arm"]] = done.get(entry["arm"], 0) + 1
    arms = args.arms.split(",")
    failed = []
    shuffler = random.Random(args.seed)
    for number in range(args.runs):
        order = arms[:]
        shuffler.shuffle(order)
        for arm in order:
            if done.get(arm, 0) > number:
                continue
            result = one_run(arm, args.seed * 1000 + number, args)
            with open(args.out, "a") as f:
                f.write(json.dumps(result, sort_keys=True) + "\n")
            print("%-12s run %3d: %s restores, %s commits, torn %d%s" % (
                arm, number + 1, result["restores"], result["commits"], len(result["torn"]),
                "" if result["caughtUp"] else ", NOT CAUGHT UP"), flush=True)
            # A torn replica (and a replica torn to the end) is what the experiment counts. A writer's
            # error, a damaged source database, a Litestream that ended on its own (as in the
            # stress run), or a sound replica that never catches up fails.
            for problem in result["writerErrors"] + result["source"]:
                failed.append("%s run %d: %s" % (arm, number + 1, problem))
            if result.get("endedOnItsOwn"):
                failed.append("%s run %d: Litestream ended on its own %d time(s)" % (arm, number + 1, result["endedOnItsOwn"]))
            if not result["caughtUp"] and not result["torn"]:
                failed.append("%s run %d: the replica never held the last acknowledged commit" % (arm, number + 1))
    for line in failed:
        print("FAILED:", line, file=sys.stderr)
    sys.exit(1 if failed else 0)


# MARK: Report


def wilson(k, n, z=1.959964):
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def report(args):
    entries = [json.loads(line) for line in open(args.results)]
    print("| arm | runs | torn runs | rate (95% interval) | torn restores / restores | failed restores | commits/s | not caught up | writer errors |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|")
    for arm in ARMS + PURGE_ARMS + REFERENCE_ARMS:
        mine = [e for e in entries if e["arm"] == arm]
        if not mine:
            continue
        n, k = len(mine), sum(1 for e in mine if e["torn"])
        low, high = wilson(k, n)
        torn = sum(e.get("tornRestores", len(e["torn"])) for e in mine)
        restores = sum(e["restores"] for e in mine)
        rate = sum(e["commits"] for e in mine) / sum(e["seconds"] for e in mine)
        behind = sum(1 for e in mine if not e["caughtUp"])
        errors = sum(1 for e in mine if e["writerErrors"])
        failed = sum(len(e["failedRestores"]) for e in mine)
        print("| %s | %d | %d | %.1f%% (%.1f–%.1f%%) | %d / %d | %d | %.0f | %d | %d |" % (
            arm, n, k, 100 * k / n, 100 * low, 100 * high, torn, restores, failed, rate, behind, errors))
    kinds = {}
    for e in entries:
        for t in e["torn"]:
            for problem in t["problems"]:
                kinds.setdefault((e["arm"], problem.split(":")[0], t["during"]), 0)
                kinds[(e["arm"], problem.split(":")[0], t["during"])] += 1
    for (arm, kind, during), count in sorted(kinds.items()):
        when = "in the stress run's restores" if during is None else "in restores during the writes" if during else "in restores after the writes"
        print("  %s: %d %s problem(s) %s" % (arm, count, kind, when))


# MARK: Calibration


def calibrate(args):
    """Each writer's WAL frames per commit, by table, with a reader pinning the WAL so that no
    frame is reused (one process, one writer, 3 s, no Litestream)."""
    perCommit = {}
    for arm in ("snapshotdb", "plain"):
        directory = os.path.join(args.work, "calibrate-" + arm)
        shutil.rmtree(directory, ignore_errors=True)
        os.makedirs(directory)
        db = os.path.join(directory, "bank.sqlite")
        subprocess.run([args.stress, "replica-writer", "--db", db, "--create"], check=True)
        pin = sqlite3.connect(db, isolation_level=None)
        if arm == "plain":
            drop_triggers(pin)
        before = pin.execute("SELECT max(number) FROM snapshotdb_history").fetchone()[0]
        pin.execute("BEGIN")
        pin.execute("SELECT count(*) FROM snapshotdb_values").fetchone()
        # Without the preallocation, so that the WAL's size is its frames.
        command = writer_command("plain" if arm == "plain" else "no-prealloc", args.stress, db, "p0", 7, 3, writers=1)
        # (The pinned WAL makes SnapshotDB's checkpoint monitor warn, as it should: not shown.)
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(db + "-wal", "rb") as f:
            wal = f.read()
        pin.execute("COMMIT")
        commits = pin.execute("SELECT max(number) FROM snapshotdb_history").fetchone()[0] - before
        owner = dict((page, name) for name, page in pin.execute("SELECT name, pageno FROM dbstat"))
        pin.close()
        frames = {}
        offset = 32
        while offset + 24 <= len(wal):
            page = struct.unpack(">I", wal[offset : offset + 4])[0]
            if page == 0:
                break
            frames[owner.get(page, "?")] = frames.get(owner.get(page, "?"), 0) + 1
            offset += 24 + 4096
        perCommit[arm] = sum(frames.values()) / commits
        print("%s: %d commits, %.2f WAL frames per commit" % (arm, commits, perCommit[arm]))
        for name, count in sorted(frames.items(), key=lambda item: -item[1]):
            print("    %-52s %.2f" % (name, count / commits))
    # The plain arm stands for SnapshotDB's I/O only while it writes as many pages a commit.
    if abs(perCommit["plain"] / perCommit["snapshotdb"] - 1) > 0.15:
        sys.exit("calibrate: the plain writer writes %.2f frames a commit, SnapshotDB %.2f: more than 15%% apart"
                 % (perCommit["plain"], perCommit["snapshotdb"]))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--runs", type=int, default=50)
    r.add_argument("--seconds", type=float, default=10)
    r.add_argument("--tail", type=float, default=20)
    r.add_argument("--arms", default=",".join(ARMS))
    r.add_argument("--out", default="torn-replicas.jsonl")
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--stress-seconds", type=float, default=15, help="the reference arms' duration (CI's)")
    for p in (r, sub.add_parser("calibrate")):
        p.add_argument("--stress", default=".build/debug/snapshotdb-stress")
        p.add_argument("--work", default="/tmp/torn-replicas")
    rep = sub.add_parser("report")
    rep.add_argument("results")
    w = sub.add_parser("plain-writer")
    w.add_argument("--db", required=True)
    w.add_argument("--duration", type=float, default=10)
    w.add_argument("--writers", type=int, default=2)
    w.add_argument("--laggard", action="store_true")
    w.add_argument("--seed", type=int, default=1)
    w.add_argument("--name", default="p0")
    w.add_argument("--history-retention", type=int, default=10000)
    args = parser.parse_args()
    if args.command == "run":
        args.stress = os.path.abspath(args.stress)
        run(args)
    elif args.command == "calibrate":
        args.stress = os.path.abspath(args.stress)
        calibrate(args)
    elif args.command == "report":
        report(args)
    else:
        plain_writer(args)


if __name__ == "__main__":
    main()
