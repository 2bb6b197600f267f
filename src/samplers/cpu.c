/* CPU-time sampler: one sampling clock per thread, on that thread's CPU time,
 * signalling that thread.
 *
 * - perf task clock (the default where the kernel allows it): a software
 *   perf event per thread (PERF_COUNT_SW_TASK_CLOCK) whose overflow sends the
 *   sampling signal to the thread (F_SETOWN_EX, F_SETSIG). The event may
 *   overflow CP_PERF_AHEAD times before its handlers re-arm it, so that it is
 *   still running when they do (re-enabling a stopped one costs the kernel
 *   a reschedule of the thread's events and a timer reprogramming); its
 *   interval is drawn again every PERF_REDRAW_EVERY samples (perf_rearm).
 *   Its hrtimer fires after exactly one interval of the thread's CPU time.
 * - POSIX timer (CONTPROF_CPU_CLOCK=posix, and wherever perf_event_open is
 *   refused: perf_event_paranoid 3, seccomp, no descriptors): a timer on the
 *   thread's CPU clock delivered to that thread (SIGEV_THREAD_ID). Each
 *   expiry weighs (1 + overrun) periods. The kernel checks these timers only
 *   at its scheduler tick, for the thread then running: with more runnable
 *   threads than CPUs a thread can run for hundreds of ms of CPU before its
 *   first signal, and a short-lived thread can end with none
 *   (docs/signals.md has the measurement).
 *
 * Both are armed from outside the thread with raw syscalls, and both start
 * at a random point of the first period so that short-lived threads get
 * their fair share. setitimer(ITIMER_PROF) is the last fallback.
 *
 * A perf task clock costs the kernel work at every switch of its thread (its
 * hrtimer is stopped and started again, a timer reprogramming each, and a VM
 * exit in a guest). With CONTPROF_CPU_CLOCK=auto, a thread found blocking
 * more than SWITCH_LIMIT times per second of its CPU time (a server thread
 * that blocks at every request) is moved to a POSIX timer, where the
 * kernel's work is at its tick. So is a thread that runs in long bursts
 * (LONG_LIMIT), whose samples a POSIX timer places as well, without the
 * perf task clock's own timer interrupt at each (docs/signals.md, "Which
 * clock"); it comes back when it blocks often again. */
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "aggregator/aggregator.h"
#include "common.h"
#include "kernel_cost.h"
#include "own_fd.h"
#include "passthrough.h"
#include "perf_clock.h"
#include "random.h"
#include "record.h"
#include "sampler.h"
#include "signals.h"
#include "stats.h"
#include "thread_state.h"
#include "threads.h"
#include "unwind.h"

#define TIMER_COOKIE 0x63707531 /* "cpu1": marks our timer signals */
#define CPUCLOCK_SCHED 2
#define CPUCLOCK_PERTHREAD 4

/* Which clock: a thread that switches out (blocks, or is preempted) more
 * often than this per second of its CPU time leaves its perf task clock. At
 * 5000, the clock's kernel work at each switch (0.6 us in bench/switch_cost,
 * 1.4 us a preemption of an nginx worker, about 6 us in PostgreSQL's backends
 * here: docs/signals.md) is 0.3-3% of the thread's CPU. Not lower: a POSIX
 * timer attributes the CPU of a thread that runs in bursts shorter than the
 * kernel's tick poorly (a vfork parent with 2 ms bursts, 1,000-1,400 switches
 * a CPU-second, moved at 1000: 0.23 s of its 0.4 s in its work function, 0.39
 * s on its perf task clock). PostgreSQL backends under pgbench block about
 * 14,000 times a CPU-second; an nginx worker sharing its CPU with its load
 * generator blocks about 1,200 times and is preempted about 90,000. */
#define SWITCH_LIMIT 5000
/* A thread's switch rate is judged over each SWITCH_WINDOW_NS of its CPU
 * time: at the limit, that is 500 switches, enough to tell. */
#define SWITCH_WINDOW_NS 100000000ull
#define SWITCH_REQUESTS 64 /* threads waiting for the tick to move them */
/* Which clock, the other end: a thread that blocked at most LONG_LIMIT
 * times per second of its CPU time (none in a window of 100 ms, LONG_WINDOWS
 * times in a row: it runs in bursts of 300 ms of CPU or more) also leaves its
 * perf task clock, when the sampling period is at least LONG_MIN_TICKS of the
 * kernel's ticks. A POSIX timer, checked at the tick, then samples it as
 * exactly (its samples fall where it runs, a period apart) and costs no timer
 * interrupt of its own: a perf task clock's sample costs the thread 30 us of
 * CPU on this VM, half of it its hrtimer's interrupt (exits to the hypervisor),
 * against about 6 us for a POSIX timer's: 0.3% of a busy thread's CPU at 100 Hz
 * against 0.06% (bench/sample_clock_cost; docs/signals.md, "Which clock"). Such
 * a thread comes back to a perf task clock when it blocks more than BACK_LIMIT
 * times per CPU-second (bursts under 20 ms, which the tick would attribute
 * poorly) and at most SWITCH_LIMIT. */
#define LONG_LIMIT 5
/* A window holds few switches at the rates between the limits, so one
 * window's count judges poorly: a thread that blocks 32 times a CPU-second has
 * none in one window of 100 ms in 25, and one in 10 has more than 5 (over
 * BACK_LIMIT), so that an nginx worker went between its clocks 13 times
 * in 40 s. It leaves only after LONG_WINDOWS windows in a row with none
 * (300 ms of its CPU without blocking); such a thread has them about once
 * in 15,000 windows. */
#define LONG_WINDOWS 3
#define LONG_MIN_TICKS 2
#define BACK_LIMIT 50
/* What a move request asks (move_requests: tid | reason). */
#define MOVE_SWITCHY (1 << 28) /* to a POSIX timer: switches too often */
#define MOVE_LONG (2 << 28)    /* to a POSIX timer: long bursts */
#define MOVE_BACK (3 << 28)    /* back to a perf task clock */
#define MOVE_TID_MASK 0x0fffffff

