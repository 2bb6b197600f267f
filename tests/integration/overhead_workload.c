/* A program that would make a fixed-rate profiler expensive: 500 blocked
 * threads, and two that allocate small blocks as fast as they can for
 * SECONDS seconds. Prints the bytes the allocators asked for and the CPU
 * time they used (nearly all the process's), which the test compares with
 * the profiles' totals. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define IDLE_THREADS 500
#define ALLOCATORS 2

static volatile int stop;
static uint64_t bytes[ALLOCATORS], cpu_ns[ALLOCATORS];

static uint64_t clock_ns(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Keeps 64 blocks of 64 to 319 bytes alive and replaces them in turn. */
__attribute__((noinline)) void allocate_fast(int slot) {
  void *live[64] = {0};
  uint64_t n = 0, sum = 0;
  while (!stop) {
    for (int i = 0; i < 64; i++) {
      size_t size = 64 + (size_t)(n++ % 256);
      free(live[i]);
      live[i] = malloc(size);
      sum += size;
    }
  }
  for (int i = 0; i < 64; i++)
    free(live[i]);
  bytes[slot] = sum;
}

static void *allocator(void *arg) {
  int slot = (int)(intptr_t)arg;
  allocate_fast(slot);
  cpu_ns[slot] = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  return NULL;
}

static pthread_mutex_t idle_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle_cond = PTHREAD_COND_INITIALIZER;
static int idle_done;

/* Blocked until the end: no CPU of their own, only wall samples. */
static void *idle(void *arg) {
  (void)arg;
  pthread_mutex_lock(&idle_lock);
  while (!idle_done)
    pthread_cond_wait(&idle_cond, &idle_lock);
  pthread_mutex_unlock(&idle_lock);
  return NULL;
}

int main(int argc, char **argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 10;
  static pthread_t threads[IDLE_THREADS + ALLOCATORS];
  int n = 0;
  for (int i = 0; i < IDLE_THREADS; i++)
    pthread_create(&threads[n++], NULL, idle, NULL);
  for (int i = 0; i < ALLOCATORS; i++)
    pthread_create(&threads[n++], NULL, allocator, (void *)(intptr_t)i);
  uint64_t end = clock_ns(CLOCK_MONOTONIC) + (uint64_t)(seconds * 1e9);
  while (clock_ns(CLOCK_MONOTONIC) < end)
    usleep(10000);
  stop = 1;
  pthread_mutex_lock(&idle_lock);
  idle_done = 1;
  pthread_cond_broadcast(&idle_cond);
  pthread_mutex_unlock(&idle_lock);
  for (int i = 0; i < n; i++)
    pthread_join(threads[i], NULL);
  uint64_t total = 0, cpu = 0;
  for (int i = 0; i < ALLOCATORS; i++) {
    total += bytes[i];
    cpu += cpu_ns[i];
  }
  printf("alloc_bytes=%llu allocator_cpu_ns=%llu\n", (unsigned long long)total,
         (unsigned long long)cpu);
  return 0;
}
