/* A preallocated, lock-free, bounded ring of raw samples: many producers
 * (signal handlers, allocation and lock hooks on any thread), one consumer
 * (the aggregator thread). Producers never block and never allocate: a full
 * ring drops the sample and counts it. */
#ifndef CP_RING_H
#define CP_RING_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kinds.h"

typedef struct cp_raw_sample {
  uint32_t kind;    /* contprof_sample_kind */
  uint32_t nframes; /* frames used, leaf first */
  pid_t tid;
  uint32_t labels;    /* label set id */
  uint32_t truncated; /* 1 when the stack was deeper than the frames kept */
  uint32_t reserved;
  uint64_t timestamp_ns; /* CLOCK_REALTIME */
  uint64_t span_id;
  uint64_t local_root_span_id;
  int64_t count;
  int64_t quantity;
  uint64_t frames[]; /* capacity: the ring's max_frames */
} cp_raw_sample;

typedef struct cp_ring cp_ring;

cp_ring *cp_ring_create(size_t slots, size_t max_frames);
void cp_ring_destroy(cp_ring *ring);
size_t cp_ring_max_frames(const cp_ring *ring);

/* Whether producers stamp each sample with its time (timestamp_ns; 0
 * otherwise). Only the timeline (CONTPROF_TIMELINE) reads it, and a clock
 * read was about 4% of a sampled allocation's cost (docs/benchmarks.md).
 * Set by the consumer before producers run; read by them, async-signal-
 * safe. */
void cp_ring_set_timestamps(cp_ring *ring, int on);
int cp_ring_timestamps(const cp_ring *ring);

/* Producer side. Async-signal-safe and lock-free. reserve returns a slot to
 * fill and a ticket, or NULL when the ring is full: then the sample's values
 * (kind, count, quantity) are added to the ring's dropped totals, so totals
 * stay exact and only the stack is lost. Every reserved slot must be
 * committed. */
cp_raw_sample *cp_ring_reserve(cp_ring *ring, uint64_t *ticket, uint32_t kind,
                               int64_t count, int64_t quantity);
void cp_ring_commit(cp_ring *ring, uint64_t ticket);
/* A sample the producer had to give up before reserving: counted, and its
 * values added to the dropped totals. */
void cp_ring_drop(cp_ring *ring, uint32_t kind, int64_t count,
                  int64_t quantity);

/* Consumer side: takes (and resets) the dropped totals of each kind, as
 * count/quantity pairs at cp_kind_value_index(kind) and the index after. */
void cp_ring_take_dropped(cp_ring *ring, int64_t values[CP_NVALUES]);

/* Consumer side (one thread at a time). cp_ring_wait sleeps up to
 * timeout_ns, less when producers fill half the ring, or, with
 * wake_on_sample, as soon as one sample is reserved (the producer then
 * makes one futex wake); cp_ring_peek gives the oldest committed sample or
 * NULL, cp_ring_release frees it once read. */
void cp_ring_wait(cp_ring *ring, uint64_t timeout_ns, int wake_on_sample);
const cp_raw_sample *cp_ring_peek(cp_ring *ring);
/* Whether any sample is reserved and not yet released. */
int cp_ring_pending(const cp_ring *ring);
/* How many slots are reserved and not yet released, of cp_ring_slots.
 * Async-signal-safe (two atomic loads). */
size_t cp_ring_used(const cp_ring *ring);
size_t cp_ring_slots(const cp_ring *ring);
/* How much a producer that chooses its own rate (a Poisson sampler drawing
 * its next gap) should lower it so that the ring does not overflow while
 * the consumer is late: 1 while a quarter of the slots or more are free
 * (the consumer is woken at half full), then a quarter of the slots over
 * the free ones (2 at seven eighths full, 4 at fifteen sixteenths, ...), at
 * most CP_RING_PRESSURE_MAX. docs/overhead.md, "A filling ring". Async-
 * signal-safe (two atomic loads). */
#define CP_RING_PRESSURE_MAX 64u
unsigned cp_ring_pressure(const cp_ring *ring);
/* On the consumer's thread: faults in (one madvise) the slots producers
 * will fill next, up to ahead_slots past the last one reserved, so that they
 * take no page fault; once every slot has been, nothing. Producers use the
 * slots in order from the first during the first lap: a short-lived process
 * (a child of fork, whose slots start as fresh zero pages) faults in only
 * what it uses, not the whole ring. */
void cp_ring_populate(cp_ring *ring, size_t ahead_slots);
/* Ends a cp_ring_wait now (the consumer is asked to stop). */
void cp_ring_wake(cp_ring *ring);
void cp_ring_release(cp_ring *ring);

/* In the child of fork (one thread): forgets every sample in the ring, also
 * those a thread of the parent had reserved and will never commit, and the
 * dropped totals: the child starts empty. */
void cp_ring_discard_after_fork(cp_ring *ring);

/* Samples dropped since creation. */
uint64_t cp_ring_drops(const cp_ring *ring);
/* The same for the samples of one kind. */
uint64_t cp_ring_drops_of_kind(const cp_ring *ring, uint32_t kind);
/* Bytes the ring holds (its slots are mapped and populated at creation). */
size_t cp_ring_memory(const cp_ring *ring);

#endif
