// An LD_PRELOAD shim that records, in order, every operation that changes what a power cut
// could leave on disk for the files of one database: writes (with their bytes), truncations,
// syncs, creations, links, renames and unlinks. Scripts/powerloss.sh replays the record into the
// states a power cut could leave (Tests/PowerLoss/replay.py).
//
// Only files whose path starts with $POWERLOSS_PREFIX are recorded (the database, its -wal and
// -journal, the temporary file of a creation); the -shm is not (SQLite rebuilds it after a crash).
// Also recorded: writes to $POWERLOSS_MARKS, the workload's "acknowledged" marks, so that the
// replay knows which commits had returned before each point.
//
// Record format, little-endian: u8 op, u32 path length, path, i64 offset, i64 length, then
// `length` bytes for a write. Ops: 'W' write, 'T' truncate to offset, 'S' sync, 'C' create
// (open with O_CREAT or O_TRUNC: offset 1 when truncated), 'L' link (path, then a second path
// record), 'R' rename (same), 'U' unlink, 'M' mark (the bytes are the mark's text).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int logFD = -1;
static const char *prefix;
static const char *marks;
static char *paths[4096];

static ssize_t (*real_pwrite64)(int, const void *, size_t, off_t);
static ssize_t (*real_write)(int, const void *, size_t);
static int (*real_ftruncate64)(int, off_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat64)(int, const char *, int, ...);
static int (*real_close)(int);
static int (*real_rename)(const char *, const char *);
static int (*real_link)(const char *, const char *);
static int (*real_unlink)(const char *);

