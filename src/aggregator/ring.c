/* Bounded lock-free ring of raw samples (a Vyukov-style sequence-numbered
 * queue): producers claim a slot with one CAS and publish it with one release
 * store; the single consumer reads slots in order. Everything is allocated at
 * creation, so producers are async-signal-safe. */
#include "ring.h"

#include <errno.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "thread_state.h"

/* A slot's sequence number is stored minus its index, so that a fresh slot
 * holds 0 and creating the ring writes nothing. */
typedef struct slot_header {
  _Atomic uint64_t seq_minus_index;
  uint64_t pad;
} slot_header;

struct cp_ring {
  _Atomic uint64_t enqueue_pos;
  char pad1[56];
  _Atomic uint64_t dequeue_pos;  /* written by the consumer only */
  _Atomic uint32_t wake_seq;     /* futex word: bumped to wake the consumer */
  _Atomic uint32_t wake_pending; /* a wake was sent and not yet consumed */
  _Atomic uint32_t wake_first;   /* the consumer waits long: wake it now */
  char pad2[44];
  _Atomic uint64_t drops;
  _Atomic uint64_t drops_of_kind[CONTPROF_KIND_COUNT];
  _Atomic int64_t dropped_values[CP_NVALUES]; /* per kind: count, quantity */
  size_t mask;
  size_t max_frames;
  _Atomic int timestamps; /* producers read the clock for each sample */
  size_t slot_bytes;
  size_t map_bytes;
  unsigned char *slots;
  size_t populated;  /* bytes from slots on faulted in (consumer's thread) */
  int wiped_on_fork; /* MADV_WIPEONFORK took: a child's slots are zero */
};

static slot_header *header_at(const cp_ring *r, uint64_t pos) {
  return (slot_header *)(r->slots + (pos & r->mask) * r->slot_bytes);
}

static uint64_t load_seq(const cp_ring *r, uint64_t pos, memory_order mo) {
  return atomic_load_explicit(&header_at(r, pos)->seq_minus_index, mo) +
         (pos & r->mask);
}

static void store_seq(const cp_ring *r, uint64_t pos, uint64_t seq) {
  atomic_store_explicit(&header_at(r, pos)->seq_minus_index,
                        seq - (pos & r->mask), memory_order_release);
}

static cp_raw_sample *sample_at(const cp_ring *r, uint64_t pos) {
  return (cp_raw_sample *)((unsigned char *)header_at(r, pos) +
                           sizeof(slot_header));
}

cp_ring *cp_ring_create(size_t slots, size_t max_frames) {
  size_t n = 1;
  while (n < slots)
    n <<= 1;
  cp_ring *r = calloc(1, sizeof *r);
  if (!r)
    return NULL;
  r->mask = n - 1;
  r->max_frames = max_frames;
  r->slot_bytes = (sizeof(slot_header) + sizeof(cp_raw_sample) +
                   max_frames * sizeof(uint64_t) + 63) &
                  ~(size_t)63;
  r->map_bytes = n * r->slot_bytes;
  /* Not populated here: the consumer's thread does it when it starts
   * (cp_ring_populate), off the thread that starts the profiler. */
  void *mem = mmap(NULL, r->map_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    free(r);
    return NULL;
  }
  r->slots = mem;
  /* A child of fork gets fresh zero pages, not the parent's shared
   * copy-on-write: each first write to one of those took a fault, a copy
   * and a TLB shoot-down of every CPU running the child (a forking server's
   * children paid 0.9% of the machine's CPU for it, docs/benchmarks.md).
   * Zero slots are an empty ring at position 0 (cp_ring_discard_after_fork). */
  r->wiped_on_fork = madvise(mem, r->map_bytes, MADV_WIPEONFORK) == 0;
  return r;
}

/* Faults in [from, to) of the slots (byte offsets, page-aligned from). */
static void populate_range(cp_ring *r, size_t from, size_t to) {
  if (madvise(r->slots + from, to - from, MADV_POPULATE_WRITE) == 0)
    return;
  /* Before Linux 5.14: one write fault per page, by an atomic add of zero,
   * which leaves a word a producer may be writing as it is. */
  for (size_t off = from; off < to; off += 4096)
    atomic_fetch_add_explicit((_Atomic uint64_t *)(r->slots + off), 0,
                              memory_order_relaxed);
}

void cp_ring_populate(cp_ring *r, size_t ahead_slots) {
  if (r->populated >= r->map_bytes)
    return;
  size_t n = r->mask + 1;
  uint64_t pos = atomic_load_explicit(&r->enqueue_pos, memory_order_relaxed);
  /* Slots are used in order from 0 until the first lap ends. */
  size_t want_slots =
      pos >= n || n - pos <= ahead_slots ? n : (size_t)pos + ahead_slots;
  size_t want = (want_slots * r->slot_bytes + 4095) & ~(size_t)4095;
  if (want > r->map_bytes)
    want = r->map_bytes;
  if (want <= r->populated)
    return;
  populate_range(r, r->populated, want);
  r->populated = want;
}

