/* Sleeps and waits: blocking calls that a sampling signal must not cut
 * short.
 *
 * The wall sampler signals threads that may be blocked. SA_RESTART restarts
 * read, write, futex waits and the like, but never nanosleep, poll, select or
 * epoll_wait: those return EINTR (sleep() returns early with seconds left),
 * which would change what the application does. These wrappers call the real
 * function and, when it was interrupted by one of the profiler's own signals
 * (the per-thread count of those that found the thread at a system call
 * moved: samplers/signals.h), go on waiting for the time that is left, so
 * the application sees exactly the call it made. An EINTR with no sampling
 * signal is returned as it is, and so is one during which a handler of the
 * application's ran, even if ours came too (the handlers are counted:
 * samplers/signals.h, cp_signals_wrap_app; docs/signals.md).
 *
 * Also wrapped: ppoll, pselect, epoll_pwait and epoll_pwait2 (like poll,
 * select and epoll_wait), the fortified __poll_chk and __ppoll_chk, and
 * sem_timedwait and sem_clockwait (a futex wait with a timeout is not restarted
 * either: glibc returns EINTR; sem_wait without a timeout is). The calls that
 * wait for signals are in signal_calls.c, the socket calls with timeouts in
 * socket_calls.c, and System V IPC waits (semop, semtimedop, msgrcv, msgsnd)
 * and libaio's io_getevents and io_pgetevents below.
 *
 * Each of these hooks also tells the wall sampler that the thread blocks in
 * it (PARKED), so that a thread that blocks again where it blocked before
 * is sampled there without being woken (samplers/wall.c, "Parked
 * threads"). So do the hooks of the waits that SA_RESTART restarts, or that
 * glibc retries itself, where a thread pool's workers block:
 * pthread_cond_wait, pthread_cond_timedwait, pthread_cond_clockwait and
 * sem_wait. They only park: the application already sees the call it made. */

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/msg.h>
#include <sys/select.h>
#include <sys/sem.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "interpose/direct.h"
#include "interpose/eintr.h"
#include "interpose/real.h"
#include "passthrough.h"
#include "samplers/wall.h"
#include "thread_state.h"

