/* The profiler's lifecycle as other parts of the library see it (exec.c). */
#ifndef CP_PROFILER_INTERNAL_H
#define CP_PROFILER_INTERNAL_H

/* Before exec on the calling thread: stops profiling (the last profile is
 * made, every timer is gone) and discards sampling signals still pending on
 * the thread. Returns 1 if it stopped the profiler, 0 if there was nothing
 * to do (not running, or a vfork child, which must not touch it). */
int cp_profiler_before_exec(void);

/* Before _exit or _Exit on the calling thread (interpose/exit_calls.c): the
 * last profile, as exit's atexit handler would write it, when the
 * profiler runs in this process and this thread is not, as far as can be
 * told, in a signal handler (samplers/signals.h,
 * cp_signals_maybe_in_handler): the stop takes locks and allocates. Once
 * per process. Returns 1 when the caller may look up the real _exit: this
 * is the process that started the profiler (not a vfork child, whose
 * dlsym could take its parent's locks) and the thread is not in a signal
 * handler (dlsym takes the loader's lock); else 0. caller_frame: the
 * hook's __builtin_frame_address(0). */
int cp_profiler_before_exit(const void *caller_frame);

/* exec returned (failed) after cp_profiler_before_exec returned 1:
 * profiling starts again with the same settings. */
void cp_profiler_exec_failed(void);

/* CONTPROF_FOLLOW_EXEC of the running (or last) configuration: whether an
 * exec'd program keeps the profiler in LD_PRELOAD. Default 1. Reads one
 * variable: safe in a vfork child. */
int cp_profiler_follow_exec(void);

/* An application thread ends (pthread_exit, or its start routine returned
 * or it was cancelled) and the hooks count no other: if every other thread
 * is the profiler's, the process is about to end with it (the C library
 * calls exit(0) when its last thread leaves), which it could not while the
 * profiler's threads ran. The profiler stops as at exit: the last profile
 * is written and its threads are gone. */
void cp_profiler_thread_leaving(void);

#endif
