/* Socket calls that a sampling signal must not cut short.
 *
 * A blocking socket call is restarted after a handler with SA_RESTART (ours
 * have it), unless the socket has a timeout: with SO_RCVTIMEO (accept,
 * recv, recvfrom, recvmsg) or SO_SNDTIMEO (connect, send, sendto, sendmsg)
 * set, the kernel returns EINTR whatever SA_RESTART says (signal(7)). A wall
 * sample of a thread blocked in such a call then failed it after a few
 * milliseconds, where without the profiler it would have waited for data or
 * for its timeout (EAGAIN).
 *
 * These hooks call the real function and, when one of our signals cut it
 * short (interpose/eintr.h), wait in poll for what the call waits for, for
 * the rest of the socket's timeout, and then make the call again (it finds
 * its data, or its connection made or refused) or fail it as the timeout
 * does. The timeout is counted from the call's start as the kernel counts
 * it: on the clock of the last tick (the coarse monotonic clock, read
 * before each call: 8 ns on this VM). That clock lags by up to a tick, up
 * to 7 ms here after a wakeup, so the deadline is a tick after the count's
 * end: at most a tick late, and early only by what the lag exceeds a tick
 * (the kernel's own timeouts, on its timer wheel, end 8-20 ms late here).
 * Without a clock, counting from the first EINTR, a call was up to 120 ms
 * late in test_blocking_calls: the wall sampler may signal a blocked thread
 * long after it blocked. The precise clock costs 29 ns a call here, paid on
 * every socket call of an event loop. An EINTR during which an
 * application's handler ran is returned as it is.
 *
 * Not covered (docs/signals.md): read, write, readv and writev on such a
 * socket (wrapping every read and write of a process for it would cost
 * every I/O call), recvmmsg and sendmmsg. A call made again after poll
 * said ready starts a full timeout of its own if another thread took the
 * data meanwhile. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#include "common.h"
#include "interpose/eintr.h"
#include "interpose/real.h"

/* The coarse clock's resolution (a tick); 10 ms if unknown. */
static int64_t tick_ns(void) {
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

/* The call that began at `began` (CLOCK_MONOTONIC_COARSE) failed with an EINTR
 * of ours. What it waits for: `events` on fd, within the socket's timeout `opt`
 * (SO_RCVTIMEO or SO_SNDTIMEO). Waits in poll until fd is ready and returns
 * 1: make the call again. Returns 0 with errno set to what the call returns
 * otherwise: timed_out when the timeout ends first, EINTR when an
 * application's handler ran or fd has no timeout to read (not a socket:
 * the EINTR was not the socket's), poll's error. */
static int resume(int fd, int opt, short events, int timed_out, int64_t began) {
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
 * made again while our signals cut it short and resume() says so. */
#define RESUMING(fd, opt, events, timed_out, expr)                             \
  do {                                                                         \
    int64_t began_ = (int64_t)cp_clock_ns(CLOCK_MONOTONIC_COARSE);             \
    for (;;) {                                                                 \
      cp_signals_seen before_ = cp_signals_seen_now();                         \
      __typeof__(expr) rc_ = (expr);                                           \
      if (rc_ >= 0 || errno != EINTR || !cp_eintr_is_ours(before_))            \
        return rc_;                                                            \
      if (!resume((fd), (opt), (events), (timed_out), began_))                 \
        return -1;                                                             \
    }                                                                          \
  } while (0)

ssize_t recv(int fd, void *buf, size_t n, int flags) {
  typedef ssize_t (*fn_t)(int, void *, size_t, int);
  CP_REAL(fn_t, recv);
  RESUMING(fd, SO_RCVTIMEO, POLLIN, EAGAIN, fn_recv(fd, buf, n, flags));
}

ssize_t recvfrom(int fd, void *restrict buf, size_t n, int flags,
                 struct sockaddr *restrict addr, socklen_t *restrict len) {
  typedef ssize_t (*fn_t)(int, void *, size_t, int, struct sockaddr *,
                          socklen_t *);
  CP_REAL(fn_t, recvfrom);
  RESUMING(fd, SO_RCVTIMEO, POLLIN, EAGAIN,
           fn_recvfrom(fd, buf, n, flags, addr, len));
}

ssize_t recvmsg(int fd, struct msghdr *msg, int flags) {
  typedef ssize_t (*fn_t)(int, struct msghdr *, int);
  CP_REAL(fn_t, recvmsg);
  RESUMING(fd, SO_RCVTIMEO, POLLIN, EAGAIN, fn_recvmsg(fd, msg, flags));
}

ssize_t send(int fd, const void *buf, size_t n, int flags) {
  typedef ssize_t (*fn_t)(int, const void *, size_t, int);
  CP_REAL(fn_t, send);
  RESUMING(fd, SO_SNDTIMEO, POLLOUT, EAGAIN, fn_send(fd, buf, n, flags));
}

ssize_t sendto(int fd, const void *buf, size_t n, int flags,
               const struct sockaddr *addr, socklen_t len) {
  typedef ssize_t (*fn_t)(int, const void *, size_t, int,
                          const struct sockaddr *, socklen_t);
  CP_REAL(fn_t, sendto);
  RESUMING(fd, SO_SNDTIMEO, POLLOUT, EAGAIN,
           fn_sendto(fd, buf, n, flags, addr, len));
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags) {
  typedef ssize_t (*fn_t)(int, const struct msghdr *, int);
  CP_REAL(fn_t, sendmsg);
  RESUMING(fd, SO_SNDTIMEO, POLLOUT, EAGAIN, fn_sendmsg(fd, msg, flags));
}

int accept(int fd, struct sockaddr *restrict addr, socklen_t *restrict len) {
  typedef int (*fn_t)(int, struct sockaddr *, socklen_t *);
  CP_REAL(fn_t, accept);
  RESUMING(fd, SO_RCVTIMEO, POLLIN, EAGAIN, fn_accept(fd, addr, len));
}

int accept4(int fd, struct sockaddr *restrict addr, socklen_t *restrict len,
            int flags) {
  typedef int (*fn_t)(int, struct sockaddr *, socklen_t *, int);
  CP_REAL(fn_t, accept4);
  RESUMING(fd, SO_RCVTIMEO, POLLIN, EAGAIN, fn_accept4(fd, addr, len, flags));
}

/* A TCP connection cut short goes on in the background: made again, connect
 * waits for it and returns its outcome (0, or the error that ended it); a
 * Unix socket's is made again. When the timeout passes first, TCP's connect
 * fails with EINPROGRESS (the connection still in progress), a Unix
 * socket's with EAGAIN. */
int connect(int fd, const struct sockaddr *addr, socklen_t len) {
  typedef int (*fn_t)(int, const struct sockaddr *, socklen_t);
  CP_REAL(fn_t, connect);
  int timed_out =
      addr && len >= sizeof addr->sa_family && addr->sa_family == AF_UNIX
          ? EAGAIN
          : EINPROGRESS;
  RESUMING(fd, SO_SNDTIMEO, POLLOUT, timed_out, fn_connect(fd, addr, len));
}