CP_PASSTHROUGH static int64_t ts_ns(const struct timespec *ts) {
  return (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

CP_PASSTHROUGH static struct timespec ns_ts(int64_t ns) {
  if (ns < 0)
    ns = 0;
  return (struct timespec){(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
}

/* Milliseconds left until deadline_ns (monotonic), for poll-style calls. */
CP_PASSTHROUGH static int ms_left(int64_t deadline_ns) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  int64_t left = deadline_ns - ts_ns(&now);
  return left <= 0 ? 0 : (int)((left + 999999) / 1000000);
}

CP_PASSTHROUGH static int64_t deadline_after_ms(int timeout_ms) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return ts_ns(&now) + (int64_t)timeout_ms * 1000000;
}

/* Marks the calling thread as blocked in this hook until the hook returns,
 * for the wall sampler (samplers/wall.h): declared first in each hook,
 * released by the cleanup whichever way the hook returns. */
CP_PASSTHROUGH static inline void unpark(const int *parked) {
  if (*parked)
    cp_wall_unpark();
}
#define PARKED PARKED_IF(1)
/* The same, only for a call that may block: one with a zero timeout, which
 * an event loop may make thousands of times a second, returns at once and
 * is not worth the park and its check (13 ns at a depth of 20). */
#define PARKED_IF(may_block)                                                   \
  __attribute__((cleanup(unpark), unused)) const int parked_ =                 \
      (may_block) && cp_wall_park((uintptr_t)__builtin_dwarf_cfa())

/* Whether a timespec timeout (NULL: none) may let the call block. */
CP_PASSTHROUGH static int ts_may_block(const struct timespec *t) {
  return !t || t->tv_sec || t->tv_nsec;
}

CP_PASSTHROUGH int nanosleep(const struct timespec *req, struct timespec *rem) {
  typedef int (*fn_t)(const struct timespec *, struct timespec *);
  CP_REAL(fn_t, nanosleep);
  PARKED;
  struct timespec left = *req, r;
  for (;;) {
    cp_signals_seen before = cp_signals_seen_now();
    int rc = fn_nanosleep(&left, &r);
    if (rc == 0 || errno != EINTR || !cp_eintr_is_ours(before)) {
      if (rc != 0 && rem)
        *rem = r;
      return rc;
    }
    left = r;
  }
}

CP_PASSTHROUGH int clock_nanosleep(clockid_t clock, int flags,
                                   const struct timespec *req,
                                   struct timespec *rem) {
  typedef int (*fn_t)(clockid_t, int, const struct timespec *,
                      struct timespec *);
  CP_REAL_OR(fn_t, clock_nanosleep, ENOSYS);
  PARKED;
  struct timespec left = *req, r;
  for (;;) {
    cp_signals_seen before = cp_signals_seen_now();
    int rc = fn_clock_nanosleep(clock, flags, &left, &r); /* the error */
    if (rc != EINTR || !cp_eintr_is_ours(before)) {
      if (rc == EINTR && rem && !(flags & TIMER_ABSTIME))
        *rem = r;
      return rc;
    }
    if (!(flags & TIMER_ABSTIME))
      left = r; /* an absolute deadline stays as it is */
  }
}

CP_PASSTHROUGH unsigned int sleep(unsigned int seconds) {
  struct timespec req = {(time_t)seconds, 0}, rem = {0, 0};
  if (nanosleep(&req, &rem) == 0)
    return 0;
  /* Interrupted by the application's signal: seconds left, rounded up. */
  return (unsigned)rem.tv_sec + (rem.tv_nsec > 0);
}

CP_PASSTHROUGH int usleep(useconds_t usec) {
  struct timespec req = ns_ts((int64_t)usec * 1000);
  return nanosleep(&req, NULL);
}

CP_PASSTHROUGH int poll(struct pollfd *fds, nfds_t nfds, int timeout) {
  typedef int (*fn_t)(struct pollfd *, nfds_t, int);
  CP_REAL(fn_t, poll);
  CP_DIRECT_STATE(poll);
  PARKED_IF(timeout != 0);
  int64_t deadline = timeout > 0 ? deadline_after_ms(timeout) : 0;
  for (;;) {
    cp_signals_seen before = cp_signals_seen_now();
    int rc = CP_DIRECT_OR(
        poll,
        cp_direct_syscall(SYS_poll, (long)fds, (long)nfds, timeout, 0, 0, 0),
        fn_poll(fds, nfds, timeout));
    if (rc >= 0 || errno != EINTR || !cp_eintr_is_ours(before))
      return rc;
    if (timeout > 0 && (timeout = ms_left(deadline)) == 0)
      return 0; /* the time ran out meanwhile */
  }
}

CP_PASSTHROUGH int epoll_wait(int epfd, struct epoll_event *events,
                              int maxevents, int timeout) {
  typedef int (*fn_t)(int, struct epoll_event *, int, int);
  CP_REAL(fn_t, epoll_wait);
  CP_DIRECT_STATE(epoll_wait);
  PARKED_IF(timeout != 0);
  int64_t deadline = timeout > 0 ? deadline_after_ms(timeout) : 0;
  for (;;) {
    cp_signals_seen before = cp_signals_seen_now();
    int rc = CP_DIRECT_OR(epoll_wait,
                          cp_direct_syscall(SYS_epoll_wait, epfd, (long)events,
                                            maxevents, timeout, 0, 0),
                          fn_epoll_wait(epfd, events, maxevents, timeout));
    if (rc >= 0 || errno != EINTR || !cp_eintr_is_ours(before))
      return rc;
    if (timeout > 0 && (timeout = ms_left(deadline)) == 0)
      return 0;
  }
}

/* select and pselect: on EINTR the fd sets are unspecified, so the caller's
 * are kept to retry with. */
typedef struct fd_sets {
  fd_set *set[3]; /* read, write, except: the caller's (may be NULL) */
  fd_set saved[3];
} fd_sets;

CP_PASSTHROUGH static void fd_sets_save(fd_sets *s, fd_set *r, fd_set *w,
                                        fd_set *x) {
  s->set[0] = r, s->set[1] = w, s->set[2] = x;
  for (int i = 0; i < 3; i++)
    if (s->set[i])
      s->saved[i] = *s->set[i];
}

CP_PASSTHROUGH static void fd_sets_restore(const fd_sets *s) {
  for (int i = 0; i < 3; i++)
    if (s->set[i])
      *s->set[i] = s->saved[i];
}

CP_PASSTHROUGH int select(int nfds, fd_set *readfds, fd_set *writefds,
                          fd_set *exceptfds, struct timeval *timeout) {
  typedef int (*fn_t)(int, fd_set *, fd_set *, fd_set *, struct timeval *);
  CP_REAL(fn_t, select);
  PARKED_IF(!timeout || timeout->tv_sec || timeout->tv_usec);
  fd_sets sets;
  fd_sets_save(&sets, readfds, writefds, exceptfds);
  for (;;) {
    cp_signals_seen before = cp_signals_seen_now();
    /* Linux leaves the time not slept in *timeout: a retry waits for the
     * rest. */
    int rc = fn_select(nfds, readfds, writefds, exceptfds, timeout);
    if (rc >= 0 || errno != EINTR || !cp_eintr_is_ours(before))
      return rc;
    fd_sets_restore(&sets);
  }
}

/* ppoll and pselect: the timeout as a timespec, or none. */
CP_PASSTHROUGH static int64_t
deadline_after_ts(const struct timespec *timeout) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return ts_ns(&now) + ts_ns(timeout);
}

CP_PASSTHROUGH static struct timespec ts_left(int64_t deadline_ns) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return ns_ts(deadline_ns - ts_ns(&now));
}

