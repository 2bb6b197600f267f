/* sample_cost: the cost of one CPU sample (signal to ring) at stack depth 32,
 * measured on the real libcontprof.so. Run by bench/sample_cost.sh.
 *
 *   sample_cost [PHASE_SECONDS [ROUNDS [HZ]]]      (defaults: 1 5 1000)
 *
 * After each contprof_start, the handler contprof installed (cpu.c's
 * cpu_signal_handler) is wrapped, with the raw rt_sigaction system call, in
 * a trampoline that reads the TSC before and after calling it. A thread
 * recurses until its stack is 32 frames deep and spins there in a loop that
 * reads the TSC and stores it in a global (`last_seen`); two reads further
 * apart than GAP_NS mean the loop was interrupted, and the interruption is
 * recorded.
 *
 * 1. Timer-driven, as in production. ROUNDS rounds, each of four phases of
 *    PHASE_SECONDS, in rotating order: "off" (no profiler), "null" (a timer on
 *    the thread's CPU clock at HZ, as cpu.c makes, with an empty handler),
 *    "contprof" (contprof_start with cpu_hz = HZ ... contprof_stop) and
 *    "twice" (the same, but the trampoline calls contprof's handler a second
 *    time right after the first and times that second call: the handler's
 *    cost with its code and data cached, in the same signal context). For
 *    each signal:
 *      handler       trampoline entry to return: contprof's whole handler
 *                    (checks, ring reserve, the unwind of the 32-frame stack,
 *                    commit) -- "signal to ring";
 *      kernel entry  last loop iteration to handler entry (the tick, timer
 *                    expiry, signal frame set-up: the kernel's part, the same
 *                    for any signal-based profiler);
 *    and for each interruption of the loop its length, with and without a
 *    signal in it, per phase.
 * 2. Direct, back to back: the thread sends itself the signal contprof
 *    listens on with rt_tgsigqueueinfo, the siginfo forged as cpu.c's timers
 *    make it (SI_TIMER, its cookie), every DIRECT_GAP_US of spinning, and
 *    times the send-to-return round trip; the same with an empty handler.
 *    No tick, warm caches: the handler's cost alone.
 *
 * Profiles go to a temporary directory, printed on the RESULT line (the
 * script reads and removes it). The trampoline's own cost (two TSC reads, an
 * indirect call) is included in the handler figures: a few tens of ns
 * (compare the null handler's). */
#define _GNU_SOURCE
#include <execinfo.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#include "contprof/profiler.h"

#define TARGET_DEPTH 32
#define GAP_NS 150 /* one loop iteration takes ~10 ns */
#define MAX_EVENTS (1 << 20)
#define DIRECT_PER_ROUND 4000
#define DIRECT_GAP_US 50
/* src/samplers/cpu.c's TIMER_COOKIE: how its handler knows its timers. */
#define CONTPROF_TIMER_COOKIE 0x63707531

typedef void (*sa_fn)(int, siginfo_t *, void *);

enum {
  K_TIMER_CP,     /* contprof's handler, timer-driven */
  K_TIMER_NULL,   /* the empty handler, timer-driven */
  K_DIRECT_CP,    /* contprof's handler, direct */
  K_DIRECT_NULL,  /* the empty handler, direct */
  K_TWICE_SECOND, /* contprof's handler called again at once (phase "twice") */
  NKINDS
};

typedef struct handler_rec {
  uint64_t seen; /* last_seen at entry */
  uint64_t entry, exit;
  int kind;
} handler_rec;

static handler_rec *hrecs;
static _Atomic size_t nhrecs;
static volatile uint64_t last_seen;
static volatile int direct_mode; /* a direct send is in flight */
static volatile int call_twice;  /* phase "twice" */
static __thread int measured;    /* the spinning thread */
static _Atomic uint64_t other_signals;

static void record(uint64_t seen, uint64_t entry, uint64_t exit, int kind) {
  size_t i = atomic_fetch_add(&nhrecs, 1);
  if (i < MAX_EVENTS)
    hrecs[i] = (handler_rec){seen, entry, exit, kind};
}

/* ---- the trampoline around contprof's handler ---------------------------- */

/* The kernel's struct sigaction on x86-64 (rt_sigaction with an 8-byte
 * mask). Read and written with the raw system call, so that nothing between
 * the program and the kernel (contprof interposes sigaction) sees it. */
