/* What the malloc family's hooks (interpose/malloc.c) call in the allocation
 * sampler (alloc.c): the per-allocation countdown, and the observers of a
 * sampled allocation and of the free of a pointer it may track. The sampler
 * knows nothing of hooking. */
#ifndef CP_ALLOC_H
#define CP_ALLOC_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "heap_table.h"

/* Alloc or heap sampling is on (alloc.c sets it at start and stop). Read by
 * cp_alloc_on_alloc, when a countdown runs out: alone on its cache line,
 * which nothing written shares. */
typedef struct cp_alloc_hot {
  _Alignas(64) _Atomic int sampling;
  char pad[60];
} cp_alloc_hot_t;
extern cp_alloc_hot_t cp_alloc_hot __attribute__((visibility("hidden")));
/* This thread's bytes until its next sample. */
extern CP_TLS int64_t cp_alloc_countdown __attribute__((visibility("hidden")));

/* Hot path, async-signal-safe: counts an allocation of `size` bytes about to
 * be made; true when the countdown ran out (the caller then allocates and
 * calls cp_alloc_on_alloc, which samples it or not). Counting before the
 * call lets every hook end in a tail call to the real allocator when it does
 * not sample: no stack frame, no second return. (A failed allocation still
 * counts its bytes: that only moves the next sample a little earlier.) The
 * countdown runs whether sampling is on or not: cp_alloc_on_alloc tests
 * that, once per CP_ALLOC_OFF_GAP bytes while it is off, where a test of the
 * flag here was three instructions on every allocation (a load, a test, a
 * branch; docs/benchmarks.md, "Instructions a pair"). */
static inline __attribute__((always_inline)) int cp_alloc_count(size_t size) {
  return __builtin_expect((cp_alloc_countdown -= (int64_t)size) < 0, 0);
}

/* Hot path, async-signal-safe: whether p may be in the live table (then
 * call cp_alloc_on_free before freeing it). One load from a 64 KiB filter. */
static inline __attribute__((always_inline)) int
cp_alloc_may_track(const void *p) {
  return cp_heap_may_track((uintptr_t)p);
}

/* The countdown a thread restarts with while sampling is off: the bytes
 * until it asks again. */
#define CP_ALLOC_OFF_GAP ((int64_t)4 << 20)

/* Async-signal-safe, bounded, no locks: the countdown ran out at an
 * allocation of `size` bytes that returned p (NULL: it failed); caller_ra is
 * the return address into the application. With sampling off, restarts the
 * countdown at CP_ALLOC_OFF_GAP; else starts the next gap and records the
 * allocation, unless the thread is inside the profiler (thread_state.h).
 * Keeps errno. */
void cp_alloc_on_alloc(void *p, size_t size, uint64_t caller_ra);

/* Async-signal-safe: p, which cp_alloc_may_track said may be tracked, is
 * about to be freed (after the free, another thread could be handed the
 * same address). */
void cp_alloc_on_free(void *p);

#endif