/* A thread's context switches (thread_switches). */
typedef struct switch_counts {
  uint64_t all;     /* blocked or preempted */
  uint64_t blocked; /* voluntary */
} switch_counts;

typedef struct thread_timer {
  pid_t tid;
  int timer_id; /* POSIX timer id, or -1 */
  int fd;       /* perf event descriptor, or -1 */
  dev_t dev;    /* the descriptor's file, to tell it from a later file */
  ino_t ino;    /* the application opened under the same number */
} thread_timer;

/* The descriptors of our perf events, for the handler to tell their
 * signals from the application's (si_fd) without a lock: bit set, ours and
 * open. */
#define PERF_FD_LIMIT 65536
#define PERF_MIN_PERIOD_NS 10000 /* the kernel's floor for a task clock */
/* Samples between two draws of a perf task clock's interval. */
#define PERF_REDRAW_EVERY 8
#define PERF_FD_LINK "anon_inode:[perf_event]" /* /proc/self/fd/N of one */
static _Atomic uint64_t perf_fds[PERF_FD_LIMIT / 64];
/* The thread each of them samples, written before its bit is set: for
 * cpu_on_lost_signal, which knows only its thread. */
static _Atomic pid_t perf_fd_tid[PERF_FD_LIMIT];

static struct {
  pthread_mutex_t lock; /* guards the timer table */
  thread_timer *timers;
  size_t ntimers, cap;
  int signal;
  /* The sampling period in force: base_period_ns (CONTPROF_CPU_HZ) times
   * the governor's slowdown. Read by handlers without a lock; a sample's
   * cpu-samples count is in base periods, so totals do not change with it. */
  _Atomic uint64_t period_ns;
  uint64_t base_period_ns;
  _Atomic unsigned slowdown;
  size_t max_frames;
  _Atomic int active;
  _Atomic int itimer_fallback;
  int perf;                /* perf task clocks serve this run */
  int perf_exclude_kernel; /* 1 when only user-mode sampling is allowed */
  int perf_failed_logged;
  int perf_lost_logged;
  int sigio_logged;     /* the SIGIO guard's first catch was said */
  _Atomic unsigned gen; /* runs started: tells a thread's perf_last stale */
  size_t nperf;         /* perf descriptors open */
  size_t perf_budget;   /* at most this many: an eighth of RLIMIT_NOFILE */
  int perf_fd_floor;    /* descriptors are moved to this number or above */
  _Atomic int adapt;    /* auto: threads that switch often leave perf */
  int moved_logged, long_logged, back_logged;
  int rt_failed;    /* no real-time signal to move to (move_to_rt_signal) */
  uint64_t tick_ns; /* the kernel's tick (CLOCK_MONOTONIC_COARSE), or 0 */
} cpu = {.lock = PTHREAD_MUTEX_INITIALIZER};

static inline int perf_fd_ours(int fd) {
  return fd >= 0 && fd < PERF_FD_LIMIT &&
         (atomic_load_explicit(&perf_fds[fd / 64], memory_order_acquire) >>
          (fd % 64)) &
             1;
}

/* The thread's CPU time at its last perf sample in this run (gen), and
 * its CPU time and switch counts at the start of the window its switch
 * rate is judged over (thread_switches). */
static CP_TLS struct {
  unsigned gen;
  uint64_t cpu_ns;
  uint64_t window_cpu_ns;
  switch_counts window_switches;
  int moving;            /* asked to leave perf in this run */
  unsigned long_windows; /* the last windows in a row judged long */
  /* The event whose interval was last drawn (perf_rearm), and the samples
   * left until the next draw. */
  int drawn_fd;
  unsigned drawn_gen;
  unsigned draw_in;
  /* Asked to leave perf for its long bursts in run long_gen: on its POSIX
   * timer, its switches are judged over windows of window_left_ns of its
   * sampled CPU time (judge_posix). */
  unsigned long_gen;
  int64_t window_left_ns;
} perf_last;

/* Threads whose handlers asked to change clocks (judge_switches,
 * judge_posix): tid | MOVE_* for the tick to move (0: free), and the first
 * switchy one's rate for the log line. */
static _Atomic pid_t move_requests[SWITCH_REQUESTS];
static _Atomic uint64_t move_rate;

/* Async-signal-safe (one clock_gettime). The CPU time the thread used
 * since its last perf sample: the time the event stood still from its
 * overflow to this handler, or while the thread blocked the signal, is
 * counted too. The first sample of a thread in a run weighs at most one
 * period (its first period was random in (0, period]). */
static int64_t perf_cpu_since_last(uint64_t *cpu_now) {
  struct timespec ts;
  *cpu_now = 0;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
    return (int64_t)cpu.period_ns;
  uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
  *cpu_now = now;
  unsigned gen = atomic_load_explicit(&cpu.gen, memory_order_relaxed);
  /* A first sample weighs one period, or the thread's whole CPU time when
   * that is less (a thread made after the start, whose clock was armed when
   * it began): a period can be long when the governor slowed sampling, and
   * hundreds of idle threads each caught once as they exit must not count
   * a period each. */
  int64_t period = (int64_t)cpu.period_ns;
  int64_t since = perf_last.gen == gen && now > perf_last.cpu_ns
                      ? (int64_t)(now - perf_last.cpu_ns)
                  : (int64_t)now < period ? (int64_t)now
                                          : period;
  if (perf_last.gen != gen) {
    perf_last.window_cpu_ns = 0; /* a new window starts at this sample */
    perf_last.moving = 0;
    perf_last.long_windows = 0;
  }
  perf_last.gen = gen;
  perf_last.cpu_ns = now;
  return since;
}

/* The calling thread's switches so far: all of them (a perf task clock's
 * hrtimer is stopped and started at each, whether the thread blocked or
 * was preempted), and the voluntary ones (it blocked), which tell how long
 * its bursts are; 0 when they cannot be read. A preempted thread is found
 * running at the kernel's ticks in proportion to its CPU time, so a POSIX
 * timer weighs it right (docs/signals.md, "Which clock"). */
