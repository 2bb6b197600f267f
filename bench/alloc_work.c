/* alloc_work: a malloc/free-heavy multithreaded program, the worst case for
 * an allocation profiler: each thread allocates small and medium blocks
 * (16 B .. 4 KiB, mostly small), touches them, and frees each one a few
 * dozen allocations later.
 *
 *   alloc_work THREADS MILLION_ALLOCATIONS_PER_THREAD
 *
 * Prints the bytes allocated and the CPU time the threads measured on their
 * own clocks (what the application's threads paid: the hooks and the
 * sampling on them; not start-up, exit or the profiler's own threads). Used
 * by bench/alloc_overhead.sh. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WINDOW 64

static uint64_t per_thread;
static _Atomic uint64_t workers_cpu_ns;

static void *work(void *arg) {
  uint64_t x = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
  char *window[WINDOW] = {0};
  uint64_t bytes = 0;
  for (uint64_t i = 0; i < per_thread; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    /* 7 of 8 small (16..272 B), 1 of 8 up to 4 KiB. */
    size_t n = (x & 7) ? 16 + (x >> 8) % 256 : 16 + (x >> 8) % 4080;
    char *p = malloc(n);
    p[0] = (char)i;
    p[n - 1] = (char)n;
    bytes += n;
    free(window[i % WINDOW]);
    window[i % WINDOW] = p;
  }
  for (int i = 0; i < WINDOW; i++)
    free(window[i]);
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  workers_cpu_ns += (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
  return (void *)(uintptr_t)bytes;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: alloc_work THREADS MILLION_ALLOCS_PER_THREAD\n");
    return 2;
  }
  int threads = atoi(argv[1]);
  per_thread = (uint64_t)(atof(argv[2]) * 1e6);
  if (threads < 1 || threads > 256)
    return 2;
  pthread_t t[256];
  for (int i = 0; i < threads; i++)
    pthread_create(&t[i], NULL, work, (void *)(uintptr_t)(i + 1));
  uint64_t total = 0;
  for (int i = 0; i < threads; i++) {
    void *r;
    pthread_join(t[i], &r);
    total += (uint64_t)(uintptr_t)r;
  }
  printf("bytes=%llu workers_cpu_s=%.6f\n", (unsigned long long)total,
         (double)workers_cpu_ns * 1e-9);
  return 0;
}
