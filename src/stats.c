/* The profiler's own costs (see stats.h and docs/overhead.md). Thread CPU
 * comes from each of our threads' CPU clocks, read at the end of a period;
 * a thread that ends first adds its final CPU time to `retired`. Handler and
 * hook times are added, lock-free, by the samplers. */
#include "stats.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "random.h"
#include "thread_state.h"

/* Our threads: the aggregator, the uploader, one per HTTP sink, the wall
 * timer, and a binding's sampler threads. More are not counted (said once). */
#define MAX_OWN_THREADS 64

static struct {
  pthread_mutex_t lock;
  struct {
    pthread_t thread;
    clockid_t clock;
    int used;
    int kind; /* the one sampler it works for, or -1: all of them */
  } threads[MAX_OWN_THREADS];
  uint64_t retired_ns; /* CPU of our threads that have ended */
  uint64_t retired_kind_ns[CONTPROF_KIND_COUNT]; /* the part of each kind */
  uint64_t last_threads_ns, last_process_ns;
  uint64_t last_hook_ns[CONTPROF_KIND_COUNT];
  uint64_t last_kind_threads_ns[CONTPROF_KIND_COUNT];
  uint64_t last_drain_ns;
  /* The kernel's bill (cp_stats_count_signals): what is billed so far per
   * kind, the signals it covers, and the last period's reading. */
  uint64_t billed_ns[CONTPROF_KIND_COUNT];
  uint64_t billed_signals[CONTPROF_KIND_COUNT][CP_SIGNAL_PATHS];
  uint64_t last_billed_ns[CONTPROF_KIND_COUNT];
  int warned_full;
  cp_period_stats last, total; /* published periods */
} st = {.lock = PTHREAD_MUTEX_INITIALIZER};

static _Atomic uint64_t hook_ns[CONTPROF_KIND_COUNT];
static uint64_t threads_cpu_locked(uint64_t kind_ns[CONTPROF_KIND_COUNT]);
static _Atomic uint64_t fixed_memory[CP_STATS_MEM_COUNT];
static _Atomic uint64_t extra_samples[CONTPROF_KIND_COUNT];
static _Atomic uint64_t drained_samples[CONTPROF_KIND_COUNT];
static _Atomic uint64_t thinned[CONTPROF_KIND_COUNT]; /* this period */
static _Atomic unsigned slowdown[CONTPROF_KIND_COUNT];
static _Atomic unsigned slowdown_max[CONTPROF_KIND_COUNT]; /* this period */
static _Atomic unsigned cpu_clocks[2];                     /* perf, posix */
static _Atomic unsigned cpu_clocks_moved;                  /* this period */

static _Atomic uint64_t drain_ns;
static _Atomic uint64_t signals[CONTPROF_KIND_COUNT][CP_SIGNAL_PATHS];
static _Atomic uint64_t signal_cost_ns[CP_SIGNAL_PATHS];

void cp_stats_count_signals(contprof_sample_kind kind, cp_signal_path path,
                            uint64_t n) {
  if ((unsigned)kind < CONTPROF_KIND_COUNT && (unsigned)path < CP_SIGNAL_PATHS)
    atomic_fetch_add_explicit(&signals[kind][path], n, memory_order_relaxed);
}

/* Caller holds st.lock. Bills the signals counted since the last call at
 * the costs measured (none before a path's cost is known). */
static void bill_locked(void) {
  for (int k = 0; k < CONTPROF_KIND_COUNT; k++)
    for (int p = 0; p < CP_SIGNAL_PATHS; p++) {
      uint64_t n = atomic_load_explicit(&signals[k][p], memory_order_relaxed);
      uint64_t cost =
          atomic_load_explicit(&signal_cost_ns[p], memory_order_relaxed);
      if (cost)
        st.billed_ns[k] += (n - st.billed_signals[k][p]) * cost;
      st.billed_signals[k][p] = n;
    }
}

void cp_stats_set_signal_cost(cp_signal_path path, uint64_t ns) {
  if ((unsigned)path >= CP_SIGNAL_PATHS)
    return;
  pthread_mutex_lock(&st.lock);
  bill_locked(); /* the signals so far at the cost before */
  atomic_store_explicit(&signal_cost_ns[path], ns, memory_order_relaxed);
  pthread_mutex_unlock(&st.lock);
}

void cp_stats_add_drain_ns(uint64_t ns) {
  atomic_fetch_add_explicit(&drain_ns, ns, memory_order_relaxed);
}

void cp_stats_count_samples(contprof_sample_kind kind, uint64_t n) {
  if ((unsigned)kind < CONTPROF_KIND_COUNT)
    atomic_fetch_add_explicit(&drained_samples[kind], n, memory_order_relaxed);
}

