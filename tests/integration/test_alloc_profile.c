/* Allocation and live-heap profiles of unmodified programs under `contprof
 * run --profiles alloc,heap`: measured shares of allocated bytes and their
 * total match the truth, a leak is found and its size estimated, and it
 * leaves the profile once freed; with jemalloc preloaded too (both orders),
 * across fork, and under valgrind. */
#include <inttypes.h>
#include <math.h>

#include "harness.h"
#include "test.h"

#define CONTPROF CP_BUILD_DIR "/contprof"
#define WORKLOAD CP_BUILD_DIR "/tests/alloc_workload"
#define PRELOAD CP_BUILD_DIR "/libcontprof_preload.so"
#define JEMALLOC "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"

typedef struct run_profiles {
  run_result r;
  pprof_profile *p[64];
  size_t n;
} run_profiles;

static void free_profiles(run_profiles *rp) {
  for (size_t i = 0; i < rp->n; i++)
    pprof_profile_free(rp->p[i]);
}

/* cum of fn in the sample type `type` over profiles p[0..n), and the total. */
static int64_t cum_of(pprof_profile *const *p, size_t n, const char *type,
                      const char *fn, int64_t *total) {
  pprof_top top;
  char err[256];
  if (pprof_top_compute((const pprof_profile *const *)p, n, type, &top, err,
                        sizeof err) != 0) {
    fprintf(stderr, "top %s: %s\n", type, err);
    *total = -1;
    return -1;
  }
  int64_t v = top_cum(&top, fn);
  *total = top.total;
  pprof_top_free(&top);
  return v;
}

/* What the profiles p[0..n) say about their samples: kept (of every kind),
 * dropped (the ring was full: their values are on the [dropped] stack) and
 * thinned (taken at a mean the ring's pressure raised). */
typedef struct sample_counts {
  double kept, dropped, thinned;
} sample_counts;

static sample_counts count_samples(pprof_profile *const *p, size_t n) {
  sample_counts c = {0, 0, 0};
  for (size_t i = 0; i < n; i++) {
    const char *k = profile_comment(p[i], "samples");
    const char *d = profile_comment(p[i], "samples_dropped");
    const char *t = profile_comment(p[i], "thinned.alloc");
    c.kept += k ? strtod(k, NULL) : 0;
    c.dropped += d ? strtod(d, NULL) : 0;
    c.thinned += t ? strtod(t, NULL) : 0;
  }
  return c;
}

/* The relative tolerance for an alloc-space total of `truth` bytes sampled
 * at mean `mean` from blocks of at most `max_size` bytes: 5%, or 4 standard
 * errors when the ring thinned or dropped samples. A sample's bytes are at
 * most its gap's mean plus its size, so the variance of the total is at most
 * the sum of their squares: kept samples at the mean asked for, thinned or
 * dropped ones at up to 64 times it (CP_RING_PRESSURE_MAX; docs/overhead.md,
 * "A filling ring"). A run that thinned 1,000 of 36,000 samples at 16 KiB
 * read the total 5% high: unbiased (ten such runs averaged +0.7%), but each
 * of those samples weighs up to a MiB. */
static double total_tolerance(const sample_counts *c, double truth, double mean,
                              double max_size) {
  double at_mean = mean + max_size, raised = 64 * mean + max_size;
  double variance =
      c->kept * at_mean * at_mean + (c->thinned + c->dropped) * raised * raised;
  double tol = 4 * sqrt(variance) / truth;
  return tol > 0.05 ? tol : 0.05;
}

/* The shares program: alloc_big allocates 80% of the bytes, alloc_small
 * 20%. Checks both shares within 3 points and the total alloc-space within
 * 5% of the bytes allocated (total_tolerance: wider only when the ring
 * thinned or dropped samples). */
