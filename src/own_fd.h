/* Descriptors a profiler thread holds while the application runs beside it.
 *
 * The application owns the descriptor table: it may close a descriptor we
 * hold (closefrom, a daemon's close loop) and open its own file at that
 * number, which we would then read, write or close. A descriptor opened here
 * is moved above the numbers the application allocates from and remembered
 * by device and inode; it is closed only while it is still that file
 * (docs/security.md, "Descriptors shared with the application"). */
#ifndef CONTPROF_OWN_FD_H
#define CONTPROF_OWN_FD_H

#include <sys/stat.h>
#include <sys/types.h>

typedef struct {
  int fd; /* -1 when none */
  dev_t dev;
  ino_t ino;
} cp_own_fd;

#define CP_OWN_FD_NONE                                                         \
  { .fd = -1, .dev = 0, .ino = 0 }

/* The lowest number our descriptors are moved to: above what select() can
 * watch when the limit leaves room for it twice, else the upper half of the
 * soft RLIMIT_NOFILE. */
int cp_own_fd_floor(void);

/* openat(dirfd, path, flags | O_CLOEXEC, mode), the result moved to a number
 * at or above cp_own_fd_floor() when one is free. Fills *st (fstat of it)
 * when st is not NULL. Returns the descriptor (also in o->fd) or -1 with
 * errno set. */
int cp_own_open(cp_own_fd *o, int dirfd, const char *path, int flags,
                mode_t mode, struct stat *st);

/* A regular file opened read-only (O_NONBLOCK, O_NOCTTY) as cp_own_open
 * does, *st filled: -1 for anything else, which is not even opened when
 * stat says so (a device or FIFO: side effects, blocking). */
int cp_own_open_regular(cp_own_fd *o, const char *path, struct stat *st);

/* Takes fd, just returned by a call of ours, as cp_own_open does its own.
 * Returns the descriptor to use or -1 (fd closed, errno set). */
int cp_own_adopt(cp_own_fd *o, int fd);

/* Whether o->fd is still the file it was opened as (its device and inode;
 * the application may have closed it and opened another file under the
 * number), with that fstat in *st. */
int cp_own_fd_stat(const cp_own_fd *o, struct stat *st);
/* The same, without the fstat. */
int cp_own_fd_is_ours(const cp_own_fd *o);

/* Closes o->fd if it is still ours (else leaves the number to whoever holds
 * it now) and sets it to -1. 0, or -1 with errno set: close's own error, or
 * EBADF when the number had become another file (what was written through
 * it since may be lost). */
int cp_own_close(cp_own_fd *o);

/* Reads the whole of o from offset 0 with pread into a malloc'd,
 * NUL-terminated buffer of at most max bytes (a longer file is an error).
 * Returns the buffer and sets *len, or NULL. For /proc files, whose size
 * fstat does not tell. */
char *cp_own_read_all(const cp_own_fd *o, size_t max, size_t *len);

/* Calls each(name, arg) for every entry of the directory o (getdents64,
 * no DIR stream: closedir would close the number whatever file it has
 * become) but "." and "..", from its start, until each returns nonzero.
 * 0, or -1 with errno set. */
int cp_own_list_dir(const cp_own_fd *o,
                    int (*each)(const char *name, void *arg), void *arg);

#endif
