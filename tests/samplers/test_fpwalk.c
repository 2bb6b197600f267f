/* The frame-pointer walker (fpwalk.c) against libunwind, at the same
 * signals: this file is built with -fno-omit-frame-pointer
 * -mno-omit-leaf-frame-pointer, fpwalk_nofp.c (a shared object) with
 * -fomit-frame-pointer. Two threads run recursions with leaves of several
 * kinds (a spin loop, libc's qsort calling back, libc's memcpy and
 * snprintf, malloc and free, a recursion through the object without frame
 * pointers calling back here); SIGPROF (ITIMER_PROF) interrupts them and
 * the handler unwinds the interrupted stack both ways. The stacks the
 * walker returns must equal libunwind's (any difference is printed), and
 * with slots, the same stacks and the stack word each return address was
 * read from; `auto` must find the objects' frame-pointer verdicts (this
 * executable yes, the -fomit-frame-pointer object and Debian's libc no);
 * registers that point off the stack end the walk instead of faulting. */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <ucontext.h>
#include <unistd.h>

#include "samplers/fpwalk.h"
#include "samplers/unwind.h"
#include "test.h"

uint64_t fpwalk_nofp_recurse(int depth, void (*cb)(void), uint64_t seed);

#define MAXF 64
static atomic_long n_signals, n_walked, n_agree, n_fell_back;
static atomic_int stop_flag;
static atomic_long n_through_nofp;
/* cp_fpwalk_slots at the same signals: walks whose slots each hold their
 * frame's pc (strictly upwards), and walks that did not. */
static atomic_long n_slots_ok, n_slots_bad;
static volatile uint64_t sink;

/* Stacks that differ, kept for printing outside the handler. */
#define KEEP 4
static struct {
  uint64_t fp[MAXF], dw[MAXF];
  size_t nfp, ndw;
} kept[KEEP];
static atomic_int n_kept;
static uintptr_t fell_pc[KEEP]; /* interrupted pcs handed to libunwind */

static void on_prof(int sig, siginfo_t *si, void *ctx) {
  (void)sig;
  (void)si;
  ucontext_t *uc = ctx;
  uint64_t a[MAXF + CP_UNWIND_SLACK], b[MAXF + CP_UNWIND_SLACK];
  int ta = 0, tb = 0;
  atomic_fetch_add(&n_signals, 1);
  cp_fp_regs r = {(uintptr_t)uc->uc_mcontext.gregs[REG_RIP],
                  (uintptr_t)uc->uc_mcontext.gregs[REG_RSP],
                  (uintptr_t)uc->uc_mcontext.gregs[REG_RBP]};
  size_t na = cp_fpwalk(&r, 0, 0, CP_UNWIND_AUTO, 1, a, MAXF, &ta);
  size_t nb = cp_unwind_signal_mode(ctx, b, MAXF, 1, &tb, CP_UNWIND_DWARF);
  if (na == 0) {
    long k = atomic_fetch_add(&n_fell_back, 1);
    if (k < KEEP)
      fell_pc[k] = r.pc;
    return;
  }
  atomic_fetch_add(&n_walked, 1);
  uint64_t f[MAXF], slots[MAXF];
  int tf = 0;
  size_t nf = cp_fpwalk_slots(&r, 0, 0, CP_UNWIND_AUTO, f, slots, MAXF, &tf);
  int ok = nf == na && tf == ta && memcmp(f, a, na * sizeof *a) == 0 &&
           slots[0] == 0;
  for (size_t i = 1; ok && i < nf; i++)
    ok = slots[i] % 8 == 0 && slots[i] > slots[i - 1] &&
         *(const uint64_t *)(uintptr_t)slots[i] == f[i];
  atomic_fetch_add(ok ? &n_slots_ok : &n_slots_bad, 1);
  for (size_t i = 0; i < na; i++)
    if (a[i] - (uintptr_t)fpwalk_nofp_recurse < 256) {
      atomic_fetch_add(&n_through_nofp, 1);
      break;
    }
  if (na == nb && ta == tb && memcmp(a, b, na * sizeof *a) == 0) {
    atomic_fetch_add(&n_agree, 1);
    return;
  }
  int k = atomic_fetch_add(&n_kept, 1);
  if (k < KEEP) {
    memcpy(kept[k].fp, a, na * sizeof *a);
    memcpy(kept[k].dw, b, nb * sizeof *b);
    kept[k].nfp = na;
    kept[k].ndw = nb;
  }
}

