#ifndef SNAPSHOTDB_BENCHMARKS_CSQLITE_SHIM_H
#define SNAPSHOTDB_BENCHMARKS_CSQLITE_SHIM_H

#include <sqlite3.h>

// SQLITE_TRANSIENT is a macro over a function-pointer cast that Swift cannot import.
static const sqlite3_destructor_type benchmark_sqlite_transient = SQLITE_TRANSIENT;

#endif
