/* unwind_cost: the cost of one unwind in a signal handler at stack depth 32
 * with each unwinder (CONTPROF_UNWIND=fp, auto, dwarf: unwind.c's
 * cp_unwind_signal_mode), paired at the same signals, and whether the
 * stacks agree with libunwind's. Linked with libcontprof.a; run by
 * bench/unwind_cost.sh, which builds it twice: with frame pointers
 * (-fno-omit-frame-pointer -mno-omit-leaf-frame-pointer) and without
 * (-fomit-frame-pointer).
 *
 *   unwind_cost [SIGNALS]      (default 20000)
 *
 * running  A thread recurses until 32 frames deep (its start included) and
 *          sends itself SIGUSR1 with tgkill, SIGNALS times; each handler
 *          runs the three unwinders one after the other on the signal's
 *          context, in an order that rotates from signal to signal, each
 *          timed with CLOCK_MONOTONIC (vDSO). libunwind's trace cache is
 *          warm (its fast path: CPU samples).
 * blocked  A thread 32 frames deep blocks in read() on a pipe; the main
 *          thread sends it SIGUSR2 SIGNALS / 10 times, waiting for each
 *          handler: a wall sample of a blocked thread. libunwind unwinds
 *          it on its slow path (a thread that never ran a sample builds no
 *          trace cache: unwind.c), the walker as always.
 * here     The running thread calls, SIGNALS times, a function standing for
 *          a malloc hook, which unwinds with cp_unwind_here_mode (the
 *          allocation and lock samplers' entry) each way.
 * Prints per scenario and unwinder the median and p99 in ns, the frames
 * found, and how many stacks were equal to libunwind's. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "samplers/fpwalk.h"
#include "samplers/unwind.h"

#define DEPTH 32
#define MAXF 64
enum { M_FP, M_AUTO, M_DWARF, NMODES };
static const int mode_of[NMODES] = {CP_UNWIND_FP, CP_UNWIND_AUTO,
                                    CP_UNWIND_DWARF};
static const char *names[NMODES] = {"fp", "auto", "dwarf"};

static uint64_t *times[NMODES];
static size_t ntimes[NMODES];
static size_t max_signals = 20000;
static long agree[NMODES], frames_seen[NMODES], rotation;
static int may_build_cache;
static atomic_int handled;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* After one unwind in every mode: which agree with libunwind's. */
static void tally(uint64_t f[NMODES][MAXF + CP_UNWIND_SLACK],
                  const size_t n[NMODES]) {
  rotation++;
  for (int m = 0; m < NMODES; m++) {
    frames_seen[m] = (long)n[m];
    agree[m] += n[m] == n[M_DWARF] &&
                memcmp(f[m], f[M_DWARF], n[m] * sizeof(uint64_t)) == 0;
  }
  atomic_fetch_add(&handled, 1);
}

static void on_signal(int sig, siginfo_t *si, void *uc) {
  (void)sig;
  (void)si;
  uint64_t f[NMODES][MAXF + CP_UNWIND_SLACK];
  size_t n[NMODES];
  int tr;
  for (int k = 0; k < NMODES; k++) {
    int m = (int)((rotation + k) % NMODES);
    uint64_t t0 = now_ns();
    n[m] = cp_unwind_signal_mode(
        uc, f[m], MAXF, m == M_DWARF ? may_build_cache : 1, &tr, mode_of[m]);
    uint64_t t1 = now_ns();
    if (ntimes[m] < max_signals)
      times[m][ntimes[m]++] = t1 - t0;
  }
  tally(f, n);
}

static int pipefd[2];
static size_t per_run;
static int here_phase;

/* Stands for a malloc hook: unwinds from here, cut at its caller. */
__attribute__((noinline)) static void fake_hook(void) {
  uint64_t f[NMODES][MAXF + CP_UNWIND_SLACK];
  size_t n[NMODES];
  int tr;
  uint64_t caller = (uint64_t)__builtin_return_address(0);
  for (int k = 0; k < NMODES; k++) {
    int m = (int)((rotation + k) % NMODES);
    uint64_t t0 = now_ns();
    n[m] = cp_unwind_here_mode(f[m], MAXF, caller, &tr, mode_of[m]);
    uint64_t t1 = now_ns();
    if (ntimes[m] < max_signals)
      times[m][ntimes[m]++] = t1 - t0;
  }
  tally(f, n);
}

