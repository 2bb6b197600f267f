/* A workload with known call chains, for test_fp_profile: built twice, with
 * frame pointers (-fno-omit-frame-pointer -mno-omit-leaf-frame-pointer) and
 * without (-fomit-frame-pointer).
 *
 *   fp_workload SECONDS
 *
 * Spins for SECONDS of CPU time in main -> chain_top -> chain_mid ->
 * chain_leaf, and in main -> chain_sort -> (libc's qsort) -> chain_compare. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

volatile uint64_t chain_sink;

__attribute__((noinline)) void chain_leaf(void) {
  uint64_t x = chain_sink;
  for (int i = 0; i < 2000; i++)
    x = x * 6364136223846793005ull + 1442695040888963407ull;
  chain_sink = x;
}

__attribute__((noinline)) void chain_mid(int n) {
  for (int i = 0; i < n; i++)
    chain_leaf();
  __asm__ volatile("" ::: "memory"); /* not a tail call */
}

__attribute__((noinline)) void chain_top(int n) {
  chain_mid(n);
  __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) int chain_compare(const void *a, const void *b) {
  uint64_t x = chain_sink;
  for (int i = 0; i < 200; i++)
    x = x * 6364136223846793005ull + 1;
  chain_sink = x;
  int p = *(const int *)a, q = *(const int *)b;
  return (p > q) - (p < q);
}

__attribute__((noinline)) void chain_sort(void) {
  int v[256];
  for (int i = 0; i < 256; i++)
    v[i] = (i * 7919) % 256;
  qsort(v, 256, sizeof *v, chain_compare);
  chain_sink += (uint64_t)v[1];
  __asm__ volatile("" ::: "memory");
}

static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 1.0;
  double start = cpu_seconds();
  while (cpu_seconds() - start < seconds) {
    chain_top(200);
    chain_sort();
  }
  printf("done\n");
  return 0;
}
