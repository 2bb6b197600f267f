/* The aggregator thread: drains the lock-free ring into the current
 * generation (symbolizing on the way), notes each thread's name once per
 * generation, and lets the scheduler swap generations. The profiler's own
 * thread never samples itself: it blocks every signal, and the core marks
 * it as the profiler's (cp_set_internal_thread_init). */
#include "aggregator.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "dwarf.h"
#include "frames.h"
#include "labels.h"
#include "stats.h"
#include "symbols.h"

/* The ring wakes the drain thread early when half full, so a long interval
 * costs no drops; a short one cost 0.7% of a CPU in wake-ups alone. */
#define DRAIN_INTERVAL_NS 100000000ull /* 100 ms */
#define TICK_INTERVAL_NS 1000000000ull
/* Under this many samples a second the drain waits for the tick: a quarter
 * of the ring (RING_SLOTS) a second. */
#define QUIET_RATE 512ull
/* The most CPU a drain spends opening the debug information of what its
 * samples ran before it waits again (cp_symbols_prepare_lines). */
#define PREPARE_NS 50000000ull /* 50 ms */
/* The longest one object's preparation is taken to last, in wall time on a
 * busy machine. */
#define PREPARE_STEP_NS 250000000ull /* 250 ms */
/* 2048 slots of (max_frames + 16) frames: 2.4 MiB at the defaults. The drain
 * thread is woken when the ring is half full. It faults the slots in ahead
 * of the producers so that few samples pay a page fault (tens of us on a
 * VM): 32 slots when it starts (what a process that lives a moment takes:
 * a child of fork serving one connection, a shell's child), and after each
 * drain up to half a ring past the last sample, until all of it is. The
 * whole ring was 600 of the 1,100 page faults of every such child, and an
 * eighth of it 75 (docs/overhead.md, "Short-lived processes"). */
#define RING_SLOTS 2048
#define POPULATE_FIRST 32
#define POPULATE_AHEAD (RING_SLOTS / 2)
/* The parent's generations a child keeps until its first tick (a child of
 * a child of ... holds one per generation of forks); more are freed at the
 * fork. */
#define INHERITED_GENS 4
/* A deferred drain thread (cp_agg_start's defer) starts once the process
 * has lived this long, or at once when the ring is a quarter full. */
#define DEFER_NS 1000000000ull
/* Timeline mode: samples merge only within one 10 ms bucket of their
 * timestamp (the default wall interval), so a timeline view sees when each
 * happened; the key holds the bucket's end, exported as end_timestamp_ns. */
#define TIMELINE_BUCKET_NS 10000000ull

static struct {
  pthread_mutex_t lock; /* guards gen and the consumer side of the ring */
  pthread_t thread;
  int thread_running;
  /* The drain thread waits for cp_agg_start_deferred; deferred_from is when
   * the aggregator started. */
  _Atomic int deferred;
  uint64_t deferred_from;
  _Atomic int stop;
  _Atomic(cp_ring *) ring;
  cp_ring *owned_ring;
  cp_generation *gen;
  /* The parent's generations, in the child of fork: freed by the drain
   * thread at its first tick, not by the forking thread (see
   * cp_agg_after_fork_child). */
  cp_generation *inherited[INHERITED_GENS];
  size_t ninherited;
  uint64_t next_gen_id;
  uint64_t drops_reported;
  /* Per kind, at the last swap: the samples counted so far (stats.h) and
   * the ring's drops. */
  uint64_t kind_samples_reported[CONTPROF_KIND_COUNT];
  uint64_t kind_drops_reported[CONTPROF_KIND_COUNT];
  size_t memory_limit;
  int timeline; /* CONTPROF_TIMELINE */
  void (*tick)(void);
  void (*drained)(void);
  void (*thread_name)(pid_t tid, char *buf, size_t len);
} agg = {.lock = PTHREAD_MUTEX_INITIALIZER};

cp_ring *cp_agg_ring(void) {
  return atomic_load_explicit(&agg.ring, memory_order_acquire);
}

/* Async-signal-safe: the ring is never unmapped (cp_agg_stop). */
void cp_agg_wake(void) {
  cp_ring *r = cp_agg_ring();
  if (r)
    cp_ring_wake(r);
}

/* Caller holds agg.lock. A thread's name is looked up once per generation,
 * through the core's callback (the names live with the thread registry);
 * "" when unknown, so that it is not looked up again. Returns whether it
 * was looked up now. */
