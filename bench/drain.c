/* The aggregator's drain cost per sample: cp_gen_add over one period of the
 * simulated stream of bench/stackgen.h (96,000 CPU samples of 16 threads),
 * pre-generated so that only the call tree is timed.
 *
 *   drain DIST ZIPF_S REPEATS  ->  RESULT lines, one per repeat
 *
 * Each repeat adds the period into a fresh generation ("cold": every path,
 * row and context is new the first time, as at the start of a period), then
 * adds it once more into the same generation ("warm": every lookup hits, as
 * for recurring stacks later in a period). Uses only the stable call-tree
 * interface, so that bench/drain.sh builds it against the base commit too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aggregator/calltree.h"
#include "stackgen.h"

/* The thread's CPU time: on a shared machine, time spent preempted would
 * swamp the differences looked for (a cache miss per frame is still
 * counted). */
static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
  const char *dist = argc > 1 ? argv[1] : "zipf";
  double s = argc > 2 ? atof(argv[2]) : 1.0;
  int repeats = argc > 3 ? atoi(argv[3]) : 5;
  stackgen_init(strcmp(dist, "uniform") != 0, s);
  /* replay: the stacks of a real profile, from the catalogue file named by
   * STORAGE_REPLAY (bench/stack_stats.py --catalogue). */
  if (strcmp(dist, "replay") == 0 && stackgen_replay(getenv("STORAGE_REPLAY")))
    return 1;
  const size_t n = (size_t)threads * (size_t)hz * 60;
  uint64_t *frames = malloc(n * MAX_FRAMES * sizeof *frames);
  size_t *depth = malloc(n * sizeof *depth);
  cp_sample_key *keys = malloc(n * sizeof *keys);
  int64_t *quantity = malloc(n * sizeof *quantity);
  thread_state *t = calloc((size_t)threads, sizeof *t);
  if (!frames || !depth || !keys || !quantity || !t)
    return 1;
  threads_reset(t);
  for (size_t k = 0; k < n; k++)
    quantity[k] = cpu_quantity();
  for (size_t k = 0; k < n; k++)
    depth[k] = next_sample(t, (int)(k % (size_t)threads),
                           frames + k * MAX_FRAMES, &keys[k]);
  for (int r = 0; r < repeats; r++) {
    cp_generation *g = cp_gen_create((uint64_t)r + 1, (size_t)64 << 20);
    double times[2];
    for (int pass = 0; pass < 2; pass++) {
      double t0 = now_ns();
      for (size_t k = 0; k < n; k++)
        cp_gen_add(g, frames + k * MAX_FRAMES, depth[k], 0, &keys[k],
                   CONTPROF_KIND_CPU, 1, quantity[k]);
      times[pass] = (now_ns() - t0) / (double)n;
    }
    printf("RESULT drain dist=%s zipf_s=%.2f repeat=%d samples=%zu "
           "cold_ns_per_sample=%.1f warm_ns_per_sample=%.1f overflowed=%llu\n",
           dist, s, r, n, times[0], times[1],
           (unsigned long long)cp_gen_samples_overflowed(g));
    fflush(stdout);
    cp_gen_destroy(g);
  }
  return 0;
}
