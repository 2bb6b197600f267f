/* The kernel's side of a sampling signal, measured once per process on the
 * profiler's own thread, so that the profiles can count it
 * (docs/overhead.md, "The kernel's side of each signal").
 *
 * A sample costs the sampled thread more than its handler: for a perf task
 * clock, the clock's own timer interrupt, the overflow's signal and its
 * delivery, and the sigreturn after the handler; for a POSIX timer or a
 * wall signal, the signal's delivery and sigreturn. None of it runs code of
 * ours, and how much it is depends on the machine (on a virtual machine a
 * timer interrupt is two exits to the hypervisor: 30 us a perf sample here,
 * against a few us on bare metal), so it is measured where the profiler
 * runs: a loop on the profiler's thread with no signal, then with the
 * signal, the extra CPU time divided by the signals taken. The handlers
 * count their signals by path (cp_stats_count_signals), and the stats bill
 * each path's cost per signal from the measurement on. */
#ifndef CP_SAMPLERS_KERNEL_COST_H
#define CP_SAMPLERS_KERNEL_COST_H

#include <signal.h>

/* A sampler whose signals are sig (with our handler, which calls
 * cp_kernel_cost_take first) asks for the measurement, after_ms from now
 * (CONTPROF_KERNEL_COST_AFTER; -1: never): with a perf task clock when
 * perf_exclude_kernel is 0 or 1 (how the CPU sampler opens them), the
 * queued-signal path only when -1. Not async-signal-safe. */
void cp_kernel_cost_use(int sig, int perf_exclude_kernel, long after_ms);

/* The sampler whose signal was old moved to new (the application claimed
 * old: cp_signal_move_to_rt): the measurement uses new, so that its perf
 * signals never merge with one of the application's, and it never unblocks
 * a signal the application sends. Not async-signal-safe. */
void cp_kernel_cost_signal_moved(int old, int new_sig);

/* Whether the measurement is due (the delay a sampler asked for has
 * passed, not measured yet): 1 once, then the caller runs
 * cp_kernel_cost_measure, or calls cp_kernel_cost_postpone to be told again
 * at its next call. The profiler's tick asks, and has the scheduler's
 * thread measure: the drain thread's samples would wait 20 ms. */
int cp_kernel_cost_due(void);
void cp_kernel_cost_postpone(void);
/* Measures, once per process, on the calling thread (one of ours, every
 * signal blocked), and hands the costs to the stats. */
void cp_kernel_cost_measure(void);

/* Async-signal-safe, bounded: called first by the sampling handlers while
 * cp_thread.calibrating is set (only on the thread measuring). Returns 1 when
 * info is one of the measurement's own signals (then taken here), 0 for any
 * other signal, which the handler treats as usual. */
int cp_kernel_cost_take(int sig, const siginfo_t *info);

/* In the child of fork: what was measured stays (the same machine); a
 * measurement the parent was making is forgotten and made again. */
void cp_kernel_cost_after_fork_child(void);

#endif
