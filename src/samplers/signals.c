/* Signal choice, installation and chaining (see signals.h); the sigaction
 * hook (interpose/signal_calls.c) asks here what to do with one of our signals.
 */
#include "signals.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "common.h"
#include "interpose/real.h"
#include "passthrough.h"
#include "thread_state.h"

/* previous[sig]: the application's disposition of one of our signals, which
 * cp_signal_chain calls. Written under `lock`, read by handlers. */
static struct sigaction previous[_NSIG];
static cp_signal_handler installed[_NSIG];
/* claimed[sig]: the application set its own handler for sig, one of ours,
 * after we installed ours. */
static _Atomic int claimed[_NSIG];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

#define real_sigaction cp_real_sigaction

static int is_default(const struct sigaction *sa) {
  return !(sa->sa_flags & SA_SIGINFO) && sa->sa_handler == SIG_DFL;
}

/* Whether sa runs a function of the application's: with SA_SIGINFO a
 * non-null sa_sigaction (null is the default: the two share a union),
 * else an sa_handler that is neither SIG_DFL nor SIG_IGN. */
static int has_handler(const struct sigaction *sa) {
  return (sa->sa_flags & SA_SIGINFO)
             ? sa->sa_sigaction != NULL
             : sa->sa_handler != SIG_DFL && sa->sa_handler != SIG_IGN;
}

static int is_free(int sig) {
  struct sigaction sa;
  return real_sigaction(sig, NULL, &sa) == 0 && is_default(&sa);
}

/* Our handlers block every signal but the synchronous ones (a fault is
 * delivered whatever the mask). Two sampling signals pending at once are
 * then handled one after the other, instead of the second landing on the
 * first instruction of the first handler (and being sampled there); and an
 * application signal that comes with ours at a blocking call waits until
 * ours returns, where cp_signal_interrupted_call sees it pending and leaves
 * the call's EINTR to it. The application's handlers chained from ours get
 * their own mask back (cp_signal_chain). */
static const int synchronous[] = {SIGSEGV, SIGBUS,  SIGILL,
                                  SIGFPE,  SIGTRAP, SIGSYS};

static void sampling_mask(sigset_t *mask) {
  sigfillset(mask);
  for (size_t i = 0; i < sizeof synchronous / sizeof *synchronous; i++)
    sigdelset(mask, synchronous[i]);
}

/* The application's handlers that run on its alternate stack (SA_ONSTACK)
 * block the sampling signals: that stack is often small (SIGSTKSZ, 8 KiB in
 * old binaries) and mostly used by the handler already, and ours (a second
 * kernel signal frame of 3.4 KiB with AVX-512, then the unwinder) would
 * overflow it, silently below it, or be killed by the kernel with SIGSEGV
 * when even the frame does not fit. A sampling signal that comes meanwhile
 * stays pending and is handled when the handler returns (or siglongjmps
 * out, restoring the mask). Returns whether act was changed. */
static int runs_on_alt_stack(const struct sigaction *act) {
  return (act->sa_flags & SA_ONSTACK) && has_handler(act);
}

int cp_signals_mask_on_alt_stack(struct sigaction *act) {
  if (!runs_on_alt_stack(act))
    return 0;
  int changed = 0;
  for (int s = 1; s < _NSIG; s++)
    if (__atomic_load_n(&installed[s], __ATOMIC_ACQUIRE) &&
        !sigismember(&act->sa_mask, s)) {
      sigaddset(&act->sa_mask, s);
      changed = 1;
    }
  return changed;
}

/* Bit s - 1: the application's handler of signal s runs on the alternate
 * stack, as far as known: the first install reads every signal's
 * disposition (64 system calls, each about 1 us on a VM), the sigaction
 * hook reports those set later (cp_signals_on_app_handler), and each later
 * install reads and masks those only, when every sigaction call comes to
 * the hook (preloaded or linked; else every install reads them all). */
static _Atomic uint64_t app_on_alt_stack;
static int app_handlers_read;

void cp_signals_on_app_handler(int sig, const struct sigaction *act) {
  if (sig <= 0 || sig > 64 || !act)
    return;
  uint64_t bit = 1ull << (sig - 1);
  if (runs_on_alt_stack(act))
    atomic_fetch_or(&app_on_alt_stack, bit);
  else
    atomic_fetch_and(&app_on_alt_stack, ~bit);
}