void cp_ring_destroy(cp_ring *r) {
  if (!r)
    return;
  munmap(r->slots, r->map_bytes);
  free(r);
}

size_t cp_ring_max_frames(const cp_ring *r) { return r->max_frames; }

void cp_ring_set_timestamps(cp_ring *r, int on) {
  atomic_store_explicit(&r->timestamps, on != 0, memory_order_relaxed);
}

/* Async-signal-safe. */
int cp_ring_timestamps(const cp_ring *r) {
  return atomic_load_explicit(&((cp_ring *)r)->timestamps,
                              memory_order_relaxed);
}

/* Async-signal-safe, lock-free. */
void cp_ring_drop(cp_ring *r, uint32_t kind, int64_t count, int64_t quantity) {
  atomic_fetch_add_explicit(&r->drops, 1, memory_order_relaxed);
  if (kind >= CONTPROF_KIND_COUNT)
    return;
  int at = cp_kind_value_index((contprof_sample_kind)kind);
  atomic_fetch_add_explicit(&r->drops_of_kind[kind], 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&r->dropped_values[at], count,
                            memory_order_relaxed);
  atomic_fetch_add_explicit(&r->dropped_values[at + 1], quantity,
                            memory_order_relaxed);
}

void cp_ring_take_dropped(cp_ring *r, int64_t values[CP_NVALUES]) {
  for (int i = 0; i < CP_NVALUES; i++)
    values[i] = atomic_exchange_explicit(&r->dropped_values[i], 0,
                                         memory_order_relaxed);
}

/* A slot's sequence number, read by a producer. In the ring's first lap
 * the slot may lie on a page nothing has touched yet (the consumer faults
 * the slots in ahead of the producers, but they outrun it in a burst): a
 * load would map the zero page there, and the sample's first store then
 * take a copy-on-write fault whose TLB flush interrupts every other CPU
 * running the process (half of a fast allocator's page faults in its first
 * 0.15 s, and the inter-processor interrupts with them). A locked add of
 * zero reads it as a write does: one fault, no flush. The first lap only:
 * afterwards every slot's page is in. Async-signal-safe. */
static uint64_t producer_seq(const cp_ring *r, uint64_t pos) {
  if (pos > r->mask)
    return load_seq(r, pos, memory_order_acquire);
  return atomic_fetch_add_explicit(&header_at(r, pos)->seq_minus_index, 0,
                                   memory_order_acquire) +
         (pos & r->mask);
}

/* Async-signal-safe, lock-free. */
cp_raw_sample *cp_ring_reserve(cp_ring *r, uint64_t *ticket, uint32_t kind,
                               int64_t count, int64_t quantity) {
  uint64_t pos = atomic_load_explicit(&r->enqueue_pos, memory_order_relaxed);
  for (;;) {
    uint64_t seq = producer_seq(r, pos);
    int64_t diff = (int64_t)seq - (int64_t)pos;
    if (diff == 0) {
      if (atomic_compare_exchange_weak_explicit(&r->enqueue_pos, &pos, pos + 1,
                                                memory_order_relaxed,
                                                memory_order_relaxed)) {
        *ticket = pos;
        /* Half full: wake the consumer early rather than drop samples in a
         * burst. One futex wake per drain at most. */
        uint64_t used =
            pos + 1 -
            atomic_load_explicit(&r->dequeue_pos, memory_order_relaxed);
        /* Or the first sample after an idle wait (cp_ring_wait). */
        int first =
            atomic_load_explicit(&r->wake_first, memory_order_seq_cst) &&
            atomic_exchange_explicit(&r->wake_first, 0, memory_order_relaxed);
        if ((first || used > (r->mask + 1) / 2) &&
            !atomic_exchange_explicit(&r->wake_pending, 1,
                                      memory_order_relaxed)) {
          cp_ring_wake(r);
        }
        return sample_at(r, pos);
      }
    } else if (diff < 0) {
      cp_ring_drop(r, kind, count, quantity);
      return NULL;
    } else {
      pos = atomic_load_explicit(&r->enqueue_pos, memory_order_relaxed);
    }
  }
}

/* Async-signal-safe. */
void cp_ring_commit(cp_ring *r, uint64_t ticket) {
  store_seq(r, ticket, ticket + 1);
}

