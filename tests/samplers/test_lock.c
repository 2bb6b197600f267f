/* The lock sampler's hooks: return codes and errno of every lock type are
 * those of the C library (the same checks run through the hooks and through
 * libc's own functions, profiler off and on), contended waits are recorded
 * with totals that match the program's own measurement, and the profiler's
 * threads are never recorded. The hooks are linked into this program, so its
 * lock calls reach them as an application's would. */
#define UNW_LOCAL_ONLY
#include <dlfcn.h>
#include <errno.h>
#include <libunwind.h>
#include <math.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "aggregator/aggregator.h"
#include "common.h"
#include "contprof/profiler.h"
#include "samplers/lock.h"
#include "test.h"
#include "thread_state.h"

typedef struct lock_api {
  const char *name;
  int (*mutex_lock)(pthread_mutex_t *);
  int (*mutex_timedlock)(pthread_mutex_t *, const struct timespec *);
  int (*mutex_clocklock)(pthread_mutex_t *, clockid_t, const struct timespec *);
  int (*rdlock)(pthread_rwlock_t *);
  int (*wrlock)(pthread_rwlock_t *);
  int (*timedrdlock)(pthread_rwlock_t *, const struct timespec *);
  int (*timedwrlock)(pthread_rwlock_t *, const struct timespec *);
  int (*clockrdlock)(pthread_rwlock_t *, clockid_t, const struct timespec *);
  int (*clockwrlock)(pthread_rwlock_t *, clockid_t, const struct timespec *);
} lock_api;

static const lock_api hooked = {
    "hooks",
    pthread_mutex_lock,
    pthread_mutex_timedlock,
    pthread_mutex_clocklock,
    pthread_rwlock_rdlock,
    pthread_rwlock_wrlock,
    pthread_rwlock_timedrdlock,
    pthread_rwlock_timedwrlock,
    pthread_rwlock_clockrdlock,
    pthread_rwlock_clockwrlock,
};

