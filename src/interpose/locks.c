/* The pthread lock family: pthread_mutex_lock, the rwlock read and write
 * locks and their timed forms. libcontprof defines them, so they interpose
 * the C library's in LD_PRELOAD and explicit-link modes alike. Each hook
 * tries the lock first and returns at once when it was free, with no
 * timestamp: only a lock that was busy is timed, around the C library's own
 * call, and the lock sampler (samplers/lock.h) is told of the wait. Return
 * codes and errno are exactly those of the C library's call.
 *
 * The profiler's own lock calls never come here: own_locks.h sends them to
 * the cp_lock_real_* functions below. A hook reached while this thread looks
 * up a real function (inside dlsym) polls instead. */

/* This file defines the hooks themselves: undo own_locks.h. */
#include "interpose/own_locks_undo.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "common.h"
#include "interpose/real.h"
#include "passthrough.h"
#include "samplers/lock.h"
#include "thread_state.h"

/* The C library's functions, found with the one lookup (real.h). */
enum {
  REAL_MUTEX_LOCK,
  REAL_MUTEX_TIMEDLOCK,
  REAL_MUTEX_CLOCKLOCK,
  REAL_RWLOCK_RDLOCK,
  REAL_RWLOCK_WRLOCK,
  REAL_RWLOCK_TIMEDRDLOCK,
  REAL_RWLOCK_TIMEDWRLOCK,
  REAL_RWLOCK_CLOCKRDLOCK,
  REAL_RWLOCK_CLOCKWRLOCK,
  REAL_COUNT
};

static const char *const real_names[REAL_COUNT] = {
    "pthread_mutex_lock",         "pthread_mutex_timedlock",
    "pthread_mutex_clocklock",    "pthread_rwlock_rdlock",
    "pthread_rwlock_wrlock",      "pthread_rwlock_timedrdlock",
    "pthread_rwlock_timedwrlock", "pthread_rwlock_clockrdlock",
    "pthread_rwlock_clockwrlock",
};

static void *_Atomic real_fns[REAL_COUNT];

/* --- finding the C library's functions ------------------------------------ */

static void *hook_of(int which);

/* Not a hot path: runs once per function (eagerly at load, see below). dlsym
 * may take the loader's locks and allocate; a hook it reaches meanwhile
 * finds the thread `resolving` and polls instead (poll_lock). */
CP_PASSTHROUGH static void *resolve_real(int which) {
  if (cp_thread.resolving)
    return NULL;
  void *fn = cp_real_symbol(real_names[which], hook_of(which));
  if (fn)
    atomic_store_explicit(&real_fns[which], fn, memory_order_release);
  return fn;
}

CP_PASSTHROUGH static inline void *real_fn(int which) {
  void *fn = atomic_load_explicit(&real_fns[which], memory_order_acquire);
  return __builtin_expect(fn != NULL, 1) ? fn : resolve_real(which);
}

/* Before any lock is contended, where possible: dlsym is best kept out of the
 * hooks. */
__attribute__((constructor)) static void resolve_all_at_load(void) {
  for (int i = 0; i < REAL_COUNT; i++)
    real_fn(i);
}

CP_PASSTHROUGH void cp_interpose_locks_resolve(void) { resolve_all_at_load(); }

CP_PASSTHROUGH static int try_mutex(void *l) {
  return pthread_mutex_trylock(l);
}

/* The hooks' first step returns this for "take the lock without timing". */
#define TRY_UNTIMED (-1)

/* glibc's mutex kind bit for robust mutexes (PTHREAD_MUTEX_ROBUST_NORMAL_NP
 * in its pthreadP.h; the kind is a field of the public pthread_mutex_t). */
#define GLIBC_MUTEX_KIND_ROBUST 16

/* Hot path: the mutex hooks' first step. glibc's trylock leaves a robust
 * mutex that is not recoverable locked by the caller (pthread_mutex_lock
 * then waits forever instead of returning ENOTRECOVERABLE), so a robust
 * mutex is only looked at: a free one is locked untimed, a busy one (or one
 * whose owner died) takes the timed path. Everything else is tried. */
CP_PASSTHROUGH static inline int mutex_try_first(pthread_mutex_t *l) {
  if (__builtin_expect(l->__data.__kind & GLIBC_MUTEX_KIND_ROBUST, 0))
    return __atomic_load_n(&l->__data.__lock, __ATOMIC_RELAXED) == 0
               ? TRY_UNTIMED
               : EBUSY;
  return pthread_mutex_trylock(l);
}
CP_PASSTHROUGH static int try_rdlock(void *l) {
  return pthread_rwlock_tryrdlock(l);
}
CP_PASSTHROUGH static int try_wrlock(void *l) {
  return pthread_rwlock_trywrlock(l);
}

/* Only when the C library's function cannot be found (a hook reached from
 * inside dlsym): waits by polling the try function, with the deadline and
 * the error codes of the timed forms. */
