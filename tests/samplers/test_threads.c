/* The thread registry (samplers/threads.c) with the pthread_create hook
 * (interpose/thread_calls.c): which threads the running samplers hear of, when,
 * and which they never hear of. A fake sampler records the announcements.
 * Across fork: test_fork. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common.h"
#include "samplers/sampler.h"
#include "samplers/threads.h"
#include "test.h"
#include "thread_state.h"

#define MAX_EVENTS 4096
#define TEST_SIGNAL (SIGRTMIN + 7)

static struct {
  _Atomic pid_t started[MAX_EVENTS], exited[MAX_EVENTS];
  atomic_int nstarted, nexited;
  /* Whether the sampling signal was blocked while the new thread announced
   * itself (read in thread_started, on that thread). */
  atomic_int announced_blocked, announced_unblocked;
} ev;

static void on_started(pid_t tid) {
  int i = atomic_fetch_add(&ev.nstarted, 1);
  if (i < MAX_EVENTS)
    atomic_store(&ev.started[i], tid);
  if (tid == cp_gettid() &&
      tid != getpid()) { /* by the new thread (the hook) */
    sigset_t now;
    pthread_sigmask(SIG_BLOCK, NULL, &now);
    atomic_fetch_add(sigismember(&now, TEST_SIGNAL) ? &ev.announced_blocked
                                                    : &ev.announced_unblocked,
                     1);
  }
}

static void on_exited(pid_t tid) {
  int i = atomic_fetch_add(&ev.nexited, 1);
  if (i < MAX_EVENTS)
    atomic_store(&ev.exited[i], tid);
}

static const cp_sampler fake = {
    .name = "fake",
    .thread_started = on_started,
    .thread_exited = on_exited,
};
static const cp_sampler *const samplers[] = {&fake};

static void reset(void) {
  atomic_store(&ev.nstarted, 0);
  atomic_store(&ev.nexited, 0);
  atomic_store(&ev.announced_blocked, 0);
  atomic_store(&ev.announced_unblocked, 0);
}

static int count(_Atomic pid_t *list, atomic_int *n, pid_t tid) {
  int c = 0, end = atomic_load(n);
  for (int i = 0; i < end && i < MAX_EVENTS; i++)
    c += atomic_load(&list[i]) == tid;
  return c;
}
#define STARTED(tid) count(ev.started, &ev.nstarted, (tid))
#define EXITED(tid) count(ev.exited, &ev.nexited, (tid))

typedef struct worker {
  pid_t tid;
  int started_before_routine; /* announced before its routine ran */
  int exclude;                /* marks itself as the profiler's own */
  int signal_blocked;         /* the sampling signal, in its routine */
  int internal;               /* cp_thread.internal, after excluding */
} worker;

static void *worker_main(void *p) {
  worker *w = p;
  w->tid = cp_gettid();
  w->started_before_routine = STARTED(w->tid);
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, NULL, &now);
  w->signal_blocked = sigismember(&now, TEST_SIGNAL);
  if (w->exclude) {
    cp_threads_exclude_self();
    w->internal = cp_thread.internal;
  }
  return NULL;
}

static worker run_worker(int exclude) {
  worker w = {.exclude = exclude};
  pthread_t t;
  CHECK_EQ_INT(pthread_create(&t, NULL, worker_main, &w), 0);
  pthread_join(t, NULL);
  return w;
}

/* Threads that exist at start are announced, and nothing twice. */
static void test_existing_threads_announced_at_start(void) {
  reset();
  CHECK_EQ_INT(cp_threads_start(samplers, 1), 0);
  CHECK_EQ_INT(STARTED(cp_gettid()), 1);
  cp_threads_rescan();
  CHECK_EQ_INT(STARTED(cp_gettid()), 1);
  cp_threads_stop();
  CHECK_EQ_INT(EXITED(cp_gettid()), 1);
}

/* A thread made with pthread_create is announced by itself before its start
 * routine runs, with the sampling signals blocked while it registers and
 * its creator's mask (not blocking them) once it runs; its end is announced
 * when the routine returns, and a rescan does not bring it back. */
