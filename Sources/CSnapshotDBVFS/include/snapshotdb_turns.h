#ifndef SNAPSHOTDB_TURNS_H
#define SNAPSHOTDB_TURNS_H

// Open file description locks (Linux's F_OFD_SETLK, F_OFD_SETLKW, F_OFD_GETLK) on one byte of
// a file, for the writers' turns of SnapshotDB processes (WriterTurns.swift). A lock belongs
// to the open file description, not to the process: closing another descriptor of the same
// file never drops it, and it never merges with SQLite's own POSIX locks.

#define SNAPSHOTDB_TURN_SHARED 0
#define SNAPSHOTDB_TURN_EXCLUSIVE 1
#define SNAPSHOTDB_TURN_UNLOCK 2

// Takes (`kind` SHARED or EXCLUSIVE) or releases (UNLOCK) the lock on byte `offset` of `fd`;
// with `wait`, blocks until it can. Returns 0, or the errno of the failure: EAGAIN or EACCES
// when another description holds a conflicting lock and `wait` is 0; ENOTSUP where the
// platform has no open file description locks.
int snapshotdb_turn_lock(int fd, long long offset, int kind, int wait);

// Whether another open file description holds a lock on byte `offset` of `fd` that conflicts
// with an exclusive lock: 1 or 0, or -errno on failure.
int snapshotdb_turn_is_held_elsewhere(int fd, long long offset);

#endif