static lock_api libc_api(void) {
  lock_api a = {"libc", 0, 0, 0, 0, 0, 0, 0, 0, 0};
  a.mutex_lock =
      (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_lock");
  a.mutex_timedlock =
      (int (*)(pthread_mutex_t *, const struct timespec *))dlsym(
          RTLD_NEXT, "pthread_mutex_timedlock");
  a.mutex_clocklock =
      (int (*)(pthread_mutex_t *, clockid_t, const struct timespec *))dlsym(
          RTLD_NEXT, "pthread_mutex_clocklock");
  a.rdlock =
      (int (*)(pthread_rwlock_t *))dlsym(RTLD_NEXT, "pthread_rwlock_rdlock");
  a.wrlock =
      (int (*)(pthread_rwlock_t *))dlsym(RTLD_NEXT, "pthread_rwlock_wrlock");
  a.timedrdlock = (int (*)(pthread_rwlock_t *, const struct timespec *))dlsym(
      RTLD_NEXT, "pthread_rwlock_timedrdlock");
  a.timedwrlock = (int (*)(pthread_rwlock_t *, const struct timespec *))dlsym(
      RTLD_NEXT, "pthread_rwlock_timedwrlock");
  a.clockrdlock =
      (int (*)(pthread_rwlock_t *, clockid_t, const struct timespec *))dlsym(
          RTLD_NEXT, "pthread_rwlock_clockrdlock");
  a.clockwrlock =
      (int (*)(pthread_rwlock_t *, clockid_t, const struct timespec *))dlsym(
          RTLD_NEXT, "pthread_rwlock_clockwrlock");
  return a;
}

/* ---- results: every call's return code and whether errno survived -------- */

#define MAX_RESULTS 128
typedef struct results {
  int rc[MAX_RESULTS];
  int n;
} results;

#define ERRNO_MARK 4242

/* Checks a call's result against POSIX's and that errno is untouched. */
#define EXPECT(res, api, call, want)                                           \
  do {                                                                         \
    errno = ERRNO_MARK;                                                        \
    int rc_ = (call);                                                          \
    int errno_ = errno;                                                        \
    if (rc_ != (want) || errno_ != ERRNO_MARK) {                               \
      fprintf(stderr, "%s:%d [%s] %s: rc %d (want %d), errno %d\n", __FILE__,  \
              __LINE__, (api)->name, #call, rc_, (int)(want), errno_);         \
      test_failures++;                                                         \
    }                                                                          \
    if ((res)->n < MAX_RESULTS)                                                \
      (res)->rc[(res)->n++] = rc_;                                             \
  } while (0)

static struct timespec deadline_in(clockid_t clock, long ns) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  ts.tv_nsec += ns;
  ts.tv_sec += ts.tv_nsec / 1000000000;
  ts.tv_nsec %= 1000000000;
  return ts;
}

static uint64_t now_ns(void) { return cp_monotonic_ns(); }

/* ---- a thread that holds a lock ---------------------------------------------
 */

typedef enum { HOLD_MUTEX, HOLD_READ, HOLD_WRITE } hold_kind;

typedef struct holder {
  pthread_t thread;
  hold_kind kind;
  void *lock;
  uint64_t hold_ns;    /* how long to hold it */
  int die_holding;     /* exit without unlocking (robust mutexes) */
  sem_t held, release; /* release: posted to end an indefinite hold */
} holder;

static void *holder_main(void *p) {
  holder *h = p;
  /* libc's try functions: the holder must not depend on what is tested. */
  if (h->kind == HOLD_MUTEX)
    while (pthread_mutex_trylock(h->lock) == EBUSY)
      usleep(100);
  else if (h->kind == HOLD_READ)
    while (pthread_rwlock_tryrdlock(h->lock) == EBUSY)
      usleep(100);
  else
    while (pthread_rwlock_trywrlock(h->lock) == EBUSY)
      usleep(100);
  sem_post(&h->held);
  if (h->hold_ns)
    cp_sleep_ns(h->hold_ns);
  else
    sem_wait(&h->release);
  if (h->die_holding)
    return NULL;
  if (h->kind == HOLD_MUTEX)
    pthread_mutex_unlock(h->lock);
  else
    pthread_rwlock_unlock(h->lock);
  return NULL;
}

/* Starts a holder and waits until it holds the lock. hold_ns 0: until
 * holder_end. */
static void holder_start(holder *h, hold_kind kind, void *lock,
                         uint64_t hold_ns, int die_holding) {
  h->kind = kind;
  h->lock = lock;
  h->hold_ns = hold_ns;
  h->die_holding = die_holding;
  sem_init(&h->held, 0, 0);
  sem_init(&h->release, 0, 0);
  pthread_create(&h->thread, NULL, holder_main, h);
  while (sem_wait(&h->held) != 0)
    ;
}

static void holder_end(holder *h) {
  if (!h->hold_ns)
    sem_post(&h->release);
  pthread_join(h->thread, NULL);
  sem_destroy(&h->held);
  sem_destroy(&h->release);
}

/* ---- the conformance suite -------------------------------------------------
 */

static void init_mutex(pthread_mutex_t *m, int type, int robust) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_settype(&a, type);
  if (robust)
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(m, &a);
  pthread_mutexattr_destroy(&a);
}

static void suite_errorcheck(const lock_api *api, results *r) {
  pthread_mutex_t m;
  init_mutex(&m, PTHREAD_MUTEX_ERRORCHECK, 0);
  struct timespec far = deadline_in(CLOCK_REALTIME, 900000000);
  struct timespec far_mono = deadline_in(CLOCK_MONOTONIC, 900000000);
  EXPECT(r, api, api->mutex_lock(&m), 0);
  EXPECT(r, api, api->mutex_lock(&m), EDEADLK);
  EXPECT(r, api, api->mutex_timedlock(&m, &far), EDEADLK);
  EXPECT(r, api, api->mutex_clocklock(&m, CLOCK_MONOTONIC, &far_mono), EDEADLK);
  EXPECT(r, api, pthread_mutex_trylock(&m), EBUSY);
  EXPECT(r, api, pthread_mutex_unlock(&m), 0);
  EXPECT(r, api, pthread_mutex_unlock(&m), EPERM);
  pthread_mutex_destroy(&m);
}

