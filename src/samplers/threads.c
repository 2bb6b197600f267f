/* Thread registry (see threads.h).
 *
 * The pthread_create hook (interpose/thread_calls.c) wraps every thread's start
 * routine: the new thread registers itself (cp_threads_on_start), runs, and
 * unregisters (cp_threads_on_exit) in a cleanup handler that also runs on
 * pthread_exit and cancellation. Threads made without pthread_create, and
 * threads that existed before the profiler started, are found by scanning
 * /proc/self/task. */
#include "threads.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "fpwalk.h"
#include "heap_table.h"
#include "interpose/real.h"
#include "own_fd.h"
#include "thread_state.h"

#define MAX_EXCLUDED 16
#define MAX_ENDED 1024

static struct {
  pthread_mutex_t lock;
  const cp_sampler *const *samplers;
  size_t nsamplers;
  int active;
  pid_t *tids; /* known application threads, unsorted */
  size_t ntids, cap;
  pid_t excluded[MAX_EXCLUDED];
  size_t nexcluded;
  /* Threads that announced their own end (the hook) but may still be listed
   * in /proc/self/task for a moment: a rescan must not bring them back (it
   * would arm a timer on a dying thread). Forgotten once no longer listed. */
  pid_t ended[MAX_ENDED]; /* fixed: no allocation on application threads */
  size_t nended;
  _Atomic unsigned long long sampling_signals; /* bit sig - 1 */
} reg = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int find(pid_t tid) {
  for (size_t i = 0; i < reg.ntids; i++)
    if (reg.tids[i] == tid)
      return (int)i;
  return -1;
}

/* Caller holds reg.lock. */
static int ended_index(pid_t tid) {
  for (size_t i = 0; i < reg.nended; i++)
    if (reg.ended[i] == tid)
      return (int)i;
  return -1;
}

static int excluded(pid_t tid) {
  for (size_t i = 0; i < reg.nexcluded; i++)
    if (reg.excluded[i] == tid)
      return 1;
  return 0;
}

/* Tells the interposition layer how many application threads are known
 * (its direct calls: interpose/direct.h), at each change: 0 once stopped
 * (it announces every end) or when a scan fails (every thread ends then). A
 * thread made past pthread_create counts from the scan that finds it.
 * Caller holds reg.lock. */
static void publish_count(void) {
  cp_interpose_threads_listed(reg.active ? reg.ntids : 0);
}

/* Caller holds reg.lock. */
static void announce_start(pid_t tid) {
  if (!reg.active || excluded(tid) || find(tid) >= 0)
    return;
  if (reg.ntids == reg.cap) {
    size_t cap = reg.cap ? reg.cap * 2 : 64;
    pid_t *grown = realloc(reg.tids, cap * sizeof *grown);
    if (!grown)
      return;
    reg.tids = grown;
    reg.cap = cap;
  }
  reg.tids[reg.ntids++] = tid;
  publish_count();
  for (size_t i = 0; i < reg.nsamplers; i++)
    if (reg.samplers[i]->thread_started)
      reg.samplers[i]->thread_started(tid);
}

/* Caller holds reg.lock. */
static void announce_exit(pid_t tid) {
  int i = find(tid);
  if (i < 0)
    return;
  reg.tids[i] = reg.tids[--reg.ntids];
  publish_count();
  for (size_t s = 0; s < reg.nsamplers; s++)
    if (reg.samplers[s]->thread_exited)
      reg.samplers[s]->thread_exited(tid);
}

static int compare_tid(const void *a, const void *b) {
  pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;
  return (x > y) - (x < y);
}

typedef struct {
  pid_t *tids;
  size_t n, cap;
} tid_list;

static int add_tid(const char *name, void *arg) {
  tid_list *l = arg;
  pid_t tid = (pid_t)atoi(name);
  if (tid <= 0)
    return 0;
  pid_t *grown = cp_grow_array(l->tids, &l->cap, l->n + 1, sizeof *grown);
  if (!grown)
    return 1;
  l->tids = grown;
  l->tids[l->n++] = tid;
  return 0;
}

/* ticks: run the samplers' ticks after the scan (the profiler's thread);
 * not at start, on the thread that starts the profiler (in the child of
 * fork, the one that forked), where they would do the once-a-second work
 * (the live-heap table's settling: 1 MiB of page faults) on the
 * application's time. */
static void rescan(int ticks) {
  cp_own_fd dir;
  if (cp_own_open(&dir, AT_FDCWD, "/proc/self/task", O_RDONLY | O_DIRECTORY, 0,
                  NULL) < 0)
    return;
  tid_list list = {0};
  cp_own_list_dir(&dir, add_tid, &list);
  cp_own_close(&dir);
  pid_t *seen = list.tids;
  size_t nseen = list.n;
  if (seen)
    qsort(seen, nseen, sizeof *seen, compare_tid);
  pthread_mutex_lock(&reg.lock);
  for (size_t i = reg.nended; i-- > 0;)
    if (!seen ||
        !bsearch(&reg.ended[i], seen, nseen, sizeof *seen, compare_tid))
      reg.ended[i] = reg.ended[--reg.nended];
  for (size_t i = 0; i < nseen; i++)
    if (ended_index(seen[i]) < 0)
      announce_start(seen[i]);
  for (size_t i = reg.ntids; i-- > 0;)
    if (!seen || !bsearch(&reg.tids[i], seen, nseen, sizeof *seen, compare_tid))
      announce_exit(reg.tids[i]);
  for (size_t i = 0; ticks && i < reg.nsamplers; i++)
    if (reg.samplers[i]->tick)
      reg.samplers[i]->tick();
  pthread_mutex_unlock(&reg.lock);
  free(seen);
}

