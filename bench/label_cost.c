/* label_cost: what the label API costs the application's threads, on the
 * real libcontprof.so with the profiler running (docs/benchmarks.md,
 * "Labels").
 *
 *   label_cost [MILLIONS [ROUNDS]]      (defaults: 2 5)
 *
 * Per operation, the median over ROUNDS of MILLIONS iterations each:
 *   push+pop hit    contprof_label_push of a set that exists (the common
 *                   case: a request's endpoint) and its pop;
 *   push+pop new    the same with a new value each time (a request id):
 *                   the set is made, and freed later (30,000 a round, then
 *                   two profiles, untimed, so that they are);
 *   hold+release    what a sampled allocation and its free add in the
 *                   malloc hooks (contprof_labels_hold/_release, one CAS
 *                   each), on a set the thread holds; with BUILD_OLD the
 *                   library has no such functions and this row is skipped;
 *   2 threads       hold+release by two threads on the same set at once
 *                   (the set's word bounces between their caches).
 * The CPU sampler runs at its default rate throughout, as in production;
 * the signal handler itself only copies the thread's set id (unchanged). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "contprof/profiler.h"
#include "contprof/runtime.h"

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static long iterations;

static double push_pop_hit(void) {
  uint64_t t0 = now_ns();
  for (long i = 0; i < iterations; i++) {
    contprof_label_scope s;
    contprof_label_push("endpoint", "/checkout", &s);
    contprof_label_pop(&s);
  }
  return (double)(now_ns() - t0) / (double)iterations;
}

/* 30,000 new sets a round, and two profiles after it (not timed): the sets
 * of a round are freed before the next. */
static double push_pop_new(void) {
  static long next;
  char value[32];
  long n = iterations < 30000 ? iterations : 30000;
  uint64_t t0 = now_ns();
  for (long i = 0; i < n; i++) {
    snprintf(value, sizeof value, "req-%ld", next++);
    contprof_label_scope s;
    contprof_label_push("request", value, &s);
    contprof_label_pop(&s);
  }
  double ns = (double)(now_ns() - t0) / (double)n;
  contprof_flush();
  contprof_flush();
  return ns;
}

#ifndef BUILD_OLD
static uint32_t shared_set;

static double hold_release(void) {
  uint64_t t0 = now_ns();
  for (long i = 0; i < iterations; i++)
    contprof_labels_release(contprof_labels_hold(shared_set));
  return (double)(now_ns() - t0) / (double)iterations;
}

static void *hold_thread(void *out) {
  *(double *)out = hold_release();
  return NULL;
}

static double hold_release_2threads(void) {
  pthread_t t;
  double other = 0;
  pthread_create(&t, NULL, hold_thread, &other);
  double mine = hold_release();
  pthread_join(t, NULL);
  return (mine + other) / 2;
}
#endif

static void report(const char *name, double (*fn)(void), int rounds) {
  double v[64];
  for (int r = 0; r < rounds; r++)
    v[r] = fn();
  qsort(v, (size_t)rounds, sizeof v[0], cmp_double);
  printf("%-22s %8.1f ns  (min %.1f, max %.1f)\n", name, v[rounds / 2], v[0],
         v[rounds - 1]);
}

int main(int argc, char **argv) {
  double millions = argc > 1 ? atof(argv[1]) : 2;
  int rounds = argc > 2 ? atoi(argv[2]) : 5;
  if (rounds < 1 || rounds > 64 || millions <= 0)
    return 2;
  iterations = (long)(millions * 1e6);
  char dir[] = "/tmp/contprof-label-cost.XXXXXX";
  if (!mkdtemp(dir))
    return 1;
  contprof_options o = {.output_dir = dir, .upload_period_s = 3600};
  if (contprof_start(&o) != 0)
    return 1;
  report("push+pop hit", push_pop_hit, rounds);
  report("push+pop new", push_pop_new, rounds);
#ifndef BUILD_OLD
  contprof_label_scope s;
  contprof_label_push("endpoint", "/held", &s);
  shared_set = contprof_labels_current();
  report("hold+release", hold_release, rounds);
  report("hold+release 2 threads", hold_release_2threads, rounds);
  contprof_label_pop(&s);
#endif
  contprof_stop();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  return system(cmd) == 0 ? 0 : 1;
}