static int note_thread(cp_generation *g, pid_t tid) {
  if (tid <= 0 || cp_gen_thread_name(g, tid))
    return 0;
  char name[64] = "";
  if (agg.thread_name)
    agg.thread_name(tid, name, sizeof name);
  cp_gen_set_thread_name(g, tid, name);
  return 1;
}

void cp_agg_thread_renamed(pid_t tid) {
  pthread_mutex_lock(&agg.lock);
  if (agg.gen && agg.thread_name && cp_gen_thread_name(agg.gen, tid)) {
    char name[64] = "";
    agg.thread_name(tid, name, sizeof name);
    cp_gen_set_thread_name(agg.gen, tid, name);
  }
  pthread_mutex_unlock(&agg.lock);
}

static uint64_t timeline_bucket_end(uint64_t timestamp_ns) {
  if (!agg.timeline)
    return 0;
  return (timestamp_ns / TIMELINE_BUCKET_NS + 1) * TIMELINE_BUCKET_NS;
}

/* Caller holds agg.lock. Returns how many samples it took; *new_threads
 * (may be NULL) is set when one came from a thread not yet named in this
 * generation. */
static size_t drain_locked(int *new_threads) {
  cp_ring *ring = agg.owned_ring;
  if (new_threads)
    *new_threads = 0;
  if (!ring || !agg.gen)
    return 0;
  const cp_raw_sample *s = cp_ring_peek(ring);
  if (!s)
    return 0;
  /* A library came or went: the same address may now be other code. */
  if (cp_symbols_refresh() == 1)
    cp_gen_forget_addresses(agg.gen);
  uint64_t drained[CONTPROF_KIND_COUNT] = {0};
  size_t taken = 0;
  int named = 0;
  uint64_t began = cp_clock_ns(CLOCK_THREAD_CPUTIME_ID);
  for (; s; s = cp_ring_peek(ring), taken++) {
    cp_sample_key key = {
        .labels = s->labels,
        .tid = s->tid,
        .span_id = s->span_id,
        .local_root_span_id = s->local_root_span_id,
        .time_bucket_ns = timeline_bucket_end(s->timestamp_ns),
    };
    named |= note_thread(agg.gen, s->tid);
    if (s->kind < CONTPROF_KIND_COUNT)
      drained[s->kind]++;
    cp_gen_add(agg.gen, s->frames, s->nframes, (int)s->truncated, &key,
               (contprof_sample_kind)s->kind, s->count, s->quantity);
    cp_ring_release(ring);
  }
  for (int k = 0; k < CONTPROF_KIND_COUNT; k++)
    if (drained[k])
      cp_stats_count_samples((contprof_sample_kind)k, drained[k]);
  cp_stats_add_drain_ns(cp_clock_ns(CLOCK_THREAD_CPUTIME_ID) - began);
  if (new_threads)
    *new_threads = named;
  return taken;
}

/* On the drain thread: the parent's generations, which a child that lives
 * this long frees on this thread (their pages are the parent's until then:
 * each free writes to them). */
static void free_inherited(void) {
  cp_generation *gens[INHERITED_GENS];
  pthread_mutex_lock(&agg.lock);
  size_t n = agg.ninherited;
  memcpy(gens, agg.inherited, n * sizeof *gens);
  agg.ninherited = 0;
  pthread_mutex_unlock(&agg.lock);
  for (size_t i = 0; i < n; i++)
    cp_gen_destroy(gens[i]);
}

/* The generation the drain fills: it reads no symbol table (see
 * cp_gen_set_defer_reads); the drain thread names its locations when
 * samples leave it time, and the swap names the rest. */
static cp_generation *new_generation(uint64_t id) {
  cp_generation *g = cp_gen_create(id, agg.memory_limit);
  if (g)
    cp_gen_set_defer_reads(g, 1);
  return g;
}

/* The ring holds a quarter of its slots or more: drain before anything
 * else. */
static int ring_filling(void) {
  return cp_ring_used(agg.owned_ring) * 4 >= cp_ring_slots(agg.owned_ring);
}

