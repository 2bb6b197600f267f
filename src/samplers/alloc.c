/* Allocation and live-heap sampler: samples allocated bytes as a Poisson
 * process (mean CONTPROF_ALLOC_SAMPLE_BYTES, per-thread countdown,
 * exponential gaps) and reports each sample unbiased: scale = 1 / (1 -
 * exp(-size/rate)) on count and bytes. Samples go to the ring (alloc-samples,
 * alloc-space) and, with the heap profile, into the live table (heap_table.h)
 * until freed; the in-use profile is a snapshot of that table taken at
 * export.
 *
 * The malloc family's hooks (interpose/malloc.c) count each allocation with
 * cp_alloc_count (alloc.h) and call cp_alloc_on_alloc when the countdown
 * runs out, cp_alloc_on_free for a pointer the live table may track. Only
 * sampled allocations unwind. While a sample is recorded, the re-entry guard
 * (thread_state.h) sends nested allocations (libunwind's first use on a
 * thread) straight to the real allocator; the profiler's own threads are
 * never sampled. */
#include "alloc.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "aggregator/aggregator.h"
#include "common.h"
#include "heap_table.h"
#include "interpose/real.h"
#include "labels.h"
#include "random.h"
#include "record.h"
#include "sampler.h"
#include "stats.h"
#include "thread_state.h"
#include "unwind.h"

#define UNLIKELY(x) __builtin_expect(!!(x), 0)

#define HEAP_MAX_FRAMES 256 /* frames kept per live allocation */

cp_alloc_hot_t cp_alloc_hot;
CP_TLS int64_t cp_alloc_countdown;

static struct {
  _Atomic uint32_t epoch; /* bumped at each start: threads redraw their gap */
  int alloc_on, heap_on;
  /* Mean bytes between samples in force: CONTPROF_ALLOC_SAMPLE_BYTES times
   * the governor's slowdown. */
  _Atomic double rate;
  double base_rate; /* CONTPROF_ALLOC_SAMPLE_BYTES */
  size_t max_frames;
  size_t heap_frames;
  cp_heap_entry *scratch; /* the uploader's copy of one entry */
  uint64_t overflows_reported;
  int warned_not_first;
} alloc;

static CP_TLS uint32_t tls_epoch;
static CP_TLS double tls_gap_mean; /* the mean of the gap counting down */
/* That mean was raised because the ring was filling (draw_gap). */
static CP_TLS int tls_gap_thinned;

/* --- sampling ---------------------------------------------------------- */

/* Async-signal-safe: the bytes until the next sample, exponential with
 * mean `mean`. */
static int64_t next_gap(double mean) {
  double gap = cp_random_exp(mean);
  return gap >= 4.0e18 ? (int64_t)4e18 : (int64_t)gap;
}

/* Async-signal-safe, bounded: starts the thread's next gap with the mean in
 * force, raised while under a quarter of the ring is free (cp_ring_pressure): a
 * drain thread that is late (starved of CPU on a busy machine) then gets
 * fewer samples, each weighing more, instead of a full ring that drops
 * their stacks. The gap's sample is weighted with the mean it was drawn
 * with, so totals stay unbiased (docs/overhead.md, "A filling ring"). */
static void draw_gap(void) {
  double mean = atomic_load_explicit(&alloc.rate, memory_order_relaxed);
  cp_ring *ring = alloc.alloc_on ? cp_agg_ring() : NULL;
  unsigned pressure = ring ? cp_ring_pressure(ring) : 1;
  tls_gap_mean = mean * pressure;
  tls_gap_thinned = pressure > 1;
  cp_alloc_countdown = next_gap(tls_gap_mean);
}

/* Hot path (malloc hook), bounded, no locks, no allocation: reserves a ring
 * slot and/or a live-table entry, unwinds once into one of them, fills both.
 * No signal masking (two system calls per sample): cp_unwind_here flags the
 * unwind so that a sampling handler arriving meanwhile drops its sample
 * instead of unwinding on top of it, and ring slots are per-reservation. */
