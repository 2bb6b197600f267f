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

/* The most a fork waits for sections the application entered itself (its
 * own dl_iterate_phdr callbacks, which may wait for anything, even for the
 * forking thread), and for the profiler's (bounded work that waits for
 * nothing: the walker's table build took 16-34 ms with cold caches and six
 * processes building at once, and more than 100 ms under load, when a
 * PostgreSQL child forked by its postmaster hung). An application's section
 * is waited for 1 s: with 100 ms, test_fork's fork-loader workload, whose
 * thread lists the objects with a callback that sleeps 100 us per object,
 * had a child hang under a loaded CI machine. */
#define FORK_WAIT_NS 1000000000ull      /* 1 s */
#define FORK_WAIT_OWN_NS 10000000000ull /* 10 s */

/* Threads inside a guarded section (each counted once, at its outermost
 * entry): the application's own calls, and the profiler's (its threads,
 * and its handlers and hooks on the application's); and a fork in
 * progress: the futex word waiters sleep on, and the forking thread. */
static _Atomic int inside_app, inside_own;
static _Atomic int fork_pending;
static _Atomic pid_t fork_tid;
static CP_TLS int depth;            /* this thread's nesting */
static CP_TLS _Atomic int *counter; /* where its outermost entry counts */

/* Whether the calling thread runs the profiler's code: one of its threads,
 * or one of its handlers or hooks (their sections are bounded). */
static int profiler_code(void) {
  return cp_thread.internal | cp_thread.in_handler | cp_thread.in_hook |
         (int)cp_thread.work;
}

/* The thread counts as inside (depth > 0) only once it is counted: a
 * handler that interrupts it while it waits for a fork to end must not take
 * itself for nested in a section and enter the loader during the fork.
 * depth is set before counter: a handler between the two is nested in a
 * counted section and leaves counter alone. */
int cp_fork_guard_enter(void) {
  if (depth) {
    depth++;
    return 1;
  }
  _Atomic int *c = profiler_code() ? &inside_own : &inside_app;
  for (;;) {
    atomic_fetch_add(c, 1);
    if (!atomic_load(&fork_pending) || atomic_load(&fork_tid) == cp_gettid()) {
      depth = 1;
      atomic_signal_fence(memory_order_seq_cst);
      counter = c;
      return 1;
    }
    atomic_fetch_sub(c, 1);
    if (cp_thread.in_handler)
      return 0;
    struct timespec ms = {0, 1000000};
    while (atomic_load(&fork_pending))
      syscall(SYS_futex, &fork_pending, FUTEX_WAIT_PRIVATE, 1, &ms, NULL, 0);
  }
}

/* counter is read before depth drops: a handler that runs once it is 0
 * enters a section of its own, and may point counter elsewhere. */
void cp_fork_guard_exit(void) {
  _Atomic int *c = counter;
  atomic_signal_fence(memory_order_seq_cst);
  if (--depth == 0)
    atomic_fetch_sub(c, 1);
}

void cp_fork_guard_prepare(void) {
  atomic_store(&fork_tid, cp_gettid());
  atomic_store(&fork_pending, 1);
  /* The forking thread itself may be inside one (a fork from a callback of
   * dl_iterate_phdr, or from an application's signal handler that
   * interrupted one of our hooks): that one stays held, as without us. */
  int mine_app = depth && counter == &inside_app;
  int mine_own = depth && counter == &inside_own;
  uint64_t start = cp_monotonic_ns(), now = start;
  struct timespec pause = {0, 50000};
  for (;;) {
    int app = atomic_load(&inside_app) > mine_app;
    int own = atomic_load(&inside_own) > mine_own;
    if (app && now - start >= FORK_WAIT_NS)
      app = 0; /* the application's own: as without us */
    if (!app && !own)
      return;
    if (own && now - start >= FORK_WAIT_OWN_NS) {
      cp_warn("a fork waited %llu s for the profiler to leave the loader's "
              "code, and went ahead: the child may hang at its first "
              "unwind",
              (unsigned long long)(FORK_WAIT_OWN_NS / 1000000000ull));
      return;
    }
    syscall(SYS_clock_nanosleep, CLOCK_MONOTONIC, 0, &pause, NULL);
    now = cp_monotonic_ns();
  }
}

void cp_fork_guard_parent(void) {
  atomic_store(&fork_pending, 0);
  atomic_store(&fork_tid, 0);
  syscall(SYS_futex, &fork_pending, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

void cp_fork_guard_child(void) {
  atomic_store(&inside_app, depth && counter == &inside_app);
  atomic_store(&inside_own, depth && counter == &inside_own);
  atomic_store(&fork_pending, 0);
  atomic_store(&fork_tid, 0);
}
