/* The live-heap table: sampled allocations tracked by address until they are
 * freed, with the stack and the scaled values of each, so the in-use profile
 * is a snapshot of what is still live. Lock-free and preallocated: the malloc
 * hooks insert and remove without locks or allocation; the uploader thread
 * reads a consistent copy of each entry (a per-entry sequence lock).
 *
 * Layout: an entry pool (index-linked free list with an ABA tag, bump
 * allocated so only the peak of live entries is touched), an open-addressing
 * table of 2 x capacity address slots pointing into the pool, and a
 * counting filter so that the free of an untracked pointer usually costs one
 * load from a 64 KiB array. The table is created once and kept for the life
 * of the process: a hook that loaded it may still be using it. */
#ifndef CP_HEAP_TABLE_H
#define CP_HEAP_TABLE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct cp_heap_entry {
  _Atomic uint32_t seq;   /* even: stable; odd: being written */
  _Atomic uint32_t next;  /* free-list link: index + 1, 0 = end */
  _Atomic uintptr_t addr; /* the allocation; 0 while not live */
  pid_t tid;
  uint32_t labels;
  int64_t count; /* scaled objects */
  int64_t bytes; /* scaled bytes */
  uint32_t nframes;
  uint32_t truncated;
  uint64_t frames[]; /* cp_heap_frames_capacity() words */
} cp_heap_entry;

/* Creates the table once (later calls return 0 and keep the first one).
 * capacity: most allocations tracked at once; max_frames: frames kept per
 * entry. Not thread-safe against itself; returns 0 or -1 (ENOMEM). */
int cp_heap_init(size_t capacity, size_t max_frames);

/* Frames an entry can hold: max_frames + CP_UNWIND_SLACK (room for the
 * hook's own frames, which the unwinder drops). */
size_t cp_heap_frames_capacity(void);
size_t cp_heap_capacity(void);

/* Hot path, async-signal-safe and lock-free. Takes a free entry, marked as
 * being written; NULL (counted as an overflow) when every entry is live. */
cp_heap_entry *cp_heap_entry_take(void);
/* Publishes a taken and filled entry under addr. When the address slots in
 * its probe window are all taken the entry is given back and the overflow
 * counted. */
void cp_heap_entry_publish(cp_heap_entry *e, uintptr_t addr);
/* Gives back a taken entry that will not be published. */
void cp_heap_entry_abandon(cp_heap_entry *e);

/* On a thread whose end cp_heap_thread_end will hear of (the pthread_create
 * hook's threads): entries its frees give back may stay with it, for its
 * next samples. Not signal-safe (the thread's start). */
void cp_heap_thread_begin(void);
/* On that thread, as it ends: its kept entries go back to the shared list,
 * and it keeps none from then on. Async-signal-safe. */
void cp_heap_thread_end(void);

/* Whether the heap profile ever ran in this process (set once with the
 * table, never cleared: what it tracked stays tracked after a stop), alone
 * on its cache line; and per filter bucket, the live addresses that hash
 * there (255: saturated, always look). 65,536 buckets: a free whose
 * bucket is not empty looks the address up in the slots (a cache miss), and
 * with 4,096 buckets a process holding 4 GiB of live heap (8,192 tracked
 * samples at the default mean) sent 86% of its frees there, its
 * malloc/free pairs at twice plain's cost; with 65,536, 12%, and the
 * benchmark with no live heap pays nothing measurable for the larger
 * filter (docs/benchmarks.md, "A large live heap"). There is no count of live
 * entries to test instead: every sample and every removal would write it and
 * every free on every thread read it, so each sample cost a cache miss on every
 * other core (2 points of CPU on the worst-case benchmark, docs/benchmarks.md).
 *
 * cp_heap_filter_on: the filter may hold something (the heap profile ran,
 * or cp_heap_mark_always marked a block), alone on its cache line; what the
 * free hook tests before the filter.
 */
typedef struct cp_heap_gate {
  _Alignas(64) _Atomic int on;
  char pad[60];
} cp_heap_gate;
extern cp_heap_gate cp_heap_tracking __attribute__((visibility("hidden")));
extern cp_heap_gate cp_heap_filter_on __attribute__((visibility("hidden")));
#define CP_HEAP_FILTER_BITS 16
extern _Alignas(64) _Atomic uint8_t cp_heap_filter[1u << CP_HEAP_FILTER_BITS]
    __attribute__((visibility("hidden")));

/* The filter's bucket of addr: the top bits of a multiplicative hash, which
 * depend on every bit of the address (three instructions on the free hook's
 * path: a multiply and a shift, the constant's load). */
static inline size_t cp_heap_filter_of(uintptr_t addr) {
  return (size_t)(((uint64_t)addr * 0x9e3779b97f4a7c15ull) >>
                  (64 - CP_HEAP_FILTER_BITS));
}

/* Hot path (the free hook), async-signal-safe: whether addr may be tracked
 * by the live table or marked (cp_heap_mark_always). Before either, one
 * predictable branch on a read-mostly flag; after, a hash and one load from
 * the filter, laid out to follow with no taken branch. */
static inline int cp_heap_may_track(uintptr_t addr) {
  return __builtin_expect(
             atomic_load_explicit(&cp_heap_filter_on.on, memory_order_relaxed),
             1) &&
         atomic_load_explicit(&cp_heap_filter[cp_heap_filter_of(addr)],
                              memory_order_relaxed) != 0;
}

/* Async-signal-safe: every free of a block at addr must reach the free
 * hook's slow path (interpose/malloc.c's bootstrap arena): its bucket is
 * saturated (never decremented, kept in a child of fork) and the filter
 * turned on. The table need not exist. */
void cp_heap_mark_always(uintptr_t addr);

/* Hot path, async-signal-safe and lock-free. Stops tracking addr if it is
 * tracked; returns 1 if it was. */
int cp_heap_untrack(uintptr_t addr);

/* Calls fn with a stable copy of every live entry (the uploader thread).
 * `scratch` must hold an entry with cp_heap_frames_capacity() frames. */
void cp_heap_foreach_live(void (*fn)(const cp_heap_entry *e, void *ctx),
                          void *ctx, cp_heap_entry *scratch);

/* In the child of fork (one thread): stops tracking every allocation, so the
 * child's in-use profile holds only what the child allocated. An entry the
 * parent's other threads were writing at fork stays taken (it is lost). */
void cp_heap_untrack_all(void);
/* In the child of fork (only the forking thread lives): empties the table,
 * whose pool and slots the child got as fresh zero pages (else as
 * cp_heap_untrack_all). The slots are left to fault in as they are used,
 * until cp_heap_settle. */
void cp_heap_after_fork_child(void);
/* On the profiler's thread, once a second: in a child of fork, faults in
 * the address slots (as cp_heap_init did in the parent), so that the hooks
 * of a child that lives on take no page fault there. Else nothing. */
void cp_heap_settle(void);

/* How many allocations are tracked now (a counter the hooks keep). */
long cp_heap_count_live(void);

/* Sampled allocations that could not be tracked (table full), since start. */
uint64_t cp_heap_overflows(void);

/* Bytes one entry takes (header + frames). */
size_t cp_heap_entry_bytes(void);
/* Bytes the table holds: its address slots and the live entries. */
size_t cp_heap_memory_used(void);

#endif
