/* Timing the handlers and hooks (src/stats.c): one call in
 * CP_STATS_HOOK_EVERY is timed on the thread's CPU clock, a system call
 * whose own cost lands in the interval it times. Taken off, a call that
 * does nothing is reported as next to nothing (it was reported as one
 * pair of clock reads, over a microsecond on a VM: more than a sampled
 * allocation costs), and a call that works is reported at what its work
 * costs. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "common.h"
#include "stats.h"
#include "test.h"

#define TIMED 4000 /* timed calls per measurement */

static uint64_t alloc_hook_ns(void) {
  cp_stats_totals t;
  cp_stats_totals_read(&t);
  return t.hook_ns[CONTPROF_KIND_ALLOC];
}

static volatile uint64_t sink;
static void work(int rounds) {
  uint64_t x = sink + 1;
  for (int i = 0; i < rounds; i++)
    x = x * 6364136223846793005ull + 1442695040888963407ull;
  sink = x;
}

/* What work(rounds) costs, measured apart: n runs between two reads of
 * the thread's CPU clock, in ns a run. */
static double cost_of(int rounds, int n) {
  uint64_t t0 = cp_clock_ns(CLOCK_THREAD_CPUTIME_ID);
  for (int i = 0; i < n; i++)
    work(rounds);
  return (double)(cp_clock_ns(CLOCK_THREAD_CPUTIME_ID) - t0) / n;
}

/* The average reported for the timed calls among TIMED *
 * CP_STATS_HOOK_EVERY calls of work(rounds), in ns a timed call. */
static double reported_per_timed_call(int rounds) {
  uint64_t before = alloc_hook_ns();
  for (int i = 0; i < TIMED * CP_STATS_HOOK_EVERY; i++) {
    uint64_t began = cp_stats_hook_begin(CONTPROF_KIND_ALLOC);
    if (began)
      work(rounds);
    cp_stats_hook_end(CONTPROF_KIND_ALLOC, began);
  }
  return (double)(alloc_hook_ns() - before) / CP_STATS_HOOK_EVERY / TIMED;
}

static void test_clock_pair_measured(void) {
  cp_stats_calibrate();
  int64_t pair = cp_stats_clock_pair_ns();
  printf("  two back-to-back reads of the thread's CPU clock: %lld ns\n",
         (long long)pair);
  CHECK(pair >= 0 && pair < 1000000);
  cp_stats_calibrate(); /* once per process: the figure stays */
  CHECK_EQ_INT(cp_stats_clock_pair_ns(), pair);
}

static void test_empty_call_reported_as_nothing(void) {
  cp_stats_calibrate();
  double pair = (double)cp_stats_clock_pair_ns();
  double empty = reported_per_timed_call(0);
  printf("  an empty call: %.0f ns reported (a pair of reads: %.0f ns)\n",
         empty, pair);
  /* What is left is how much more than the least pair a pair takes on
   * average: a fraction of it. */
  CHECK(empty < 0.5 * pair + 50);
}

static void test_work_reported_at_its_cost(void) {
  cp_stats_calibrate();
  const int rounds = 20000; /* about 20 us */
  double cost = cost_of(rounds, 2000);
  double reported = reported_per_timed_call(rounds);
  printf("  a call of %.0f ns: %.0f ns reported\n", cost, reported);
  CHECK(reported > 0.8 * cost && reported < 1.25 * cost);
}

/* Calls a thread makes rarely (here one per 0.6 ms of its CPU) are timed
 * one in CP_STATS_HOOK_RARE, each counting for as many: the sum still
 * comes to what they cost. Calls made back to back go back to one in
 * CP_STATS_HOOK_EVERY. On a thread of its own: the windows of the calls
 * before would otherwise reach into these. */
typedef struct rare_run {
  double cost, reported;
  unsigned weight_rare, weight_after;
} rare_run;

static void *rare_calls(void *arg) {
  rare_run *r = arg;
  const int rounds = 20000, calls = 400;
  r->cost = cost_of(rounds, 500);
  int spin = (int)(600000.0 / (r->cost / rounds)); /* 0.6 ms of CPU */
  uint64_t before = alloc_hook_ns();
  for (int i = 0; i < calls; i++) {
    work(spin);
    uint64_t began = cp_stats_hook_begin(CONTPROF_KIND_ALLOC);
    work(rounds);
    cp_stats_hook_end(CONTPROF_KIND_ALLOC, began);
  }
  r->reported = (double)(alloc_hook_ns() - before) / calls;
  r->weight_rare = cp_stats_hook_weight(CONTPROF_KIND_ALLOC);
  reported_per_timed_call(0); /* back to back */
  r->weight_after = cp_stats_hook_weight(CONTPROF_KIND_ALLOC);
  return NULL;
}

static void test_rare_calls_timed_more_often(void) {
  cp_stats_calibrate();
  rare_run r = {0};
  pthread_t t;
  CHECK_EQ_INT(pthread_create(&t, NULL, rare_calls, &r), 0);
  pthread_join(t, NULL);
  printf("  400 calls of %.0f ns, one per 0.6 ms: %.0f ns each reported; "
         "one in %u timed, then one in %u back to back\n",
         r.cost, r.reported, r.weight_rare, r.weight_after);
  CHECK_EQ_INT(r.weight_rare, CP_STATS_HOOK_RARE);
  CHECK_EQ_INT(r.weight_after, CP_STATS_HOOK_EVERY);
  CHECK(r.reported > 0.75 * r.cost && r.reported < 1.33 * r.cost);
}

TEST_MAIN(T(test_clock_pair_measured), T(test_empty_call_reported_as_nothing),
          T(test_work_reported_at_its_cost),
          T(test_rare_calls_timed_more_often))
