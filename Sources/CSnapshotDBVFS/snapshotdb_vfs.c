// The "snapshotdb" VFS: the process's default VFS (unix on Linux) with WAL preallocation.
//
// Why. With synchronous = FULL every commit ends in an fdatasync of the WAL. When the commit
// appended to the file, the file system must also make the new file size durable: on ext4 and
// XFS that is a journal commit on top of the data write, and it roughly doubles the cost of the
// sync (measured on this project's machine: 350-650 µs per 8 KiB append + fdatasync against
// 120-180 µs when the blocks already exist). A WAL grows that way after every reset that
// truncated it and while a lagging reader keeps it from being reset: exactly when commits are
// already under pressure. PostgreSQL zero-fills each new WAL segment for the same reason, and
// RocksDB recycles log files. fallocate() does not help: ext4 marks fallocated blocks
// unwritten, and converting them at the first write is again a metadata change.
//
// What. Only files SQLite opens as a WAL are wrapped; the database file, its -shm and temporary
// files are the default VFS's own, untouched. When a write extends the WAL and the WAL is being
// synced on every commit, the file is extended past the write with zeros, a whole number of
// frames, SNAPSHOTDB_WAL_PREALLOCATION_BYTES at a time. The next fdatasync makes those blocks
// durable once; the commits that follow overwrite them without changing the file's size.
//
// Why it is safe. SQLite writes a WAL only while holding its WAL write lock, and so does this
// code (it runs inside SQLite's write). The zeros go only past the file's real end (fstat),
// where nothing is stored. A zero-filled frame can never be mistaken for a frame of the log:
// WAL recovery stops at the first frame whose salts differ from the WAL header's, and zeros do
// (the header's salts are random; SQLite itself leaves stale frames past the end after a
// RESTART). The preallocation is best effort: it runs after the frame is written, a failure
// (a full disk) gives the space back and is not reported, so it can never fail a commit that
// would have succeeded. SQLite's journal_size_limit still trims a reset WAL.
//
// Ordering. Zeros are never written between a new WAL header (or a truncation) and the sync
// that makes it durable: only from the first frame write after that sync. Otherwise a power cut
// could keep some zeros and lose both the truncation and the new header: the old header would
// then still validate the old, already checkpointed frames up to the zeros, and SQLite would
// replay that prefix over a database file that already holds newer pages (found by a
// power-loss crash-state test; plain SQLite has no such state). After the sync, the header and
// the file's size are durable, the old frames are gone or carry other salts, and zeros past the
// end can only be read as the end of the WAL.
//
// Frames in one write. SQLite writes each WAL frame as two writes, its 24-byte header and then
// its page. The VFS holds the header back and writes it with the page in one pwrite: half the
// system calls per commit (measured: two 8 KiB frames cost 7 µs as four writes, 3.5 µs as
// one). The header is held only across that one call: SQLite's walWriteOneFrame writes the
// page right after the header, under the same WAL write lock, and any other call on the file
// first writes a held header out, so the file's bytes are always those of SQLite's writes in
// SQLite's order by the time anything else can look. A header rewritten in place (SQLite
// recomputing checksums, which reads the frame just before) is written at once: no page
// follows it.
//
// When. With synchronous = NORMAL, commits are not synced and the zeros would only double the
// bytes written, so the VFS preallocates only once it has seen the WAL synced right after a
// commit frame, and stops as soon as it sees a commit not followed by a sync. The decision is
// made per connection, from what SQLite does, so it follows `PRAGMA synchronous` changes.

#include "snapshotdb_vfs.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#define WAL_HEADER_BYTES 32
#define WAL_FRAME_HEADER_BYTES 24
#define ZERO_BLOCK_BYTES (64 * 1024)

typedef struct WALFile {
    sqlite3_file base;
    /// The default VFS's file, stored right after this struct.
    sqlite3_file *real;
    /// The file's size as this handle last read it (fstat) or set it (preallocation,
    /// truncation); -1 when unknown or after a WAL reset. Another connection may have changed
    /// it since; the real size is read again before extending.
    sqlite3_int64 knownSize;
    /// The database page size read from the WAL header, 0 until known.
    int pageSize;
    /// A commit frame was written and no sync has followed it yet.
    int commitAwaitingSync;
    /// The offset of that commit frame's header.
    sqlite3_int64 commitFrameOffset;
    /// The last commit was synced before the next transaction wrote: synchronous = FULL.
    int syncsCommits;
    /// A new WAL header was written, or the file truncated, and no sync has followed yet: no
    /// zeros may be written until one has (see "Ordering" above).
    int headerAwaitingSync;
    /// A frame header written by SQLite and held back to go out with its page.
    unsigned char heldHeader[WAL_FRAME_HEADER_BYTES];
    int headerHeld;
    sqlite3_int64 heldHeaderOffset;
    /// The offset of the last read, when the last call on the file was a read; else -1.
    sqlite3_int64 lastReadOffset;
    /// Room for one frame (header and page), allocated on first use.
    unsigned char *frameBuffer;
    int frameBufferBytes;
} WALFile;