__attribute__((noinline)) static void spin(void) {
  uint64_t x = sink;
  for (int i = 0; i < 20000; i++)
    x = x * 6364136223846793005ull + 1442695040888963407ull;
  sink = x;
}

static int compare_spinning(const void *p, const void *q) {
  uint64_t x = sink;
  for (int i = 0; i < 50; i++)
    x = x * 6364136223846793005ull + 1;
  sink = x;
  return (*(const int *)p > *(const int *)q) -
         (*(const int *)p < *(const int *)q);
}

__attribute__((noinline)) static void leaf_work(int kind) {
  switch (kind) {
  case 0:
    spin();
    break;
  case 1: {
    int v[512];
    for (int i = 0; i < 512; i++)
      v[i] = (int)((i * 7919) % 512);
    qsort(v, 512, sizeof *v, compare_spinning);
    sink += (uint64_t)v[3];
    break;
  }
  case 2: {
    static char src[1 << 16], dst[1 << 16];
    char line[128];
    for (int i = 0; i < 20; i++) {
      memcpy(dst, src, sizeof dst);
      snprintf(line, sizeof line, "%d %f %s", i, i * 1.5, "x");
      sink += (uint64_t)dst[i] + (uint64_t)line[0];
    }
    break;
  }
  case 3:
    for (int i = 0; i < 200; i++) {
      void *p = malloc((size_t)(16 + i * 64));
      sink += (uintptr_t)p;
      free(p);
    }
    break;
  default:
    sink += fpwalk_nofp_recurse(6, spin, sink);
    break;
  }
}

__attribute__((noinline)) static void recurse(int depth, int kind) {
  if (depth > 0)
    recurse(depth - 1, kind);
  else
    leaf_work(kind);
  __asm__ volatile("" ::: "memory"); /* not a tail call */
}

static void *worker(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg;
  while (!atomic_load(&stop_flag)) {
    int kind = (int)(rand_r(&seed) % 5);
    recurse(3 + (int)(rand_r(&seed) % 20), kind);
  }
  return NULL;
}