static void setup(void) {
    static int done = 0;
    if (done) return;
    real_pwrite64 = dlsym(RTLD_NEXT, "pwrite64");
    real_write = dlsym(RTLD_NEXT, "write");
    real_ftruncate64 = dlsym(RTLD_NEXT, "ftruncate64");
    real_fsync = dlsym(RTLD_NEXT, "fsync");
    real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
    real_open64 = dlsym(RTLD_NEXT, "open64");
    real_openat64 = dlsym(RTLD_NEXT, "openat64");
    real_close = dlsym(RTLD_NEXT, "close");
    real_rename = dlsym(RTLD_NEXT, "rename");
    real_link = dlsym(RTLD_NEXT, "link");
    real_unlink = dlsym(RTLD_NEXT, "unlink");
    prefix = getenv("POWERLOSS_PREFIX");
    marks = getenv("POWERLOSS_MARKS");
    const char *log = getenv("POWERLOSS_LOG");
    if (log) logFD = real_open64(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    done = 1;
}

static int tracked(const char *path) {
    if (!path || logFD < 0) return 0;
    // The directory itself (the prefix without its trailing '/'): its fsync makes the names
    // created, linked, renamed and unlinked in it durable.
    size_t prefixLength = prefix ? strlen(prefix) : 0;
    if (prefixLength > 1 && strlen(path) == prefixLength - 1 && strncmp(path, prefix, prefixLength - 1) == 0)
        return 1;
    if (prefix && strncmp(path, prefix, strlen(prefix)) == 0) {
        size_t length = strlen(path);
        return !(length > 4 && strcmp(path + length - 4, "-shm") == 0);
    }
    return marks && strcmp(path, marks) == 0;
}

static void put(const void *bytes, size_t count) {
    const char *at = bytes;
    while (count > 0) {
        ssize_t written = real_write(logFD, at, count);
        if (written <= 0) return;
        at += written;
        count -= (size_t)written;
    }
}

static void record(char op, const char *path, int64_t offset, int64_t length, const void *data) {
    uint32_t pathLength = (uint32_t)strlen(path);
    put(&op, 1);
    put(&pathLength, 4);
    put(path, pathLength);
    put(&offset, 8);
    put(&length, 8);
    if (data && length > 0) put(data, (size_t)length);
}

static const char *pathOf(int fd) { return fd >= 0 && fd < 4096 ? paths[fd] : NULL; }

static void remember(int fd, const char *path, int flags) {
    if (fd < 0 || fd >= 4096) return;
    free(paths[fd]);
    paths[fd] = NULL;
    char resolved[4096];
    if (!realpath(path, resolved)) return;
    if (!tracked(resolved)) return;
    paths[fd] = strdup(resolved);
    if (flags & (O_CREAT | O_TRUNC)) record('C', resolved, (flags & O_TRUNC) ? 1 : 0, 0, NULL);
}

int open64(const char *path, int flags, ...) {
    setup();
    mode_t mode = 0;
    if (flags & O_CREAT) {
        va_list arguments;
        va_start(arguments, flags);
        mode = va_arg(arguments, mode_t);
        va_end(arguments);
    }
    int fd = real_open64(path, flags, mode);
    pthread_mutex_lock(&lock);
    remember(fd, path, flags);
    pthread_mutex_unlock(&lock);
    return fd;
}

int open(const char *path, int flags, ...) __attribute__((alias("open64")));

int openat64(int directory, const char *path, int flags, ...) {
    setup();
    mode_t mode = 0;
    if (flags & O_CREAT) {
        va_list arguments;
        va_start(arguments, flags);
        mode = va_arg(arguments, mode_t);
        va_end(arguments);
    }
    int fd = real_openat64(directory, path, flags, mode);
    if (path[0] == '/') {
        pthread_mutex_lock(&lock);
        remember(fd, path, flags);
        pthread_mutex_unlock(&lock);
    }
    return fd;
}

int openat(int directory, const char *path, int flags, ...) __attribute__((alias("openat64")));

int close(int fd) {
    setup();
    pthread_mutex_lock(&lock);
    if (fd >= 0 && fd < 4096) {
        free(paths[fd]);
        paths[fd] = NULL;
    }
    pthread_mutex_unlock(&lock);
    return real_close(fd);
}

ssize_t pwrite64(int fd, const void *buffer, size_t count, off_t offset) {
    setup();
    pthread_mutex_lock(&lock);
    ssize_t written = real_pwrite64(fd, buffer, count, offset);
    const char *path = pathOf(fd);
    if (path && written > 0) record('W', path, offset, written, buffer);
    pthread_mutex_unlock(&lock);
    return written;
}

ssize_t pwrite(int fd, const void *buffer, size_t count, off_t offset) __attribute__((alias("pwrite64")));

ssize_t write(int fd, const void *buffer, size_t count) {
    setup();
    if (fd == logFD) return real_write(fd, buffer, count);
    pthread_mutex_lock(&lock);
    const char *path = pathOf(fd);
    off_t offset = path ? lseek(fd, 0, SEEK_CUR) : 0;
    ssize_t written = real_write(fd, buffer, count);
    if (path && written > 0) {
        if (marks && strcmp(path, marks) == 0) {
            record('M', path, 0, written, buffer);
        } else {
            record('W', path, offset, written, buffer);
        }
    }
    pthread_mutex_unlock(&lock);
    return written;
}

int ftruncate64(int fd, off_t length) {
    setup();
    pthread_mutex_lock(&lock);
    int result = real_ftruncate64(fd, length);
    const char *path = pathOf(fd);
    if (path && result == 0) record('T', path, length, 0, NULL);
    pthread_mutex_unlock(&lock);
    return result;
}

int ftruncate(int fd, off_t length) __attribute__((alias("ftruncate64")));

// 'B' marks where a sync began and 'S' where it returned: only the writes recorded before the
// 'B' are durable at the 'S' (a write another thread makes during the sync may or may not be).
static int syncWith(int (*call)(int), int fd) {
    setup();
    pthread_mutex_lock(&lock);
    const char *path = pathOf(fd);
    char *began = path ? strdup(path) : NULL;
    if (began) record('B', began, 0, 0, NULL);
    pthread_mutex_unlock(&lock);
    int result = call(fd);
    pthread_mutex_lock(&lock);
    if (began && result == 0) record('S', began, 0, 0, NULL);
    pthread_mutex_unlock(&lock);
    free(began);
    return result;
}

int fsync(int fd) { return syncWith(real_fsync, fd); }
int fdatasync(int fd) { return syncWith(real_fdatasync, fd); }

static int twoPaths(char op, int (*call)(const char *, const char *), const char *from, const char *to) {
    setup();
    char resolvedFrom[4096];
    int known = realpath(from, resolvedFrom) != NULL;
    int result = call(from, to);
    char resolvedTo[4096];
    pthread_mutex_lock(&lock);
    if (result == 0 && known && realpath(to, resolvedTo) && (tracked(resolvedFrom) || tracked(resolvedTo))) {
        record(op, resolvedFrom, 0, 0, NULL);
        record(op, resolvedTo, 0, 0, NULL);
    }
    pthread_mutex_unlock(&lock);
    return result;
}

int rename(const char *from, const char *to) { return twoPaths('R', real_rename, from, to); }
int link(const char *from, const char *to) { return twoPaths('L', real_link, from, to); }

int unlink(const char *path) {
    setup();
    char resolved[4096];
    int known = realpath(path, resolved) != NULL;
    int result = real_unlink(path);
    pthread_mutex_lock(&lock);
    if (result == 0 && known && tracked(resolved)) record('U', resolved, 0, 0, NULL);
    pthread_mutex_unlock(&lock);
    return result;
}