static sqlite3_vfs snapshotdbVFS;
static pthread_once_t registration = PTHREAD_ONCE_INIT;
static int registered = 0;
static const unsigned char zeroBlock[ZERO_BLOCK_BYTES];
/// Whether WAL files are zero-filled ahead of the frames (see snapshotdb_vfs_set_preallocation).
static atomic_int preallocationEnabled = 1;

static sqlite3_vfs *parentVFS(void) { return (sqlite3_vfs *)snapshotdbVFS.pAppData; }

static uint32_t readBigEndian32(const unsigned char *bytes) {
    return ((uint32_t)bytes[0] << 24) | ((uint32_t)bytes[1] << 16) | ((uint32_t)bytes[2] << 8)
        | (uint32_t)bytes[3];
}

/// The page size a WAL header (or a database header field of the same encoding) names, or 0.
static int pageSizeFromHeaderField(const unsigned char *bytes) {
    uint32_t size = readBigEndian32(bytes);
    if (size == 1) size = 65536;
    if (size < 512 || size > 65536 || (size & (size - 1)) != 0) return 0;
    return (int)size;
}

/// The page size from the WAL file's header on disk, or 0 when it has none yet.
static int pageSizeOnDisk(WALFile *file) {
    unsigned char header[WAL_HEADER_BYTES];
    if (file->real->pMethods->xRead(file->real, header, WAL_HEADER_BYTES, 0) != SQLITE_OK) return 0;
    return pageSizeFromHeaderField(header + 8);
}

/// Follows what SQLite writes to learn whether commits are synced.
static void observeWrite(WALFile *file, const unsigned char *bytes, int amount, sqlite3_int64 offset) {
    if (offset == 0 && amount == WAL_HEADER_BYTES) {
        // A new WAL generation (a reset): the file may have been truncated by another handle.
        file->pageSize = pageSizeFromHeaderField(bytes + 8);
        file->knownSize = -1;
        if (file->commitAwaitingSync) {
            file->syncsCommits = 0;
            file->commitAwaitingSync = 0;
        }
        return;
    }
    if (amount != WAL_FRAME_HEADER_BYTES) return;
    // A frame header. Headers rewritten in place (SQLite recomputing checksums before the
    // sync) lie before the commit frame and say nothing about syncing.
    if (file->commitAwaitingSync && offset > file->commitFrameOffset) {
        // The next transaction is writing and the last commit was not synced. (Padding frames,
        // written before the sync only on devices without power-safe overwrite, land here too;
        // then the VFS does not preallocate, which is the default behaviour.)
        file->syncsCommits = 0;
        file->commitAwaitingSync = 0;
    }
    if (readBigEndian32(bytes + 4) != 0) {
        file->commitAwaitingSync = 1;
        file->commitFrameOffset = offset;
    }
}

/// Zero-fills the WAL past the frame that ends at or after `end`, best effort.
static void preallocate(WALFile *file, sqlite3_int64 end) {
    sqlite3_file *real = file->real;
    if (file->pageSize == 0) file->pageSize = pageSizeOnDisk(file);
    if (file->pageSize == 0) return;
    sqlite3_int64 frame = file->pageSize + WAL_FRAME_HEADER_BYTES;
    sqlite3_int64 size = 0;
    if (real->pMethods->xFileSize(real, &size) != SQLITE_OK) return;
    file->knownSize = size;
    if (end < WAL_HEADER_BYTES) end = WAL_HEADER_BYTES;
    // Extend only once the file's end is within one frame of the write, and only past it.
    if (size - end >= frame) return;
    sqlite3_int64 frames = (end - WAL_HEADER_BYTES + frame - 1) / frame;
    sqlite3_int64 extra = (SNAPSHOTDB_WAL_PREALLOCATION_BYTES + frame - 1) / frame;
    sqlite3_int64 target = WAL_HEADER_BYTES + (frames + extra) * frame;
    for (sqlite3_int64 at = size; at < target;) {
        sqlite3_int64 remaining = target - at;
        int amount = remaining < ZERO_BLOCK_BYTES ? (int)remaining : ZERO_BLOCK_BYTES;
        if (real->pMethods->xWrite(real, zeroBlock, amount, at) != SQLITE_OK) {
            real->pMethods->xTruncate(real, size);
            return;
        }
        at += amount;
    }
    file->knownSize = target;
}

