/* Lock contention sampler. The lock hooks (interpose/locks.c) time a wait
 * on a lock that was busy and report it here (lock.h). Waits are sampled as
 * a Poisson process over nanoseconds of waiting, mean
 * CONTPROF_LOCK_SAMPLE_NS = M: a wait of w ns is kept with probability
 * p = 1 - exp(-w/M) and weighs 1/p acquisitions and w/p ns, so the totals of
 * lock-acquire and lock-acquire-wait are unbiased.
 *
 * Waits are not recorded on the profiler's own threads (libraries they call
 * still reach the hooks), inside the profiler's work on an application
 * thread, nor for a lock taken while recording (from the unwinder): the
 * re-entry guard (thread_state.h). */
#include "lock.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "aggregator/aggregator.h"
#include "common.h"
#include "interpose/real.h"
#include "random.h"
#include "record.h"
#include "sampler.h"
#include "stats.h"
#include "thread_state.h"
#include "unwind.h"

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

static CP_TLS struct {
  double countdown_ns; /* waiting left before the next sample point */
  double mean_ns;      /* the mean the countdown was drawn with */
  unsigned epoch;
} sampling;

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
  cp_record rec;
  cp_raw_sample *s =
      cp_record_begin(&rec, ring, CONTPROF_KIND_LOCK, count, quantity);
  if (s) {
    int truncated = 0;
    size_t n =
        cp_unwind_here(s->frames, lock.max_frames, caller_ra, &truncated);
    cp_record_commit(&rec, n, truncated);
  }
}

/* Hot path: on a busy lock, before waiting. 0 when this wait is not timed
 * (profiling off, the profiler's thread or work, a lock taken while
 * recording, or one the unwinder takes). */
uint64_t cp_lock_wait_begin(void *caller_ra) {
  if (!atomic_load_explicit(&lock.active, memory_order_relaxed) ||
      !cp_guard_open())
    return 0;
  uintptr_t ra = (uintptr_t)caller_ra;
  if (ra >= lock.unwinder_lo && ra < lock.unwinder_hi)
    return 0;
  return cp_monotonic_ns();
}

/* Hot path: after the C library's call returned rc. Waits that ended with
 * the lock (or with the timeout) count; immediate errors (EDEADLK, EINVAL,
 * EAGAIN, ENOTRECOVERABLE) are not waits. */
__attribute__((noinline)) void cp_lock_on_wait(uint64_t start_ns, int rc,
                                               void *caller_ra) {
  if (rc != 0 && rc != EOWNERDEAD && rc != ETIMEDOUT)
    return;
  int saved_errno = errno;
  uint64_t wait_ns = cp_monotonic_ns() - start_ns;
  double mean_ns;
  if (wait_ns > 0 && wait_is_sampled(wait_ns, &mean_ns) && cp_guard_enter()) {
    uint64_t began = cp_stats_hook_begin(CONTPROF_KIND_LOCK);
    record_wait(wait_ns, (uint64_t)(uintptr_t)caller_ra, mean_ns);
    cp_stats_hook_end(CONTPROF_KIND_LOCK, began);
    cp_guard_leave();
  }
  errno = saved_errno;
}

/* --- the sampler interface ----------------------------------------------- */

static int lock_start(const cp_config *cfg) {
  lock.base_mean_ns = (double)cfg->lock_sample_ns;
  atomic_store(&lock.mean_ns, lock.base_mean_ns);
  lock.max_frames = (size_t)cfg->max_frames;
  cp_unwind_init();
  /* Linked into the executable, libunwind cannot be told apart from the
   * application: no range then. */
  if (!cp_unwind_libunwind_code(&lock.unwinder_lo, &lock.unwinder_hi))
    lock.unwinder_lo = lock.unwinder_hi = 0;
  cp_interpose_locks_resolve();
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
