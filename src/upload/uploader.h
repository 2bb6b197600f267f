/* The uploader: delivers each finished period to every sink, in order, on
 * the scheduler's thread (scheduler.h keeps the period); one sink failing
 * never stops another. At stop, every sink delivers what it has queued by
 * one deadline. */
#ifndef CP_UPLOADER_H
#define CP_UPLOADER_H

#include <stddef.h>
#include <stdint.h>

#include "exporter/export.h"
#include "sink.h"

/* Takes ownership of the sinks. */
void cp_uploader_start(cp_sink **sinks, size_t nsinks);

/* Hands the finished period to every sink. */
void cp_uploader_deliver(cp_export *e);

/* Gives the sinks back unused (a start that failed after cp_uploader_start:
 * the caller destroys them). */
void cp_uploader_forget(void);

/* In the child of fork: drop the sinks unflushed (the parent delivers its
 * own data). */
void cp_uploader_after_fork_child(void);

/* Every sink delivers what it has queued by deadline_ns (CLOCK_MONOTONIC);
 * then the sinks are destroyed. */
void cp_uploader_stop(uint64_t deadline_ns);

#endif
