/* The signal family: sigaction, signal, sigaltstack, and the calls that wait
 * for signals (sigsuspend, pause, sigtimedwait, sigwaitinfo, sigwait,
 * signalfd). What the profiler does with them is in samplers/signals.c
 * (docs/signals.md): an application that sets a handler for one of our
 * signals gets it called for its own signals (chained) while ours stays in
 * place; its handlers on an alternate stack block the sampling signals; its
 * handlers of other asynchronous signals run behind one that counts them
 * (for the wait hooks' EINTR); the waits neither return for nor consume a
 * sampling signal. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common.h"
#include "interpose/real.h"
#include "passthrough.h"
#include "samplers/signals.h"
#include "samplers/unwind.h"

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);

CP_PASSTHROUGH int cp_real_sigaction(int sig, const struct sigaction *act,
                                     struct sigaction *old) {
  CP_REAL(sigaction_fn, sigaction);
  return fn_sigaction(sig, act, old);
}

/* --- interposed sigaction and signal ------------------------------------ */

CP_PASSTHROUGH int sigaction(int sig, const struct sigaction *act,
                             struct sigaction *old) {
  if (cp_signals_on_sigaction(sig, act, old))
    return 0; /* one of ours: the application's handler is chained */
  /* Not ours. A handler on the alternate stack blocks our signals (see
   * cp_signals_mask_on_alt_stack); the application never sees them in its
   * masks. */
  struct sigaction masked;
  if (act && sig > 0 && sig < _NSIG) {
    cp_signals_on_app_handler(sig, act);
    masked = *act;
    if (cp_signals_mask_on_alt_stack(&masked))
      act = &masked;
  }
  /* SIGIO, while guarded: our handler stays, the application's is chained
   * (signals.h). */
  int rc = 0;
  if (!cp_signals_on_sigio(sig, act, old)) {
    /* Any other: an application handler is counted when it runs. */
    int wrapped = cp_signals_wrap_app(sig, act, old);
    rc = wrapped ? (wrapped > 0 ? 0 : -1) : cp_real_sigaction(sig, act, old);
  }
  if (rc == 0 && old)
    cp_signal_remove_sampling(&old->sa_mask);
  return rc;
}

CP_PASSTHROUGH sighandler_t signal(int sig, sighandler_t handler) {
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sa.sa_flags = SA_RESTART; /* BSD semantics, as glibc's signal() */
  sigemptyset(&sa.sa_mask);
  if (sigaction(sig, &sa, &old) != 0)
    return SIG_ERR;
  return (old.sa_flags & SA_SIGINFO)
             ? (sighandler_t)(void (*)(void))old.sa_sigaction
             : old.sa_handler;
}

/* --- calls that wait for signals ----------------------------------------- *
 * pause and sigsuspend return after any handler ran, sigwaitinfo and
 * sigtimedwait fail with EINTR when a handler runs during the wait, whatever
 * SA_RESTART says (signal(7)); and a thread that blocks every signal and
 * waits for "all" of them (sigwait, signalfd) would be handed a sampling
 * signal pending on it. So during these waits the sampling signals are
 * blocked and left out of the awaited set: they stay pending and are handled
 * (the thread sampled) right after the call returns, which it does only for
 * the application's own signals. */

CP_PASSTHROUGH int sigsuspend(const sigset_t *mask) {
  typedef int (*fn_t)(const sigset_t *);
  CP_REAL(fn_t, sigsuspend);
  sigset_t m = *mask;
  cp_signal_sampling_set(&m);
  return fn_sigsuspend(&m);
}

CP_PASSTHROUGH int pause(void) {
  sigset_t m;
  pthread_sigmask(SIG_BLOCK, NULL, &m);
  return sigsuspend(&m);
}

CP_PASSTHROUGH int sigtimedwait(const sigset_t *set, siginfo_t *info,
                                const struct timespec *timeout) {
  typedef int (*fn_t)(const sigset_t *, siginfo_t *, const struct timespec *);
  CP_REAL(fn_t, sigtimedwait);
  sigset_t ours, old, wanted = *set;
  sigemptyset(&ours);
  cp_signal_sampling_set(&ours);
  if (sigisemptyset(&ours)) /* not sampling */
    return fn_sigtimedwait(set, info, timeout);
  cp_signal_remove_sampling(&wanted);
  pthread_sigmask(SIG_BLOCK, &ours, &old);
  int rc = fn_sigtimedwait(&wanted, info, timeout);
  int saved_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  errno = saved_errno;
  return rc;
}

CP_PASSTHROUGH int sigwaitinfo(const sigset_t *set, siginfo_t *info) {
  return sigtimedwait(set, info, NULL);
}

CP_PASSTHROUGH int sigwait(const sigset_t *set, int *sig) {
  typedef int (*fn_t)(const sigset_t *, int *);
  CP_REAL_OR(fn_t, sigwait, ENOSYS);
  /* glibc's sigwait retries after EINTR itself. */
  sigset_t wanted = *set;
  cp_signal_remove_sampling(&wanted);
  return fn_sigwait(&wanted, sig);
}

CP_PASSTHROUGH int signalfd(int fd, const sigset_t *mask, int flags) {
  typedef int (*fn_t)(int, const sigset_t *, int);
  CP_REAL(fn_t, signalfd);
  sigset_t wanted = *mask;
  cp_signal_remove_sampling(&wanted);
  return fn_signalfd(fd, &wanted, flags);
}

/* --- sigaltstack ---------------------------------------------------------- */

/* The unwinder keeps a copy of the thread's alternate stack
 * (samplers/unwind.c): forgotten before and after the change. */
CP_PASSTHROUGH int sigaltstack(const stack_t *ss, stack_t *old) {
  cp_unwind_on_sigaltstack();
  int rc = (int)syscall(SYS_sigaltstack, ss, old);
  cp_unwind_on_sigaltstack(); /* a hook's check may have run meanwhile */
  return rc;
}

/* This library's own sigaltstack, whatever the lookup order chose for
 * `&sigaltstack` (in PIC code that is the first definition). */
extern __typeof(sigaltstack) cp_own_sigaltstack __attribute__((
    alias("sigaltstack"), visibility("hidden"), copy(sigaltstack)));

/* And its own sigaction. */
extern __typeof(sigaction) cp_own_sigaction
    __attribute__((alias("sigaction"), visibility("hidden"), copy(sigaction)));

CP_PASSTHROUGH int cp_interpose_sees_sigaction(void) {
  return cp_real_lookup(RTLD_DEFAULT, "sigaction", NULL, 0) ==
         (void *)cp_own_sigaction;
}

CP_PASSTHROUGH int cp_interpose_sees_sigaltstack(void) {
  return cp_real_lookup(RTLD_DEFAULT, "sigaltstack", NULL, 0) ==
         (void *)cp_own_sigaltstack;
}
