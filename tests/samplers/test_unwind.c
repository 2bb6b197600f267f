/* unwind.c's memory accessor for libunwind (cp_access_mem): checked reads
 * of unreadable addresses (the first page, PROT_NONE, unmapped, a word
 * straddling into an unreadable page) fail instead of faulting, readable
 * ones return the word, errno is kept; and an unwind in a signal handler
 * from registers that point nowhere (no unwind info at the pc, a frame
 * pointer in the first page or in a PROT_NONE page) ends the stack instead
 * of crashing the process; and a hook's stack taken before the walker's
 * table is built is right and builds no trace cache. */
#define UNW_LOCAL_ONLY
#include <errno.h>
#include <libunwind.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <ucontext.h>
#include <unistd.h>

#include "samplers/fpwalk.h"
#include "samplers/unwind.h"
#include "test.h"

typedef int (*access_mem_fn)(unw_addr_space_t, unw_word_t, unw_word_t *, int,
                             void *);
static access_mem_fn stock_access_mem;
static char *pages; /* readable page, PROT_NONE page, unmapped page */

static void setup(void) {
  if (pages)
    return;
  stock_access_mem = unw_get_accessors(unw_local_addr_space)->access_mem;
  cp_unwind_init();
  long ps = sysconf(_SC_PAGESIZE);
  pages = mmap(NULL, 3 * (size_t)ps, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (pages == MAP_FAILED) {
    pages = NULL;
    return;
  }
  memset(pages, 0x5a, (size_t)ps);
  mprotect(pages + ps, (size_t)ps, PROT_NONE);
  munmap(pages + 2 * ps, (size_t)ps);
}

/* The accessor with libunwind 1.6's "validate" flag (bit 0 of its argument)
 * set or not; errno must be what it was before. */
static int read_word(uintptr_t addr, unw_word_t *val, int validate) {
  access_mem_fn fn = unw_get_accessors(unw_local_addr_space)->access_mem;
  errno = 12345;
  int rc = fn(unw_local_addr_space, addr, val, 0, (void *)(uintptr_t)validate);
  CHECK_EQ_INT(errno, 12345);
  return rc;
}

static void test_checked_reads(void) {
  setup();
  CHECK(pages != NULL);
  if (!pages)
    return;
  CHECK(unw_get_accessors(unw_local_addr_space)->access_mem !=
        stock_access_mem);
  long ps = sysconf(_SC_PAGESIZE);
  unw_word_t v = 0, expect;
  memset(&expect, 0x5a, sizeof expect);
  CHECK_EQ_INT(read_word((uintptr_t)pages + 8, &v, 1), 0);
  CHECK(v == expect);
  v = 0;
  CHECK_EQ_INT(read_word((uintptr_t)pages + 8, &v, 0), 0);
  CHECK(v == expect);
  uint64_t local = 0x1122334455667788ull;
  CHECK_EQ_INT(read_word((uintptr_t)&local, &v, 1), 0);
  CHECK(v == local);
  CHECK_EQ_INT(read_word(0, &v, 1), -1);
  CHECK_EQ_INT(read_word(4, &v, 1), -1);
  CHECK_EQ_INT(read_word((uintptr_t)pages + ps, &v, 1), -1);
  CHECK_EQ_INT(read_word((uintptr_t)pages + 2 * ps + 16, &v, 1), -1);
  /* The last 4 bytes of the readable page and 4 of the PROT_NONE one. */
  CHECK_EQ_INT(read_word((uintptr_t)pages + ps - 4, &v, 1), -1);
  CHECK_EQ_INT(read_word(~(uintptr_t)0 - 64, &v, 1), -1);
}

/* Registers pointing nowhere, unwound from a signal handler as the
 * samplers do. */
static volatile struct {
  uintptr_t rip, rbp, rsp;
  size_t frames;
  uint64_t first;
} bogus;

static void on_usr1(int sig, siginfo_t *si, void *ctx) {
  (void)sig;
  (void)si;
  ucontext_t uc = *(ucontext_t *)ctx;
  uc.uc_mcontext.gregs[REG_RIP] = (greg_t)bogus.rip;
  uc.uc_mcontext.gregs[REG_RBP] = (greg_t)bogus.rbp;
  uc.uc_mcontext.gregs[REG_RSP] = (greg_t)bogus.rsp;
  uint64_t frames[64 + CP_UNWIND_SLACK];
  int truncated;
  bogus.frames = cp_unwind_signal(&uc, frames, 64, 0, &truncated);
  bogus.first = frames[0];
}

static void unwind_bogus(uintptr_t rip, uintptr_t rbp, uintptr_t rsp) {
  bogus.rip = rip;
  bogus.rbp = rbp;
  bogus.rsp = rsp;
  bogus.frames = 0;
  raise(SIGUSR1);
  CHECK(bogus.frames >= 1 && bogus.frames <= 64);
  CHECK(bogus.first == rip);
}

static void test_unwind_from_bogus_registers(void) {
  setup();
  if (!pages)
    return;
  long ps = sysconf(_SC_PAGESIZE);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_usr1;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGUSR1, &sa, NULL);
  uintptr_t none = (uintptr_t)pages + (uintptr_t)ps;
  uintptr_t unmapped = (uintptr_t)pages + 2 * (uintptr_t)ps;
  /* No unwind info at any of these pcs: libunwind falls back to checked
   * reads at the pc (a PLT stub?) and through the frame pointer. */
  unwind_bogus(0x10, 8, 16);
  unwind_bogus(0x10, none + 64, none + 32);
  unwind_bogus(unmapped + 8, 8, unmapped);
  unwind_bogus(none, (uintptr_t)pages + 64, (uintptr_t)pages + 32);
  unwind_bogus((uintptr_t)pages, 4, 4);
}

