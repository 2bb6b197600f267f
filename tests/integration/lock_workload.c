/* Programs with known lock waits, run by test_lock_profile under
 * `contprof run --profiles lock` (and, built as lock_workload_linked, linked
 * with libcontprof and starting it itself). Each measures its own waits: a
 * lock call that finds the lock busy (its own try first) is timed.
 *   hotcold SECONDS  4 threads; wait_hot_path waits on a hot mutex held for
 *                    tens of us, wait_cold_path on a mutex held for well
 *                    under a microsecond; prints hot_ns= cold_ns=
 *   rwlock SECONDS   2 readers (reader_wait) and 2 writers (writer_wait) on
 *                    one rwlock; prints read_ns= write_ns=
 *   total SECONDS    4 threads on one mutex, half the calls
 *                    pthread_mutex_timedlock; prints total_ns= count= */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef LOCK_WORKLOAD_LINKED
#include "contprof/profiler.h"
#endif

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000ull),
                        (long)(ns % 1000000000ull)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

static void spin_ns(uint64_t ns) {
  uint64_t end = now_ns() + ns;
  while (now_ns() < end)
    ;
}

static uint64_t run_ns;
static pthread_mutex_t hot = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t cold = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static uint64_t tally[2], tally_count;
/* The variances of the lock profile's two totals for the waits counted
 * (total mode): a wait of w ns is kept with probability p = 1 - exp(-w /
 * mean) and weighed 1/p, so it adds (1 - p) / p to the count's variance
 * and w^2 (1 - p) / p to the wait's. */
static double var_count, var_ns;
static pthread_mutex_t variance_lock = PTHREAD_MUTEX_INITIALIZER;
static double sample_mean_ns = 1e6; /* CONTPROF_LOCK_SAMPLE_NS */

static void add_variance(uint64_t w) {
  double p = -expm1(-(double)w / sample_mean_ns);
  if (!(p > 0))
    return;
  double v = (1 - p) / p;
  pthread_mutex_lock(&variance_lock);
  var_count += v;
  var_ns += (double)w * (double)w * v;
  pthread_mutex_unlock(&variance_lock);
}

/* Atomics, not a lock: the only lock waits are the measured ones. */
static void add_tally(int which, uint64_t ns, uint64_t count) {
  __atomic_fetch_add(&tally[which], ns, __ATOMIC_RELAXED);
  __atomic_fetch_add(&tally_count, count, __ATOMIC_RELAXED);
}

/* Each returns the ns it waited (0 when the lock was free). */
__attribute__((noinline)) uint64_t wait_hot_path(unsigned *seed) {
  uint64_t waited = 0;
  if (pthread_mutex_trylock(&hot) != 0) {
    uint64_t t0 = now_ns();
    pthread_mutex_lock(&hot);
    waited = now_ns() - t0;
  }
  sleep_ns(20000 + (uint64_t)(rand_r(seed) % 40000));
  pthread_mutex_unlock(&hot);
  return waited;
}

__attribute__((noinline)) uint64_t wait_cold_path(void) {
  uint64_t waited = 0;
  if (pthread_mutex_trylock(&cold) != 0) {
    uint64_t t0 = now_ns();
    pthread_mutex_lock(&cold);
    waited = now_ns() - t0;
  }
  spin_ns(300);
  pthread_mutex_unlock(&cold);
  return waited;
}

static void *hotcold_thread(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg * 7919u + (unsigned)now_ns();
  uint64_t hot_ns = 0, cold_ns = 0, end = now_ns() + run_ns;
  while (now_ns() < end) {
    hot_ns += wait_hot_path(&seed);
    for (int i = 0; i < 4; i++)
      cold_ns += wait_cold_path();
    spin_ns((uint64_t)(rand_r(&seed) % 20000));
  }
  add_tally(0, hot_ns, 0);
  add_tally(1, cold_ns, 0);
  return NULL;
}

__attribute__((noinline)) uint64_t reader_wait(unsigned *seed) {
  uint64_t waited = 0;
  if (pthread_rwlock_tryrdlock(&rw) != 0) {
    uint64_t t0 = now_ns();
    pthread_rwlock_rdlock(&rw);
    waited = now_ns() - t0;
  }
  sleep_ns(20000 + (uint64_t)(rand_r(seed) % 40000));
  pthread_rwlock_unlock(&rw);
  return waited;
}

