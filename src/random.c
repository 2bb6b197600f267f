/* The per-thread random state of random.h and its seeding. */
#include "random.h"

CP_TLS uint64_t cp_random_state;

/* Async-signal-safe (a clock read and the cached tid). splitmix64 spreads
 * the seed's few changing bits over the whole state; never 0. */
uint64_t cp_random_seed(void) {
  uint64_t seed = cp_monotonic_ns() ^ ((uint64_t)cp_gettid() << 32) ^
                  (uint64_t)(uintptr_t)&cp_random_state;
  seed += 0x9e3779b97f4a7c15ull;
  seed = (seed ^ (seed >> 30)) * 0xbf58476d1ce4e5b9ull;
  seed = (seed ^ (seed >> 27)) * 0x94d049bb133111ebull;
  seed ^= seed >> 31;
  cp_random_state = seed ? seed : 0x9e3779b97f4a7c15ull;
  return cp_random_state;
}
