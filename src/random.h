/* The profiler's one source of random numbers: a per-thread xorshift64*
 * generator, seeded on first use from the clock, the thread id and the
 * address of its state. Every sampling decision draws from it (the
 * exponential gaps of the allocation and lock samplers, the wall sampler's
 * draw of threads, the CPU sampler's dithered intervals and first expiries,
 * the bindings' allocation samplers). Not for secrets: ids and keys come
 * from getrandom. */
#ifndef CP_RANDOM_H
#define CP_RANDOM_H

#include <math.h>
#include <stdint.h>

#include "common.h"

/* The calling thread's state; 0 until seeded. */
extern CP_TLS uint64_t cp_random_state;

/* Seeds the calling thread's state (cold: once per thread). */
uint64_t cp_random_seed(void);

/* Async-signal-safe, lock-free, bounded (TLS arithmetic only): 64 random
 * bits. A signal handler that draws while the thread it interrupted was
 * drawing may repeat that one value; nothing breaks. */
static inline uint64_t cp_random_u64(void) {
  uint64_t x = cp_random_state;
  if (__builtin_expect(x == 0, 0))
    x = cp_random_seed();
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  cp_random_state = x;
  return x * 0x2545f4914f6cdd1dull;
}

/* Async-signal-safe: uniform in (0, 1], on a grid of 2^-53. */
static inline double cp_random_unit(void) {
  return (double)((cp_random_u64() >> 11) + 1) * 0x1.0p-53;
}

/* Async-signal-safe: uniform in [0, n) for n > 0 (modulo: the bias is
 * n / 2^64, nothing at the sizes drawn here). */
static inline uint64_t cp_random_below(uint64_t n) {
  return cp_random_u64() % n;
}

/* Async-signal-safe: exponential with mean `mean`, the distance to the
 * next point of a Poisson process (of bytes allocated, of time waited). */
static inline double cp_random_exp(double mean) {
  return -log(cp_random_unit()) * mean;
}

/* Async-signal-safe: x rounded up or down at random so that the expected
 * result is x; a weight of 1.58 must not become 2 every time. */
static inline int64_t cp_random_round(double x) {
  double whole = floor(x);
  return (int64_t)whole + (cp_random_unit() <= x - whole ? 1 : 0);
}

/* Forgets the calling thread's state: the next draw seeds it again. In the
 * child of fork, so that it does not repeat the parent's draws. */
static inline void cp_random_reseed(void) { cp_random_state = 0; }

#endif