/// Writes a held frame header out on its own; called before any other use of the file.
static int releaseHeader(WALFile *file) {
    file->lastReadOffset = -1;
    if (!file->headerHeld) return SQLITE_OK;
    file->headerHeld = 0;
    return file->real->pMethods->xWrite(
        file->real, file->heldHeader, WAL_FRAME_HEADER_BYTES, file->heldHeaderOffset);
}

static int walClose(sqlite3_file *base) {
    WALFile *file = (WALFile *)base;
    int released = releaseHeader(file);
    sqlite3_free(file->frameBuffer);
    file->frameBuffer = NULL;
    int rc = file->real->pMethods->xClose(file->real);
    return rc != SQLITE_OK ? rc : released;
}

static int walRead(sqlite3_file *base, void *buffer, int amount, sqlite3_int64 offset) {
    WALFile *file = (WALFile *)base;
    int rc = releaseHeader(file);
    if (rc != SQLITE_OK) return rc;
    rc = file->real->pMethods->xRead(file->real, buffer, amount, offset);
    file->lastReadOffset = offset;
    return rc;
}

/// Writes `amount` bytes at `offset`, with the held header in front of them when they are its
/// page.
static int writeThrough(WALFile *file, const void *buffer, int amount, sqlite3_int64 offset) {
    sqlite3_file *real = file->real;
    if (!file->headerHeld) return real->pMethods->xWrite(real, buffer, amount, offset);
    if (offset == file->heldHeaderOffset + WAL_FRAME_HEADER_BYTES) {
        int frameBytes = WAL_FRAME_HEADER_BYTES + amount;
        if (file->frameBufferBytes < frameBytes) {
            unsigned char *grown = sqlite3_realloc(file->frameBuffer, frameBytes);
            if (grown != NULL) {
                file->frameBuffer = grown;
                file->frameBufferBytes = frameBytes;
            }
        }
        if (file->frameBufferBytes >= frameBytes) {
            file->headerHeld = 0;
            memcpy(file->frameBuffer, file->heldHeader, WAL_FRAME_HEADER_BYTES);
            memcpy(file->frameBuffer + WAL_FRAME_HEADER_BYTES, buffer, (size_t)amount);
            return real->pMethods->xWrite(real, file->frameBuffer, frameBytes, file->heldHeaderOffset);
        }
    }
    int rc = releaseHeader(file);
    if (rc != SQLITE_OK) return rc;
    return real->pMethods->xWrite(real, buffer, amount, offset);
}

static int walWrite(sqlite3_file *base, const void *buffer, int amount, sqlite3_int64 offset) {
    WALFile *file = (WALFile *)base;
    int rewrite = file->lastReadOffset == offset;
    file->lastReadOffset = -1;
    observeWrite(file, (const unsigned char *)buffer, amount, offset);
    if (amount == WAL_FRAME_HEADER_BYTES && !rewrite) {
        int rc = releaseHeader(file);
        if (rc != SQLITE_OK) return rc;
        memcpy(file->heldHeader, buffer, WAL_FRAME_HEADER_BYTES);
        file->heldHeaderOffset = offset;
        file->headerHeld = 1;
        return SQLITE_OK;
    }
    if (offset == 0 && amount == WAL_HEADER_BYTES) file->headerAwaitingSync = 1;
    int rc = writeThrough(file, buffer, amount, offset);
    if (rc != SQLITE_OK) return rc;
    sqlite3_int64 end = offset + amount;
    if (file->syncsCommits && !file->headerAwaitingSync && (file->knownSize < 0 || end > file->knownSize)
        && atomic_load_explicit(&preallocationEnabled, memory_order_relaxed)) {
        preallocate(file, end);
    }
    return SQLITE_OK;
}

static int walTruncate(sqlite3_file *base, sqlite3_int64 size) {
    WALFile *file = (WALFile *)base;
    int rc = releaseHeader(file);
    if (rc != SQLITE_OK) return rc;
    rc = file->real->pMethods->xTruncate(file->real, size);
    file->knownSize = rc == SQLITE_OK ? size : -1;
    file->headerAwaitingSync = 1;
    return rc;
}