static void check_shares(const char *threads, const char *mib,
                         const char *const *env, int jemalloc) {
  char *dir = make_temp_dir("alloc-shares");
  char *argv[] = {
      CONTPROF, "run",    "--profiles", "alloc,heap",    "--output",  dir,
      "--",     WORKLOAD, "shares",     (char *)threads, (char *)mib, NULL};
  run_profiles *rp = calloc(1, sizeof *rp);
  CHECK_EQ_INT(run_command(argv, env, &rp->r), 0);
  CHECK(WIFEXITED(rp->r.status) && WEXITSTATUS(rp->r.status) == 0);
  unsigned long long big = 0, small = 0;
  CHECK_EQ_INT(
      sscanf(rp->r.out, "alloc_big=%llu alloc_small=%llu", &big, &small), 2);
  rp->n = read_profiles(dir, rp->p, 64, NULL);
  CHECK(rp->n >= 1);
  if (rp->n >= 1) {
    int64_t total, total_n;
    int64_t b = cum_of(rp->p, rp->n, "alloc-space", "alloc_big", &total);
    int64_t s = cum_of(rp->p, rp->n, "alloc-space", "alloc_small", &total);
    int64_t samples =
        cum_of(rp->p, rp->n, "alloc-samples", "alloc_big", &total_n);
    double truth = (double)(big + small);
    printf("%s%s threads x %s MiB: alloc_big %.1f%% (truth %.1f%%), "
           "alloc-space %.4g of %.4g bytes (%.2f%%), %" PRId64
           " objects estimated\n",
           jemalloc ? "jemalloc: " : "", threads, mib,
           100.0 * (double)b / (double)(b + s), 100.0 * (double)big / truth,
           (double)total, truth, 100.0 * ((double)total / truth - 1), samples);
    CHECK_NEAR(100.0 * (double)b / (double)(b + s), 100.0 * (double)big / truth,
               3.0);
    CHECK_NEAR(100.0 * (double)s / (double)(b + s),
               100.0 * (double)small / truth, 3.0);
    /* Samples are kept, not only counted: the drain thread reads no debug
     * information while they come this fast (docs/symbols.md). Before,
     * 18-21% of this run's samples were dropped at start. A drain thread
     * starved of CPU (the valgrind test beside this one under ctest -j2)
     * dropped 2.5-5.3% until the sampler lowered its rate when the ring
     * fills (docs/overhead.md, "A filling ring"): now such a run takes
     * fewer samples (thinned) but drops none; 3 loops of this run at once
     * on 2 CPUs thinned at most 350 of 8,000 (bench/ring_drops.sh). */
    sample_counts c = count_samples(rp->p, rp->n);
    double tol = total_tolerance(&c, truth, 512 * 1024, 16384);
    printf("samples kept %.0f, dropped %.0f, thinned %.0f: the total's "
           "tolerance %.1f%%\n",
           c.kept, c.dropped, c.thinned, 100 * tol);
    CHECK_NEAR((double)total / truth, 1.0, tol);
    CHECK(c.kept > 0);
    CHECK(c.dropped <= c.kept / 100);
    CHECK(c.dropped + c.thinned <= c.kept / 5);
    /* Nothing is live at exit: the last in-use snapshot is empty. */
    int64_t live_total;
    cum_of(rp->p, rp->n, "inuse-space", "alloc_big", &live_total);
    CHECK(live_total < (int64_t)(truth / 1000));
  }
  free_profiles(rp);
  free(rp);
  remove_dir(dir);
}

/* 4 GiB in 256 B..16 KiB blocks at the default 512 KiB mean: about 8200
 * samples, so the standard error of the 80% share is 0.44 points (the 3-point
 * tolerance is 6.8 of them) and that of the total 1.1% (5% is 4.5). */
static void test_shares_default_rate(void) {
  check_shares("4", "4096", NULL, 0);
}

/* jemalloc preloaded after contprof (contprof run prepends its library): the
 * hooks forward to jemalloc. 4 GiB at the default mean, as above. (A much
 * smaller mean would overflow the 2048-slot sample ring: jemalloc allocates
 * 1 GiB in about 50 ms.) */
