/* What a wall tick costs a thread that runs, by how the tick reaches it
 * (docs/benchmarks.md, "What a tick costs, whichever way it comes"): the
 * wall sampler's timer thread wakes and signals the thread it samples,
 * which on a CPU the two share takes two switches a tick besides the
 * signal; a POSIX timer could signal the thread itself, with no other
 * thread.
 *
 * A worker thread reads a buffer at random (a dependent chain: each read's
 * address comes from the last, as a server's pointer-chasing does), every
 * thread of the process pinned to CPU 0. Variants, interleaved in rounds
 * (each first in turn):
 *   none      the loop alone;
 *   wake      a second thread wakes every tick (absolute sleeps, as the
 *             timer thread sleeps) and does nothing;
 *   thread    the same thread signals the worker at each wake (tgkill),
 *             whose handler counts it;
 *   posix     no second thread: a POSIX timer on the monotonic clock
 *             signals the worker every tick (SIGEV_THREAD_ID);
 *   wake-s, thread-s  wake and thread with the thread's timer slack at a
 *             kernel tick (SLACK_NS), so that its wakes may ride on the
 *             scheduler's interrupts.
 * Per variant, over none: the process's extra CPU for its reads (the
 * second thread's CPU and what the ticks cost the worker: interrupts,
 * switches, signals, caches refilled), over the ticks taken.
 *
 *   tick_cost [ROUNDS [KIB [MS [TICK_US]]]]    (default 9 rounds, 4096
 *                KiB, 1000 ms a variant a round, a tick every 10000 us)
 *
 * A tick's cost is a fraction of a percent of the process's CPU at 100 Hz,
 * under what this VM's speed moves by from one second to the next: a
 * shorter period (1000 us) makes it ten times as large, and short
 * variants (300 ms) in many rounds follow the VM's drift.
 *
 * Prints per round the ns per read of each variant and the ticks taken,
 * then per variant the median [p25, p75] over rounds of the us a tick
 * costs. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long long TICK_NS = 10000000ll; /* the tick's period */
#define MAX_ROUNDS 64
#define CHUNK 4096 /* reads between looks at the clock */

enum {
  V_NONE,
  V_WAKE,
  V_THREAD,
  V_POSIX,
  V_WAKE_SLACK,
  V_THREAD_SLACK,
  NVARIANTS
};
/* The slack the -s variants' thread sleeps with (PR_SET_TIMERSLACK): a
 * tick of this VM's kernel (HZ 250), so that its wake may ride on the
 * scheduler's own interrupt. */
#define SLACK_NS 4000000ul
static const char *const names[NVARIANTS] = {"none",  "wake",   "thread",
                                             "posix", "wake-s", "thread-s"};

static uint32_t *buf;
static size_t nwords;
static atomic_int ticks;
static atomic_int stop_waker;
static pid_t worker_tid;
static int waker_signals;
static unsigned long waker_slack;
#define TICK_SIGNAL (SIGRTMIN + 1)

