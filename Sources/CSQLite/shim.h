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

// Lets sqlite3_load_extension() (the C function only, not SQL's load_extension()) load a
// library on this handle.
static inline int snapshotdb_db_config_enable_load_extension(sqlite3 *db, int enabled) {
    return sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, enabled, (int *)0);
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

// The WAL-index header (the first 48 bytes of the -shm file, "WAL-index format" in SQLite's
// file format documentation): which commit of the WAL a read transaction sees. SnapshotDB
// uses it to recognize a snapshot whose commit counter it already knows, as SQLite's own
// sqlite3_snapshot does (that API is not compiled into Debian's libsqlite3).
typedef struct {
    unsigned char bytes[48];
} snapshotdb_wal_index_header;

// SQLite's own mapping of the first WAL-index region of the main database (xShmMap with
// bExtend = 0), or NULL. Valid for as long as the handle stays open in WAL mode. Call it only
// inside a transaction, when SQLite has mapped the region already.
static inline const volatile void *snapshotdb_wal_index(sqlite3 *db) {
    sqlite3_file *file = 0;
    if (sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &file) != SQLITE_OK) return 0;
    if (file == 0 || file->pMethods == 0 || file->pMethods->iVersion < 2) return 0;
    if (file->pMethods->xShmMap == 0) return 0;
    volatile void *region = 0;
    if (file->pMethods->xShmMap(file, 0, 32768, 0, &region) != SQLITE_OK) return 0;
    return region;
}

// Copies the WAL-index header the way SQLite reads it (walIndexTryHdr): the first copy, a
// barrier, the second copy; a writer updates them in the opposite order. Returns 1 when both
// copies agree and the header is initialized (version 3007000), else 0.
static inline int snapshotdb_read_wal_index_header(
    const volatile void *region, snapshotdb_wal_index_header *header)
{
    // The region is page-aligned: both 48-byte copies are 8-byte aligned.
    const volatile unsigned long long *words = (const volatile unsigned long long *)region;
    unsigned long long first[6], second[6];
    for (int i = 0; i < 6; i++) first[i] = words[i];
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    for (int i = 0; i < 6; i++) second[i] = words[6 + i];
    for (int i = 0; i < 6; i++) {
        if (first[i] != second[i]) return 0;
    }
    __builtin_memcpy(header->bytes, first, 48);
    unsigned int version;
    __builtin_memcpy(&version, header->bytes, 4);
    return version == 3007000 && header->bytes[12] == 1;
}

static inline int snapshotdb_wal_index_headers_equal(
    const snapshotdb_wal_index_header *a, const snapshotdb_wal_index_header *b)
{
    return __builtin_memcmp(a->bytes, b->bytes, 48) == 0;
}

// The header's change counter (iChange), which SQLite increments by one on every commit and
// on nothing else.
static inline unsigned int snapshotdb_wal_index_change(const snapshotdb_wal_index_header *header) {
    unsigned int change;
    __builtin_memcpy(&change, header->bytes + 8, 4);
    return change;
}

// The WAL header's two salts (the -wal file's bytes 16..<24, which the WAL-index header keeps
// verbatim at bytes 32..<40): SQLite draws new ones every time it restarts the WAL from its
// first frame, so they name the WAL's generation. Reads them from a WAL-index mapping (see
// snapshotdb_wal_index), without a system call; returns 1 on success, 0 when the header was
// being written (the caller then reads the -wal file).
static inline int snapshotdb_wal_index_salts(const volatile void *region, unsigned long long *salts) {
    snapshotdb_wal_index_header header;
    if (!snapshotdb_read_wal_index_header(region, &header)) return 0;
    __builtin_memcpy(salts, header.bytes + 32, 8);
    return 1;
}

#endif