static void test_created_thread_appears_and_disappears(void) {
  reset();
  cp_threads_set_sampling_signal(TEST_SIGNAL);
  cp_threads_start(samplers, 1);
  worker w = run_worker(0);
  CHECK(w.tid > 0 && w.tid != cp_gettid());
  CHECK_EQ_INT(w.started_before_routine, 1);
  CHECK_EQ_INT(EXITED(w.tid), 1);
  CHECK_EQ_INT(atomic_load(&ev.announced_blocked), 1);
  CHECK_EQ_INT(atomic_load(&ev.announced_unblocked), 0);
  CHECK_EQ_INT(w.signal_blocked, 0);
  cp_threads_rescan();
  CHECK_EQ_INT(STARTED(w.tid), 1);
  CHECK_EQ_INT(EXITED(w.tid), 1);
  cp_threads_stop();
}

/* Many threads at once (more than the hook's 64 start slots): every one is
 * announced once and ends once. */
#define MANY 100
static void *idle_main(void *p) {
  *(pid_t *)p = cp_gettid();
  usleep(20000);
  return NULL;
}

static void test_many_threads(void) {
  reset();
  cp_threads_start(samplers, 1);
  pthread_t t[MANY];
  pid_t tids[MANY] = {0};
  for (int i = 0; i < MANY; i++)
    CHECK_EQ_INT(pthread_create(&t[i], NULL, idle_main, &tids[i]), 0);
  for (int i = 0; i < MANY; i++)
    pthread_join(t[i], NULL);
  int ok = 0;
  for (int i = 0; i < MANY; i++)
    ok += STARTED(tids[i]) == 1 && EXITED(tids[i]) == 1;
  CHECK_EQ_INT(ok, MANY);
  cp_threads_stop();
}

/* The profiler's own threads: one that marks itself is announced gone at
 * once, carries the internal mark in its state (its allocations and lock
 * waits are not sampled), and a rescan does not announce it again. */
static void *excluded_main(void *p) {
  worker *w = p;
  w->tid = cp_gettid();
  cp_threads_exclude_self();
  w->internal = cp_thread.internal;
  cp_threads_rescan();
  w->started_before_routine = STARTED(w->tid); /* after the rescan */
  return NULL;
}

static void test_own_threads_excluded(void) {
  reset();
  cp_threads_start(samplers, 1);
  worker w = {0};
  pthread_t t;
  pthread_create(&t, NULL, excluded_main, &w);
  pthread_join(t, NULL);
  CHECK_EQ_INT(w.internal, 1);
  CHECK_EQ_INT(w.started_before_routine, 1); /* by the hook, before it ran */
  CHECK_EQ_INT(EXITED(w.tid), 1);            /* at exclude, not again */
  CHECK_EQ_INT(cp_thread.internal, 0);       /* per thread */
  cp_threads_stop();
}

/* A thread made without pthread_create (a raw clone, as some runtimes do)
 * is found by the rescan. */
static int raw_done;
static int raw_main(void *p) {
  (void)p;
  while (!__atomic_load_n(&raw_done, __ATOMIC_ACQUIRE))
    syscall(SYS_sched_yield);
  return 0;
}

static void test_rescan_finds_threads_made_otherwise(void) {
  reset();
  cp_threads_start(samplers, 1);
  static char stack[64 * 1024] __attribute__((aligned(16)));
  pid_t tid = 0;
  int flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD |
              CLONE_SYSVSEM | CLONE_PARENT_SETTID;
  int rc = clone(raw_main, stack + sizeof stack, flags, NULL, &tid);
  CHECK(rc > 0);
  if (rc > 0) {
    CHECK_EQ_INT(STARTED(rc), 0); /* no hook saw it */
    cp_threads_rescan();
    CHECK_EQ_INT(STARTED(rc), 1);
    __atomic_store_n(&raw_done, 1, __ATOMIC_RELEASE);
    /* Gone from /proc/self/task once it has exited: the rescan then
     * announces its end. */
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d", rc);
    for (int i = 0; i < 10000 && access(path, F_OK) == 0; i++)
      usleep(1000);
    cp_threads_rescan();
    CHECK_EQ_INT(EXITED(rc), 1);
  }
  cp_threads_stop();
}

/* Stopped, the registry announces nothing. */
static void test_nothing_after_stop(void) {
  reset();
  cp_threads_start(samplers, 1);
  cp_threads_stop();
  int before = atomic_load(&ev.nstarted);
  worker w = run_worker(0);
  cp_threads_rescan();
  CHECK_EQ_INT(atomic_load(&ev.nstarted), before);
  CHECK_EQ_INT(EXITED(w.tid), 0);
}

TEST_MAIN(T(test_existing_threads_announced_at_start),
          T(test_created_thread_appears_and_disappears), T(test_many_threads),
          T(test_own_threads_excluded),
          T(test_rescan_finds_threads_made_otherwise),
          T(test_nothing_after_stop))
