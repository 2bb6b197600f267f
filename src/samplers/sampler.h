/* The interface every sampler implements. A sampler is one file (cpu.c,
 * wall.c, alloc.c, lock.c); nothing outside it knows its internals. The thread
 * registry (threads.h) tells running samplers about application threads. */
#ifndef CP_SAMPLER_H
#define CP_SAMPLER_H

#include <sys/types.h>

#include "aggregator/calltree.h"
#include "config.h"

typedef struct cp_sampler {
  const char *name;
  unsigned profile; /* the CP_PROFILE_* bit that enables it */
  /* Starts sampling; threads that already exist are announced afterwards
   * through thread_started. Returns 0 or a contprof_status. */
  int (*start)(const cp_config *cfg);
  /* Stops sampling; after it returns no new sample is produced. */
  void (*stop)(void);
  /* An application thread appeared or ended (may be called from that thread
   * or from the profiler's thread). Either may be NULL. */
  void (*thread_started)(pid_t tid);
  void (*thread_exited)(pid_t tid);
  /* In the child of fork (only the forking thread exists): forget every
   * thread and timer of the parent and stop sampling, without taking locks
   * another thread may have held. May be NULL. */
  void (*after_fork_child)(void);
  /* Once a second on the profiler's thread, with the thread registry
   * locked (after its rescan). May be NULL. */
  void (*tick)(void);
  /* On the scheduler's thread as a period closes, before the ring is
   * drained into the finished generation: records what the sampler counted
   * and has not recorded yet (the wall sampler's parked time). May be
   * NULL. */
  void (*before_close)(void);
  /* On the uploader thread, with the finished generation before it is
   * encoded: a snapshot sampler (the live heap) adds its samples here. May
   * be NULL. */
  void (*before_export)(cp_generation *g);
  /* On the profiler's thread (samplers/governor.c): sample factor times less
   * often than configured (1: as configured), with weights that keep the
   * totals unbiased. May be NULL (the sampler cannot slow down). */
  void (*slow_down)(unsigned factor);
} cp_sampler;

extern const cp_sampler cp_cpu_sampler;
extern const cp_sampler cp_wall_sampler;
extern const cp_sampler cp_lock_sampler;
/* Allocation and live heap (alloc.c): profile bits CP_PROFILE_ALLOC and
 * CP_PROFILE_HEAP. */
extern const cp_sampler cp_alloc_sampler;
/* Brackets the profiler's own work on an application thread (start, stop,
 * thread registration): its allocations and lock waits are not the
 * application's (cp_thread_work_begin in thread_state.h). Nest. */
void cp_alloc_guard_begin(void);
void cp_alloc_guard_end(void);

#endif
