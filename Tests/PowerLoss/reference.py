#!/usr/bin/env python3
"""The reference workload of the power-loss test: plain SQLite (Python's sqlite3 module) in WAL
mode doing what `snapshotdb-stress power-loss-workload` does: one-row commits with a small
auto-checkpoint and a TRUNCATE checkpoint half way, each acknowledged in the marks file after
it returned.  reference.py DATABASE MARKS COMMITS full|normal"""
import os, sqlite3, sys

path, marks, commits, sync = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
connection = sqlite3.connect(path, isolation_level=None)
connection.execute('PRAGMA journal_mode = WAL')
connection.execute(f'PRAGMA synchronous = {sync.upper()}')
connection.execute('PRAGMA wal_autocheckpoint = 8')
connection.execute('PRAGMA journal_size_limit = 16384')
connection.execute('CREATE TABLE IF NOT EXISTS t(n INTEGER PRIMARY KEY, data BLOB)')
acknowledgements = os.open(marks, os.O_WRONLY | os.O_APPEND)
for n in range(1, commits + 1):
    connection.execute('BEGIN IMMEDIATE')
    connection.execute('INSERT INTO t(n, data) VALUES (?, ?)', (n, bytes([n % 251]) * 600))
    connection.execute('COMMIT')
    os.write(acknowledgements, f'ack {n}\n'.encode())
    if n == commits // 2:
        connection.execute('PRAGMA wal_checkpoint(TRUNCATE)')
connection.close()