static int thread_switches(switch_counts *out) {
  struct rusage ru;
  if (syscall(SYS_getrusage, RUSAGE_THREAD, &ru) != 0)
    return 0;
  out->blocked = (uint64_t)ru.ru_nvcsw;
  out->all = (uint64_t)ru.ru_nvcsw + (uint64_t)ru.ru_nivcsw;
  return 1;
}

/* Switches from `from` to `to`, in *d; 0 when a count went back (a new
 * thread reusing the slot's values). */
static int switches_since(const switch_counts *from, const switch_counts *to,
                          switch_counts *d) {
  if (to->all < from->all || to->blocked < from->blocked)
    return 0;
  d->all = to->all - from->all;
  d->blocked = to->blocked - from->blocked;
  return 1;
}

/* Async-signal-safe, bounded: at most SWITCH_REQUESTS compare-and-swaps.
 * Asks the tick to move the calling thread (reason: MOVE_*); returns whether
 * a slot was free (else it is judged again a window later). */
static int request_move(int reason, uint64_t rate) {
  pid_t tid = cp_gettid();
  for (int i = 0; i < SWITCH_REQUESTS; i++) {
    pid_t free_slot = 0;
    if (atomic_compare_exchange_strong(&move_requests[i], &free_slot,
                                       (pid_t)(tid | reason))) {
      if (reason == MOVE_SWITCHY) {
        uint64_t none = 0;
        atomic_compare_exchange_strong(&move_rate, &none, rate);
      }
      return 1;
    }
  }
  return 0;
}

/* Whether switches in cpu_ns of a thread's CPU time are more than
 * per_cpu_s per second of it. */
static inline int switches_over(uint64_t switches, uint64_t cpu_ns,
                                uint64_t per_cpu_s) {
  return switches * 1000000000ull > per_cpu_s * cpu_ns;
}

/* Whether a thread that runs in long bursts samples as well on a POSIX
 * timer: the period in force spans LONG_MIN_TICKS of the kernel's ticks. */
static int period_spans_ticks(void) {
  return cpu.tick_ns &&
         atomic_load_explicit(&cpu.period_ns, memory_order_relaxed) >=
             LONG_MIN_TICKS * cpu.tick_ns;
}

/* Async-signal-safe and bounded: one getrusage per SWITCH_WINDOW_NS of the
 * thread's CPU time, and at most SWITCH_REQUESTS compare-and-swaps. With
 * CONTPROF_CPU_CLOCK=auto, judges the thread on a perf task clock by how
 * often it switched in its last window of CPU time, and asks the tick to
 * move it to a POSIX timer when that was more than SWITCH_LIMIT times per
 * CPU-second (blocked or preempted), or when it blocked at most LONG_LIMIT
 * times a CPU-second in each of its last LONG_WINDOWS windows (long bursts,
 * with a period of LONG_MIN_TICKS ticks or more). The thread
 * measures itself so that the profiler opens no file to learn it: a descriptor
 * of ours open at the wrong moment is one an application closing and reusing
 * numbers would lose or have closed (docs/security.md, "Descriptors shared with
 * the application"). A thread that rarely runs is judged rarely, and costs the
 * kernel little either way; a short-lived thread, which perf task clocks
 * serve best, ends before its first window does. */
static void judge_switches(uint64_t cpu_now) {
  if (!cpu_now || perf_last.moving ||
      !atomic_load_explicit(&cpu.adapt, memory_order_relaxed))
    return;
  if (perf_last.window_cpu_ns &&
      cpu_now - perf_last.window_cpu_ns < SWITCH_WINDOW_NS)
    return;
  switch_counts now, d;
  if (!thread_switches(&now))
    return;
  uint64_t d_ns = cpu_now - perf_last.window_cpu_ns;
  int judged = perf_last.window_cpu_ns != 0 &&
               switches_since(&perf_last.window_switches, &now, &d);
  perf_last.window_cpu_ns = cpu_now;
  perf_last.window_switches = now;
  if (!judged)
    return;
  int long_window =
      !switches_over(d.blocked, d_ns, LONG_LIMIT) && period_spans_ticks();
  perf_last.long_windows = long_window ? perf_last.long_windows + 1 : 0;
  if (switches_over(d.all, d_ns, SWITCH_LIMIT)) {
    perf_last.moving = request_move(MOVE_SWITCHY, d.all * 1000000000ull / d_ns);
  } else if (perf_last.long_windows >= LONG_WINDOWS &&
             request_move(MOVE_LONG, 0)) {
    perf_last.moving = 1;
    perf_last.long_gen = atomic_load_explicit(&cpu.gen, memory_order_relaxed);
    perf_last.window_left_ns = 0;
  }
}

/* Async-signal-safe and bounded: one getrusage per SWITCH_WINDOW_NS of the
 * thread's sampled CPU time. On a POSIX timer sample (quantity: its CPU
 * time) of a thread that left its perf task clock for its long bursts in
 * this run: asks the tick to move it back when it blocked more than
 * BACK_LIMIT times per CPU-second in the window and switched (blocked or
 * preempted) at most SWITCH_LIMIT times,
 * or when the period in force no longer spans LONG_MIN_TICKS ticks (the
 * governor sped sampling up again).
 * Its next perf sample, whenever that comes, starts a run of them afresh
 * (perf_cpu_since_last: a first sample weighs at most a period). */
static void judge_posix(int64_t quantity) {
  unsigned gen = atomic_load_explicit(&cpu.gen, memory_order_relaxed);
  perf_last.gen = ~gen;
  if (perf_last.long_gen != gen ||
      !atomic_load_explicit(&cpu.adapt, memory_order_relaxed))
    return;
  int first = perf_last.window_left_ns == 0; /* the first window starts */
  if (!first && (perf_last.window_left_ns -= quantity) > 0)
    return;
  switch_counts now, d;
  if (!thread_switches(&now))
    return;
  uint64_t d_ns =
      (uint64_t)((int64_t)SWITCH_WINDOW_NS - perf_last.window_left_ns);
  int judged = !first && switches_since(&perf_last.window_switches, &now, &d);
  perf_last.window_switches = now;
  perf_last.window_left_ns = (int64_t)SWITCH_WINDOW_NS;
  if (!judged)
    return;
  int often = switches_over(d.blocked, d_ns, BACK_LIMIT) &&
              !switches_over(d.all, d_ns, SWITCH_LIMIT);
  if ((often || !period_spans_ticks()) && request_move(MOVE_BACK, 0))
    perf_last.long_gen = ~gen;
}

