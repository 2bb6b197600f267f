/* Socket calls that a sampling signal must not cut short.
 *
 * A blocking socket call is restarted after a handler with SA_RESTART (ours
 * have it), unless the socket has a timeout: with SO_RCVTIMEO (accept,
 * recv, recvfrom, recvmsg, recvmmsg, read, readv) or SO_SNDTIMEO (connect,
 * send, sendto, sendmsg, sendmmsg, write, writev) set, the kernel returns EINTR
 * whatever SA_RESTART says (signal(7)). A wall sample of a thread blocked in
 * such a call then failed it after a few milliseconds, where without the
 * profiler it would have waited for data or for its timeout (EAGAIN).
 *
 * These hooks call the real function and, when one of our signals cut it
 * short (interpose/eintr.h), wait in poll for what the call waits for, for
 * the rest of the socket's timeout, and then make the call again (it finds
 * its data, or its connection made or refused) or fail it as the timeout
 * does. The timeout is counted from the call's start as the kernel counts
 * it: on the clock of the last tick (the coarse monotonic clock: 6-8 ns a
 * read on the VMs measured). That clock lags by up to a tick, up to 7 ms
 * after a wakeup, so the deadline is a tick after the count's end: at most
 * a tick late, and early only by what the lag exceeds a tick (the kernel's
 * own timeouts, on its timer wheel, end 8-20 ms late here).
 *
 * The clock is read before a call only on a descriptor whose timeout the
 * application set through setsockopt (hooked below: a bit per descriptor,
 * set and never cleared), so that the reads and writes of files, pipes and
 * sockets without timeouts pay no clock. A socket whose timeout was set
 * otherwise (inherited across exec, received from another process, set by
 * a raw system call, or reached through dup) has its timeout counted from
 * the EINTR instead: it may end late by as long as the call had waited
 * when the signal came (up to 120 ms in test_blocking_calls, whose wall
 * sampler may signal a blocked thread long after it blocked). An EINTR
 * during which an application's handler ran is returned as it is.
 *
 * The fortified entry points (__read_chk, __recv_chk, __recvfrom_chk: what
 * -D_FORTIFY_SOURCE builds call when the buffer's size is known) are hooked
 * too; the C library's own calls (stdio on a socket) are not seen. A call
 * made again after poll said ready starts a full timeout of its own if another
 * thread took the data meanwhile.
 *
 * While the application has one thread, each of these makes its system call
 * itself rather than through the C library's function (interpose/direct.h):
 * the C library's cancellation bookkeeping is for a canceller, and there is
 * none. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "interpose/direct.h"
#include "interpose/eintr.h"
#include "interpose/real.h"
#include "passthrough.h"

/* A bit per descriptor below MARKED_FDS: the application set a timeout on
 * its socket (setsockopt). 128 KiB of zero pages until written; above it
 * every descriptor counts as marked. */
#define MARKED_FDS (1u << 20)
static _Atomic uint64_t timeout_marks[MARKED_FDS / 64];

/* fd's word and bit in timeout_marks; fd below MARKED_FDS. */
CP_PASSTHROUGH static _Atomic uint64_t *mark_word(int fd) {
  return &timeout_marks[(unsigned)fd / 64];
}
CP_PASSTHROUGH static uint64_t mark_bit(int fd) {
  return 1ull << ((unsigned)fd % 64);
}

/* Async-signal-safe. */
CP_PASSTHROUGH static int timeout_marked(int fd) {
  return (unsigned)fd >= MARKED_FDS ||
         (atomic_load_explicit(mark_word(fd), memory_order_relaxed) &
          mark_bit(fd));
}

/* The call's start on the coarse clock for a marked descriptor; 0 for
 * another (resume counts from the EINTR). Async-signal-safe. */
CP_PASSTHROUGH static int64_t call_start(int fd) {
  return timeout_marked(fd) ? (int64_t)cp_clock_ns(CLOCK_MONOTONIC_COARSE) : 0;
}