static void test_shares_with_jemalloc_after(void) {
  SKIP_IF_SANITIZED("jemalloc and the sanitizer's malloc cannot both own "
                    "the heap");
  if (access(JEMALLOC, R_OK) != 0) {
    printf("SKIP: %s not installed\n", JEMALLOC);
    return;
  }
  const char *env[] = {"LD_PRELOAD=" JEMALLOC, NULL};
  check_shares("2", "4096", env, 1);
  /* jemalloc really is the allocator then. */
  char *argv[] = {CONTPROF, "run", "--profiles", "alloc,heap", "--output",
                  "/tmp",   "--",  WORKLOAD,     "allocator",  NULL};
  char *dir = make_temp_dir("alloc-jemalloc");
  argv[5] = dir;
  run_result *r = calloc(1, sizeof *r);
  CHECK_EQ_INT(run_command(argv, env, r), 0);
  CHECK(strstr(r->out, "jemalloc=1") != NULL);
  free(r);
  remove_dir(dir);
}

/* A non-PIE executable that takes malloc's and free's addresses exports
 * their PLT entries as the functions: the hooks must still find glibc's
 * allocator behind them (not take the stubs for another allocator, which
 * aborted) and sample the program's allocations. */
static void test_non_pie_executable(void) {
  char *dir = make_temp_dir("alloc-nopie");
  const char *env[] = {"CONTPROF_ALLOC_SAMPLE_BYTES=65536", NULL};
  char *argv[] = {
      CONTPROF,   "run", "--profiles", "alloc",
      "--output", dir,   "--",         CP_BUILD_DIR "/tests/nopie_alloc",
      NULL};
  run_result *r = calloc(1, sizeof *r);
  CHECK_EQ_INT(run_command(argv, env, r), 0);
  CHECK(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0);
  CHECK(strstr(r->out, "nopie_failures=0") != NULL);
  pprof_profile *p[4];
  size_t n = read_profiles(dir, p, 4, NULL);
  CHECK_EQ_INT(n, 1);
  if (n == 1) {
    pprof_top top;
    char err[256];
    CHECK_EQ_INT(pprof_top_compute((const pprof_profile *const *)p, 1,
                                   "alloc-space", &top, err, sizeof err),
                 0);
    /* 2 x 20000 x ~4.1 KiB = 164 MiB allocated, 2500 samples (a 2%
     * standard error). The burst can fill the ring: those samples keep
     * their values on [dropped], so the total is exact, not the stack. */
    double mib = (double)top.total / 1048576;
    double in_fn = (double)top_cum(&top, "nopie_allocate") / 1048576;
    printf("non-PIE: %.1f MiB (truth 164.5), %.1f MiB in nopie_allocate\n", mib,
           in_fn);
    CHECK_NEAR(mib, 164.5, 16.5);
    CHECK(in_fn > mib / 2);
    pprof_top_free(&top);
  }
  for (size_t i = 0; i < n; i++)
    pprof_profile_free(p[i]);
  free(r);
  remove_dir(dir);
}

/* jemalloc first in LD_PRELOAD: its malloc wins and contprof's hooks see
 * nothing, but every call still works (stress checks contents). */
static void test_jemalloc_before_contprof(void) {
  SKIP_IF_SANITIZED("jemalloc and the sanitizer's malloc cannot both own "
                    "the heap");
  if (access(JEMALLOC, R_OK) != 0) {
    printf("SKIP: %s not installed\n", JEMALLOC);
    return;
  }
  char *dir = make_temp_dir("alloc-jefirst");
  char out_env[160];
  snprintf(out_env, sizeof out_env, "CONTPROF_OUTPUT_DIR=%s", dir);
  const char *env[] = {"LD_PRELOAD=" JEMALLOC ":" PRELOAD,
                       "CONTPROF_PROFILES=alloc,heap",
                       "CONTPROF_ALLOC_SAMPLE_BYTES=4096",
                       "CONTPROF_LOG_LEVEL=error",
                       out_env,
                       NULL};
  char *argv[] = {WORKLOAD, "stress", "4", "20000", NULL};
  run_result *r = calloc(1, sizeof *r);
  CHECK_EQ_INT(run_command(argv, env, r), 0);
  CHECK(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0);
  CHECK(strstr(r->out, "stress_errors=0") != NULL);
  /* The alloc and heap profiles stay empty (jemalloc's malloc comes first),
   * and a process that recorded nothing writes no profile. */
  pprof_profile *p[4];
  size_t n = read_profiles(dir, p, 4, NULL);
  CHECK_EQ_INT(n, 0);
  for (size_t i = 0; i < n; i++)
    pprof_profile_free(p[i]);
  free(r);
  remove_dir(dir);
}

