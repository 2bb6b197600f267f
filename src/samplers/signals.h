/* Signal plumbing shared by the signal-driven samplers: choosing a signal the
 * application does not use, installing a handler with SA_RESTART, and
 * chaining to the application's own handler for signals that are not ours.
 * sigaction() and signal() are interposed (interpose/signal_calls.c, which
 * calls the observers below): an application that sets a handler for one of our
 * signals after we installed ours gets its handler called for its own signals
 * (chained), while ours stays in place; its handlers that run on an alternate
 * stack (SA_ONSTACK) block the sampling signals. The calls that wait for
 * signals (pause, sigsuspend, sigwait, sigwaitinfo, sigtimedwait, signalfd) are
 * interposed too, so that they neither return for nor consume a sampling signal
 * (docs/signals.md). */
#ifndef CP_SIGNALS_H
#define CP_SIGNALS_H

#include <signal.h>

#include "thread_state.h"

typedef void (*cp_signal_handler)(int sig, siginfo_t *info, void *ucontext);

/* Installs handler for `preferred` if the application has no handler for it,
 * else (or when preferred is 0) for the first free real-time signal from
 * SIGRTMIN+4. Returns the signal, or -1. The
 * previous disposition is kept for cp_signal_chain. Handlers stay installed
 * for the life of the process: a late timer signal must never meet SIG_DFL. */
int cp_signal_install(int preferred, cp_signal_handler handler);

/* Whether the application installed a handler of its own for sig, one of
 * ours, after we did (cp_signals_on_sigaction). Its signals then share ours:
 * a standard signal sent to a thread while another of that number is
 * pending there is merged with it, so one of the two is lost. The samplers
 * move to a real-time signal (those queue) when they see it. Async-signal-safe:
 * one load. */
int cp_signal_claimed(int sig);

/* Installs handler, already installed for `old`, a claimed standard
 * signal, for the first free real-time signal from SIGRTMIN+4 too (or finds
 * the real-time signal it already has), and says so in an info line naming
 * `samples` ("CPU", "wall"). The old one keeps the handler, which still
 * tells our signals from the application's (some of ours may be in flight).
 * Returns the signal, or -1 with one warning per *failed (then incremented).
 * Not async-signal-safe. */
int cp_signal_move_to_rt(int old, cp_signal_handler handler,
                         const char *samples, int *failed);

/* The kernel's fallback for a perf event's real-time signal it cannot
 * queue (the user's RLIMIT_SIGPENDING spent) is a plain SIGIO to the same
 * thread, whose default action ends the process, and which an application
 * with a SIGIO handler of its own or SIG_IGN would take from us (the event
 * would then stop). Once called (by a sampler whose perf events signal with
 * a real-time signal), SIGIO gets our handler whatever the application
 * sets: it calls `lost` (async-signal-safe, on the thread the signal came
 * to, with the interrupted context; it returns whether the thread had an
 * event, so the SIGIO was taken as ours), then the application's handler if
 * it set one, with the mask the kernel would have given it. The
 * application reads back what it set. Not async-signal-safe. */
void cp_signal_guard_sigio(int (*lost)(void *ucontext));

/* SIGIOs `lost` took as ours since the process started. One atomic load. */
unsigned long long cp_signal_sigio_absorbed(void);

/* The sigaction hook's observer for SIGIO while guarded: act becomes the
 * application's disposition (our handler stays), *old gets the one before;
 * returns 1 (the hook then returns 0). 0 for any other signal or when not
 * guarded. */
int cp_signals_on_sigio(int sig, const struct sigaction *act,
                        struct sigaction *old);
/* Every sampling handler whose signal found its thread at a system call
 * (cp_signal_in_syscall) calls cp_signal_interrupted_call last, which
 * increments cp_thread.own_signals (thread_state.h): interpose/waits.c
 * reads it to tell an EINTR caused by sampling from one caused by the
 * application. Not when an application signal came at the same time: our
 * handlers block it (their sa_mask), so it is pending, and it will be
 * delivered at the call when ours returns; its EINTR is the application's
 * (a thread-directed signal of ours is taken before a process-directed one
 * of the application, and would otherwise be mistaken for the cause). A
 * sampling signal that comes after an application's signal interrupted the
 * call finds the thread elsewhere: in the application's handler (delivered
 * on top of it), or past the call, so the application still gets its EINTR.
 * What remains (docs/signals.md): one sent while the application's handler
 * returns (its sigreturn lands at the call again), or an application
 * signal sent between the pending check and our handler's return.
 * Async-signal-safe: one sigpending, and a sigaction read per pending
 * signal. */
