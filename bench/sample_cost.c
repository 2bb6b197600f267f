/* sample_cost: the cost of one CPU sample (signal to ring) at stack depth 32,
 * measured on the real libcontprof.so.
 *
 *   sample_cost [PHASE_SECONDS [PAIRS [HZ]]]      (defaults: 1 5 1000)
 *
 * A thread recurses until its stack is 32 frames deep and spins there in a
 * loop that reads the TSC and stores it in a global (`last_seen`); any gap
 * between two reads longer than GAP_NS is an interruption, recorded with its
 * start and end. The thread alternates PAIRS times between a phase without
 * the profiler and a phase with contprof_start({cpu_hz = HZ, profiles =
 * "cpu"}) ... contprof_stop(), each PHASE_SECONDS of spinning.
 *
 * The program defines sigaction(), which wins over libc's for the library's
 * calls (an executable's symbols come first), so the handler contprof
 * installs is wrapped in a trampoline that reads the TSC before and after it.
 * That gives, for every signal:
 *   handler   trampoline entry to return: the library's whole handler (checks,
 *             ring reserve, the unwind of the 32-frame stack, commit);
 *   entry     last_seen to handler entry: the kernel's part before the handler
 *             (the tick interrupt, timer expiry, signal frame set-up);
 *   interrupt last_seen to the first TSC read after the return: everything
 *             the interrupted code lost (the above plus sigreturn).
 * The phases without the profiler give the interruptions the thread suffers
 * anyway (the scheduler tick: CPU timers are checked at ticks). The cost of
 * one sample is the median interruption with a signal minus the median
 * interruption without the profiler.
 *
 * The trampoline's own cost (two TSC reads, an indirect call) is included
 * in the handler figure: it overstates it by some tens of ns. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#include "contprof/profiler.h"

#define TARGET_DEPTH 32
#define GAP_NS 150 /* a loop iteration takes ~10 ns */
#define MAX_EVENTS (1 << 20)

typedef void (*sa_fn)(int, siginfo_t *, void *);

/* ---- the interposed sigaction and the trampoline ------------------------ */

static int (*real_sigaction)(int, const struct sigaction *, struct sigaction *);
static sa_fn lib_handler;

typedef struct handler_rec {
  uint64_t seen; /* last_seen at entry */
  uint64_t entry, exit;
  int null; /* the empty handler of the null phase */
} handler_rec;

static handler_rec *hrecs;
static _Atomic size_t nhrecs;
static volatile uint64_t last_seen;
static __thread int measured; /* the spinning thread */
static _Atomic uint64_t other_signals;

static void trampoline(int sig, siginfo_t *info, void *uc) {
  uint64_t entry = __rdtsc();
  uint64_t seen = last_seen;
  lib_handler(sig, info, uc);
  uint64_t exit = __rdtsc();
  if (!measured) {
    atomic_fetch_add(&other_signals, 1);
    return;
  }
  size_t i = atomic_fetch_add(&nhrecs, 1);
  if (i < MAX_EVENTS)
    hrecs[i] = (handler_rec){seen, entry, exit, 0};
}

/* The null phase: the same per-thread CPU-time timer, with an empty handler. */
static void null_handler(int sig, siginfo_t *info, void *uc) {
  (void)sig, (void)info, (void)uc;
  uint64_t entry = __rdtsc();
  uint64_t seen = last_seen;
  __asm__ volatile("" ::: "memory");
  uint64_t exit = __rdtsc();
  size_t i = atomic_fetch_add(&nhrecs, 1);
  if (i < MAX_EVENTS)
    hrecs[i] = (handler_rec){seen, entry, exit, 1};
}

int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
  if (!real_sigaction)
    real_sigaction = (int (*)(int, const struct sigaction *,
                              struct sigaction *))dlsym(RTLD_NEXT, "sigaction");
  if (act && (act->sa_flags & SA_SIGINFO) && act->sa_sigaction &&
      act->sa_sigaction != trampoline && act->sa_sigaction != null_handler) {
    if (lib_handler && lib_handler != act->sa_sigaction) {
      fprintf(stderr, "sample_cost: a second SA_SIGINFO handler\n");
      abort();
    }
    lib_handler = act->sa_sigaction;
    struct sigaction copy = *act;
    copy.sa_sigaction = trampoline;
    return real_sigaction(sig, &copy, old);
  }
  return real_sigaction(sig, act, old);
}

/* ---- the spinning thread ------------------------------------------------- */

enum { PHASE_OFF, PHASE_NULL, PHASE_ON, NPHASES };
static const char *const phase_names[NPHASES] = {"off", "null", "contprof"};

typedef struct gap {
  uint64_t start, end;
  int phase;
} gap;

static gap *gaps;
static size_t ngaps;
static uint64_t gap_ticks;
static double tsc_per_ns;
static double phase_s = 1.0;
static int pairs = 5, hz = 1000;
static int depth_at_leaf;
static char outdir[] = "/tmp/contprof-sample-cost.XXXXXX";

