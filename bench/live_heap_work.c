/* live_heap_work: malloc/free churn beside a large live heap. The main
 * thread first allocates LIVE_MIB MiB in 4 KiB blocks and keeps them; then
 * 2 threads each make MILLION_PAIRS million malloc/free pairs of 16 B ..
 * 4 KiB blocks, each freed 32 allocations later. An allocation profiler
 * that tracks sampled live blocks holds LIVE_MIB MiB / mean of them while
 * the threads' frees ask whether theirs is one.
 *
 *   live_heap_work LIVE_MIB MILLION_PAIRS
 *
 * Prints the CPU time the two threads measured on their own clocks. Used
 * by bench/paired_builds.sh. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define THREADS 2

static long pairs;
static double workers_cpu;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static double thread_cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void *churn(void *arg) {
  uint64_t x = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
  void *ring[32] = {0};
  double start = thread_cpu_s();
  for (long i = 0; i < pairs; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    /* Mostly 16..271 bytes, one in 16 up to 4 KiB. */
    size_t n = 16 + (x % 256) * (((x >> 20) % 16) == 0 ? 16 : 1);
    int k = (int)(i & 31);
    free(ring[k]);
    ring[k] = malloc(n);
    if (ring[k])
      ((volatile char *)ring[k])[0] = 1;
  }
  for (int k = 0; k < 32; k++)
    free(ring[k]);
  double used = thread_cpu_s() - start;
  pthread_mutex_lock(&lock);
  workers_cpu += used;
  pthread_mutex_unlock(&lock);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: live_heap_work LIVE_MIB MILLION_PAIRS\n");
    return 2;
  }
  long live_mib = atol(argv[1]);
  pairs = atol(argv[2]) * 1000000;
  size_t nblocks = (size_t)(live_mib > 0 ? live_mib : 0) * 256;
  void **keep = malloc((nblocks ? nblocks : 1) * sizeof *keep);
  if (!keep)
    return 1;
  for (size_t i = 0; i < nblocks; i++) {
    keep[i] = malloc(4096);
    if (!keep[i])
      return 1;
    memset(keep[i], 1, 64);
  }
  pthread_t t[THREADS];
  for (uintptr_t i = 0; i < THREADS; i++)
    pthread_create(&t[i], NULL, churn, (void *)(i + 1));
  for (int i = 0; i < THREADS; i++)
    pthread_join(t[i], NULL);
  printf("live_mib=%ld workers_cpu_s=%.6f\n", live_mib, workers_cpu);
  for (size_t i = 0; i < nblocks; i++)
    free(keep[i]);
  free(keep);
  return 0;
}
