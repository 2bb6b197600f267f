/* alloc_rate: the steady-state cost of allocation profiling. THREADS threads
 * replace small blocks (64-319 bytes, 64 alive each) as fast as they can for
 * SECONDS seconds; every second the main thread prints
 *   t=<s> bytes=<allocated so far> cpu_ns=<the process's CPU so far>
 * so that a script can take the bytes allocated per CPU-second of the whole
 * process (the profiler's threads included) over a window that leaves out
 * the start (where an adaptive profiler is still adapting).
 *
 *   alloc_rate THREADS SECONDS */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static atomic_int stop;
static _Atomic uint64_t allocated;

static uint64_t clock_ns(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

__attribute__((noinline)) static void *allocate(void *arg) {
  (void)arg;
  void *live[64] = {0};
  uint64_t n = 0;
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    uint64_t sum = 0;
    for (int round = 0; round < 64; round++)
      for (int i = 0; i < 64; i++) {
        size_t size = 64 + (size_t)(n++ % 256);
        free(live[i]);
        live[i] = malloc(size);
        sum += size;
      }
    atomic_fetch_add_explicit(&allocated, sum, memory_order_relaxed);
  }
  for (int i = 0; i < 64; i++)
    free(live[i]);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: alloc_rate THREADS SECONDS\n");
    return 2;
  }
  int threads = atoi(argv[1]), seconds = atoi(argv[2]);
  pthread_t t[64];
  if (threads < 1 || threads > 64)
    return 2;
  for (int i = 0; i < threads; i++)
    pthread_create(&t[i], NULL, allocate, NULL);
  uint64_t start = clock_ns(CLOCK_MONOTONIC);
  for (int s = 1; s <= seconds; s++) {
    uint64_t due = start + (uint64_t)s * 1000000000ull;
    uint64_t now;
    while ((now = clock_ns(CLOCK_MONOTONIC)) < due)
      usleep((useconds_t)((due - now) / 1000 + 1));
    printf("t=%d bytes=%llu cpu_ns=%llu\n", s,
           (unsigned long long)atomic_load(&allocated),
           (unsigned long long)clock_ns(CLOCK_PROCESS_CPUTIME_ID));
    fflush(stdout);
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < threads; i++)
    pthread_join(t[i], NULL);
  return 0;
}