__attribute__((noinline)) static void spin(uint64_t ticks, int phase) {
  if (!depth_at_leaf) {
    void *frames[128];
    depth_at_leaf = backtrace(frames, 128);
  }
  uint64_t prev = __rdtsc(), end = prev + ticks;
  while (prev < end) {
    uint64_t now = __rdtsc();
    if (now - prev > gap_ticks && ngaps < MAX_EVENTS)
      gaps[ngaps++] = (gap){prev, now, phase};
    last_seen = now;
    prev = now;
  }
}

__attribute__((noinline)) static void descend(int n, uint64_t ticks,
                                              int phase) {
  if (n <= 0)
    spin(ticks, phase);
  else
    descend(n - 1, ticks, phase);
  __asm__ volatile("" ::: "memory"); /* no tail call: a real frame each */
}

static void run_phase(int phase, int n, uint64_t ticks,
                      const contprof_options *opts) {
  if (phase == PHASE_OFF) {
    descend(n, ticks, phase);
  } else if (phase == PHASE_NULL) {
    /* What cpu.c does, with an empty handler: a timer on this thread's CPU
     * clock, delivered to this thread. */
    struct sigevent sev;
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = SIGUSR2;
    sev._sigev_un._tid = gettid();
    timer_t timer;
    if (timer_create(CLOCK_THREAD_CPUTIME_ID, &sev, &timer) != 0) {
      perror("sample_cost: timer_create");
      exit(1);
    }
    long period = 1000000000L / hz;
    struct itimerspec its = {{period / 1000000000L, period % 1000000000L},
                             {period / 1000000000L, period % 1000000000L}};
    timer_settime(timer, 0, &its, NULL);
    descend(n, ticks, phase);
    timer_delete(timer);
  } else {
    int rc = contprof_start(opts);
    if (rc != 0) {
      fprintf(stderr, "sample_cost: contprof_start: %s\n",
              contprof_strerror(rc));
      exit(1);
    }
    descend(n, ticks, phase);
    contprof_stop();
  }
}

static void *bench_thread(void *arg) {
  (void)arg;
  measured = 1;
  void *frames[128];
  /* Frames here: bench_thread, start_thread, clone3. spin adds descend(n)
   * ... descend(0) and itself: base + n + 2. */
  int base = backtrace(frames, 128);
  int n = TARGET_DEPTH - base - 2;
  uint64_t ticks = (uint64_t)(phase_s * 1e9 * tsc_per_ns);
  contprof_options opts;
  memset(&opts, 0, sizeof opts);
  opts.cpu_hz = hz;
  opts.profiles = "cpu";
  opts.output_dir = outdir;
  opts.upload_period_s = 3600;
  /* Interleaved, the order rotating from one round to the next. */
  for (int p = 0; p < pairs; p++)
    for (int k = 0; k < NPHASES; k++)
      run_phase((p + k) % NPHASES, n, ticks, &opts);
  return NULL;
}

