/* fork and the loader's and libunwind's locks (see fork_guard.h). */
#include "fork_guard.h"

#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "thread_state.h"

#define FORK_WAIT_NS 100000000ull /* the most a fork waits: 100 ms */

/* Threads inside a guarded section (each counted once, at its outermost
 * entry), and a fork in progress: the futex word waiters sleep on, and the
 * forking thread. */
static _Atomic int inside;
static _Atomic int fork_pending;
static _Atomic pid_t fork_tid;
static CP_TLS int depth; /* this thread's nesting */

int cp_fork_guard_enter(void) {
  if (depth++)
    return 1;
  for (;;) {
    atomic_fetch_add(&inside, 1);
    if (!atomic_load(&fork_pending) || atomic_load(&fork_tid) == cp_gettid())
      return 1;
    atomic_fetch_sub(&inside, 1);
    if (cp_thread.in_handler) {
      depth--;
      return 0;
    }
    struct timespec ms = {0, 1000000};
    while (atomic_load(&fork_pending))
      syscall(SYS_futex, &fork_pending, FUTEX_WAIT_PRIVATE, 1, &ms, NULL, 0);
  }
}

void cp_fork_guard_exit(void) {
  if (--depth == 0)
    atomic_fetch_sub(&inside, 1);
}

void cp_fork_guard_prepare(void) {
  atomic_store(&fork_tid, cp_gettid());
  atomic_store(&fork_pending, 1);
  /* The forking thread itself may be inside one (a fork from a callback of
   * dl_iterate_phdr): that one stays held, as without us. */
  int mine = depth ? 1 : 0;
  uint64_t deadline = cp_monotonic_ns() + FORK_WAIT_NS;
  struct timespec pause = {0, 50000};
  while (atomic_load(&inside) > mine && cp_monotonic_ns() < deadline)
    syscall(SYS_clock_nanosleep, CLOCK_MONOTONIC, 0, &pause, NULL);
}

void cp_fork_guard_parent(void) {
  atomic_store(&fork_pending, 0);
  atomic_store(&fork_tid, 0);
  syscall(SYS_futex, &fork_pending, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

void cp_fork_guard_child(void) {
  atomic_store(&inside, depth ? 1 : 0);
  atomic_store(&fork_pending, 0);
  atomic_store(&fork_tid, 0);
}
