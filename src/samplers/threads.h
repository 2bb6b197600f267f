/* The registry of application threads: those that exist at start (from
 * /proc/self/task), those created later (the pthread_create hook in
 * interpose/thread_calls.c calls the observers below, and a rescan finds
 * threads made by other means), and their ends. It announces them to the
 * running samplers. The profiler's own threads are never announced. */
#ifndef CP_THREADS_H
#define CP_THREADS_H

#include <signal.h>
#include <stddef.h>
#include <sys/types.h>

#include "sampler.h"

/* Starts announcing threads to `samplers` (an array the caller keeps alive
 * until cp_threads_stop), beginning with every thread that exists now. */
int cp_threads_start(const cp_sampler *const *samplers, size_t nsamplers);

/* The same in the child of fork, from its atfork handler, where the calling
 * thread is the only one: announces it without listing /proc/self/task (a
 * directory read, a dozen system calls, in every child of a forking
 * server). */
int cp_threads_start_forked(const cp_sampler *const *samplers,
                            size_t nsamplers);

/* Rescans /proc/self/task: announces new threads and the end of vanished
 * ones. Runs on the profiler's thread about once a second. */
void cp_threads_rescan(void);

/* Whether every thread of the process but the caller is one of the
 * profiler's own (a directory read of /proc/self/task): the caller is the
 * application's last. 0 when that cannot be told. */
int cp_threads_others_are_ours(void);

/* Announces the end of every known thread and stops announcing. */
void cp_threads_stop(void);

/* In the child of fork: forget the parent's threads, stop announcing. */
void cp_threads_after_fork_child(void);

/* Marks the calling thread as the profiler's own: never sampled. */
void cp_threads_exclude_self(void);

/* The calling thread, one of the profiler's own, ends: its thread id is no
 * longer excluded (the kernel may give it to an application thread; the
 * list holds MAX_EXCLUDED ids, and with every start's threads kept it
 * filled after a few restarts, after which the profiler's new threads were
 * announced as the application's). */
void cp_threads_forget_excluded_self(void);

/* Adds a signal that a sampling handler uses (each sampler adds its own);
 * the pthread_create hook blocks them while the new thread is made (an
 * unwinder interrupting the loader there could deadlock) and the new thread
 * starts with them blocked until it is registered. */
void cp_threads_set_sampling_signal(int sig);

/* The pthread_create hook's observers. cp_threads_sampling_signals adds the
 * signals a new thread must start with blocked (see above) to set;
 * cp_threads_on_start runs on the new thread before the application's start
 * routine (registers it), cp_threads_on_exit when that routine returns, the
 * thread calls pthread_exit or is cancelled (unregisters it). Not
 * signal-safe: they take the registry's lock. */
void cp_threads_sampling_signals(sigset_t *set);
void cp_threads_on_start(void);
void cp_threads_on_exit(void);

#endif
