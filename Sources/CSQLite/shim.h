#ifndef SNAPSHOTDB_CSQLITE_SHIM_H
#define SNAPSHOTDB_CSQLITE_SHIM_H

#include <sqlite3.h>

// Swift cannot call C variadic functions; these wrappers give the few variadic calls
// SnapshotDB needs a fixed signature.

static inline int snapshotdb_db_config_no_ckpt_on_close(sqlite3 *db, int enabled) {
    return sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, enabled, (int *)0);
}

static inline int snapshotdb_db_config_defensive(sqlite3 *db, int enabled) {
    return sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, enabled, (int *)0);
}

static inline int snapshotdb_file_control_persist_wal(sqlite3 *db, int enabled) {
    int value = enabled;
    return sqlite3_file_control(db, "main", SQLITE_FCNTL_PERSIST_WAL, &value);
}

static inline int snapshotdb_db_config_enable_trigger(sqlite3 *db, int enabled) {
    return sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_TRIGGER, enabled, (int *)0);
}

// SQLITE_TRANSIENT is a macro over a function-pointer cast that Swift cannot import.
static const sqlite3_destructor_type snapshotdb_transient = SQLITE_TRANSIENT;

#endif
