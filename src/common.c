/* Shared helpers: the `contprof:` logger, clocks and cached thread ids. */
#include "common.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "stats.h"
#include "thread_state.h"

static volatile int log_level = CP_LOG_WARN;
static CP_TLS pid_t cached_tid;

/* thread_state.h: the one per-thread state. */
CP_TLS cp_thread_state cp_thread;

void cp_log_set_level(cp_log_level level) { log_level = level; }
cp_log_level cp_log_get_level(void) { return (cp_log_level)log_level; }

void cp_log(cp_log_level level, const char *fmt, ...) {
  if ((int)level > log_level)
    return;
  int saved_errno = errno;
  char line[1024];
  int n = snprintf(line, sizeof line, "contprof: ");
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
  va_end(ap);
  size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
  if (len > sizeof line - 2)
    len = sizeof line - 2;
  line[len++] = '\n';
  /* One write so that lines of several threads never interleave. */
  ssize_t w = write(STDERR_FILENO, line, len);
  (void)w;
  errno = saved_errno;
}

uint64_t cp_realtime_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t cp_monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t cp_clock_ns(clockid_t clock) {
  struct timespec ts;
  if (clock_gettime(clock, &ts) != 0)
    return 0;
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Async-signal-safe: a TLS load, else one raw syscall. */
pid_t cp_gettid(void) {
  pid_t tid = cached_tid;
  if (tid == 0) {
    tid = (pid_t)syscall(SYS_gettid);
    cached_tid = tid;
  }
  return tid;
}

void cp_gettid_reset(void) { cached_tid = 0; }

void cp_sleep_ns(uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000ull),
                        (long)(ns % 1000000000ull)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

char *cp_strdup(const char *s) { return strdup(s ? s : ""); }

void *cp_grow_array(void *v, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap)
    return v;
  size_t cap2 = *cap ? *cap : 64;
  while (cap2 < need) {
    if (cap2 > SIZE_MAX / 2)
      return NULL;
    cap2 *= 2;
  }
  if (elem && cap2 > SIZE_MAX / elem)
    return NULL;
  void *p = realloc(v, cap2 * elem);
  if (p)
    *cap = cap2;
  return p;
}

/* The thread's function between cp_stats_thread_begin and _end, so that its
 * CPU time is counted as the profiler's. */
typedef struct internal_start {
  void *(*fn)(void *);
  void *arg;
} internal_start;

static void (*_Atomic internal_thread_init)(void);

void cp_set_internal_thread_init(void (*init)(void)) {
  atomic_store(&internal_thread_init, init);
}

static void *internal_thread_main(void *p) {
  internal_start start = *(internal_start *)p;
  free(p);
  cp_stats_thread_begin();
  void (*init)(void) = atomic_load(&internal_thread_init);
  if (init)
    init();
  void *result = start.fn(start.arg);
  cp_stats_thread_end();
  return result;
}

int cp_start_internal_thread(pthread_t *thread, void *(*fn)(void *), void *arg,
                             const char *name) {
  internal_start *start = malloc(sizeof *start);
  if (!start)
    return ENOMEM;
  start->fn = fn;
  start->arg = arg;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  int rc = pthread_create(thread, NULL, internal_thread_main, start);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0)
    free(start);
  if (rc == 0)
    pthread_setname_np(*thread, name);
  return rc;
}
