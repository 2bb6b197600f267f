/* What the primitives a sampler is made of cost on this machine: a system
 * call, a read of a thread's CPU clock (a system call: not in the vDSO), a
 * read of the monotonic clock (vDSO), and the CPU a thread is charged for
 * each timed sleep it wakes from (what the wall sampler's timer thread pays
 * per tick before doing anything; docs/benchmarks.md, "The allowance; what
 * a tick costs on this VM").
 * On hardware a system call is a few hundred cycles and a wakeup a few
 * microseconds; on some VMs they cost ten times that, and the profiler's
 * own figures with them.
 *
 *   primitive_cost [ROUNDS]      (default 5)
 *
 * Prints per round: ns per getppid, per CLOCK_THREAD_CPUTIME_ID read, per
 * CLOCK_MONOTONIC read, and us of the thread's CPU per wakeup from a 10 ms
 * and from an 80 ms absolute sleep on a condition variable (as the timer
 * thread sleeps); then the median of each. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_ROUNDS 64

static double now_ns(clockid_t c) {
  struct timespec t;
  clock_gettime(c, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/* ns per call of f over n calls, on the monotonic clock. */
static double per_call(void (*f)(void), int n) {
  double t0 = now_ns(CLOCK_MONOTONIC);
  for (int i = 0; i < n; i++)
    f();
  return (now_ns(CLOCK_MONOTONIC) - t0) / n;
}

static void do_getppid(void) { (void)syscall(SYS_getppid); }
static void do_thread_clock(void) { (void)now_ns(CLOCK_THREAD_CPUTIME_ID); }
static void do_monotonic(void) { (void)now_ns(CLOCK_MONOTONIC); }

/* us of this thread's CPU per wakeup from n absolute sleeps of step_ns. */
static double wake_cost(long step_ns, int n) {
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t c;
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(&c, &a);
  struct timespec at;
  clock_gettime(CLOCK_MONOTONIC, &at);
  double cpu0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
  pthread_mutex_lock(&m);
  for (int i = 0; i < n; i++) {
    at.tv_nsec += step_ns;
    while (at.tv_nsec >= 1000000000) {
      at.tv_nsec -= 1000000000;
      at.tv_sec++;
    }
    while (pthread_cond_timedwait(&c, &m, &at) == 0)
      ;
  }
  pthread_mutex_unlock(&m);
  pthread_cond_destroy(&c);
  return (now_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0) / n / 1000;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 5;
  if (rounds < 1 || rounds > MAX_ROUNDS)
    rounds = 5;
  double r[5][MAX_ROUNDS];
  for (int i = 0; i < rounds; i++) {
    r[0][i] = per_call(do_getppid, 200000);
    r[1][i] = per_call(do_thread_clock, 200000);
    r[2][i] = per_call(do_monotonic, 2000000);
    r[3][i] = wake_cost(10000000, 100);
    r[4][i] = wake_cost(80000000, 25);
    printf("round %d: getppid %.0f ns, thread CPU clock %.0f ns, monotonic "
           "%.0f ns, wakeup after 10 ms %.1f us, after 80 ms %.1f us\n",
           i + 1, r[0][i], r[1][i], r[2][i], r[3][i], r[4][i]);
  }
  printf("median of %d: getppid %.0f ns, thread CPU clock %.0f ns, monotonic "
         "%.0f ns, wakeup after 10 ms %.1f us, after 80 ms %.1f us\n",
         rounds, median(r[0], rounds), median(r[1], rounds),
         median(r[2], rounds), median(r[3], rounds), median(r[4], rounds));
  return 0;
}