/* Every hooked call from 4 threads with every ~4 KiB sampled and tracked. */
static void test_stress_all_calls_profiled(void) {
  char *dir = make_temp_dir("alloc-stress");
  const char *env[] = {"CONTPROF_ALLOC_SAMPLE_BYTES=4096", NULL};
  char *argv[] = {CONTPROF,   "run", "--profiles", "alloc,heap",
                  "--output", dir,   "--",         WORKLOAD,
                  "stress",   "4",   "100000",     NULL};
  run_result *r = calloc(1, sizeof *r);
  CHECK_EQ_INT(run_command(argv, env, r), 0);
  CHECK(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0);
  CHECK(strstr(r->out, "stress_errors=0") != NULL);
  free(r);
  remove_dir(dir);
}

/* The same under valgrind (short: valgrind runs threads one at a time).
 * valgrind aborts on pvalloc, so the workload leaves it out. */
static void test_stress_under_valgrind(void) {
  SKIP_IF_SANITIZED("valgrind cannot run sanitizer-instrumented programs");
  if (access("/usr/bin/valgrind", X_OK) != 0) {
    printf("SKIP: valgrind not installed\n");
    return;
  }
  char *dir = make_temp_dir("alloc-valgrind");
  char out_env[160];
  snprintf(out_env, sizeof out_env, "CONTPROF_OUTPUT_DIR=%s", dir);
  const char *env[] = {"LD_PRELOAD=" PRELOAD, "CONTPROF_PROFILES=alloc,heap",
                       "CONTPROF_ALLOC_SAMPLE_BYTES=4096", out_env, NULL};
  char *argv[] = {"/usr/bin/valgrind",
                  "-q",
                  "--error-exitcode=99",
                  "--suppressions=" CP_SOURCE_DIR
                  "/tests/integration/valgrind.supp",
                  WORKLOAD,
                  "stress",
                  "4",
                  "3000",
                  "no-pvalloc",
                  NULL};
  run_result *r = calloc(1, sizeof *r);
  CHECK_EQ_INT(run_command(argv, env, r), 0);
  CHECK(WIFEXITED(r->status));
  CHECK_EQ_INT(WEXITSTATUS(r->status), 0);
  CHECK(strstr(r->out, "stress_errors=0") != NULL);
  free(r);
  remove_dir(dir);
}

static void test_fork_child_frees_parent_blocks(void) {
  SKIP_IF_SANITIZED("ASan's thread start-up in a forked child");
  char *dir = make_temp_dir("alloc-fork");
  const char *env[] = {"CONTPROF_ALLOC_SAMPLE_BYTES=1024", NULL};
  char *argv[] = {CONTPROF, "run", "--profiles", "alloc,heap", "--output",
                  dir,      "--",  WORKLOAD,     "fork",       NULL};
  run_result *r = calloc(1, sizeof *r);
  CHECK_EQ_INT(run_command(argv, env, r), 0);
  CHECK(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0);
  CHECK(strstr(r->out, "child=7") != NULL);
  /* The child ends with _exit: its last profile is written too, by the
   * _exit hook (docs/signals.md, "_exit"), with its churn. */
  pprof_profile *p[4];
  size_t n = read_profiles(dir, p, 4, NULL);
  CHECK_EQ_INT(n, 2);
  size_t with_churn = 0;
  for (size_t i = 0; i < n; i++) {
    for (size_t j = 0; j < p[i]->n_sample; j++)
      if (pprof_sample_has_function(p[i], p[i]->sample[j], "churn")) {
        with_churn++;
        break;
      }
    pprof_profile_free(p[i]);
  }
  CHECK_EQ_INT(with_churn, 1);
  free(r);
  remove_dir(dir);
}

