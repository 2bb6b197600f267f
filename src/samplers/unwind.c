/* Stack capture in signal handlers. The fast path is unw_backtrace from the
 * handler (libunwind's per-thread trace cache makes each step a table
 * lookup); the frames of the handler and of the kernel's signal trampoline
 * are then cut off at the interrupted pc. If the interrupted pc is not found
 * (the trace stopped at the trampoline), the slow path steps from the signal's
 * ucontext with unw_init_local2.
 *
 * A thread's first unw_backtrace builds its trace cache. With libunwind 1.6
 * (Debian 12) that takes mmap and libunwind's own signal-masked pool lock,
 * never malloc (checked by interposing malloc around a thread's first
 * backtrace), so it is safe in a handler once the process-wide first call
 * was made outside (cp_unwind_init). Warming every new thread up eagerly
 * instead cost 0.8 ms and 256 KiB of touched memory per thread created,
 * sampled or not, so threads are left to build the cache at their first
 * sample, and only busy threads build it (at their second CPU sample):
 * other samples of a thread without one (wall samples) are unwound by
 * stepping from the ucontext (slower per sample, no 256 KiB per idle
 * thread). */
#define UNW_LOCAL_ONLY
#include "unwind.h"

#include <libunwind.h>
#include <string.h>
#include <ucontext.h>

#include "common.h"

static CP_TLS int warmed_up;
static CP_TLS int busy_samples; /* samples that could have built the cache */
CP_TLS int cp_in_sampling_handler;

void cp_unwind_init(void) {
  unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
  cp_unwind_warm_up();
}

void cp_unwind_warm_up(void) {
  if (warmed_up)
    return;
  void *frames[8];
  unw_backtrace(frames, 8);
  warmed_up = 1;
}

/* Async-signal-safe. */
static size_t unwind_from_context(ucontext_t *uc, uint64_t *frames,
                                  size_t max_frames, int *truncated) {
  unw_cursor_t cursor;
  size_t n = 0;
  if (unw_init_local2(&cursor, (unw_context_t *)uc, UNW_INIT_SIGNAL_FRAME) !=
      0) {
    frames[0] = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
    return 1;
  }
  do {
    unw_word_t ip;
    if (unw_get_reg(&cursor, UNW_REG_IP, &ip) != 0 || ip == 0)
      break;
    if (n == max_frames) {
      *truncated = 1;
      break;
    }
    frames[n++] = ip;
  } while (unw_step(&cursor) > 0);
  if (n == 0)
    frames[n++] = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
  return n;
}

/* Async-signal-safe. */
size_t cp_unwind_signal(void *ucontext, uint64_t *frames, size_t max_frames,
                        int may_build_cache, int *truncated) {
  ucontext_t *uc = ucontext;
  uint64_t pc = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
  size_t capacity = max_frames + CP_UNWIND_SLACK;
  *truncated = 0;
  /* The cache is built at the second busy sample: a thread sampled once
   * (a short burst) may be idle for the rest of its life. */
  if (!warmed_up && (!may_build_cache || ++busy_samples < 2))
    return unwind_from_context(uc, frames, max_frames, truncated);
  warmed_up = 1;
  int got = unw_backtrace((void **)frames, (int)capacity);
  size_t skip = 0;
  while ((int)skip < got && frames[skip] != pc)
    skip++;
  if ((int)skip >= got || skip >= CP_UNWIND_SLACK)
    return unwind_from_context(uc, frames, max_frames, truncated);
  size_t n = (size_t)got - skip;
  if (n > max_frames || (size_t)got == capacity) {
    *truncated = 1;
    if (n > max_frames)
      n = max_frames;
  }
  memmove(frames, frames + skip, n * sizeof *frames);
  return n;
}

/* Bounded and lock-free once the thread is warmed up (see unwind.h). */
size_t cp_unwind_here(uint64_t *frames, size_t max_frames, uint64_t caller_ra,
                      int *truncated) {
  size_t capacity = max_frames + CP_UNWIND_SLACK;
  *truncated = 0;
  cp_unwind_warm_up();
  /* A sampling signal arriving meanwhile must not unwind on top of this
   * unwind (libunwind's per-thread cache): its handler drops its sample. */
  cp_in_sampling_handler = 1;
  int got = unw_backtrace((void **)frames, (int)capacity);
  cp_in_sampling_handler = 0;
  size_t skip = 0;
  while ((int)skip < got && skip < CP_UNWIND_SLACK && frames[skip] != caller_ra)
    skip++;
  if ((int)skip >= got || skip >= CP_UNWIND_SLACK) {
    /* The hook's caller is not where the trace went: keep just the caller. */
    frames[0] = caller_ra - 1;
    return 1;
  }
  size_t n = (size_t)got - skip;
  if (n > max_frames || (size_t)got == capacity) {
    *truncated = 1;
    if (n > max_frames)
      n = max_frames;
  }
  memmove(frames, frames + skip, n * sizeof *frames);
  frames[0] = caller_ra - 1;
  return n;
}
