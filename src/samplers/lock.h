/* What the lock hooks (interpose/locks.c) call in the lock sampler (lock.c):
 * the observers of a wait on a busy lock. The sampler knows nothing of
 * hooking. */
#ifndef CP_LOCK_H
#define CP_LOCK_H

#include <stdint.h>

/* Hot path, on a lock that was busy, before waiting for it: the monotonic
 * time the wait starts, or 0 when this wait is not to be timed (profiling
 * off, the profiler's own thread or work, a lock taken while recording, or
 * one the unwinder takes). caller_ra: the return address into the code that
 * locks. Async-signal-safe, no locks. */
uint64_t cp_lock_wait_begin(void *caller_ra);

/* After the C library's call returned rc, for a wait cp_lock_wait_begin
 * timed from start_ns: samples the wait (waits that ended with the lock,
 * EOWNERDEAD or ETIMEDOUT count; immediate errors do not). Bounded, no
 * allocation once the thread's unwinder is warm, no blocking locks; keeps
 * errno. */
void cp_lock_on_wait(uint64_t start_ns, int rc, void *caller_ra);

#endif
