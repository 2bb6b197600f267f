/* What the profiler costs the process it runs in: the CPU of its own threads,
 * the time its handlers and hooks take on the application's threads, and its
 * samples and drops per kind, reported in every profile (docs/overhead.md). */
#ifndef CP_STATS_H
#define CP_STATS_H

#include <stdint.h>

#include "contprof/runtime.h"

/* The calling thread is one of the profiler's own: its CPU time is the
 * profiler's until cp_stats_thread_end. cp_start_internal_thread (and
 * cp_start_joined_thread) calls both around the thread's function. Not
 * async-signal-safe. */
void cp_stats_thread_begin(void);
void cp_stats_thread_end(void);
/* The calling thread (one of ours) works for the sampler of kind alone (the
 * wall timer): the governor charges its CPU to that sampler, not to all. */
void cp_stats_thread_works_for(contprof_sample_kind kind);

/* Async-signal-safe, lock-free: ns spent in a handler or hook of kind on an
 * application thread. */
void cp_stats_add_hook_ns(contprof_sample_kind kind, uint64_t ns);

/* Times a handler or a sampled hook: one call in CP_STATS_HOOK_EVERY of
 * each kind on each thread, at a random phase, is timed and counts for that
 * many (the cost of one sample varies little, and the estimate stays
 * unbiased); where they are rare, one in CP_STATS_HOOK_RARE is. The clock is
 * CLOCK_MONOTONIC where the vDSO reads it (tens of ns), an interval that was
 * preempted counting at the mean of the others; else the thread's CPU clock,
 * a system call (cp_stats_hook_clock; docs/overhead.md, "Handlers and
 * hooks"). What the two reads add to the interval is taken off
 * (cp_stats_calibrate). Both are async-signal-safe; begin returns 0 when
 * this call is not timed. */
#define CP_STATS_HOOK_EVERY 64
/* One in this many where the kind's calls are rare on the thread (stats.c:
 * rarer than one per 0.5 ms). */
#define CP_STATS_HOOK_RARE 8
uint64_t cp_stats_hook_begin(contprof_sample_kind kind);
void cp_stats_hook_end(contprof_sample_kind kind, uint64_t began);
/* Between begin and end of a timed call: how many calls it counts for
 * (CP_STATS_HOOK_EVERY or CP_STATS_HOOK_RARE); the handlers count the
 * signals they time as many times. Async-signal-safe. */
uint32_t cp_stats_hook_weight(contprof_sample_kind kind);

/* Chooses, once per process (a fork's child keeps it: the same machine),
 * the clock the hooks are timed on: CLOCK_MONOTONIC when a pair of its
 * reads takes under 200 ns (the vDSO), measured then with 16 reads;
 * else the thread's CPU clock. Returns it. Called at the start: a few
 * reads of the vDSO, or two system calls. */
int cp_stats_choose_clock(void);
/* The clock chosen (CLOCK_THREAD_CPUTIME_ID until then). Async-signal-safe. */
int cp_stats_hook_clock(void);
/* Measures, once per process, what two back-to-back reads of that clock
 * take at least, the part of each timed interval that is the reads' own
 * (over a microsecond for the thread's CPU clock on a VM):
 * cp_stats_hook_end takes it off from then on. For the CPU clock 16 system
 * calls; not in a handler (the profiler calls it after its first drain).
 * cp_stats_clock_pair_ns: that figure, -1 before. */
void cp_stats_calibrate(void);
int64_t cp_stats_clock_pair_ns(void);
/* Tests: times the hooks on clock from now on, its pair measured. */
void cp_stats_set_hook_clock(int clock);
/* The timed calls of kind whose interval was preempted (longer than 250
 * us of the monotonic clock, ended on another CPU, or switched away from:
 * below): counted at the mean of the others. */
uint64_t cp_stats_preempted_calls(contprof_sample_kind kind);
/* Whether a timed call also sees that its thread was switched away from
 * for less than those 250 us (or interrupted by a signal): glibc's rseq
 * area, where the kernel confirms it (stats.c). Set with the monotonic
 * clock's choice. */
int cp_stats_switch_detection(void);

/* Samples of kind made outside the aggregator's ring (the live-heap
 * snapshot at each export); added to the next cp_stats_take. */
void cp_stats_add_samples(contprof_sample_kind kind, uint64_t n);

/* Samples the aggregator took from the ring (its drain thread), and the CPU
 * time it spent taking them: the part of the profiler's threads' work that
 * grows with the samples (the rest, exports and uploads, grows with the
 * periods). */
void cp_stats_count_samples(contprof_sample_kind kind, uint64_t n);
/* The samples of kind counted so far (since the process or its fork). */
uint64_t cp_stats_samples_counted(contprof_sample_kind kind);
void cp_stats_add_drain_ns(uint64_t ns);

/* The sums since the process started, for the governor (samplers/governor.c):
 * its own windows, whatever the periods. Not async-signal-safe. */
typedef struct cp_stats_totals {
  uint64_t threads_cpu_ns;                           /* all of our threads */
  uint64_t kind_threads_cpu_ns[CONTPROF_KIND_COUNT]; /* of them, per kind */
  uint64_t hook_ns[CONTPROF_KIND_COUNT];
  uint64_t kernel_ns[CONTPROF_KIND_COUNT]; /* cp_stats_count_signals' bill */
  uint64_t process_cpu_ns;
  uint64_t samples[CONTPROF_KIND_COUNT];
  uint64_t drain_ns; /* of threads_cpu_ns, the aggregator's draining */
} cp_stats_totals;
void cp_stats_totals_read(cp_stats_totals *out);

/* The governor's slowdown of kind's sampling (1: as configured; the rate is
 * the configured one divided by it), for each profile to report. */