uint64_t cp_stats_samples_counted(contprof_sample_kind kind) {
  if ((unsigned)kind >= CONTPROF_KIND_COUNT)
    return 0;
  return atomic_load_explicit(&drained_samples[kind], memory_order_relaxed);
}

void cp_stats_set_cpu_clocks(unsigned perf, unsigned posix) {
  atomic_store_explicit(&cpu_clocks[0], perf, memory_order_relaxed);
  atomic_store_explicit(&cpu_clocks[1], posix, memory_order_relaxed);
}

void cp_stats_count_cpu_clock_moved(void) {
  atomic_fetch_add_explicit(&cpu_clocks_moved, 1, memory_order_relaxed);
}

void cp_stats_count_thinned(contprof_sample_kind kind) {
  if ((unsigned)kind < CONTPROF_KIND_COUNT)
    atomic_fetch_add_explicit(&thinned[kind], 1, memory_order_relaxed);
}

void cp_stats_set_slowdown(contprof_sample_kind kind, unsigned factor) {
  if ((unsigned)kind >= CONTPROF_KIND_COUNT)
    return;
  atomic_store_explicit(&slowdown[kind], factor, memory_order_relaxed);
  unsigned max =
      atomic_load_explicit(&slowdown_max[kind], memory_order_relaxed);
  while (factor > max && !atomic_compare_exchange_weak_explicit(
                             &slowdown_max[kind], &max, factor,
                             memory_order_relaxed, memory_order_relaxed)) {
  }
}

void cp_stats_totals_read(cp_stats_totals *out) {
  pthread_mutex_lock(&st.lock);
  out->threads_cpu_ns = threads_cpu_locked(out->kind_threads_cpu_ns);
  bill_locked();
  memcpy(out->kernel_ns, st.billed_ns, sizeof out->kernel_ns);
  pthread_mutex_unlock(&st.lock);
  out->process_cpu_ns = cp_clock_ns(CLOCK_PROCESS_CPUTIME_ID);
  out->drain_ns = atomic_load_explicit(&drain_ns, memory_order_relaxed);
  for (int k = 0; k < CONTPROF_KIND_COUNT; k++) {
    out->hook_ns[k] = atomic_load_explicit(&hook_ns[k], memory_order_relaxed);
    out->samples[k] =
        atomic_load_explicit(&drained_samples[k], memory_order_relaxed);
  }
}

void cp_stats_add_samples(contprof_sample_kind kind, uint64_t n) {
  if ((unsigned)kind < CONTPROF_KIND_COUNT)
    atomic_fetch_add_explicit(&extra_samples[kind], n, memory_order_relaxed);
}

void cp_stats_thread_begin(void) {
  clockid_t clock;
  if (pthread_getcpuclockid(pthread_self(), &clock) != 0)
    return;
  pthread_mutex_lock(&st.lock);
  size_t i = 0;
  while (i < MAX_OWN_THREADS && st.threads[i].used)
    i++;
  if (i < MAX_OWN_THREADS) {
    st.threads[i].thread = pthread_self();
    st.threads[i].clock = clock;
    st.threads[i].used = 1;
    st.threads[i].kind = -1;
  } else if (!st.warned_full) {
    st.warned_full = 1;
    cp_info("more than %d profiler threads: the CPU of the others is not "
            "counted in profiler_cpu_ns",
            MAX_OWN_THREADS);
  }
  pthread_mutex_unlock(&st.lock);
}

void cp_stats_thread_end(void) {
  pthread_t self = pthread_self();
  pthread_mutex_lock(&st.lock);
  for (size_t i = 0; i < MAX_OWN_THREADS; i++)
    if (st.threads[i].used && pthread_equal(st.threads[i].thread, self)) {
      uint64_t cpu = cp_clock_ns(CLOCK_THREAD_CPUTIME_ID);
      st.retired_ns += cpu;
      if (st.threads[i].kind >= 0)
        st.retired_kind_ns[st.threads[i].kind] += cpu;
      st.threads[i].used = 0;
      break;
    }
  pthread_mutex_unlock(&st.lock);
}

void cp_stats_thread_works_for(contprof_sample_kind kind) {
  pthread_t self = pthread_self();
  pthread_mutex_lock(&st.lock);
  for (size_t i = 0; i < MAX_OWN_THREADS; i++)
    if (st.threads[i].used && pthread_equal(st.threads[i].thread, self) &&
        (unsigned)kind < CONTPROF_KIND_COUNT)
      st.threads[i].kind = (int)kind;
  pthread_mutex_unlock(&st.lock);
}

