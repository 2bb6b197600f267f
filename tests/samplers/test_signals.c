/* Signal installation (samplers/signals.c) with the interposed sigaction,
 * signal and signal waits (interpose/signal_calls.c), as docs/signals.md says:
 * our handler is installed on a signal the application does not use; an
 * application that later sets a handler for it reads back what it set and
 * gets its handler called for its own signals (chained), while ours stays;
 * SIG_IGN and restoring the default work as they would without the
 * profiler; handlers on an alternate stack block our signals without the
 * application seeing them in its masks; waits never consume our signals. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "interpose/real.h"
#include "samplers/signals.h"
#include "test.h"
#include "thread_state.h"

static volatile sig_atomic_t ours_ran, app_ran, app_info_ran;
static volatile int app_info_code;

/* The sampler's handler: counts, and passes on to the application's
 * disposition (what cpu.c and wall.c do for signals that are not theirs). */
static void our_handler(int sig, siginfo_t *info, void *uc) {
  ours_ran++;
  cp_signal_chain(sig, info, uc);
}

static void app_handler(int sig) {
  (void)sig;
  app_ran++;
}

static void app_info_handler(int sig, siginfo_t *info, void *uc) {
  (void)sig;
  (void)uc;
  app_info_ran++;
  app_info_code = info->si_code;
}

/* What the kernel has installed, past the hook. */
static struct sigaction real_of(int sig) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  cp_real_sigaction(sig, NULL, &sa);
  return sa;
}

/* Whether the kernel's mask for sig's handler holds member. */
static int real_masks(int sig, int member) {
  struct sigaction sa = real_of(sig);
  return sigismember(&sa.sa_mask, member);
}

static int ours = -1; /* the signal installed, for every test */

/* A free preferred signal is taken; one the application handles is left
 * to it and a free real-time signal is taken instead. Installing the same
 * handler again keeps its signal. */
static void test_install_picks_a_free_signal(void) {
  struct sigaction app;
  memset(&app, 0, sizeof app);
  app.sa_handler = app_handler;
  sigemptyset(&app.sa_mask);
  CHECK_EQ_INT(sigaction(SIGUSR2, &app, NULL), 0);

  ours = cp_signal_install(SIGUSR1, our_handler);
  CHECK_EQ_INT(ours, SIGUSR1);
  struct sigaction k = real_of(SIGUSR1);
  CHECK(k.sa_flags & SA_SIGINFO);
  CHECK(k.sa_flags & SA_RESTART);
  CHECK(k.sa_sigaction == our_handler);

  int other = cp_signal_install(SIGUSR2, app_info_handler);
  CHECK(other >= SIGRTMIN + 4 && other <= SIGRTMAX);
  struct sigaction rb;
  CHECK_EQ_INT(sigaction(SIGUSR2, NULL, &rb), 0); /* left to it */
  CHECK(!(rb.sa_flags & SA_SIGINFO) && rb.sa_handler == app_handler);
  CHECK_EQ_INT(cp_signal_install(SIGUSR2, app_info_handler), other);
  /* Our handlers block each other's signals. */
  CHECK(real_masks(other, ours));
  CHECK(real_masks(ours, other));

  sigset_t set;
  sigemptyset(&set);
  cp_signal_sampling_set(&set);
  CHECK(sigismember(&set, ours) && sigismember(&set, other));
  CHECK(!sigismember(&set, SIGUSR2));
}

/* Before the application sets anything: it reads back SIG_DFL, and one of
 * our signals raised at it does not kill it (a stray signal of ours is
 * ignored). */
static void test_reads_back_default(void) {
  struct sigaction old;
  memset(&old, 0xff, sizeof old);
  CHECK_EQ_INT(sigaction(ours, NULL, &old), 0);
  CHECK(!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL);
  ours_ran = app_ran = 0;
  raise(ours);
  CHECK_EQ_INT(ours_ran, 1);
  CHECK_EQ_INT(app_ran, 0);
}

/* The application installs its own handler for our signal: sigaction
 * returns 0 and the previous (default) disposition, reads back its own
 * handler, ours stays installed, and its handler runs for the signal. */
