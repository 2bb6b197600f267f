/* lock_work: the lock sampler's benchmark programs (bench/lock.sh).
 *
 *   lock_work pair N
 *     N uncontended pthread_mutex_lock/unlock pairs on one mutex, one thread
 *     (plus an idle one), timed in 5 blocks; prints "ns_per_pair X" (the
 *     median block).
 *   lock_work contended THREADS MUTEXES ITERATIONS
 *     THREADS threads each do ITERATIONS critical sections on a mutex drawn
 *     from MUTEXES (a few dozen ns of work inside, a little outside);
 *     prints "wall_s X contended Y" (Y: lock calls that found the mutex
 *     busy, counted with a try-lock before the lock call). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The mutex is reached through a volatile pointer so the compiler keeps
 * every call. */
static pthread_mutex_t one = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t *volatile one_ptr = &one;

static void *idle_thread(void *arg) {
  for (;;)
    pause();
  return arg;
}

static int run_pair(long n) {
  /* glibc takes a cheaper path for mutexes while a process has one thread;
   * the profiler runs threads of its own, and a program with contention has
   * several. An idle thread puts every variant on the multi-threaded path,
   * so the difference is the hook's alone. */
  pthread_t idle;
  pthread_create(&idle, NULL, idle_thread, NULL);
  double blocks[5];
  for (int b = 0; b < 5; b++) {
    pthread_mutex_t *m = one_ptr;
    uint64_t t0 = now_ns();
    for (long i = 0; i < n / 5; i++) {
      pthread_mutex_lock(m);
      pthread_mutex_unlock(m);
    }
    blocks[b] = (double)(now_ns() - t0) / (double)(n / 5);
  }
  qsort(blocks, 5, sizeof blocks[0], compare_double);
  printf("ns_per_pair %.3f\n", blocks[2]);
  return 0;
}

typedef struct slot {
  pthread_mutex_t m;
  volatile uint64_t counter;
  char pad[64];
} slot;

static slot *slots;
static int nslots;
static long iterations;
static uint64_t contended_total;

static void *contender(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg * 2654435761u;
  uint64_t contended = 0;
  volatile double x = 1.0;
  for (long i = 0; i < iterations; i++) {
    slot *s = &slots[rand_r(&seed) % (unsigned)nslots];
    if (pthread_mutex_trylock(&s->m) != 0) {
      contended++;
      pthread_mutex_lock(&s->m);
    }
    for (int k = 0; k < 8; k++) /* a few dozen ns inside */
      s->counter++;
    pthread_mutex_unlock(&s->m);
    for (int k = 0; k < 20; k++) /* and some outside */
      x = x * 1.0000001 + 1e-9;
  }
  __atomic_fetch_add(&contended_total, contended, __ATOMIC_RELAXED);
  return NULL;
}

static int run_contended(int threads, int mutexes, long iters) {
  nslots = mutexes;
  iterations = iters;
  slots = calloc((size_t)mutexes, sizeof *slots);
  for (int i = 0; i < mutexes; i++)
    pthread_mutex_init(&slots[i].m, NULL);
  pthread_t t[64];
  uint64_t t0 = now_ns();
  for (int i = 0; i < threads; i++)
    pthread_create(&t[i], NULL, contender, (void *)(uintptr_t)(i + 1));
  for (int i = 0; i < threads; i++)
    pthread_join(t[i], NULL);
  printf("wall_s %.6f contended %llu\n", (double)(now_ns() - t0) / 1e9,
         (unsigned long long)contended_total);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "pair") == 0)
    return run_pair(atol(argv[2]));
  if (argc == 5 && strcmp(argv[1], "contended") == 0) {
    int threads = atoi(argv[2]);
    if (threads < 1 || threads > 64)
      return 2;
    return run_contended(threads, atoi(argv[3]), atol(argv[4]));
  }
  fprintf(stderr, "usage: lock_work pair N | contended THREADS MUTEXES "
                  "ITERATIONS\n");
  return 2;
}