static void record_sample(void *p, size_t size, uint64_t caller_ra,
                          double mean) {
  double prob = -expm1(-(double)size / mean);
  double scale = prob > 0 ? 1.0 / prob : 1.0;
  int64_t count = cp_random_round(scale);
  int64_t bytes = (int64_t)(scale * (double)size + 0.5);

  cp_ring *ring = alloc.alloc_on ? cp_agg_ring() : NULL;
  cp_record rec;
  cp_raw_sample *s =
      ring ? cp_record_begin(&rec, ring, CONTPROF_KIND_ALLOC, count, bytes)
           : NULL;
  cp_heap_entry *e = alloc.heap_on ? cp_heap_entry_take() : NULL;
  uint64_t *frames = NULL;
  size_t max = 0;
  if (s) {
    frames = s->frames;
    max = cp_ring_max_frames(ring) - CP_UNWIND_SLACK;
    if (max > alloc.max_frames)
      max = alloc.max_frames;
  } else if (e) {
    frames = e->frames;
    max = alloc.heap_frames;
  }
  if (frames) {
    int truncated = 0;
    size_t n = cp_unwind_here(frames, max, caller_ra, &truncated);
    if (e) {
      size_t keep = n;
      int cut = truncated;
      if (frames != e->frames) {
        keep = n < alloc.heap_frames ? n : alloc.heap_frames;
        memcpy(e->frames, frames, keep * sizeof *frames);
        cut |= keep < n;
      }
      /* The ring slot, when there is one, holds the thread and labels. */
      e->tid = s ? s->tid : cp_gettid();
      /* The live sample keeps its label set from being freed; the heap
       * table gives the hold back when the entry goes. */
      e->labels = cp_labels_hold(s ? s->labels : cp_labels_current());
      e->count = count;
      e->bytes = bytes;
      e->nframes = (uint32_t)keep;
      e->truncated = (uint32_t)cut;
      cp_heap_entry_publish(e, (uintptr_t)p);
    }
    if (s)
      cp_record_commit(&rec, n, truncated);
  }
}

/* Hot path (malloc hook), async-signal-safe: the thread's countdown ran out
 * at an allocation of `size` bytes that returned p (NULL: it failed).
 * Starts the next gap and records this allocation, unless the thread is
 * inside the profiler. */
__attribute__((noinline, cold)) void cp_alloc_on_alloc(void *p, size_t size,
                                                       uint64_t caller_ra) {
  if (!atomic_load_explicit(&cp_alloc_hot.sampling, memory_order_relaxed)) {
    /* Not started, stopped, or a child of fork before its start. A thread
     * that ran out while off redraws at its first countdown after the
     * start (the epoch below): what it allocated between the start and
     * then, at most this gap, is not counted (docs/benchmarks.md,
     * "Instructions a pair"). */
    cp_alloc_countdown = CP_ALLOC_OFF_GAP;
    return;
  }
  if (!cp_guard_enter()) {
    if (cp_thread.internal)
      cp_alloc_countdown = INT64_MAX;
    return;
  }
  int saved_errno = errno;
  uint32_t epoch = atomic_load_explicit(&alloc.epoch, memory_order_acquire);
  if (tls_epoch != epoch) {
    /* The first countdown of this thread (or of this start): the gap
     * starts before this allocation. */
    tls_epoch = epoch;
    draw_gap();
    cp_alloc_countdown -= (int64_t)size;
    if (cp_alloc_countdown >= 0) {
      cp_guard_leave();
      errno = saved_errno;
      return;
    }
  }
  /* The gap that ended here was drawn with tls_gap_mean: its sample is
   * weighted with that mean, whatever the governor or the ring's pressure
   * set meanwhile. */
  uint64_t began = p ? cp_stats_hook_begin(CONTPROF_KIND_ALLOC) : 0;
  double mean = tls_gap_mean;
  int thinned = tls_gap_thinned;
  draw_gap();
  if (p) {
    if (thinned)
      cp_stats_count_thinned(CONTPROF_KIND_ALLOC);
    record_sample(p, size, caller_ra, mean);
    cp_stats_hook_end(CONTPROF_KIND_ALLOC, began);
  }
  cp_guard_leave();
  errno = saved_errno;
}

/* Hot path, async-signal-safe: stops tracking p before it is freed (after
 * the free, another thread could be handed the same address). Reached only
 * for a block the live table's filter may hold; timed as the allocation
 * sampler's cost. */
void cp_alloc_on_free(void *p) {
  uint64_t began = cp_stats_hook_begin(CONTPROF_KIND_ALLOC);
  cp_heap_untrack((uintptr_t)p);
  cp_stats_hook_end(CONTPROF_KIND_ALLOC, began);
}

/* --- the sampler interface --------------------------------------------- */

void cp_alloc_guard_begin(void) { cp_thread_work_begin(); }
void cp_alloc_guard_end(void) { cp_thread_work_end(); }

static void add_live(const cp_heap_entry *e, void *ctx) {
  cp_sample_key key = {.labels = e->labels, .tid = e->tid};
  cp_gen_add((cp_generation *)ctx, e->frames, e->nframes, (int)e->truncated,
             &key, CONTPROF_KIND_INUSE, e->count, e->bytes);
}

