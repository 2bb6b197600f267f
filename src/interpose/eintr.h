/* Telling an EINTR of the profiler's from one of the application's, for the
 * hooks of calls that a sampling signal may cut short (waits.c,
 * socket_calls.c; docs/signals.md, "Blocking calls and EINTR"): each hook
 * takes the thread's counts before its call and, when the call fails with
 * EINTR, asks whether one of our signals found the thread at a system call
 * since and no handler of the application's ran. Async-signal-safe: TLS
 * reads. */
#ifndef CP_INTERPOSE_EINTR_H
#define CP_INTERPOSE_EINTR_H

#include "thread_state.h"

/* The thread's counts of our signals at a system call and of the
 * application's handlers, taken before each call. */
typedef struct cp_signals_seen {
  unsigned own, app;
} cp_signals_seen;

static inline cp_signals_seen cp_signals_seen_now(void) {
  return (cp_signals_seen){cp_thread.own_signals, cp_thread.app_signals};
}

/* Whether the last EINTR came from one of the profiler's signals: the
 * sampling handlers count them in the thread's state, and no handler of the
 * application's ran since the call began (one did: the EINTR is its, even
 * when ours came too). */
static inline int cp_eintr_is_ours(cp_signals_seen before) {
  return cp_thread.own_signals != before.own &&
         cp_thread.app_signals == before.app;
}

#endif