/* Async-signal-safe: one ioctl on our own descriptor, and a second one
 * sample in PERF_REDRAW_EVERY (docs/signals.md, "Perf task clocks").
 *
 * The signal handled took one overflow of the event's refresh limit; one
 * is given back (PERF_EVENT_IOC_REFRESH), so that CP_PERF_AHEAD overflows stay
 * allowed and the event is still running: a REFRESH of a running event is
 * an atomic add, of a stopped one a reschedule of the thread's events. A
 * signal that ends the limit (POLL_HUP: the event stopped) when sig is a
 * standard signal may have had others merged into it, each an overflow
 * never given back: the whole limit is given again. Real-time signals
 * queue (none merge), so giving one back per signal keeps at most
 * CP_PERF_AHEAD of them queued.
 *
 * Every PERF_REDRAW_EVERY samples, and at the first sample of an event, its
 * interval is drawn again, uniformly in [period/2, 3 period/2)
 * (PERF_EVENT_IOC_PERIOD, which restarts the event's timer: the costly
 * call). A fixed interval locks onto work that is periodic in CPU time: 2 ms
 * of one function then 2 ms of another, sampled every exact 4 ms, puts
 * every sample in the same one. Between two draws the samples are one
 * interval apart, and each run of them starts at the phase where the
 * previous run, at another random interval, left off. The weights are CPU time,
 * so the mean interval does not matter; a new period from the governor is taken
 * at the next draw. */
static void perf_rearm(int fd, int sig, int hup) {
  unsigned gen = atomic_load_explicit(&cpu.gen, memory_order_relaxed);
  if (perf_last.drawn_fd != fd || perf_last.drawn_gen != gen ||
      --perf_last.draw_in == 0) {
    uint64_t period =
        atomic_load_explicit(&cpu.period_ns, memory_order_relaxed);
    uint64_t interval = period / 2 + cp_random_below(period);
    if (interval < PERF_MIN_PERIOD_NS)
      interval = PERF_MIN_PERIOD_NS;
    ioctl(fd, PERF_EVENT_IOC_PERIOD, &interval);
    perf_last.drawn_fd = fd;
    perf_last.drawn_gen = gen;
    perf_last.draw_in = PERF_REDRAW_EVERY;
  }
  cp_perf_task_clock_give_back(fd, sig, hup);
}

/* Async-signal-safe (clock_gettime, at times one getrusage): a perf
 * sample's CPU time since the thread's last one, and its weight in base
 * periods. */
static int64_t perf_quantity(int64_t *weight) {
  uint64_t cpu_now;
  int64_t quantity = perf_cpu_since_last(&cpu_now);
  judge_switches(cpu_now);
  int64_t base = (int64_t)cpu.base_period_ns;
  *weight = (quantity + base / 2) / base;
  if (*weight < 1)
    *weight = 1;
  return quantity;
}

/* Async-signal-safe: unwinds the interrupted context into a preallocated
 * ring slot and publishes it (a drop when the thread is already in one of
 * our handlers); then, when the context is at a system call, tells the
 * wait hooks whether this signal may have cut it short
 * (cp_signal_interrupted_call). began: cp_stats_hook_begin's. */
static void cpu_record(void *ucontext, int64_t weight, int64_t quantity,
                       uint64_t began) {
  cp_ring *ring = cp_agg_ring();
  if (!atomic_load_explicit(&cpu.active, memory_order_relaxed) || !ring) {
    /* nothing recorded */
  } else if (cp_thread.in_handler) {
    cp_record_drop(ring, CONTPROF_KIND_CPU, weight, quantity);
  } else {
    cp_thread.in_handler = 1;
    cp_record rec;
    cp_raw_sample *s =
        cp_record_begin(&rec, ring, CONTPROF_KIND_CPU, weight, quantity);
    if (s) {
      int truncated = 0;
      size_t n =
          cp_unwind_signal(ucontext, s->frames, cpu.max_frames, 1, &truncated);
      cp_record_commit(&rec, n, truncated);
    }
    cp_thread.in_handler = 0;
    cp_stats_hook_end(CONTPROF_KIND_CPU, began);
  }
  /* Last: an application signal sent while this handler ran is pending by
   * now (signals.h). */
  if (cp_signal_in_syscall(ucontext))
    cp_signal_interrupted_call(ucontext);
}

/* Async-signal-safe: the handlers count the signals they time (began: not
 * 0), each for as many calls as it stands for, by the path it took in the
 * kernel, whose cost there the stats bill once measured (kernel_cost.h). */
static void count_signal(uint64_t began, cp_signal_path path) {
  if (began)
    cp_stats_count_signals(CONTPROF_KIND_CPU, path,
                           cp_stats_hook_weight(CONTPROF_KIND_CPU));
}

/* Async-signal-safe, bounded (one pass over the descriptor bitmap when
 * the thread has had no sample yet): on a thread whose perf event's
 * real-time signal the kernel could not queue, and sent SIGIO instead
 * (cp_signal_guard_sigio; SIGIO comes to the event's thread, with no
 * siginfo of the event). It stands in for the lost signal: the event gets
 * back the overflow that signal would have given back (perf_rearm), so
 * that it does not stop, and the interrupted context is sampled, weighing
 * the CPU time since the thread's last sample. SIGIOs merge, but the
 * weights are CPU time: a merged one loses no time, only a stack; and
 * while the user's queue stays full (another process's signals hold it)
 * the profile is all SIGIO samples.
 *
 * The application's own SIGIO from a descriptor with O_ASYNC looks the
 * same (SI_KERNEL). An overflow comes at least half a period of the
 * thread's CPU after the previous one, so a SIGIO sooner than a quarter
 * period after the last sample is taken as the application's: the event
 * is only enabled (a no-op when it runs, where giving back an overflow
 * that was never taken would let them pile up), and the time stays for the
 * next sample. That is also what a late sample followed at once by a real
 * overflow gets, and the event runs on. Returns whether it sampled. */
