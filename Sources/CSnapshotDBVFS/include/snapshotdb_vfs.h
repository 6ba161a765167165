#ifndef SNAPSHOTDB_VFS_H
#define SNAPSHOTDB_VFS_H

// The VFS SnapshotDB opens its connections with: the default VFS of the process (unix on
// Linux) with one change, WAL preallocation. See snapshotdb_vfs.c for the reasoning.

// The number of bytes a WAL file is extended by, ahead of the frames written, once the WAL is
// being synced on every commit (synchronous = FULL).
#define SNAPSHOTDB_WAL_PREALLOCATION_BYTES (256 * 1024)

// Registers the VFS (once per process; later calls do nothing) and returns its name for
// sqlite3_open_v2, or NULL when SQLite has no default VFS to wrap or registration failed.
const char *snapshotdb_vfs_name(void);

// Turns the WAL preallocation on (the default) or off for every WAL written from now on in this
// process. Only for experiments that compare the two (Scripts/torn-replica-experiment.py): with
// it off, the VFS writes exactly what SQLite writes, frame headers joined to their pages.
void snapshotdb_vfs_set_preallocation(int enabled);

#endif