/* leak_hold keeps 64 MiB, churn allocates and frees 512 MiB, at a 16 KiB
 * mean: 4096 samples of the leak, so the standard error of its estimate is
 * 1.6% and the 10% tolerance 6 of them (the workload pauses every 2 MiB so
 * that a loaded machine's drain thread keeps up and the ring does not thin
 * them). Profiles every second; the leak is held 2.5 s, freed, and the
 * program lives 2.5 s more. */
static void test_leak_found_then_gone(void) {
  SKIP_IF_SANITIZED("timed to 100 ms around a free of 64 MiB");
  char *dir = make_temp_dir("alloc-leak");
  const char *env[] = {"CONTPROF_ALLOC_SAMPLE_BYTES=16384", NULL};
  char *argv[] = {CONTPROF, "run",      "--profiles", "alloc,heap", "--period",
                  "1",      "--output", dir,          "--",         WORKLOAD,
                  "leak",   "64",       "512",        "2500",       NULL};
  run_profiles *rp = calloc(1, sizeof *rp);
  CHECK_EQ_INT(run_command(argv, env, &rp->r), 0);
  CHECK(WIFEXITED(rp->r.status) && WEXITSTATUS(rp->r.status) == 0);
  unsigned long long leaked = 0, live_from = 0, freed_from = 0;
  CHECK_EQ_INT(sscanf(rp->r.out,
                      "leaked=%llu live_from_ns=%llu\nfreed_from_ns=%llu",
                      &leaked, &live_from, &freed_from),
               3);
  rp->n = read_profiles(dir, rp->p, 64, NULL);
  int while_live = 0, after_free = 0;
  for (size_t i = 0; i < rp->n; i++) {
    const pprof_profile *p = rp->p[i];
    uint64_t end = (uint64_t)(p->time_nanos + p->duration_nanos);
    int64_t total;
    int64_t held = cum_of(&rp->p[i], 1, "inuse-space", "leak_hold", &total);
    if (end > live_from && end < freed_from) {
      /* A snapshot taken while the leak was live. */
      while_live++;
      printf("live: leak_hold %.1f MiB of %.1f MiB in use (leaked %.1f)\n",
             (double)held / 1048576, (double)total / 1048576,
             (double)leaked / 1048576);
      CHECK((double)held >= 0.9 * (double)total);
      CHECK_NEAR((double)held / (double)leaked, 1.0, 0.10);
    } else if (end > freed_from + 100000000ull) {
      after_free++;
      CHECK_EQ_INT(held, 0);
    }
  }
  CHECK(while_live >= 1);
  CHECK(after_free >= 1);
  /* alloc-space over the whole run: leak + churn. */
  int64_t total;
  cum_of(rp->p, rp->n, "alloc-space", "leak_hold", &total);
  double truth = (double)(576ull << 20);
  sample_counts c = count_samples(rp->p, rp->n);
  double tol = total_tolerance(&c, truth, 16384, 16384);
  printf("alloc-space %.4f of the truth (tolerance %.1f%%); samples kept "
         "%.0f, dropped %.0f, thinned %.0f\n",
         (double)total / truth, 100 * tol, c.kept, c.dropped, c.thinned);
  CHECK_NEAR((double)total / truth, 1.0, tol);
  free_profiles(rp);
  free(rp);
  remove_dir(dir);
}

TEST_MAIN(T(test_shares_default_rate), T(test_shares_with_jemalloc_after),
          T(test_jemalloc_before_contprof), T(test_non_pie_executable),
          T(test_stress_all_calls_profiled), T(test_stress_under_valgrind),
          T(test_fork_child_frees_parent_blocks), T(test_leak_found_then_gone))