static int cpu_on_lost_signal(void *ucontext) {
  uint64_t began = cp_stats_hook_begin(CONTPROF_KIND_CPU);
  pid_t tid = cp_gettid();
  int fd = perf_last.drawn_fd;
  if (!perf_fd_ours(fd) ||
      atomic_load_explicit(&perf_fd_tid[fd], memory_order_relaxed) != tid) {
    fd = -1;
    for (int w = 0; w < PERF_FD_LIMIT / 64 && fd < 0; w++) {
      uint64_t bits = atomic_load_explicit(&perf_fds[w], memory_order_acquire);
      for (; bits && fd < 0; bits &= bits - 1) {
        int at = w * 64 + __builtin_ctzll(bits);
        if (atomic_load_explicit(&perf_fd_tid[at], memory_order_relaxed) == tid)
          fd = at;
      }
    }
  }
  if (fd < 0)
    return 0; /* a stray SIGIO: not one of our events' */
  int active = atomic_load_explicit(&cpu.active, memory_order_relaxed);
  uint64_t now = cp_clock_ns(CLOCK_THREAD_CPUTIME_ID); /* 0: unread */
  if (perf_last.gen == atomic_load_explicit(&cpu.gen, memory_order_relaxed) &&
      now &&
      now <
          perf_last.cpu_ns +
              atomic_load_explicit(&cpu.period_ns, memory_order_relaxed) / 4) {
    if (active)
      ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
    return 0;
  }
  if (active)
    ioctl(fd, PERF_EVENT_IOC_REFRESH, 1);
  count_signal(began, CP_SIGNAL_PERF);
  int64_t weight;
  int64_t quantity = perf_quantity(&weight);
  cpu_record(ucontext, weight, quantity, began);
  return 1;
}

/* Async-signal-safe: runs in the sampling signal handler. Reads the label
 * set and the clock, unwinds into a preallocated ring slot, publishes it. */
CP_PASSTHROUGH static void cpu_signal_handler(int sig, siginfo_t *info,
                                              void *ucontext) {
  if (cp_thread.calibrating && cp_kernel_cost_take(sig, info))
    return;
  int saved_errno = errno;
  uint64_t began = cp_stats_hook_begin(CONTPROF_KIND_CPU);
  int64_t weight, quantity;
  int64_t period =
      (int64_t)atomic_load_explicit(&cpu.period_ns, memory_order_relaxed);
  int64_t slowdown = atomic_load_explicit(&cpu.slowdown, memory_order_relaxed);
  if (info->si_code == SI_TIMER && info->si_value.sival_int == TIMER_COOKIE) {
    int64_t expiries = 1 + (info->si_overrun > 0 ? info->si_overrun : 0);
    weight = expiries * slowdown;
    quantity = expiries * period;
    judge_posix(quantity);
    count_signal(began, CP_SIGNAL_QUEUED);
  } else if ((info->si_code == POLL_HUP || info->si_code == POLL_IN) &&
             perf_fd_ours(info->si_fd)) {
    if (atomic_load_explicit(&cpu.active, memory_order_relaxed))
      perf_rearm(info->si_fd, sig, info->si_code == POLL_HUP);
    quantity = perf_quantity(&weight);
    count_signal(began, CP_SIGNAL_PERF);
  } else if (info->si_code == SI_KERNEL && sig == SIGPROF &&
             atomic_load_explicit(&cpu.itimer_fallback, memory_order_relaxed)) {
    if (cp_thread.internal) { /* the kernel-cost measurement's thread */
      errno = saved_errno;
      return;
    }
    weight = slowdown;
    quantity = period;
    count_signal(began, CP_SIGNAL_QUEUED);
  } else {
    cp_signal_chain(sig, info, ucontext);
    errno = saved_errno;
    return;
  }
  cpu_record(ucontext, weight, quantity, began);
  errno = saved_errno;
}

/* A thread's first sampling point: random in (0, period], so that
 * short-lived threads get their fair share. Caller holds cpu.lock. */
