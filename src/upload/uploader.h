/* The uploader thread: every period it swaps the aggregator's generation and
 * hands the finished one to every sink; flush and stop do the same at once.
 * Periods are back to back: each starts where the previous one ended. */
#ifndef CP_UPLOADER_H
#define CP_UPLOADER_H

#include <stddef.h>

#include "config.h"
#include "exporter/export.h"
#include "sink.h"

/* Takes ownership of the sinks. meta carries the fixed metadata (host, pid,
 * runtime id...); the uploader fills in the period, sequence and drops.
 * before_export (may be NULL) sees each finished generation first. */
int cp_uploader_start(const cp_config *cfg, cp_sink **sinks, size_t nsinks,
                      const cp_export_meta *meta,
                      void (*before_export)(cp_generation *g));

/* Ends the current period now and waits until its profile was handed to the
 * sinks. Returns 0, or CONTPROF_ERR_NOT_STARTED. */
int cp_uploader_flush(void);

/* In the child of fork: the thread is gone; drop the sinks unflushed (the
 * parent delivers its own data). */
void cp_uploader_after_fork_child(void);

/* Exports the last period, stops the thread and destroys the sinks. */
void cp_uploader_stop(void);

#endif
