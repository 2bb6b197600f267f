/* The kernel's side of a sampling signal, measured (see kernel_cost.h and
 * docs/overhead.md, "The kernel's side of each signal").
 *
 * On the scheduler's thread, which blocks every signal but the one measured
 * while it measures: ROUNDS rounds of
 *   - a loop of about SPIN_NS of the thread's CPU with no signal;
 *   - the same loop with a perf task clock on the thread, opened and armed
 *     as the CPU sampler arms its own (cpu.c: overflow signal to the
 *     thread, CP_PERF_AHEAD overflows ahead, one given back by the handler),
 *     every PERF_PERIOD_NS of its CPU;
 *   - QUEUED_SIGNALS signals the thread queues to itself (each taken at the
 *     return of the system call that sent it), against as many calls of a
 *     system call that does nothing;
 *   - the loop with no signal again.
 * A path's cost per signal is the extra CPU time over the loops without,
 * divided by the signals the handler took; the median of the rounds is
 * billed. About 20 ms of the thread's CPU, once per process tree (see
 * shared_costs). */
#include "kernel_cost.h"

#include <errno.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "own_fd.h"
#include "perf_clock.h"
#include "signals.h"
#include "stats.h"
#include "thread_state.h"

/* A perf signal costs about a third of its period here: at a 50 us period
 * the clock ran on its own samples' cost (30 signals in a 0.5 ms loop, 60
 * in some rounds: 83 ms in all once). */
#define ROUNDS 5
#define SPIN_NS 1000000ull       /* each loop: 1 ms of the thread's CPU */
#define PERF_PERIOD_NS 100000ull /* about 13 perf signals a loop */
#define QUEUED_SIGNALS 100
#define MIN_SIGNALS 8          /* fewer in a round: the round is not used */
#define COST_MAX_NS 1000000ull /* over 1 ms a signal: not believed */
#define COST_COOKIE 0x6b636f73 /* "kcos": marks the queued signals */
/* A measurement begun this long ago and not finished (its process died
 * meanwhile) is made again by another process of the tree. */
#define STALE_NS 10000000000ull

/* The measurement, shared by a process and every child it forks after its
 * first start (MAP_SHARED): a forking server's backends, forked before it
 * measured, adopt its figures instead of measuring each (30 ms of CPU, as
 * it was then, in each of a PostgreSQL server's 26 processes). One process of
 * the tree measures: the one that moves state from 0 to 1. */
typedef struct shared_costs {
  _Atomic uint32_t state;      /* 0 none, 1 measuring, 2 done */
  _Atomic uint64_t started_ns; /* CLOCK_MONOTONIC, system-wide */
  _Atomic uint64_t perf_ns;    /* cost + 1; 0: not measured */
  _Atomic uint64_t queued_ns;  /* cost + 1; 0: not measured */
} shared_costs;
static shared_costs *shared; /* mapped at the first start, never unmapped */

static struct {
  pthread_mutex_t lock;
  int sig;           /* 0: no sampler asked */
  int perf;          /* perf_exclude_kernel + 1; 0: the queued path only */
  uint64_t due_ns;   /* monotonic: when to measure */
  uint64_t after_ns; /* the delay asked for */
  int state;         /* 0 not measured, 1 measuring or asked to, 2 done */
} kc = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Read by the handler on the measuring thread. */
static volatile int cal_fd = -1;
static volatile pid_t cal_pid;
static volatile unsigned long cal_signals;
static volatile double sink;

void cp_kernel_cost_use(int sig, int perf_exclude_kernel, long after_ms) {
  pthread_mutex_lock(&kc.lock);
  if (!shared && after_ms >= 0) {
    void *m = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m != MAP_FAILED)
      shared = m; /* zeroes: nothing measured */
  }
  /* Not measured: asked to (state 1) and never run, the profiler stopped
   * meanwhile, counts as not. Starts come after the scheduler's thread of
   * the last stop ended, so no measurement runs now. */
  if (kc.state == 1 && shared)
    atomic_store(&shared->state, 0); /* this process's claim, never run */
  if (kc.state != 2)
    kc.state = 0;
  if (kc.state == 0 && after_ms < 0) {
    kc.sig = 0; /* off, until a start asks again */
  } else if (kc.state == 0) {
    /* Counted from the latest start. */
    kc.after_ns = (uint64_t)after_ms * 1000000ull;
    kc.due_ns = cp_monotonic_ns() + kc.after_ns;
    if (!kc.sig || (perf_exclude_kernel >= 0 && !kc.perf)) {
      kc.sig = sig;
      kc.perf = perf_exclude_kernel >= 0 ? perf_exclude_kernel + 1 : 0;
    }
  }
  pthread_mutex_unlock(&kc.lock);
}

void cp_kernel_cost_signal_moved(int old, int new_sig) {
  pthread_mutex_lock(&kc.lock);
  if (kc.sig == old)
    kc.sig = new_sig;
  pthread_mutex_unlock(&kc.lock);
}