static void test_application_handler_is_chained(void) {
  struct sigaction app, old, cur;
  memset(&app, 0, sizeof app);
  app.sa_sigaction = app_info_handler;
  app.sa_flags = SA_SIGINFO;
  sigemptyset(&app.sa_mask);
  sigaddset(&app.sa_mask, SIGTERM);
  CHECK_EQ_INT(sigaction(ours, &app, &old), 0);
  CHECK(!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL);
  CHECK_EQ_INT(sigaction(ours, NULL, &cur), 0);
  CHECK(cur.sa_sigaction == app_info_handler);
  CHECK(cur.sa_flags & SA_SIGINFO);
  CHECK(sigismember(&cur.sa_mask, SIGTERM));
  CHECK(real_of(ours).sa_sigaction == our_handler);

  ours_ran = app_info_ran = 0;
  union sigval v = {.sival_int = 7};
  sigqueue(getpid(), ours, v);
  CHECK_EQ_INT(ours_ran, 1);
  CHECK_EQ_INT(app_info_ran, 1);
  CHECK_EQ_INT(app_info_code, SI_QUEUE);

  /* signal() as well: returns what was set, and sets a plain handler. */
  CHECK(signal(ours, app_handler) ==
        (sighandler_t)(void (*)(void))app_info_handler);
  app_ran = 0;
  raise(ours);
  CHECK_EQ_INT(app_ran, 1);
  CHECK(real_of(ours).sa_sigaction == our_handler);
}

/* SIG_IGN: read back as set, the signal ignored (the process goes on);
 * then the default restored: read back, and still not fatal (ours stays). */
static void test_ignore_and_restore(void) {
  struct sigaction ign, old, cur;
  memset(&ign, 0, sizeof ign);
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  CHECK_EQ_INT(sigaction(ours, &ign, &old), 0);
  CHECK(old.sa_handler == app_handler);
  CHECK_EQ_INT(sigaction(ours, NULL, &cur), 0);
  CHECK(cur.sa_handler == SIG_IGN);
  app_ran = ours_ran = 0;
  raise(ours);
  CHECK_EQ_INT(ours_ran, 1);
  CHECK_EQ_INT(app_ran, 0);

  CHECK(signal(ours, SIG_DFL) == SIG_IGN);
  CHECK_EQ_INT(sigaction(ours, NULL, &cur), 0);
  CHECK(cur.sa_handler == SIG_DFL);
  raise(ours);
  CHECK_EQ_INT(ours_ran, 2);
  CHECK(real_of(ours).sa_sigaction == our_handler);
}

/* Signals that are not ours pass through unchanged; a handler on the
 * alternate stack (SA_ONSTACK) gets our signals added to its mask in the
 * kernel, while the application reads back the mask it set. */
static void test_other_signals_and_alt_stack_mask(void) {
  struct sigaction app, cur;
  memset(&app, 0, sizeof app);
  app.sa_handler = app_handler;
  app.sa_flags = SA_ONSTACK;
  sigemptyset(&app.sa_mask);
  CHECK_EQ_INT(sigaction(SIGUSR2, &app, NULL), 0);
  CHECK(real_masks(SIGUSR2, ours));
  CHECK_EQ_INT(sigaction(SIGUSR2, NULL, &cur), 0);
  CHECK(cur.sa_handler == app_handler);
  CHECK(cur.sa_flags & SA_ONSTACK);
  CHECK(!sigismember(&cur.sa_mask, ours));

  app.sa_flags = 0; /* not on the alternate stack: nothing added */
  CHECK_EQ_INT(sigaction(SIGUSR2, &app, NULL), 0);
  CHECK(!real_masks(SIGUSR2, ours));
  app_ran = 0;
  raise(SIGUSR2);
  CHECK_EQ_INT(app_ran, 1);
  CHECK_EQ_INT(sigaction(0, &app, NULL), -1);
  CHECK_EQ_INT(errno, EINVAL);
}

/* A wait for signals never takes one of ours: with ours and the
 * application's blocked and ours pending, a wait for both times out; ours
 * is handled once unblocked. */
static void test_waits_leave_our_signals_pending(void) {
  sigset_t both, old;
  sigemptyset(&both);
  sigaddset(&both, ours);
  sigaddset(&both, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &both, &old);
  ours_ran = 0;
  raise(ours);
  struct timespec zero = {0, 0};
  CHECK_EQ_INT(sigtimedwait(&both, NULL, &zero), -1);
  CHECK_EQ_INT(errno, EAGAIN);
  int fd = signalfd(-1, &both, SFD_NONBLOCK);
  CHECK(fd >= 0);
  if (fd >= 0) {
    struct signalfd_siginfo si;
    CHECK_EQ_INT(read(fd, &si, sizeof si), -1); /* nothing for the app */
    close(fd);
  }
  raise(SIGUSR2);
  int got = 0;
  CHECK_EQ_INT(sigwait(&both, &got), 0);
  CHECK_EQ_INT(got, SIGUSR2);
  sigset_t pending;
  sigpending(&pending);
  CHECK(sigismember(&pending, ours));
  CHECK_EQ_INT(ours_ran, 0);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  CHECK_EQ_INT(ours_ran, 1);
}

