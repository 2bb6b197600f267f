/* cpu_work: a CPU-bound program that does a FIXED amount of work (not a fixed
 * time), so that any profiler overhead shows as a longer run.
 *
 *   cpu_work THREADS REQUESTS
 *
 * Each of THREADS threads serves REQUESTS "requests". A request goes down a
 * call chain about 30 frames deep (a dispatcher, a recursive handler and a few
 * distinct layers, as in a service) and at the bottom does one of three kinds
 * of work: sorting with qsort (libc, a comparator callback), hashing a buffer
 * (FNV-1a) and a floating-point kernel (libm). Prints a checksum so that
 * nothing is optimised away, the CPU time its threads used (each measures
 * its own clock, so a profiler's signal handling on them is included) and,
 * when a profiler runs threads of its own named "contprof-*", theirs; then
 * the same two for the second half of the requests (from the moment each
 * worker, and for the profiler's threads the first worker, was half way):
 * the steady state, after what a profiler does once per process at its
 * start (its first symbol and debug-information reads). */
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

typedef struct worker {
  uint64_t requests;
  double cpu_s;            /* the thread's own CPU time at its end */
  double half_cpu_s;       /* and half way through its requests */
  double *half_profiler_s; /* set: read the profiler's threads half way */
  uint64_t seed;
  uint64_t checksum;
  int32_t keys[512];
  unsigned char buf[4096];
} worker;

static uint64_t next_rand(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static int cmp_int(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

NOINLINE static uint64_t do_sort(worker *w) {
  for (size_t i = 0; i < 512; i++)
    w->keys[i] = (int32_t)next_rand(&w->seed);
  qsort(w->keys, 512, sizeof w->keys[0], cmp_int);
  return (uint64_t)w->keys[17] ^ (uint64_t)w->keys[400];
}

NOINLINE static uint64_t do_hash(worker *w) {
  uint64_t h = 1469598103934665603ull;
  for (int round = 0; round < 8; round++) {
    w->buf[next_rand(&w->seed) & 4095] ^= (unsigned char)round;
    for (size_t i = 0; i < sizeof w->buf; i++)
      h = (h ^ w->buf[i]) * 1099511628211ull;
  }
  return h;
}

NOINLINE static uint64_t do_math(worker *w) {
  double x = (double)(next_rand(&w->seed) & 1023) / 1024.0;
  for (int i = 0; i < 3000; i++)
    x = sin(x) * 0.5 + sqrt(x + 1.0) * 0.25;
  return (uint64_t)(x * 1e9);
}

NOINLINE static uint64_t leaf(worker *w, unsigned kind) {
  switch (kind % 3) {
  case 0:
    return do_sort(w);
  case 1:
    return do_hash(w);
  default:
    return do_math(w);
  }
}

/* The recursive middle of the stack: 24 frames. */
NOINLINE static uint64_t handle(worker *w, unsigned kind, int depth) {
  if (depth == 0)
    return leaf(w, kind);
  uint64_t r = handle(w, kind, depth - 1);
  __asm__ volatile("" ::: "memory"); /* keeps the call a real call */
  return r + (uint64_t)depth;
}

NOINLINE static uint64_t middleware_auth(worker *w, unsigned kind) {
  return handle(w, kind, 24);
}
NOINLINE static uint64_t middleware_log(worker *w, unsigned kind) {
  return middleware_auth(w, kind) ^ 0x9e3779b97f4a7c15ull;
}
NOINLINE static uint64_t route(worker *w, unsigned kind) {
  return middleware_log(w, kind);
}
NOINLINE static uint64_t dispatch(worker *w) {
  unsigned kind = (unsigned)next_rand(&w->seed);
  return route(w, kind);
}

static double clock_s(clockid_t clock) {
  struct timespec ts;
  if (clock_gettime(clock, &ts) != 0)
    return 0;
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double profiler_threads_cpu(void);

static void *serve(void *arg) {
  worker *w = arg;
  for (uint64_t i = 0; i < w->requests; i++) {
    if (i == w->requests / 2) {
      if (w->half_profiler_s)
        *w->half_profiler_s = profiler_threads_cpu();
      w->half_cpu_s = clock_s(CLOCK_THREAD_CPUTIME_ID);
    }
    w->checksum += dispatch(w);
  }
  w->cpu_s = clock_s(CLOCK_THREAD_CPUTIME_ID);
  return NULL;
}

/* The CPU time so far of this process's threads named contprof-*: a thread's
 * clock is made from its tid (CPUCLOCK_SCHED | CPUCLOCK_PERTHREAD). */
static double profiler_threads_cpu(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d)
    return 0;
  double sum = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    int tid = atoi(e->d_name);
    if (tid <= 0)
      continue;
    char path[64], comm[32] = "";
    snprintf(path, sizeof path, "/proc/self/task/%d/comm", tid);
    FILE *f = fopen(path, "r");
    if (!f)
      continue;
    if (!fgets(comm, sizeof comm, f))
      comm[0] = 0;
    fclose(f);
    if (strncmp(comm, "contprof", 8) == 0)
      sum += clock_s((clockid_t)((~(unsigned)tid << 3) | 6));
  }
  closedir(d);
  return sum;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: cpu_work THREADS REQUESTS\n");
    return 2;
  }
  int threads = atoi(argv[1]);
  uint64_t requests = strtoull(argv[2], NULL, 10);
  if (threads < 1 || threads > 64) {
    fprintf(stderr, "cpu_work: 1..64 threads\n");
    return 2;
  }
  pthread_t t[64];
  worker *w = calloc((size_t)threads, sizeof *w);
  if (!w)
    return 1;
  double half_profiler = 0;
  w[0].half_profiler_s = &half_profiler;
  for (int i = 0; i < threads; i++) {
    w[i].requests = requests;
    w[i].seed = 0x2545f4914f6cdd1dull * (uint64_t)(i + 1);
    memset(w[i].buf, i + 1, sizeof w[i].buf);
    if (pthread_create(&t[i], NULL, serve, &w[i]) != 0)
      return 1;
  }
  uint64_t sum = 0;
  double workers_cpu = 0, second_half = 0;
  for (int i = 0; i < threads; i++) {
    pthread_join(t[i], NULL);
    sum += w[i].checksum;
    workers_cpu += w[i].cpu_s;
    second_half += w[i].cpu_s - w[i].half_cpu_s;
  }
  double profiler = profiler_threads_cpu();
  printf("checksum %llu workers_cpu_s %.6f profiler_threads_cpu_s %.6f "
         "second_half_workers_cpu_s %.6f second_half_profiler_threads_cpu_s "
         "%.6f\n",
         (unsigned long long)sum, workers_cpu, profiler, second_half,
         profiler - half_profiler);
  free(w);
  return 0;
}
