/* Small shared helpers: logging with the `contprof:` prefix, clocks, tids. */
#ifndef CP_COMMON_H
#define CP_COMMON_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

typedef enum cp_log_level {
  CP_LOG_ERROR = 0,
  CP_LOG_WARN = 1,
  CP_LOG_INFO = 2,
  CP_LOG_DEBUG = 3
} cp_log_level;

void cp_log_set_level(cp_log_level level);
cp_log_level cp_log_get_level(void);
/* One line "contprof: ..." on stderr, written with a single write(2). Not
 * async-signal-safe. Never pass secrets. */
void cp_log(cp_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* How many warnings and errors cp_log was asked for since the start, shown
 * or not (contprof run checks its options with it). */
unsigned cp_log_complaints(void);
#define cp_error(...) cp_log(CP_LOG_ERROR, __VA_ARGS__)
#define cp_warn(...) cp_log(CP_LOG_WARN, __VA_ARGS__)
#define cp_info(...) cp_log(CP_LOG_INFO, __VA_ARGS__)
#define cp_debug(...) cp_log(CP_LOG_DEBUG, __VA_ARGS__)

/* Clocks, in nanoseconds. Async-signal-safe. */
uint64_t cp_realtime_ns(void);
uint64_t cp_monotonic_ns(void);
/* Any clock (a thread's or the process's CPU clock); 0 if it cannot be read.
 * Async-signal-safe. */
uint64_t cp_clock_ns(clockid_t clock);
/* Seconds since the epoch as a UTC calendar date and time, without the C
 * library's time-zone state (gmtime_r reads /etc/localtime at its first call
 * in a process: in every child of a forking server that writes a profile).
 * Async-signal-safe. */
typedef struct cp_utc {
  int year, month, day, hour, minute, second; /* month and day from 1 */
} cp_utc;
void cp_utc_of(int64_t secs, cp_utc *out);
/* The calling thread's kernel id. Async-signal-safe (cached per thread). */
pid_t cp_gettid(void);
/* Forget the cached tid (the child of fork calls it). */
void cp_gettid_reset(void);

/* Sleeps ns nanoseconds (restarting after signals). */
void cp_sleep_ns(uint64_t ns);

/* What every thread cp_start_internal_thread starts runs first (init) and
 * last (fini): the core registers the samplers' mark of a profiler's own
 * thread (never sampled, never announced) and its removal, so that the
 * layers that start threads (aggregator, scheduler, HTTP sinks) need not
 * include a samplers header. NULL: none. */
void cp_set_internal_thread_init(void (*init)(void), void (*fini)(void));

/* Told of every such thread between its creation and the end of its init:
 * starting(1) before pthread_create returns whether the thread is counted
 * (then starting(-1) follows once, after its init ran, or at once if it was
 * not created). The credential follower waits for counted threads to
 * register (samplers/creds.h). NULL: none. */
void cp_set_internal_thread_starting(int (*starting)(int delta));

/* Starts one of the profiler's own threads, named `name` (at most 15 chars),
 * with every signal blocked so that no sampling signal lands on it. Returns
 * 0 or pthread_create's error. */
int cp_start_internal_thread(pthread_t *thread, void *(*fn)(void *), void *arg,
                             const char *name);

/* The same for a thread that is always joined, with cp_join_thread: it runs
 * on a stack the profiler mapped (reused by the next such thread), not one
 * from glibc's cache (common.c says why). */
int cp_start_joined_thread(pthread_t *thread, void *(*fn)(void *), void *arg,
                           const char *name);
void cp_join_thread(pthread_t thread);

/* Whether routine is what cp_start_internal_thread and
 * cp_start_joined_thread start threads with (the pthread_create hook does
 * not announce those to the samplers). */
int cp_is_internal_thread_start(void *(*routine)(void *));

/* Around fork (the atfork handlers): the profiler's stacks are not copied
 * into the child (MADV_WIPEONFORK), but for the one fork is called on; in
 * the child the parent's threads are gone, their stacks free. */
void cp_own_stacks_before_fork(void);
void cp_own_stacks_after_fork_parent(void);
void cp_own_stacks_after_fork_child(void);

/* strdup that treats NULL as "". Returns NULL only when out of memory. */
char *cp_strdup(const char *s);

/* Returns array v (of *cap elements of elem bytes) with room for need
 * elements: v itself when it has room, else v reallocated to twice its
 * capacity (64 at first) or more, *cap updated. NULL, with v and *cap
 * untouched, when out of memory or when the size would overflow. */
void *cp_grow_array(void *v, size_t *cap, size_t need, size_t elem);

#define CP_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define CP_TLS __thread __attribute__((tls_model("initial-exec")))
#define CP_UNUSED __attribute__((unused))

#endif
