/* A library the workload dlopens while it is being profiled: its functions,
 * static ones included, must be symbolized. */
#include <stdint.h>
#include <time.h>

static uint64_t cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static volatile double sink;

__attribute__((noinline)) static void plugin_static_spin(uint64_t ns) {
  uint64_t end = cpu_ns() + ns;
  double x = 1;
  while (cpu_ns() < end)
    for (int i = 0; i < 300; i++)
      x = x * 1.0000001 + 0.5;
  sink += x;
}

void plugin_work(uint64_t ns) {
  plugin_static_spin(ns);
  __asm__ volatile("" ::: "memory");
}
