/* The aggregator: owns the sample ring and the current generation; its thread
 * drains the ring every few milliseconds into the call tree. At each export
 * the scheduler swaps in a fresh generation and takes the old one. */
#ifndef CP_AGGREGATOR_H
#define CP_AGGREGATOR_H

#include <stdint.h>
#include <sys/types.h>

#include "calltree.h"
#include "config.h"
#include "ring.h"

/* Creates the ring and the first generation and starts the drain thread.
 * The core passes what the aggregator must not know of itself: `tick` (may
 * be NULL) runs on that thread about once a second (the samplers' thread
 * rescan and governor), `drained` (may be NULL) after each drain, at least
 * every 100 ms; `thread_name` (may be NULL: no names) writes a thread's
 * name, "" when unknown, for the `thread name` label. With `defer`, the
 * drain thread is not started yet: samples wait in the ring until
 * cp_agg_start_deferred starts it, or a swap drains them on the exporting
 * thread (a child of fork that lives a moment, docs/overhead.md). */
int cp_agg_start(const cp_config *cfg, void (*tick)(void),
                 void (*drained)(void),
                 void (*thread_name)(pid_t tid, char *buf, size_t len),
                 int defer);

/* Whether the drain thread waits to be started. One atomic load. */
int cp_agg_deferred(void);

/* Not in a signal handler, nor a hook that may run in one (it starts a
 * thread): starts the deferred drain thread when `now`, when the
 * aggregator has run a second, or when the ring is a quarter full;
 * otherwise, or when not deferred, nothing. */
void cp_agg_start_deferred(int now);

/* Drains what is left and stops the thread. The last generation is freed;
 * take it with cp_agg_swap first. */
void cp_agg_stop(void);

/* The ring samplers write into; NULL when the aggregator is stopped.
 * Async-signal-safe (one atomic load). */
cp_ring *cp_agg_ring(void);

/* Ends the drain thread's wait now: it drains and calls `drained`
 * (cp_agg_start) without waiting for the tick. Async-signal-safe (an atomic
 * increment and a futex wake); nothing while the aggregator is stopped. */
void cp_agg_wake(void);

/* Drains the ring, then hands back the current generation and installs a new
 * one. The caller owns the result. *drops receives the samples dropped by
 * producers since the previous swap, and stats (may be NULL) the samples
 * and drops of each kind. NULL on ENOMEM (the old one is kept). */
struct cp_period_stats;
cp_generation *cp_agg_swap(uint64_t *drops, struct cp_period_stats *stats);

/* The same for the last period, as the profiler stops: no new generation
 * is made (nothing would be exported from it; a process that exits, a
 * child of fork serving one connection, made one at every exit). Samples
 * that come after stay in the ring. Never NULL when there is a generation. */
cp_generation *cp_agg_swap_last(uint64_t *drops, struct cp_period_stats *stats);

/* Inserts one sample directly (bindings). Thread-safe, not signal-safe. */
int cp_agg_record(const uint64_t *frames, size_t nframes,
                  const cp_sample_key *key, contprof_sample_kind kind,
                  int64_t count, int64_t quantity);

/* Thread tid was given a new name (contprof_set_thread_name): the current
 * generation takes it if it already named the thread. Thread-safe. */
void cp_agg_thread_renamed(pid_t tid);

/* In the child of fork: the drain thread is gone; forget it and the
 * parent's samples, keep the ring for a later start. */
void cp_agg_after_fork_child(void);

/* The id of the oldest generation that may still be referenced. */
uint64_t cp_agg_oldest_live_generation(void);

/* What the aggregator's side holds for generation g (taken by cp_agg_swap):
 * its tables, the label sets, symbols and DWARF data (bytes). */
size_t cp_agg_memory_used(const cp_generation *g);

/* Frees g once exported, then what no live generation references any more:
 * records of unloaded libraries and label sets unused since the period
 * before. */
void cp_agg_retire(cp_generation *g);

#endif