void cp_threads_rescan(void) { rescan(1); }

/* Whether thread tid is a zombie or dead (its /proc state Z or X). */
static int thread_gone(pid_t tid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
  cp_own_fd o;
  if (cp_own_open(&o, AT_FDCWD, path, O_RDONLY, 0, NULL) < 0)
    return 1; /* gone since the listing */
  size_t len = 0;
  char *text = cp_own_read_all(&o, 4096, &len);
  cp_own_close(&o);
  /* "tid (comm) S ...": the state follows the last ')' (comm may hold
   * anything). */
  const char *paren = text ? strrchr(text, ')') : NULL;
  int gone = paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
  free(text);
  return gone;
}

int cp_threads_others_are_ours(void) {
  cp_own_fd dir;
  if (cp_own_open(&dir, AT_FDCWD, "/proc/self/task", O_RDONLY | O_DIRECTORY, 0,
                  NULL) < 0)
    return 0;
  tid_list list = {0};
  int listed = cp_own_list_dir(&dir, add_tid, &list) == 0;
  cp_own_close(&dir);
  pid_t self = cp_gettid();
  int ours = listed && list.n > 0;
  for (size_t i = 0; ours && i < list.n; i++) {
    pthread_mutex_lock(&reg.lock);
    int skip = list.tids[i] == self || excluded(list.tids[i]);
    pthread_mutex_unlock(&reg.lock);
    /* A thread that left but is still listed: the initial thread, after
     * pthread_exit, stays a zombie until the process ends. */
    ours = skip || thread_gone(list.tids[i]);
  }
  free(list.tids);
  return ours;
}

/* The hook is live before the scan (or the caller's announce), so no
 * thread falls between them. */
static void activate(const cp_sampler *const *samplers, size_t nsamplers) {
  pthread_mutex_lock(&reg.lock);
  reg.samplers = samplers;
  reg.nsamplers = nsamplers;
  reg.active = 1;
  reg.ntids = 0;
  pthread_mutex_unlock(&reg.lock);
}

int cp_threads_start(const cp_sampler *const *samplers, size_t nsamplers) {
  activate(samplers, nsamplers);
  rescan(0);
  return 0;
}

int cp_threads_start_forked(const cp_sampler *const *samplers,
                            size_t nsamplers) {
  activate(samplers, nsamplers);
  pthread_mutex_lock(&reg.lock);
  announce_start(cp_gettid());
  pthread_mutex_unlock(&reg.lock);
  return 0;
}

void cp_threads_stop(void) {
  pthread_mutex_lock(&reg.lock);
  while (reg.ntids)
    announce_exit(reg.tids[reg.ntids - 1]);
  reg.active = 0;
  reg.samplers = NULL;
  reg.nsamplers = 0;
  pthread_mutex_unlock(&reg.lock);
}

void cp_threads_after_fork_child(void) {
  pthread_mutex_init(&reg.lock, NULL);
  reg.ntids = 0;
  reg.nexcluded = 0;
  reg.nended = 0;
  reg.active = 0;
  reg.samplers = NULL;
  reg.nsamplers = 0;
}

void cp_threads_exclude_self(void) {
  cp_thread_mark_internal();
  pid_t tid = cp_gettid();
  pthread_mutex_lock(&reg.lock);
  if (reg.nexcluded < MAX_EXCLUDED && !excluded(tid))
    reg.excluded[reg.nexcluded++] = tid;
  announce_exit(tid);
  pthread_mutex_unlock(&reg.lock);
}

void cp_threads_forget_excluded_self(void) {
  pid_t tid = cp_gettid();
  pthread_mutex_lock(&reg.lock);
  for (size_t i = 0; i < reg.nexcluded; i++)
    if (reg.excluded[i] == tid) {
      reg.excluded[i] = reg.excluded[--reg.nexcluded];
      break;
    }
  pthread_mutex_unlock(&reg.lock);
}

void cp_threads_set_sampling_signal(int sig) {
  if (sig > 0 && sig <= 64)
    atomic_fetch_or(&reg.sampling_signals, 1ull << (sig - 1));
}

void cp_threads_sampling_signals(sigset_t *set) {
  unsigned long long sigs = atomic_load(&reg.sampling_signals);
  for (int sig = 1; sig <= 64; sig++)
    if (sigs & (1ull << (sig - 1)))
      sigaddset(set, sig);
}

void cp_threads_on_exit(void) {
  pid_t tid = cp_gettid();
  cp_thread_work_begin();
  pthread_mutex_lock(&reg.lock);
  /* When full (1,024 threads ended within one rescan), the oldest goes: at
   * worst a rescan re-arms a dying thread until the next rescan. */
  if (find(tid) >= 0) {
    if (reg.nended == MAX_ENDED)
      memmove(reg.ended, reg.ended + 1, --reg.nended * sizeof *reg.ended);
    reg.ended[reg.nended++] = tid;
  }
  announce_exit(tid);
  pthread_mutex_unlock(&reg.lock);
  cp_heap_thread_end();
  cp_thread_work_end();
}

void cp_threads_on_start(void) {
  /* No unwinder warm-up here: see cp_unwind_init. */
  pid_t tid = cp_gettid();
  cp_thread_work_begin();   /* the samplers' tables are not the thread's */
  cp_fpwalk_thread_start(); /* the walker's stack bounds */
  cp_heap_thread_begin();   /* its own free live-heap entries */
  pthread_mutex_lock(&reg.lock);
  int gone = ended_index(tid); /* the tid of an ended thread, reused */
  if (gone >= 0)
    reg.ended[gone] = reg.ended[--reg.nended];
  announce_start(tid);
  pthread_mutex_unlock(&reg.lock);
  cp_thread_work_end();
}