/* A hook's stack (cp_unwind_here) from a known chain: hook <- chain_a <-
 * chain_b <- the test. */
static __attribute__((noinline)) size_t hook(uint64_t *frames, size_t max) {
  int truncated;
  size_t n = cp_unwind_here(frames, max,
                            (uint64_t)(uintptr_t)__builtin_return_address(0),
                            &truncated);
  __asm__ volatile("" ::: "memory"); /* not a tail call */
  return n;
}

static __attribute__((noinline)) size_t chain_a(uint64_t *frames, size_t max) {
  size_t n = hook(frames, max);
  __asm__ volatile("" ::: "memory");
  return n;
}

static __attribute__((noinline)) size_t chain_b(uint64_t *frames, size_t max) {
  size_t n = chain_a(frames, max);
  __asm__ volatile("" ::: "memory");
  return n;
}

static int in_function(uint64_t pc, void *fn) {
  return pc > (uintptr_t)fn && pc < (uintptr_t)fn + 256;
}

/* Before the walker's table is built (the profiler's first second), a
 * hook's stack is stepped from its own context with libunwind, without the
 * thread's trace cache (unwind.c): the same frames as the walker's once the
 * table is there. */
typedef struct here_run {
  uint64_t frames[64];
  size_t n;
  long faults; /* minor page faults of the thread meanwhile */
} here_run;

static __attribute__((noinline)) void *here_thread(void *arg) {
  here_run *r = arg;
  struct rusage a, b;
  getrusage(RUSAGE_THREAD, &a);
  r->n = chain_b(r->frames, 64);
  getrusage(RUSAGE_THREAD, &b);
  r->faults = b.ru_minflt - a.ru_minflt;
  __asm__ volatile("" ::: "memory");
  return NULL;
}

static void run_here(here_run *r) {
  pthread_t t;
  CHECK(pthread_create(&t, NULL, here_thread, r) == 0);
  pthread_join(t, NULL);
}

/* 40 hook stacks on a new thread; faults[i]: the page faults of the i-th. */
typedef struct many_run {
  long faults[40];
  size_t n[40];
} many_run;

static __attribute__((noinline)) void *many_thread(void *arg) {
  many_run *r = arg;
  uint64_t frames[64];
  for (int i = 0; i < 40; i++) {
    struct rusage a, b;
    getrusage(RUSAGE_THREAD, &a);
    r->n[i] = chain_b(frames, 64);
    getrusage(RUSAGE_THREAD, &b);
    r->faults[i] = b.ru_minflt - a.ru_minflt;
  }
  __asm__ volatile("" ::: "memory");
  return NULL;
}

