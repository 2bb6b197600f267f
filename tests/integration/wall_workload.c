/* Programs with known wall-clock behaviour, run unmodified under
 * `contprof run --profiles wall,cpu` by test_wall:
 *   mixed SECONDS      thread "mixed" alternates random 4-20 ms chunks of
 *                      sleeping (in sleep_phase) and spinning (in
 *                      compute_phase) half and half; thread "waiter" waits on
 *                      a condition variable (in wait_forever) the whole time.
 *                      Prints the true time of each phase and each thread's
 *                      tid and lifetime.
 *   waiters N SECONDS  N threads wait on a condition variable (in
 *                      wait_forever) for SECONDS; prints each tid and
 *                      lifetime.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define KEEP_FRAME() __asm__ volatile("" ::: "memory")

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static pid_t gettid_(void) { return (pid_t)syscall(SYS_gettid); }

static void sleep_until(uint64_t deadline_ns) {
  struct timespec ts = {(time_t)(deadline_ns / 1000000000ull),
                        (long)(deadline_ns % 1000000000ull)};
  /* Profiling signals interrupt the sleep: sleep on to the same deadline. */
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0)
    ;
}

static volatile double sink;

__attribute__((noinline)) void sleep_phase(uint64_t ns) {
  sleep_until(now_ns() + ns);
  KEEP_FRAME();
}

__attribute__((noinline)) void compute_phase(uint64_t ns) {
  uint64_t end = now_ns() + ns;
  double x = 1;
  while (now_ns() < end)
    for (int i = 0; i < 100; i++)
      x = x * 1.0000001 + 0.5;
  sink += x;
  KEEP_FRAME();
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int done;

__attribute__((noinline)) void wait_forever(void) {
  pthread_mutex_lock(&mu);
  while (!done)
    pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  KEEP_FRAME();
}

typedef struct thread_report {
  pid_t tid;
  uint64_t lifetime_ns;
  uint64_t cpu_ns; /* the thread's own CPU time at its end */
} thread_report;

static uint64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t run_ns;
static uint64_t truth_sleep, truth_compute;

static void *mixed_thread(void *arg) {
  thread_report *r = arg;
  uint64_t start = now_ns();
  r->tid = gettid_();
  unsigned seed = (unsigned)start;
  while (now_ns() - start < run_ns) {
    uint64_t chunk = 4000000 + (uint64_t)(rand_r(&seed) % 16000) * 1000;
    uint64_t t0 = now_ns();
    if (rand_r(&seed) & 1) {
      sleep_phase(chunk);
      truth_sleep += now_ns() - t0;
    } else {
      compute_phase(chunk);
      truth_compute += now_ns() - t0;
    }
  }
  r->lifetime_ns = now_ns() - start;
  return NULL;
}

static void *waiter_thread(void *arg) {
  thread_report *r = arg;
  uint64_t start = now_ns();
  r->tid = gettid_();
  wait_forever();
  r->lifetime_ns = now_ns() - start;
  r->cpu_ns = thread_cpu_ns();
  return NULL;
}

static void release_waiters(void) {
  pthread_mutex_lock(&mu);
  done = 1;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
}

static int mixed(double seconds) {
  run_ns = (uint64_t)(seconds * 1e9);
  thread_report rm = {0}, rw = {0};
  pthread_t tm, tw;
  pthread_create(&tw, NULL, waiter_thread, &rw);
  pthread_create(&tm, NULL, mixed_thread, &rm);
  pthread_join(tm, NULL);
  release_waiters();
  pthread_join(tw, NULL);
  printf("sleep_ns=%llu compute_ns=%llu mixed_tid=%d mixed_ns=%llu "
         "waiter_tid=%d waiter_ns=%llu waiter_cpu_ns=%llu\n",
         (unsigned long long)truth_sleep, (unsigned long long)truth_compute,
         (int)rm.tid, (unsigned long long)rm.lifetime_ns, (int)rw.tid,
         (unsigned long long)rw.lifetime_ns, (unsigned long long)rw.cpu_ns);
  return 0;
}

static int waiters(int n, double seconds) {
  pthread_t *t = calloc((size_t)n, sizeof *t);
  thread_report *r = calloc((size_t)n, sizeof *r);
  for (int i = 0; i < n; i++)
    pthread_create(&t[i], NULL, waiter_thread, &r[i]);
  sleep_until(now_ns() + (uint64_t)(seconds * 1e9));
  release_waiters();
  for (int i = 0; i < n; i++)
    pthread_join(t[i], NULL);
  for (int i = 0; i < n; i++)
    printf("tid=%d ns=%llu\n", (int)r[i].tid,
           (unsigned long long)r[i].lifetime_ns);
  free(t);
  free(r);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "mixed") == 0)
    return mixed(atof(argv[2]));
  if (argc == 4 && strcmp(argv[1], "waiters") == 0)
    return waiters(atoi(argv[2]), atof(argv[3]));
  fprintf(stderr, "usage: wall_workload mixed SECONDS | waiters N SECONDS\n");
  return 2;
}
