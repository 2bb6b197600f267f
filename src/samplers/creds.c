/* The profiler's threads follow the application's per-thread credential
 * changes (see creds.h). The application's thread, in the interposed call,
 * writes the change into `req`, sends the signal to each registered thread
 * of ours, and waits until each has made it (its handler acknowledges). */
#include "creds.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "passthrough.h"
#include "signals.h"
#include "thread_state.h"

#define MAX_THREADS 64        /* the profiler runs a handful */
#define WAIT_NS 1000000000ull /* for all of them to acknowledge */

enum { OP_PRCTL = 1, OP_CAPSET };

static struct {
  pthread_mutex_t lock;   /* one change at a time; guards tids, starting */
  pthread_cond_t started; /* a counted thread registered */
  unsigned starting;      /* threads made, not registered yet */
  int signal;             /* 0: not taken */
  _Atomic pid_t pid;      /* the process whose threads these are */
  pid_t tids[MAX_THREADS];
  size_t ntids;
  /* The change in flight, read by the handlers while `busy`. */
  _Atomic int busy;
  int op;
  int option;
  unsigned long a2, a3;
  struct __user_cap_header_struct hdr;
  struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
  _Atomic unsigned acks;  /* futex word: handlers done */
  _Atomic unsigned fails; /* of them, refused by the kernel */
  int reported;
} req = {.lock = PTHREAD_MUTEX_INITIALIZER,
         .started = PTHREAD_COND_INITIALIZER};

/* Async-signal-safe: one or two system calls and a futex wake. On one of
 * the profiler's threads, asked by cp_creds_on_*: makes the change on this
 * thread. Any other signal of that number is the application's. */
CP_PASSTHROUGH static void creds_signal_handler(int sig, siginfo_t *info,
                                                void *ucontext) {
  int saved_errno = errno;
  if (info->si_code != SI_TKILL || info->si_pid != getpid() ||
      !atomic_load_explicit(&req.busy, memory_order_acquire) ||
      !cp_thread.internal) {
    cp_signal_chain(sig, info, ucontext);
    errno = saved_errno;
    return;
  }
  long rc = req.op == OP_PRCTL
                ? syscall(SYS_prctl, req.option, req.a2, req.a3, 0ul, 0ul)
                : syscall(SYS_capset, &req.hdr, req.data);
  if (rc != 0)
    atomic_fetch_add(&req.fails, 1);
  atomic_fetch_add_explicit(&req.acks, 1, memory_order_release);
  syscall(SYS_futex, &req.acks, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
  errno = saved_errno;
}

int cp_creds_start(void) {
  atomic_store(&req.pid, getpid());
  if (req.signal > 0)
    return 0;
  int sig = cp_signal_install(0, creds_signal_handler);
  if (sig <= 0) {
    cp_warn("no free signal for the profiler's threads to follow the "
            "application's capability changes: a program that changes its "
            "user with PR_SET_KEEPCAPS and then its groups may abort");
    return -1;
  }
  req.signal = sig;
  return 0;
}

void cp_creds_thread_begin(void) {
  if (req.signal <= 0)
    return;
  pid_t tid = cp_gettid();
  pthread_mutex_lock(&req.lock);
  size_t i = 0;
  while (i < req.ntids && req.tids[i] != tid)
    i++;
  if (i == req.ntids && req.ntids < MAX_THREADS)
    req.tids[req.ntids++] = tid;
  pthread_mutex_unlock(&req.lock);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, req.signal);
  pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

int cp_creds_thread_starting(int delta) {
  if (req.signal <= 0)
    return 0;
  pthread_mutex_lock(&req.lock);
  if (delta > 0) {
    req.starting++;
  } else if (req.starting > 0) {
    req.starting--;
    pthread_cond_broadcast(&req.started);
  }
  pthread_mutex_unlock(&req.lock);
  return delta > 0;
}

/* Caller holds req.lock and filled the change in. Waits for the threads
 * being made to register (bounded): one made before the application's
 * change but not yet in the list would miss it, and a later setuid would
 * take its capabilities (glibc then aborts the process at the next
 * setgid). A thread made after the change inherits its creator's
 * credentials. Then sends the change to every thread registered
 * (forgetting those that ended) and waits for them. */
static void follow(void) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += WAIT_NS / 1000000000ull;
  while (req.starting > 0 &&
         pthread_cond_timedwait(&req.started, &req.lock, &until) == 0)
    ;
  atomic_store(&req.acks, 0);
  atomic_store(&req.fails, 0);
  atomic_store_explicit(&req.busy, 1, memory_order_release);
  pid_t pid = getpid();
  unsigned sent = 0;
  for (size_t i = 0; i < req.ntids;) {
    if (req.tids[i] == cp_gettid()) {
      i++; /* a thread of ours that ended, its tid now the caller's */
      continue;
    }
    if (syscall(SYS_tgkill, pid, req.tids[i], req.signal) == 0) {
      sent++;
      i++;
    } else {
      req.tids[i] = req.tids[--req.ntids]; /* ended */
    }
  }
  uint64_t deadline = cp_monotonic_ns() + WAIT_NS;
  unsigned acks;
  while ((acks = atomic_load_explicit(&req.acks, memory_order_acquire)) <
         sent) {
    uint64_t now = cp_monotonic_ns();
    if (now >= deadline)
      break;
    uint64_t left = deadline - now < 10000000 ? deadline - now : 10000000;
    struct timespec ts = {0, (long)left};
    syscall(SYS_futex, &req.acks, FUTEX_WAIT_PRIVATE, acks, &ts, NULL, 0);
  }
  atomic_store_explicit(&req.busy, 0, memory_order_release);
  unsigned fails = atomic_load(&req.fails);
  if ((acks < sent || fails) && !req.reported++)
    cp_warn("%u of the profiler's %u threads did not follow the "
            "application's capability change (%s)",
            sent - acks + fails, sent,
            acks < sent ? "no answer within 1 s" : "refused by the kernel");
}

/* Whether this call's changes are ours to follow: not on one of our threads,
 * and not in the child of vfork (it shares our memory but not our threads,
 * and must leave the parent's list alone), which is another process. */
static int ours_to_follow(void) {
  return req.signal > 0 && !cp_thread.internal &&
         getpid() == atomic_load(&req.pid);
}

void cp_creds_on_prctl(int option, unsigned long a2, unsigned long a3) {
  if (!ours_to_follow())
    return;
  pthread_mutex_lock(&req.lock);
  req.op = OP_PRCTL;
  req.option = option;
  req.a2 = a2;
  req.a3 = a3;
  follow();
  pthread_mutex_unlock(&req.lock);
}

void cp_creds_on_capset(const struct __user_cap_header_struct *hdr,
                        const struct __user_cap_data_struct *data) {
  if (!ours_to_follow())
    return;
  size_t words = hdr->version == _LINUX_CAPABILITY_VERSION_1 ? 1 : 2;
  pthread_mutex_lock(&req.lock);
  req.op = OP_CAPSET;
  req.hdr.version = hdr->version;
  req.hdr.pid = 0; /* each thread sets its own */
  memset(req.data, 0, sizeof req.data);
  memcpy(req.data, data, words * sizeof *data);
  follow();
  pthread_mutex_unlock(&req.lock);
}

void cp_creds_after_fork_child(void) {
  pthread_mutex_init(&req.lock, NULL);
  pthread_cond_init(&req.started, NULL);
  req.starting = 0;
  atomic_store(&req.pid, getpid());
  req.ntids = 0; /* the parent's threads are not in the child */
  atomic_store(&req.busy, 0);
}