/* A handler the application sets for a signal not ours is counted when it
 * runs (cp_thread.app_signals: the wait hooks return an EINTR it caused)
 * and still gets its signal, its flags and what it set read back; the
 * default and SIG_IGN are set as they are; a fault signal is left alone;
 * SA_RESETHAND reads back the default once it ran. */
static void test_application_handlers_are_counted(void) {
  struct sigaction app, rb;
  memset(&app, 0, sizeof app);
  app.sa_sigaction = app_info_handler;
  app.sa_flags = SA_SIGINFO; /* no SA_RESTART */
  sigemptyset(&app.sa_mask);
  sigaddset(&app.sa_mask, SIGHUP);
  CHECK_EQ_INT(sigaction(SIGTERM, &app, NULL), 0);
  struct sigaction k = real_of(SIGTERM);
  CHECK(k.sa_sigaction != app_info_handler); /* behind ours */
  CHECK(!(k.sa_flags & SA_RESTART) && sigismember(&k.sa_mask, SIGHUP));
  memset(&rb, 0, sizeof rb);
  CHECK_EQ_INT(sigaction(SIGTERM, NULL, &rb), 0);
  CHECK((rb.sa_flags & SA_SIGINFO) && rb.sa_sigaction == app_info_handler);
  CHECK(sigismember(&rb.sa_mask, SIGHUP));
  unsigned before = cp_thread.app_signals;
  app_info_ran = 0;
  raise(SIGTERM);
  CHECK_EQ_INT(app_info_ran, 1);
  CHECK_EQ_INT(app_info_code, SI_TKILL);
  CHECK_EQ_INT(cp_thread.app_signals - before, 1);

  /* Ignored, then the default: set as asked, read back as set. */
  CHECK(signal(SIGTERM, SIG_IGN) ==
        (sighandler_t)(void (*)(void))app_info_handler);
  CHECK(real_of(SIGTERM).sa_handler == SIG_IGN);
  raise(SIGTERM); /* ignored */
  CHECK(signal(SIGTERM, SIG_DFL) == SIG_IGN);
  CHECK(real_of(SIGTERM).sa_handler == SIG_DFL);

  /* A fault signal's handler is the application's own. */
  struct sigaction fault = {0};
  fault.sa_handler = app_handler;
  CHECK_EQ_INT(sigaction(SIGBUS, &fault, NULL), 0);
  CHECK(real_of(SIGBUS).sa_handler == app_handler);
  fault.sa_handler = SIG_DFL;
  sigaction(SIGBUS, &fault, NULL);

  /* One shot: after it ran, the kernel's default is what reads back. */
  struct sigaction once = {0};
  once.sa_handler = app_handler;
  once.sa_flags = SA_RESETHAND;
  CHECK_EQ_INT(sigaction(SIGWINCH, &once, NULL), 0);
  app_ran = 0;
  raise(SIGWINCH);
  CHECK_EQ_INT(app_ran, 1);
  CHECK_EQ_INT(sigaction(SIGWINCH, NULL, &rb), 0);
  CHECK(!(rb.sa_flags & SA_SIGINFO) && rb.sa_handler == SIG_DFL);
}

/* What a handler reads of the system call its signal found (the wall
 * sampler counts a wakeup's cost only for a call the signal cut short:
 * docs/overhead.md, "Waking a blocked thread for a wall sample"). */
static volatile sig_atomic_t seen_in_syscall = -1, seen_cut = -1;

static void context_handler(int sig, siginfo_t *info, void *uc) {
  (void)sig;
  (void)info;
  seen_in_syscall = cp_signal_in_syscall(uc);
  seen_cut = cp_signal_cut_call(uc);
}

static int block_pipe[2];
static volatile int spinning, spin_stop;
static volatile pid_t reader_tid;