/* Caller holds st.lock. The CPU of the threads that work for kind alone. */
/* Async-signal-safe: one relaxed atomic add. */
void cp_stats_add_hook_ns(contprof_sample_kind kind, uint64_t ns) {
  if ((unsigned)kind < CONTPROF_KIND_COUNT)
    atomic_fetch_add_explicit(&hook_ns[kind], ns, memory_order_relaxed);
}

/* Which calls are timed, per kind on each thread. The calls are cut into
 * windows of CP_STATS_HOOK_EVERY calls, or CP_STATS_HOOK_RARE where the
 * kind's calls are rare on the thread (below); one call of each window,
 * drawn uniformly, is timed and counts for the window's length. Every call
 * is so timed with probability one over the length of its window, and the
 * sum is unbiased however the lengths change, since each is chosen before
 * its window starts; a thread with fewer calls than a window still counts
 * (a fixed phase left such threads out).
 *
 * Where calls are rare (a PostgreSQL backend's allocation samples: one per
 * 1-2 ms of its CPU), one in 64 left a process's figure on a dozen calls,
 * and one slow call (a page fault) moved it by half. A window is
 * CP_STATS_HOOK_RARE calls when the time between its last two timed calls
 * (on the clock the hooks are timed on: wall time where it is the vDSO's,
 * else the thread's CPU) was at least HOOK_RARE_NS per call: its timing then
 * costs at most two clock reads per 4 ms.
 *
 * hook_left: calls until the next timed one (0: no window yet); hook_rest:
 * calls after it to the end of its window; hook_len: its window's length;
 * hook_span: calls from the last timed one to the next; hook_weight: what
 * the timed call in progress counts for; hook_last_ns: the thread's CPU
 * clock at the last timed call. */
#define HOOK_RARE_NS 500000u
static CP_TLS uint32_t hook_left[CONTPROF_KIND_COUNT];
static CP_TLS uint32_t hook_rest[CONTPROF_KIND_COUNT];
static CP_TLS uint32_t hook_len[CONTPROF_KIND_COUNT];
static CP_TLS uint32_t hook_span[CONTPROF_KIND_COUNT];
static CP_TLS uint32_t hook_weight[CONTPROF_KIND_COUNT];
static CP_TLS uint64_t hook_last_ns[CONTPROF_KIND_COUNT];
static CP_TLS int hook_clock_of[CONTPROF_KIND_COUNT]; /* hook_last_ns's */
static CP_TLS int
    hook_cpu[CONTPROF_KIND_COUNT]; /* where the timed call began */
static CP_TLS uint64_t hook_mean[CONTPROF_KIND_COUNT];    /* see recent_ns */
static CP_TLS uint64_t hook_wake_ns[CONTPROF_KIND_COUNT]; /* cp_thread's */

/* The clock the hooks are timed on (docs/overhead.md, "Handlers and
 * hooks"). CLOCK_MONOTONIC where the vDSO reads it without a system call
 * (a pair of reads under CHEAP_PAIR_NS): 23 ns a read on this VM, where the
 * thread's CPU clock is a system call of 1.2 us whose page-table switch
 * leaves the code it times slower than it runs untimed (a sampled allocation
 * was reported at twice what a measure from outside gives). A wall clock
 * also counts the time a thread spends preempted inside a call, so an
 * interval that is long (over WALL_MAX_NS) or ends on another CPU than it
 * began is not taken as the call's cost: it counts at the recent mean of
 * the kind's other timed calls (recent_ns). Where the monotonic clock is a
 * system call, the thread's CPU clock as before. hook_clock: the clock
 * chosen, -1 until cp_stats_choose_clock. */
#define CHEAP_PAIR_NS 200
#define WALL_MAX_NS 250000u
static _Atomic int hook_clock = -1;

/* What a timed interval holds besides the call it times: the end of the
 * first read and the start of the second (over a microsecond on this VM for
 * the thread's CPU clock; tens of ns for the vDSO's). The least of
 * CLOCK_PAIRS pairs of back-to-back reads (a floor: what a pair costs at
 * least), measured once per process by cp_stats_calibrate and taken off
 * every timed call. -1 until then. */
#define CLOCK_PAIRS 8
static _Atomic int64_t clock_pair_ns = -1;

/* What the recent timed calls of each kind took whose intervals were the
 * calls' alone: a moving average over about the last MEAN_OF of them, on
 * the thread (hook_mean) and in the process (recent_ns, updated without a
 * lock: an update lost to a race costs nothing). A preempted call counts at
 * its thread's, or where the thread has none yet, the process's. */