/* Caller holds `lock`. The application's handlers on the alternate stack
 * block every signal installed so far. */
static void mask_app_handlers_locked(void) {
  for (int s = 1; s < _NSIG && s <= 64; s++) {
    struct sigaction app;
    if (installed[s] || (app_handlers_read &&
                         !(atomic_load(&app_on_alt_stack) & (1ull << (s - 1)))))
      continue;
    if (real_sigaction(s, NULL, &app) != 0)
      continue;
    cp_signals_on_app_handler(s, &app);
    if (cp_signals_mask_on_alt_stack(&app))
      real_sigaction(s, &app, NULL);
  }
  app_handlers_read = cp_interpose_sees_sigaction();
}

void cp_signal_sampling_set(sigset_t *set) {
  for (int s = 1; s < _NSIG; s++)
    if (__atomic_load_n(&installed[s], __ATOMIC_ACQUIRE))
      sigaddset(set, s);
}

void cp_signal_remove_sampling(sigset_t *set) {
  for (int s = 1; s < _NSIG; s++)
    if (__atomic_load_n(&installed[s], __ATOMIC_ACQUIRE))
      sigdelset(set, s);
}

/* The disposition of one of our handlers: SA_RESTART, and every signal but
 * the synchronous ones blocked while it runs (sampling_mask). */
static struct sigaction ours_action(cp_signal_handler handler) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = handler;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sampling_mask(&sa.sa_mask);
  return sa;
}

static int install(int sig, cp_signal_handler handler) {
  struct sigaction sa = ours_action(handler);
  if (real_sigaction(sig, &sa, &previous[sig]) != 0)
    return -1;
  installed[sig] = handler;
  for (int s = 1; s < _NSIG; s++) {
    if (!installed[s])
      continue;
    sa = ours_action(installed[s]);
    real_sigaction(s, &sa, NULL);
  }
  /* Handlers the application set before we started. */
  mask_app_handlers_locked();
  return sig;
}

int cp_signal_install(int preferred, cp_signal_handler handler) {
  int sig = -1;
  pthread_mutex_lock(&lock);
  /* Already ours (a restart): keep it, the one not claimed by the
   * application if there are two (cp_signal_install_rt). */
  for (int s = 1; s < _NSIG && sig < 0; s++)
    if (installed[s] == handler && !atomic_load(&claimed[s]))
      sig = s;
  for (int s = 1; s < _NSIG && sig < 0; s++)
    if (installed[s] == handler)
      sig = s;
  if (sig < 0 && is_free(preferred))
    sig = install(preferred, handler);
  for (int s = SIGRTMIN + 4; sig < 0 && s <= SIGRTMAX; s++)
    if (!installed[s] && is_free(s)) {
      sig = install(s, handler);
      if (sig > 0 && preferred > 0)
        cp_info("signal %d is in use by the application; sampling with "
                "signal %d",
                preferred, sig);
    }
  pthread_mutex_unlock(&lock);
  if (sig < 0)
    cp_error("no free signal for sampling");
  return sig;
}

int cp_signal_claimed(int sig) {
  return sig > 0 && sig < _NSIG &&
         atomic_load_explicit(&claimed[sig], memory_order_relaxed);
}

int cp_signal_move_to_rt(int old, cp_signal_handler handler,
                         const char *samples, int *failed) {
  int sig = -1;
  pthread_mutex_lock(&lock);
  for (int s = SIGRTMIN + 4; s <= SIGRTMAX && sig < 0; s++)
    if (installed[s] == handler)
      sig = s;
  for (int s = SIGRTMIN + 4; sig < 0 && s <= SIGRTMAX; s++)
    if (!installed[s] && is_free(s))
      sig = install(s, handler);
  pthread_mutex_unlock(&lock);
  if (sig < 0) {
    if (!(*failed)++)
      cp_warn("the application handles signal %d, which samples %s time, "
              "and no real-time signal is free: a signal it sends to one "
              "thread may merge with ours",
              old, samples);
    return -1;
  }
  cp_info("the application handles signal %d: %s samples now come with "
          "signal %d",
          old, samples, sig);
  return sig;
}

/* Spawns in progress, under `lock` (cp_signals_before_spawn): the
 * handlers come back when the last ends, not while another thread's child
 * may still be made. */
static int spawning;

