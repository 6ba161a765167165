#!/usr/bin/env python3
"""A baseline for the stress run's Litestream restores, without SnapshotDB.

Plain SQLite (Python's sqlite3 module) in WAL mode under synchronous=FULL: two writer threads
in bursts (4 s of writes, 2 s of pause), two readers that sometimes hold a snapshot for
seconds, PASSIVE checkpoints every 0.2 s, and real Litestream replicating to a file://
replica, stopped (SIGTERM) or killed (SIGKILL) and started again at random. Between those,
it restores the replica and runs `PRAGMA integrity_check` on the copy, most often in the
pauses, when a CI stress run once got three damaged restores in a row.

    python3 Scripts/litestream-baseline.py SECONDS [zerofill]

`zerofill` also writes zeros past the WAL's end, 256 KiB at a time under the write lock, as
SnapshotDB's VFS does under FULL. Prints the restores that were good, damaged (with
integrity_check's first lines), or not yet possible. On 2026-11-26, with Litestream 0.5.17:
570 restores, none damaged, with and without zerofill (see the README's Litestream section).
Needs `litestream` on PATH; works in /tmp/lsrepro/run.
"""
import os, sqlite3, subprocess, threading, time, random, shutil, sys, signal
d = "/tmp/lsrepro/run"; shutil.rmtree(d, ignore_errors=True); os.makedirs(d)
db = d + "/src.db"; replica = d + "/replica"; cfg = d + "/ls.yml"
open(cfg, "w").write(f"dbs:\n  - path: {db}\n    replicas:\n      - url: file://{replica}\n        sync-interval: 200ms\n    truncate-page-n: 1024\n")
c = sqlite3.connect(db, isolation_level=None); c.execute("PRAGMA journal_mode=WAL"); c.execute("PRAGMA synchronous=FULL")
c.execute("CREATE TABLE v(collection TEXT NOT NULL, key TEXT NOT NULL, data BLOB NOT NULL, PRIMARY KEY(collection,key)) WITHOUT ROWID")
c.execute("CREATE TABLE h(n INTEGER PRIMARY KEY, changes BLOB)")
c.close()
duration = float(sys.argv[1]) if len(sys.argv) > 1 else 60
EXTENDS = []
ZEROFILL = len(sys.argv) > 2 and sys.argv[2] == "zerofill"
stop = time.time() + duration
def writer(seed):
    r = random.Random(seed); w = sqlite3.connect(db, isolation_level=None, timeout=30); w.execute("PRAGMA synchronous=FULL")
    n = 0
    while time.time() < stop:
        if int(time.time()) % 6 >= 4:
            time.sleep(0.05); continue
        w.execute("BEGIN IMMEDIATE")
        for _ in range(r.randint(1, 5)):
            w.execute("INSERT OR REPLACE INTO v VALUES ('accounts', ?, ?)", ("k%05d" % r.randint(0, 3000), os.urandom(r.randint(50, 400))))
        w.execute("INSERT INTO h(changes) VALUES (?)", (os.urandom(100),))
        w.execute("COMMIT"); n += 1
        if ZEROFILL:
            # SnapshotDB's VFS: zeros past the WAL's end, 256 KiB at a time, under the write lock
            w.execute("BEGIN IMMEDIATE")
            try:
                wal = db + "-wal"; size = os.path.getsize(wal)
                with open(wal, "rb") as f:
                    f.seek(max(0, size - 4120)); tail = f.read(4120)
                if size > 32 and any(tail):
                    with open(wal, "r+b") as f: f.truncate(size + 256 * 1024)
                    EXTENDS.append(1)
            finally:
                w.execute("ROLLBACK")
    return n
def reader():
    # a long-lived reader that advances now and then, as bookmarks do
    rd = sqlite3.connect(db, isolation_level=None, timeout=30)
    while time.time() < stop:
        rd.execute("BEGIN"); rd.execute("SELECT count(*) FROM v").fetchone(); time.sleep(random.random() * (4 if random.random() < 0.2 else 0.3)); rd.execute("COMMIT")
def checkpointer():
    cp = sqlite3.connect(db, isolation_level=None, timeout=30)
    while time.time() < stop:
        time.sleep(0.2); cp.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
ls = subprocess.Popen(["litestream", "replicate", "-config", cfg], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)] + [threading.Thread(target=reader) for _ in range(2)] + [threading.Thread(target=checkpointer)]
for t in threads: t.start()
bad = good = none = restarts = 0
while time.time() < stop:
    pause = int(time.time()) % 6 >= 4
    time.sleep(0.25 if pause else 0.3 + random.random() * 0.7)
    if not pause and random.random() < 0.25:
        ls.send_signal(signal.SIGTERM if random.random() < 0.5 else signal.SIGKILL); ls.wait(); restarts += 1
        ls = subprocess.Popen(["litestream", "replicate", "-config", cfg], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        continue
    out = d + "/restored.db"
    for s in ["", "-wal", "-shm"]:
        try: os.unlink(out + s)
        except FileNotFoundError: pass
    p = subprocess.run(["litestream", "restore", "-o", out, "file://" + replica], capture_output=True)
    if p.returncode != 0 or not os.path.exists(out): none += 1; continue
    rc = sqlite3.connect(out); res = rc.execute("PRAGMA integrity_check").fetchall(); rc.close()
    if res == [("ok",)]: good += 1
    else:
        bad += 1; print("BAD:", res[:3], flush=True)
for t in threads: t.join()
ls.send_signal(signal.SIGTERM); ls.wait()
print(f"good={good} bad={bad} none={none} restarts={restarts} extends={len(EXTENDS)}")
