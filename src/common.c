/* Shared helpers: the `contprof:` logger, clocks and cached thread ids. */
#include "common.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
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

static _Atomic unsigned complaints;
unsigned cp_log_complaints(void) { return atomic_load(&complaints); }

void cp_log(cp_log_level level, const char *fmt, ...) {
  if (level <= CP_LOG_WARN)
    atomic_fetch_add(&complaints, 1);
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

void cp_utc_of(int64_t secs, cp_utc *out) {
  int64_t days = secs / 86400, rem = secs % 86400;
  if (rem < 0) {
    rem += 86400;
    days--;
  }
  out->hour = (int)(rem / 3600);
  out->minute = (int)(rem % 3600 / 60);
  out->second = (int)(rem % 60);
  /* The proleptic Gregorian calendar in 400-year eras of 146,097 days, each
   * year counted from March so that the leap day ends it (H. Hinnant's
   * civil_from_days). */
  days += 719468;
  int64_t era = (days >= 0 ? days : days - 146096) / 146097;
  int64_t doe = days - era * 146097;
  int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  int64_t mp = (5 * doy + 2) / 153;
  out->day = (int)(doy - (153 * mp + 2) / 5 + 1);
  out->month = (int)(mp < 10 ? mp + 3 : mp - 9);
  out->year = (int)(yoe + era * 400 + (out->month <= 2));
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
  char name[16];
  int counted; /* by internal_thread_starting */
} internal_start;

static void (*_Atomic internal_thread_init)(void);
static void (*_Atomic internal_thread_fini)(void);
static int (*_Atomic internal_thread_starting)(int delta);

void cp_set_internal_thread_starting(int (*starting)(int delta)) {
  atomic_store(&internal_thread_starting, starting);
}

static void thread_started(const internal_start *start) {
  int (*starting)(int) = atomic_load(&internal_thread_starting);
  if (start->counted && starting)
    starting(-1);
}

void cp_set_internal_thread_init(void (*init)(void), void (*fini)(void)) {
  atomic_store(&internal_thread_init, init);
  atomic_store(&internal_thread_fini, fini);
}

static void *internal_thread_main(void *p) {
  internal_start start = *(internal_start *)p;
  free(p);
  /* Named by itself: one prctl, where pthread_setname_np from the creator
   * opens and writes /proc/self/task/TID/comm. */
  prctl(PR_SET_NAME, start.name, 0, 0, 0);
  cp_stats_thread_begin();
  void (*init)(void) = atomic_load(&internal_thread_init);
  if (init)
    init();
  thread_started(&start);
  void *result = start.fn(start.arg);
  void (*fini)(void) = atomic_load(&internal_thread_fini);
  if (fini)
    fini();
  cp_stats_thread_end();
  return result;
}

int cp_is_internal_thread_start(void *(*routine)(void *)) {
  return routine == internal_thread_main;
}

/* ---- the profiler's own stacks -------------------------------------------
 *
 * A thread that is always joined (the drain thread, the wall timer, the
 * scheduler) runs on a stack mapped here once and reused by the next thread
 * that takes it, rather than one from glibc's cache. In the child of fork,
 * that cache holds the stacks of the parent's threads, and glibc 2.36 makes
 * a thread on a cached stack through a call (_dl_allocate_tls_init) that a
 * parent never makes, so every child of a forking server resolved that
 * symbol in the loader (a search of every loaded object) when its profiler
 * started again: in `perf record` of bench/fork_work, the most costly part
 * of the child's restart. A stack given with pthread_attr_setstack takes
 * the path a parent takes. */
#define OWN_STACKS 8
#define OWN_STACK_BYTES ((size_t)8 << 20) /* glibc's default; reserved only */

static struct {
  pthread_mutex_t lock;
  struct {
    unsigned char *base; /* guard page first; NULL until first mapped */
    pthread_t thread;
    int used;
  } slot[OWN_STACKS];
} own_stacks = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* A free slot, its stack mapped (the lowest page a guard); -1 when none. */
static int own_stack_take(void) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  pthread_mutex_lock(&own_stacks.lock);
  int found = -1;
  for (int i = 0; i < OWN_STACKS && found < 0; i++) {
    if (own_stacks.slot[i].used)
      continue;
    if (!own_stacks.slot[i].base) {
      void *m =
          mmap(NULL, OWN_STACK_BYTES, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
      if (m == MAP_FAILED)
        break;
      if (mprotect(m, page, PROT_NONE) != 0) {
        munmap(m, OWN_STACK_BYTES);
        break;
      }
      /* A child of fork gets it as fresh zero pages: its threads start
       * anew, and fork leaves the parent's pages writable, where otherwise
       * every fork made the next writes of this thread's stack copies
       * (a forking server's drain and wall timer threads, at each fork). */
      (void)madvise(m, OWN_STACK_BYTES, MADV_WIPEONFORK);
      own_stacks.slot[i].base = m;
    }
    own_stacks.slot[i].used = 1;
    found = i;
  }
  pthread_mutex_unlock(&own_stacks.lock);
  return found;
}

static void own_stack_give_back(int i, const pthread_t *thread) {
  pthread_mutex_lock(&own_stacks.lock);
  if (thread)
    own_stacks.slot[i].thread = *thread;
  else
    own_stacks.slot[i].used = 0;
  pthread_mutex_unlock(&own_stacks.lock);
}

static int start_thread(pthread_t *thread, void *(*fn)(void *), void *arg,
                        const char *name, int own_stack) {
  internal_start *start = malloc(sizeof *start);
  if (!start)
    return ENOMEM;
  start->fn = fn;
  start->arg = arg;
  size_t len = strnlen(name, sizeof start->name - 1);
  memcpy(start->name, name, len); /* not snprintf: see make_uuid */
  start->name[len] = 0;
  pthread_attr_t attr;
  int slot = -1;
  if (own_stack && pthread_attr_init(&attr) == 0) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    slot = own_stack_take();
    if (slot >= 0 &&
        pthread_attr_setstack(&attr, own_stacks.slot[slot].base + page,
                              OWN_STACK_BYTES - page) != 0) {
      own_stack_give_back(slot, NULL);
      slot = -1;
    }
    if (slot < 0)
      pthread_attr_destroy(&attr);
  }
  int (*starting)(int) = atomic_load(&internal_thread_starting);
  start->counted = starting ? starting(1) : 0;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  int rc = pthread_create(thread, slot >= 0 ? &attr : NULL,
                          internal_thread_main, start);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (slot >= 0) {
    pthread_attr_destroy(&attr);
    own_stack_give_back(slot, rc == 0 ? thread : NULL);
  }
  if (rc != 0) {
    thread_started(start);
    free(start);
  }
  return rc;
}