/* On the uploader thread: the in-use snapshot. */
static void alloc_before_export(cp_generation *g) {
  if (!alloc.heap_on || !alloc.scratch)
    return;
  cp_heap_foreach_live(add_live, g, alloc.scratch);
  long live = cp_heap_count_live();
  cp_stats_add_samples(CONTPROF_KIND_INUSE, live > 0 ? (uint64_t)live : 0);
  cp_stats_set_fixed_memory(CP_STATS_MEM_HEAP_TABLE, cp_heap_memory_used());
  uint64_t overflows = cp_heap_overflows();
  if (overflows > alloc.overflows_reported) {
    cp_warn("%llu sampled allocations were not tracked in the live heap "
            "(table of %zu full): inuse-* undercounts; raise "
            "CONTPROF_HEAP_MAX_TRACKED",
            (unsigned long long)(overflows - alloc.overflows_reported),
            cp_heap_capacity());
    alloc.overflows_reported = overflows;
  }
}

static int alloc_start(const cp_config *cfg) {
  int not_first = cp_interpose_malloc_resolve();
  alloc.alloc_on = (cfg->profiles & CP_PROFILE_ALLOC) != 0;
  alloc.heap_on = (cfg->profiles & CP_PROFILE_HEAP) != 0;
  alloc.base_rate = (double)cfg->alloc_sample_bytes;
  atomic_store(&alloc.rate, alloc.base_rate);
  alloc.max_frames = (size_t)cfg->max_frames;
  if (not_first) {
    if (!alloc.warned_not_first++)
      cp_warn("another malloc comes before contprof's in the lookup order "
              "(put libcontprof first in LD_PRELOAD): the alloc and heap "
              "profiles stay empty");
    return 0;
  }
  if (alloc.heap_on) {
    size_t frames =
        alloc.max_frames < HEAP_MAX_FRAMES ? alloc.max_frames : HEAP_MAX_FRAMES;
    if (cp_heap_init((size_t)cfg->heap_max_tracked, frames) != 0) {
      cp_error("cannot map the live-heap table: the heap profile is off");
      alloc.heap_on = 0;
    } else {
      /* The table made by the first start is kept (see heap_table.h). */
      alloc.heap_frames = cp_heap_frames_capacity() - CP_UNWIND_SLACK;
      if (!alloc.scratch)
        alloc.scratch = calloc(1, cp_heap_entry_bytes());
      if (!alloc.scratch)
        alloc.heap_on = 0;
    }
  }
  cp_unwind_init();
  atomic_fetch_add(&alloc.epoch, 1);
  /* The starting thread draws its first gap at its next allocation, with
   * this start's mean. Other threads finish the gap they are in, drawn with
   * the mean of the previous start (or the governor's slowdown then): their
   * first sample is weighted with it. */
  cp_alloc_countdown = 0;
  atomic_store(&cp_alloc_hot.sampling, alloc.alloc_on || alloc.heap_on);
  return 0;
}

/* Sampling stops; tracked allocations stay tracked (frees keep removing
 * them), so the last profile's in-use snapshot is right and a restart
 * reports what is still live. */
static void alloc_stop(void) { atomic_store(&cp_alloc_hot.sampling, 0); }

/* Sampling stops until the child's profiler starts again. The parent's
 * tracked blocks are forgotten: the child's in-use profile is its own (a
 * pre-fork server's workers would otherwise each report the parent's heap). */
static void alloc_after_fork_child(void) {
  atomic_store(&cp_alloc_hot.sampling, 0);
  cp_thread.in_hook = 0; /* a sample the fork interrupted */
  cp_heap_after_fork_child();
}

/* Once a second on the profiler's thread. */
static void alloc_tick(void) { cp_heap_settle(); }

/* On the profiler's thread: one sample every factor x the configured mean
 * bytes. A thread's gap in progress keeps its mean (and its sample's weight
 * uses it); the next gap is drawn with the new one. */
static void alloc_slow_down(unsigned factor) {
  atomic_store(&alloc.rate, alloc.base_rate * factor);
}

const cp_sampler cp_alloc_sampler = {
    .name = "alloc",
    .profile = CP_PROFILE_ALLOC | CP_PROFILE_HEAP,
    .start = alloc_start,
    .stop = alloc_stop,
    .after_fork_child = alloc_after_fork_child,
    .tick = alloc_tick,
    .before_export = alloc_before_export,
    .slow_down = alloc_slow_down,
};
