/* A program whose hot spots are two always-inlined helpers (2:1 in time,
 * measured and printed),
 * for test_lines: built -O2 -g, the profile must show them as inlined Lines
 * inside driver. The BODY markers tell the test the helpers' line ranges. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t sink;

/* HEAVY_BEGIN */
static inline __attribute__((always_inline)) uint64_t heavy_mix(uint64_t x,
                                                                long n) {
  for (long i = 0; i < n; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    x ^= x >> 29;
    __asm__ volatile("" : "+r"(x));
  }
  return x;
}
/* HEAVY_END */

/* LIGHT_BEGIN */
static inline __attribute__((always_inline)) uint64_t light_mix(uint64_t x,
                                                                long n) {
  for (long i = 0; i < n; i++) {
    x = x * 2862933555777941757ull + 3037000493ull;
    x ^= x >> 31;
    __asm__ volatile("" : "+r"(x));
  }
  return x;
}
/* LIGHT_END */

static uint64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The CPU time each helper took: the truth the profile's shares are
 * checked against (2:1 alone; a loaded machine moves it). */
static uint64_t heavy_ns, light_ns;

__attribute__((noinline)) static uint64_t driver(uint64_t x, long n) {
  uint64_t t0 = thread_cpu_ns();
  x = heavy_mix(x, 2 * n);
  uint64_t t1 = thread_cpu_ns();
  x = light_mix(x, n);
  uint64_t t2 = thread_cpu_ns();
  heavy_ns += t1 - t0;
  light_ns += t2 - t1;
  return x;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts); /* CPU seconds: samples */
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* inline_workload [SECONDS] [fork]: runs the helpers for SECONDS of CPU
 * (3); with "fork", first forks a child that exits at once. */
int main(int argc, char **argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 3;
  if (argc > 2 && strcmp(argv[2], "fork") == 0) {
    pid_t child = fork();
    if (child == 0)
      _exit(0);
    if (child > 0)
      waitpid(child, NULL, 0);
  }
  double end = now() + seconds;
  uint64_t x = 1;
  while (now() < end)
    x = driver(x, 200000);
  sink = x;
  printf("done heavy_ns=%llu light_ns=%llu\n", (unsigned long long)heavy_ns,
         (unsigned long long)light_ns);
  return 0;
}
