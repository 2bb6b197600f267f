/* The overhead cap (CONTPROF_MAX_OVERHEAD_PCT, docs/overhead.md): on a
 * program that makes every sampler expensive (a 4 KiB allocation mean on two
 * threads allocating as fast as they can, 1 kHz CPU sampling, 500 threads
 * wall-sampled), the profiles report a high overhead without the cap; with a
 * 1% cap the reported overhead comes down to about 1% once the governor has
 * adapted, the profiles name the slowed rates, and the allocation and CPU
 * totals still match the truth the program measured itself. */
#include <inttypes.h>

#include "harness.h"
#include "test.h"

#define CONTPROF CP_BUILD_DIR "/contprof"
#define WORKLOAD CP_BUILD_DIR "/tests/overhead_workload"
#define PERIOD_S 5

typedef struct capped_run {
  run_result r;
  pprof_profile *p[64];
  size_t n;
  int seq[64];
  unsigned long long alloc_bytes, allocator_cpu_ns;
} capped_run;

static double comment_number(const pprof_profile *p, const char *key) {
  const char *v = profile_comment(p, key);
  return v ? strtod(v, NULL) : -1;
}

static void run_capped(const char *cap, const char *seconds, capped_run *cr) {
  char *dir = make_temp_dir("governor");
  char cap_env[64];
  snprintf(cap_env, sizeof cap_env, "CONTPROF_MAX_OVERHEAD_PCT=%s", cap);
  const char *env[] = {cap_env, "CONTPROF_ALLOC_SAMPLE_BYTES=4096",
                       "CONTPROF_UPLOAD_PERIOD=5", "CONTPROF_LOG_LEVEL=error",
                       NULL};
  char *argv[] = {CONTPROF, "run",    "--profiles",    "cpu,wall,alloc",
                  "--hz",   "1000",   "--output",      dir,
                  "--",     WORKLOAD, (char *)seconds, NULL};
  CHECK_EQ_INT(run_command(argv, env, &cr->r), 0);
  CHECK(WIFEXITED(cr->r.status) && WEXITSTATUS(cr->r.status) == 0);
  CHECK_EQ_INT(sscanf(cr->r.out, "alloc_bytes=%llu allocator_cpu_ns=%llu",
                      &cr->alloc_bytes, &cr->allocator_cpu_ns),
               2);
  cr->n = read_profiles(dir, cr->p, 64, NULL);
  for (size_t i = 0; i < cr->n; i++)
    cr->seq[i] = (int)comment_number(cr->p[i], "profile_seq");
  remove_dir(dir);
}

/* Sum of profiler_cpu_ns over that of process_cpu_ns, in percent, over the
 * profiles whose period started at or after `from_s` seconds, but for the
 * last one when `running` (it covers the program's exit: 500 threads
 * joined, the profiler's last export). */
static double overhead_from(const capped_run *cr, int from_s, int running) {
  int last = -1;
  for (size_t i = 0; i < cr->n; i++)
    last = cr->seq[i] > last ? cr->seq[i] : last;
  double profiler = 0, process = 0;
  for (size_t i = 0; i < cr->n; i++)
    if (cr->seq[i] * PERIOD_S >= from_s && !(running && cr->seq[i] == last)) {
      profiler += comment_number(cr->p[i], "profiler_cpu_ns");
      process += comment_number(cr->p[i], "process_cpu_ns");
    }
  return process > 0 ? 100 * profiler / process : -1;
}

static int64_t total_of(const capped_run *cr, const char *type,
                        const char *fn) {
  pprof_top top;
  char err[256];
  if (pprof_top_compute((const pprof_profile *const *)cr->p, cr->n, type, &top,
                        err, sizeof err) != 0) {
    fprintf(stderr, "top %s: %s\n", type, err);
    return -1;
  }
  int64_t v = fn ? top_cum(&top, fn) : top.total;
  pprof_top_free(&top);
  return v;
}

static void free_run(capped_run *cr) {
  for (size_t i = 0; i < cr->n; i++)
    pprof_profile_free(cr->p[i]);
}