static void run_here(int blocked) {
  if (blocked) {
    char c;
    (void)!read(pipefd[0], &c, 1);
    return;
  }
  pid_t tid = (pid_t)syscall(SYS_gettid);
  if (here_phase) {
    for (size_t i = 0; i < per_run; i++)
      fake_hook();
    return;
  }
  for (size_t i = 0; i < per_run; i++)
    syscall(SYS_tgkill, getpid(), tid, SIGUSR1);
}

__attribute__((noinline)) static void recurse(int depth, int blocked) {
  if (depth > 0)
    recurse(depth - 1, blocked);
  else
    run_here(blocked);
  __asm__ volatile("" ::: "memory"); /* not a tail call */
}

static void *thread_main(void *arg) {
  /* clone3, start_thread, the hook's trampoline, thread_main, run_here and
   * read or the leaf: the rest of the 32. */
  recurse(DEPTH - 6, (int)(uintptr_t)arg);
  return NULL;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static void report(const char *scenario) {
  long total = atomic_load(&handled);
  for (int m = 0; m < NMODES; m++) {
    qsort(times[m], ntimes[m], sizeof(uint64_t), cmp_u64);
    size_t k = ntimes[m];
    printf("%s %s: %zu unwinds, %ld frames, median %llu ns, p99 %llu ns, "
           "equal to libunwind's %ld of %ld\n",
           scenario, names[m], k, frames_seen[m],
           k ? (unsigned long long)times[m][k / 2] : 0ull,
           k ? (unsigned long long)times[m][k * 99 / 100] : 0ull, agree[m],
           total);
    ntimes[m] = 0;
    agree[m] = 0;
  }
  atomic_store(&handled, 0);
}

int main(int argc, char **argv) {
  if (argc > 1)
    max_signals = (size_t)atol(argv[1]);
  if (max_signals < 10 || max_signals > 10000000) {
    fprintf(stderr, "usage: unwind_cost [SIGNALS]\n");
    return 2;
  }
  cp_unwind_init();
  cp_fpwalk_init();    /* the table now, not at a profiler's tick */
  cp_unwind_warm_up(); /* and libunwind's trace cache, for dwarf */
  for (int m = 0; m < NMODES; m++)
    times[m] = calloc(max_signals, sizeof(uint64_t));
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigaction(SIGUSR1, &sa, NULL);
  sigaction(SIGUSR2, &sa, NULL);

  /* Running: libunwind's fast path, its trace cache built. */
  may_build_cache = 1;
  per_run = max_signals;
  pthread_t t;
  pthread_create(&t, NULL, thread_main, (void *)0);
  pthread_join(t, NULL);
  report("running");

  here_phase = 1;
  pthread_create(&t, NULL, thread_main, (void *)0);
  pthread_join(t, NULL);
  report("here");
  here_phase = 0;

  /* Blocked in read(): libunwind's slow path. */
  may_build_cache = 0;
  if (pipe(pipefd) != 0)
    return 1;
  pthread_create(&t, NULL, thread_main, (void *)1);
  struct timespec settle = {0, 20000000};
  nanosleep(&settle, NULL);
  size_t n = max_signals / 10;
  for (size_t i = 0; i < n; i++) {
    int before = atomic_load(&handled);
    pthread_kill(t, SIGUSR2);
    while (atomic_load(&handled) == before)
      sched_yield();
  }
  (void)!write(pipefd[1], "x", 1);
  pthread_join(t, NULL);
  report("blocked");

  cp_fpwalk_stats st;
  cp_fpwalk_stats_get(&st);
  printf("objects %zu, judged built with frame pointers %zu; walks handed "
         "to libunwind %llu\n",
         st.objects, st.fp_objects, (unsigned long long)st.fell_back);
  return 0;
}