static void suite_recursive(const lock_api *api, results *r) {
  pthread_mutex_t m;
  init_mutex(&m, PTHREAD_MUTEX_RECURSIVE, 0);
  struct timespec far = deadline_in(CLOCK_REALTIME, 900000000);
  EXPECT(r, api, api->mutex_lock(&m), 0);
  EXPECT(r, api, api->mutex_lock(&m), 0);
  EXPECT(r, api, api->mutex_timedlock(&m, &far), 0);
  EXPECT(r, api, pthread_mutex_trylock(&m), 0);
  for (int i = 0; i < 4; i++)
    EXPECT(r, api, pthread_mutex_unlock(&m), 0);
  EXPECT(r, api, pthread_mutex_unlock(&m), EPERM);
  /* Another thread holds it: a waiter times out, then gets it. */
  holder h;
  holder_start(&h, HOLD_MUTEX, &m, 0, 0);
  struct timespec soon = deadline_in(CLOCK_REALTIME, 20000000);
  EXPECT(r, api, api->mutex_timedlock(&m, &soon), ETIMEDOUT);
  holder_end(&h);
  EXPECT(r, api, api->mutex_lock(&m), 0);
  EXPECT(r, api, pthread_mutex_unlock(&m), 0);
  pthread_mutex_destroy(&m);
}

static void suite_normal(const lock_api *api, results *r) {
  pthread_mutex_t m;
  init_mutex(&m, PTHREAD_MUTEX_NORMAL, 0);
  holder h;
  holder_start(&h, HOLD_MUTEX, &m, 0, 0);
  uint64_t t0 = now_ns();
  struct timespec soon = deadline_in(CLOCK_REALTIME, 30000000);
  EXPECT(r, api, api->mutex_timedlock(&m, &soon), ETIMEDOUT);
  CHECK(now_ns() - t0 >= 25000000);
  struct timespec soon_mono = deadline_in(CLOCK_MONOTONIC, 10000000);
  EXPECT(r, api, api->mutex_clocklock(&m, CLOCK_MONOTONIC, &soon_mono),
         ETIMEDOUT);
  struct timespec past = {1, 0};
  EXPECT(r, api, api->mutex_timedlock(&m, &past), ETIMEDOUT);
  struct timespec bad = {time(NULL) + 10, 2000000000};
  EXPECT(r, api, api->mutex_timedlock(&m, &bad), EINVAL);
  EXPECT(r, api, api->mutex_clocklock(&m, CLOCK_MONOTONIC, &bad), EINVAL);
  EXPECT(r, api, pthread_mutex_trylock(&m), EBUSY);
  holder_end(&h);
  /* A free mutex is taken before the deadline is looked at (POSIX). */
  EXPECT(r, api, api->mutex_timedlock(&m, &bad), 0);
  EXPECT(r, api, pthread_mutex_unlock(&m), 0);
  /* A contended wait that ends with the lock. */
  holder_start(&h, HOLD_MUTEX, &m, 20000000, 0);
  EXPECT(r, api, api->mutex_lock(&m), 0);
  EXPECT(r, api, pthread_mutex_unlock(&m), 0);
  holder_end(&h);
  holder_start(&h, HOLD_MUTEX, &m, 10000000, 0);
  struct timespec far = deadline_in(CLOCK_REALTIME, 900000000);
  EXPECT(r, api, api->mutex_timedlock(&m, &far), 0);
  EXPECT(r, api, pthread_mutex_unlock(&m), 0);
  holder_end(&h);
  pthread_mutex_destroy(&m);
}

