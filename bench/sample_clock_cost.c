/* What one CPU sample costs the sampled thread in the kernel, by clock, with
 * no profiler loaded (docs/signals.md, "Which clock"; docs/benchmarks.md,
 * "What a perf task clock's sample costs").
 *
 * A thread runs a fixed loop (about 100 ms of CPU) with no clock, then with
 * each clock the CPU sampler can use, armed as the sampler arms it:
 *   perf-overflow  a perf task clock (PERF_COUNT_SW_TASK_CLOCK) with a
 *                  sample period and no signal: its hrtimer's interrupts
 *                  and overflows alone;
 *   perf-signal    the same sending a real-time signal to the thread at each
 *                  overflow, whose handler gives the overflow back
 *                  (PERF_EVENT_IOC_REFRESH), as src/samplers/cpu.c does;
 *   posix          a POSIX timer on the thread's CPU clock (SIGEV_THREAD_ID)
 *                  with an empty handler: the kernel checks it at its tick.
 * The extra CPU time of the loop (its thread's clock) over the no-clock runs
 * of the round, divided by the signals (perf-overflow: by the periods it
 * ran), is the cost of one sample outside any handler's own code. Variants
 * run interleaved, ROUNDS times; the medians are printed.
 *
 *   sample_clock_cost [ROUNDS [PERIOD_US]]   (default 11 rounds, 100 us:
 *   the perf clocks at that period; the POSIX timer at 1 ms, which the
 *   tick rounds up to its own period anyway) */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "sample_clocks.h"

static volatile unsigned long signals;
static volatile int refresh_fd = -1;
static volatile double sink;

static void on_signal(int sig, siginfo_t *info, void *uc) {
  (void)uc;
  signals++;
  if (refresh_fd >= 0)
    cp_perf_task_clock_give_back(refresh_fd, sig, info->si_code == POLL_HUP);
}

static uint64_t spin(long n) { return cp_spin_thread_cpu_ns(n, &sink); }

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 11;
  uint64_t period_ns = (uint64_t)(argc > 2 ? atol(argv[2]) : 100) * 1000;
  if (rounds < 1 || rounds > 1000 || period_ns < 10000) {
    fprintf(stderr, "usage: sample_clock_cost [ROUNDS [PERIOD_US>=10]]\n");
    return 2;
  }
  int sig = SIGRTMIN + 3;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigaction(sig, &sa, NULL);
  long n = 1;
  uint64_t loop_ns;
  while ((loop_ns = spin(n)) < 100000000ull) /* about 100 ms of CPU */
    n *= 2;
  double *cost[3];
  for (int v = 0; v < 3; v++)
    cost[v] = calloc((size_t)rounds, sizeof(double));
  printf("sample_clock_cost: %d rounds of %.0f ms of CPU, perf period %llu "
         "us, POSIX timer 1 ms; us of CPU per sample over no clock:\n",
         rounds, (double)loop_ns / 1e6, (unsigned long long)(period_ns / 1000));
  for (int r = 0; r < rounds; r++) {
    uint64_t none = spin(n);
    /* perf-overflow */
    pid_t tid = (pid_t)syscall(SYS_gettid);
    int fd = bench_perf_clock(tid, period_ns, 0, 0, NULL);
    if (fd < 0) {
      perror("perf_event_open");
      return 1;
    }
    uint64_t t = spin(n);
    close(fd);
    cost[0][r] = ((double)t - (double)none) / ((double)t / (double)period_ns);
    /* perf-signal */
    signals = 0;
    fd = bench_perf_clock(tid, period_ns, sig, CP_PERF_AHEAD, &refresh_fd);
    t = spin(n);
    ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
    refresh_fd = -1;
    close(fd);
    unsigned long perf_signals = signals;
    cost[1][r] =
        perf_signals ? ((double)t - (double)none) / (double)perf_signals : 0;
    /* posix */
    signals = 0;
    timer_t timer;
    if (bench_posix_clock(tid, 1000000, sig, &timer) != 0) {
      perror("timer_create");
      return 1;
    }
    t = spin(n);
    timer_delete(timer);
    uint64_t none2 = spin(n);
    cost[2][r] =
        signals ? ((double)t - (double)(none + none2) / 2) / (double)signals
                : 0;
    printf("  round %d: perf-overflow %.2f, perf-signal %.2f (%lu signals), "
           "posix %.2f\n",
           r + 1, cost[0][r] / 1000, cost[1][r] / 1000, perf_signals,
           cost[2][r] / 1000);
  }
  const char *name[3] = {"perf-overflow", "perf-signal", "posix"};
  for (int v = 0; v < 3; v++) {
    qsort(cost[v], (size_t)rounds, sizeof(double), cmp);
    printf("%s: median %.2f us per sample [%.2f, %.2f]\n", name[v],
           cost[v][rounds / 2] / 1000, cost[v][rounds / 4] / 1000,
           cost[v][3 * rounds / 4] / 1000);
  }
  return 0;
}