typedef struct kernel_sigaction {
  void *handler;
  unsigned long flags;
  void *restorer;
  unsigned long mask;
} kernel_sigaction;

static int raw_sigaction(int sig, const kernel_sigaction *act,
                         kernel_sigaction *old) {
  return (int)syscall(SYS_rt_sigaction, sig, act, old, sizeof(unsigned long));
}

static sa_fn lib_handler;
static int lib_signal;

static void trampoline(int sig, siginfo_t *info, void *uc) {
  uint64_t entry = __rdtsc();
  uint64_t seen = last_seen;
  lib_handler(sig, info, uc);
  uint64_t exit = __rdtsc();
  if (!measured) {
    atomic_fetch_add(&other_signals, 1);
  } else if (call_twice) {
    /* The same signal handled again straight away: the handler's cost with
     * its code and data in the caches, at the same stack. */
    uint64_t again = __rdtsc();
    lib_handler(sig, info, uc);
    record(seen, again, __rdtsc(), K_TWICE_SECOND);
  } else {
    record(seen, entry, exit, direct_mode ? K_DIRECT_CP : K_TIMER_CP);
  }
}

static void null_handler(int sig, siginfo_t *info, void *uc) {
  (void)sig, (void)info, (void)uc;
  uint64_t entry = __rdtsc();
  uint64_t seen = last_seen;
  __asm__ volatile("" ::: "memory");
  uint64_t exit = __rdtsc();
  record(seen, entry, exit, direct_mode ? K_DIRECT_NULL : K_TIMER_NULL);
}

/* After contprof_start: finds the signal contprof samples with (SIGPROF, else
 * a real-time one: an SA_SIGINFO handler that is not ours) and puts the
 * trampoline in front of its handler, unless it is there already. */
static void wrap_contprof_handler(void) {
  int candidates[_NSIG], n = 0;
  candidates[n++] = SIGPROF;
  for (int s = SIGRTMIN; s <= SIGRTMAX; s++)
    candidates[n++] = s;
  for (int i = 0; i < n; i++) {
    kernel_sigaction ka;
    if (raw_sigaction(candidates[i], NULL, &ka) != 0 ||
        !(ka.flags & SA_SIGINFO) || ka.handler == (void *)null_handler ||
        ka.handler == NULL || ka.handler == (void *)SIG_IGN)
      continue;
    if (ka.handler == (void *)trampoline)
      return; /* still wrapped */
    lib_handler = (sa_fn)ka.handler;
    lib_signal = candidates[i];
    ka.handler = (void *)trampoline;
    if (raw_sigaction(lib_signal, &ka, NULL) != 0) {
      perror("sample_cost: rt_sigaction");
      exit(1);
    }
    return;
  }
  fprintf(stderr, "sample_cost: contprof's signal handler not found\n");
  exit(1);
}

/* ---- the spinning thread ------------------------------------------------- */

enum { PHASE_OFF, PHASE_NULL, PHASE_ON, PHASE_TWICE, NPHASES };
static const char *const phase_names[NPHASES] = {"off", "null", "contprof",
                                                 "twice"};

typedef struct gap {
  uint64_t start, end;
  int phase;
} gap;

static gap *gaps;
static size_t ngaps;
static uint64_t gap_ticks;
static double tsc_per_ns;
static double phase_s = 1.0;
static int rounds = 5, hz = 1000;
static int depth_at_leaf;
static char outdir[] = "/tmp/contprof-sample-cost.XXXXXX";
static double *roundtrip[2]; /* direct sends: [0] contprof, [1] null */
static size_t nroundtrip[2];

/* rt_tgsigqueueinfo inline: no libc frame above the interrupted pc. */
static inline long sigqueue_self(long pid, long tid, int sig, siginfo_t *si) {
  long ret;
  register long r10 __asm__("r10") = (long)si;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"((long)SYS_rt_tgsigqueueinfo), "D"(pid), "S"(tid),
                     "d"((long)sig), "r"(r10)
                   : "rcx", "r11", "memory");
  return ret;
}

/* Spins for `ticks`, recording the interruptions. */
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

