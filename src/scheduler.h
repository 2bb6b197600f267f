/* The period scheduler, part of the core: its thread (named contprof-upload,
 * "the uploader thread" of the docs; started a second after the profiler,
 * see cp_scheduler_tick) keeps the period clock and closes each
 * period, on time or at once for a flush or stop: it swaps the aggregator's
 * generation, takes the period's endpoint counts and costs, lets the
 * snapshot samplers add to the generation, makes the finished export and
 * hands it to the uploader, then retires the generation. Periods are back to
 * back: each starts where the previous one ended. */
#ifndef CP_SCHEDULER_H
#define CP_SCHEDULER_H

#include <stddef.h>

#include "config.h"
#include "exporter/export.h"
#include "upload/sink.h"

/* Takes ownership of the sinks (given to the uploader). meta carries the
 * fixed metadata (host, pid, runtime id...); the scheduler fills in the
 * period, sequence, drops, endpoint counts and costs. before_close (may be
 * NULL) runs on the scheduler's thread as each period closes, before its
 * samples are taken from the ring (a sampler records what it has counted
 * and not yet recorded); before_export (may be NULL) sees each finished
 * generation first, on the scheduler's thread. */
int cp_scheduler_start(const cp_config *cfg, cp_sink **sinks, size_t nsinks,
                       const cp_export_meta *meta, void (*before_close)(void),
                       void (*before_export)(cp_generation *g));

/* How long after the start the thread is started by cp_scheduler_tick:
 * at the first tick (a second after the aggregator's start, which comes
 * a moment before the scheduler's). */
#define CP_SCHEDULER_THREAD_AFTER_NS 900000000ull

/* On the aggregator's thread, at its tick: starts the scheduler's thread once
 * the profiler has run CP_SCHEDULER_THREAD_AFTER_NS. Before that, nothing
 * waits for the period's end: a flush starts the thread, and stop exports
 * the last period on the stopping thread. */
void cp_scheduler_tick(void);

/* Work too long for the aggregator's thread, whose samples would wait in
 * the ring meanwhile (building the unwinder's table: 7 ms of CPU, in which
 * a program that allocates as fast as it can filled the ring): runs `job`
 * on the scheduler's thread, starting the thread now if it does not run
 * yet. Jobs run one after the other in the order asked; asking for a job
 * that waits already does not add it again. 0, or -1 when no thread can
 * run it (not started, stopping, the thread could not start, SCHED_JOBS
 * others waiting): the caller runs it itself. */
int cp_scheduler_run_soon(void (*job)(void));

/* Ends the current period now and waits until its export was handed to the
 * sinks. Returns 0, or CONTPROF_ERR_NOT_STARTED. */
int cp_scheduler_flush(void);

/* In the child of fork: the thread is gone; the sinks are dropped unflushed
 * (the parent delivers its own data). */
void cp_scheduler_after_fork_child(void);

/* Exports the last period, stops the thread, and has the uploader finish
 * and destroy the sinks, all within CONTPROF_EXIT_TIMEOUT. */
void cp_scheduler_stop(void);

#endif
