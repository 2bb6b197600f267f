/* The live-heap table (see heap_table.h). Every function the malloc hooks
 * call is async-signal-safe and lock-free: atomics on preallocated memory, no
 * allocation, no locks, bounded loops (a probe window of PROBES slots; the
 * free-list CAS loops retry only when another thread made progress). */
#include "heap_table.h"

#include <string.h>
#include <sys/mman.h>

#include "common.h"
#include "labels.h"
#include "unwind.h"

#define PROBES 32
#define INDEX_BITS 20 /* entry index in a slot word: capacity < 2^20 */
#define INDEX_MASK ((1u << INDEX_BITS) - 1)
#define SLOT_EMPTY 0
#define SLOT_TOMB 1

cp_heap_gate cp_heap_tracking;
cp_heap_gate cp_heap_filter_on;
_Alignas(64) _Atomic uint8_t cp_heap_filter[1u << CP_HEAP_FILTER_BITS];

static struct {
  size_t capacity;         /* entries */
  size_t frames_cap;       /* frames per entry */
  size_t entry_bytes;      /* header + frames, rounded */
  unsigned char *pool;     /* capacity entries */
  _Atomic uint64_t *slots; /* (addr >> 3) << INDEX_BITS | index */
  size_t slot_mask;
  int slot_bits;
  char pad1[64];
  _Atomic uint64_t free_head; /* tag << 32 | (index + 1) */
  char pad2[56];
  _Atomic uint32_t high_water; /* entries ever handed out */
  char pad3[60];
  _Atomic uint64_t overflows;
  int wiped_on_fork; /* MADV_WIPEONFORK took on the pool and the slots */
  /* A child of fork got the slots as zero pages, not faulted in yet
   * (cp_heap_settle). */
  _Atomic int slots_unpopulated;
} heap;

static cp_heap_entry *entry_at(uint32_t i) {
  return (cp_heap_entry *)(heap.pool + (size_t)i * heap.entry_bytes);
}

static uint32_t index_of(const cp_heap_entry *e) {
  return (uint32_t)(((const unsigned char *)e - heap.pool) / heap.entry_bytes);
}

static uint64_t mix(uintptr_t addr) {
  return (uint64_t)(addr >> 3) * 0x9e3779b97f4a7c15ull;
}

static size_t slot_of(uintptr_t addr) {
  return (size_t)(mix(addr) >> (64 - heap.slot_bits));
}

static size_t filter_of(uintptr_t addr) { return cp_heap_filter_of(addr); }

