/* The thread family: pthread_create. The hook wraps every thread's start
 * routine so that the thread registry (samplers/threads.h) hears of the new
 * thread from the thread itself, before the application's routine runs, and
 * of its end in a cleanup handler that also runs on pthread_exit and
 * cancellation. The sampling signals stay blocked while the thread is made
 * (an unwinder interrupting the loader there could deadlock) and until it
 * is registered. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "common.h"
#include "interpose/real.h"
#include "profiler_internal.h"
#include "samplers/threads.h"

typedef int (*pthread_create_fn)(pthread_t *, const pthread_attr_t *,
                                 void *(*)(void *), void *);

typedef struct start_args {
  void *(*routine)(void *);
  void *arg;
  sigset_t mask;    /* the creator's mask, restored once registered */
  _Atomic int busy; /* a start_pool slot in use */
} start_args;

/* Where pthread_create hands the start routine to the new thread. Not
 * malloc: with threads whose first allocator call was free() of a block of
 * their creator's, the malloc/free benchmark ran 3% slower for its whole
 * run (glibc 2.36, docs/benchmarks.md). Past START_SLOTS threads starting
 * at once, malloc again. */
#define START_SLOTS 64
static start_args start_pool[START_SLOTS];

static start_args *start_args_take(void) {
  for (size_t i = 0; i < START_SLOTS; i++) {
    int expected = 0;
    if (!atomic_load_explicit(&start_pool[i].busy, memory_order_relaxed) &&
        atomic_compare_exchange_strong_explicit(&start_pool[i].busy, &expected,
                                                1, memory_order_acquire,
                                                memory_order_relaxed))
      return &start_pool[i];
  }
  return malloc(sizeof(start_args));
}

/* The application's threads alive as far as the hooks know: the initial
 * thread and those started through the hook. When it falls to 0 the leaving
 * thread may be the last (threads made otherwise are not counted: the
 * profiler looks at /proc/self/task before it acts). */
static _Atomic long app_threads = 1;
static CP_TLS int started_here; /* this thread came through the hook */

/* In the child of fork: slots the parent's other threads held are never
 * released here. Only those are written: the pool's pages are the
 * parent's, and each first write would copy one (three faults a child). */
void cp_interpose_after_fork_child(void) {
  atomic_store(&app_threads, 1); /* the forking thread alone */
  for (size_t i = 0; i < START_SLOTS; i++)
    if (atomic_load_explicit(&start_pool[i].busy, memory_order_relaxed))
      atomic_store_explicit(&start_pool[i].busy, 0, memory_order_relaxed);
}

static void start_args_release(start_args *args) {
  if (args >= start_pool && args < start_pool + START_SLOTS)
    atomic_store_explicit(&args->busy, 0, memory_order_release);
  else
    free(args);
}

static void app_thread_leaving(void) {
  if (atomic_fetch_sub(&app_threads, 1) <= 1)
    cp_profiler_thread_leaving();
}

static void thread_ended(void *unused) {
  (void)unused;
  cp_threads_on_exit();
  app_thread_leaving();
}

static void *thread_trampoline(void *p) {
  start_args args = *(start_args *)p;
  start_args_release(p);
  started_here = 1;
  cp_threads_on_start();
  pthread_sigmask(SIG_SETMASK, &args.mask, NULL);
  void *ret;
  pthread_cleanup_push(thread_ended, NULL);
  ret = args.routine(args.arg);
  pthread_cleanup_pop(1);
  return ret;
}

int pthread_create(pthread_t *thread, const pthread_attr_t *attr,
                   void *(*routine)(void *), void *arg) {
  CP_REAL_OR(pthread_create_fn, pthread_create, EAGAIN);
  pthread_create_fn real = fn_pthread_create;
  /* The profiler's own threads (they start with every signal blocked) are
   * not announced: the samplers would make each a CPU timer, a wall slot
   * and its stack bounds, only to drop them when the thread marks itself
   * as ours. */
  if (cp_is_internal_thread_start(routine))
    return real(thread, attr, routine, arg);
  start_args *args = start_args_take();
  if (!args)
    return real(thread, attr, routine, arg);
  args->routine = routine;
  args->arg = arg;
  sigset_t block, old;
  sigemptyset(&block);
  cp_threads_sampling_signals(&block);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  args->mask = old;
  atomic_fetch_add(&app_threads, 1); /* before it can end */
  int rc = real(thread, attr, thread_trampoline, args);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    atomic_fetch_sub(&app_threads, 1);
    start_args_release(args);
  }
  return rc;
}

/* A thread the hook did not start (the initial thread, most often: main
 * calling pthread_exit to leave the others running) counts itself out here;
 * one it started does in its cleanup handler (thread_ended). */
void pthread_exit(void *ret) {
  if (!started_here)
    app_thread_leaving();
  typedef void (*pthread_exit_fn)(void *);
  pthread_exit_fn real =
      (pthread_exit_fn)cp_real_symbol("pthread_exit", (void *)pthread_exit);
  if (real)
    real(ret);
  abort(); /* no C library without pthread_exit */
}
