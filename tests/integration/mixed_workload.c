/* A program that gives every sampler work at once, for the valgrind smoke
 * test (test_valgrind.c) and the soak (bench/soak.sh):
 *   mixed_workload THREADS SECONDS [LIVE_KIB]
 * Each thread, until SECONDS have passed: burns CPU (mixed_cpu), allocates
 * and frees blocks of varied sizes while keeping a rotating window of about
 * LIVE_KIB (default 256) live (mixed_alloc), takes a mutex shared by all
 * threads and holds it briefly (mixed_lock) and sleeps a little
 * (mixed_sleep). Everything it allocates is freed before exit; each block
 * is checked, and the count of corrupted ones printed as mixed_errors=N,
 * with the bytes requested from the allocator (allocated_bytes=B). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WINDOW 64 /* live blocks per thread */

static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile uint64_t shared_counter;
static volatile double sink;
static double seconds;
static size_t live_bytes_per_thread;
static atomic_ulong errors, rounds;
static _Atomic uint64_t allocated_bytes;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static void mixed_cpu(int iterations) {
  double x = 1.0;
  for (int i = 0; i < iterations; i++)
    x = x * 1.0000001 + 0.5 / (x + 1.0);
  sink += x;
}

/* Replaces one block of the window; the old one must still hold its
 * pattern (the byte is its size's low byte). */
__attribute__((noinline)) static void
mixed_alloc(unsigned char **window, size_t *sizes, unsigned *rng) {
  unsigned slot = (*rng = *rng * 1103515245u + 12345u) >> 16;
  slot %= WINDOW;
  if (window[slot]) {
    unsigned char want = (unsigned char)sizes[slot];
    if (window[slot][0] != want || window[slot][sizes[slot] - 1] != want)
      atomic_fetch_add(&errors, 1);
    free(window[slot]);
  }
  size_t mean = live_bytes_per_thread / WINDOW;
  size_t size = 16 + (*rng >> 4) % (2 * mean + 1);
  unsigned char *p = (*rng & 1) ? malloc(size) : calloc(1, size);
  if (!p) {
    atomic_fetch_add(&errors, 1);
    window[slot] = NULL;
    return;
  }
  memset(p, (unsigned char)size, size);
  window[slot] = p;
  sizes[slot] = size;
  /* Short-lived too: allocated and freed at once. */
  char *tmp = malloc(64 + size / 4);
  atomic_fetch_add_explicit(&allocated_bytes, size + 64 + size / 4,
                            memory_order_relaxed);
  if (tmp) {
    tmp[0] = 1;
    sink += tmp[0];
  }
  free(tmp);
}

__attribute__((noinline)) static void mixed_lock(void) {
  pthread_mutex_lock(&shared_lock);
  for (int i = 0; i < 2000; i++)
    shared_counter = shared_counter + 1;
  pthread_mutex_unlock(&shared_lock);
}

__attribute__((noinline)) static void mixed_sleep(void) {
  struct timespec ts = {0, 200000};
  nanosleep(&ts, NULL);
}

static void *worker(void *arg) {
  unsigned rng = (unsigned)(uintptr_t)arg * 2654435761u + 1;
  unsigned char *window[WINDOW] = {0};
  size_t sizes[WINDOW] = {0};
  double end = now_s() + seconds;
  while (now_s() < end) {
    mixed_cpu(20000);
    for (int i = 0; i < 8; i++)
      mixed_alloc(window, sizes, &rng);
    mixed_lock();
    mixed_sleep();
    atomic_fetch_add(&rounds, 1);
  }
  for (int i = 0; i < WINDOW; i++)
    free(window[i]);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: mixed_workload THREADS SECONDS [LIVE_KIB]\n");
    return 2;
  }
  int threads = atoi(argv[1]);
  seconds = atof(argv[2]);
  live_bytes_per_thread = (size_t)(argc > 3 ? atol(argv[3]) : 256) << 10;
  if (threads < 1 || threads > 256 || seconds <= 0 ||
      live_bytes_per_thread < WINDOW) {
    fprintf(stderr, "mixed_workload: bad arguments\n");
    return 2;
  }
  pthread_t *tids = calloc((size_t)threads, sizeof *tids);
  if (!tids)
    return 1;
  for (int i = 0; i < threads; i++)
    if (pthread_create(&tids[i], NULL, worker, (void *)(uintptr_t)(i + 1))) {
      fprintf(stderr, "mixed_workload: pthread_create failed\n");
      return 1;
    }
  for (int i = 0; i < threads; i++)
    pthread_join(tids[i], NULL);
  free(tids);
  printf("mixed_errors=%lu rounds=%lu counter=%llu allocated_bytes=%llu\n",
         (unsigned long)atomic_load(&errors),
         (unsigned long)atomic_load(&rounds),
         (unsigned long long)shared_counter,
         (unsigned long long)atomic_load(&allocated_bytes));
  return atomic_load(&errors) ? 1 : 0;
}