void cp_signal_interrupted_call(const void *ucontext);

/* Whether the interrupted context is at a system call: the kernel leaves the
 * pc on the `syscall` instruction (a restarted call) or right after it (a
 * call that returns EINTR). Async-signal-safe: reads the code at pc, which
 * was just executing, without crossing a page. Elsewhere than x86-64, every
 * context counts as at a system call. */
int cp_signal_in_syscall(const void *ucontext);

/* Whether the signal cut short the system call its thread was in: the pc
 * on the `syscall` instruction (rewound to restart the call) or right after
 * it with EINTR in rax. A call that ran to its end before the signal was
 * taken (rax its result) was not cut: the thread was busy in it, not
 * blocked. Async-signal-safe, as cp_signal_in_syscall. Elsewhere than
 * x86-64, every context counts as a cut call. */
int cp_signal_cut_call(const void *ucontext);

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

/* The sigaction hook's observer: when sig is one of ours, the application's
 * act becomes the disposition cp_signal_chain calls, *old gets the one it
 * set before (what it would read back without the profiler), and 1 is
 * returned (the hook then returns 0); 0 for any other signal. */
int cp_signals_on_sigaction(int sig, const struct sigaction *act,
                            struct sigaction *old);

/* For a handler the application installs that runs on its alternate stack
 * (SA_ONSTACK): adds the sampling signals to act->sa_mask (see signals.c).
 * Returns whether act was changed. */
int cp_signals_mask_on_alt_stack(struct sigaction *act);

/* The sigaction hook's report of a disposition the application sets for a
 * signal not ours: whether its handler runs on the alternate stack, so that
 * a later install masks its signal there without reading every signal's
 * disposition again. */
void cp_signals_on_app_handler(int sig, const struct sigaction *act);

/* Around an exec (exec.c): a signal the application ignores and we
 * handle (one of ours, or SIGIO while guarded) is set to SIG_IGN before, so
 * that the new image inherits it ignored as it would without us, and gets
 * our handler back if exec fails. No lock is taken: a vfork child calls
 * them too (its dispositions are its own; its memory is its parent's).
 * Not async-signal-safe. */
void cp_signals_before_exec(void);
void cp_signals_exec_failed(void);
/* The same around posix_spawn (exec.c), from a process that goes on: under
 * the lock the sigaction hooks take, and the handlers are given back
 * whatever the spawn's outcome. Meanwhile such a signal reaching the
 * process is discarded, as the application asked (for a sampling signal
 * the application ignores: the samples of that moment, a millisecond or
 * so). Not async-signal-safe. */
void cp_signals_before_spawn(void);
void cp_signals_after_spawn(void);

/* The sigaction hook's observer for any other signal: a handler the
 * application sets for an asynchronous signal is installed behind one of
 * ours that counts it (cp_thread.app_signals, which the wait hooks read)
 * and calls it; *old gets what the application set (or the kernel's
 * disposition, when that is no longer ours: SA_RESETHAND). Returns 1, or -1
 * with errno when sigaction failed; 0 for a signal it leaves to the caller
 * (synchronous, SIGKILL, SIGSTOP, ours). Not async-signal-safe in the
 * strict sense (a lock), but callable from a handler: signals are blocked
 * while it holds the lock. */
int cp_signals_wrap_app(int sig, const struct sigaction *act,
                        struct sigaction *old);

/* Whether the calling thread may be running a signal handler: one of the
 * application's for an asynchronous signal (installed through
 * cp_signals_wrap_app, counted while it runs; one left with longjmp no
 * longer counts once the thread runs above it: caller_frame is the
 * caller's __builtin_frame_address(0)), one of ours, or one for a
 * synchronous signal (a fault handler), told by the signal mask or by
 * running on the alternate signal stack. Code that takes locks or
 * allocates (the last profile at _exit) must not run there.
 * Async-signal-safe. */
int cp_signals_maybe_in_handler(const void *caller_frame);

/* In the child of fork: the lock is made anew (a lost thread may hold it). */
void cp_signals_after_fork_child(void);

#endif