static void suite_robust(const lock_api *api, results *r) {
  pthread_mutex_t m;
  init_mutex(&m, PTHREAD_MUTEX_NORMAL, 1);
  holder h;
  /* The owner died before the call. */
  holder_start(&h, HOLD_MUTEX, &m, 1, 1);
  holder_end(&h);
  EXPECT(r, api, api->mutex_lock(&m), EOWNERDEAD);
  EXPECT(r, api, pthread_mutex_consistent(&m), 0);
  EXPECT(r, api, pthread_mutex_unlock(&m), 0);
  EXPECT(r, api, api->mutex_lock(&m), 0);
  EXPECT(r, api, pthread_mutex_unlock(&m), 0);
  /* The owner dies while the caller waits. */
  holder_start(&h, HOLD_MUTEX, &m, 20000000, 1);
  EXPECT(r, api, api->mutex_lock(&m), EOWNERDEAD);
  holder_end(&h);
  EXPECT(r, api, pthread_mutex_consistent(&m), 0);
  EXPECT(r, api, pthread_mutex_unlock(&m), 0);
  /* Same with a timed wait; left inconsistent, it becomes unrecoverable. */
  holder_start(&h, HOLD_MUTEX, &m, 20000000, 1);
  struct timespec far = deadline_in(CLOCK_REALTIME, 900000000);
  EXPECT(r, api, api->mutex_timedlock(&m, &far), EOWNERDEAD);
  holder_end(&h);
  EXPECT(r, api, pthread_mutex_unlock(&m), 0);
  EXPECT(r, api, api->mutex_lock(&m), ENOTRECOVERABLE);
  far = deadline_in(CLOCK_REALTIME, 900000000);
  EXPECT(r, api, api->mutex_timedlock(&m, &far), ENOTRECOVERABLE);
  pthread_mutex_destroy(&m);
  /* Robust and error-checking. */
  init_mutex(&m, PTHREAD_MUTEX_ERRORCHECK, 1);
  EXPECT(r, api, api->mutex_lock(&m), 0);
  EXPECT(r, api, api->mutex_lock(&m), EDEADLK);
  EXPECT(r, api, pthread_mutex_unlock(&m), 0);
  pthread_mutex_destroy(&m);
}