static void *drain_thread(void *arg) {
  /* Started late (deferred): the tick it would have made is due now. */
  uint64_t next_tick = cp_monotonic_ns() + (arg ? 0 : TICK_INTERVAL_NS);
  uint64_t wait_ns = DRAIN_INTERVAL_NS;
  int wake_on_sample = 0;
  uint64_t last_drain = cp_monotonic_ns();
  cp_ring_populate(agg.owned_ring, POPULATE_FIRST);
  while (!atomic_load(&agg.stop)) {
    cp_ring_wait(agg.owned_ring, wait_ns, wake_on_sample);
    int new_threads;
    pthread_mutex_lock(&agg.lock);
    size_t taken = drain_locked(&new_threads);
    /* A sample reserved and not yet committed counts as work: its
     * producer woke this thread at reserve, and a long wait now would
     * return at once, a spin until the commit. */
    int pending = cp_ring_pending(agg.owned_ring);
    pthread_mutex_unlock(&agg.lock);
    if (taken)
      cp_ring_populate(agg.owned_ring, POPULATE_AHEAD);
    if (agg.drained)
      agg.drained();
    /* Reading, between drains: the symbol tables of the objects new
     * locations ran in (the drain reads none: new_generation), then the
     * debug information of what the samples ran, read now rather than at
     * the first export: a process that forks hands it to its children,
     * which would otherwise each read it again at their first export (a
     * PostgreSQL backend: libc's, 20-30 ms at its exit). Objects one after
     * the other, for at most PREPARE_NS of this thread's CPU per drain: a
     * server's first seconds open every object its samples ran, before it
     * forks its workers. And what its children had to read themselves
     * (fork_hints.h), also at the tick of an idle parent, which takes no
     * samples. Samples come first: one object can take a tenth of a
     * second (libc's debug file, its sections decompressed whole), in
     * which samples coming as fast as they do in a program that allocates
     * as fast as it can (30,000 a second) overflowed the ring. So only
     * while they come slower than a quarter of the ring per
     * PREPARE_STEP_NS, and until the ring is a quarter full; else the swap
     * reads what the period's samples need, on the exporting thread. */
    uint64_t now = cp_monotonic_ns();
    uint64_t since = now > last_drain ? now - last_drain : 1;
    last_drain = now;
    int tick_due = agg.tick && now >= next_tick;
    int room = (uint64_t)taken * PREPARE_STEP_NS <
               since * (cp_ring_slots(agg.owned_ring) / 4);
    if ((taken || pending || tick_due) && room) {
      uint64_t began = cp_clock_ns(CLOCK_THREAD_CPUTIME_ID);
      pthread_mutex_lock(&agg.lock);
      if (agg.gen)
        cp_gen_resolve_pending(agg.gen, ring_filling);
      pthread_mutex_unlock(&agg.lock);
      while (!ring_filling() && cp_symbols_prepare_lines() &&
             cp_clock_ns(CLOCK_THREAD_CPUTIME_ID) - began < PREPARE_NS) {
      }
    }
    if (tick_due) {
      free_inherited();
      agg.tick();
      next_tick = cp_monotonic_ns() + TICK_INTERVAL_NS;
    }
    now = cp_monotonic_ns();
    /* Nothing came since the last drain: sleep until the next tick, or
     * until the first sample (its producer wakes this thread). Samples
     * that come slowly (a server's single thread, an idle process with the
     * wall profile) from threads already named: sleep until the next tick
     * too, the ring's half-full wake standing guard. Each wake costs this
     * VM 50-90 us of CPU: 10 a second were 0.5-0.9 ms a second of every
     * profiled process's CPU (docs/overhead.md). A thread new to the
     * generation keeps the 100 ms pace, so that its name is read while it
     * lives. */
    int quiet = !pending && !new_threads &&
                (uint64_t)taken * TICK_INTERVAL_NS < QUIET_RATE * since;
    wake_on_sample = !taken && !pending;
    wait_ns = DRAIN_INTERVAL_NS;
    if ((wake_on_sample || quiet) && next_tick > now + DRAIN_INTERVAL_NS)
      wait_ns = next_tick - now;
  }
  return NULL;
}