#define MEAN_OF 8
static _Atomic uint64_t recent_ns[CONTPROF_KIND_COUNT];
static _Atomic uint64_t preempted_calls[CONTPROF_KIND_COUNT];
/* The weight of the calls set aside while neither mean existed (the
 * process's first timed calls of a kind, preempted), and the clean calls
 * of the kind so far, up to MEAN_OF: each of the first MEAN_OF clean calls
 * counts an equal share of that weight at its own length, so that the
 * whole is counted at their mean, which one slow call among them moves
 * little (an interrupt's 25 us in a call of 27 doubled it). A process
 * with fewer clean calls counts only their shares. */
static _Atomic uint64_t owed_weight[CONTPROF_KIND_COUNT];
static _Atomic uint32_t first_clean[CONTPROF_KIND_COUNT];

/* The moving average mean after one more value, took (the first value
 * where mean is 0). */
static uint64_t moving_mean(uint64_t mean, uint64_t took) {
  return mean ? mean - mean / MEAN_OF + took / MEAN_OF : took;
}

/* Whether the kernel switched away from the thread inside a timed call
 * (docs/overhead.md, "Handlers and hooks"). glibc registers each thread it
 * makes with the kernel's restartable sequences (rseq): an area in the
 * thread's TLS whose field rseq_cs user code points at the descriptor of a
 * critical section. When the kernel preempts the thread, migrates it or
 * delivers it a signal while the field points at a descriptor whose range
 * does not hold where the thread is, it clears the field (the rseq ABI; a
 * system call that does not switch leaves it). A timed call points it at
 * switch_desc, whose range is empty, at its start, and finds it cleared at
 * its end if anything else ran on the thread's CPU meanwhile, however
 * briefly: the preemptions shorter than WALL_MAX_NS and our own handlers
 * run inside a hook, which the interval's length alone let through (beside
 * a test suite's short-lived processes, calls of 31 us read 52 us each).
 * A host's steal time is still not seen: the guest's kernel never switched.
 *
 * The kernel checks the descriptor each time it reads it, the abort
 * address's signature included, and kills the thread where it is wrong;
 * so the field is used only where glibc owns the area (its __rseq_size set)
 * and the kernel confirms the signature: registering the area again with it
 * is refused with EBUSY for the same one, EPERM for another
 * (switch_detection_start). switch_offset: the field's offset from the
 * thread pointer, 0 where not used (glibc before 2.35, rseq turned off,
 * another architecture): the interval's length and CPU alone then. */
#if defined(__x86_64__) && defined(SYS_rseq)
#define RSEQ_SIGNATURE 0x53053053 /* glibc's RSEQ_SIG on x86-64 */
#define RSEQ_TEXT_(x) #x
#define RSEQ_TEXT(x) RSEQ_TEXT_(x)
/* The abort address: after the signature, never jumped to (the range is
 * empty); a trap if it were. */
/* clang-format off */
__asm__(".pushsection .text\n"
        ".long " RSEQ_TEXT(RSEQ_SIGNATURE) "\n"
        ".globl cp_stats_rseq_abort\n"
        ".hidden cp_stats_rseq_abort\n"
        "cp_stats_rseq_abort:\n"
        "ud2\n"
        ".popsection\n");
/* clang-format on */
extern const char cp_stats_rseq_abort[];
static struct {
  uint32_t version, flags;
  uint64_t start_ip, post_commit_offset, abort_ip;
} switch_desc __attribute__((aligned(32)));
#define RSEQ_CS_FIELD 8  /* struct rseq: cpu_id_start, cpu_id, rseq_cs */
#define RSEQ_AREA_LEN 32 /* what glibc registers */
#endif
static _Atomic intptr_t switch_offset;

/* At the start, on a thread glibc made (not in a handler): whether the
 * kernel holds glibc's area with our signature. */
static void switch_detection_start(void) {
#if defined(__x86_64__) && defined(SYS_rseq)
  const ptrdiff_t *offset = dlsym(RTLD_DEFAULT, "__rseq_offset");
  const unsigned *size = dlsym(RTLD_DEFAULT, "__rseq_size");
  if (!offset || !size || *size < RSEQ_CS_FIELD + sizeof(uint64_t))
    return;
  char *tp;
  __asm__("mov %%fs:0, %0" : "=r"(tp));
  unsigned len = *size > RSEQ_AREA_LEN ? *size : RSEQ_AREA_LEN;
  int saved = errno;
  long got = syscall(SYS_rseq, tp + *offset, len, 0, RSEQ_SIGNATURE);
  int refused = got == -1 ? errno : 0;
  errno = saved;
  if (!got) /* this thread was not registered (not glibc's): as it was */
    syscall(SYS_rseq, tp + *offset, len, 1 /* RSEQ_FLAG_UNREGISTER */,
            RSEQ_SIGNATURE);
  if (refused != EBUSY)
    return;
  switch_desc.start_ip = switch_desc.abort_ip =
      (uint64_t)(uintptr_t)cp_stats_rseq_abort;
  atomic_store_explicit(&switch_offset, *offset + RSEQ_CS_FIELD,
                        memory_order_release);
#endif
}

