/* unwind_validate: the cost of one unwind in a signal handler with
 * libunwind's own address check (a pipe it keeps open: read and write one
 * byte per page checked) against contprof's (unwind.c's cp_access_mem: one
 * rt_sigprocmask system call, no descriptor). Linked with libcontprof.a.
 *
 *   unwind_validate [ROUNDS [SIGNALS_PER_PHASE]]      (defaults: 10 2000)
 *
 * A fresh thread recurses until 32 frames deep and sends itself SIGUSR1 with
 * tgkill; the handler times cp_unwind_signal on the signal's context
 * (CLOCK_MONOTONIC, vDSO). Two paths, each on its own thread:
 *   slow  may_build_cache = 0: unw_init_local2 and unw_step from the context,
 *         every memory read checked (libunwind's CONSERVATIVE_CHECKS)
 *   fast  may_build_cache = 1: unw_backtrace with the thread's warm trace
 *         cache (reads checked only after a cache miss or a guessed frame)
 * For each, ROUNDS rounds of two phases in alternating order: the local
 * address space's access_mem set back to libunwind's ("libunwind") or to
 * contprof's ("contprof"). Prints, per path and phase, the median and p99 of
 * the handler's unwind time over all signals, in ns. */
#define _GNU_SOURCE
#define UNW_LOCAL_ONLY
#include <libunwind.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "samplers/unwind.h"

#define DEPTH 32
#define MAX_SIGNALS 200000

typedef int (*access_mem_fn)(unw_addr_space_t, unw_word_t, unw_word_t *, int,
                             void *);
static access_mem_fn stock, ours;
static unw_accessors_t *acc;
static int rounds = 10, per_phase = 2000;
static int may_build_cache;
static uint64_t *samples[2];
static size_t nsamples[2];
static int phase;
static size_t frames_seen;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void on_signal(int sig, siginfo_t *si, void *uc) {
  (void)sig;
  (void)si;
  uint64_t frames[64 + CP_UNWIND_SLACK];
  int truncated;
  uint64_t t0 = now_ns();
  size_t n = cp_unwind_signal(uc, frames, 64, may_build_cache, &truncated);
  uint64_t t1 = now_ns();
  frames_seen = n;
  if (nsamples[phase] < MAX_SIGNALS)
    samples[phase][nsamples[phase]++] = t1 - t0;
}

static void measure(void) {
  pid_t tid = (pid_t)syscall(SYS_gettid);
  for (int r = 0; r < rounds; r++)
    for (int k = 0; k < 2; k++) {
      phase = (r + k) % 2;
      acc->access_mem = phase ? ours : stock;
      for (int i = 0; i < per_phase; i++)
        syscall(SYS_tgkill, getpid(), tid, SIGUSR1);
    }
  acc->access_mem = ours;
}

__attribute__((noinline)) static void recurse(int depth) {
  if (depth > 0)
    recurse(depth - 1);
  else
    measure();
  __asm__ volatile("" ::: "memory"); /* not a tail call */
}

static void *thread_main(void *arg) {
  (void)arg;
  recurse(DEPTH - 4); /* thread start, thread_main, measure: the rest */
  return NULL;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static void report(const char *path) {
  static const char *names[2] = {"libunwind", "contprof"};
  for (int p = 0; p < 2; p++) {
    qsort(samples[p], nsamples[p], sizeof(uint64_t), cmp_u64);
    size_t n = nsamples[p];
    printf("%s path, %s check: %zu unwinds of %zu frames, median %llu ns, "
           "p99 %llu ns\n",
           path, names[p], n, frames_seen,
           n ? (unsigned long long)samples[p][n / 2] : 0ull,
           n ? (unsigned long long)samples[p][n * 99 / 100] : 0ull);
    nsamples[p] = 0;
  }
}

int main(int argc, char **argv) {
  if (argc > 1)
    rounds = atoi(argv[1]);
  if (argc > 2)
    per_phase = atoi(argv[2]);
  if (rounds < 1 || per_phase < 1 || (long)rounds * per_phase > MAX_SIGNALS) {
    fprintf(stderr, "usage: unwind_validate [ROUNDS [SIGNALS_PER_PHASE]]\n");
    return 2;
  }
  acc = unw_get_accessors(unw_local_addr_space);
  stock = acc->access_mem;
  cp_unwind_init();
  cp_unwind_warm_up(); /* libunwind's trace cache now, not at a tick */
  ours = acc->access_mem;
  if (ours == stock) {
    fprintf(stderr, "unwind_validate: contprof did not replace access_mem\n");
    return 1;
  }
  for (int p = 0; p < 2; p++)
    samples[p] = calloc(MAX_SIGNALS, sizeof(uint64_t));
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigaction(SIGUSR1, &sa, NULL);
  const char *paths[2] = {"slow", "fast"};
  for (int m = 0; m < 2; m++) {
    may_build_cache = m;
    pthread_t t;
    pthread_create(&t, NULL, thread_main, NULL);
    pthread_join(t, NULL);
    report(paths[m]);
  }
  return 0;
}