int cp_agg_start(const cp_config *cfg, void (*tick)(void),
                 void (*drained)(void),
                 void (*thread_name)(pid_t tid, char *buf, size_t len),
                 int defer) {
  pthread_mutex_lock(&agg.lock);
  agg.memory_limit = cfg->max_memory_bytes;
  agg.timeline = cfg->timeline;
  /* Room for the handler's own frames above the kept ones (see unwind.c).
   * The ring outlives stop (a late producer may still hold it), so a restart
   * reuses it when it is large enough; a smaller one is abandoned, never
   * freed. */
  size_t frames = (size_t)cfg->max_frames + 16;
  if (!agg.owned_ring || cp_ring_max_frames(agg.owned_ring) < frames)
    agg.owned_ring = cp_ring_create(RING_SLOTS, frames);
  while (agg.owned_ring && cp_ring_peek(agg.owned_ring))
    cp_ring_release(agg.owned_ring);
  if (agg.owned_ring)
    cp_ring_set_timestamps(agg.owned_ring, agg.timeline);
  agg.gen = new_generation(++agg.next_gen_id);
  if (!agg.owned_ring || !agg.gen) {
    cp_gen_destroy(agg.gen);
    agg.gen = NULL;
    pthread_mutex_unlock(&agg.lock);
    return CONTPROF_ERR_NOMEM;
  }
  agg.drops_reported = cp_ring_drops(agg.owned_ring);
  for (int k = 0; k < CONTPROF_KIND_COUNT; k++) {
    agg.kind_samples_reported[k] = cp_stats_samples_counted(k);
    agg.kind_drops_reported[k] = cp_ring_drops_of_kind(agg.owned_ring, k);
  }
  cp_stats_set_fixed_memory(CP_STATS_MEM_RING, cp_ring_memory(agg.owned_ring));
  agg.tick = tick;
  agg.drained = drained;
  agg.thread_name = thread_name;
  atomic_store(&agg.stop, 0);
  if (defer) {
    agg.deferred_from = cp_monotonic_ns();
    atomic_store(&agg.deferred, 1);
  } else {
    int rc =
        cp_start_joined_thread(&agg.thread, drain_thread, NULL, "contprof-agg");
    if (rc != 0) {
      cp_error("cannot start the aggregator thread: %s", strerror(rc));
      cp_gen_destroy(agg.gen);
      agg.gen = NULL;
      pthread_mutex_unlock(&agg.lock);
      return CONTPROF_ERR_SYSTEM;
    }
    agg.thread_running = 1;
  }
  atomic_store_explicit(&agg.ring, agg.owned_ring, memory_order_release);
  pthread_mutex_unlock(&agg.lock);
  return 0;
}

int cp_agg_deferred(void) {
  return atomic_load_explicit(&agg.deferred, memory_order_relaxed);
}

void cp_agg_start_deferred(int now) {
  if (!cp_agg_deferred())
    return;
  pthread_mutex_lock(&agg.lock);
  int due = now || cp_monotonic_ns() - agg.deferred_from >= DEFER_NS ||
            ring_filling();
  if (due && atomic_load(&agg.deferred) && !atomic_load(&agg.stop)) {
    /* A failure leaves the samples in the ring for the last export (a
     * swap drains it on the exporting thread). */
    int rc = cp_start_joined_thread(&agg.thread, drain_thread, (void *)1,
                                    "contprof-agg");
    if (rc != 0)
      cp_error("cannot start the aggregator thread: %s", strerror(rc));
    agg.thread_running = rc == 0;
    atomic_store(&agg.deferred, 0);
  }
  pthread_mutex_unlock(&agg.lock);
}

void cp_agg_stop(void) {
  int deferred = atomic_exchange(&agg.deferred, 0);
  if (!agg.thread_running && !deferred && !agg.gen)
    return;
  atomic_store(&agg.stop, 1);
  if (agg.thread_running) {
    cp_ring_wake(agg.owned_ring); /* not a drain interval later */
    cp_join_thread(agg.thread);
  }
  agg.thread_running = 0;
  pthread_mutex_lock(&agg.lock);
  atomic_store_explicit(&agg.ring, NULL, memory_order_release);
  /* The ring itself is kept: a producer that loaded it before it was
   * cleared may still be writing into it. */
  cp_gen_destroy(agg.gen);
  agg.gen = NULL;
  pthread_mutex_unlock(&agg.lock);
}

/* Values of samples the ring had to drop (it was full, or a handler
 * interrupted another) go to one "[dropped]" stack: totals stay exact.
 * Caller holds agg.lock. */
static void add_dropped_locked(void) {
  if (!agg.owned_ring || !agg.gen)
    return;
  int64_t values[CP_NVALUES];
  cp_ring_take_dropped(agg.owned_ring, values);
  uint64_t frame = 0; /* interned only when there were drops */
  cp_sample_key key = {0};
  for (int kind = 0; kind < CONTPROF_KIND_COUNT; kind++) {
    int at = cp_kind_value_index((contprof_sample_kind)kind);
    if (!values[at] && !values[at + 1])
      continue;
    if (!frame)
      frame = cp_frame_dropped();
    cp_gen_add(agg.gen, &frame, 1, 0, &key, (contprof_sample_kind)kind,
               values[at], values[at + 1]);
  }
}

