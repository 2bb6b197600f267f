/* Native stack capture for signal handlers, with libunwind. */
#ifndef CP_UNWIND_H
#define CP_UNWIND_H

#include <stddef.h>
#include <stdint.h>

/* One-time setup (per-thread caches). Not signal-safe; call before sampling. */
void cp_unwind_init(void);

/* libunwind allocates a thread's caches on its first backtrace: do that first
 * backtrace here, outside any handler. Cheap after the first call. */
void cp_unwind_warm_up(void);

/* Captures the stack interrupted by a signal, leaf first: frames[0] is the
 * interrupted pc, the rest return addresses. `frames` must have room for
 * max_frames + CP_UNWIND_SLACK entries (the handler's own frames are captured
 * and then dropped). Sets *truncated when the stack was deeper than
 * max_frames. Returns the frame count (>= 1).
 * Async-signal-safe. */
#define CP_UNWIND_SLACK 16
size_t cp_unwind_signal(void *ucontext, uint64_t *frames, size_t max_frames,
                        int *truncated);

#endif