/* Before a call with a relative timespec timeout (NULL: none) is made
 * again: *t becomes the time left until deadline_ns, in *left. 0 when it
 * ran out meanwhile (the caller returns what its timeout returns). */
CP_PASSTHROUGH static int time_left(const struct timespec *timeout,
                                    int64_t deadline_ns, struct timespec *left,
                                    const struct timespec **t) {
  if (!timeout)
    return 1;
  *left = ts_left(deadline_ns);
  if (left->tv_sec == 0 && left->tv_nsec == 0)
    return 0;
  *t = left;
  return 1;
}

CP_PASSTHROUGH int ppoll(struct pollfd *fds, nfds_t nfds,
                         const struct timespec *timeout,
                         const sigset_t *sigmask) {
  typedef int (*fn_t)(struct pollfd *, nfds_t, const struct timespec *,
                      const sigset_t *);
  CP_REAL(fn_t, ppoll);
  PARKED_IF(ts_may_block(timeout));
  int64_t deadline = timeout ? deadline_after_ts(timeout) : 0;
  struct timespec left;
  const struct timespec *t = timeout;
  for (;;) {
    cp_signals_seen before = cp_signals_seen_now();
    int rc = fn_ppoll(fds, nfds, t, sigmask);
    if (rc >= 0 || errno != EINTR || !cp_eintr_is_ours(before))
      return rc;
    if (!time_left(timeout, deadline, &left, &t))
      return 0;
  }
}

/* The fortified poll and ppoll, which -D_FORTIFY_SOURCE builds call for an
 * array whose size the compiler knows and a count it does not (Debian
 * builds its packages so): the C library's check, then the hooks above. */
extern void __chk_fail(void) __attribute__((noreturn));

CP_PASSTHROUGH int __poll_chk(struct pollfd *fds, nfds_t nfds, int timeout,
                              size_t fdslen) {
  if (fdslen / sizeof *fds < nfds)
    __chk_fail();
  return poll(fds, nfds, timeout);
}

CP_PASSTHROUGH int __ppoll_chk(struct pollfd *fds, nfds_t nfds,
                               const struct timespec *timeout,
                               const sigset_t *sigmask, size_t fdslen) {
  if (fdslen / sizeof *fds < nfds)
    __chk_fail();
  return ppoll(fds, nfds, timeout, sigmask);
}