void cp_signals_after_fork_child(void) {
  pthread_mutex_init(&lock, NULL);
  /* Forked while another thread spawned: the dispositions it set aside
   * came with the fork, and that thread did not. */
  if (spawning) {
    spawning = 0;
    cp_signals_exec_failed();
  }
}

void cp_signals_discard_pending(void) {
  sigset_t ours, old;
  sampling_mask(&ours);
  pthread_sigmask(SIG_BLOCK, &ours, &old);
  const struct timespec zero = {0, 0};
  /* Bounded: each call takes one pending signal (real-time ones queue). */
  for (int i = 0; i < 1024; i++) {
    int sig = (int)syscall(SYS_rt_sigtimedwait, &ours, NULL, &zero,
                           (size_t)(_NSIG / 8));
    if (sig <= 0)
      break;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* Async-signal-safe. */
CP_PASSTHROUGH void cp_signal_chain(int sig, siginfo_t *info, void *ucontext) {
  const struct sigaction *old = &previous[sig];
  if (!has_handler(old))
    return; /* SIG_DFL or SIG_IGN: a stray signal of ours is ignored */
  if (ucontext) {
    /* The mask the kernel would have set for the application's handler:
     * the interrupted one, its sa_mask, the signal itself unless
     * SA_NODEFER, and our signals (install). Ours blocks more. */
    sigset_t mask = ((const ucontext_t *)ucontext)->uc_sigmask;
    for (int s = 1; s < _NSIG; s++)
      if (sigismember(&old->sa_mask, s) == 1 ||
          __atomic_load_n(&installed[s], __ATOMIC_ACQUIRE))
        sigaddset(&mask, s);
    if (!(old->sa_flags & SA_NODEFER))
      sigaddset(&mask, sig);
    pthread_sigmask(SIG_SETMASK, &mask, NULL);
  }
  cp_thread.app_signals++; /* its handler runs (interpose/waits.c) */
  if (old->sa_flags & SA_SIGINFO)
    old->sa_sigaction(sig, info, ucontext);
  else
    old->sa_handler(sig);
}

int cp_signals_on_sigaction(int sig, const struct sigaction *act,
                            struct sigaction *old) {
  if (sig <= 0 || sig >= _NSIG ||
      !__atomic_load_n(&installed[sig], __ATOMIC_ACQUIRE))
    return 0;
  /* One of ours: the application's handler becomes the chain target. */
  pthread_mutex_lock(&lock);
  if (old)
    *old = previous[sig];
  if (act) {
    previous[sig] = *act;
    /* A handler of its own on a standard signal: its thread-directed
     * signals would merge with ours (cp_signal_claimed). */
    if (sig < SIGRTMIN && has_handler(act))
      atomic_store_explicit(&claimed[sig], 1, memory_order_relaxed);
  }
  pthread_mutex_unlock(&lock);
  return 1;
}

/* The SIGIO guard (cp_signal_guard_sigio): wanted once a perf event
 * signals with a real-time signal. From then on our absorber is SIGIO's
 * handler whatever the application sets; what it sets (the default, SIG_IGN
 * or a handler of its own) is kept in previous[SIGIO] (SIGIO is never a
 * sampling signal), read back as its own, and a handler of its own is
 * chained. */
static _Atomic int sigio_guarded;
static int (*_Atomic sigio_lost)(void *ucontext);
static atomic_ullong sigio_absorbed;

/* Async-signal-safe, bounded: the kernel's SIGIO in place of a real-time
 * signal it could not queue (SI_KERNEL), or the application's own (a
 * descriptor with O_ASYNC: SI_KERNEL too; kill, a timer). Both may come as
 * one: SIGIOs merge. So `lost` judges a SI_KERNEL one (see
 * cpu_on_lost_signal), and the application's handler,
 * if it has one, is called either way: a SIGIO it did not expect is what
 * O_ASYNC code already handles (merged signals make it poll), a SIGIO of its
 * own that it did not get would leave it waiting. Under SIG_IGN nothing
 * more happens. Under the default, a SIGIO that a process sent (kill,
 * sigqueue: si_code at most 0, never the kernel's) ends the process as the
 * default would have; one the kernel sent does not, since it may be ours. */
CP_PASSTHROUGH static void absorb_sigio(int sig, siginfo_t *info,
                                        void *ucontext) {
  int saved_errno = errno;
  int (*lost)(void *) = atomic_load_explicit(&sigio_lost, memory_order_acquire);
  if (lost && info && info->si_code == SI_KERNEL && lost(ucontext))
    atomic_fetch_add_explicit(&sigio_absorbed, 1, memory_order_relaxed);
  errno = saved_errno;
  if (info && info->si_code <= 0 && is_default(&previous[SIGIO])) {
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    real_sigaction(SIGIO, &dfl, NULL);
    sigset_t io;
    sigemptyset(&io);
    sigaddset(&io, SIGIO);
    raise(SIGIO);
    pthread_sigmask(SIG_UNBLOCK, &io, NULL); /* the default action */
    return;
  }
  cp_signal_chain(sig, info, ucontext);
}

static int is_absorber(const struct sigaction *sa) {
  return (sa->sa_flags & SA_SIGINFO) && sa->sa_sigaction == absorb_sigio;
}

/* Callers hold `lock` (or are a vfork child, cp_signals_exec_failed). A
 * system call our SIGIO interrupts is restarted, as the default or SIG_IGN
 * would have left it running; one the application's own handler
 * interrupts, as its SA_RESTART says. */
static void install_absorber(const struct sigaction *app) {
  struct sigaction sa = ours_action(absorb_sigio); /* for a sampling signal */
  if (has_handler(app) && !(app->sa_flags & SA_RESTART))
    sa.sa_flags &= ~SA_RESTART;
  real_sigaction(SIGIO, &sa, NULL);
}

void cp_signal_guard_sigio(int (*lost)(void *ucontext)) {
  atomic_store_explicit(&sigio_lost, lost, memory_order_release);
  pthread_mutex_lock(&lock);
  if (!atomic_load(&sigio_guarded)) {
    struct sigaction now;
    if (real_sigaction(SIGIO, NULL, &now) == 0) {
      if (!is_absorber(&now)) /* not a restart */
        previous[SIGIO] = now;
      install_absorber(&previous[SIGIO]);
      atomic_store(&sigio_guarded, 1);
    }
  }
  pthread_mutex_unlock(&lock);
}

/* Whether exec should find sig ignored: the application ignores it, and
 * a handler of ours stands in its place (exec resets handlers to the
 * default and keeps ignored signals ignored). */
static int ignored_under_ours(int sig) {
  const struct sigaction *app = &previous[sig];
  int ours = sig == SIGIO
                 ? atomic_load(&sigio_guarded)
                 : __atomic_load_n(&installed[sig], __ATOMIC_ACQUIRE) != NULL;
  return ours && !(app->sa_flags & SA_SIGINFO) && app->sa_handler == SIG_IGN;
}

void cp_signals_before_exec(void) {
  struct sigaction ign;
  memset(&ign, 0, sizeof ign);
  ign.sa_handler = SIG_IGN;
  for (int s = 1; s < _NSIG; s++)
    if (ignored_under_ours(s))
      real_sigaction(s, &ign, NULL);
}

void cp_signals_exec_failed(void) {
  for (int s = 1; s < _NSIG; s++) {
    if (!ignored_under_ours(s))
      continue;
    if (s == SIGIO) {
      install_absorber(&previous[SIGIO]);
      continue;
    }
    struct sigaction sa =
        ours_action(__atomic_load_n(&installed[s], __ATOMIC_ACQUIRE));
    real_sigaction(s, &sa, NULL);
  }
}

void cp_signals_before_spawn(void) {
  pthread_mutex_lock(&lock);
  if (spawning++ == 0)
    cp_signals_before_exec();
  pthread_mutex_unlock(&lock);
}

void cp_signals_after_spawn(void) {
  pthread_mutex_lock(&lock);
  if (--spawning == 0)
    cp_signals_exec_failed();
  pthread_mutex_unlock(&lock);
}

unsigned long long cp_signal_sigio_absorbed(void) {
  return atomic_load_explicit(&sigio_absorbed, memory_order_relaxed);
}

int cp_signals_on_sigio(int sig, const struct sigaction *act,
                        struct sigaction *old) {
  if (sig != SIGIO || !atomic_load(&sigio_guarded))
    return 0;
  pthread_mutex_lock(&lock);
  if (old)
    *old = previous[SIGIO];
  if (act) {
    previous[SIGIO] = *act;
    install_absorber(act);
  }
  pthread_mutex_unlock(&lock);
  return 1;
}

/* ---- The application's handlers, counted ---------------------------------
 * A wait hook retries a call that one of our signals cut short, unless an
 * application handler ran meanwhile (interpose/waits.c). To know that one
 * ran, the handlers the application sets for asynchronous signals are
 * installed through cp_count_app_signal (a frame profiles leave out:
 * passthrough.h), which counts them
 * (cp_thread.app_signals) and calls the application's. Synchronous signals are
 * left alone: they come from the thread's own instruction, never at a blocking
 * call, and fault handlers are the ones that inspect what runs them. */

/* The application's handler of each wrapped signal, packed so that a
 * handler reads it in one load: the function, bit 63 for SA_SIGINFO (user
 * addresses are below 2^47). 0: not wrapped. Written under `lock`. */
#define APP_SIGINFO (1ull << 63)
static _Atomic uint64_t app_entry[_NSIG];
/* What the application set, as it reads it back. Under `lock`. */
static struct sigaction app_act[_NSIG];

/* Async-signal-safe, bounded: TLS increments, then the application's
 * handler. The handlers running are counted with the frame of the
 * outermost's wrapper (this function): a handler left with longjmp or
 * siglongjmp never comes back to uncount itself, and the thread is then
 * known to be past it when it runs above that frame again (docs/signals.md,
 * "How the process ends"). A handler entered above the frame counted runs
 * after those were left: the count starts again from it. Both are put back
 * as they were when the handler returns (one on the alternate stack may be
 * above a handler it interrupted). */
CP_PASSTHROUGH static void cp_count_app_signal(int sig, siginfo_t *info,
                                               void *ucontext) {
  cp_thread.app_signals++;
  uint64_t e = atomic_load_explicit(&app_entry[sig], memory_order_acquire);
  uintptr_t fn = (uintptr_t)(e & ~APP_SIGINFO);
  if (!fn)
    return; /* set to the default or ignored as this one came */
  unsigned depth = cp_thread.app_handler_depth;
  uintptr_t frame = cp_thread.app_handler_frame;
  uintptr_t here = (uintptr_t)__builtin_frame_address(0);
  if (!depth || here > frame) {
    cp_thread.app_handler_depth = 0;
    cp_thread.app_handler_frame = here;
  }
  cp_thread.app_handler_depth++;
  if (e & APP_SIGINFO)
    ((void (*)(int, siginfo_t *, void *))fn)(sig, info, ucontext);
  else
    ((void (*)(int))fn)(sig);
  cp_thread.app_handler_depth = depth;
  cp_thread.app_handler_frame = frame;
}

int cp_signals_maybe_in_handler(const void *caller_frame) {
  if (cp_thread.in_handler)
    return 1;
  /* Below the outermost counted handler's wrapper: in it (or in code that
   * switched stacks, which the alternate-stack check below may tell).
   * Above it, on the same stack: that handler was left with longjmp, and
   * every handler it interrupted before it. */
  if (cp_thread.app_handler_depth &&
      (uintptr_t)caller_frame <= cp_thread.app_handler_frame)
    return 1;
  /* A handler of a synchronous signal (not wrapped: above) runs with its
   * signal blocked, unless SA_NODEFER; code outside a handler seldom blocks
   * one of them. */
  sigset_t cur;
  if (pthread_sigmask(SIG_BLOCK, NULL, &cur) != 0)
    return 1;
  for (size_t i = 0; i < sizeof synchronous / sizeof *synchronous; i++)
    if (sigismember(&cur, synchronous[i]) == 1)
      return 1;
  /* On the alternate signal stack, where fault handlers run (one set with
   * SA_NODEFER leaves its signal unblocked). The system call: the
   * sigaltstack hook is for the application's calls. */
  stack_t ss;
  if (syscall(SYS_sigaltstack, NULL, &ss) == 0 && (ss.ss_flags & SS_ONSTACK))
    return 1;
  return 0;
}

static int is_app_handler(const struct sigaction *sa) {
  return (sa->sa_flags & SA_SIGINFO) && sa->sa_sigaction == cp_count_app_signal;
}

static int wrappable(int sig) {
  if (sig <= 0 || sig >= _NSIG || sig == SIGKILL || sig == SIGSTOP)
    return 0;
  for (size_t i = 0; i < sizeof synchronous / sizeof *synchronous; i++)
    if (sig == synchronous[i])
      return 0;
  return 1;
}

int cp_signals_wrap_app(int sig, const struct sigaction *act,
                        struct sigaction *old) {
  if (!wrappable(sig) || __atomic_load_n(&installed[sig], __ATOMIC_ACQUIRE))
    return 0;
  /* sigaction may be called from a handler: this thread must not take the
   * lock again from one. */
  sigset_t all, mask;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &mask);
  pthread_mutex_lock(&lock);
  struct sigaction cur;
  int rc = real_sigaction(sig, NULL, &cur);
  if (rc == 0 && old) {
    *old = cur;
    if (is_app_handler(&cur)) {
      *old = app_act[sig];
    } else if (atomic_load(&app_entry[sig]) &&
               (app_act[sig].sa_flags & SA_RESETHAND) && !has_handler(&cur) &&
               cur.sa_handler != SIG_IGN) {
      /* SA_RESETHAND ran: the kernel set the handler to the default and
       * kept the flags, the application's (ours add SA_SIGINFO). */
      *old = app_act[sig];
      old->sa_handler = SIG_DFL;
    }
  }
  if (rc == 0 && act) {
    if (has_handler(act)) {
      app_act[sig] = *act;
      uint64_t e = (uint64_t)(uintptr_t)((act->sa_flags & SA_SIGINFO)
                                             ? (void *)act->sa_sigaction
                                             : (void *)act->sa_handler) |
                   ((act->sa_flags & SA_SIGINFO) ? APP_SIGINFO : 0);
      atomic_store_explicit(&app_entry[sig], e, memory_order_release);
      struct sigaction sa = *act;
      sa.sa_sigaction = cp_count_app_signal;
      sa.sa_flags |= SA_SIGINFO;
      rc = real_sigaction(sig, &sa, NULL);
    } else {
      rc = real_sigaction(sig, act, NULL);
      if (rc == 0)
        atomic_store_explicit(&app_entry[sig], 0, memory_order_release);
    }
  }
  pthread_mutex_unlock(&lock);
  pthread_sigmask(SIG_SETMASK, &mask, NULL);
  return rc == 0 ? 1 : -1;
}

/* Async-signal-safe: whether a signal other than ours, with a handler and
 * not blocked where the handler returns to, is pending: it will be
 * delivered at the same point when ours returns (sampling_mask held it). */
static int application_signal_follows(const ucontext_t *uc) {
  sigset_t pending;
  if (sigpending(&pending) != 0)
    return 0;
  for (int s = 1; s < _NSIG; s++) {
    if (sigismember(&pending, s) != 1 || sigismember(&uc->uc_sigmask, s) == 1 ||
        __atomic_load_n(&installed[s], __ATOMIC_ACQUIRE))
      continue;
    struct sigaction sa;
    if (real_sigaction(s, NULL, &sa) == 0 && has_handler(&sa) &&
        !is_absorber(&sa))
      return 1;
  }
  return 0;
}

void cp_signal_interrupted_call(const void *ucontext) {
  if (!application_signal_follows(ucontext))
    cp_thread.own_signals++;
}

#if defined(__x86_64__)
/* Where pc is against a `syscall` instruction (0f 05): 1 on it, 2 right
 * after it, 0 elsewhere. Reads the code at pc, which was just executing,
 * without crossing a page. */
static int at_syscall(const ucontext_t *uc) {
  const unsigned char *pc =
      (const unsigned char *)uc->uc_mcontext.gregs[REG_RIP];
  uintptr_t offset = (uintptr_t)pc & 4095;
  if (offset <= 4094 && pc[0] == 0x0f && pc[1] == 0x05)
    return 1;
  return offset >= 2 && pc[-2] == 0x0f && pc[-1] == 0x05 ? 2 : 0;
}
#endif

int cp_signal_in_syscall(const void *ucontext) {
#if defined(__x86_64__)
  return at_syscall(ucontext) != 0;
#else
  (void)ucontext;
  return 1;
#endif
}

int cp_signal_cut_call(const void *ucontext) {
#if defined(__x86_64__)
  const ucontext_t *uc = ucontext;
  int at = at_syscall(uc);
  return at == 1 || (at == 2 && uc->uc_mcontext.gregs[REG_RAX] == -EINTR);
#else
  (void)ucontext;
  return 1;
#endif
}
