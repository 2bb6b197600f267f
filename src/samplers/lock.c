/* Lock contention sampler. libcontprof defines pthread_mutex_lock, the
 * rwlock read and write locks and their timed forms, so they interpose the C
 * library's in LD_PRELOAD and explicit-link modes alike. Each hook tries the
 * lock first and returns at once when it was free, with no timestamp: only a
 * lock that was busy is timed, around the C library's own call. Waits are
 * sampled as a Poisson process over nanoseconds of waiting, mean
 * CONTPROF_LOCK_SAMPLE_NS = M: a wait of w ns is kept with probability
 * p = 1 - exp(-w/M) and weighs 1/p acquisitions and w/p ns, so the totals of
 * lock-acquire and lock-acquire-wait are unbiased. Return codes and errno
 * are exactly those of the C library's call.
 *
 * The profiler's own lock calls never come here: lock_redirect.h sends them
 * to the cp_lock_real_* functions below. Its threads are marked (libraries
 * they call still reach the hooks), and a hook reached while recording (from
 * the unwinder) or while looking up the C library's functions goes straight
 * through. */
#include "lock.h"

/* This file defines the hooks themselves: undo lock_redirect.h. */
#undef pthread_mutex_lock
#undef pthread_mutex_timedlock
#undef pthread_mutex_clocklock
#undef pthread_rwlock_rdlock
#undef pthread_rwlock_wrlock
#undef pthread_rwlock_timedrdlock
#undef pthread_rwlock_timedwrlock
#undef pthread_rwlock_clockrdlock
#undef pthread_rwlock_clockwrlock

#define UNW_LOCAL_ONLY
#include <dlfcn.h>
#include <errno.h>
#include <libunwind.h>
#include <link.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "aggregator/aggregator.h"
#include "common.h"
#include "random.h"
#include "record.h"
#include "sampler.h"
#include "stats.h"
#include "unwind.h"

/* The C library's functions, found with dlsym(RTLD_NEXT). */
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

static struct {
  _Atomic int active;
  /* Bumped at each start: threads then redraw their distance to the next
   * sample with the new mean. */
  _Atomic unsigned epoch;
  /* M in force: CONTPROF_LOCK_SAMPLE_NS times the governor's slowdown. */
  _Atomic double mean_ns;
  double base_mean_ns; /* CONTPROF_LOCK_SAMPLE_NS */
  size_t max_frames;
  /* The unwinder's code. libunwind takes a global lock of its own through
   * pthread_mutex_lock (its per-thread cache is often not built in): waits
   * for it are never recorded, because recording unwinds, which takes that
   * lock again. */
  uintptr_t unwinder_lo, unwinder_hi;
} lock;

/* Initial-exec TLS: one load each, no allocation, usable from any hook. */
static CP_TLS int internal_thread; /* the profiler's own thread */
static CP_TLS int in_hook;         /* recording a sample: let locks through */
static CP_TLS int resolving;       /* inside dlsym */
static CP_TLS struct {
  double countdown_ns; /* waiting left before the next sample point */
  double mean_ns;      /* the mean the countdown was drawn with */
  unsigned epoch;
} sampling;

void cp_lock_exclude_thread(void) { internal_thread = 1; }

/* --- finding the C library's functions ------------------------------------ */

static int hook_index(void *fn);

/* Not a hot path: runs once per function (eagerly at load, see below). dlsym
 * may take the loader's locks and allocate; a hook it reaches meanwhile
 * finds `resolving` set and polls instead (poll_lock). */
static void *resolve_real(int which) {
  if (resolving)
    return NULL;
  resolving = 1;
  int saved_errno = errno;
  void *fn = dlsym(RTLD_NEXT, real_names[which]);
  if (!fn || hook_index(fn) >= 0) {
    /* Linked statically into the executable: ask libc directly. */
    void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    fn = libc ? dlsym(libc, real_names[which]) : NULL;
    if (fn && hook_index(fn) >= 0)
      fn = NULL;
  }
  errno = saved_errno;
  resolving = 0;
  if (fn)
    atomic_store_explicit(&real_fns[which], fn, memory_order_release);
  return fn;
}

static inline void *real_fn(int which) {
  void *fn = atomic_load_explicit(&real_fns[which], memory_order_acquire);
  return __builtin_expect(fn != NULL, 1) ? fn : resolve_real(which);
}

/* Before any lock is contended, where possible: dlsym is best kept out of the
 * hooks. */