static void check_totals(const capped_run *cr, const char *what) {
  double bytes = (double)total_of(cr, "alloc-space", NULL);
  /* All of it (samples the ring could not take are on [dropped], with
   * their values), against the CPU of every thread the profiler samples:
   * the process's (wait4) less its own threads'. */
  double cpu = (double)total_of(cr, "cpu-time", NULL);
  double own = 0;
  for (size_t i = 0; i < cr->n; i++)
    own += comment_number(cr->p[i], "profiler_threads_cpu_ns");
  double truth = rusage_cpu_seconds(&cr->r.usage) * 1e9 - own;
  printf("%s: alloc-space %.4g of %.4g bytes (%+.2f%%), cpu-time %.4g of "
         "%.4g ns (%+.2f%%; the allocators %.4g)\n",
         what, bytes, (double)cr->alloc_bytes,
         100 * (bytes / (double)cr->alloc_bytes - 1), cpu, truth,
         100 * (cpu / truth - 1), (double)cr->allocator_cpu_ns);
  CHECK_NEAR(bytes / (double)cr->alloc_bytes, 1.0, 0.05);
  CHECK_NEAR(cpu / truth, 1.0, 0.05);
}

static void test_uncapped_is_expensive(void) {
  capped_run *cr = calloc(1, sizeof *cr);
  run_capped("0", "10", cr);
  CHECK(cr->n >= 2);
  double all = overhead_from(cr, 0, 0);
  printf("no cap: reported overhead %.2f%% over %zu profiles\n", all, cr->n);
  CHECK(all > 5);
  for (size_t i = 0; i < cr->n; i++) {
    CHECK_EQ_STR(profile_comment(cr->p[i], "sampling.alloc"), "4096B");
    CHECK_EQ_STR(profile_comment(cr->p[i], "slowdown.alloc"), "1");
  }
  check_totals(cr, "no cap");
  free_run(cr);
  free(cr);
}

static void test_capped_adapts(void) {
  capped_run *cr = calloc(1, sizeof *cr);
  run_capped("1", "40", cr);
  CHECK(cr->n >= 5);
  for (size_t i = 0; i < cr->n; i++)
    printf("  profile %d: overhead %s%%, sampling cpu %s wall %s alloc %s\n",
           cr->seq[i], profile_comment(cr->p[i], "profiler_overhead_pct"),
           profile_comment(cr->p[i], "sampling.cpu"),
           profile_comment(cr->p[i], "sampling.wall"),
           profile_comment(cr->p[i], "sampling.alloc"));
  double first = overhead_from(cr, 0, 0), settled = overhead_from(cr, 10, 1);
  printf("cap 1%%: reported overhead %.2f%% over the run, %.2f%% from 10 s "
         "on to the exit (%zu profiles)\n",
         first, settled, cr->n);
  /* About 1%: the governor decides on 2-5 s windows and keeps 30% of room
   * when it speeds up again. */
  CHECK(settled >= 0 && settled <= 1.5);
  /* The profiles say what the rates became. */
  int slowed = 0;
  for (size_t i = 0; i < cr->n; i++) {
    double f = comment_number(cr->p[i], "slowdown.alloc");
    const char *rate = profile_comment(cr->p[i], "sampling.alloc");
    CHECK(f >= 1 && rate != NULL);
    if (cr->seq[i] * PERIOD_S >= 10 && f > 1) {
      char want[64];
      snprintf(want, sizeof want, "%.0fB", 4096 * f);
      CHECK_EQ_STR(rate, want);
      slowed++;
    }
    CHECK(comment_number(cr->p[i], "slowdown_max.alloc") >= f);
    CHECK_EQ_STR(profile_comment(cr->p[i], "max_overhead_pct"), "1");
  }
  CHECK(slowed >= 2);
  /* From the kernel-cost measurement on (CONTPROF_KERNEL_COST_AFTER, 10 s),
   * the kernel's side of the sampling signals is part of the reported
   * overhead the cap holds (docs/overhead.md). */
  int billed = 0;
  for (size_t i = 0; i < cr->n; i++)
    if (cr->seq[i] * PERIOD_S >= 15 &&
        comment_number(cr->p[i], "profiler_kernel_ns") > 0) {
      const char *costs = profile_comment(cr->p[i], "kernel_ns_per_signal");
      CHECK(costs && strstr(costs, "queued:0") == NULL);
      billed++;
    }
  printf("cap 1%%: %d profiles count the kernel's side\n", billed);
  CHECK(billed >= 1);
  check_totals(cr, "cap 1%");
  free_run(cr);
  free(cr);
}

TEST_MAIN(T(test_uncapped_is_expensive), T(test_capped_adapts))