static void suite_rwlock(const lock_api *api, results *r) {
  pthread_rwlock_t l;
  pthread_rwlock_init(&l, NULL);
  struct timespec far = deadline_in(CLOCK_REALTIME, 900000000);
  struct timespec far_mono = deadline_in(CLOCK_MONOTONIC, 900000000);
  /* Readers share; a writer that holds it gets EDEADLK on relocking. */
  EXPECT(r, api, api->rdlock(&l), 0);
  EXPECT(r, api, api->rdlock(&l), 0);
  EXPECT(r, api, api->timedrdlock(&l, &far), 0);
  EXPECT(r, api, pthread_rwlock_trywrlock(&l), EBUSY);
  for (int i = 0; i < 3; i++)
    EXPECT(r, api, pthread_rwlock_unlock(&l), 0);
  EXPECT(r, api, api->wrlock(&l), 0);
  EXPECT(r, api, api->rdlock(&l), EDEADLK);
  EXPECT(r, api, api->wrlock(&l), EDEADLK);
  EXPECT(r, api, api->timedwrlock(&l, &far), EDEADLK);
  EXPECT(r, api, api->timedrdlock(&l, &far), EDEADLK);
  EXPECT(r, api, api->clockwrlock(&l, CLOCK_MONOTONIC, &far_mono), EDEADLK);
  EXPECT(r, api, api->clockrdlock(&l, CLOCK_MONOTONIC, &far_mono), EDEADLK);
  EXPECT(r, api, pthread_rwlock_unlock(&l), 0);

  /* Another thread writes: readers and writers time out. */
  holder h;
  holder_start(&h, HOLD_WRITE, &l, 0, 0);
  struct timespec soon = deadline_in(CLOCK_REALTIME, 10000000);
  EXPECT(r, api, api->timedrdlock(&l, &soon), ETIMEDOUT);
  soon = deadline_in(CLOCK_REALTIME, 10000000);
  EXPECT(r, api, api->timedwrlock(&l, &soon), ETIMEDOUT);
  struct timespec soon_mono = deadline_in(CLOCK_MONOTONIC, 10000000);
  EXPECT(r, api, api->clockrdlock(&l, CLOCK_MONOTONIC, &soon_mono), ETIMEDOUT);
  soon_mono = deadline_in(CLOCK_MONOTONIC, 10000000);
  EXPECT(r, api, api->clockwrlock(&l, CLOCK_MONOTONIC, &soon_mono), ETIMEDOUT);
  struct timespec bad = {time(NULL) + 10, -1};
  EXPECT(r, api, api->timedrdlock(&l, &bad), EINVAL);
  EXPECT(r, api, api->timedwrlock(&l, &bad), EINVAL);
  EXPECT(r, api, pthread_rwlock_tryrdlock(&l), EBUSY);
  holder_end(&h);

  /* Another thread reads: readers get in at once, writers wait. */
  holder_start(&h, HOLD_READ, &l, 0, 0);
  EXPECT(r, api, api->rdlock(&l), 0);
  EXPECT(r, api, pthread_rwlock_unlock(&l), 0);
  soon = deadline_in(CLOCK_REALTIME, 10000000);
  EXPECT(r, api, api->timedwrlock(&l, &soon), ETIMEDOUT);
  holder_end(&h);

  /* Contended waits that end with the lock. */
  holder_start(&h, HOLD_WRITE, &l, 15000000, 0);
  EXPECT(r, api, api->rdlock(&l), 0);
  EXPECT(r, api, pthread_rwlock_unlock(&l), 0);
  holder_end(&h);
  holder_start(&h, HOLD_READ, &l, 15000000, 0);
  EXPECT(r, api, api->wrlock(&l), 0);
  EXPECT(r, api, pthread_rwlock_unlock(&l), 0);
  holder_end(&h);
  holder_start(&h, HOLD_WRITE, &l, 15000000, 0);
  far = deadline_in(CLOCK_REALTIME, 900000000);
  EXPECT(r, api, api->timedwrlock(&l, &far), 0);
  EXPECT(r, api, pthread_rwlock_unlock(&l), 0);
  holder_end(&h);
  holder_start(&h, HOLD_WRITE, &l, 15000000, 0);
  far_mono = deadline_in(CLOCK_MONOTONIC, 900000000);
  EXPECT(r, api, api->clockrdlock(&l, CLOCK_MONOTONIC, &far_mono), 0);
  EXPECT(r, api, pthread_rwlock_unlock(&l), 0);
  holder_end(&h);
  pthread_rwlock_destroy(&l);

  /* A writer-preferring lock: a waiting writer keeps new readers out. */
  pthread_rwlockattr_t a;
  pthread_rwlockattr_init(&a);
  pthread_rwlockattr_setkind_np(&a,
                                PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  pthread_rwlock_init(&l, &a);
  pthread_rwlockattr_destroy(&a);
  EXPECT(r, api, api->wrlock(&l), 0);
  EXPECT(r, api, api->wrlock(&l), EDEADLK);
  EXPECT(r, api, pthread_rwlock_unlock(&l), 0);
  pthread_rwlock_destroy(&l);
}

static void run_suite(const lock_api *api, results *r) {
  r->n = 0;
  suite_errorcheck(api, r);
  suite_recursive(api, r);
  suite_normal(api, r);
  suite_robust(api, r);
  suite_rwlock(api, r);
}

static void check_same(const results *a, const results *b) {
  CHECK_EQ_INT(a->n, b->n);
  for (int i = 0; i < a->n && i < b->n; i++)
    if (a->rc[i] != b->rc[i]) {
      fprintf(stderr, "call %d: hooks %d, libc %d\n", i, a->rc[i], b->rc[i]);
      test_failures++;
    }
}

/* ---- the profiler's view
 * ----------------------------------------------------- */

static char *output_dir;

static void start_lock_profiler(const char *sample_ns) {
  setenv("CONTPROF_LOCK_SAMPLE_NS", sample_ns, 1);
  contprof_options o = {0};
  o.profiles = "lock";
  o.output_dir = output_dir;
  o.upload_period_s = 3600;
  o.log_level = "error";
  CHECK_EQ_INT(contprof_start(&o), 0);
}

typedef struct lock_totals {
  int64_t count, wait_ns;
} lock_totals;

/* Lock values recorded since the previous call, for thread tid (0: all). */
static lock_totals take_lock_totals(pid_t tid) {
  lock_totals t = {0, 0};
  uint64_t drops;
  cp_generation *g = cp_agg_swap(&drops, NULL);
  CHECK(g != NULL);
  if (!g)
    return t;
  for (size_t i = 0; i < cp_gen_sample_count(g); i++) {
    cp_sample sample;
    cp_gen_sample(g, i, &sample);
    const cp_sample *s = &sample;
    if (tid && s->key.tid != tid)
      continue;
    t.count += s->values[CP_V_LOCK_ACQUIRE];
    t.wait_ns += s->values[CP_V_LOCK_WAIT];
  }
  cp_gen_destroy(g);
  return t;
}

static void test_hooks_interpose(void) {
  lock_api libc = libc_api();
  void *const got[] = {
      (void *)libc.mutex_lock,      (void *)libc.mutex_timedlock,
      (void *)libc.mutex_clocklock, (void *)libc.rdlock,
      (void *)libc.wrlock,          (void *)libc.timedrdlock,
      (void *)libc.timedwrlock,     (void *)libc.clockrdlock,
      (void *)libc.clockwrlock};
  void *const ours[] = {
      (void *)hooked.mutex_lock,      (void *)hooked.mutex_timedlock,
      (void *)hooked.mutex_clocklock, (void *)hooked.rdlock,
      (void *)hooked.wrlock,          (void *)hooked.timedrdlock,
      (void *)hooked.timedwrlock,     (void *)hooked.clockrdlock,
      (void *)hooked.clockwrlock};
  for (size_t i = 0; i < sizeof got / sizeof got[0]; i++) {
    CHECK(got[i] != NULL);
    CHECK(got[i] != ours[i]);
  }
}

/* Profiler not running: the hooks only try first, then call libc. */
static void test_conformance_profiler_off(void) {
  static results via_hooks, via_libc;
  lock_api libc = libc_api();
  run_suite(&hooked, &via_hooks);
  run_suite(&libc, &via_libc);
  check_same(&via_hooks, &via_libc);
}

/* Profiling with a 1 us mean: nearly every contended wait is recorded, so
 * the recording path runs under every lock type and outcome. */
static void test_conformance_profiler_on(void) {
  static results via_hooks, via_libc;
  lock_api libc = libc_api();
  start_lock_profiler("1000");
  take_lock_totals(0);
  run_suite(&hooked, &via_hooks);
  lock_totals hooks = take_lock_totals(cp_gettid());
  run_suite(&libc, &via_libc);
  lock_totals direct = take_lock_totals(cp_gettid());
  contprof_stop();
  check_same(&via_hooks, &via_libc);
  /* At least the 15 waits of 10 ms or more, nothing through libc directly. */
  printf("suite through the hooks: %lld waits, %.3f s recorded\n",
         (long long)hooks.count, (double)hooks.wait_ns / 1e9);
  CHECK(hooks.count >= 15);
  CHECK(hooks.wait_ns >= 150000000);
  CHECK_EQ_INT(direct.count, 0);
}

/* ---- measured waits ---------------------------------------------------------
 */

typedef struct contender {
  pthread_t thread;
  pthread_mutex_t *mutex;
  uint64_t run_ns;
  int excluded;
  pid_t tid;
  uint64_t wait_ns;   /* measured around each contended lock call */
  uint64_t contended; /* lock calls that found the mutex busy */
  /* The profile's variances for those waits at mean_ns: a wait of w is
   * kept with p = 1 - exp(-w / mean) and weighed 1/p (lock_workload.c). */
  double mean_ns, var_count, var_ns;
} contender;

static void *contender_main(void *p) {
  contender *c = p;
  if (c->excluded)
    cp_thread_mark_internal();
  c->tid = cp_gettid();
  unsigned seed = (unsigned)c->tid;
  uint64_t end = now_ns() + c->run_ns;
  while (now_ns() < end) {
    if (pthread_mutex_trylock(c->mutex) != 0) {
      uint64_t t0 = now_ns();
      pthread_mutex_lock(c->mutex);
      uint64_t w = now_ns() - t0;
      c->wait_ns += w;
      c->contended++;
      double p = -expm1(-(double)w / c->mean_ns);
      if (p > 0) {
        c->var_count += (1 - p) / p;
        c->var_ns += (double)w * (double)w * (1 - p) / p;
      }
    }
    /* Hold 20-80 us, then rest 0-40 us: waits of tens to hundreds of us. */
    cp_sleep_ns(20000 + (uint64_t)(rand_r(&seed) % 60000));
    pthread_mutex_unlock(c->mutex);
    uint64_t rest = now_ns() + (uint64_t)(rand_r(&seed) % 40000);
    while (now_ns() < rest)
      ;
  }
  return NULL;
}

/* Four threads contend for one mutex and measure their own waits; a fifth,
 * marked as the profiler's, contends too and must not appear. With a 50 us
 * mean and waits of 100 us and more, most waits are kept (p > 0.86) and the
 * relative standard error of the total is well under 1%. A loaded machine
 * preempts the holders: fewer waits, of milliseconds (94 to 315 of 15 to
 * 50 ms under six ctest jobs on 2 CPUs), each kept (p near 1). The bounds
 * are 10%, or 4 standard errors where those are wider; at least 20 waits
 * (a few hundred on a quiet machine), or the run measured nothing. */
static void test_wait_totals_match_measured(void) {
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  contender c[5];
  memset(c, 0, sizeof c);
  start_lock_profiler("50000");
  take_lock_totals(0);
  for (int i = 0; i < 5; i++) {
    c[i].mutex = &m;
    c[i].run_ns = 1500000000ull;
    c[i].mean_ns = 50000;
    c[i].excluded = i == 4;
    pthread_create(&c[i].thread, NULL, contender_main, &c[i]);
  }
  for (int i = 0; i < 5; i++)
    pthread_join(c[i].thread, NULL);
  uint64_t measured_wait = 0, measured_count = 0;
  lock_totals profiled = {0, 0};
  uint64_t drops;
  cp_generation *g = cp_agg_swap(&drops, NULL);
  CHECK(g != NULL);
  CHECK_EQ_INT(drops, 0);
  for (size_t i = 0; g && i < cp_gen_sample_count(g); i++) {
    cp_sample sample;
    cp_gen_sample(g, i, &sample);
    const cp_sample *s = &sample;
    for (int k = 0; k < 5; k++) {
      if (s->key.tid != c[k].tid)
        continue;
      CHECK(k != 4); /* the profiler's thread is never recorded */
      profiled.count += s->values[CP_V_LOCK_ACQUIRE];
      profiled.wait_ns += s->values[CP_V_LOCK_WAIT];
    }
  }
  cp_gen_destroy(g);
  contprof_stop();
  double var_count = 0, var_ns = 0;
  for (int k = 0; k < 4; k++) {
    measured_wait += c[k].wait_ns;
    measured_count += c[k].contended;
    var_count += c[k].var_count;
    var_ns += c[k].var_ns;
  }
  double se_count =
      measured_count ? sqrt(var_count) / (double)measured_count : 1;
  double se_wait = measured_wait ? sqrt(var_ns) / (double)measured_wait : 1;
  printf("measured %.3f s in %llu waits; profiled %.3f s in %lld (standard "
         "errors %.1f%% and %.1f%%)\n",
         (double)measured_wait / 1e9, (unsigned long long)measured_count,
         (double)profiled.wait_ns / 1e9, (long long)profiled.count,
         100 * se_wait, 100 * se_count);
  CHECK(measured_count >= 20);
  CHECK_NEAR((double)profiled.wait_ns / (double)measured_wait, 1.0,
             fmax(0.10, 4 * se_wait));
  CHECK_NEAR((double)profiled.count / (double)measured_count, 1.0,
             fmax(0.10, 4 * se_count));
}

static void *unwind_loop(void *p) {
  uint64_t end = now_ns() + *(uint64_t *)p;
  void *frames[64];
  while (now_ns() < end)
    unw_backtrace(frames, 64);
  return NULL;
}

/* Threads that unwind all the time contend for libunwind's own lock, which
 * it takes through pthread_mutex_lock. Recording such a wait would unwind
 * while holding that lock, and wait for it forever: these waits are never
 * recorded. */
static void test_unwinder_lock_is_not_recorded(void) {
  uint64_t run_ns = 500000000ull;
  pthread_t t[4];
  start_lock_profiler("1");
  for (int i = 0; i < 4; i++)
    pthread_create(&t[i], NULL, unwind_loop, &run_ns);
  for (int i = 0; i < 4; i++)
    pthread_join(t[i], NULL);
  lock_totals got = take_lock_totals(0);
  contprof_stop();
  CHECK_EQ_INT(got.count, 0);
}

typedef struct hammer {
  pthread_mutex_t *mutex;
  uint64_t run_ns;
  volatile uint64_t counter;
} hammer;

/* Tiny critical sections back to back: contention, and with a 1 ns mean a
 * recorded sample (an unwind) for nearly every wait. */
static void *hammer_main(void *p) {
  hammer *h = p;
  uint64_t end = now_ns() + h->run_ns;
  while (now_ns() < end)
    for (int i = 0; i < 1000; i++) {
      pthread_mutex_lock(h->mutex);
      h->counter++;
      pthread_mutex_unlock(h->mutex);
    }
  return NULL;
}

/* Every contended wait recorded while threads come and go: new threads warm
 * the unwinder up, and libunwind's own lock (taken through the hooks) is
 * contended by the unwinds of the recording threads. A wait for the
 * unwinder's lock must never be recorded (recording takes it again): this
 * used to hang. */
static void test_record_everything_while_threads_start(void) {
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  hammer h = {&m, 1000000000ull, 0};
  hammer brief = {&m, 2000000ull, 0};
  pthread_t t[4];
  start_lock_profiler("1");
  for (int i = 0; i < 4; i++)
    pthread_create(&t[i], NULL, hammer_main, &h);
  uint64_t end = now_ns() + 900000000ull;
  int started = 0;
  while (now_ns() < end) {
    pthread_t s;
    pthread_create(&s, NULL, hammer_main, &brief);
    pthread_join(s, NULL);
    started++;
  }
  for (int i = 0; i < 4; i++)
    pthread_join(t[i], NULL);
  lock_totals got = take_lock_totals(0);
  contprof_stop();
  printf("%d threads started, %lld waits recorded\n", started,
         (long long)got.count);
  CHECK(got.count > 0);
}

static void test_hooks_survive_fork(void) {
  /* The child of fork: hooks stay harmless with the profiler gone. */
  start_lock_profiler("1000");
  pid_t pid = fork();
  if (pid == 0) {
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    holder h;
    holder_start(&h, HOLD_MUTEX, &m, 5000000, 0);
    int rc = pthread_mutex_lock(&m);
    pthread_mutex_unlock(&m);
    holder_end(&h);
    _exit(rc == 0 ? 0 : 1);
  }
  int status = -1;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  contprof_stop();
}

int main(void) {
  char dir[] = "/tmp/contprof-test-lock-XXXXXX";
  output_dir = mkdtemp(dir);
  test_case tests[] = {
      T(test_hooks_interpose),
      T(test_conformance_profiler_off),
      T(test_conformance_profiler_on),
      T(test_wait_totals_match_measured),
      T(test_unwinder_lock_is_not_recorded),
      T(test_record_everything_while_threads_start),
      T(test_hooks_survive_fork),
  };
  int failed = 0;
  for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
    int before = test_failures;
    tests[i].fn();
    int ok = test_failures == before;
    failed += !ok;
    printf("%s %s\n", ok ? "PASS" : "FAIL", tests[i].name);
  }
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", output_dir);
  if (system(cmd) != 0)
    fprintf(stderr, "cannot remove %s\n", output_dir);
  return failed ? 1 : 0;
}