__attribute__((constructor)) static void resolve_all_at_load(void) {
  for (int i = 0; i < REAL_COUNT; i++)
    real_fn(i);
}

static int try_mutex(void *l) { return pthread_mutex_trylock(l); }

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
static inline int mutex_try_first(pthread_mutex_t *l) {
  if (__builtin_expect(l->__data.__kind & GLIBC_MUTEX_KIND_ROBUST, 0))
    return __atomic_load_n(&l->__data.__lock, __ATOMIC_RELAXED) == 0
               ? TRY_UNTIMED
               : EBUSY;
  return pthread_mutex_trylock(l);
}
static int try_rdlock(void *l) { return pthread_rwlock_tryrdlock(l); }
static int try_wrlock(void *l) { return pthread_rwlock_trywrlock(l); }

/* Only when the C library's function cannot be found (a hook reached from
 * inside dlsym): waits by polling the try function, with the deadline and
 * the error codes of the timed forms. */
static int poll_lock(int (*try_lock)(void *), void *l, clockid_t clock,
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

/* --- sampling ------------------------------------------------------------ */

/* Hot path: decides whether a wait of wait_ns holds a point of the Poisson
 * process. The distance to the next point is exponential; after a point, the
 * process restarts at the end of the wait (memoryless), so each wait is kept
 * with probability 1 - exp(-wait/M) whatever came before. */
static int wait_is_sampled(uint64_t wait_ns, double *mean_ns) {
  unsigned epoch = atomic_load_explicit(&lock.epoch, memory_order_relaxed);
  if (sampling.epoch != epoch) {
    sampling.mean_ns =
        atomic_load_explicit(&lock.mean_ns, memory_order_relaxed);
    sampling.countdown_ns = cp_random_exp(sampling.mean_ns);
    sampling.epoch = epoch;
  }
  if ((double)wait_ns < sampling.countdown_ns) {
    sampling.countdown_ns -= (double)wait_ns;
    return 0;
  }
  /* The point fell in this wait with the countdown's mean: the sample is
   * weighted with it, whatever the governor set meanwhile. */
  *mean_ns = sampling.mean_ns;
  sampling.mean_ns = atomic_load_explicit(&lock.mean_ns, memory_order_relaxed);
  sampling.countdown_ns = cp_random_exp(sampling.mean_ns);
  return 1;
}

/* Bounded, no allocation (once the thread's unwinder is warm), no blocking
 * locks: writes one sample into the lock-free ring. A sampling signal that
 * arrives during the unwind drops its own sample (see cp_unwind_here). */
static void record_wait(uint64_t wait_ns, uint64_t caller_ra, double mean_ns) {
  cp_ring *ring = cp_agg_ring();
  if (!ring)
    return;
  double p = -expm1(-(double)wait_ns / mean_ns);
  if (p <= 0)
    return;
  int64_t count = cp_random_round(1.0 / p);
  int64_t quantity = cp_random_round((double)wait_ns / p);
  in_hook = 1;
  cp_record rec;
  cp_raw_sample *s =
      cp_record_begin(&rec, ring, CONTPROF_KIND_LOCK, count, quantity);
  if (s) {
    int truncated = 0;
    size_t n =
        cp_unwind_here(s->frames, lock.max_frames, caller_ra, &truncated);
    cp_record_commit(&rec, n, truncated);
  }
  in_hook = 0;
}

/* Hot path: on a busy lock, before waiting. 0 when this wait is not timed
 * (profiling off, the profiler's thread, a lock taken while recording, or
 * one the unwinder takes). */
static inline uint64_t wait_begin(void *caller_ra) {
  if (!atomic_load_explicit(&lock.active, memory_order_relaxed) ||
      internal_thread || in_hook)
    return 0;
  uintptr_t ra = (uintptr_t)caller_ra;
  if (ra >= lock.unwinder_lo && ra < lock.unwinder_hi)
    return 0;
  return cp_monotonic_ns();
}

/* Hot path: after the C library's call returned rc. Waits that ended with
 * the lock (or with the timeout) count; immediate errors (EDEADLK, EINVAL,
 * EAGAIN, ENOTRECOVERABLE) are not waits. */
static __attribute__((noinline)) void wait_end(uint64_t start_ns, int rc,
                                               void *caller_ra) {
  if (rc != 0 && rc != EOWNERDEAD && rc != ETIMEDOUT)
    return;
  int saved_errno = errno;
  uint64_t wait_ns = cp_monotonic_ns() - start_ns;
  double mean_ns;
  if (wait_ns > 0 && wait_is_sampled(wait_ns, &mean_ns)) {
    uint64_t began = cp_stats_hook_begin(CONTPROF_KIND_LOCK);
    record_wait(wait_ns, (uint64_t)(uintptr_t)caller_ra, mean_ns);
    cp_stats_hook_end(CONTPROF_KIND_LOCK, began);
  }
  errno = saved_errno;
}

/* --- the hooks ----------------------------------------------------------- */

/* Defines cp_lock_real_NAME (the C library's call, for the profiler itself
 * and for the hook) and the hook pthread_NAME. Hot path, bounded apart from
 * the wait itself: a try-lock; on a free lock nothing else. */
#define DEFINE_LOCK_HOOK(NAME, WHICH, TRY, POLL_TRY, CLOCK, ABSTIME, PARAMS,   \
                         ARGS)                                                 \
  int cp_lock_real_##NAME PARAMS {                                             \
    int(*real) PARAMS = real_fn(WHICH);                                        \
    return real ? real ARGS : poll_lock(POLL_TRY, l, CLOCK, ABSTIME);          \
  }                                                                            \
  int pthread_##NAME PARAMS {                                                  \
    int rc = TRY(l);                                                           \
    if (__builtin_expect(rc != EBUSY, 1))                                      \
      return rc != TRY_UNTIMED ? rc : cp_lock_real_##NAME ARGS;                \
    uint64_t start_ns = wait_begin(__builtin_return_address(0));               \
    rc = cp_lock_real_##NAME ARGS;                                             \
    if (start_ns)                                                              \
      wait_end(start_ns, rc, __builtin_return_address(0));                     \
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