static uint64_t first_expiry(void) {
  return 1 + cp_random_below(cpu.period_ns);
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
  uint64_t first = first_expiry();
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

/* A perf task clock for thread tid, signalling it, enabled. Caller holds
 * cpu.lock. Returns 0, or -1 with errno set. */
static int perf_create_for(pid_t tid, thread_timer *t) {
  uint64_t first = first_expiry();
  if (first < PERF_MIN_PERIOD_NS)
    first = PERF_MIN_PERIOD_NS;
  int fd = cp_perf_task_clock_open(tid, first, cpu.perf_exclude_kernel);
  if (fd < 0)
    return -1;
  if (cpu.perf_fd_floor > 0 && fd < cpu.perf_fd_floor) {
    int high = fcntl(fd, F_DUPFD_CLOEXEC, cpu.perf_fd_floor);
    close(fd);
    if (high < 0)
      return -1;
    fd = high;
  }
  struct stat st;
  if (fd >= PERF_FD_LIMIT || cp_perf_task_clock_signal(fd, tid, cpu.signal) ||
      fstat(fd, &st) != 0) {
    int err = fd >= PERF_FD_LIMIT ? EMFILE : errno;
    close(fd);
    errno = err;
    return -1;
  }
  uint64_t bit = 1ull << (fd % 64);
  atomic_store_explicit(&perf_fd_tid[fd], tid, memory_order_relaxed);
  atomic_fetch_or_explicit(&perf_fds[fd / 64], bit, memory_order_release);
  t->fd = fd;
  t->dev = st.st_dev;
  t->ino = st.st_ino;
  if (ioctl(fd, PERF_EVENT_IOC_REFRESH, CP_PERF_AHEAD) != 0) {
    int err = errno;
    atomic_fetch_and(&perf_fds[fd / 64], ~bit);
    close(fd);
    t->fd = -1;
    errno = err;
    return -1;
  }
  cpu.nperf++;
  return 0;
}

/* Whether t's descriptor is still its perf event: the application may have
 * closed it (closefrom, a daemon's loop) or dup2'd over it, and opened a file
 * of its own under the number. */
static int perf_fd_still_ours(const thread_timer *t) {
  cp_own_fd o = {.fd = t->fd, .dev = t->dev, .ino = t->ino};
  return cp_own_fd_is_ours(&o);
}

/* Forgets t's perf event, closing the descriptor if `ours`. */
static void perf_forget(thread_timer *t, int ours) {
  uint64_t bit = 1ull << (t->fd % 64);
  atomic_fetch_and_explicit(&perf_fds[t->fd / 64], ~bit, memory_order_release);
  if (ours)
    close(t->fd);
  t->fd = -1;
  cpu.nperf--;
}

/* Closes t's perf event, unless its number now holds another file. */
static void perf_close(thread_timer *t) {
  if (t->fd >= 0)
    perf_forget(t, perf_fd_still_ours(t));
}

/* Which clock serves this run: perf task clocks unless configured off or
 * refused here (tried on the calling thread, kernel mode included first). */
static void choose_clock(const cp_config *cfg) {
  cpu.perf = 0;
  atomic_store(&cpu.adapt, 0);
  if (cfg->cpu_clock == CP_CPU_CLOCK_POSIX)
    return;
  pid_t self = (pid_t)syscall(SYS_gettid);
  int fd = -1;
  for (int exclude_kernel = 0; exclude_kernel <= 1 && fd < 0;
       exclude_kernel++) {
    fd = cp_perf_task_clock_open(self, cpu.period_ns, exclude_kernel);
    cpu.perf_exclude_kernel = exclude_kernel;
  }
  if (fd < 0) {
    if (cfg->cpu_clock == CP_CPU_CLOCK_PERF)
      cp_warn("CONTPROF_CPU_CLOCK=perf: perf_event_open refused (%s); using "
              "POSIX CPU timers",
              strerror(errno));
    else
      cp_info("CPU samples from POSIX CPU timers (perf_event_open: %s)",
              strerror(errno));
    return;
  }
  close(fd);
  /* One descriptor per thread, taken from the application's allowance: at
   * most an eighth of it, and above the numbers the application allocates
   * from (as every descriptor of ours, own_fd.h), so that its own
   * descriptors keep the numbers they would have had. Threads past it get
   * POSIX timers. */
  struct rlimit nofile = {1024, 1024};
  getrlimit(RLIMIT_NOFILE, &nofile);
  rlim_t soft =
      nofile.rlim_cur == RLIM_INFINITY ? (rlim_t)1 << 20 : nofile.rlim_cur;
  cpu.perf_budget = (size_t)(soft / 8);
  cpu.perf_fd_floor = cp_own_fd_floor();
  cpu.nperf = 0;
  cpu.perf = cpu.perf_budget > 0;
  switch_counts probe;
  int adapt = cpu.perf && cfg->cpu_clock == CP_CPU_CLOCK_AUTO &&
              thread_switches(&probe);
  struct timespec tick;
  cpu.tick_ns =
      clock_getres(CLOCK_MONOTONIC_COARSE, &tick) == 0
          ? (uint64_t)tick.tv_sec * 1000000000ull + (uint64_t)tick.tv_nsec
          : 0;
  if (cpu.tick_ns < 1000000)
    cpu.tick_ns = 0; /* not a tick (HZ is at most 1000): long moves off */
  atomic_store(&cpu.adapt, adapt);
  cp_info("CPU samples from perf task clocks%s, up to %zu threads%s",
          cpu.perf_exclude_kernel ? " (user mode only)" : "", cpu.perf_budget,
          adapt ? "; threads that switch often, or run in long bursts, get "
                  "POSIX CPU timers"
          : cfg->cpu_clock == CP_CPU_CLOCK_AUTO
              ? "; no per-thread switch counts: threads keep them however "
                "often they switch"
              : "");
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

/* Caller holds cpu.lock. A perf task clock, else a POSIX timer. Returns 0,
 * or -1 with errno set by the POSIX timer's creation. */
static int clock_create_for(pid_t tid, thread_timer *t) {
  *t = (thread_timer){.tid = tid, .timer_id = -1, .fd = -1};
  if (cpu.perf && cpu.nperf >= cpu.perf_budget) {
    if (!cpu.perf_failed_logged++)
      cp_info("%zu threads (an eighth of RLIMIT_NOFILE) have perf task "
              "clocks: threads that start meanwhile get POSIX CPU timers",
              cpu.perf_budget);
  } else if (cpu.perf) {
    if (perf_create_for(tid, t) == 0)
      return 0;
    if (errno == ESRCH)
      return -1; /* the thread ended meanwhile */
    if (!cpu.perf_failed_logged++)
      cp_warn("perf task clock refused for a thread (%s); threads refused "
              "get POSIX CPU timers",
              strerror(errno));
  }
  return timer_create_for(tid, &t->timer_id);
}

/* Caller holds cpu.lock. */
static void clock_delete(thread_timer *t) {
  perf_close(t);
  if (t->timer_id >= 0)
    syscall(SYS_timer_delete, t->timer_id);
  t->timer_id = -1;
}

static void cpu_thread_started(pid_t tid) {
  if (atomic_load(&cpu.itimer_fallback))
    return;
  pthread_mutex_lock(&cpu.lock);
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
  thread_timer t;
  if (clock_create_for(tid, &t) == 0) {
    cpu.timers[cpu.ntimers++] = t;
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
      clock_delete(&cpu.timers[i]);
      cpu.timers[i] = cpu.timers[--cpu.ntimers];
      break;
    }
  }
  pthread_mutex_unlock(&cpu.lock);
}

/* Caller holds cpu.lock. t's thread leaves its perf task clock for a POSIX
 * timer, if one can be made (reason: MOVE_SWITCHY, with its switches per
 * CPU-second, or MOVE_LONG). The CPU time between its last perf sample and
 * the timer's first expiry is not weighed exactly: the first expiry weighs a
 * whole period after a random part of one, which is that time on average. */
static void move_to_posix(thread_timer *t, int reason,
                          uint64_t switches_per_cpu_s) {
  int id;
  if (timer_create_for(t->tid, &id) != 0)
    return; /* ended meanwhile, or no timers left (RLIMIT_SIGPENDING): the
               thread keeps its perf task clock */
  perf_close(t);
  t->timer_id = id;
  cp_stats_count_cpu_clock_moved();
  if (reason == MOVE_SWITCHY && !cpu.moved_logged++)
    cp_info("thread %d switches %llu times per second of its CPU time: its "
            "CPU samples now come from a POSIX CPU timer (a perf task clock "
            "costs the kernel work at every switch); so will other such "
            "threads'",
            (int)t->tid, (unsigned long long)switches_per_cpu_s);
  else if (reason == MOVE_LONG && !cpu.long_logged++)
    cp_info("thread %d runs in bursts of 300 ms of CPU or more: its CPU "
            "samples now come from a POSIX CPU timer, which the kernel checks "
            "at its tick (a perf task clock's own timer costs more at every "
            "sample); so will other such threads', and they come back to perf "
            "task clocks if they start blocking often",
            (int)t->tid);
}

/* Caller holds cpu.lock. t's thread, moved to a POSIX timer for its long
 * bursts, blocks often again: back to a perf task clock, if one can be made
 * (else it keeps its timer). Its first perf sample comes after a random part
 * of a period and weighs a period, as a new thread's: what the timer's last
 * period left unsampled, on average. */
static void move_back_to_perf(thread_timer *t) {
  if (!cpu.perf || t->timer_id < 0 || cpu.nperf >= cpu.perf_budget)
    return;
  thread_timer fresh = {.tid = t->tid, .timer_id = -1, .fd = -1};
  if (perf_create_for(t->tid, &fresh) != 0)
    return;
  syscall(SYS_timer_delete, t->timer_id);
  *t = fresh;
  if (!cpu.back_logged++)
    cp_info("thread %d blocks often again (or the sampling period is down to "
            "a few ticks): its CPU samples come from a perf task clock again",
            (int)t->tid);
}

/* Caller holds cpu.lock. Moves the threads the handlers asked to move
 * (judge_switches, judge_posix). A tid whose thread ended, or that no
 * longer has the clock it asked to leave, is passed over. */
static void move_switching_threads(void) {
  uint64_t rate = atomic_exchange(&move_rate, 0);
  for (int i = 0; i < SWITCH_REQUESTS; i++) {
    pid_t req = atomic_exchange(&move_requests[i], 0);
    pid_t tid = req & MOVE_TID_MASK;
    int reason = req & ~MOVE_TID_MASK;
    for (size_t j = 0; tid && j < cpu.ntimers; j++) {
      thread_timer *t = &cpu.timers[j];
      if (t->tid != tid)
        continue;
      if (reason == MOVE_BACK)
        move_back_to_perf(t);
      else if (t->fd >= 0)
        move_to_posix(t, reason, rate);
      break;
    }
  }
}

/* Caller holds cpu.lock. The application installed its own handler for our
 * signal (SIGPROF, most often): a SIGPROF it directs at a thread while one
 * of ours is pending there would merge with ours, and one of the two would
 * be lost. Every thread's clock is moved to a real-time signal, which
 * queues: perf task clocks by F_SETSIG on their descriptor, POSIX timers
 * made anew (the first expiry of the new one is random in a period, as at a
 * thread's start, so the weights stay unbiased). The old signal keeps our
 * handler, which passes the application's signals on and takes ours still
 * in flight. */
static void move_to_rt_signal(void) {
  int sig = cp_signal_move_to_rt(cpu.signal, cpu_signal_handler, "CPU",
                                 &cpu.rt_failed);
  if (sig < 0)
    return;
  cp_signal_guard_sigio(cpu_on_lost_signal);
  cp_kernel_cost_signal_moved(cpu.signal, sig);
  cpu.signal = sig;
  cp_threads_set_sampling_signal(sig);
  for (size_t i = 0; i < cpu.ntimers; i++) {
    thread_timer *t = &cpu.timers[i];
    if (t->fd >= 0 && perf_fd_still_ours(t))
      fcntl(t->fd, F_SETSIG, sig);
    int id;
    if (t->timer_id >= 0 && timer_create_for(t->tid, &id) == 0) {
      syscall(SYS_timer_delete, t->timer_id);
      t->timer_id = id;
    }
  }
}

/* Once a second: a perf descriptor the application closed (a daemon's
 * close loop, closefrom) or replaced (dup2) is made again, so that thread
 * keeps its CPU samples. Its first new sample weighs the CPU time since its
 * last one, so none of the time without a clock is lost, only its stacks.
 * Then, with CONTPROF_CPU_CLOCK=auto, threads that switch often leave their
 * perf task clocks; the profiles say how many threads each clock serves. */
static void cpu_tick(void) {
  pthread_mutex_lock(&cpu.lock);
  for (size_t i = 0; i < cpu.ntimers; i++) {
    thread_timer *t = &cpu.timers[i];
    if (t->fd < 0 || perf_fd_still_ours(t))
      continue;
    perf_forget(t, 0);
    thread_timer fresh;
    if (clock_create_for(t->tid, &fresh) == 0) {
      *t = fresh;
      if (!cpu.perf_lost_logged++)
        cp_info("the application closed a perf task clock's descriptor "
                "(thread %d); it was made again",
                (int)fresh.tid);
    }
  }
  move_switching_threads();
  if (cp_signal_claimed(cpu.signal) && !cpu.rt_failed)
    move_to_rt_signal();
  unsigned long long absorbed = cp_signal_sigio_absorbed();
  if (absorbed && !cpu.sigio_logged++)
    cp_warn("the kernel could not queue %llu CPU sampling signals (the "
            "user's RLIMIT_SIGPENDING, shared by all of its processes, is "
            "spent) and sent SIGIO instead; contprof took each in its "
            "signal's stead (the application's own SIGIO handler, if it "
            "has one, sees them too), and the samples' CPU time is "
            "counted, some of their stacks lost",
            absorbed);
  pthread_mutex_unlock(&cpu.lock);
}

/* How many threads each clock samples (the profile's cpu_clock_threads).
 * Caller holds cpu.lock. */
static void publish_clocks_locked(void) {
  unsigned perf = 0, posix = 0;
  for (size_t i = 0; i < cpu.ntimers; i++) {
    perf += cpu.timers[i].fd >= 0;
    posix += cpu.timers[i].timer_id >= 0;
  }
  cp_stats_set_cpu_clocks(perf, posix);
}

/* On the uploader thread, before each profile is encoded, also in a process
 * that ends before its first tick; the last profile, made after cpu_stop,
 * keeps what cpu_stop published. */
static void cpu_before_export(cp_generation *g) {
  (void)g;
  pthread_mutex_lock(&cpu.lock);
  if (atomic_load(&cpu.active))
    publish_clocks_locked();
  pthread_mutex_unlock(&cpu.lock);
}

static void cpu_after_fork_child(void) {
  /* POSIX timers are not inherited; the table describes the parent's. Its
   * perf descriptors are inherited and count the parent's threads: they are
   * closed, found from the bitmap (a lost thread may have been changing the
   * table) and checked to be perf events still. (The path is made by hand,
   * as make_uuid's id in profiler.c is.) */
  pthread_mutex_init(&cpu.lock, NULL);
  for (int w = 0; w < PERF_FD_LIMIT / 64; w++) {
    uint64_t bits = atomic_exchange(&perf_fds[w], 0);
    for (; bits; bits &= bits - 1) {
      int fd = w * 64 + __builtin_ctzll(bits);
      char path[32] = "/proc/self/fd/", digits[12], target[64];
      size_t nd = 0, at = strlen(path);
      for (int v = fd; nd == 0 || v; v /= 10)
        digits[nd++] = (char)('0' + v % 10);
      while (nd)
        path[at++] = digits[--nd];
      path[at] = 0;
      ssize_t n = readlink(path, target, sizeof target - 1);
      if (n > 0 && (target[n] = 0, strcmp(target, PERF_FD_LINK) == 0))
        close(fd);
    }
  }
  cpu.nperf = 0;
  cpu.ntimers = 0;
  atomic_store(&cpu.active, 0);
  atomic_store(&cpu.itimer_fallback, 0);
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_PROF, &off, NULL);
}