__attribute__((noinline)) uint64_t writer_wait(unsigned *seed) {
  uint64_t waited = 0;
  if (pthread_rwlock_trywrlock(&rw) != 0) {
    uint64_t t0 = now_ns();
    pthread_rwlock_wrlock(&rw);
    waited = now_ns() - t0;
  }
  sleep_ns(20000 + (uint64_t)(rand_r(seed) % 40000));
  pthread_rwlock_unlock(&rw);
  return waited;
}

static void *rwlock_thread(void *arg) {
  int writer = (int)(uintptr_t)arg & 1;
  unsigned seed = (unsigned)(uintptr_t)arg * 7919u + (unsigned)now_ns();
  uint64_t waited = 0, end = now_ns() + run_ns;
  while (now_ns() < end) {
    waited += writer ? writer_wait(&seed) : reader_wait(&seed);
    sleep_ns((uint64_t)(rand_r(&seed) % 60000));
  }
  add_tally(writer, waited, 0);
  return NULL;
}

__attribute__((noinline)) uint64_t total_wait(unsigned *seed, int timed) {
  uint64_t waited = 0;
  if (pthread_mutex_trylock(&hot) != 0) {
    uint64_t t0 = now_ns();
    if (timed) {
      struct timespec far;
      clock_gettime(CLOCK_REALTIME, &far);
      far.tv_sec += 10;
      pthread_mutex_timedlock(&hot, &far);
    } else {
      pthread_mutex_lock(&hot);
    }
    waited = now_ns() - t0 + 1;
  }
  sleep_ns(10000 + (uint64_t)(rand_r(seed) % 40000));
  pthread_mutex_unlock(&hot);
  return waited;
}

/* Contended waits of all threads so far: the run goes on past SECONDS (up
 * to four times as long) until there are enough of them for the tests'
 * statistics, however the scheduler spreads the threads on a busy machine. */
static _Atomic uint64_t contended_waits;
#define TOTAL_MIN_WAITS 8000

static void *total_thread(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg * 7919u + (unsigned)now_ns();
  uint64_t waited = 0, count = 0, start = now_ns();
  uint64_t end = start + run_ns, hard_end = start + 4 * run_ns;
  for (uint64_t now = start;
       now < end ||
       (now < hard_end && atomic_load(&contended_waits) < TOTAL_MIN_WAITS);
       now = now_ns()) {
    uint64_t w = total_wait(&seed, (int)(count & 1));
    waited += w;
    count += w > 0;
    if (w > 0) {
      atomic_fetch_add(&contended_waits, 1);
      add_variance(w);
    }
    spin_ns((uint64_t)(rand_r(&seed) % 20000));
  }
  add_tally(0, waited, count);
  return NULL;
}

static void run_threads(int n, void *(*fn)(void *)) {
  pthread_t t[8];
  for (int i = 0; i < n; i++)
    pthread_create(&t[i], NULL, fn, (void *)(uintptr_t)(i + 1));
  for (int i = 0; i < n; i++)
    pthread_join(t[i], NULL);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: lock_workload hotcold|rwlock|total SECONDS\n");
    return 2;
  }
  run_ns = (uint64_t)(atof(argv[2]) * 1e9);
#ifdef LOCK_WORKLOAD_LINKED
  int rc = contprof_start(NULL);
  if (rc != 0) {
    fprintf(stderr, "contprof_start: %s\n", contprof_strerror(rc));
    return 1;
  }
#endif
  if (strcmp(argv[1], "hotcold") == 0) {
    run_threads(4, hotcold_thread);
    printf("hot_ns=%llu cold_ns=%llu\n", (unsigned long long)tally[0],
           (unsigned long long)tally[1]);
  } else if (strcmp(argv[1], "rwlock") == 0) {
    run_threads(4, rwlock_thread);
    printf("read_ns=%llu write_ns=%llu\n", (unsigned long long)tally[0],
           (unsigned long long)tally[1]);
  } else if (strcmp(argv[1], "total") == 0) {
    const char *mean = getenv("CONTPROF_LOCK_SAMPLE_NS");
    if (mean && atof(mean) > 0)
      sample_mean_ns = atof(mean);
    run_threads(4, total_thread);
    printf("total_ns=%llu count=%llu var_count=%.6g var_ns=%.6g\n",
           (unsigned long long)tally[0], (unsigned long long)tally_count,
           var_count, var_ns);
  } else {
    fprintf(stderr, "unknown mode %s\n", argv[1]);
    return 2;
  }
#ifdef LOCK_WORKLOAD_LINKED
  contprof_stop();
#endif
  return 0;
}
