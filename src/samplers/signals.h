/* Signal plumbing shared by the signal-driven samplers: choosing a signal the
 * application does not use, installing a handler with SA_RESTART, and
 * chaining to the application's own handler for signals that are not ours.
 * sigaction() and signal() are interposed: an application that sets a
 * handler for one of our signals after we installed ours gets its handler
 * called for its own signals (chained), while ours stays in place; its
 * handlers that run on an alternate stack (SA_ONSTACK) block the sampling
 * signals. The calls that wait for signals (pause, sigsuspend, sigwait,
 * sigwaitinfo, sigtimedwait, signalfd) are interposed too, so that they
 * neither return for nor consume a sampling signal (docs/signals.md). */
#ifndef CP_SIGNALS_H
#define CP_SIGNALS_H

#include <signal.h>

typedef void (*cp_signal_handler)(int sig, siginfo_t *info, void *ucontext);

/* Installs handler for `preferred` if the application has no handler for it,
 * else for the first free real-time signal. Returns the signal, or -1. The
 * previous disposition is kept for cp_signal_chain. Handlers stay installed
 * for the life of the process: a late timer signal must never meet SIG_DFL. */
int cp_signal_install(int preferred, cp_signal_handler handler);

/* How many of the profiler's own sampling signals this thread has handled.
 * Handlers increment it (async-signal-safe: a TLS word); restart.c reads it
 * to tell an EINTR caused by sampling from one caused by the application. */
extern __thread unsigned cp_own_signals
    __attribute__((tls_model("initial-exec")));

/* Adds the sampling signals installed so far to set / removes them from it.
 * Async-signal-safe. */
void cp_signal_sampling_set(sigset_t *set);
void cp_signal_remove_sampling(sigset_t *set);

/* Calls the disposition that `sig` had before cp_signal_install. For signals
 * that were not ours. Async-signal-safe. */
void cp_signal_chain(int sig, siginfo_t *info, void *ucontext);

/* Discards the sampling signals pending on the calling thread (and on the
 * process), with them blocked meanwhile; the mask is restored. For exec: a
 * pending SIGPROF would kill the new image. */
void cp_signals_discard_pending(void);

/* In the child of fork: the lock is made anew (a lost thread may hold it). */
void cp_signals_after_fork_child(void);

#endif