__attribute__((noinline)) static void spin_direct(int sig, int which) {
  siginfo_t si;
  memset(&si, 0, sizeof si);
  si.si_signo = sig;
  si.si_code = which == 0 ? SI_TIMER : SI_QUEUE;
  si.si_value.sival_int = which == 0 ? CONTPROF_TIMER_COOKIE : 0;
  uint64_t pause = (uint64_t)(DIRECT_GAP_US * 1000.0 * tsc_per_ns);
  long pid = getpid(), tid = gettid();
  for (int i = 0; i < DIRECT_PER_ROUND; i++) {
    uint64_t until = __rdtsc() + pause;
    while (__rdtsc() < until)
      last_seen = __rdtsc();
    direct_mode = 1;
    uint64_t t0 = __rdtsc();
    long rc = sigqueue_self(pid, tid, sig, &si);
    uint64_t t1 = __rdtsc();
    if (rc != 0) {
      fprintf(stderr, "sample_cost: rt_tgsigqueueinfo: %ld\n", rc);
      exit(1);
    }
    direct_mode = 0;
    if (nroundtrip[which] < MAX_EVENTS)
      roundtrip[which][nroundtrip[which]++] = (double)(t1 - t0) / tsc_per_ns;
  }
}

/* Recurses n frames, then runs the leaf: spin (phase >= 0) or spin_direct
 * (phase = -1 - which). */
__attribute__((noinline)) static void descend(int n, uint64_t ticks, int phase,
                                              int sig) {
  if (n > 0)
    descend(n - 1, ticks, phase, sig);
  else if (phase >= 0)
    spin(ticks, phase);
  else
    spin_direct(sig, -1 - phase);
  __asm__ volatile("" ::: "memory"); /* no tail call: a real frame each */
}

/* Profiles go to OUTDIR/timer and OUTDIR/direct. */
static void start_contprof(int cpu_hz, const char *sub) {
  char dir[sizeof outdir + 16];
  snprintf(dir, sizeof dir, "%s/%s", outdir, sub);
  contprof_options opts;
  memset(&opts, 0, sizeof opts);
  opts.cpu_hz = cpu_hz;
  opts.profiles = "cpu";
  opts.output_dir = dir;
  opts.upload_period_s = 3600;
  int rc = contprof_start(&opts);
  if (rc != 0) {
    fprintf(stderr, "sample_cost: contprof_start: %s\n", contprof_strerror(rc));
    exit(1);
  }
  wrap_contprof_handler();
}

static void run_phase(int phase, int n, uint64_t ticks) {
  if (phase == PHASE_OFF) {
    descend(n, ticks, phase, 0);
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
    descend(n, ticks, phase, 0);
    timer_delete(timer);
  } else {
    start_contprof(hz, phase == PHASE_TWICE ? "twice" : "timer");
    call_twice = phase == PHASE_TWICE;
    descend(n, ticks, phase, 0);
    call_twice = 0;
    contprof_stop();
  }
}

static void *bench_thread(void *arg) {
  (void)arg;
  measured = 1;
  void *frames[128];
  /* Frames here: bench_thread, start_thread, clone3. The leaf adds
   * descend(n) ... descend(0) and itself: base + n + 2. */
  int base = backtrace(frames, 128);
  int n = TARGET_DEPTH - base - 2;
  uint64_t ticks = (uint64_t)(phase_s * 1e9 * tsc_per_ns);
  /* 1. Timer-driven; the order of the phases rotates from round to round. */
  for (int r = 0; r < rounds; r++)
    for (int k = 0; k < NPHASES; k++)
      run_phase((r + k) % NPHASES, n, ticks);
  /* 2. Direct. contprof runs at 1 Hz so that its own timers stay out of the
   * way; its signal is the one it installed. */
  for (int r = 0; r < rounds; r++) {
    for (int k = 0; k < 2; k++) {
      if ((r + k) % 2 == 0) {
        start_contprof(1, "direct");
        descend(n, 0, -1, lib_signal);
        contprof_stop();
      } else {
        descend(n, 0, -2, SIGUSR2);
      }
    }
  }
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
  printf("  %-40s n=%-6zu median=%7.0f p90=%7.0f p99=%8.0f ns\n", name, n,
         quantile(v, n, 0.5), quantile(v, n, 0.9), quantile(v, n, 0.99));
}