/* ---- statistics ---------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double quantile(double *v, size_t n, double p) {
  if (n == 0)
    return 0.0 / 0.0;
  qsort(v, n, sizeof *v, cmp_double);
  double h = (double)(n - 1) * p;
  size_t lo = (size_t)h;
  return lo + 1 < n ? v[lo] + (h - (double)lo) * (v[lo + 1] - v[lo]) : v[lo];
}

static void report(const char *name, double *v, size_t n) {
  double med = quantile(v, n, 0.5), p90 = quantile(v, n, 0.9),
         p99 = quantile(v, n, 0.99);
  printf("%-34s n=%-6zu median=%8.0f p90=%8.0f p99=%8.0f ns\n", name, n, med,
         p90, p99);
}

static double calibrate_tsc(void) {
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC_RAW, &a);
  uint64_t t0 = __rdtsc();
  struct timespec d = {0, 200000000};
  nanosleep(&d, NULL);
  clock_gettime(CLOCK_MONOTONIC_RAW, &b);
  uint64_t t1 = __rdtsc();
  double ns = (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
  return (double)(t1 - t0) / ns;
}

int main(int argc, char **argv) {
  if (argc > 1)
    phase_s = atof(argv[1]);
  if (argc > 2)
    pairs = atoi(argv[2]);
  if (argc > 3)
    hz = atoi(argv[3]);
  if (phase_s <= 0 || pairs < 1 || hz < 1 || hz > 1000) {
    fprintf(stderr, "usage: sample_cost [PHASE_SECONDS [ROUNDS [HZ]]]\n");
    return 2;
  }
  if (!mkdtemp(outdir)) {
    perror("mkdtemp");
    return 1;
  }
  hrecs = calloc(MAX_EVENTS, sizeof *hrecs);
  gaps = calloc(MAX_EVENTS, sizeof *gaps);
  if (!hrecs || !gaps)
    return 1;
  tsc_per_ns = calibrate_tsc();
  gap_ticks = (uint64_t)(GAP_NS * tsc_per_ns);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = null_handler;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigaction(SIGUSR2, &sa, NULL);

  pthread_t t;
  if (pthread_create(&t, NULL, bench_thread, NULL) != 0)
    return 1;
  pthread_join(t, NULL);

  size_t nh = atomic_load(&nhrecs);
  if (nh > MAX_EVENTS)
    nh = MAX_EVENTS;
  /* Per kind of handler (0: contprof, 1: null): its run time, the time from
   * the last loop iteration to its entry. Per phase: interruptions with a
   * handler run in them, and without. */
  double *handler[2], *entry[2], *with_sig[NPHASES], *no_sig[NPHASES];
  size_t nhandler[2] = {0, 0}, nwith[NPHASES] = {0}, nno[NPHASES] = {0};
  for (int k = 0; k < 2; k++) {
    handler[k] = calloc(nh + 1, sizeof(double));
    entry[k] = calloc(nh + 1, sizeof(double));
  }
  for (int k = 0; k < NPHASES; k++) {
    with_sig[k] = calloc(ngaps + 1, sizeof(double));
    no_sig[k] = calloc(ngaps + 1, sizeof(double));
  }
  for (size_t i = 0; i < nh; i++) {
    int k = hrecs[i].null;
    entry[k][nhandler[k]] =
        (double)(hrecs[i].entry - hrecs[i].seen) / tsc_per_ns;
    handler[k][nhandler[k]++] =
        (double)(hrecs[i].exit - hrecs[i].entry) / tsc_per_ns;
  }
  /* Match interruptions and handler runs, both in time order: a handler ran
   * in an interruption when it began and ended within it. */
  size_t h = 0, unmatched = 0;
  for (size_t g = 0; g < ngaps; g++) {
    double len = (double)(gaps[g].end - gaps[g].start) / tsc_per_ns;
    while (h < nh && hrecs[h].entry < gaps[g].start) {
      unmatched++;
      h++;
    }
    int has_signal = 0;
    while (h < nh && hrecs[h].exit <= gaps[g].end) {
      has_signal = 1;
      h++;
    }
    int ph = gaps[g].phase;
    if (has_signal)
      with_sig[ph][nwith[ph]++] = len;
    else
      no_sig[ph][nno[ph]++] = len;
  }
  unmatched += nh - h;

  double secs = phase_s * pairs;
  printf("stack depth at the sample: %d frames (target %d)\n", depth_at_leaf,
         TARGET_DEPTH);
  printf("timers at %d Hz; %d rounds of %.2f s per phase (off, null, "
         "contprof); TSC %.3f GHz\n",
         hz, pairs, phase_s, tsc_per_ns);
  printf("signals: contprof %zu (%.0f/s), null %zu (%.0f/s), on other "
         "threads %" PRIu64 ", not matched to an interruption %zu\n",
         nhandler[0], (double)nhandler[0] / secs, nhandler[1],
         (double)nhandler[1] / secs, atomic_load(&other_signals), unmatched);
  report("contprof handler (signal to ring)", handler[0], nhandler[0]);
  report("null handler", handler[1], nhandler[1]);
  report("kernel entry, contprof", entry[0], nhandler[0]);
  report("kernel entry, null", entry[1], nhandler[1]);
  char name[64];
  for (int k = 0; k < NPHASES; k++) {
    if (k != PHASE_OFF) {
      snprintf(name, sizeof name, "interruption with signal, %s",
               phase_names[k]);
      report(name, with_sig[k], nwith[k]);
    }
    snprintf(name, sizeof name, "interruption no signal, %s", phase_names[k]);
    report(name, no_sig[k], nno[k]);
  }
  double h_med = quantile(handler[0], nhandler[0], 0.5);
  double h_p99 = quantile(handler[0], nhandler[0], 0.99);
  double n_med = quantile(handler[1], nhandler[1], 0.5);
  double i_cp = quantile(with_sig[PHASE_ON], nwith[PHASE_ON], 0.5);
  double i_null = quantile(with_sig[PHASE_NULL], nwith[PHASE_NULL], 0.5);
  double i_off = quantile(no_sig[PHASE_OFF], nno[PHASE_OFF], 0.5);
  printf("RESULT depth=%d hz=%d signals=%zu handler_median_ns=%.0f "
         "handler_p99_ns=%.0f null_handler_median_ns=%.0f "
         "interrupt_contprof_median_ns=%.0f interrupt_null_median_ns=%.0f "
         "interrupt_off_median_ns=%.0f outdir=%s\n",
         depth_at_leaf, hz, nhandler[0], h_med, h_p99, n_med, i_cp, i_null,
         i_off, outdir);
  return 0;
}