/* libaio's io_getevents and io_pgetevents, wrappers of system calls that
 * a signal interrupts whatever SA_RESTART says, and that return -EINTR
 * (libaio sets no errno): made again for the time left after an EINTR of
 * ours. No events were taken by an interrupted call (the system call
 * returns those it took). Resolved in the object after ours (libaio.so);
 * -ENOSYS without one, as there is nothing to wrap. */
struct io_context;
struct io_event;
typedef int (*io_getevents_fn)(struct io_context *, long, long,
                               struct io_event *, struct timespec *);
typedef int (*io_pgetevents_fn)(struct io_context *, long, long,
                                struct io_event *, struct timespec *,
                                const sigset_t *);

/* One of the two (the other NULL), with its arguments. */
CP_PASSTHROUGH static int aio_wait(io_getevents_fn get, io_pgetevents_fn pget,
                                   struct io_context *ctx, long min_nr, long nr,
                                   struct io_event *events,
                                   struct timespec *timeout,
                                   const sigset_t *sigmask) {
  int64_t deadline = timeout ? deadline_after_ts(timeout) : 0;
  struct timespec left;
  const struct timespec *t = timeout;
  for (;;) {
    cp_signals_seen before = cp_signals_seen_now();
    int rc = get ? get(ctx, min_nr, nr, events, (struct timespec *)t)
                 : pget(ctx, min_nr, nr, events, (struct timespec *)t, sigmask);
    if (rc != -EINTR || !cp_eintr_is_ours(before))
      return rc;
    if (!time_left(timeout, deadline, &left, &t))
      return 0; /* none came within the timeout */
  }
}

CP_PASSTHROUGH int io_getevents(struct io_context *ctx, long min_nr, long nr,
                                struct io_event *events,
                                struct timespec *timeout) {
  CP_REAL_OR(io_getevents_fn, io_getevents, -ENOSYS);
  PARKED_IF(ts_may_block(timeout) && min_nr > 0);
  return aio_wait(fn_io_getevents, NULL, ctx, min_nr, nr, events, timeout,
                  NULL);
}

CP_PASSTHROUGH int io_pgetevents(struct io_context *ctx, long min_nr, long nr,
                                 struct io_event *events,
                                 struct timespec *timeout,
                                 const sigset_t *sigmask) {
  CP_REAL_OR(io_pgetevents_fn, io_pgetevents, -ENOSYS);
  PARKED_IF(ts_may_block(timeout) && min_nr > 0);
  return aio_wait(NULL, fn_io_pgetevents, ctx, min_nr, nr, events, timeout,
                  sigmask);
}

CP_PASSTHROUGH int pselect(int nfds, fd_set *readfds, fd_set *writefds,
                           fd_set *exceptfds, const struct timespec *timeout,
                           const sigset_t *sigmask) {
  typedef int (*fn_t)(int, fd_set *, fd_set *, fd_set *,
                      const struct timespec *, const sigset_t *);
  CP_REAL(fn_t, pselect);
  PARKED_IF(ts_may_block(timeout));
  fd_sets sets;
  fd_sets_save(&sets, readfds, writefds, exceptfds);
  int64_t deadline = timeout ? deadline_after_ts(timeout) : 0;
  struct timespec left;
  const struct timespec *t = timeout;
  for (;;) {
    cp_signals_seen before = cp_signals_seen_now();
    int rc = fn_pselect(nfds, readfds, writefds, exceptfds, t, sigmask);
    if (rc >= 0 || errno != EINTR || !cp_eintr_is_ours(before))
      return rc;
    fd_sets_restore(&sets);
    if (!time_left(timeout, deadline, &left, &t)) {
      /* Nothing is ready. */
      if (readfds)
        FD_ZERO(readfds);
      if (writefds)
        FD_ZERO(writefds);
      if (exceptfds)
        FD_ZERO(exceptfds);
      return 0;
    }
  }
}