CP_PASSTHROUGH static int poll_lock(int (*try_lock)(void *), void *l,
                                    clockid_t clock,
                                    const struct timespec *abstime) {
  int saved_errno = errno, rc;
  while ((rc = try_lock(l)) == EBUSY) {
    if (abstime) {
      struct timespec now;
      if (abstime->tv_nsec < 0 || abstime->tv_nsec >= 1000000000 ||
          clock_gettime(clock, &now) != 0) {
        rc = EINVAL;
        break;
      }
      if (now.tv_sec > abstime->tv_sec ||
          (now.tv_sec == abstime->tv_sec && now.tv_nsec >= abstime->tv_nsec)) {
        rc = ETIMEDOUT;
        break;
      }
    }
    struct timespec pause = {0, 50000};
    nanosleep(&pause, NULL);
  }
  errno = saved_errno;
  return rc;
}

/* --- the hooks ----------------------------------------------------------- */

/* Defines cp_lock_real_NAME (the C library's call, for the profiler itself
 * and for the hook) and the hook pthread_NAME. Hot path, bounded apart from
 * the wait itself: a try-lock; on a free lock nothing else. */
#define DEFINE_LOCK_HOOK(NAME, WHICH, TRY, POLL_TRY, CLOCK, ABSTIME, PARAMS,   \
                         ARGS)                                                 \
  CP_PASSTHROUGH int cp_lock_real_##NAME PARAMS {                              \
    int(*real) PARAMS = real_fn(WHICH);                                        \
    return real ? real ARGS : poll_lock(POLL_TRY, l, CLOCK, ABSTIME);          \
  }                                                                            \
  CP_PASSTHROUGH int pthread_##NAME PARAMS {                                   \
    int rc = TRY(l);                                                           \
    if (__builtin_expect(rc != EBUSY, 1))                                      \
      return rc != TRY_UNTIMED ? rc : cp_lock_real_##NAME ARGS;                \
    uint64_t start_ns = cp_lock_wait_begin(__builtin_return_address(0));       \
    rc = cp_lock_real_##NAME ARGS;                                             \
    if (start_ns)                                                              \
      cp_lock_on_wait(start_ns, rc, __builtin_return_address(0));              \
    return rc;                                                                 \
  }

DEFINE_LOCK_HOOK(mutex_lock, REAL_MUTEX_LOCK, mutex_try_first, try_mutex,
                 CLOCK_REALTIME, NULL, (pthread_mutex_t * l), (l))
DEFINE_LOCK_HOOK(mutex_timedlock, REAL_MUTEX_TIMEDLOCK, mutex_try_first,
                 try_mutex, CLOCK_REALTIME, abstime,
                 (pthread_mutex_t * l, const struct timespec *abstime),
                 (l, abstime))
DEFINE_LOCK_HOOK(mutex_clocklock, REAL_MUTEX_CLOCKLOCK, mutex_try_first,
                 try_mutex, clock, abstime,
                 (pthread_mutex_t * l, clockid_t clock,
                  const struct timespec *abstime),
                 (l, clock, abstime))
DEFINE_LOCK_HOOK(rwlock_rdlock, REAL_RWLOCK_RDLOCK, pthread_rwlock_tryrdlock,
                 try_rdlock, CLOCK_REALTIME, NULL, (pthread_rwlock_t * l), (l))
DEFINE_LOCK_HOOK(rwlock_wrlock, REAL_RWLOCK_WRLOCK, pthread_rwlock_trywrlock,
                 try_wrlock, CLOCK_REALTIME, NULL, (pthread_rwlock_t * l), (l))
DEFINE_LOCK_HOOK(rwlock_timedrdlock, REAL_RWLOCK_TIMEDRDLOCK,
                 pthread_rwlock_tryrdlock, try_rdlock, CLOCK_REALTIME, abstime,
                 (pthread_rwlock_t * l, const struct timespec *abstime),
                 (l, abstime))
DEFINE_LOCK_HOOK(rwlock_timedwrlock, REAL_RWLOCK_TIMEDWRLOCK,
                 pthread_rwlock_trywrlock, try_wrlock, CLOCK_REALTIME, abstime,
                 (pthread_rwlock_t * l, const struct timespec *abstime),
                 (l, abstime))
DEFINE_LOCK_HOOK(rwlock_clockrdlock, REAL_RWLOCK_CLOCKRDLOCK,
                 pthread_rwlock_tryrdlock, try_rdlock, clock, abstime,
                 (pthread_rwlock_t * l, clockid_t clock,
                  const struct timespec *abstime),
                 (l, clock, abstime))
DEFINE_LOCK_HOOK(rwlock_clockwrlock, REAL_RWLOCK_CLOCKWRLOCK,
                 pthread_rwlock_trywrlock, try_wrlock, clock, abstime,
                 (pthread_rwlock_t * l, clockid_t clock,
                  const struct timespec *abstime),
                 (l, clock, abstime))

/* The hook standing in front of real function `which`: the lookup must not
 * hand back our own function. */
CP_PASSTHROUGH static void *hook_of(int which) {
  void *const hooks[REAL_COUNT] = {
      (void *)pthread_mutex_lock,         (void *)pthread_mutex_timedlock,
      (void *)pthread_mutex_clocklock,    (void *)pthread_rwlock_rdlock,
      (void *)pthread_rwlock_wrlock,      (void *)pthread_rwlock_timedrdlock,
      (void *)pthread_rwlock_timedwrlock, (void *)pthread_rwlock_clockrdlock,
      (void *)pthread_rwlock_clockwrlock,
  };
  return hooks[which];
}
