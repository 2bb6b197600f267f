/* Explicit-link mode: a program linked with libcontprof.so (no LD_PRELOAD)
 * gets the malloc hooks too. It leaks 32 MiB from one function, flushes, frees
 * the leak and flushes again: the first profile holds the leak (at an 8 KiB
 * mean, 4096 samples: 1.6% standard error, 10% tolerance), the second does
 * not. */
#include <stdint.h>

#include "contprof/profiler.h"
#include "harness.h"
#include "test.h"

#define LEAK_BYTES (32u << 20)
#define BLOCK 4096

static void *blocks[LEAK_BYTES / BLOCK];

__attribute__((noinline)) static void linked_leak(void) {
  for (size_t i = 0; i < LEAK_BYTES / BLOCK; i++) {
    blocks[i] = malloc(BLOCK);
    __asm__ volatile("" ::"r"(blocks[i]) : "memory");
  }
}

static int64_t inuse_of(const char *path, const char *fn, int64_t *alloc) {
  pprof_profile *p;
  char err[256];
  if (pprof_read_file(path, &p, err, sizeof err) != 0)
    return -1;
  pprof_top top;
  int64_t v = -1;
  if (pprof_top_compute((const pprof_profile *const *)&p, 1, "inuse-space",
                        &top, err, sizeof err) == 0) {
    v = top_cum(&top, fn);
    pprof_top_free(&top);
  }
  if (pprof_top_compute((const pprof_profile *const *)&p, 1, "alloc-space",
                        &top, err, sizeof err) == 0) {
    *alloc = top_cum(&top, fn);
    pprof_top_free(&top);
  }
  pprof_profile_free(p);
  return v;
}

/* The profile whose file name ends in ".<seq>.pb.gz". */
static const char *profile_with_seq(char names[][512], size_t n, int seq) {
  char suffix[32];
  snprintf(suffix, sizeof suffix, ".%d.pb.gz", seq);
  for (size_t i = 0; i < n; i++) {
    size_t len = strlen(names[i]), sl = strlen(suffix);
    if (len > sl && strcmp(names[i] + len - sl, suffix) == 0)
      return names[i];
  }
  return NULL;
}

static void test_linked_leak_then_freed(void) {
  char *dir = make_temp_dir("alloc-api");
  setenv("CONTPROF_ALLOC_SAMPLE_BYTES", "8192", 1);
  contprof_options o = {
      .profiles = "alloc,heap", .output_dir = dir, .upload_period_s = 3600};
  CHECK_EQ_INT(contprof_start(&o), 0);
  linked_leak();
  CHECK_EQ_INT(contprof_flush(), 0);
  for (size_t i = 0; i < LEAK_BYTES / BLOCK; i++)
    free(blocks[i]);
  CHECK_EQ_INT(contprof_flush(), 0);
  CHECK_EQ_INT(contprof_stop(), 0);

  pprof_profile *p[8];
  char names[8][512];
  size_t n = read_profiles(dir, p, 8, names);
  for (size_t i = 0; i < n; i++)
    pprof_profile_free(p[i]);
  CHECK(n >= 2);
  const char *first = profile_with_seq(names, n, 0);
  const char *second = profile_with_seq(names, n, 1);
  CHECK(first && second);
  if (first && second) {
    int64_t alloc = 0, alloc2 = 0;
    int64_t live = inuse_of(first, "linked_leak", &alloc);
    int64_t after = inuse_of(second, "linked_leak", &alloc2);
    printf("linked: leak %.2f MiB live (truth 32), allocated %.2f MiB; "
           "after free %.2f MiB\n",
           (double)live / 1048576, (double)alloc / 1048576,
           (double)after / 1048576);
    CHECK_NEAR((double)live / LEAK_BYTES, 1.0, 0.10);
    CHECK_NEAR((double)alloc / LEAK_BYTES, 1.0, 0.10);
    CHECK_EQ_INT(after, 0);
  }
  remove_dir(dir);
}

TEST_MAIN(T(test_linked_leak_then_freed))