static int walSync(sqlite3_file *base, int flags) {
    WALFile *file = (WALFile *)base;
    int rc = releaseHeader(file);
    if (rc != SQLITE_OK) return rc;
    rc = file->real->pMethods->xSync(file->real, flags);
    if (rc == SQLITE_OK) file->headerAwaitingSync = 0;
    if (rc == SQLITE_OK && file->commitAwaitingSync) {
        file->syncsCommits = 1;
        file->commitAwaitingSync = 0;
    }
    return rc;
}

static int walFileSize(sqlite3_file *base, sqlite3_int64 *size) {
    WALFile *file = (WALFile *)base;
    int rc = releaseHeader(file);
    if (rc != SQLITE_OK) return rc;
    return file->real->pMethods->xFileSize(file->real, size);
}

static int walLock(sqlite3_file *base, int level) {
    WALFile *file = (WALFile *)base;
    int rc = releaseHeader(file);
    if (rc != SQLITE_OK) return rc;
    return file->real->pMethods->xLock(file->real, level);
}

static int walUnlock(sqlite3_file *base, int level) {
    WALFile *file = (WALFile *)base;
    int rc = releaseHeader(file);
    if (rc != SQLITE_OK) return rc;
    return file->real->pMethods->xUnlock(file->real, level);
}

static int walCheckReservedLock(sqlite3_file *base, int *result) {
    WALFile *file = (WALFile *)base;
    int rc = releaseHeader(file);
    if (rc != SQLITE_OK) return rc;
    return file->real->pMethods->xCheckReservedLock(file->real, result);
}

static int walFileControl(sqlite3_file *base, int op, void *argument) {
    WALFile *file = (WALFile *)base;
    int rc = releaseHeader(file);
    if (rc != SQLITE_OK) return rc;
    return file->real->pMethods->xFileControl(file->real, op, argument);
}

static int walSectorSize(sqlite3_file *base) {
    WALFile *file = (WALFile *)base;
    return file->real->pMethods->xSectorSize(file->real);
}

static int walDeviceCharacteristics(sqlite3_file *base) {
    WALFile *file = (WALFile *)base;
    return file->real->pMethods->xDeviceCharacteristics(file->real);
}

// Version 1: a WAL file has no shared memory and is never memory-mapped.
static const sqlite3_io_methods walMethods = {
    .iVersion = 1,
    .xClose = walClose,
    .xRead = walRead,
    .xWrite = walWrite,
    .xTruncate = walTruncate,
    .xSync = walSync,
    .xFileSize = walFileSize,
    .xLock = walLock,
    .xUnlock = walUnlock,
    .xCheckReservedLock = walCheckReservedLock,
    .xFileControl = walFileControl,
    .xSectorSize = walSectorSize,
    .xDeviceCharacteristics = walDeviceCharacteristics,
};

#define WAL_FILE_BYTES ((int)((sizeof(WALFile) + 7) & ~(size_t)7))

static int vfsOpen(sqlite3_vfs *vfs, const char *name, sqlite3_file *base, int flags, int *outFlags) {
    (void)vfs;
    sqlite3_vfs *parent = parentVFS();
    if ((flags & SQLITE_OPEN_WAL) == 0) return parent->xOpen(parent, name, base, flags, outFlags);
    WALFile *file = (WALFile *)base;
    memset(file, 0, sizeof(WALFile));
    file->real = (sqlite3_file *)((char *)base + WAL_FILE_BYTES);
    int rc = parent->xOpen(parent, name, file->real, flags, outFlags);
    if (rc != SQLITE_OK) {
        if (file->real->pMethods != NULL) file->real->pMethods->xClose(file->real);
        file->base.pMethods = NULL;
        return rc;
    }
    file->knownSize = -1;
    file->lastReadOffset = -1;
    file->base.pMethods = &walMethods;
    return SQLITE_OK;
}

static int vfsDelete(sqlite3_vfs *vfs, const char *name, int syncDirectory) {
    (void)vfs;
    return parentVFS()->xDelete(parentVFS(), name, syncDirectory);
}

static int vfsAccess(sqlite3_vfs *vfs, const char *name, int flags, int *result) {
    (void)vfs;
    return parentVFS()->xAccess(parentVFS(), name, flags, result);
}

static int vfsFullPathname(sqlite3_vfs *vfs, const char *name, int size, char *out) {
    (void)vfs;
    return parentVFS()->xFullPathname(parentVFS(), name, size, out);
}

