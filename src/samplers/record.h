/* The one way a sampler writes a sample into the ring: cp_record_begin
 * reserves a slot and fills what every sample carries (kind, values, thread,
 * labels, span ids, timestamp); the caller unwinds or copies its stack into
 * the slot's frames; cp_record_commit publishes it. A full ring drops the
 * sample in begin, with its values kept in the ring's dropped totals.
 * Everything here is inline: it runs in signal handlers and malloc hooks. */
#ifndef CP_RECORD_H
#define CP_RECORD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "aggregator/ring.h"
#include "common.h"
#include "kinds.h"
#include "labels.h"
#include "trace.h"

/* A sample being written: the slot, and what commit needs to publish it. */
typedef struct cp_record {
  cp_ring *ring;
  uint64_t ticket;
  cp_raw_sample *sample;
} cp_record;

/* Async-signal-safe, lock-free, no allocation: reserves a slot in ring for
 * a sample of kind taken on thread tid with the given label set and span
 * ids (a context saved earlier, or another thread's), and fills all but the
 * frames. NULL when the ring is full (the values are counted as dropped);
 * else the slot, which must be committed. */
static inline cp_raw_sample *
cp_record_begin_as(cp_record *rec, cp_ring *ring, contprof_sample_kind kind,
                   int64_t count, int64_t quantity, pid_t tid, uint32_t labels,
                   uint64_t span_id, uint64_t local_root_span_id) {
  rec->ring = ring;
  cp_raw_sample *s = rec->sample =
      cp_ring_reserve(ring, &rec->ticket, kind, count, quantity);
  if (!s)
    return NULL;
  s->kind = kind;
  s->tid = tid;
  s->labels = labels;
  s->timestamp_ns = cp_ring_timestamps(ring) ? cp_realtime_ns() : 0;
  s->span_id = span_id;
  s->local_root_span_id = local_root_span_id;
  s->count = count;
  s->quantity = quantity;
  return s;
}

/* Async-signal-safe, lock-free, no allocation: cp_record_begin_as for a
 * sample of the calling thread, with its current labels and span ids. */
static inline cp_raw_sample *cp_record_begin(cp_record *rec, cp_ring *ring,
                                             contprof_sample_kind kind,
                                             int64_t count, int64_t quantity) {
  uint64_t span_id, local_root_span_id;
  cp_trace_current(&span_id, &local_root_span_id);
  return cp_record_begin_as(rec, ring, kind, count, quantity, cp_gettid(),
                            cp_labels_current(), span_id, local_root_span_id);
}

/* Async-signal-safe, lock-free: publishes the slot begin returned, with
 * nframes frames written (leaf first) and whether the stack was cut. */
static inline void cp_record_commit(cp_record *rec, size_t nframes,
                                    int truncated) {
  rec->sample->nframes = (uint32_t)nframes;
  rec->sample->truncated = (uint32_t)truncated;
  cp_ring_commit(rec->ring, rec->ticket);
}

/* Async-signal-safe, lock-free: a sample given up before begin (a handler
 * nested in another, a signal that could not be sent); its values go to
 * the dropped totals so that the profile's totals stay exact. */
static inline void cp_record_drop(cp_ring *ring, contprof_sample_kind kind,
                                  int64_t count, int64_t quantity) {
  cp_ring_drop(ring, kind, count, quantity);
}

#endif