/* The coarse clock's resolution (a tick); 10 ms if unknown. */
CP_PASSTHROUGH static int64_t tick_ns(void) {
  static _Atomic int64_t tick;
  int64_t t = atomic_load_explicit(&tick, memory_order_relaxed);
  if (!t) {
    struct timespec res;
    if (clock_getres(CLOCK_MONOTONIC_COARSE, &res) == 0)
      t = (int64_t)res.tv_sec * 1000000000 + res.tv_nsec;
    if (t <= 0)
      t = 10000000;
    atomic_store_explicit(&tick, t, memory_order_relaxed);
  }
  return t;
}

/* The call that began at `began` (CLOCK_MONOTONIC_COARSE; 0: not read, the
 * EINTR's moment stands for it) failed with an EINTR of ours. What it waits
 * for: `events` on fd, within the socket's timeout `opt` (SO_RCVTIMEO or
 * SO_SNDTIMEO). Waits in poll until fd is ready and returns 1: make the call
 * again. Returns 0 with errno set to what the call returns otherwise: timed_out
 * when the timeout ends first, EINTR when an application's handler ran or fd
 * has no timeout to read (not a socket: the EINTR was not the socket's), poll's
 * error. */
CP_PASSTHROUGH static int resume(int fd, int opt, short events, int timed_out,
                                 int64_t began) {
  typedef int (*poll_fn)(struct pollfd *, nfds_t, int);
  CP_REAL_OR(poll_fn, poll, (errno = EINTR, 0));
  struct timeval tv;
  socklen_t len = sizeof tv;
  if (getsockopt(fd, SOL_SOCKET, opt, &tv, &len) != 0) {
    errno = EINTR;
    return 0;
  }
  int64_t timeout = (int64_t)tv.tv_sec * 1000000000 + tv.tv_usec * 1000;
  if (timeout <= 0)
    return 1; /* none (the kernel would have restarted it): again */
  if (!began)
    began = (int64_t)cp_clock_ns(CLOCK_MONOTONIC_COARSE);
  int64_t deadline = began + tick_ns() + timeout;
  for (;;) {
    int64_t left = deadline - (int64_t)cp_monotonic_ns();
    if (left <= 0) {
      errno = timed_out;
      return 0;
    }
    cp_signals_seen before = cp_signals_seen_now();
    struct pollfd p = {.fd = fd, .events = events};
    int64_t ms = (left + 999999) / 1000000;
    int rc = fn_poll(&p, 1, ms < INT_MAX ? (int)ms : INT_MAX);
    if (rc > 0)
      return 1; /* ready, or an error the call will return */
    if (rc < 0 && (errno != EINTR || !cp_eintr_is_ours(before)))
      return 0;
  }
}

/* A hook's body: the real call `expr` (a ssize_t or int, -1 on error) on fd,
 * made again while our signals cut it short and resume() says so. Hot for
 * read and write: on a descriptor without a timeout set, a bit's test and
 * two thread-local loads before the call, no clock (about 40 instructions
 * a call with the saves of the registers a retry needs: docs/benchmarks.md,
 * "read and write hooked"). */
#define RESUMING(fd, opt, events, timed_out, expr)                             \
  do {                                                                         \
    int64_t began_ = call_start(fd);                                           \
    for (;;) {                                                                 \
      cp_signals_seen before_ = cp_signals_seen_now();                         \
      __typeof__(expr) rc_ = (expr);                                           \
      if (rc_ >= 0 || errno != EINTR || !cp_eintr_is_ours(before_))            \
        return rc_;                                                            \
      if (!resume((fd), (opt), (events), (timed_out), began_))                 \
        return -1;                                                             \
    }                                                                          \
  } while (0)

CP_PASSTHROUGH ssize_t recv(int fd, void *buf, size_t n, int flags) {
  typedef ssize_t (*fn_t)(int, void *, size_t, int);
  CP_REAL(fn_t, recv);
  CP_DIRECT_STATE(recv);
  RESUMING(fd, SO_RCVTIMEO, POLLIN, EAGAIN,
           CP_DIRECT_OR(recv,
                        cp_direct_syscall(SYS_recvfrom, fd, (long)buf, (long)n,
                                          flags, 0, 0),
                        fn_recv(fd, buf, n, flags)));
}