/* Async-signal-safe: the calling thread's rseq_cs field, or NULL. */
static volatile uint64_t *switch_field(void) {
#if defined(__x86_64__) && defined(SYS_rseq)
  intptr_t offset = atomic_load_explicit(&switch_offset, memory_order_acquire);
  if (!offset)
    return NULL;
  char *tp;
  __asm__("mov %%fs:0, %0" : "=r"(tp));
  return (volatile uint64_t *)(tp + offset);
#else
  return NULL;
#endif
}

/* Async-signal-safe: marks the start of a timed interval. */
static void switch_watch(void) {
#if defined(__x86_64__) && defined(SYS_rseq)
  volatile uint64_t *field = switch_field();
  if (field)
    *field = (uint64_t)(uintptr_t)&switch_desc;
  atomic_signal_fence(memory_order_seq_cst);
#endif
}

/* Async-signal-safe: whether the thread was switched away from since
 * switch_watch; clears the field, so that a timed interval this one ran
 * inside (a hook a handler of ours interrupted) sees it too. */
static int switched_since_watch(void) {
#if defined(__x86_64__) && defined(SYS_rseq)
  atomic_signal_fence(memory_order_seq_cst);
  volatile uint64_t *field = switch_field();
  if (!field)
    return 0;
  int switched = *field != (uint64_t)(uintptr_t)&switch_desc;
  *field = 0;
  return switched;
#else
  return 0;
#endif
}

int cp_stats_switch_detection(void) { return switch_field() != NULL; }

static uint64_t least_pair(clockid_t clock) {
  uint64_t least = UINT64_MAX;
  for (int i = 0; i < CLOCK_PAIRS; i++) {
    uint64_t a = cp_clock_ns(clock);
    uint64_t b = cp_clock_ns(clock);
    if (b >= a && b - a < least)
      least = b - a;
  }
  return least;
}

int cp_stats_choose_clock(void) {
  int clock = atomic_load_explicit(&hook_clock, memory_order_relaxed);
  if (clock >= 0)
    return clock;
  /* Three reads first (the first may fault the vDSO's data in): where the
   * monotonic clock is a system call, sixteen are not worth the start's
   * time. */
  uint64_t a = cp_clock_ns(CLOCK_MONOTONIC), b = cp_clock_ns(CLOCK_MONOTONIC),
           c = cp_clock_ns(CLOCK_MONOTONIC);
  if (c >= b && c - b < CHEAP_PAIR_NS && b >= a) {
    uint64_t least = least_pair(CLOCK_MONOTONIC);
    if (least < CHEAP_PAIR_NS) {
      atomic_store_explicit(&clock_pair_ns, (int64_t)least,
                            memory_order_relaxed);
      switch_detection_start();
      atomic_store_explicit(&hook_clock, CLOCK_MONOTONIC, memory_order_release);
      return CLOCK_MONOTONIC;
    }
  }
  atomic_store_explicit(&hook_clock, CLOCK_THREAD_CPUTIME_ID,
                        memory_order_release);
  return CLOCK_THREAD_CPUTIME_ID;
}

void cp_stats_calibrate(void) {
  if (atomic_load_explicit(&clock_pair_ns, memory_order_relaxed) >= 0)
    return;
  if (cp_stats_choose_clock() != CLOCK_THREAD_CPUTIME_ID)
    return; /* measured with the choice */
  uint64_t least = least_pair(CLOCK_THREAD_CPUTIME_ID);
  if (least != UINT64_MAX && least < 1000000)
    atomic_store_explicit(&clock_pair_ns, (int64_t)least, memory_order_relaxed);
}

void cp_stats_set_hook_clock(int clock) {
  if (clock == CLOCK_MONOTONIC)
    switch_detection_start();
  atomic_store_explicit(&hook_clock, clock, memory_order_release);
  atomic_store_explicit(&clock_pair_ns, (int64_t)least_pair(clock),
                        memory_order_relaxed);
}

int64_t cp_stats_clock_pair_ns(void) {
  return atomic_load_explicit(&clock_pair_ns, memory_order_relaxed);
}

int cp_stats_hook_clock(void) {
  int clock = atomic_load_explicit(&hook_clock, memory_order_acquire);
  return clock >= 0 ? clock : CLOCK_THREAD_CPUTIME_ID;
}

