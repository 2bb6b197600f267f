/* Native stack capture for signal handlers: frame pointers where the code
 * keeps them (fpwalk.c), libunwind otherwise. */
#ifndef CP_UNWIND_H
#define CP_UNWIND_H

#include <stddef.h>
#include <stdint.h>

#include "thread_state.h"

/* One-time setup of libunwind's global state. Not signal-safe; call before
 * sampling. In `auto` and `fp` modes the frame-pointer walker's table and
 * libunwind's first backtrace (its trace cache's pthread key) wait for the
 * profiler's first tick (cp_unwind_tick); until then libunwind steps from
 * each sample's context. Call cp_fpwalk_init and cp_unwind_warm_up to have
 * them now. */
void cp_unwind_init(void);

/* At the profiler's tick, about once a second, when cp_unwind_tick_due:
 * builds or rebuilds the walker's table (cp_fpwalk_refresh) and, the first
 * time, makes the process's first backtrace. Milliseconds: the profiler
 * runs it on a thread that does not drain samples. Not signal-safe. */
void cp_unwind_tick(void);

/* Whether cp_unwind_tick has work (a table to build, objects loaded or
 * unloaded since it was built, the first backtrace to make). One step of
 * dl_iterate_phdr. Not signal-safe. */
int cp_unwind_tick_due(void);

/* Before the first tick: whether the samples `auto` sent to libunwind
 * while the walker's table did not exist cost, over what the walks would
 * have, as much as building it (3 ms): cp_unwind_tick is worth making now.
 * Three atomic loads; the profiler asks after each drain. */
int cp_unwind_early_due(void);

/* The function a sample calls, once, when it makes cp_unwind_early_due
 * true (the profiler's wakes its drain thread, which may be asleep until
 * the tick). It must be async-signal-safe. Set before sampling. */
void cp_unwind_on_rent_paid(void (*wake)(void));

/* The segment of libunwind's code, [*lo, *hi): 1, or 0 when libunwind is
 * linked into the executable (no range then). Not signal-safe. */
int cp_unwind_libunwind_code(uintptr_t *lo, uintptr_t *hi);

/* The calling thread's first backtrace, outside a handler (hooks call it;
 * cheap after the first call). Threads need not call it before being
 * sampled: see unwind.c. */
void cp_unwind_warm_up(void);

/* Captures the stack interrupted by a signal, leaf first: frames[0] is the
 * interrupted pc, the rest return addresses. `frames` must have room for
 * max_frames + CP_UNWIND_SLACK entries (the handler's own frames are captured
 * and then dropped). Sets *truncated when the stack was deeper than
 * max_frames. Returns the frame count (>= 1). may_build_cache: whether a
 * thread without libunwind's per-thread trace cache (256 KiB) may get one
 * (from its second such sample: CPU samples, and wall samples of a thread
 * caught running) or must take the slower path that needs none (wall
 * samples of a thread blocked in a system call, as idle threads are).
 * Async-signal-safe. */
#define CP_UNWIND_SLACK 16
/* Stack the unwinding in a handler may take (measured: docs/signals.md). On
 * an alternate signal stack with less left, only the interrupted pc is
 * recorded. */
#ifndef CP_UNWIND_STACK_NEED
#define CP_UNWIND_STACK_NEED 16384
#endif
size_t cp_unwind_signal(void *ucontext, uint64_t *frames, size_t max_frames,
                        int may_build_cache, int *truncated);

/* Like cp_unwind_signal, always with libunwind (from the ucontext, no
 * cache), and with where each return address was found: slots[i] (i >= 1)
 * is the address of the stack word that held frames[i], checked to hold it
 * now, or 0 when that is not so (a signal frame, a frame without a standard
 * call). slots[0] is 0. The wall sampler compares those words later to tell
 * whether a blocked thread still has this stack (wall.c). Returns 0 when it
 * cannot unwind now (the loader is busy, no room on an alternate stack).
 * `frames` and `slots` have room for max_frames entries. Async-signal-safe. */
size_t cp_unwind_signal_slots(void *ucontext, uint64_t *frames, uint64_t *slots,
                              size_t max_frames, int *truncated);

/* cp_thread.in_handler (thread_state.h) is set while one of the samplers'
 * signal handlers unwinds on this thread. Every handler that unwinds checks
 * it first: a handler that interrupted another (the CPU and wall signals may
 * nest) drops its sample, because libunwind's per-thread cache is not
 * re-entrant. */

/* Called by the sigaltstack hook (interpose/signal_calls.c) before and after
 * the system call: the thread's alternate stack as last read is forgotten.
 * Async-signal-safe. */
void cp_unwind_on_sigaltstack(void);

/* Captures the calling thread's stack outside a signal handler (lock hooks),
 * leaf first, starting at the frame of caller_ra: the return address into the
 * code being profiled, which becomes the leaf, stepped back into its call
 * instruction (leaves are taken as exact pcs). The frames of the hook itself
 * are dropped. `frames` must have room for max_frames + CP_UNWIND_SLACK
 * entries. Sets *truncated as cp_unwind_signal does; returns the frame count
 * (>= 1). Bounded, no locks; the thread's first call warms libunwind up
 * (which may allocate once). */
size_t cp_unwind_here(uint64_t *frames, size_t max_frames, uint64_t caller_ra,
                      int *truncated);

/* The unwinder chosen by CONTPROF_UNWIND (fpwalk.h's cp_unwind_mode:
 * auto, fp, dwarf); before cp_unwind_init. The default is auto. */
void cp_unwind_set_mode(int mode);

/* cp_unwind_signal and cp_unwind_here with the unwinder named (a
 * cp_unwind_mode) instead of the configured one: the test and the
 * benchmark unwind one signal both ways. Async-signal-safe. */
size_t cp_unwind_signal_mode(void *ucontext, uint64_t *frames,
                             size_t max_frames, int may_build_cache,
                             int *truncated, int mode);
size_t cp_unwind_here_mode(uint64_t *frames, size_t max_frames,
                           uint64_t caller_ra, int *truncated, int mode);

#endif