CP_PASSTHROUGH ssize_t recvfrom(int fd, void *restrict buf, size_t n, int flags,
                                struct sockaddr *restrict addr,
                                socklen_t *restrict len) {
  typedef ssize_t (*fn_t)(int, void *, size_t, int, struct sockaddr *,
                          socklen_t *);
  CP_REAL(fn_t, recvfrom);
  CP_DIRECT_STATE(recvfrom);
  RESUMING(fd, SO_RCVTIMEO, POLLIN, EAGAIN,
           CP_DIRECT_OR(recvfrom,
                        cp_direct_syscall(SYS_recvfrom, fd, (long)buf, (long)n,
                                          flags, (long)addr, (long)len),
                        fn_recvfrom(fd, buf, n, flags, addr, len)));
}

CP_PASSTHROUGH ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen,
                                  int flags) {
  typedef ssize_t (*fn_t)(int, void *, size_t, size_t, int);
  CP_REAL(fn_t, __recv_chk);
  CP_DIRECT_STATE(__recv_chk);
  /* Direct only where the check passes: the C library's reports it. */
  RESUMING(fd, SO_RCVTIMEO, POLLIN, EAGAIN,
           CP_DIRECT_OR_WHEN(n <= buflen, __recv_chk,
                             cp_direct_syscall(SYS_recvfrom, fd, (long)buf,
                                               (long)n, flags, 0, 0),
                             fn___recv_chk(fd, buf, n, buflen, flags)));
}

CP_PASSTHROUGH ssize_t __recvfrom_chk(int fd, void *restrict buf, size_t n,
                                      size_t buflen, int flags,
                                      struct sockaddr *restrict addr,
                                      socklen_t *restrict len) {
  typedef ssize_t (*fn_t)(int, void *, size_t, size_t, int, struct sockaddr *,
                          socklen_t *);
  CP_REAL(fn_t, __recvfrom_chk);
  CP_DIRECT_STATE(__recvfrom_chk);
  RESUMING(fd, SO_RCVTIMEO, POLLIN, EAGAIN,
           CP_DIRECT_OR_WHEN(
               n <= buflen, __recvfrom_chk,
               cp_direct_syscall(SYS_recvfrom, fd, (long)buf, (long)n, flags,
                                 (long)addr, (long)len),
               fn___recvfrom_chk(fd, buf, n, buflen, flags, addr, len)));
}

CP_PASSTHROUGH ssize_t recvmsg(int fd, struct msghdr *msg, int flags) {
  typedef ssize_t (*fn_t)(int, struct msghdr *, int);
  CP_REAL(fn_t, recvmsg);
  CP_DIRECT_STATE(recvmsg);
  RESUMING(fd, SO_RCVTIMEO, POLLIN, EAGAIN,
           CP_DIRECT_OR(
               recvmsg,
               cp_direct_syscall(SYS_recvmsg, fd, (long)msg, flags, 0, 0, 0),
               fn_recvmsg(fd, msg, flags)));
}

/* With nothing received, recvmmsg fails as recv does; the kernel writes
 * what is left of its own timeout (the argument) back for the call made
 * again. */
CP_PASSTHROUGH int recvmmsg(int fd, struct mmsghdr *msgs, unsigned int n,
                            int flags, struct timespec *timeout) {
  typedef int (*fn_t)(int, struct mmsghdr *, unsigned int, int,
                      struct timespec *);
  CP_REAL(fn_t, recvmmsg);
  CP_DIRECT_STATE(recvmmsg);
  RESUMING(fd, SO_RCVTIMEO, POLLIN, EAGAIN,
           CP_DIRECT_OR(recvmmsg,
                        cp_direct_syscall(SYS_recvmmsg, fd, (long)msgs, n,
                                          flags, (long)timeout, 0),
                        fn_recvmmsg(fd, msgs, n, flags, timeout)));
}

CP_PASSTHROUGH int sendmmsg(int fd, struct mmsghdr *msgs, unsigned int n,
                            int flags) {
  typedef int (*fn_t)(int, struct mmsghdr *, unsigned int, int);
  CP_REAL(fn_t, sendmmsg);
  CP_DIRECT_STATE(sendmmsg);
  RESUMING(fd, SO_SNDTIMEO, POLLOUT, EAGAIN,
           CP_DIRECT_OR(
               sendmmsg,
               cp_direct_syscall(SYS_sendmmsg, fd, (long)msgs, n, flags, 0, 0),
               fn_sendmmsg(fd, msgs, n, flags)));
}