void cp_stats_set_slowdown(contprof_sample_kind kind, unsigned factor);

/* How many threads' CPU samples come from each clock (the CPU sampler sets
 * it once a second: cpu.c, "which clock"), for each profile to report. */
void cp_stats_set_cpu_clocks(unsigned perf, unsigned posix);
/* One thread's CPU samples moved from a perf task clock to a POSIX timer. */
void cp_stats_count_cpu_clock_moved(void);
/* One sample of kind taken at the end of a gap drawn with a mean raised
 * because the ring was filling (cp_ring_pressure). Async-signal-safe. */
void cp_stats_count_thinned(contprof_sample_kind kind);

/* The paths a sampling signal takes in the kernel, each with its own cost
 * on the sampled thread, measured once per process (kernel_cost.h). */
typedef enum cp_signal_path {
  CP_SIGNAL_PERF,   /* a perf task clock's overflow: timer interrupt, signal */
  CP_SIGNAL_QUEUED, /* a POSIX timer's or a queued signal's delivery */
  CP_SIGNAL_PATHS
} cp_signal_path;
/* n signals of kind's sampler came by path. Async-signal-safe: one relaxed
 * atomic add (the handlers count the signals they time, CP_STATS_HOOK_EVERY
 * each). */
void cp_stats_count_signals(contprof_sample_kind kind, cp_signal_path path,
                            uint64_t n);
/* The kernel's CPU time on the sampled thread for one signal by path, as
 * measured: signals counted from now on are billed at it (those before are
 * not). Not async-signal-safe. */
void cp_stats_set_signal_cost(cp_signal_path path, uint64_t ns);

/* Fixed memory the profiler holds apart from what the scheduler reads from
 * its modules (the ring, the live-heap table): set once, at creation. */
enum { CP_STATS_MEM_RING, CP_STATS_MEM_HEAP_TABLE, CP_STATS_MEM_COUNT };
void cp_stats_set_fixed_memory(int which, uint64_t bytes);
uint64_t cp_stats_fixed_memory(void);

/* One period's costs; cp_stats_take adds to *out the times, the process CPU
 * and the samples made outside the ring since its previous call (the first
 * call: since cp_stats_reset). */
typedef struct cp_period_stats {
  uint64_t threads_cpu_ns;               /* the profiler's threads */
  uint64_t hooks_ns;                     /* on application threads */
  uint64_t hook_ns[CONTPROF_KIND_COUNT]; /* the same, per kind */
  /* The kernel's side of the sampling signals, estimated: the signals
   * counted by path times each path's measured cost (0 until measured). */
  uint64_t kernel_ns;
  uint64_t kernel_kind_ns[CONTPROF_KIND_COUNT];
  uint64_t signal_cost_ns[CP_SIGNAL_PATHS]; /* the costs billed at */
  /* Of threads_cpu_ns: the threads that work for one kind alone (the wall
   * timer), and the aggregator's draining of the ring. */
  uint64_t kind_threads_cpu_ns[CONTPROF_KIND_COUNT];
  uint64_t drain_ns;
  uint64_t process_cpu_ns;                    /* the whole process */
  uint64_t samples[CONTPROF_KIND_COUNT];      /* filled by the aggregator */
  uint64_t drops[CONTPROF_KIND_COUNT];        /* filled by the aggregator */
  uint64_t thinned[CONTPROF_KIND_COUNT];      /* cp_stats_count_thinned */
  uint64_t memory_bytes;                      /* filled by the scheduler */
  unsigned slowdown[CONTPROF_KIND_COUNT];     /* at the period's end */
  unsigned slowdown_max[CONTPROF_KIND_COUNT]; /* the most in the period */
  /* Filled by the scheduler from the configuration: the profiles on, the
   * cap, and each kind's rate at the period's end (cp_config_rate). */
  unsigned profiles;
  double max_overhead_pct;
  double rate[CONTPROF_KIND_COUNT];
  unsigned cpu_clocks_perf;  /* threads on perf task clocks, at the end */
  unsigned cpu_clocks_posix; /* threads on POSIX CPU timers, at the end */
  unsigned cpu_clocks_moved; /* threads moved from perf to POSIX, in it */
} cp_period_stats;

/* Uploader thread (one caller at a time). */
void cp_stats_take(cp_period_stats *out);
/* Starts the counting afresh (profiler start). */
void cp_stats_reset(void);
/* In a fork child: the parent's threads are not ours. */
void cp_stats_after_fork_child(void);

/* The governor's slowdown of the sampler of kind `of` (a kind's sampled_as,
 * kinds.h) at s's end, and the most in s; at least 1 (as configured). */
static inline unsigned cp_stats_slowdown(const cp_period_stats *s, int of) {
  return s->slowdown[of] ? s->slowdown[of] : 1;
}
static inline unsigned cp_stats_slowdown_max(const cp_period_stats *s, int of) {
  unsigned f = cp_stats_slowdown(s, of);
  return s->slowdown_max[of] > f ? s->slowdown_max[of] : f;
}

/* What the profiler cost in s: its threads, its handlers and hooks, and the
 * kernel's side of its signals. */
static inline uint64_t cp_stats_profiler_ns(const cp_period_stats *s) {
  return s->threads_cpu_ns + s->hooks_ns + s->kernel_ns;
}

/* cp_stats_profiler_ns over the process's CPU, in percent (0 when the
 * process used none). */
double cp_stats_overhead_pct(const cp_period_stats *s);

/* The last finished period and the totals since start, for contprof_stats. */
void cp_stats_publish(const cp_period_stats *period);
void cp_stats_read(cp_period_stats *last, cp_period_stats *total);

#endif
