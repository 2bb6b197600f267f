/* Safe copies: a `rep movsb` whose fault handler, when the faulting
 * instruction is that one, resumes at a landing that returns the faulting
 * address (docs/safe_reads.md). No jump buffer, no signal mask to restore:
 * the handler edits the interrupted context and returns, and the kernel's
 * sigreturn puts the thread's mask back as it was. */
#include "safe_read.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#if defined(__x86_64__)

/* cp_safe_copy(dst, src, n): rdi, rsi, rdx. A fault can only happen at
 * cp_safe_copy_insn; there rcx holds what is left and the handler sets rip
 * to cp_safe_copy_landing and rax to the faulting address. rcx, rsi and rdi
 * are the caller's to lose (System V). */
__asm__(".text\n"
        ".p2align 4\n"
        ".globl cp_safe_copy\n"
        ".hidden cp_safe_copy\n"
        ".type cp_safe_copy, @function\n"
        "cp_safe_copy:\n"
        "  endbr64\n"
        "  mov %rdx, %rcx\n"
        ".globl cp_safe_copy_insn\n"
        ".hidden cp_safe_copy_insn\n"
        "cp_safe_copy_insn:\n"
        "  rep movsb\n"
        "  xor %eax, %eax\n"
        "  ret\n"
        ".globl cp_safe_copy_landing\n"
        ".hidden cp_safe_copy_landing\n"
        "cp_safe_copy_landing:\n"
        "  ret\n"
        ".size cp_safe_copy, .-cp_safe_copy\n");

extern const char cp_safe_copy_insn[], cp_safe_copy_landing[];

static struct sigaction prev_segv, prev_bus; /* written before ours is in */
static int installed;                        /* 1: ours went in; -1: failed */
static _Atomic uint64_t faults;

static struct sigaction *prev_of(int sig) {
  return sig == SIGBUS ? &prev_bus : &prev_segv;
}

/* A fault that is not a safe copy's: what the process would have done
 * without us. Async-signal-safe. */
static void chain(int sig, siginfo_t *info, void *uc) {
  const struct sigaction *p = prev_of(sig);
  int user_sent = !info || info->si_code <= 0; /* kill, tgkill, sigqueue */
  /* sa_handler and sa_sigaction share their storage: SIG_DFL and SIG_IGN
   * read the same through either, with SA_SIGINFO or not. */
  void (*handler)(int) = p->sa_handler;
  if (handler == SIG_IGN && user_sent)
    return;
  if (handler != SIG_DFL && handler != SIG_IGN) {
    if (p->sa_flags & SA_RESETHAND) {
      struct sigaction dfl = {.sa_handler = SIG_DFL};
      sigaction(sig, &dfl, NULL);
    }
    if (p->sa_flags & SA_SIGINFO)
      p->sa_sigaction(sig, info, uc);
    else
      handler(sig);
    return;
  }
  /* The default action (a fault the kernel would not let be ignored): a
   * fault faults again once we return, a sent signal is sent again
   * (blocked until we return). */
  struct sigaction dfl = {.sa_handler = SIG_DFL};
  sigaction(sig, &dfl, NULL);
  if (user_sent)
    syscall(SYS_tgkill, getpid(), (pid_t)syscall(SYS_gettid), sig);
}

/* SIGSEGV and SIGBUS. Async-signal-safe, bounded: a fault at the safe
 * copy's instruction resumes at its landing; anything else goes to the
 * handler that was there before. */
static void on_fault(int sig, siginfo_t *info, void *ucv) {
  ucontext_t *uc = ucv;
  if (info && info->si_code > 0 && uc &&
      (uintptr_t)uc->uc_mcontext.gregs[REG_RIP] ==
          (uintptr_t)cp_safe_copy_insn) {
    uintptr_t at = (uintptr_t)info->si_addr;
    uc->uc_mcontext.gregs[REG_RAX] = (greg_t)(at ? at : 1);
    uc->uc_mcontext.gregs[REG_RIP] = (greg_t)(uintptr_t)cp_safe_copy_landing;
    atomic_fetch_add_explicit(&faults, 1, memory_order_relaxed);
    return;
  }
  chain(sig, info, ucv);
}

/* Puts on_fault in front of sig's handler. The handler in place is read
 * first and must still be the one replaced (an application thread may
 * install one meanwhile: then again), so that a fault on another thread
 * right after the swap finds prev already written. */
static int install_one(int sig) {
  struct sigaction *p = prev_of(sig);
  for (int tries = 0; tries < 8; tries++) {
    struct sigaction before, replaced, ours;
    if (sigaction(sig, NULL, &before) != 0)
      return -1;
    *p = before;
    memset(&ours, 0, sizeof ours);
    ours.sa_sigaction = on_fault;
    /* The mask and SA_NODEFER the previous handler ran with, so that it
     * runs as it expects when chained; SA_ONSTACK so that a stack overflow
     * reaches an application handler on its alternate stack. */
    ours.sa_mask = before.sa_mask;
    ours.sa_flags =
        SA_SIGINFO | SA_ONSTACK | SA_RESTART | (before.sa_flags & SA_NODEFER);
    if (sigaction(sig, &ours, &replaced) != 0)
      return -1;
    if ((replaced.sa_flags & SA_SIGINFO) == (before.sa_flags & SA_SIGINFO) &&
        (void *)replaced.sa_sigaction == (void *)before.sa_sigaction)
      return 0;
    /* Replaced meanwhile: put that one back and read it again. */
    sigaction(sig, &replaced, NULL);
  }
  return -1;
}

int cp_safe_read_install(void) {
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&lock);
  if (!installed)
    __atomic_store_n(&installed,
                     install_one(SIGSEGV) == 0 && install_one(SIGBUS) == 0 ? 1
                                                                           : -1,
                     __ATOMIC_RELEASE);
  int rc = installed > 0 ? 0 : -1;
  pthread_mutex_unlock(&lock);
  return rc;
}

static int ours(int sig) {
  struct sigaction now;
  return sigaction(sig, NULL, &now) == 0 && (now.sa_flags & SA_SIGINFO) &&
         now.sa_sigaction == on_fault;
}

int cp_safe_read_ready(void) {
  if (__atomic_load_n(&installed, __ATOMIC_ACQUIRE) <= 0)
    return 0;
  sigset_t mask;
  if (pthread_sigmask(SIG_BLOCK, NULL, &mask) != 0 ||
      sigismember(&mask, SIGSEGV) || sigismember(&mask, SIGBUS))
    return 0;
  return ours(SIGSEGV) && ours(SIGBUS);
}

uint64_t cp_safe_read_faults(void) {
  return atomic_load_explicit(&faults, memory_order_relaxed);
}

#else /* not x86-64: process_vm_readv only */

int cp_safe_read_install(void) { return -1; }
int cp_safe_read_ready(void) { return 0; }
uintptr_t cp_safe_copy(void *dst, const void *src, size_t n) {
  (void)dst, (void)src, (void)n;
  return 1;
}
uint64_t cp_safe_read_faults(void) { return 0; }

#endif