uint64_t cp_stats_preempted_calls(contprof_sample_kind kind) {
  return (unsigned)kind < CONTPROF_KIND_COUNT
             ? atomic_load_explicit(&preempted_calls[kind],
                                    memory_order_relaxed)
             : 0;
}

/* Starts the window after the current one (of len calls): its timed call
 * drawn uniformly among them. */
static void next_window(int kind, uint32_t len) {
  uint32_t at = 1 + (uint32_t)cp_random_below(len);
  hook_span[kind] = hook_rest[kind] + at;
  hook_left[kind] = hook_span[kind];
  hook_rest[kind] = len - at;
  hook_len[kind] = len;
}

/* Async-signal-safe: a thread-local countdown, and two clock reads (the
 * vDSO's, or a system call: cp_stats_hook_clock) and the CPU's number in
 * CP_STATS_HOOK_EVERY (or CP_STATS_HOOK_RARE) calls. */
uint64_t cp_stats_hook_begin(contprof_sample_kind kind) {
  if ((unsigned)kind >= CONTPROF_KIND_COUNT)
    return 0;
  if (!hook_left[kind]) {
    hook_rest[kind] = 0;
    next_window(kind, CP_STATS_HOOK_EVERY);
    hook_last_ns[kind] = 0;
  }
  if (--hook_left[kind])
    return 0;
  int clock = cp_stats_hook_clock();
  if (clock == CLOCK_MONOTONIC)
    switch_watch();
  uint64_t now = cp_clock_ns(clock);
  hook_weight[kind] = hook_len[kind];
  /* The next window's length, from the time per call since the last timed
   * call (a forked child's CPU clock starts again at 0; a change of clock
   * starts again). */
  uint64_t last = hook_clock_of[kind] == clock ? hook_last_ns[kind] : 0;
  hook_last_ns[kind] = now;
  hook_clock_of[kind] = clock;
  int rare = last && now > last && hook_span[kind] &&
             (now - last) / hook_span[kind] >= HOOK_RARE_NS;
  next_window(kind, rare ? CP_STATS_HOOK_RARE : CP_STATS_HOOK_EVERY);
  hook_cpu[kind] = clock == CLOCK_MONOTONIC ? sched_getcpu() : -1;
  hook_wake_ns[kind] = cp_thread.wake_ns;
  return now;
}

uint32_t cp_stats_hook_weight(contprof_sample_kind kind) {
  return (unsigned)kind < CONTPROF_KIND_COUNT && hook_weight[kind]
             ? hook_weight[kind]
             : CP_STATS_HOOK_EVERY;
}

/* Async-signal-safe: a clock read (and the CPU's number) and relaxed atomic
 * adds. */
void cp_stats_hook_end(contprof_sample_kind kind, uint64_t began) {
  if (!began || (unsigned)kind >= CONTPROF_KIND_COUNT)
    return;
  int clock = hook_clock_of[kind];
  uint64_t now = cp_clock_ns(clock);
  int64_t pair = atomic_load_explicit(&clock_pair_ns, memory_order_relaxed);
  uint64_t reads = pair > 0 ? (uint64_t)pair : 0;
  uint64_t took = now > began + reads ? now - began - reads : 0;
  if (clock == CLOCK_MONOTONIC) {
    /* Less the aggregator's wake, which the woken thread may have run in
     * (thread_state.h). */
    uint64_t woke = cp_thread.wake_ns - hook_wake_ns[kind];
    took = took > woke ? took - woke : 0;
    int switched = switched_since_watch();
    if (switched || now - began > WALL_MAX_NS ||
        sched_getcpu() != hook_cpu[kind]) {
      /* Preempted, interrupted by a signal, or migrated: its length is not
       * its cost. */
      atomic_fetch_add_explicit(&preempted_calls[kind], 1,
                                memory_order_relaxed);
      took = hook_mean[kind]
                 ? hook_mean[kind]
                 : atomic_load_explicit(&recent_ns[kind], memory_order_relaxed);
      if (!took)
        atomic_fetch_add_explicit(&owed_weight[kind],
                                  cp_stats_hook_weight(kind),
                                  memory_order_relaxed);
    } else {
      hook_mean[kind] = moving_mean(hook_mean[kind], took);
      uint64_t recent =
          atomic_load_explicit(&recent_ns[kind], memory_order_relaxed);
      atomic_store_explicit(&recent_ns[kind], moving_mean(recent, took),
                            memory_order_relaxed);
      if (atomic_load_explicit(&first_clean[kind], memory_order_relaxed) <
              MEAN_OF &&
          atomic_fetch_add_explicit(&first_clean[kind], 1,
                                    memory_order_relaxed) < MEAN_OF)
        cp_stats_add_hook_ns(
            kind,
            took *
                atomic_load_explicit(&owed_weight[kind], memory_order_relaxed) /
                MEAN_OF);
    }
  }
  if (took)
    cp_stats_add_hook_ns(kind, took * cp_stats_hook_weight(kind));
}