static double calibrate_tsc(void) {
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC_RAW, &a);
  uint64_t t0 = __rdtsc();
  struct timespec d = {0, 200000000};
  nanosleep(&d, NULL);
  clock_gettime(CLOCK_MONOTONIC_RAW, &b);
  uint64_t t1 = __rdtsc();
  double ns =
      (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
  return (double)(t1 - t0) / ns;
}

static double *new_array(size_t n) {
  double *v = calloc(n + 1, sizeof *v);
  if (!v) {
    perror("calloc");
    exit(1);
  }
  return v;
}

int main(int argc, char **argv) {
  if (argc > 1)
    phase_s = atof(argv[1]);
  if (argc > 2)
    rounds = atoi(argv[2]);
  if (argc > 3)
    hz = atoi(argv[3]);
  if (phase_s <= 0 || rounds < 1 || hz < 1 || hz > 1000) {
    fprintf(stderr, "usage: sample_cost [PHASE_SECONDS [ROUNDS [HZ]]]\n");
    return 2;
  }
  if (!mkdtemp(outdir)) {
    perror("mkdtemp");
    return 1;
  }
  hrecs = calloc(MAX_EVENTS, sizeof *hrecs);
  gaps = calloc(MAX_EVENTS, sizeof *gaps);
  roundtrip[0] = new_array(MAX_EVENTS);
  roundtrip[1] = new_array(MAX_EVENTS);
  if (!hrecs || !gaps)
    return 1;
  tsc_per_ns = calibrate_tsc();
  gap_ticks = (uint64_t)(GAP_NS * tsc_per_ns);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = null_handler;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigaction(SIGUSR2, &sa, NULL);

  /* The frame-pointer walker's table is built at the profiler's first tick,
   * a second after its first start, and kept: start once beforehand so that
   * every measured sample is unwound as in a long-lived process. */
  start_contprof(1, "warm-up");
  struct timespec tick = {1, 300000000};
  nanosleep(&tick, NULL);
  contprof_stop();

  pthread_t t;
  if (pthread_create(&t, NULL, bench_thread, NULL) != 0)
    return 1;
  pthread_join(t, NULL);

  size_t nh = atomic_load(&nhrecs);
  if (nh > MAX_EVENTS)
    nh = MAX_EVENTS;
  double *handler[NKINDS], *entry[NKINDS], *with_sig[NPHASES], *no_sig[NPHASES];
  size_t nk[NKINDS] = {0}, nwith[NPHASES] = {0}, nno[NPHASES] = {0};
  for (int k = 0; k < NKINDS; k++) {
    handler[k] = new_array(nh);
    entry[k] = new_array(nh);
  }
  for (int k = 0; k < NPHASES; k++) {
    with_sig[k] = new_array(ngaps);
    no_sig[k] = new_array(ngaps);
  }
  for (size_t i = 0; i < nh; i++) {
    int k = hrecs[i].kind;
    entry[k][nk[k]] = (double)(hrecs[i].entry - hrecs[i].seen) / tsc_per_ns;
    handler[k][nk[k]++] = (double)(hrecs[i].exit - hrecs[i].entry) / tsc_per_ns;
  }
  /* Match interruptions and timer-driven handler runs, both in time order: a
   * run belongs to the interruption it began and ended in. */
  size_t h = 0, unmatched = 0;
  for (size_t g = 0; g < ngaps; g++) {
    double len = (double)(gaps[g].end - gaps[g].start) / tsc_per_ns;
    while (h < nh &&
           (hrecs[h].kind == K_DIRECT_CP || hrecs[h].kind == K_DIRECT_NULL ||
            hrecs[h].entry < gaps[g].start)) {
      unmatched +=
          hrecs[h].kind != K_DIRECT_CP && hrecs[h].kind != K_DIRECT_NULL;
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

  double secs = phase_s * rounds;
  printf("stack depth at the sample: %d frames (target %d); TSC %.3f GHz\n",
         depth_at_leaf, TARGET_DEPTH, tsc_per_ns);
  printf("1. timer-driven at %d Hz: %d rounds of %.2f s per phase (off, null, "
         "contprof, twice)\n",
         hz, rounds, phase_s);
  printf("  signals: contprof %zu (%.0f/s), null %zu (%.0f/s), on other "
         "threads %" PRIu64 ", outside any interruption %zu\n",
         nk[K_TIMER_CP], (double)nk[K_TIMER_CP] / secs, nk[K_TIMER_NULL],
         (double)nk[K_TIMER_NULL] / secs, atomic_load(&other_signals),
         unmatched);
  /* Kept before report() sorts the arrays (quantile sorts in place). */
  double t_h_med = quantile(handler[K_TIMER_CP], nk[K_TIMER_CP], 0.5);
  double t_h_p99 = quantile(handler[K_TIMER_CP], nk[K_TIMER_CP], 0.99);
  double t_e_null = quantile(entry[K_TIMER_NULL], nk[K_TIMER_NULL], 0.5);
  double i_cp = quantile(with_sig[PHASE_ON], nwith[PHASE_ON], 0.5);
  double i_null = quantile(with_sig[PHASE_NULL], nwith[PHASE_NULL], 0.5);
  double i_off = quantile(no_sig[PHASE_OFF], nno[PHASE_OFF], 0.5);
  double t_h2_med = quantile(handler[K_TWICE_SECOND], nk[K_TWICE_SECOND], 0.5);
  double t_h2_p99 = quantile(handler[K_TWICE_SECOND], nk[K_TWICE_SECOND], 0.99);
  report("contprof handler (signal to ring)", handler[K_TIMER_CP],
         nk[K_TIMER_CP]);
  report("contprof handler, called again at once", handler[K_TWICE_SECOND],
         nk[K_TWICE_SECOND]);
  report("null handler", handler[K_TIMER_NULL], nk[K_TIMER_NULL]);
  report("kernel entry before contprof's handler", entry[K_TIMER_CP],
         nk[K_TIMER_CP]);
  report("kernel entry before the null handler", entry[K_TIMER_NULL],
         nk[K_TIMER_NULL]);
  char name[64];
  for (int k = 0; k < NPHASES; k++) {
    if (k == PHASE_TWICE)
      continue;
    if (k != PHASE_OFF) {
      snprintf(name, sizeof name, "interruption with a signal, %s",
               phase_names[k]);
      report(name, with_sig[k], nwith[k]);
    }
    snprintf(name, sizeof name, "interruption without, %s", phase_names[k]);
    report(name, no_sig[k], nno[k]);
  }

  printf("2. direct: %d rounds of %d sends, one per %d us of spinning\n",
         rounds, DIRECT_PER_ROUND, DIRECT_GAP_US);
  double d_h_med = quantile(handler[K_DIRECT_CP], nk[K_DIRECT_CP], 0.5);
  double d_h_p99 = quantile(handler[K_DIRECT_CP], nk[K_DIRECT_CP], 0.99);
  double d_rt_cp = quantile(roundtrip[0], nroundtrip[0], 0.5);
  double d_rt_null = quantile(roundtrip[1], nroundtrip[1], 0.5);
  report("contprof handler (signal to ring)", handler[K_DIRECT_CP],
         nk[K_DIRECT_CP]);
  report("null handler", handler[K_DIRECT_NULL], nk[K_DIRECT_NULL]);
  report("send to return, contprof", roundtrip[0], nroundtrip[0]);
  report("send to return, null", roundtrip[1], nroundtrip[1]);
  if (nk[K_DIRECT_CP] < nroundtrip[0] || d_h_med < 100)
    printf("WARNING: contprof's handler did not take the direct signals as "
           "its own (has cpu.c's timer cookie changed?)\n");

  printf("RESULT depth=%d hz=%d signals=%zu timer_handler_median_ns=%.0f "
         "timer_handler_p99_ns=%.0f again_handler_median_ns=%.0f "
         "again_handler_p99_ns=%.0f direct_handler_median_ns=%.0f "
         "direct_handler_p99_ns=%.0f direct_roundtrip_extra_ns=%.0f "
         "kernel_entry_null_median_ns=%.0f interrupt_off_median_ns=%.0f "
         "interrupt_null_median_ns=%.0f interrupt_contprof_median_ns=%.0f "
         "outdir=%s\n",
         depth_at_leaf, hz, nk[K_TIMER_CP], t_h_med, t_h_p99, t_h2_med,
         t_h2_p99, d_h_med, d_h_p99, d_rt_cp - d_rt_null, t_e_null, i_off,
         i_null, i_cp, outdir);
  return 0;
}
