/* What a thread's CPU-time sampling clock costs the kernel at each context
 * switch, with no profiler loaded (docs/signals.md, "Which clock"; docs/
 * benchmarks.md, "Which clock: perf task clocks and context switches").
 *
 * Two threads hand a byte back and forth through two pipes, so that each
 * turn is two switches; the process's CPU time per turn is measured with
 * each thread carrying no clock, a perf task clock (PERF_COUNT_SW_TASK_CLOCK,
 * as the CPU sampler arms it, at a 10 ms period), or a POSIX timer on its CPU
 * clock (SIGEV_THREAD_ID, 10 ms). The threads do no work, so no signal comes
 * in a round: what differs is the kernel's work at each switch. Variants run
 * interleaved, rotating which goes first, ROUNDS times; both threads on one
 * CPU ("pinned": each switch hands the CPU over) and free (the usual case of
 * a server: the woken thread starts on the other CPU, which was idle).
 *
 *   switch_cost [ROUNDS [TURNS]]      (default 11 rounds of 100000 turns)
 *
 * Prints per round the ns of CPU per switch of each variant, then the median
 * of the per-round differences to "none" [p25, p75]. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "sample_clocks.h"

enum { CLOCK_NONE, CLOCK_PERF, CLOCK_POSIX, NCLOCKS };
static const char *const clock_names[NCLOCKS] = {"none", "perf", "posix"};
#define PERIOD_NS 10000000

typedef struct turns {
  int to_peer[2], to_main[2];
  long n;
  int clock;
  int pinned;
} turns;

static void pin_to_cpu0(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(0, &set);
  sched_setaffinity(0, sizeof set, &set);
}

/* The calling thread's clock of the given kind; returns a descriptor or
 * timer to undo (perf: fd, posix: index into timers), -1 for none. */
static timer_t timers[2];
static int arm(int clock, int which) {
  pid_t tid = (pid_t)syscall(SYS_gettid);
  if (clock == CLOCK_PERF) {
    int fd = bench_perf_clock(tid, PERIOD_NS, SIGPROF, 1, NULL);
    if (fd < 0) {
      perror("switch_cost: perf_event_open");
      exit(1);
    }
    return fd;
  }
  if (clock == CLOCK_POSIX) {
    if (bench_posix_clock(tid, PERIOD_NS, SIGPROF, &timers[which]) != 0) {
      perror("switch_cost: timer_create");
      exit(1);
    }
    return which;
  }
  return -1;
}

static void disarm(int clock, int handle) {
  if (clock == CLOCK_PERF)
    close(handle);
  else if (clock == CLOCK_POSIX)
    timer_delete(timers[handle]);
}

static void *peer(void *arg) {
  turns *t = arg;
  if (t->pinned)
    pin_to_cpu0();
  int h = arm(t->clock, 1);
  char c;
  for (long i = 0; i < t->n; i++)
    if (read(t->to_peer[0], &c, 1) != 1 || write(t->to_main[1], &c, 1) != 1)
      break;
  disarm(t->clock, h);
  return NULL;
}

static double now_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* CPU ns of the process per switch (two per turn). */
static double run(int clock, int pinned, long n) {
  turns t = {.n = n, .clock = clock, .pinned = pinned};
  if (pipe(t.to_peer) != 0 || pipe(t.to_main) != 0) {
    perror("switch_cost: pipe");
    exit(1);
  }
  cpu_set_t all;
  sched_getaffinity(0, sizeof all, &all);
  if (pinned)
    pin_to_cpu0();
  pthread_t th;
  pthread_create(&th, NULL, peer, &t);
  int h = arm(clock, 0);
  char c = 'x';
  /* Both clocks armed before the measured turns. */
  usleep(10000);
  double cpu0 = now_ns(CLOCK_PROCESS_CPUTIME_ID);
  for (long i = 0; i < n; i++)
    if (write(t.to_peer[1], &c, 1) != 1 || read(t.to_main[0], &c, 1) != 1)
      break;
  double cpu = now_ns(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
  pthread_join(th, NULL);
  disarm(clock, h);
  sched_setaffinity(0, sizeof all, &all);
  for (int i = 0; i < 2; i++)
    close(t.to_peer[i]), close(t.to_main[i]);
  return cpu / (2.0 * (double)n);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double quantile(double *v, int n, double q) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return v[(int)(q * (n - 1) + 0.5)];
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 11;
  long n = argc > 2 ? atol(argv[2]) : 100000;
  if (rounds < 1 || rounds > 1000 || n < 1) {
    fprintf(stderr, "usage: switch_cost [ROUNDS [TURNS]]\n");
    return 2;
  }
  signal(SIGPROF, SIG_IGN);
  for (int pinned = 1; pinned >= 0; pinned--) {
    double *diff[NCLOCKS];
    for (int c = 0; c < NCLOCKS; c++)
      diff[c] = calloc((size_t)rounds, sizeof(double));
    printf("%s: ns of CPU per switch, per round (none perf posix)\n",
           pinned ? "pinned to one CPU" : "free");
    for (int r = 0; r < rounds; r++) {
      double ns[NCLOCKS];
      for (int k = 0; k < NCLOCKS; k++) {
        int c = (k + r) % NCLOCKS;
        ns[c] = run(c, pinned, n);
      }
      printf("  round %2d: %7.0f %7.0f %7.0f\n", r + 1, ns[0], ns[1], ns[2]);
      for (int c = 0; c < NCLOCKS; c++)
        diff[c][r] = ns[c] - ns[CLOCK_NONE];
    }
    for (int c = 1; c < NCLOCKS; c++)
      printf("  %s - none: %+.0f ns per switch [%+.0f, %+.0f]\n",
             clock_names[c], quantile(diff[c], rounds, 0.5),
             quantile(diff[c], rounds, 0.25), quantile(diff[c], rounds, 0.75));
    for (int c = 0; c < NCLOCKS; c++)
      free(diff[c]);
  }
  return 0;
}
