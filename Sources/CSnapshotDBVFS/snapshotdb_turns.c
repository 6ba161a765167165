// Open file description locks for the writers' turns: see include/snapshotdb_turns.h.
#define _GNU_SOURCE
#include "snapshotdb_turns.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#if defined(F_OFD_SETLK) && defined(F_OFD_SETLKW) && defined(F_OFD_GETLK)

static void describe(struct flock *lock, long long offset, short type) {
    memset(lock, 0, sizeof *lock);
    lock->l_type = type;
    lock->l_whence = SEEK_SET;
    lock->l_start = (off_t)offset;
    lock->l_len = 1;
    lock->l_pid = 0; // required for F_OFD_* commands
}

int snapshotdb_turn_lock(int fd, long long offset, int kind, int wait) {
    struct flock lock;
    short type = kind == SNAPSHOTDB_TURN_UNLOCK ? F_UNLCK : kind == SNAPSHOTDB_TURN_SHARED ? F_RDLCK : F_WRLCK;
    describe(&lock, offset, type);
    for (;;) {
        if (fcntl(fd, wait && type != F_UNLCK ? F_OFD_SETLKW : F_OFD_SETLK, &lock) == 0) return 0;
        if (errno != EINTR) return errno;
    }
}

int snapshotdb_turn_is_held_elsewhere(int fd, long long offset) {
    struct flock lock;
    describe(&lock, offset, F_WRLCK);
    if (fcntl(fd, F_OFD_GETLK, &lock) != 0) return -errno;
    return lock.l_type != F_UNLCK;
}

#else

int snapshotdb_turn_lock(int fd, long long offset, int kind, int wait) {
    (void)fd; (void)offset; (void)kind; (void)wait;
    return ENOTSUP;
}

int snapshotdb_turn_is_held_elsewhere(int fd, long long offset) {
    (void)fd; (void)offset;
    return -ENOTSUP;
}

#endif
