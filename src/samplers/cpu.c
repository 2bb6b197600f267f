/* CPU-time sampler: one POSIX timer per thread on that thread's CPU clock,
 * delivered to that thread (SIGEV_THREAD_ID), armed from outside the thread
 * with the raw syscalls (the clock id is derived from the tid). Each expiry
 * weighs (1 + overrun) periods, so the total matches the CPU time used at any
 * rate and thread count. setitimer(ITIMER_PROF) is the fallback when per-thread
 * timers cannot be made. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "aggregator/aggregator.h"
#include "aggregator/ring.h"
#include "common.h"
#include "labels.h"
#include "sampler.h"
#include "signals.h"
#include "threads.h"
#include "trace.h"
#include "unwind.h"

#define TIMER_COOKIE 0x63707531 /* "cpu1": marks our timer signals */
#define CPUCLOCK_SCHED 2
#define CPUCLOCK_PERTHREAD 4

typedef struct thread_timer {
  pid_t tid;
  int timer_id; /* kernel timer id */
} thread_timer;

static struct {
  pthread_mutex_t lock; /* guards the timer table */
  thread_timer *timers;
  size_t ntimers, cap;
  int signal;
  uint64_t period_ns;
  size_t max_frames;
  _Atomic int active;
  _Atomic int itimer_fallback;
  unsigned seed;
} cpu = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Async-signal-safe: runs in the sampling signal handler. Reads the label
 * set and the clock, unwinds into a preallocated ring slot, publishes it. */
static void cpu_signal_handler(int sig, siginfo_t *info, void *ucontext) {
  int saved_errno = errno;
  int64_t weight;
  if (info->si_code == SI_TIMER && info->si_value.sival_int == TIMER_COOKIE) {
    weight = 1 + (info->si_overrun > 0 ? info->si_overrun : 0);
  } else if (info->si_code == SI_KERNEL && sig == SIGPROF &&
             atomic_load_explicit(&cpu.itimer_fallback, memory_order_relaxed)) {
    weight = 1;
  } else {
    cp_signal_chain(sig, info, ucontext);
    errno = saved_errno;
    return;
  }
  cp_own_signals++;
  cp_ring *ring = cp_agg_ring();
  if (!atomic_load_explicit(&cpu.active, memory_order_relaxed) || !ring) {
    errno = saved_errno;
    return;
  }
  if (cp_in_sampling_handler) {
    cp_ring_drop(ring, CONTPROF_KIND_CPU, weight,
                 weight * (int64_t)cpu.period_ns);
    errno = saved_errno;
    return;
  }
  cp_in_sampling_handler = 1;
  uint64_t ticket;
  cp_raw_sample *s = cp_ring_reserve(ring, &ticket, CONTPROF_KIND_CPU, weight,
                                     weight * (int64_t)cpu.period_ns);
  if (s) {
    int truncated = 0;
    s->kind = CONTPROF_KIND_CPU;
    s->tid = cp_gettid();
    s->labels = cp_labels_current();
    s->timestamp_ns = cp_realtime_ns();
    cp_trace_current(&s->span_id, &s->local_root_span_id);
    s->count = weight;
    s->quantity = weight * (int64_t)cpu.period_ns;
    s->nframes = (uint32_t)cp_unwind_signal(ucontext, s->frames, cpu.max_frames,
                                            1, &truncated);
    s->truncated = (uint32_t)truncated;
    cp_ring_commit(ring, ticket);
  }
  cp_in_sampling_handler = 0;
  errno = saved_errno;
}

static int timer_create_for(pid_t tid, int *timer_id) {
  clockid_t clock =
      (clockid_t)((~(unsigned)tid << 3) | CPUCLOCK_SCHED | CPUCLOCK_PERTHREAD);
  struct sigevent sev;
  memset(&sev, 0, sizeof sev);
  sev.sigev_notify = SIGEV_THREAD_ID;
  sev.sigev_signo = cpu.signal;
  sev.sigev_value.sival_int = TIMER_COOKIE;
  sev._sigev_un._tid = tid;
  int id;
  if (syscall(SYS_timer_create, clock, &sev, &id) != 0)
    return -1;
  /* The first expiry is random in (0, period] so that short-lived threads
   * get their fair share of samples. */
  uint64_t first = 1 + (uint64_t)rand_r(&cpu.seed) % cpu.period_ns;
  struct itimerspec its = {
      .it_interval = {(time_t)(cpu.period_ns / 1000000000ull),
                      (long)(cpu.period_ns % 1000000000ull)},
      .it_value = {(time_t)(first / 1000000000ull),
                   (long)(first % 1000000000ull)},
  };
  if (syscall(SYS_timer_settime, id, 0, &its, NULL) != 0) {
    syscall(SYS_timer_delete, id);
    return -1;
  }
  *timer_id = id;
  return 0;
}