static void test_agrees_with_libunwind(void) {
  cp_unwind_init();
  /* The table is left to the profiler's first tick (a refresh), so that a
   * process that ends before it never pays for it. */
  CHECK(cp_fpwalk_object_has_fp((uintptr_t)recurse) == -1);
  cp_fpwalk_refresh();
  /* Past the prologue (push %rbp; mov %rsp,%rbp). */
  CHECK(cp_fpwalk_function_has_fp((uintptr_t)recurse + 8) == 1);
  CHECK(cp_fpwalk_function_has_fp((uintptr_t)fpwalk_nofp_recurse + 8) == 0);
  CHECK(cp_fpwalk_object_has_fp((uintptr_t)fpwalk_nofp_recurse) == 0);
  CHECK(cp_fpwalk_object_has_fp((uintptr_t)qsort) == 0); /* Debian 12 */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_prof;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigaction(SIGPROF, &sa, NULL);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, worker, (void *)1) == 0);
  struct itimerval it = {{0, 2000}, {0, 2000}};
  setitimer(ITIMER_PROF, &it, NULL);
  /* Until enough signals (no timing assertion: the count decides). */
  unsigned seed = 2;
  while (atomic_load(&n_signals) < 1500) {
    int kind = (int)(rand_r(&seed) % 5);
    recurse(3 + (int)(rand_r(&seed) % 20), kind);
  }
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_PROF, &off, NULL);
  atomic_store(&stop_flag, 1);
  pthread_join(t, NULL);
  long walked = atomic_load(&n_walked), agree = atomic_load(&n_agree);
  long fell = atomic_load(&n_fell_back), sigs = atomic_load(&n_signals);
  long nofp = atomic_load(&n_through_nofp);
  printf("signals %ld: walked %ld (agree %ld; %ld through the object "
         "without frame pointers), handed to libunwind %ld\n",
         sigs, walked, agree, nofp, fell);
  for (long i = 0; i < fell && i < KEEP; i++) {
    Dl_info info;
    int found = dladdr((void *)fell_pc[i], &info);
    printf(
        "handed to libunwind at %s+0x%lx (%s)\n",
        found && info.dli_fname ? info.dli_fname : "?",
        (unsigned long)(fell_pc[i] - (found ? (uintptr_t)info.dli_fbase : 0)),
        found && info.dli_sname ? info.dli_sname : "?");
  }
  int k = atomic_load(&n_kept);
  for (int i = 0; i < k && i < KEEP; i++) {
    printf("differs:\n  fp   ");
    for (size_t j = 0; j < kept[i].nfp; j++)
      printf(" %lx", (unsigned long)kept[i].fp[j]);
    printf("\n  dwarf");
    for (size_t j = 0; j < kept[i].ndw; j++)
      printf(" %lx", (unsigned long)kept[i].dw[j]);
    printf("\n");
  }
  /* Every walked stack equal to libunwind's; most of them walked (the rest:
   * see docs/signals.md, "Frame pointers"). */
  CHECK(walked > 0);
  CHECK(nofp > 0);
  CHECK(agree == walked);
  CHECK(walked * 100 >= sigs * 98);
  /* With slots (parked stacks, samplers/wall.c): the same stacks, each
   * return address found where the walker says it read it. */
  long slots_ok = atomic_load(&n_slots_ok),
       slots_bad = atomic_load(&n_slots_bad);
  printf("with slots: %ld right, %ld wrong\n", slots_ok, slots_bad);
  CHECK(slots_bad == 0);
  CHECK(slots_ok == walked);
}

/* Registers pointing off the stack or into unreadable memory: the walker
 * ends (fp) or gives up (auto) without a fault. */
static void test_bogus_registers(void) {
  long ps = sysconf(_SC_PAGESIZE);
  char *none =
      mmap(NULL, (size_t)ps, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(none != MAP_FAILED);
  uint64_t frames[MAXF];
  int tr;
  uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
  /* A stack whose frame pointers lead off it, to an unreadable page, to an
   * odd or descending address, in an otherwise readable stack. */
  uintptr_t bps[] = {(uintptr_t)none, 8, sp + 3, sp - 64, ~(uintptr_t)15, 0};
  for (size_t i = 0; i < sizeof bps / sizeof *bps; i++)
    for (int mode = CP_UNWIND_AUTO; mode <= CP_UNWIND_FP; mode++) {
      cp_fp_regs r = {(uintptr_t)recurse + 4, sp, bps[i]};
      size_t n =
          cp_fpwalk(&r, 0, 0, (cp_unwind_mode)mode, 1, frames, MAXF, &tr);
      CHECK(n <= MAXF);
      if (mode == CP_UNWIND_FP)
        CHECK(n >= 1 && frames[0] == r.pc);
    }
  /* sp off any stack known: handed to libunwind. */
  cp_fp_regs r = {(uintptr_t)recurse + 4, (uintptr_t)none, (uintptr_t)none};
  CHECK(cp_fpwalk(&r, 0, 0, CP_UNWIND_FP, 1, frames, MAXF, &tr) == 0);
  CHECK(cp_fpwalk(&r, 0, 0, CP_UNWIND_AUTO, 1, frames, MAXF, &tr) == 0);
  munmap(none, (size_t)ps);
}

TEST_MAIN(T(test_agrees_with_libunwind), T(test_bogus_registers))
