/* Who the calling thread is, and what of the profiler it is inside: the one
 * per-thread state every hook, signal handler and sampler reads, with the one
 * re-entry guard the hooks use.
 *
 * One initial-exec TLS variable (CP_TLS in common.h): touching it never
 * allocates, takes a lock or calls into the loader, so it is read from the
 * malloc hooks before the real allocator is known and from signal handlers.
 * Sampler-private per-thread data (allocation countdowns, timers, unwinder
 * caches, stack bounds) stays in its sampler. */
#ifndef CP_THREAD_STATE_H
#define CP_THREAD_STATE_H

#include "common.h"

typedef struct cp_thread_state {
  /* One of the profiler's own threads (aggregator, uploader, wall timer):
   * its allocations and lock waits are never sampled (libraries it calls,
   * such as libcurl, reach the hooks), and the thread registry never
   * announces it. Set once, by cp_thread_mark_internal. */
  int internal;
  /* A hook is recording a sample on this thread: what the recording itself
   * allocates or locks (libunwind's first use) goes straight through. */
  int in_hook;
  /* Nesting of cp_thread_work_begin: the profiler's own work on an
   * application thread (start, stop, thread registration, exports): its
   * allocations and lock waits are not the application's. */
  unsigned work;
  /* One of the samplers' signal handlers runs (or an unwind from a hook,
   * which a handler must not interrupt): a nested handler drops its sample,
   * libunwind's per-thread cache is not re-entrant (unwind.h). */
  int in_handler;
  /* The interposition layer is looking up a real function (dlsym may
   * allocate and lock): the malloc hooks serve from their bootstrap arena
   * and the lock hooks poll (interpose/real.c). */
  int resolving;
  /* Inside dl_iterate_phdr (it holds the loader's lock): unwinding now could
   * deadlock with the loader (unwind.c's loader_busy). */
  int in_loader;
  /* How many of the profiler's own sampling signals found this thread at a
   * system call: the sleep and wait hooks tell an EINTR of ours from one of
   * the application's by it (interpose/waits.c, samplers/signals.h). */
  unsigned own_signals;
  /* How many of the application's handlers ran on this thread (those set
   * through the sigaction hook; samplers/signals.h): a wait hook returns an
   * EINTR when one ran during the call, whatever our signals did. */
  unsigned app_signals;
  /* How many of those handlers run on this thread now, and the frame of
   * the outermost's wrapper: one that leaves by longjmp stays counted
   * until the thread runs above that frame (cp_signals_maybe_in_handler)
   * or a handler is entered above it. */
  unsigned app_handler_depth;
  uintptr_t app_handler_frame;
  /* The kernel-cost measurement runs on this thread (one of ours), with a
   * sampling signal unblocked: the handlers hand it its own signals first
   * (samplers/kernel_cost.h). */
  int calibrating;
  /* The wall sampler's slot of this thread, set by its signal handler: the
   * wait hooks publish there where the thread blocks (samplers/wall.h). */
  void *wall_slot;
  /* Monotonic ns this thread spent in the system calls that wake the
   * aggregator's thread (ring.c, cp_ring_wake): the woken thread may run
   * on this CPU at once, before the call returns, and a hook timed on the
   * monotonic clock leaves that time out (stats.c). */
  uint64_t wake_ns;
} cp_thread_state;

/* The calling thread's state. Async-signal-safe: a TLS access. */
extern CP_TLS cp_thread_state cp_thread;

/* Marks the calling thread as one of the profiler's own, for good. */
static inline void cp_thread_mark_internal(void) { cp_thread.internal = 1; }

/* Brackets the profiler's own work on an application thread. Nest. */
static inline void cp_thread_work_begin(void) { cp_thread.work++; }
static inline void cp_thread_work_end(void) { cp_thread.work--; }

/* Whether a hook on this thread may record the application's event: not a
 * profiler thread, not inside the profiler's work, not already recording.
 * Hot path: one TLS load each. */
static inline int cp_guard_open(void) {
  return !(cp_thread.internal | cp_thread.in_hook | (int)cp_thread.work);
}

/* The re-entry guard every hook takes around recording: returns 1 and marks
 * the thread (then call cp_guard_leave), or 0 when it may not record (see
 * cp_guard_open). Async-signal-safe. */
static inline int cp_guard_enter(void) {
  if (!cp_guard_open())
    return 0;
  cp_thread.in_hook = 1;
  return 1;
}

static inline void cp_guard_leave(void) { cp_thread.in_hook = 0; }

#endif