CP_PASSTHROUGH ssize_t send(int fd, const void *buf, size_t n, int flags) {
  typedef ssize_t (*fn_t)(int, const void *, size_t, int);
  CP_REAL(fn_t, send);
  CP_DIRECT_STATE(send);
  RESUMING(fd, SO_SNDTIMEO, POLLOUT, EAGAIN,
           CP_DIRECT_OR(send,
                        cp_direct_syscall(SYS_sendto, fd, (long)buf, (long)n,
                                          flags, 0, 0),
                        fn_send(fd, buf, n, flags)));
}

CP_PASSTHROUGH ssize_t sendto(int fd, const void *buf, size_t n, int flags,
                              const struct sockaddr *addr, socklen_t len) {
  typedef ssize_t (*fn_t)(int, const void *, size_t, int,
                          const struct sockaddr *, socklen_t);
  CP_REAL(fn_t, sendto);
  CP_DIRECT_STATE(sendto);
  RESUMING(fd, SO_SNDTIMEO, POLLOUT, EAGAIN,
           CP_DIRECT_OR(sendto,
                        cp_direct_syscall(SYS_sendto, fd, (long)buf, (long)n,
                                          flags, (long)addr, (long)len),
                        fn_sendto(fd, buf, n, flags, addr, len)));
}

CP_PASSTHROUGH ssize_t sendmsg(int fd, const struct msghdr *msg, int flags) {
  typedef ssize_t (*fn_t)(int, const struct msghdr *, int);
  CP_REAL(fn_t, sendmsg);
  CP_DIRECT_STATE(sendmsg);
  RESUMING(fd, SO_SNDTIMEO, POLLOUT, EAGAIN,
           CP_DIRECT_OR(
               sendmsg,
               cp_direct_syscall(SYS_sendmsg, fd, (long)msg, flags, 0, 0, 0),
               fn_sendmsg(fd, msg, flags)));
}

CP_PASSTHROUGH int accept(int fd, struct sockaddr *restrict addr,
                          socklen_t *restrict len) {
  typedef int (*fn_t)(int, struct sockaddr *, socklen_t *);
  CP_REAL(fn_t, accept);
  CP_DIRECT_STATE(accept);
  RESUMING(fd, SO_RCVTIMEO, POLLIN, EAGAIN,
           CP_DIRECT_OR(accept,
                        cp_direct_syscall(SYS_accept, fd, (long)addr, (long)len,
                                          0, 0, 0),
                        fn_accept(fd, addr, len)));
}

CP_PASSTHROUGH int accept4(int fd, struct sockaddr *restrict addr,
                           socklen_t *restrict len, int flags) {
  typedef int (*fn_t)(int, struct sockaddr *, socklen_t *, int);
  CP_REAL(fn_t, accept4);
  CP_DIRECT_STATE(accept4);
  RESUMING(fd, SO_RCVTIMEO, POLLIN, EAGAIN,
           CP_DIRECT_OR(accept4,
                        cp_direct_syscall(SYS_accept4, fd, (long)addr,
                                          (long)len, flags, 0, 0),
                        fn_accept4(fd, addr, len, flags)));
}

/* A TCP connection cut short goes on in the background: made again, connect
 * waits for it and returns its outcome (0, or the error that ended it); a
 * Unix socket's is made again. When the timeout passes first, TCP's connect
 * fails with EINPROGRESS (the connection still in progress), a Unix
 * socket's with EAGAIN. */
CP_PASSTHROUGH int connect(int fd, const struct sockaddr *addr, socklen_t len) {
  typedef int (*fn_t)(int, const struct sockaddr *, socklen_t);
  CP_REAL(fn_t, connect);
  CP_DIRECT_STATE(connect);
  int timed_out =
      addr && len >= sizeof addr->sa_family && addr->sa_family == AF_UNIX
          ? EAGAIN
          : EINPROGRESS;
  RESUMING(
      fd, SO_SNDTIMEO, POLLOUT, timed_out,
      CP_DIRECT_OR(connect,
                   cp_direct_syscall(SYS_connect, fd, (long)addr, len, 0, 0, 0),
                   fn_connect(fd, addr, len)));
}