static int woken; /* rent_paid's calls */
static void count_wake(void) { woken++; }
static size_t sample_frames; /* the last on_sample's */

static void on_sample(int sig, siginfo_t *si, void *ctx) {
  (void)sig;
  (void)si;
  uint64_t frames[64 + CP_UNWIND_SLACK];
  int truncated;
  sample_frames = cp_unwind_signal(ctx, frames, 64, 1, &truncated);
}

/* Raises SIGUSR2 at the bottom of `depth` frames of its own until the
 * rent is paid (at most 200,000 signals), and returns how many it raised.
 * Each stepped unwind then walks some 40 frames, microseconds on any
 * machine; a shallow stack's took about as long as a walk on a fast one
 * and paid nearly nothing. */
static __attribute__((noinline)) int raise_deep(int depth) {
  if (depth > 0) {
    volatile int keep = depth; /* read after the call: no tail call */
    int n = raise_deep(depth - 1);
    return n + (keep & 0);
  }
  int signals = 0;
  while (!cp_unwind_early_due() && signals < 200000) {
    raise(SIGUSR2);
    signals++;
  }
  return signals;
}

static void test_here_before_the_walker_table(void) {
  setup();
  CHECK(cp_fpwalk_object_has_fp((uintptr_t)chain_a) == -1); /* no table */
  here_run before, after;
  run_here(&before);
  CHECK(before.n >= 3);
  CHECK(in_function(before.frames[0], (void *)chain_a));
  CHECK(in_function(before.frames[1], (void *)chain_b));
  CHECK(in_function(before.frames[2], (void *)here_thread));
  /* Not libunwind's trace cache, 64 pages (one run took 66 faults with it,
   * 2 without). */
  printf("first unwind on a new thread: %ld page faults\n", before.faults);
  CHECK(before.faults < 32);

  /* A thread that keeps sampling before the first tick (unwind.c,
   * HERE_STEPS_BEFORE_CACHE): its first 32 hook stacks are stepped, and
   * the 33rd builds its trace cache (64 pages). */
  many_run *many = calloc(1, sizeof *many);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, many_thread, many) == 0);
  pthread_join(t, NULL);
  long stepped = 0;
  for (int i = 0; i < 32; i++)
    stepped += many->faults[i];
  printf("32 stepped hook stacks: %ld page faults; the 33rd: %ld\n", stepped,
         many->faults[32]);
  CHECK(stepped < 32);
  CHECK(many->faults[32] >= 48);
  CHECK(many->n[39] == before.n);
  free(many);

  /* A process whose samples went to libunwind before the first tick, for
   * as much more time than walks would have taken as building the walker's
   * table costs (3 ms), gets the table soon after (cp_unwind_early_due,
   * asked after each drain); the sample that completes it wakes the drain
   * thread, once. Here the signals' stacks are stepped from their context
   * (no trace cache before the tick), 40-odd frames each. */
  cp_unwind_on_rent_paid(count_wake);
  CHECK(!cp_unwind_early_due());
  CHECK(cp_unwind_tick_due());
  CHECK(cp_fpwalk_object_has_fp((uintptr_t)chain_a) == -1); /* not yet */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sample;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGUSR2, &sa, NULL);
  int signals = raise_deep(40);
  printf("%d samples stepped from their context paid for the table\n", signals);
  CHECK(cp_unwind_early_due());
  CHECK_EQ_INT(woken, 1);
  CHECK(sample_frames >= 3);
  cp_unwind_tick();
  CHECK(cp_fpwalk_object_has_fp((uintptr_t)chain_a) != -1);
  CHECK(!cp_unwind_early_due());
  CHECK(!cp_unwind_tick_due());
  cp_unwind_tick(); /* the profiler's first tick */
  CHECK(cp_fpwalk_object_has_fp((uintptr_t)chain_a) != -1);
  run_here(&after);
  CHECK_EQ_INT((int)after.n, (int)before.n);
  for (size_t i = 0; i < after.n && i < before.n; i++)
    CHECK(after.frames[i] == before.frames[i]);
}

TEST_MAIN(T(test_checked_reads), T(test_unwind_from_bogus_registers),
          T(test_here_before_the_walker_table))