/* Async-signal-safe, bounded: one ioctl at most. */
int cp_kernel_cost_take(int sig, const siginfo_t *info) {
  int fd = cal_fd;
  if ((info->si_code == POLL_IN || info->si_code == POLL_HUP) && fd >= 0 &&
      info->si_fd == fd) {
    int saved_errno = errno;
    cp_perf_task_clock_give_back(fd, sig, info->si_code == POLL_HUP);
    errno = saved_errno;
    cal_signals++;
    return 1;
  }
  if (info->si_code == SI_QUEUE && info->si_pid == cal_pid &&
      info->si_value.sival_int == COST_COOKIE) {
    cal_signals++;
    return 1;
  }
  return 0;
}

static uint64_t thread_cpu_ns(void) {
  return cp_clock_ns(CLOCK_THREAD_CPUTIME_ID);
}

static uint64_t spin(long n) { return cp_spin_thread_cpu_ns(n, &sink); }

/* The loop with a perf task clock signalling sig to this thread: its CPU
 * time, *taken the signals handled; 0 when no clock could be made. */
static uint64_t spin_with_perf(long n, int sig, int exclude_kernel,
                               unsigned long *taken) {
  pid_t tid = cp_gettid();
  cp_own_fd own = CP_OWN_FD_NONE; /* above the application's numbers */
  int fd = cp_own_adopt(
      &own, cp_perf_task_clock_open(tid, PERF_PERIOD_NS, exclude_kernel));
  if (fd < 0)
    return 0;
  if (cp_perf_task_clock_signal(fd, tid, sig) != 0) {
    cp_own_close(&own);
    return 0;
  }
  cal_signals = 0;
  cal_fd = fd;
  ioctl(fd, PERF_EVENT_IOC_REFRESH, CP_PERF_AHEAD);
  uint64_t t = spin(n);
  ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
  *taken = cal_signals;
  /* A signal of the last overflow still on its way is taken at the return
   * of one of these, while the descriptor is still known as ours. */
  sched_yield();
  sched_yield();
  cp_own_close(&own);
  cal_fd = -1;
  return t;
}

/* QUEUED_SIGNALS signals queued to this thread, each taken as the call
 * that sent it returns, less as many calls that do nothing: the CPU time of
 * their sending, delivery and sigreturn; *taken the signals handled. */
static int64_t queued_signals_ns(int sig, unsigned long *taken) {
  pid_t pid = cal_pid, tid = cp_gettid();
  siginfo_t si;
  memset(&si, 0, sizeof si);
  si.si_signo = sig;
  si.si_code = SI_QUEUE;
  si.si_pid = pid;
  si.si_uid = getuid();
  si.si_value.sival_int = COST_COOKIE;
  cal_signals = 0;
  uint64_t t0 = thread_cpu_ns();
  for (int i = 0; i < QUEUED_SIGNALS; i++)
    syscall(SYS_rt_tgsigqueueinfo, pid, tid, sig, &si);
  uint64_t t1 = thread_cpu_ns();
  *taken = cal_signals;
  for (int i = 0; i < QUEUED_SIGNALS; i++)
    syscall(SYS_getppid);
  uint64_t t2 = thread_cpu_ns();
  return (int64_t)(t1 - t0) - (int64_t)(t2 - t1);
}

static int compare_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* The median of the rounds kept, clamped to [0, COST_MAX_NS]; -1 when
 * fewer than half of the rounds were kept. */
static int64_t median_cost(int64_t *cost, int n) {
  if (2 * n < ROUNDS)
    return -1;
  qsort(cost, (size_t)n, sizeof *cost, compare_i64);
  int64_t m = cost[n / 2];
  return m < 0 ? 0 : m > (int64_t)COST_MAX_NS ? -1 : m;
}

