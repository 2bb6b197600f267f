/* CONTPROF_UNWIND on whole programs: fp_workload, built with frame pointers
 * and without, under `contprof run` with each unwinder. The decoded CPU
 * profile's stacks must be the program's call chains: samples in
 * chain_leaf go chain_leaf <- chain_mid <- chain_top <- main, samples in
 * chain_compare reach chain_sort <- main through libc's qsort (built
 * without frame pointers on Debian 12). auto and dwarf must get (nearly)
 * all of them right on both builds; fp, the rbp chain alone, most of them
 * on the build with frame pointers only (see docs/signals.md, "Frame
 * pointers"). */
#include <string.h>

#include "harness.h"
#include "test.h"

#define CONTPROF CP_BUILD_DIR "/contprof"

/* The functions of sample s, leaf first (one per location; the first
 * function of an inline chain). */
static size_t stack_names(const pprof_profile *p,
                          const Perftools__Profiles__Sample *s,
                          const char **names, size_t max) {
  size_t n = 0;
  for (size_t i = 0; i < s->n_location_id && n < max; i++) {
    const Perftools__Profiles__Location *loc =
        pprof_find_location(p, s->location_id[i]);
    const char *fn[8];
    size_t k = loc ? pprof_location_functions(p, loc, fn, 8) : 0;
    names[n++] = k ? fn[k - 1] : "?";
  }
  return n;
}

/* Whether names[i..] starts with the NULL-terminated want[]. */
static int starts_with(const char **names, size_t n, size_t i,
                       const char *const *want) {
  for (; *want; want++, i++)
    if (i >= n || strcmp(names[i], *want) != 0)
      return 0;
  return 1;
}

typedef struct chain_counts {
  int64_t leaf, leaf_right, leaf_outer_right, compare, compare_right;
} chain_counts;

static void run_one(const char *workload, const char *mode, chain_counts *c) {
  memset(c, 0, sizeof *c);
  char *dir = make_temp_dir("fpwalk");
  char env_mode[64];
  snprintf(env_mode, sizeof env_mode, "CONTPROF_UNWIND=%s", mode);
  const char *env[] = {env_mode, "CONTPROF_CPU_HZ=250", NULL};
  char *argv[] = {CONTPROF,         "run", "--output", dir, "--",
                  (char *)workload, "2",   NULL};
  run_result *r = calloc(1, sizeof *r);
  CHECK_EQ_INT(run_command(argv, env, r), 0);
  CHECK(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0);
  pprof_profile *profiles[4];
  size_t np = read_profiles(dir, profiles, 4, NULL);
  CHECK_EQ_INT((int)np, 1);
  for (size_t k = 0; k < np; k++) {
    const pprof_profile *p = profiles[k];
    int cpu = pprof_sample_type_index(p, "cpu-time");
    if (cpu < 0)
      cpu = 0;
    for (size_t i = 0; i < p->n_sample; i++) {
      const Perftools__Profiles__Sample *s = p->sample[i];
      const char *names[160];
      size_t n = stack_names(p, s, names, 160);
      int64_t w = (size_t)cpu < s->n_value ? s->value[cpu] : 0;
      static const char *const leaf_chain[] = {"chain_leaf", "chain_mid",
                                               "chain_top", "main", NULL};
      static const char *const sort_chain[] = {"chain_sort", "main", NULL};
      if (n && strcmp(names[0], "chain_leaf") == 0) {
        c->leaf += w;
        if (starts_with(names, n, 0, leaf_chain))
          c->leaf_right += w;
        static const char *const outer[] = {"chain_top", "main", NULL};
        for (size_t j = 1; j < n; j++)
          if (starts_with(names, n, j, outer)) {
            c->leaf_outer_right += w;
            break;
          }
      } else if (n && strcmp(names[0], "chain_compare") == 0) {
        c->compare += w;
        for (size_t j = 1; j < n; j++)
          if (starts_with(names, n, j, sort_chain)) {
            c->compare_right += w;
            break;
          }
      }
    }
    pprof_profile_free(profiles[k]);
  }
  printf("%s, %s: chain_leaf %.1f%% of %lld right, chain_compare %.1f%% of "
         "%lld right\n",
         strrchr(workload, '/') + 1, mode,
         c->leaf ? 100.0 * (double)c->leaf_right / (double)c->leaf : 0.0,
         (long long)c->leaf,
         c->compare ? 100.0 * (double)c->compare_right / (double)c->compare
                    : 0.0,
         (long long)c->compare);
  free(r);
  remove_dir(dir);
}

/* At least `pct` percent of both kinds of sample have their whole chain. */
static void check_right(const chain_counts *c, double pct) {
  CHECK(c->leaf > 0 && c->compare > 0);
  CHECK((double)c->leaf_right >= pct / 100 * (double)c->leaf);
  CHECK((double)c->compare_right >= pct / 100 * (double)c->compare);
}

static void test_with_frame_pointers(void) {
  chain_counts c;
  run_one(CP_BUILD_DIR "/tests/fp_workload_fp", "auto", &c);
  check_right(&c, 99);
  run_one(CP_BUILD_DIR "/tests/fp_workload_fp", "dwarf", &c);
  check_right(&c, 99);
  /* The rbp chain alone loses the caller of a leaf that makes no frame
   * (GCC 12 makes none for chain_leaf, which uses no stack, despite
   * -mno-omit-leaf-frame-pointer) or is caught in its prologue or
   * epilogue, and the chain through qsort; the callers above stay. */
  run_one(CP_BUILD_DIR "/tests/fp_workload_fp", "fp", &c);
  CHECK(c.leaf > 0 && (double)c.leaf_outer_right >= 0.8 * (double)c.leaf);
}

static void test_without_frame_pointers(void) {
  chain_counts c;
  run_one(CP_BUILD_DIR "/tests/fp_workload_nofp", "auto", &c);
  check_right(&c, 99);
  run_one(CP_BUILD_DIR "/tests/fp_workload_nofp", "dwarf", &c);
  check_right(&c, 99);
  /* fp on code without frame pointers: wrong stacks, never a crash (the
   * run above exits 0). */
  run_one(CP_BUILD_DIR "/tests/fp_workload_nofp", "fp", &c);
}

TEST_MAIN(T(test_with_frame_pointers), T(test_without_frame_pointers))