CP_PASSTHROUGH int epoll_pwait(int epfd, struct epoll_event *events,
                               int maxevents, int timeout,
                               const sigset_t *sigmask) {
  typedef int (*fn_t)(int, struct epoll_event *, int, int, const sigset_t *);
  CP_REAL(fn_t, epoll_pwait);
  PARKED_IF(timeout != 0);
  int64_t deadline = timeout > 0 ? deadline_after_ms(timeout) : 0;
  for (;;) {
    cp_signals_seen before = cp_signals_seen_now();
    int rc = fn_epoll_pwait(epfd, events, maxevents, timeout, sigmask);
    if (rc >= 0 || errno != EINTR || !cp_eintr_is_ours(before))
      return rc;
    if (timeout > 0 && (timeout = ms_left(deadline)) == 0)
      return 0;
  }
}

/* glibc 2.35+: epoll_pwait with a timespec (NULL: no timeout). Under a C
 * library without it the hook fails with ENOSYS, as the call would. */
CP_PASSTHROUGH int epoll_pwait2(int epfd, struct epoll_event *events,
                                int maxevents, const struct timespec *timeout,
                                const sigset_t *sigmask) {
  typedef int (*fn_t)(int, struct epoll_event *, int, const struct timespec *,
                      const sigset_t *);
  CP_REAL(fn_t, epoll_pwait2);
  PARKED_IF(ts_may_block(timeout));
  int64_t deadline = timeout ? deadline_after_ts(timeout) : 0;
  struct timespec left;
  const struct timespec *t = timeout;
  for (;;) {
    cp_signals_seen before = cp_signals_seen_now();
    int rc = fn_epoll_pwait2(epfd, events, maxevents, t, sigmask);
    if (rc >= 0 || errno != EINTR || !cp_eintr_is_ours(before))
      return rc;
    if (!time_left(timeout, deadline, &left, &t))
      return 0;
  }
}

/* The deadline is absolute: a retry waits until the same instant. */
CP_PASSTHROUGH int sem_timedwait(sem_t *sem, const struct timespec *abstime) {
  typedef int (*fn_t)(sem_t *, const struct timespec *);
  CP_REAL(fn_t, sem_timedwait);
  PARKED;
  for (;;) {
    cp_signals_seen before = cp_signals_seen_now();
    int rc = fn_sem_timedwait(sem, abstime);
    if (rc == 0 || errno != EINTR || !cp_eintr_is_ours(before))
      return rc;
  }
}

CP_PASSTHROUGH int sem_clockwait(sem_t *sem, clockid_t clock,
                                 const struct timespec *abstime) {
  typedef int (*fn_t)(sem_t *, clockid_t, const struct timespec *);
  CP_REAL(fn_t, sem_clockwait);
  PARKED;
  for (;;) {
    cp_signals_seen before = cp_signals_seen_now();
    int rc = fn_sem_clockwait(sem, clock, abstime);
    if (rc == 0 || errno != EINTR || !cp_eintr_is_ours(before))
      return rc;
  }
}

/* System V IPC waits, never restarted after a handler (signal(7)). An
 * interrupted call did nothing (a semop's operations are all made or none;
 * msgrcv took no message, msgsnd queued none), so it is made again; a
 * semtimedop for the time left, failing with EAGAIN as its timeout does
 * when that ran out meanwhile. Parked only when it may block (an operation
 * without IPC_NOWAIT). */
CP_PASSTHROUGH static int sem_ops_may_block(const struct sembuf *sops,
                                            size_t nsops) {
  for (size_t i = 0; i < nsops; i++)
    if (!(sops[i].sem_flg & IPC_NOWAIT))
      return 1;
  return 0;
}

CP_PASSTHROUGH int semop(int semid, struct sembuf *sops, size_t nsops) {
  typedef int (*fn_t)(int, struct sembuf *, size_t);
  CP_REAL(fn_t, semop);
  PARKED_IF(sem_ops_may_block(sops, nsops));
  for (;;) {
    cp_signals_seen before = cp_signals_seen_now();
    int rc = fn_semop(semid, sops, nsops);
    if (rc == 0 || errno != EINTR || !cp_eintr_is_ours(before))
      return rc;
  }
}

