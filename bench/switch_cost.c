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
 * Then preemptions: a thread works a fixed loop with one clock or none
 * while another, on the same CPU, sleeps 20 us at a time and preempts it at
 * each wake (a server sharing its CPU with its clients: an nginx worker and
 * wrk); the clock's period is 100 s, so that no sample comes and what
 * differs is again the kernel's work at each switch. The process's CPU for
 * the loop, over no clock's in the same round, divided by the worker's
 * preemptions, is the clock's cost per preemption.
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
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "sample_clocks.h"

enum { CLOCK_NONE, CLOCK_PERF, CLOCK_POSIX, NCLOCKS };
static const char *const clock_names[NCLOCKS] = {"none", "perf", "posix"};
#define PERIOD_NS 10000000
#define LONG_PERIOD_NS 100000000000ull /* no sample in a run */

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
static int arm(int clock, int which, uint64_t period_ns) {
  pid_t tid = (pid_t)syscall(SYS_gettid);
  if (clock == CLOCK_PERF) {
    int fd = bench_perf_clock(tid, period_ns, SIGPROF, 1, NULL);
    if (fd < 0) {
      perror("switch_cost: perf_event_open");
      exit(1);
    }
    return fd;
  }
  if (clock == CLOCK_POSIX) {
    if (bench_posix_clock(tid, period_ns, SIGPROF, &timers[which]) != 0) {
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
  int h = arm(t->clock, 1, PERIOD_NS);
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
  int h = arm(clock, 0, PERIOD_NS);
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

static _Atomic int sleeper_stop;

static void *sleeper(void *arg) {
  (void)arg;
  pin_to_cpu0();
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  while (!atomic_load(&sleeper_stop)) {
    struct timespec nap = {0, 20000};
    nanosleep(&nap, NULL);
  }
  return NULL;
}

static volatile uint64_t loop_sink;

/* One round of the preempted case: on CPU 0 with the sleeper, the calling
 * thread works slices of a fixed loop, each with one clock or none in turn
 * (slices of about 5 ms, so that the VM's speed, which drifts over seconds,
 * falls on the three alike). Per clock: the process's CPU ns and the
 * thread's own, and its preemptions, summed over its slices. */
static void run_preempted(long slices, long loops, double cpu[NCLOCKS],
                          double own[NCLOCKS], double preempted[NCLOCKS]) {
  cpu_set_t all;
  sched_getaffinity(0, sizeof all, &all);
  pin_to_cpu0();
  atomic_store(&sleeper_stop, 0);
  pthread_t th;
  pthread_create(&th, NULL, sleeper, NULL);
  for (int c = 0; c < NCLOCKS; c++)
    cpu[c] = own[c] = preempted[c] = 0;
  uint64_t x = 1;
  for (long k = 0; k < slices * NCLOCKS; k++) {
    int c = (int)(k % NCLOCKS);
    int h = arm(c, 0, LONG_PERIOD_NS);
    struct rusage r0, r1;
    getrusage(RUSAGE_THREAD, &r0);
    double cpu0 = now_ns(CLOCK_PROCESS_CPUTIME_ID);
    double own0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
    for (long i = 0; i < loops; i++)
      x = x * 6364136223846793005ull + 1442695040888963407ull;
    own[c] += now_ns(CLOCK_THREAD_CPUTIME_ID) - own0;
    cpu[c] += now_ns(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
    getrusage(RUSAGE_THREAD, &r1);
    preempted[c] += (double)(r1.ru_nivcsw - r0.ru_nivcsw);
    disarm(c, h);
  }
  loop_sink = x;
  atomic_store(&sleeper_stop, 1);
  pthread_join(th, NULL);
  sched_setaffinity(0, sizeof all, &all);
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
  /* 60 slices of each clock a round, of about 5 ms each. */
  long slices = 60, loops = n * 30;
  double *diff[NCLOCKS], *own_diff[NCLOCKS];
  for (int c = 0; c < NCLOCKS; c++) {
    diff[c] = calloc((size_t)rounds, sizeof(double));
    own_diff[c] = calloc((size_t)rounds, sizeof(double));
  }
  printf("preempted on one CPU: ms of the process's CPU for the loop, of "
         "the worker's, and its preemptions a ms, per round (none perf "
         "posix)\n");
  for (int r = 0; r < rounds; r++) {
    double cpu[NCLOCKS], own[NCLOCKS], pre[NCLOCKS];
    run_preempted(slices, loops, cpu, own, pre);
    printf("  round %2d:", r + 1);
    for (int c = 0; c < NCLOCKS; c++)
      printf(" %6.1f %6.1f (%4.1f)", cpu[c] / 1e6, own[c] / 1e6,
             pre[c] * 1e6 / cpu[c]);
    printf("\n");
    for (int c = 0; c < NCLOCKS; c++) {
      diff[c][r] = pre[c] > 0 ? (cpu[c] - cpu[CLOCK_NONE]) / pre[c] : 0;
      own_diff[c][r] = pre[c] > 0 ? (own[c] - own[CLOCK_NONE]) / pre[c] : 0;
    }
  }
  for (int c = 1; c < NCLOCKS; c++)
    printf("  %s - none: %+.0f ns of the process's CPU per preemption "
           "[%+.0f, %+.0f], %+.0f of the worker's [%+.0f, %+.0f]\n",
           clock_names[c], quantile(diff[c], rounds, 0.5),
           quantile(diff[c], rounds, 0.25), quantile(diff[c], rounds, 0.75),
           quantile(own_diff[c], rounds, 0.5),
           quantile(own_diff[c], rounds, 0.25),
           quantile(own_diff[c], rounds, 0.75));
  for (int c = 0; c < NCLOCKS; c++) {
    free(diff[c]);
    free(own_diff[c]);
  }
  return 0;
}