void cp_kernel_cost_measure(void) {
  pthread_mutex_lock(&kc.lock);
  int sig = kc.sig, perf = kc.perf;
  pthread_mutex_unlock(&kc.lock);
  /* The application set a handler of its own for it: its signals would
   * come to this thread, and merge with ours. The sampler moves to a
   * real-time signal at its next tick (cp_kernel_cost_signal_moved). */
  if (cp_signal_claimed(sig)) {
    cp_kernel_cost_postpone();
    return;
  }
  cal_pid = getpid();
  uint64_t began = thread_cpu_ns();
  /* The loop's steps for SPIN_NS: doubled to a quarter of it, then scaled. */
  long n = 1;
  uint64_t t;
  while ((t = spin(n)) < SPIN_NS / 4 && n < (1l << 40))
    n *= 2;
  n = (long)((double)n * (double)SPIN_NS / (double)(t ? t : 1));
  sigset_t only, old;
  sigemptyset(&only);
  sigaddset(&only, sig);
  cp_thread.calibrating = 1;
  pthread_sigmask(SIG_UNBLOCK, &only, &old);
  int64_t perf_cost[ROUNDS], queued_cost[ROUNDS];
  int nperf = 0, nqueued = 0;
  for (int r = 0; r < ROUNDS; r++) {
    uint64_t before = spin(n);
    unsigned long perf_taken = 0, queued_taken = 0;
    uint64_t with = perf ? spin_with_perf(n, sig, perf - 1, &perf_taken) : 0;
    int64_t queued = queued_signals_ns(sig, &queued_taken);
    uint64_t none = (before + spin(n)) / 2;
    cp_debug("kernel cost round %d: loop %.2f ms, with perf %.2f ms (%lu "
             "signals), queued %.2f ms (%lu signals)",
             r, (double)none / 1e6, (double)with / 1e6, perf_taken,
             (double)queued / 1e6, queued_taken);
    if (with && perf_taken >= MIN_SIGNALS)
      perf_cost[nperf++] =
          ((int64_t)with - (int64_t)none) / (int64_t)perf_taken;
    if (queued_taken >= MIN_SIGNALS)
      queued_cost[nqueued++] = queued / (int64_t)queued_taken;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  cp_thread.calibrating = 0;
  int64_t p = perf ? median_cost(perf_cost, nperf) : -1;
  int64_t q = median_cost(queued_cost, nqueued);
  if (p >= 0)
    cp_stats_set_signal_cost(CP_SIGNAL_PERF, (uint64_t)p);
  if (q >= 0)
    cp_stats_set_signal_cost(CP_SIGNAL_QUEUED, (uint64_t)q);
  double took_ms = (double)(thread_cpu_ns() - began) / 1e6;
  char perf_part[96] = "";
  if (perf && p >= 0)
    snprintf(perf_part, sizeof perf_part,
             "%.1f us a perf task clock's sample, ", (double)p / 1000);
  else if (perf)
    snprintf(perf_part, sizeof perf_part,
             "a perf task clock's sample not measured (%d of %d rounds), ",
             nperf, ROUNDS);
  if (q >= 0)
    cp_info("the kernel's side of a sampling signal: %s%.1f us a queued "
            "signal's; the profiles count it from now on (measured in %.1f "
            "ms of CPU)",
            perf_part, (double)q / 1000, took_ms);
  else
    cp_info("the kernel's side of a sampling signal: %sa queued signal's "
            "not measured (%d of %d rounds)",
            perf_part, nqueued, ROUNDS);
  if (shared) {
    atomic_store(&shared->perf_ns, p >= 0 ? (uint64_t)p + 1 : 0);
    atomic_store(&shared->queued_ns, q >= 0 ? (uint64_t)q + 1 : 0);
    atomic_store(&shared->state, 2);
  }
  pthread_mutex_lock(&kc.lock);
  kc.state = 2;
  pthread_mutex_unlock(&kc.lock);
}

/* Caller holds kc.lock, state 0. Whether another process of the tree
 * measured: then its figures are this process's too. */
static int adopted_locked(void) {
  if (!shared || atomic_load(&shared->state) != 2)
    return 0;
  uint64_t p = atomic_load(&shared->perf_ns),
           q = atomic_load(&shared->queued_ns);
  if (p)
    cp_stats_set_signal_cost(CP_SIGNAL_PERF, p - 1);
  if (q)
    cp_stats_set_signal_cost(CP_SIGNAL_QUEUED, q - 1);
  cp_debug("the kernel's side of a sampling signal, as the process that "
           "forked this one measured it: %.1f us a perf task clock's "
           "sample, %.1f us a queued signal's",
           p ? (double)(p - 1) / 1000 : 0.0, q ? (double)(q - 1) / 1000 : 0.0);
  kc.state = 2;
  return 1;
}

/* Caller holds kc.lock. Whether this process is the tree's one to measure
 * (no other is, or the one that began did not finish in STALE_NS). */
static int claimed_locked(uint64_t now) {
  if (!shared)
    return 1;
  uint32_t idle = 0;
  if (atomic_compare_exchange_strong(&shared->state, &idle, 1) ||
      (idle == 1 && now - atomic_load(&shared->started_ns) > STALE_NS)) {
    atomic_store(&shared->started_ns, now);
    return 1;
  }
  return 0;
}

int cp_kernel_cost_due(void) {
  pthread_mutex_lock(&kc.lock);
  uint64_t now = cp_monotonic_ns();
  int due = kc.sig && kc.state == 0 && !adopted_locked() && now >= kc.due_ns &&
            claimed_locked(now);
  if (due)
    kc.state = 1;
  pthread_mutex_unlock(&kc.lock);
  return due;
}

void cp_kernel_cost_postpone(void) {
  pthread_mutex_lock(&kc.lock);
  if (kc.state == 1) {
    kc.state = 0;
    if (shared)
      atomic_store(&shared->state, 0); /* claimed and not run */
  }
  pthread_mutex_unlock(&kc.lock);
}

void cp_kernel_cost_after_fork_child(void) {
  pthread_mutex_init(&kc.lock, NULL);
  if (kc.state == 1)
    kc.state = 0; /* the parent measures, and this process adopts it */
  if (cal_fd >= 0) {
    close(cal_fd);
    cal_fd = -1;
  }
  kc.due_ns = cp_monotonic_ns() + kc.after_ns;
}