static int cpu_start(const cp_config *cfg) {
  cpu.base_period_ns = 1000000000ull / (uint64_t)cfg->cpu_hz;
  atomic_store(&cpu.period_ns, cpu.base_period_ns);
  atomic_store(&cpu.slowdown, 1);
  cpu.max_frames = (size_t)cfg->max_frames;
  cp_unwind_init();
  int sig = cp_signal_install(SIGPROF, cpu_signal_handler);
  if (sig < 0)
    return CONTPROF_ERR_SYSTEM;
  if (sig >= SIGRTMIN)
    cp_signal_guard_sigio(cpu_on_lost_signal);
  cpu.signal = sig;
  cp_threads_set_sampling_signal(sig);
  choose_clock(cfg);
  cp_kernel_cost_use(sig, cpu.perf ? cpu.perf_exclude_kernel : -1,
                     cfg->kernel_cost_after_ms);
  cpu.perf_failed_logged = cpu.perf_lost_logged = cpu.moved_logged = 0;
  cpu.long_logged = cpu.back_logged = 0;
  cpu.rt_failed = 0;
  for (int i = 0; i < SWITCH_REQUESTS; i++)
    atomic_store(&move_requests[i], 0);
  atomic_store(&move_rate, 0);
  atomic_fetch_add(&cpu.gen, 1);
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
  publish_clocks_locked(); /* what served the last period */
  for (size_t i = 0; i < cpu.ntimers; i++)
    clock_delete(&cpu.timers[i]);
  cpu.ntimers = 0;
  pthread_mutex_unlock(&cpu.lock);
}