/* Which hook fn is, or -1: dlsym must not hand back our own functions. */
static int hook_index(void *fn) {
  void *const hooks[REAL_COUNT] = {
      (void *)pthread_mutex_lock,         (void *)pthread_mutex_timedlock,
      (void *)pthread_mutex_clocklock,    (void *)pthread_rwlock_rdlock,
      (void *)pthread_rwlock_wrlock,      (void *)pthread_rwlock_timedrdlock,
      (void *)pthread_rwlock_timedwrlock, (void *)pthread_rwlock_clockrdlock,
      (void *)pthread_rwlock_clockwrlock,
  };
  for (int i = 0; i < REAL_COUNT; i++)
    if (fn == hooks[i])
      return i;
  return -1;
}

/* --- the sampler interface ----------------------------------------------- */

/* dl_iterate_phdr callback: the executable segment holding data (a pc). */
static int find_unwinder(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  uintptr_t pc = (uintptr_t)data;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
      continue;
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
    if (pc < lo || pc >= hi)
      continue;
    /* Linked into the executable, libunwind cannot be told apart from the
     * application: no range then. */
    if (info->dlpi_name && info->dlpi_name[0]) {
      lock.unwinder_lo = lo;
      lock.unwinder_hi = hi;
    }
    return 1;
  }
  return 0;
}

static int lock_start(const cp_config *cfg) {
  lock.base_mean_ns = (double)cfg->lock_sample_ns;
  atomic_store(&lock.mean_ns, lock.base_mean_ns);
  lock.max_frames = (size_t)cfg->max_frames;
  lock.unwinder_lo = lock.unwinder_hi = 0;
  dl_iterate_phdr(find_unwinder, (void *)(uintptr_t)unw_backtrace);
  cp_unwind_init();
  resolve_all_at_load();
  atomic_fetch_add(&lock.epoch, 1);
  atomic_store(&lock.active, 1);
  return 0;
}

static void lock_stop(void) { atomic_store(&lock.active, 0); }

static void lock_after_fork_child(void) { atomic_store(&lock.active, 0); }

/* On the profiler's thread: a sample point every factor x the configured
 * mean wait. A countdown in progress keeps its mean. */
static void lock_slow_down(unsigned factor) {
  atomic_store(&lock.mean_ns, lock.base_mean_ns * factor);
}

const cp_sampler cp_lock_sampler = {
    .name = "lock",
    .profile = CP_PROFILE_LOCK,
    .start = lock_start,
    .stop = lock_stop,
    .after_fork_child = lock_after_fork_child,
    .slow_down = lock_slow_down,
};