void cp_ring_wait(cp_ring *r, uint64_t timeout_ns, int wake_on_sample) {
  uint32_t seq = atomic_load_explicit(&r->wake_seq, memory_order_acquire);
  atomic_store_explicit(&r->wake_pending, 0, memory_order_relaxed);
  atomic_store_explicit(&r->wake_first, wake_on_sample ? 1u : 0u,
                        memory_order_seq_cst);
  uint64_t used = atomic_load_explicit(&r->enqueue_pos, memory_order_seq_cst) -
                  atomic_load_explicit(&r->dequeue_pos, memory_order_relaxed);
  if (used > (r->mask + 1) / 2 || (wake_on_sample && used > 0))
    return;
  struct timespec ts = {(time_t)(timeout_ns / 1000000000ull),
                        (long)(timeout_ns % 1000000000ull)};
  /* Returns on a wake, on the timeout, or at once if seq moved. */
  syscall(SYS_futex, &r->wake_seq, FUTEX_WAIT_PRIVATE, seq, &ts, NULL, 0);
}

/* Async-signal-safe: also called from samples (cp_ring_reserve, the
 * unwinder's cp_agg_wake). Timed: the woken thread may take this CPU
 * before the call returns (thread_state.h, wake_ns). */
void cp_ring_wake(cp_ring *r) {
  uint64_t t0 = cp_monotonic_ns();
  atomic_fetch_add_explicit(&r->wake_seq, 1, memory_order_release);
  syscall(SYS_futex, &r->wake_seq, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
  cp_thread.wake_ns += cp_monotonic_ns() - t0;
}

const cp_raw_sample *cp_ring_peek(cp_ring *r) {
  uint64_t pos = atomic_load_explicit(&r->dequeue_pos, memory_order_relaxed);
  uint64_t seq = load_seq(r, pos, memory_order_acquire);
  return seq == pos + 1 ? sample_at(r, pos) : NULL;
}

size_t cp_ring_used(const cp_ring *r) {
  cp_ring *w = (cp_ring *)r;
  uint64_t end = atomic_load_explicit(&w->enqueue_pos, memory_order_relaxed);
  uint64_t pos = atomic_load_explicit(&w->dequeue_pos, memory_order_relaxed);
  return end > pos ? (size_t)(end - pos) : 0;
}

size_t cp_ring_slots(const cp_ring *r) { return r->mask + 1; }

unsigned cp_ring_pressure(const cp_ring *r) {
  size_t quarter = (r->mask + 1) / 4, used = cp_ring_used(r);
  size_t free = used < r->mask + 1 ? r->mask + 1 - used : 0;
  if (free >= quarter)
    return 1;
  if (free * CP_RING_PRESSURE_MAX <= quarter)
    return CP_RING_PRESSURE_MAX;
  return (unsigned)(quarter / free);
}

int cp_ring_pending(const cp_ring *r) { return cp_ring_used(r) != 0; }

void cp_ring_release(cp_ring *r) {
  uint64_t pos = atomic_load_explicit(&r->dequeue_pos, memory_order_relaxed);
  store_seq(r, pos, pos + r->mask + 1);
  atomic_store_explicit(&r->dequeue_pos, pos + 1, memory_order_relaxed);
}

void cp_ring_discard_after_fork(cp_ring *r) {
  if (r->wiped_on_fork) {
    /* The slots are zero: every one free for the first lap, and none
     * faulted in. */
    atomic_store_explicit(&r->enqueue_pos, 0, memory_order_relaxed);
    atomic_store_explicit(&r->dequeue_pos, 0, memory_order_relaxed);
    r->populated = 0;
  }
  uint64_t end = atomic_load_explicit(&r->enqueue_pos, memory_order_relaxed);
  uint64_t pos = atomic_load_explicit(&r->dequeue_pos, memory_order_relaxed);
  for (; pos != end; pos++)
    store_seq(r, pos, pos + r->mask + 1);
  atomic_store_explicit(&r->dequeue_pos, end, memory_order_relaxed);
  atomic_store_explicit(&r->wake_pending, 0, memory_order_relaxed);
  for (size_t i = 0; i < CP_NVALUES; i++)
    atomic_store_explicit(&r->dropped_values[i], 0, memory_order_relaxed);
}

uint64_t cp_ring_drops(const cp_ring *r) {
  return atomic_load_explicit(&((cp_ring *)r)->drops, memory_order_relaxed);
}

uint64_t cp_ring_drops_of_kind(const cp_ring *r, uint32_t kind) {
  if (kind >= CONTPROF_KIND_COUNT)
    return 0;
  return atomic_load_explicit(&((cp_ring *)r)->drops_of_kind[kind],
                              memory_order_relaxed);
}

size_t cp_ring_memory(const cp_ring *r) { return r->map_bytes + sizeof *r; }
