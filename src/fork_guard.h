/* fork and the locks a thread holds while it runs the loader's or
 * libunwind's code (docs/signals.md, "fork and the loader's lock").
 *
 * A thread inside dl_iterate_phdr holds the loader's lock, and one inside
 * libunwind may hold its cache's lock. fork copies a held lock into a child
 * where the holder does not exist, and the child's first dl_iterate_phdr or
 * unwind then waits for it forever: a PostgreSQL backend, forked while the
 * postmaster's aggregator thread built its unwinding table, hung so.
 * glibc's fork takes neither lock. So every such section is entered through
 * cp_fork_guard_enter, and the fork's prepare handler waits until no thread
 * is inside one (the profiler's own sections for up to 10 s, the
 * application's own calls for 1 s); until the fork is done a sampler's
 * handler or hook does without (a sample cut short) and any other caller
 * waits. The forking thread itself never waits: its atfork handlers, and
 * the application's, run in the middle. */
#ifndef CONTPROF_FORK_GUARD_H
#define CONTPROF_FORK_GUARD_H

/* Async-signal-safe, lock-free on a handler's path (atomics; a caller that
 * is not in a handler or hook may wait for a fork to end). Returns 1: the
 * caller may enter, and calls cp_fork_guard_exit after; 0: a fork is in
 * progress and the caller runs in a sampler's handler or hook (cp_thread's
 * in_handler): it must do without, and not call exit. Nests. */
int cp_fork_guard_enter(void);
void cp_fork_guard_exit(void);

/* The profiler's atfork handlers (profiler.c). */
void cp_fork_guard_prepare(void);
void cp_fork_guard_parent(void);
void cp_fork_guard_child(void);

#endif