static void *blocked_reader(void *arg) {
  (void)arg;
  reader_tid = cp_gettid();
  char c;
  long r = syscall(SYS_read, block_pipe[0], &c, 1); /* no hook */
  return (void *)(intptr_t)(r < 0 ? -errno : r);
}

static void *spinner(void *arg) {
  (void)arg;
  spinning = 1;
  while (!spin_stop)
    ;
  return NULL;
}

/* Until the reader is in its read (/proc's syscall file: the number, 0,
 * and its arguments while it blocks in it; "running" otherwise). */
static void wait_blocked_in_read(void) {
  for (int i = 0; i < 10000; i++) {
    char path[64], line[32] = {0};
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)reader_tid);
    FILE *f = reader_tid ? fopen(path, "r") : NULL;
    if (f) {
      size_t n = fread(line, 1, sizeof line - 1, f);
      fclose(f);
      if (n >= 2 && line[0] == '0' && line[1] == ' ')
        return;
    }
    usleep(1000);
  }
  CHECK(!"the reader never blocked in its read");
}

/* Until context_handler ran (at most a second). */
static void wait_for_handler(void) {
  for (int i = 0; i < 1000 && seen_cut < 0; i++)
    usleep(1000);
}

/* SIGUSR2 with flags, sent to a thread blocked in a raw read of an empty
 * pipe: what the handler saw, and what the read returned (after a byte
 * written once the handler ran). */
static long signal_blocked_reader(int flags) {
  struct sigaction sa = {0};
  sa.sa_sigaction = context_handler;
  sa.sa_flags = SA_SIGINFO | flags;
  sigemptyset(&sa.sa_mask);
  CHECK_EQ_INT(sigaction(SIGUSR2, &sa, NULL), 0);
  CHECK_EQ_INT(pipe(block_pipe), 0);
  seen_in_syscall = seen_cut = -1;
  reader_tid = 0;
  pthread_t t;
  CHECK_EQ_INT(pthread_create(&t, NULL, blocked_reader, NULL), 0);
  wait_blocked_in_read();
  pthread_kill(t, SIGUSR2);
  wait_for_handler();
  CHECK_EQ_INT(write(block_pipe[1], "x", 1), 1);
  void *r;
  pthread_join(t, &r);
  close(block_pipe[0]);
  close(block_pipe[1]);
  return (long)(intptr_t)r;
}

static void test_cut_calls_told_from_finished_ones(void) {
#if !defined(__x86_64__)
  return; /* every context counts as a cut call there */
#endif
  /* Blocked, restarted (SA_RESTART): the pc rewound onto the call. */
  CHECK_EQ_INT(signal_blocked_reader(SA_RESTART), 1);
  CHECK_EQ_INT(seen_in_syscall, 1);
  CHECK_EQ_INT(seen_cut, 1);
  /* Blocked, failed with EINTR (no SA_RESTART). */
  CHECK_EQ_INT(signal_blocked_reader(0), -EINTR);
  CHECK_EQ_INT(seen_in_syscall, 1);
  CHECK_EQ_INT(seen_cut, 1);
  /* A call that ran to its end: the signal a thread sends itself is taken
   * as that call returns its result, 0. */
  seen_in_syscall = seen_cut = -1;
  CHECK_EQ_INT(syscall(SYS_tgkill, getpid(), cp_gettid(), SIGUSR2), 0);
  CHECK_EQ_INT(seen_in_syscall, 1);
  CHECK_EQ_INT(seen_cut, 0);
  /* Running, in no system call. */
  seen_in_syscall = seen_cut = -1;
  spinning = spin_stop = 0;
  pthread_t t;
  CHECK_EQ_INT(pthread_create(&t, NULL, spinner, NULL), 0);
  while (!spinning)
    usleep(1000);
  pthread_kill(t, SIGUSR2);
  wait_for_handler();
  spin_stop = 1;
  pthread_join(t, NULL);
  CHECK_EQ_INT(seen_in_syscall, 0);
  CHECK_EQ_INT(seen_cut, 0);
  signal(SIGUSR2, SIG_DFL);
}

TEST_MAIN(T(test_install_picks_a_free_signal), T(test_reads_back_default),
          T(test_application_handler_is_chained), T(test_ignore_and_restore),
          T(test_other_signals_and_alt_stack_mask),
          T(test_waits_leave_our_signals_pending),
          T(test_application_handlers_are_counted),
          T(test_cut_calls_told_from_finished_ones))