/* read and write on any descriptor: only a socket with a timeout returns
 * EINTR for one of our signals (the kernel restarts the others), and
 * resume() returns such an EINTR as it is where getsockopt fails. */
CP_PASSTHROUGH ssize_t read(int fd, void *buf, size_t n) {
  typedef ssize_t (*fn_t)(int, void *, size_t);
  CP_REAL(fn_t, read);
  CP_DIRECT_STATE(read);
  RESUMING(
      fd, SO_RCVTIMEO, POLLIN, EAGAIN,
      CP_DIRECT_OR(read,
                   cp_direct_syscall(SYS_read, fd, (long)buf, (long)n, 0, 0, 0),
                   fn_read(fd, buf, n)));
}

CP_PASSTHROUGH ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen) {
  typedef ssize_t (*fn_t)(int, void *, size_t, size_t);
  CP_REAL(fn_t, __read_chk);
  CP_DIRECT_STATE(__read_chk);
  RESUMING(fd, SO_RCVTIMEO, POLLIN, EAGAIN,
           CP_DIRECT_OR_WHEN(
               n <= buflen, __read_chk,
               cp_direct_syscall(SYS_read, fd, (long)buf, (long)n, 0, 0, 0),
               fn___read_chk(fd, buf, n, buflen)));
}

CP_PASSTHROUGH ssize_t readv(int fd, const struct iovec *iov, int count) {
  typedef ssize_t (*fn_t)(int, const struct iovec *, int);
  CP_REAL(fn_t, readv);
  CP_DIRECT_STATE(readv);
  RESUMING(
      fd, SO_RCVTIMEO, POLLIN, EAGAIN,
      CP_DIRECT_OR(readv,
                   cp_direct_syscall(SYS_readv, fd, (long)iov, count, 0, 0, 0),
                   fn_readv(fd, iov, count)));
}

CP_PASSTHROUGH ssize_t write(int fd, const void *buf, size_t n) {
  typedef ssize_t (*fn_t)(int, const void *, size_t);
  CP_REAL(fn_t, write);
  CP_DIRECT_STATE(write);
  RESUMING(fd, SO_SNDTIMEO, POLLOUT, EAGAIN,
           CP_DIRECT_OR(
               write,
               cp_direct_syscall(SYS_write, fd, (long)buf, (long)n, 0, 0, 0),
               fn_write(fd, buf, n)));
}

CP_PASSTHROUGH ssize_t writev(int fd, const struct iovec *iov, int count) {
  typedef ssize_t (*fn_t)(int, const struct iovec *, int);
  CP_REAL(fn_t, writev);
  CP_DIRECT_STATE(writev);
  RESUMING(
      fd, SO_SNDTIMEO, POLLOUT, EAGAIN,
      CP_DIRECT_OR(writev,
                   cp_direct_syscall(SYS_writev, fd, (long)iov, count, 0, 0, 0),
                   fn_writev(fd, iov, count)));
}

CP_PASSTHROUGH static int is_timeout_option(int name) {
  if (name == SO_RCVTIMEO || name == SO_SNDTIMEO)
    return 1;
#ifdef SO_RCVTIMEO_NEW
  if (name == SO_RCVTIMEO_NEW || name == SO_SNDTIMEO_NEW)
    return 1;
#endif
#ifdef SO_RCVTIMEO_OLD
  if (name == SO_RCVTIMEO_OLD || name == SO_SNDTIMEO_OLD)
    return 1;
#endif
  return 0;
}

/* Marks fd once a timeout was set on its socket: its calls read the clock
 * from then on. */
CP_PASSTHROUGH int setsockopt(int fd, int level, int name, const void *value,
                              socklen_t len) {
  typedef int (*fn_t)(int, int, int, const void *, socklen_t);
  CP_REAL(fn_t, setsockopt);
  int rc = fn_setsockopt(fd, level, name, value, len);
  if (rc == 0 && level == SOL_SOCKET && is_timeout_option(name) &&
      (unsigned)fd < MARKED_FDS)
    atomic_fetch_or_explicit(mark_word(fd), mark_bit(fd), memory_order_relaxed);
  return rc;
}