CP_PASSTHROUGH int semtimedop(int semid, struct sembuf *sops, size_t nsops,
                              const struct timespec *timeout) {
  typedef int (*fn_t)(int, struct sembuf *, size_t, const struct timespec *);
  CP_REAL(fn_t, semtimedop);
  PARKED_IF(sem_ops_may_block(sops, nsops) && ts_may_block(timeout));
  int64_t deadline = timeout ? deadline_after_ts(timeout) : 0;
  struct timespec left;
  const struct timespec *t = timeout;
  for (;;) {
    cp_signals_seen before = cp_signals_seen_now();
    int rc = fn_semtimedop(semid, sops, nsops, t);
    if (rc == 0 || errno != EINTR || !cp_eintr_is_ours(before))
      return rc;
    if (!time_left(timeout, deadline, &left, &t)) {
      errno = EAGAIN;
      return -1;
    }
  }
}

CP_PASSTHROUGH ssize_t msgrcv(int msqid, void *msgp, size_t msgsz, long msgtyp,
                              int msgflg) {
  typedef ssize_t (*fn_t)(int, void *, size_t, long, int);
  CP_REAL(fn_t, msgrcv);
  PARKED_IF(!(msgflg & IPC_NOWAIT));
  for (;;) {
    cp_signals_seen before = cp_signals_seen_now();
    ssize_t rc = fn_msgrcv(msqid, msgp, msgsz, msgtyp, msgflg);
    if (rc >= 0 || errno != EINTR || !cp_eintr_is_ours(before))
      return rc;
  }
}

CP_PASSTHROUGH int msgsnd(int msqid, const void *msgp, size_t msgsz,
                          int msgflg) {
  typedef int (*fn_t)(int, const void *, size_t, int);
  CP_REAL(fn_t, msgsnd);
  PARKED_IF(!(msgflg & IPC_NOWAIT));
  for (;;) {
    cp_signals_seen before = cp_signals_seen_now();
    int rc = fn_msgsnd(msqid, msgp, msgsz, msgflg);
    if (rc == 0 || errno != EINTR || !cp_eintr_is_ours(before))
      return rc;
  }
}

/* Waits the kernel restarts (SA_RESTART) or glibc retries: parked only. A
 * condition wait's futex wait that one of our signals interrupts is retried
 * inside glibc (at worst the caller sees a spurious wakeup, which POSIX
 * allows and callers loop on). */
CP_PASSTHROUGH int pthread_cond_wait(pthread_cond_t *cond,
                                     pthread_mutex_t *mutex) {
  typedef int (*fn_t)(pthread_cond_t *, pthread_mutex_t *);
  CP_REAL_OR(fn_t, pthread_cond_wait, ENOSYS);
  PARKED;
  return fn_pthread_cond_wait(cond, mutex);
}

CP_PASSTHROUGH int pthread_cond_timedwait(pthread_cond_t *cond,
                                          pthread_mutex_t *mutex,
                                          const struct timespec *abstime) {
  typedef int (*fn_t)(pthread_cond_t *, pthread_mutex_t *,
                      const struct timespec *);
  CP_REAL_OR(fn_t, pthread_cond_timedwait, ENOSYS);
  PARKED;
  return fn_pthread_cond_timedwait(cond, mutex, abstime);
}

CP_PASSTHROUGH int pthread_cond_clockwait(pthread_cond_t *cond,
                                          pthread_mutex_t *mutex,
                                          clockid_t clock,
                                          const struct timespec *abstime) {
  typedef int (*fn_t)(pthread_cond_t *, pthread_mutex_t *, clockid_t,
                      const struct timespec *);
  CP_REAL_OR(fn_t, pthread_cond_clockwait, ENOSYS);
  PARKED;
  return fn_pthread_cond_clockwait(cond, mutex, clock, abstime);
}

CP_PASSTHROUGH int sem_wait(sem_t *sem) {
  typedef int (*fn_t)(sem_t *);
  CP_REAL(fn_t, sem_wait);
  PARKED;
  return fn_sem_wait(sem);
}