void cp_stats_set_fixed_memory(int which, uint64_t bytes) {
  if (which >= 0 && which < CP_STATS_MEM_COUNT)
    atomic_store_explicit(&fixed_memory[which], bytes, memory_order_relaxed);
}

uint64_t cp_stats_fixed_memory(void) {
  uint64_t sum = 0;
  for (int i = 0; i < CP_STATS_MEM_COUNT; i++)
    sum += atomic_load_explicit(&fixed_memory[i], memory_order_relaxed);
  return sum;
}

/* The CPU time of our threads, and in kind_ns the part of each kind, with
 * one read of each thread's clock (a system call). Caller holds st.lock. */
static uint64_t threads_cpu_locked(uint64_t kind_ns[CONTPROF_KIND_COUNT]) {
  uint64_t sum = st.retired_ns;
  memcpy(kind_ns, st.retired_kind_ns, sizeof st.retired_kind_ns);
  for (size_t i = 0; i < MAX_OWN_THREADS; i++) {
    if (!st.threads[i].used)
      continue;
    uint64_t cpu = cp_clock_ns(st.threads[i].clock);
    sum += cpu;
    if (st.threads[i].kind >= 0)
      kind_ns[st.threads[i].kind] += cpu;
  }
  return sum;
}

static uint64_t delta(uint64_t now, uint64_t *last) {
  uint64_t d = now >= *last ? now - *last : 0;
  *last = now;
  return d;
}

void cp_stats_take(cp_period_stats *out) {
  pthread_mutex_lock(&st.lock);
  uint64_t kind_ns[CONTPROF_KIND_COUNT];
  out->threads_cpu_ns +=
      delta(threads_cpu_locked(kind_ns), &st.last_threads_ns);
  out->process_cpu_ns +=
      delta(cp_clock_ns(CLOCK_PROCESS_CPUTIME_ID), &st.last_process_ns);
  bill_locked();
  for (int p = 0; p < CP_SIGNAL_PATHS; p++)
    out->signal_cost_ns[p] =
        atomic_load_explicit(&signal_cost_ns[p], memory_order_relaxed);
  for (int k = 0; k < CONTPROF_KIND_COUNT; k++) {
    uint64_t kernel = delta(st.billed_ns[k], &st.last_billed_ns[k]);
    out->kernel_kind_ns[k] += kernel;
    out->kernel_ns += kernel;
    uint64_t hook =
        delta(atomic_load_explicit(&hook_ns[k], memory_order_relaxed),
              &st.last_hook_ns[k]);
    out->hook_ns[k] += hook;
    out->hooks_ns += hook;
    out->kind_threads_cpu_ns[k] +=
        delta(kind_ns[k], &st.last_kind_threads_ns[k]);
    out->samples[k] +=
        atomic_exchange_explicit(&extra_samples[k], 0, memory_order_relaxed);
    out->thinned[k] +=
        atomic_exchange_explicit(&thinned[k], 0, memory_order_relaxed);
    /* The slowdown now, and the most since the last period's end (at least
     * the one now: a period that saw no change reports it). */
    unsigned now = atomic_load_explicit(&slowdown[k], memory_order_relaxed);
    unsigned most =
        atomic_exchange_explicit(&slowdown_max[k], now, memory_order_relaxed);
    out->slowdown[k] = now ? now : 1;
    out->slowdown_max[k] = most > now ? most : out->slowdown[k];
  }
  out->drain_ns += delta(atomic_load_explicit(&drain_ns, memory_order_relaxed),
                         &st.last_drain_ns);
  out->cpu_clocks_perf =
      atomic_load_explicit(&cpu_clocks[0], memory_order_relaxed);
  out->cpu_clocks_posix =
      atomic_load_explicit(&cpu_clocks[1], memory_order_relaxed);
  out->cpu_clocks_moved +=
      atomic_exchange_explicit(&cpu_clocks_moved, 0, memory_order_relaxed);
  pthread_mutex_unlock(&st.lock);
}

void cp_stats_reset(void) {
  pthread_mutex_lock(&st.lock);
  st.last_threads_ns = threads_cpu_locked(st.last_kind_threads_ns);
  st.last_process_ns = cp_clock_ns(CLOCK_PROCESS_CPUTIME_ID);
  bill_locked();
  for (int k = 0; k < CONTPROF_KIND_COUNT; k++) {
    st.last_hook_ns[k] =
        atomic_load_explicit(&hook_ns[k], memory_order_relaxed);
    st.last_billed_ns[k] = st.billed_ns[k];
    atomic_store_explicit(&thinned[k], 0, memory_order_relaxed);
  }
  st.last_drain_ns = atomic_load_explicit(&drain_ns, memory_order_relaxed);
  memset(&st.last, 0, sizeof st.last);
  memset(&st.total, 0, sizeof st.total);
  pthread_mutex_unlock(&st.lock);
}