int cp_start_internal_thread(pthread_t *thread, void *(*fn)(void *), void *arg,
                             const char *name) {
  return start_thread(thread, fn, arg, name, 0);
}

int cp_start_joined_thread(pthread_t *thread, void *(*fn)(void *), void *arg,
                           const char *name) {
  return start_thread(thread, fn, arg, name, 1);
}

void cp_join_thread(pthread_t thread) {
  pthread_join(thread, NULL);
  /* Joined: the thread is gone from its stack, which the next may take. */
  pthread_mutex_lock(&own_stacks.lock);
  for (int i = 0; i < OWN_STACKS; i++)
    if (own_stacks.slot[i].used &&
        pthread_equal(own_stacks.slot[i].thread, thread))
      own_stacks.slot[i].used = 0;
  pthread_mutex_unlock(&own_stacks.lock);
}

/* The slot whose stack the calling thread runs on, -1 when none. */
static int own_stack_of_caller(void) {
  uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
  for (int i = 0; i < OWN_STACKS; i++) {
    uintptr_t lo = (uintptr_t)own_stacks.slot[i].base;
    if (lo && sp >= lo && sp - lo < OWN_STACK_BYTES)
      return i;
  }
  return -1;
}

/* The stack fork is called on, when one of ours, is the child's too: it is
 * copied like any other across that fork. */
static int kept_on_fork = -1;

void cp_own_stacks_before_fork(void) {
  kept_on_fork = own_stack_of_caller();
  if (kept_on_fork >= 0)
    (void)madvise(own_stacks.slot[kept_on_fork].base, OWN_STACK_BYTES,
                  MADV_KEEPONFORK);
}

void cp_own_stacks_after_fork_parent(void) {
  if (kept_on_fork >= 0)
    (void)madvise(own_stacks.slot[kept_on_fork].base, OWN_STACK_BYTES,
                  MADV_WIPEONFORK);
  kept_on_fork = -1;
}

void cp_own_stacks_after_fork_child(void) {
  /* The parent's threads are gone: their stacks are free, except the one
   * this thread runs on, if fork was called on one of ours. */
  int mine = own_stack_of_caller();
  pthread_mutex_init(&own_stacks.lock, NULL);
  for (int i = 0; i < OWN_STACKS; i++)
    if (i != mine)
      own_stacks.slot[i].used = 0;
  cp_own_stacks_after_fork_parent(); /* wiped again at the child's forks */
}
