/* The file calls a server of one thread makes at every request: open,
 * openat (and their 64-bit names and fortified entry points), pread,
 * pwrite and close. The C library makes each a cancellation point, with
 * two compare-and-swaps around the system call once the process has had a
 * second thread (the profiler's count). While the application has one
 * thread these hooks make the system call themselves, as the C library does
 * for a process of one thread (interpose/direct.h; docs/overhead.md, "One
 * thread's system calls"); otherwise, and where the function behind them is
 * not the C library's, they forward the call. A signal of ours does not cut
 * these short (SA_RESTART restarts them), so they do nothing else. */
#undef _FORTIFY_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include "common.h"
#include "interpose/direct.h"
#include "interpose/real.h"
#include "passthrough.h"

/* Whether open's flags take a mode argument (as the C library reads it). */
CP_PASSTHROUGH static int needs_mode(int flags) {
  return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE;
}

/* The open family's system call, as the C library makes it: it passes
 * flags | O_LARGEFILE, and O_LARGEFILE is 0 in x86-64's headers (the
 * kernel sets it for 64-bit callers), the only place the calls are made
 * directly. A macro, as cp_direct_syscall is: the time in the call is the
 * hook's (`open`), not a function's of ours. */
#define OPENAT_SYSCALL(dirfd, path, flags, mode)                               \
  ((int)cp_direct_syscall(SYS_openat, (dirfd), (long)(path), (flags),          \
                          (long)(mode), 0, 0))

/* The mode argument, where the flags take one (as the C library reads
 * it); 0 where they do not. */
#define OPEN_MODE(mode, flags)                                                 \
  mode_t mode = 0;                                                             \
  if (needs_mode(flags)) {                                                     \
    va_list ap_;                                                               \
    va_start(ap_, flags);                                                      \
    mode = va_arg(ap_, mode_t);                                                \
    va_end(ap_);                                                               \
  }

/* open and open64, openat and openat64: the same functions in the C
 * library of a 64-bit system, each its own symbol. */
#define OPEN_HOOK(name)                                                        \
  CP_PASSTHROUGH int name(const char *path, int flags, ...) {                  \
    typedef int (*fn_t)(const char *, int, ...);                               \
    CP_REAL(fn_t, name);                                                       \
    CP_DIRECT_STATE(name);                                                     \
    OPEN_MODE(mode, flags);                                                    \
    return CP_DIRECT_OR(name, OPENAT_SYSCALL(AT_FDCWD, path, flags, mode),     \
                        fn_##name(path, flags, mode));                         \
  }
#define OPENAT_HOOK(name)                                                      \
  CP_PASSTHROUGH int name(int dirfd, const char *path, int flags, ...) {       \
    typedef int (*fn_t)(int, const char *, int, ...);                          \
    CP_REAL(fn_t, name);                                                       \
    CP_DIRECT_STATE(name);                                                     \
    OPEN_MODE(mode, flags);                                                    \
    return CP_DIRECT_OR(name, OPENAT_SYSCALL(dirfd, path, flags, mode),        \
                        fn_##name(dirfd, path, flags, mode));                  \
  }
OPEN_HOOK(open)
OPEN_HOOK(open64)
OPENAT_HOOK(openat)
OPENAT_HOOK(openat64)

/* The fortified entry points: flags that need a mode are the caller's
 * error, which the C library's function reports (it aborts). */
#define OPEN_2_HOOK(name)                                                      \
  int name(const char *path, int flags) {                                      \
    typedef int (*fn_t)(const char *, int);                                    \
    CP_REAL(fn_t, name);                                                       \
    CP_DIRECT_STATE(name);                                                     \
    return CP_DIRECT_OR_WHEN(!needs_mode(flags), name,                         \
                             OPENAT_SYSCALL(AT_FDCWD, path, flags, 0),         \
                             fn_##name(path, flags));                          \
  }
#define OPENAT_2_HOOK(name)                                                    \
  int name(int dirfd, const char *path, int flags) {                           \
    typedef int (*fn_t)(int, const char *, int);                               \
    CP_REAL(fn_t, name);                                                       \
    CP_DIRECT_STATE(name);                                                     \
    return CP_DIRECT_OR_WHEN(!needs_mode(flags), name,                         \
                             OPENAT_SYSCALL(dirfd, path, flags, 0),            \
                             fn_##name(dirfd, path, flags));                   \
  }
OPEN_2_HOOK(__open_2)
OPEN_2_HOOK(__open64_2)
OPENAT_2_HOOK(__openat_2)
OPENAT_2_HOOK(__openat64_2)

CP_PASSTHROUGH int close(int fd) {
  typedef int (*fn_t)(int);
  CP_REAL(fn_t, close);
  CP_DIRECT_STATE(close);
  return CP_DIRECT_OR(close, cp_direct_syscall(SYS_close, fd, 0, 0, 0, 0, 0),
                      fn_close(fd));
}

/* On x86-64 the offset is one argument. */
#define PRW(name, nr, fd, buf, n, offset, libc)                                \
  CP_DIRECT_OR(                                                                \
      name,                                                                    \
      cp_direct_syscall(nr, fd, (long)(buf), (long)(n), (long)(offset), 0, 0), \
      libc)

CP_PASSTHROUGH ssize_t pread(int fd, void *buf, size_t n, off_t offset) {
  typedef ssize_t (*fn_t)(int, void *, size_t, off_t);
  CP_REAL(fn_t, pread);
  CP_DIRECT_STATE(pread);
  return PRW(pread, SYS_pread64, fd, buf, n, offset,
             fn_pread(fd, buf, n, offset));
}

CP_PASSTHROUGH ssize_t pread64(int fd, void *buf, size_t n, off64_t offset) {
  typedef ssize_t (*fn_t)(int, void *, size_t, off64_t);
  CP_REAL(fn_t, pread64);
  CP_DIRECT_STATE(pread64);
  return PRW(pread64, SYS_pread64, fd, buf, n, offset,
             fn_pread64(fd, buf, n, offset));
}

CP_PASSTHROUGH ssize_t pwrite(int fd, const void *buf, size_t n, off_t offset) {
  typedef ssize_t (*fn_t)(int, const void *, size_t, off_t);
  CP_REAL(fn_t, pwrite);
  CP_DIRECT_STATE(pwrite);
  return PRW(pwrite, SYS_pwrite64, fd, buf, n, offset,
             fn_pwrite(fd, buf, n, offset));
}

CP_PASSTHROUGH ssize_t pwrite64(int fd, const void *buf, size_t n,
                                off64_t offset) {
  typedef ssize_t (*fn_t)(int, const void *, size_t, off64_t);
  CP_REAL(fn_t, pwrite64);
  CP_DIRECT_STATE(pwrite64);
  return PRW(pwrite64, SYS_pwrite64, fd, buf, n, offset,
             fn_pwrite64(fd, buf, n, offset));
}