static void start_itimer_fallback(int err) {
  if (cpu.signal != SIGPROF) {
    static int reported;
    if (!reported++)
      cp_error("per-thread CPU timers unavailable (%s) and SIGPROF belongs to "
               "the application: some threads are not CPU-profiled",
               strerror(err));
    return;
  }
  if (atomic_exchange(&cpu.itimer_fallback, 1))
    return;
  cp_warn("per-thread CPU timers unavailable (%s); falling back to "
          "setitimer(ITIMER_PROF), which undercounts when many threads run",
          strerror(err));
  struct itimerval itv = {
      .it_interval = {(time_t)(cpu.period_ns / 1000000000ull),
                      (suseconds_t)(cpu.period_ns % 1000000000ull / 1000)},
  };
  itv.it_value = itv.it_interval;
  setitimer(ITIMER_PROF, &itv, NULL);
}

static void cpu_thread_started(pid_t tid) {
  if (atomic_load(&cpu.itimer_fallback))
    return;
  pthread_mutex_lock(&cpu.lock);
  int id;
  if (cpu.ntimers == cpu.cap) {
    size_t cap = cpu.cap ? cpu.cap * 2 : 64;
    thread_timer *grown = realloc(cpu.timers, cap * sizeof *grown);
    if (!grown) {
      pthread_mutex_unlock(&cpu.lock);
      return;
    }
    cpu.timers = grown;
    cpu.cap = cap;
  }
  if (timer_create_for(tid, &id) == 0) {
    cpu.timers[cpu.ntimers++] = (thread_timer){tid, id};
  } else if (errno != ESRCH && errno != EINVAL) {
    /* EINVAL/ESRCH: the thread ended meanwhile. Anything else (EAGAIN: the
     * timer limit) means per-thread timers cannot serve this process. */
    start_itimer_fallback(errno);
  }
  pthread_mutex_unlock(&cpu.lock);
}

static void cpu_thread_exited(pid_t tid) {
  pthread_mutex_lock(&cpu.lock);
  for (size_t i = 0; i < cpu.ntimers; i++) {
    if (cpu.timers[i].tid == tid) {
      syscall(SYS_timer_delete, cpu.timers[i].timer_id);
      cpu.timers[i] = cpu.timers[--cpu.ntimers];
      break;
    }
  }
  pthread_mutex_unlock(&cpu.lock);
}

static void cpu_after_fork_child(void) {
  /* POSIX timers are not inherited; the table describes the parent's. */
  pthread_mutex_init(&cpu.lock, NULL);
  cpu.ntimers = 0;
  atomic_store(&cpu.active, 0);
  atomic_store(&cpu.itimer_fallback, 0);
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_PROF, &off, NULL);
}

static int cpu_start(const cp_config *cfg) {
  cpu.period_ns = 1000000000ull / (uint64_t)cfg->cpu_hz;
  cpu.max_frames = (size_t)cfg->max_frames;
  cpu.seed = (unsigned)cp_monotonic_ns() ^ (unsigned)getpid();
  cp_unwind_init();
  int sig = cp_signal_install(SIGPROF, cpu_signal_handler);
  if (sig < 0)
    return CONTPROF_ERR_SYSTEM;
  cpu.signal = sig;
  cp_threads_set_sampling_signal(sig);
  atomic_store(&cpu.itimer_fallback, 0);
  atomic_store(&cpu.active, 1);
  return 0;
}

static void cpu_stop(void) {
  atomic_store(&cpu.active, 0);
  if (atomic_exchange(&cpu.itimer_fallback, 0)) {
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_PROF, &off, NULL);
  }
  pthread_mutex_lock(&cpu.lock);
  for (size_t i = 0; i < cpu.ntimers; i++)
    syscall(SYS_timer_delete, cpu.timers[i].timer_id);
  cpu.ntimers = 0;
  pthread_mutex_unlock(&cpu.lock);
}

const cp_sampler cp_cpu_sampler = {
    .name = "cpu",
    .profile = CP_PROFILE_CPU,
    .start = cpu_start,
    .stop = cpu_stop,
    .thread_started = cpu_thread_started,
    .thread_exited = cpu_thread_exited,
    .after_fork_child = cpu_after_fork_child,
};
