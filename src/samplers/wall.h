/* The wall sampler's observers for the wait hooks (interpose/waits.c): where
 * a thread blocks, so that a tick that finds it blocked at the same point as
 * its last stack taken there records that stack without waking it
 * (wall.c, "Parked threads"; docs/signals.md). */
#ifndef CP_SAMPLERS_WALL_H
#define CP_SAMPLERS_WALL_H

#include <stdint.h>

#include "thread_state.h"

/* Out of line: publishes into the calling thread's slot that it blocks in
 * the wait hook whose frame address is cfa (0: in none). Returns whether
 * the slot was the thread's to publish into. */
int cp_wall_publish_park(uintptr_t cfa);

/* Hot path, async-signal-safe, no system call, errno kept: the calling
 * thread is about to block in a wait hook whose canonical frame address
 * (__builtin_dwarf_cfa) is cfa, and stays blocked there until
 * cp_wall_unpark. Returns whether anything was published (then call
 * cp_wall_unpark): only on a thread the wall sampler has signalled. */
static inline int cp_wall_park(uintptr_t cfa) {
  return cp_thread.wall_slot ? cp_wall_publish_park(cfa) : 0;
}

/* Hot path, async-signal-safe: the wait hook returns. (A hook nested in a
 * signal handler that interrupted another unparks the outer one too: the
 * thread then counts as running until its next wait, which only costs a
 * signal.) */
static inline void cp_wall_unpark(void) { cp_wall_publish_park(0); }

#endif