static void *vfsDlOpen(sqlite3_vfs *vfs, const char *name) {
    (void)vfs;
    return parentVFS()->xDlOpen(parentVFS(), name);
}

static void vfsDlError(sqlite3_vfs *vfs, int size, char *message) {
    (void)vfs;
    parentVFS()->xDlError(parentVFS(), size, message);
}

static void (*vfsDlSym(sqlite3_vfs *vfs, void *handle, const char *symbol))(void) {
    (void)vfs;
    return parentVFS()->xDlSym(parentVFS(), handle, symbol);
}

static void vfsDlClose(sqlite3_vfs *vfs, void *handle) {
    (void)vfs;
    parentVFS()->xDlClose(parentVFS(), handle);
}

static int vfsRandomness(sqlite3_vfs *vfs, int size, char *out) {
    (void)vfs;
    return parentVFS()->xRandomness(parentVFS(), size, out);
}

static int vfsSleep(sqlite3_vfs *vfs, int microseconds) {
    (void)vfs;
    return parentVFS()->xSleep(parentVFS(), microseconds);
}

static int vfsCurrentTime(sqlite3_vfs *vfs, double *time) {
    (void)vfs;
    return parentVFS()->xCurrentTime(parentVFS(), time);
}

static int vfsGetLastError(sqlite3_vfs *vfs, int size, char *message) {
    (void)vfs;
    return parentVFS()->xGetLastError(parentVFS(), size, message);
}

static int vfsCurrentTimeInt64(sqlite3_vfs *vfs, sqlite3_int64 *time) {
    (void)vfs;
    return parentVFS()->xCurrentTimeInt64(parentVFS(), time);
}

static int vfsSetSystemCall(sqlite3_vfs *vfs, const char *name, sqlite3_syscall_ptr call) {
    (void)vfs;
    return parentVFS()->xSetSystemCall(parentVFS(), name, call);
}

static sqlite3_syscall_ptr vfsGetSystemCall(sqlite3_vfs *vfs, const char *name) {
    (void)vfs;
    return parentVFS()->xGetSystemCall(parentVFS(), name);
}

static const char *vfsNextSystemCall(sqlite3_vfs *vfs, const char *name) {
    (void)vfs;
    return parentVFS()->xNextSystemCall(parentVFS(), name);
}

static void registerVFS(void) {
    sqlite3_vfs *parent = sqlite3_vfs_find(NULL);
    if (parent == NULL || parent->iVersion < 2) return;
    snapshotdbVFS.iVersion = parent->iVersion < 3 ? parent->iVersion : 3;
    int wrapped = WAL_FILE_BYTES + parent->szOsFile;
    snapshotdbVFS.szOsFile = wrapped > parent->szOsFile ? wrapped : parent->szOsFile;
    snapshotdbVFS.mxPathname = parent->mxPathname;
    snapshotdbVFS.zName = "snapshotdb";
    snapshotdbVFS.pAppData = parent;
    snapshotdbVFS.xOpen = vfsOpen;
    snapshotdbVFS.xDelete = vfsDelete;
    snapshotdbVFS.xAccess = vfsAccess;
    snapshotdbVFS.xFullPathname = vfsFullPathname;
    snapshotdbVFS.xDlOpen = vfsDlOpen;
    snapshotdbVFS.xDlError = vfsDlError;
    snapshotdbVFS.xDlSym = vfsDlSym;
    snapshotdbVFS.xDlClose = vfsDlClose;
    snapshotdbVFS.xRandomness = vfsRandomness;
    snapshotdbVFS.xSleep = vfsSleep;
    snapshotdbVFS.xCurrentTime = vfsCurrentTime;
    snapshotdbVFS.xGetLastError = vfsGetLastError;
    snapshotdbVFS.xCurrentTimeInt64 = vfsCurrentTimeInt64;
    if (snapshotdbVFS.iVersion >= 3) {
        snapshotdbVFS.xSetSystemCall = vfsSetSystemCall;
        snapshotdbVFS.xGetSystemCall = vfsGetSystemCall;
        snapshotdbVFS.xNextSystemCall = vfsNextSystemCall;
    }
    registered = sqlite3_vfs_register(&snapshotdbVFS, 0) == SQLITE_OK;
}

const char *snapshotdb_vfs_name(void) {
    pthread_once(&registration, registerVFS);
    return registered ? snapshotdbVFS.zName : NULL;
}

void snapshotdb_vfs_set_preallocation(int enabled) {
    atomic_store_explicit(&preallocationEnabled, enabled != 0, memory_order_relaxed);
}