/* itimerspec / itimerval of one period in force. */
static struct timespec period_timespec(uint64_t ns) {
  return (struct timespec){(time_t)(ns / 1000000000ull),
                           (long)(ns % 1000000000ull)};
}

/* On the profiler's thread: samples every factor base periods from now on.
 * Perf task clocks take the new period at their next draw of an interval,
 * within PERF_REDRAW_EVERY samples (perf_rearm);
 * POSIX timers and the setitimer fallback are re-armed here. */
static void cpu_slow_down(unsigned factor) {
  uint64_t period = cpu.base_period_ns * factor;
  atomic_store(&cpu.period_ns, period);
  atomic_store(&cpu.slowdown, factor);
  pthread_mutex_lock(&cpu.lock);
  for (size_t i = 0; i < cpu.ntimers; i++) {
    if (cpu.timers[i].timer_id < 0)
      continue;
    uint64_t first = first_expiry();
    struct itimerspec its = {.it_interval = period_timespec(period),
                             .it_value = period_timespec(first)};
    syscall(SYS_timer_settime, cpu.timers[i].timer_id, 0, &its, NULL);
  }
  pthread_mutex_unlock(&cpu.lock);
  if (atomic_load(&cpu.itimer_fallback)) {
    struct itimerval itv = {
        .it_interval = {(time_t)(period / 1000000000ull),
                        (suseconds_t)(period % 1000000000ull / 1000)},
    };
    itv.it_value = itv.it_interval;
    setitimer(ITIMER_PROF, &itv, NULL);
  }
}

const cp_sampler cp_cpu_sampler = {
    .name = "cpu",
    .profile = CP_PROFILE_CPU,
    .start = cpu_start,
    .stop = cpu_stop,
    .thread_started = cpu_thread_started,
    .thread_exited = cpu_thread_exited,
    .after_fork_child = cpu_after_fork_child,
    .tick = cpu_tick,
    .before_export = cpu_before_export,
    .slow_down = cpu_slow_down,
};