static int64_t ns(clockid_t c) {
  struct timespec t;
  clock_gettime(c, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* TICK_NS as a timespec (tv_nsec under a second: up to 1 s a tick). */
static struct timespec tick_spec(void) {
  return (struct timespec){.tv_sec = TICK_NS / 1000000000,
                           .tv_nsec = TICK_NS % 1000000000};
}

static void on_tick(int sig) {
  (void)sig;
  atomic_fetch_add_explicit(&ticks, 1, memory_order_relaxed);
}

static void pin(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(0, &set);
  sched_setaffinity(0, sizeof set, &set);
}

static void *waker(void *arg) {
  (void)arg;
  pin();
  if (waker_slack)
    prctl(PR_SET_TIMERSLACK, waker_slack);
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  struct timespec tick = tick_spec();
  while (!atomic_load(&stop_waker)) {
    t.tv_sec += tick.tv_sec;
    t.tv_nsec += tick.tv_nsec;
    if (t.tv_nsec >= 1000000000) {
      t.tv_sec++;
      t.tv_nsec -= 1000000000;
    }
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL);
    if (waker_signals)
      syscall(SYS_tgkill, getpid(), worker_tid, TICK_SIGNAL);
    else
      atomic_fetch_add_explicit(&ticks, 1, memory_order_relaxed);
  }
  return NULL;
}

/* Runs variant v for ms of wall time; returns the reads made and sets
 * *cpu_ns (the process's CPU over them) and *nticks. */
static uint64_t run(int v, int64_t ms, int64_t *cpu_ns, int *nticks) {
  pthread_t t;
  timer_t timer;
  atomic_store(&ticks, 0);
  atomic_store(&stop_waker, 0);
  waker_signals = v == V_THREAD || v == V_THREAD_SLACK;
  waker_slack = v >= V_WAKE_SLACK ? SLACK_NS : 0;
  int waking = v != V_NONE && v != V_POSIX;
  if (waking)
    pthread_create(&t, NULL, waker, NULL);
  if (v == V_POSIX) {
    struct sigevent ev = {.sigev_notify = SIGEV_THREAD_ID,
                          .sigev_signo = TICK_SIGNAL};
    ev._sigev_un._tid = worker_tid;
    timer_create(CLOCK_MONOTONIC, &ev, &timer);
    struct itimerspec it = {.it_interval = tick_spec(),
                            .it_value = tick_spec()};
    timer_settime(timer, 0, &it, NULL);
  }
  int64_t c0 = ns(CLOCK_PROCESS_CPUTIME_ID);
  int64_t end = ns(CLOCK_MONOTONIC) + ms * 1000000;
  uint64_t reads = 0;
  uint32_t i = 0;
  do {
    for (int k = 0; k < CHUNK; k++)
      i = buf[i];
    reads += CHUNK;
  } while (ns(CLOCK_MONOTONIC) < end);
  *cpu_ns = ns(CLOCK_PROCESS_CPUTIME_ID) - c0;
  if (waking) {
    atomic_store(&stop_waker, 1);
    pthread_join(t, NULL);
  }
  if (v == V_POSIX)
    timer_delete(timer);
  *nticks = atomic_load(&ticks);
  if (i == 0xffffffffu) /* keep the chain */
    puts("");
  return reads;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 9;
  size_t kib = argc > 2 ? (size_t)atoi(argv[2]) : 4096;
  int64_t ms = argc > 3 ? atoll(argv[3]) : 1000;
  long long tick_us = argc > 4 ? atoll(argv[4]) : 10000;
  if (rounds < 1 || rounds > MAX_ROUNDS || kib < 4 || ms < 100 ||
      tick_us < 100 || tick_us > 1000000) {
    fprintf(stderr,
            "usage: tick_cost [ROUNDS(1-%d) [KIB>=4 [MS>=100 "
            "[TICK_US(100-1000000)]]]]\n",
            MAX_ROUNDS);
    return 2;
  }
  TICK_NS = tick_us * 1000;
  pin();
  worker_tid = (pid_t)syscall(SYS_gettid);
  struct sigaction sa = {.sa_handler = on_tick, .sa_flags = SA_RESTART};
  sigaction(TICK_SIGNAL, &sa, NULL);
  /* One cycle through every word in random order (Sattolo's shuffle). */
  nwords = kib * 1024 / sizeof *buf;
  buf = malloc(nwords * sizeof *buf);
  if (!buf)
    return 1;
  for (size_t k = 0; k < nwords; k++)
    buf[k] = (uint32_t)k;
  uint64_t r = 88172645463325252ull;
  for (size_t k = nwords - 1; k > 0; k--) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    size_t j = r % k;
    uint32_t x = buf[k];
    buf[k] = buf[j];
    buf[j] = x;
  }
  printf("tick_cost: %d rounds, %zu KiB read at random, %lld ms a variant, "
         "a tick every %lld us, every thread on CPU 0\n",
         rounds, kib, (long long)ms, TICK_NS / 1000);
  printf("round  ns a read:");
  for (int v = 0; v < NVARIANTS; v++)
    printf(" %8s", names[v]);
  printf("   ticks:");
  for (int v = 1; v < NVARIANTS; v++)
    printf(" %6s", names[v]);
  printf("\n");
  static double cost[NVARIANTS][MAX_ROUNDS];
  for (int round = 0; round < rounds; round++) {
    double per_read[NVARIANTS];
    int64_t cpu[NVARIANTS];
    uint64_t reads[NVARIANTS];
    int nticks[NVARIANTS];
    for (int k = 0; k < NVARIANTS; k++) {
      int v = (k + round) % NVARIANTS; /* each goes first in turn */
      reads[v] = run(v, ms, &cpu[v], &nticks[v]);
      per_read[v] = (double)cpu[v] / (double)reads[v];
    }
    printf("%5d            ", round + 1);
    for (int v = 0; v < NVARIANTS; v++)
      printf(" %8.2f", per_read[v]);
    printf("         ");
    for (int v = 1; v < NVARIANTS; v++)
      printf(" %6d", nticks[v]);
    printf("\n");
    for (int v = 1; v < NVARIANTS; v++) {
      double extra = (double)cpu[v] - (double)reads[v] * per_read[V_NONE];
      cost[v][round] = nticks[v] > 0 ? extra / nticks[v] / 1000.0 : 0;
    }
  }
  printf("us of the process's CPU a tick, over none: median [p25, p75]\n");
  for (int v = 1; v < NVARIANTS; v++) {
    qsort(cost[v], (size_t)rounds, sizeof cost[v][0], cmp);
    printf("  %-7s %7.1f [%.1f, %.1f]\n", names[v], cost[v][rounds / 2],
           cost[v][rounds / 4], cost[v][(3 * rounds) / 4]);
  }
  return 0;
}