static cp_generation *swap(uint64_t *drops, cp_period_stats *stats, int last) {
  pthread_mutex_lock(&agg.lock);
  drain_locked(NULL);
  add_dropped_locked();
  cp_generation *fresh = last ? NULL : new_generation(agg.next_gen_id + 1);
  cp_generation *old = NULL;
  if ((fresh || last) && agg.gen) {
    agg.next_gen_id++;
    old = agg.gen;
    agg.gen = fresh;
  } else {
    cp_gen_destroy(fresh);
  }
  uint64_t total = agg.owned_ring ? cp_ring_drops(agg.owned_ring) : 0;
  if (drops)
    *drops = total - agg.drops_reported;
  if (old)
    agg.drops_reported = total;
  for (int k = 0; k < CONTPROF_KIND_COUNT; k++) {
    uint64_t dropped =
        agg.owned_ring ? cp_ring_drops_of_kind(agg.owned_ring, k) : 0;
    uint64_t counted = cp_stats_samples_counted(k);
    if (stats) {
      stats->samples[k] = counted - agg.kind_samples_reported[k];
      stats->drops[k] = dropped - agg.kind_drops_reported[k];
    }
    if (old) {
      agg.kind_samples_reported[k] = counted;
      agg.kind_drops_reported[k] = dropped;
    }
  }
  pthread_mutex_unlock(&agg.lock);
  /* Named here, on the exporting thread, not under the lock: what the
   * exporter adds from now on (the in-use snapshot) is named at once. */
  if (old) {
    cp_gen_set_defer_reads(old, 0);
    cp_gen_resolve_pending(old, NULL);
  }
  if (last) /* the process's CPU, and the cap's allowance, at its largest */
    cp_dwarf_ask_again();
  return old;
}

cp_generation *cp_agg_swap(uint64_t *drops, cp_period_stats *stats) {
  return swap(drops, stats, 0);
}

cp_generation *cp_agg_swap_last(uint64_t *drops, cp_period_stats *stats) {
  return swap(drops, stats, 1);
}

int cp_agg_record(const uint64_t *frames, size_t nframes,
                  const cp_sample_key *key, contprof_sample_kind kind,
                  int64_t count, int64_t quantity) {
  pthread_mutex_lock(&agg.lock);
  if (!agg.gen) {
    pthread_mutex_unlock(&agg.lock);
    return CONTPROF_ERR_NOT_STARTED;
  }
  note_thread(agg.gen, key->tid);
  cp_sample_key timed = *key;
  if (!timed.time_bucket_ns)
    timed.time_bucket_ns = timeline_bucket_end(cp_realtime_ns());
  cp_gen_add(agg.gen, frames, nframes, 0, &timed, kind, count, quantity);
  cp_stats_count_samples(kind, 1);
  pthread_mutex_unlock(&agg.lock);
  return 0;
}

void cp_agg_after_fork_child(void) {
  pthread_mutex_init(&agg.lock, NULL);
  atomic_store_explicit(&agg.ring, NULL, memory_order_release);
  if (agg.owned_ring)
    cp_ring_discard_after_fork(agg.owned_ring);
  agg.thread_running = 0;
  atomic_store(&agg.deferred, 0);
  /* The parent's samples are not the child's. Freeing them here would
   * write to every page of the parent's call tree on the thread that
   * forked, copying each (a copy-on-write fault), before the child does
   * anything: a child that serves one connection and exits would pay it
   * for nothing. They are kept for the drain thread's first tick (glibc's
   * malloc is consistent in the child, so freeing them later is safe). */
  if (agg.gen && agg.ninherited < INHERITED_GENS)
    agg.inherited[agg.ninherited++] = agg.gen;
  else
    cp_gen_destroy(agg.gen);
  agg.gen = NULL;
}

uint64_t cp_agg_oldest_live_generation(void) {
  pthread_mutex_lock(&agg.lock);
  uint64_t id = agg.gen ? cp_gen_id(agg.gen) : agg.next_gen_id + 1;
  pthread_mutex_unlock(&agg.lock);
  return id;
}

size_t cp_agg_memory_used(const cp_generation *g) {
  return cp_gen_memory_used(g) + cp_labels_memory_used() +
         cp_symbols_memory_used() + cp_dwarf_memory_used();
}

void cp_agg_retire(cp_generation *g) {
  cp_gen_destroy(g);
  cp_symbols_collect(cp_agg_oldest_live_generation());
  /* The period's samples are out: label sets unused since the period
   * before can go. */
  cp_labels_collect();
}
