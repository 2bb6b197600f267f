/* The thread family: pthread_create, pthread_cancel, thrd_create. The
 * pthread_create hook wraps every thread's start routine so that the
 * thread registry (samplers/threads.h) hears of the new thread from the
 * thread itself, before the application's routine runs, and of its end in
 * a cleanup handler that also runs on pthread_exit and cancellation. The
 * sampling signals stay blocked while the thread is made (an unwinder
 * interrupting the loader there could deadlock) and until it is
 * registered.
 *
 * The hooks also count the application's threads, so that the process
 * ends when its last one leaves with pthread_exit or is cancelled (the
 * profiler's threads would keep it alive), and keep the flag of the direct
 * calls (interpose/direct.h), which pthread_cancel and thrd_create end. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <threads.h>

#include "common.h"
#include "interpose/direct.h"
#include "interpose/real.h"
#include "passthrough.h"
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
static void count_unhooked_thread(void);

/* What decides cp_direct_calls (interpose/direct.h), each written under
 * the lock and followed by direct_update(). */
static struct {
  pthread_mutex_t lock;
  int allowed;   /* CONTPROF_DIRECT_CALLS at the last start */
  int barred;    /* pthread_cancel or thrd_create was called: for good */
  size_t listed; /* the registry's application threads; 0: not known */
} direct = {.lock = PTHREAD_MUTEX_INITIALIZER};

cp_direct_flag cp_direct_calls;

/* Caller holds direct.lock, having changed an input: the flag follows the
 * last change of any input (app_threads is changed before the lock is
 * taken, so a writer that saw an older count is followed by one that sees
 * the new). */
static void direct_update(void) {
  int on = direct.allowed && !direct.barred && direct.listed == 1 &&
           atomic_load(&app_threads) == 1;
  if (atomic_load_explicit(&cp_direct_calls.on, memory_order_relaxed) != on)
    atomic_store(&cp_direct_calls.on, on);
}

static void direct_changed(void) {
  pthread_mutex_lock(&direct.lock);
  direct_update();
  pthread_mutex_unlock(&direct.lock);
}

void cp_interpose_direct_calls(int allowed) {
  pthread_mutex_lock(&direct.lock);
  direct.allowed = allowed;
  direct_update();
  pthread_mutex_unlock(&direct.lock);
}

void cp_interpose_threads_listed(size_t listed) {
  pthread_mutex_lock(&direct.lock);
  direct.listed = listed;
  direct_update();
  pthread_mutex_unlock(&direct.lock);
}

static void direct_bar(void) {
  pthread_mutex_lock(&direct.lock);
  direct.barred = 1;
  direct_update();
  pthread_mutex_unlock(&direct.lock);
}

/* In the child of fork: slots the parent's other threads held are never
 * released here. Only those are written: the pool's pages are the
 * parent's, and each first write would copy one (three faults a child). */
void cp_interpose_after_fork_child(void) {
  atomic_store(&app_threads, 1); /* the forking thread alone */
  if (!started_here)
    count_unhooked_thread(); /* whichever thread forked */
  pthread_mutex_init(&direct.lock, NULL);
  direct.listed = 0; /* until the registry, if it starts here, says 1 */
  direct_update();
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
  long before = atomic_fetch_sub(&app_threads, 1);
  direct_changed();
  if (before <= 1)
    cp_profiler_thread_leaving();
}

/* A thread the hook did not start (the initial thread: main calling
 * pthread_exit to leave the others running, or cancelled) counts itself out
 * in the destructor of a thread-specific value, which the C library runs
 * whichever way a thread ends but a return from main or exit (then the
 * process ends anyway); one the hook started does in its cleanup handler
 * (thread_ended). A hook of pthread_exit did it before, and missed the
 * cancelled: a process whose main thread was cancelled stayed alive with
 * the profiler's threads. */
static pthread_key_t unhooked_key;
static int unhooked_key_made;

static void unhooked_thread_ended(void *unused) {
  (void)unused;
  if (!started_here)
    app_thread_leaving();
}

/* Marks the calling thread, one the hook did not start and app_threads
 * counts (the one that loads the library, or that forked). */
static void count_unhooked_thread(void) {
  if (unhooked_key_made)
    pthread_setspecific(unhooked_key, (void *)1);
}

__attribute__((constructor)) static void count_initial_thread(void) {
  unhooked_key_made =
      pthread_key_create(&unhooked_key, unhooked_thread_ended) == 0;
  count_unhooked_thread();
}

static void thread_ended(void *unused) {
  (void)unused;
  cp_threads_on_exit();
  app_thread_leaving();
}

CP_PASSTHROUGH static void *thread_trampoline(void *p) {
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

CP_PASSTHROUGH int pthread_create(pthread_t *thread, const pthread_attr_t *attr,
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
  direct_changed();                  /* and before it can cancel this one */
  int rc = real(thread, attr, thread_trampoline, args);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    atomic_fetch_sub(&app_threads, 1);
    direct_changed();
    start_args_release(args);
  }
  return rc;
}

/* A cancellation, even of the caller itself (glibc then makes its own
 * calls cancellation points again), ends direct calls for good: the
 * target must find the bookkeeping at its next call. */
CP_PASSTHROUGH int pthread_cancel(pthread_t thread) {
  typedef int (*fn_t)(pthread_t);
  CP_REAL_OR(fn_t, pthread_cancel, ESRCH);
  direct_bar();
  return fn_pthread_cancel(thread);
}

/* C11 threads are made inside the C library, past the pthread_create hook:
 * the first ends direct calls for good (the registry's scan would see it
 * only within a second). Such threads are found by that scan. */
CP_PASSTHROUGH int thrd_create(thrd_t *thr, thrd_start_t func, void *arg) {
  typedef int (*fn_t)(thrd_t *, thrd_start_t, void *);
  CP_REAL_OR(fn_t, thrd_create, thrd_error);
  direct_bar();
  return fn_thrd_create(thr, func, arg);
}