void cp_stats_after_fork_child(void) {
  pthread_mutex_init(&st.lock, NULL);
  memset(st.threads, 0, sizeof st.threads);
  st.retired_ns = 0;
  atomic_store_explicit(&drain_ns, 0, memory_order_relaxed);
  cp_stats_set_cpu_clocks(0, 0);
  atomic_store_explicit(&cpu_clocks_moved, 0, memory_order_relaxed);
  memset(st.retired_kind_ns, 0, sizeof st.retired_kind_ns);
  for (int k = 0; k < CONTPROF_KIND_COUNT; k++) {
    atomic_store_explicit(&hook_ns[k], 0, memory_order_relaxed);
    atomic_store_explicit(&drained_samples[k], 0, memory_order_relaxed);
    atomic_store_explicit(&thinned[k], 0, memory_order_relaxed);
    atomic_store_explicit(&owed_weight[k], 0, memory_order_relaxed);
    atomic_store_explicit(&first_clean[k], 0, memory_order_relaxed);
    for (int p = 0; p < CP_SIGNAL_PATHS; p++)
      atomic_store_explicit(&signals[k][p], 0, memory_order_relaxed);
  }
  /* The costs measured stay: the same machine. */
  memset(st.billed_ns, 0, sizeof st.billed_ns);
  memset(st.billed_signals, 0, sizeof st.billed_signals);
  memset(st.last_billed_ns, 0, sizeof st.last_billed_ns);
  st.last_threads_ns = 0;
  /* The child's CPU clock starts at zero. */
  st.last_process_ns = 0;
  memset(st.last_hook_ns, 0, sizeof st.last_hook_ns);
  memset(st.last_kind_threads_ns, 0, sizeof st.last_kind_threads_ns);
  st.last_drain_ns = 0;
  memset(&st.last, 0, sizeof st.last);
  memset(&st.total, 0, sizeof st.total);
}

double cp_stats_overhead_pct(const cp_period_stats *s) {
  if (!s->process_cpu_ns)
    return 0;
  return 100.0 * (double)cp_stats_profiler_ns(s) / (double)s->process_cpu_ns;
}

void cp_stats_publish(const cp_period_stats *p) {
  pthread_mutex_lock(&st.lock);
  st.last = *p;
  st.total.threads_cpu_ns += p->threads_cpu_ns;
  st.total.hooks_ns += p->hooks_ns;
  st.total.kernel_ns += p->kernel_ns;
  memcpy(st.total.signal_cost_ns, p->signal_cost_ns,
         sizeof st.total.signal_cost_ns);
  st.total.process_cpu_ns += p->process_cpu_ns;
  st.total.drain_ns += p->drain_ns;
  for (int k = 0; k < CONTPROF_KIND_COUNT; k++) {
    st.total.hook_ns[k] += p->hook_ns[k];
    st.total.kernel_kind_ns[k] += p->kernel_kind_ns[k];
    st.total.kind_threads_cpu_ns[k] += p->kind_threads_cpu_ns[k];
    st.total.samples[k] += p->samples[k];
    st.total.drops[k] += p->drops[k];
    st.total.thinned[k] += p->thinned[k];
  }
  st.total.memory_bytes = p->memory_bytes;
  /* The rates and slowdowns in force now; the most slowdown in any
   * period. */
  st.total.profiles = p->profiles;
  st.total.max_overhead_pct = p->max_overhead_pct;
  memcpy(st.total.rate, p->rate, sizeof st.total.rate);
  memcpy(st.total.slowdown, p->slowdown, sizeof st.total.slowdown);
  for (int k = 0; k < CONTPROF_KIND_COUNT; k++)
    if (p->slowdown_max[k] > st.total.slowdown_max[k])
      st.total.slowdown_max[k] = p->slowdown_max[k];
  st.total.cpu_clocks_perf = p->cpu_clocks_perf;
  st.total.cpu_clocks_posix = p->cpu_clocks_posix;
  st.total.cpu_clocks_moved += p->cpu_clocks_moved;
  pthread_mutex_unlock(&st.lock);
}

void cp_stats_read(cp_period_stats *last, cp_period_stats *total) {
  pthread_mutex_lock(&st.lock);
  if (last)
    *last = st.last;
  if (total)
    *total = st.total;
  pthread_mutex_unlock(&st.lock);
}