int cp_heap_init(size_t capacity, size_t max_frames) {
  if (atomic_load(&cp_heap_tracking.on))
    return 0;
  if (capacity < 1)
    capacity = 1;
  if (capacity > INDEX_MASK)
    capacity = INDEX_MASK;
  size_t frames_cap = max_frames + CP_UNWIND_SLACK;
  size_t entry_bytes =
      (sizeof(cp_heap_entry) + frames_cap * sizeof(uint64_t) + 63) &
      ~(size_t)63;
  int bits = 1;
  while (((size_t)1 << bits) < 2 * capacity)
    bits++;
  size_t nslots = (size_t)1 << bits;
  size_t pool_bytes = capacity * entry_bytes;
  size_t slot_bytes = nslots * sizeof(uint64_t);
  /* The pool's untouched pages cost nothing: only the peak of live entries
   * is used. */
  void *pool = mmap(NULL, pool_bytes, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (pool == MAP_FAILED)
    return -1;
  /* The address slots are populated up front (1 MiB at the default
   * capacity): hashing spreads inserts over all of them, and lazily each
   * first insert into a page took a fault, and a first write after a free's
   * lookup had mapped the zero page a copy-on-write fault with a TLB
   * shoot-down of every CPU running the process (27% of CPU time on the
   * worst-case benchmark, docs/benchmarks.md). */
  void *slots = mmap(NULL, slot_bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (slots == MAP_FAILED) {
    munmap(pool, pool_bytes);
    return -1;
  }
  /* A child of fork gets both as fresh zero pages, an empty table, rather
   * than the parent's shared copy-on-write: emptying the parent's entries
   * and each first insert into a slot page cost a child a fault, a copy and
   * a TLB shoot-down (cp_heap_after_fork_child). */
  if (madvise(slots, slot_bytes, MADV_WIPEONFORK) == 0) {
    if (madvise(pool, pool_bytes, MADV_WIPEONFORK) == 0)
      heap.wiped_on_fork = 1;
    else
      madvise(slots, slot_bytes, MADV_KEEPONFORK);
  }
  heap.pool = pool;
  heap.slots = slots;
  heap.capacity = capacity;
  heap.frames_cap = frames_cap;
  heap.entry_bytes = entry_bytes;
  heap.slot_mask = nslots - 1;
  heap.slot_bits = bits;
  atomic_store(&cp_heap_tracking.on, 1); /* the table exists */
  atomic_store(&cp_heap_filter_on.on, 1);
  return 0;
}

void cp_heap_mark_always(uintptr_t addr) {
  atomic_store_explicit(&cp_heap_filter[filter_of(addr)], 255,
                        memory_order_relaxed);
  atomic_store_explicit(&cp_heap_filter_on.on, 1, memory_order_release);
}

size_t cp_heap_frames_capacity(void) { return heap.frames_cap; }
size_t cp_heap_capacity(void) { return heap.capacity; }
size_t cp_heap_entry_bytes(void) { return heap.entry_bytes; }
size_t cp_heap_memory_used(void) {
  if (!heap.slots)
    return 0;
  long live = cp_heap_count_live();
  return (heap.slot_mask + 1) * sizeof(uint64_t) +
         (live > 0 ? (size_t)live : 0) * heap.entry_bytes;
}
uint64_t cp_heap_overflows(void) {
  return atomic_load_explicit(&heap.overflows, memory_order_relaxed);
}

/* An entry has one writer at a time: the thread that took it from a free
 * list, or that won its slot in cp_heap_untrack; the hand-over between
 * writers goes through those compare-and-swaps. So its sequence count is
 * moved with a load and a store, not a locked add. Async-signal-safe. */
static void begin_write(cp_heap_entry *e) {
  uint32_t s = atomic_load_explicit(&e->seq, memory_order_relaxed);
  atomic_store_explicit(&e->seq, s + 1, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
}

/* Async-signal-safe. */
static void end_write(cp_heap_entry *e) {
  uint32_t s = atomic_load_explicit(&e->seq, memory_order_relaxed);
  atomic_store_explicit(&e->seq, s + 1, memory_order_release);
}

/* Each thread whose end the pthread_create hook sees keeps up to STASH free
 * entries of its own: the entries its tracked frees gave back, taken again
 * by its next samples. The shared free list's head, and the link of an
 * entry another core last wrote, were two cache transfers per sample and
 * one per tracked free (docs/benchmarks.md, "Fewer cache transfers per
 * tracked sample"). At most STASH entries per live thread are out of the
 * shared list; an ending thread gives them back (cp_heap_thread_end). A
 * child of fork whose table was not wiped loses the other threads' kept
 * entries (at most STASH per thread the parent had). busy keeps a signal
 * handler that frees a tracked block, on this thread in the middle of a
 * stash operation, on the shared list. */
#define STASH 4
enum { STASH_OFF, STASH_ON, STASH_CLOSED };
static CP_TLS struct {
  uint8_t state;
  uint8_t busy;
  uint16_t n;
  uint32_t index[STASH];
} stash;

void cp_heap_thread_begin(void) {
  if (stash.state == STASH_OFF)
    stash.state = STASH_ON;
}

/* Async-signal-safe: 1 when this thread may change its stash now (0: a
 * stash operation this call interrupted is under way). */
static int stash_enter(void) {
  if (stash.busy)
    return 0;
  stash.busy = 1;
  atomic_signal_fence(memory_order_seq_cst);
  return 1;
}

static void stash_leave(void) {
  atomic_signal_fence(memory_order_seq_cst);
  stash.busy = 0;
}

/* Async-signal-safe, lock-free. */
static void push_free(cp_heap_entry *e) {
  uint32_t index = index_of(e);
  uint64_t head = atomic_load_explicit(&heap.free_head, memory_order_relaxed);
  uint64_t next;
  do {
    atomic_store_explicit(&e->next, (uint32_t)head, memory_order_relaxed);
    next = (((head >> 32) + 1) << 32) | (uint64_t)(index + 1);
  } while (!atomic_compare_exchange_weak_explicit(&heap.free_head, &head, next,
                                                  memory_order_release,
                                                  memory_order_relaxed));
}

/* Async-signal-safe, lock-free. */
cp_heap_entry *cp_heap_entry_take(void) {
  if (!atomic_load_explicit(&cp_heap_tracking.on, memory_order_acquire))
    return NULL;
  if (stash.n && stash_enter()) {
    cp_heap_entry *e = entry_at(stash.index[--stash.n]);
    stash_leave();
    begin_write(e);
    return e;
  }
  uint64_t head = atomic_load_explicit(&heap.free_head, memory_order_acquire);
  while ((uint32_t)head != 0) {
    cp_heap_entry *e = entry_at((uint32_t)head - 1);
    /* May read the link of an entry another thread just took: the tag makes
     * the CAS fail then. */
    uint32_t link = atomic_load_explicit(&e->next, memory_order_relaxed);
    uint64_t next = (((head >> 32) + 1) << 32) | link;
    if (atomic_compare_exchange_weak_explicit(&heap.free_head, &head, next,
                                              memory_order_acquire,
                                              memory_order_acquire)) {
      begin_write(e);
      return e;
    }
  }
  uint32_t hw = atomic_load_explicit(&heap.high_water, memory_order_relaxed);
  while (hw < heap.capacity) {
    if (atomic_compare_exchange_weak_explicit(&heap.high_water, &hw, hw + 1,
                                              memory_order_relaxed,
                                              memory_order_relaxed)) {
      /* An entry never handed out: its page may be untouched, and a load
       * of its sequence count would map the zero page there, the store
       * after it take a copy-on-write fault and flush the TLB of every
       * CPU running the process. A locked add is one write fault. */
      cp_heap_entry *e = entry_at(hw);
      atomic_fetch_add_explicit(&e->seq, 1, memory_order_relaxed);
      atomic_thread_fence(memory_order_release);
      return e;
    }
  }
  atomic_fetch_add_explicit(&heap.overflows, 1, memory_order_relaxed);
  return NULL;
}

/* Async-signal-safe. Every entry leaves through here: its label set's hold
 * (cp_labels_hold when it was filled) is given back once. */
void cp_heap_entry_abandon(cp_heap_entry *e) {
  cp_labels_release(e->labels);
  e->labels = 0;
  atomic_store_explicit(&e->addr, 0, memory_order_relaxed);
  end_write(e);
  if (stash.state == STASH_ON && stash.n < STASH && stash_enter()) {
    stash.index[stash.n++] = index_of(e);
    stash_leave();
    return;
  }
  push_free(e);
}

void cp_heap_thread_end(void) {
  stash.busy = 1;
  atomic_signal_fence(memory_order_seq_cst);
  stash.state = STASH_CLOSED;
  while (stash.n)
    push_free(entry_at(stash.index[--stash.n]));
  stash_leave();
}

/* Async-signal-safe: saturating increment (255 stays: always look up). */
static void filter_add(size_t i) {
  uint8_t v = atomic_load_explicit(&cp_heap_filter[i], memory_order_relaxed);
  while (v != 255 && !atomic_compare_exchange_weak_explicit(
                         &cp_heap_filter[i], &v, (uint8_t)(v + 1),
                         memory_order_release, memory_order_relaxed)) {
  }
}

/* Async-signal-safe. */
static void filter_remove(size_t i) {
  uint8_t v = atomic_load_explicit(&cp_heap_filter[i], memory_order_relaxed);
  while (v != 255 && v != 0 &&
         !atomic_compare_exchange_weak_explicit(
             &cp_heap_filter[i], &v, (uint8_t)(v - 1), memory_order_relaxed,
             memory_order_relaxed)) {
  }
}

/* Async-signal-safe, lock-free. */
void cp_heap_entry_publish(cp_heap_entry *e, uintptr_t addr) {
  /* Slot words keep addr >> 3 in 44 bits: user-space addresses below 2^47,
   * 8-byte aligned (what every allocator returns). */
  if ((addr & 7) || (addr >> 47)) {
    atomic_fetch_add_explicit(&heap.overflows, 1, memory_order_relaxed);
    cp_heap_entry_abandon(e);
    return;
  }
  atomic_store_explicit(&e->addr, addr, memory_order_relaxed);
  end_write(e);
  /* The filter first: a lookup that finds the slot word must pass it. */
  size_t f = filter_of(addr);
  filter_add(f);
  uint64_t word = ((uint64_t)(addr >> 3) << INDEX_BITS) | index_of(e);
  size_t s = slot_of(addr);
  for (int i = 0; i < PROBES; i++, s = (s + 1) & heap.slot_mask) {
    uint64_t cur = atomic_load_explicit(&heap.slots[s], memory_order_relaxed);
    while (cur == SLOT_EMPTY || cur == SLOT_TOMB) {
      if (atomic_compare_exchange_weak_explicit(&heap.slots[s], &cur, word,
                                                memory_order_release,
                                                memory_order_relaxed)) {
        return;
      }
    }
  }
  filter_remove(f);
  atomic_fetch_add_explicit(&heap.overflows, 1, memory_order_relaxed);
  begin_write(e);
  cp_heap_entry_abandon(e);
}

/* Async-signal-safe, lock-free. */
int cp_heap_untrack(uintptr_t addr) {
  if (!atomic_load_explicit(&cp_heap_tracking.on, memory_order_acquire))
    return 0;
  size_t f = filter_of(addr);
  uint64_t key = (uint64_t)(addr >> 3);
  size_t s = slot_of(addr);
  for (int i = 0; i < PROBES; i++, s = (s + 1) & heap.slot_mask) {
    uint64_t cur = atomic_load_explicit(&heap.slots[s], memory_order_acquire);
    if (cur == SLOT_EMPTY)
      return 0;
    if (cur == SLOT_TOMB || (cur >> INDEX_BITS) != key)
      continue;
    if (!atomic_compare_exchange_strong_explicit(
            &heap.slots[s], &cur, SLOT_TOMB, memory_order_acq_rel,
            memory_order_relaxed))
      return 0; /* another free of the same pointer won: a double free */
    filter_remove(f);
    cp_heap_entry *e = entry_at((uint32_t)(cur & INDEX_MASK));
    begin_write(e);
    cp_heap_entry_abandon(e);
    return 1;
  }
  return 0;
}

void cp_heap_foreach_live(void (*fn)(const cp_heap_entry *e, void *ctx),
                          void *ctx, cp_heap_entry *scratch) {
  if (!atomic_load_explicit(&cp_heap_tracking.on, memory_order_acquire))
    return;
  uint32_t n = atomic_load_explicit(&heap.high_water, memory_order_acquire);
  if (n > heap.capacity)
    n = (uint32_t)heap.capacity;
  for (uint32_t i = 0; i < n; i++) {
    cp_heap_entry *e = entry_at(i);
    uint32_t s1 = atomic_load_explicit(&e->seq, memory_order_acquire);
    if (s1 & 1)
      continue;
    uintptr_t addr = atomic_load_explicit(&e->addr, memory_order_relaxed);
    if (!addr)
      continue;
    scratch->tid = e->tid;
    scratch->labels = e->labels;
    scratch->count = e->count;
    scratch->bytes = e->bytes;
    scratch->truncated = e->truncated;
    uint32_t nframes = e->nframes;
    if (nframes > heap.frames_cap)
      nframes = (uint32_t)heap.frames_cap;
    scratch->nframes = nframes;
    memcpy(scratch->frames, e->frames, nframes * sizeof(uint64_t));
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&e->seq, memory_order_relaxed) != s1)
      continue; /* freed or reused meanwhile */
    atomic_store_explicit(&scratch->addr, addr, memory_order_relaxed);
    fn(scratch, ctx);
  }
}

/* Not a counter that publish and untrack update: every thread's samples
 * and frees would write its cache line, a transfer between cores each
 * (about 6% of what tracking a sample cost, docs/benchmarks.md). Reads each
 * handed-out entry's header instead, at export. */
long cp_heap_count_live(void) {
  if (!atomic_load_explicit(&cp_heap_tracking.on, memory_order_acquire))
    return 0;
  uint32_t n = atomic_load_explicit(&heap.high_water, memory_order_acquire);
  if (n > heap.capacity)
    n = (uint32_t)heap.capacity;
  long live = 0;
  for (uint32_t i = 0; i < n; i++)
    live += atomic_load_explicit(&entry_at(i)->addr, memory_order_relaxed) != 0;
  return live;
}

void cp_heap_after_fork_child(void) {
  if (!atomic_load_explicit(&cp_heap_tracking.on, memory_order_acquire))
    return;
  if (!heap.wiped_on_fork) {
    cp_heap_untrack_all();
    return;
  }
  /* Zero pool and slots: no entry handed out, none free, no slot used; the
   * forking thread's stash named entries of the parent's pool. */
  stash.n = 0;
  atomic_store_explicit(&heap.free_head, 0, memory_order_relaxed);
  atomic_store_explicit(&heap.high_water, 0, memory_order_relaxed);
  /* Only the buckets in use are written: each first write to a page of the
   * filter copies it from the parent. Saturated ones stay (they may hold a
   * block of cp_heap_mark_always's, which the child may free). */
  for (size_t i = 0; i < sizeof cp_heap_filter; i++) {
    uint8_t v = atomic_load_explicit(&cp_heap_filter[i], memory_order_relaxed);
    if (v && v != 255)
      atomic_store_explicit(&cp_heap_filter[i], 0, memory_order_relaxed);
  }
  /* Not faulted in here, on the thread that forked (1 MiB at the default
   * capacity, 256 faults: 2 ms of the child's CPU on this VM, before it
   * could go on): a child that lives a moment faults in the few it uses,
   * and one that lives on gets them all at its first tick. */
  atomic_store_explicit(&heap.slots_unpopulated, 1, memory_order_relaxed);
}

void cp_heap_settle(void) {
  if (!atomic_exchange_explicit(&heap.slots_unpopulated, 0,
                                memory_order_relaxed))
    return;
  /* What a page has meanwhile (entries the hooks wrote) stays as it is. */
  madvise(heap.slots, (heap.slot_mask + 1) * sizeof(uint64_t),
          MADV_POPULATE_WRITE);
}

void cp_heap_untrack_all(void) {
  if (!atomic_load_explicit(&cp_heap_tracking.on, memory_order_acquire))
    return;
  uint32_t n = atomic_load_explicit(&heap.high_water, memory_order_acquire);
  if (n > heap.capacity)
    n = (uint32_t)heap.capacity;
  for (uint32_t i = 0; i < n; i++) {
    cp_heap_entry *e = entry_at(i);
    uintptr_t addr = atomic_load_explicit(&e->addr, memory_order_relaxed);
    if (addr && !(atomic_load_explicit(&e->seq, memory_order_relaxed) & 1))
      cp_heap_untrack(addr);
  }
}
