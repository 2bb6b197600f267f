/* contprof for Ruby: samples Ruby frames and hands them to libcontprof's
 * aggregator, exporter and uploaders (include/contprof/runtime.h).
 *
 * CPU: one POSIX timer per Ruby thread on that thread's CPU clock, delivered
 * to that thread (SIGEV_THREAD_ID, slot number in si_value). The handler only
 * adds the expiry to the slot's pending count and registers a postponed job;
 * the job runs at the thread's next interrupt check, with the GVL, takes the
 * Ruby stack with rb_profile_frames and records one sample whose quantity is
 * the thread's CPU-clock delta since its previous sample.
 *
 * Wall: a ticker pthread (no Ruby API besides the async-signal-safe
 * rb_postponed_job_register_one and rb_during_gc) records every known
 * thread's last stack each interval and asks the GVL holder (postponed job)
 * to refresh its own. Threads that do not run are read with
 * Thread#backtrace_locations by the "contprof" Ruby thread (sampler_main).
 *
 * GC: the handler reads rb_during_gc() (a flag, as stackprof does): CPU
 * periods that land in GC get a "[GC]" frame on top of the stack, and so do
 * the wall ticks of the thread last seen in GC while GC runs. No GC event
 * hook: any RUBY_INTERNAL_EVENT_GC_* hook sends every allocation down
 * Ruby's slow path.
 *
 * Allocations: RUBY_INTERNAL_EVENT_NEWOBJ with a geometric countdown (Poisson
 * over object counts); the hook copies rb_profile_frames' raw frames into a
 * small ring and a postponed job names and records them.
 *
 * Ruby 3.1+ (Thread#native_thread_id, Process._fork). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Ruby's inline functions have unused parameters (-Wextra). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include <ruby.h>
#include <ruby/debug.h>
#include <ruby/thread.h>
#pragma GCC diagnostic pop

#include "contprof/profiler.h"
#include "contprof/runtime.h"
#include "random.h"

#define MAX_THREADS 1024
#define TIMER_COOKIE 0x52420000 /* "RB" in the high half, slot below */
#define COOKIE_MASK 0xffff0000
#define STALE_OWN_NS 250000000ull /* own stack older: ask backtrace */
#define STALE_OTHER_NS                                                         \
  100000000ull /* backtrace_locations at most this often                       \
                */
#define STALE_BLOCKED_NS 200000000ull /* a blocked thread's, re-read */
#define REFRESH_PER_TICK 8
#define SCAN_NS 100000000ull  /* Thread.list at most every 100 ms */
#define NAME_NS 1000000000ull /* a running thread's Thread#name, every 1 s */
#define ALLOC_RING 256
#define SLOT_BYTES 40 /* an object slot (RVALUE); alloc-space estimate */
#define CPUCLOCK_SCHED 2
#define CPUCLOCK_PERTHREAD 4

typedef struct rthread {
  int used;
  VALUE thread;
  pid_t tid;
  int timer_id;
  int has_timer;
  uint64_t last_cpu_ns;
  _Atomic int64_t pending;    /* CPU periods signalled, not yet recorded */
  _Atomic int64_t pending_gc; /* ...of which landed in GC */
  uint64_t *stack;            /* last stack, leaf first (under st.lock) */
  size_t nstack;
  uint64_t own_ns;   /* when the thread took it itself (monotonic) */
  uint64_t other_ns; /* when backtrace_locations refreshed it */
  uint32_t labels;
  uint64_t span, lrs;
  VALUE name;       /* last name given to the core (a frozen String or nil) */
  uint64_t name_ns; /* when Thread#name was last read */
} rthread;

typedef struct alloc_pending {
  pid_t tid;
  uint32_t labels;
  uint64_t span, lrs;
  int n;
  VALUE *frames;
  int *lines;
} alloc_pending;

static struct {
  /* Written under the GVL; the ticker and the handler read the atomics. */
  int running;
  _Atomic int cpu_active;
  _Atomic int gc_slot;
  contprof_runtime_settings set;
  uint64_t period_ns;
  size_t max_frames;
  int signal;
  int handler_installed;
  struct sigaction old_sa;

  pthread_mutex_t lock; /* slots' stacks, labels, used/tid; ticker state */
  pthread_cond_t cond;
  pthread_t ticker;
  int ticker_running;
  int ticker_stop;
  pthread_cond_t sampler_cond;
  int sampler_stop;
  VALUE sampler; /* the "contprof" Ruby thread */

  rthread slots[MAX_THREADS];
  int nslots; /* high-water mark */

  VALUE tp_newobj, tp_thread;
  VALUE keeper; /* marks the cached frames, threads and pending VALUEs */
  int in_sampler;

  /* Allocation sampling (GVL). */
  long alloc_mean;
  long alloc_countdown;
  alloc_pending ring[ALLOC_RING];
  int ring_head, ring_count;
  int64_t alloc_dropped;

  /* Options by environment-variable name (Contprof.start's keywords). */
  char **opt_names, **opt_values;
  size_t nopts;
  char version[32];
  unsigned fork_gen;
} st = {.lock = PTHREAD_MUTEX_INITIALIZER,
        .cond = PTHREAD_COND_INITIALIZER,
        .sampler_cond = PTHREAD_COND_INITIALIZER};

static VALUE mContprof, mNative, eError;
static ID id_list, id_native_thread_id, id_name, id_backtrace_locations,
    id_label, id_path, id_lineno, id_alive, id_stop_p;
static uint64_t gc_frame, unknown_frame, dropped_frame;

static __thread pid_t tls_tid;
static __thread int tls_is_sampler; /* the "contprof" Ruby thread */
static __thread unsigned tls_gen;

static pid_t current_tid(void) {
  if (!tls_tid || tls_gen != st.fork_gen) {
    tls_tid = (pid_t)syscall(SYS_gettid);
    tls_gen = st.fork_gen;
  }
  return tls_tid;
}

static uint64_t monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static clockid_t thread_clock(pid_t tid) {
  return (clockid_t)((~(unsigned)tid << 3) | CPUCLOCK_SCHED |
                     CPUCLOCK_PERTHREAD);
}

static uint64_t clock_ns(clockid_t c) {
  struct timespec ts;
  if (clock_gettime(c, &ts) != 0)
    return 0;
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* --- frame cache: (frame VALUE, line) -> frame word ---------------------- */

typedef struct cache_ent {
  VALUE frame;
  int line;
  uint64_t word;
} cache_ent;

#define CACHE_SIZE (1u << 15)
static cache_ent *cache;
static size_t cache_count;

static size_t cache_hash(VALUE frame, int line) {
  uint64_t h = (uint64_t)frame * 0x9e3779b97f4a7c15ull ^ (uint64_t)line;
  h ^= h >> 29;
  return (size_t)(h * 0xbf58476d1ce4e5b9ull >> 17) & (CACHE_SIZE - 1);
}

static void copy_cstr(VALUE s, char *buf, size_t len) {
  if (NIL_P(s) || !RB_TYPE_P(s, T_STRING)) {
    buf[0] = '\0';
    return;
  }
  size_t n = (size_t)RSTRING_LEN(s);
  if (n >= len)
    n = len - 1;
  memcpy(buf, RSTRING_PTR(s), n);
  buf[n] = '\0';
}

/* With the GVL, outside allocation hooks (names allocate strings). */
static uint64_t frame_word(VALUE frame, int line) {
  size_t i = cache_hash(frame, line);
  while (cache[i].frame) {
    if (cache[i].frame == frame && cache[i].line == line)
      return cache[i].word;
    i = (i + 1) & (CACHE_SIZE - 1);
  }
  char fn[512], file[1024];
  /* full_label ("block in Foo#bar"), except where Ruby 3.1 has no method
   * name to qualify (<main>, <top (required)>): label then. */
  VALUE label = rb_profile_frame_full_label(frame);
  if (NIL_P(label) || RSTRING_LEN(label) == 0 ||
      RSTRING_PTR(label)[RSTRING_LEN(label) - 1] == ' ')
    label = rb_profile_frame_label(frame);
  copy_cstr(label, fn, sizeof fn);
  copy_cstr(rb_profile_frame_path(frame), file, sizeof file);
  uint64_t word =
      contprof_frame_intern(fn[0] ? fn : "<unknown>", file, (int64_t)line);
  if (!word)
    return unknown_frame;
  if (cache_count >= CACHE_SIZE * 3 / 4) {
    memset(cache, 0, CACHE_SIZE * sizeof *cache);
    cache_count = 0;
    i = cache_hash(frame, line);
  }
  cache[i] = (cache_ent){frame, line, word};
  cache_count++;
  return word;
}

static void keeper_mark(void *p) {
  (void)p;
  if (cache)
    for (size_t i = 0; i < CACHE_SIZE; i++)
      if (cache[i].frame)
        rb_gc_mark(cache[i].frame);
  for (int i = 0; i < st.nslots; i++)
    if (st.slots[i].used) {
      rb_gc_mark(st.slots[i].thread);
      rb_gc_mark(st.slots[i].name);
    }
  for (int k = 0; k < st.ring_count; k++) {
    alloc_pending *a = &st.ring[(st.ring_head + k) % ALLOC_RING];
    for (int j = 0; j < a->n; j++)
      rb_gc_mark(a->frames[j]);
  }
}

static const rb_data_type_t keeper_type = {
    .wrap_struct_name = "contprof_keeper",
    .function = {.dmark = keeper_mark},
    .flags = RUBY_TYPED_FREE_IMMEDIATELY,
};

/* --- thread slots -------------------------------------------------------- */

static int slot_of_tid(pid_t tid) {
  for (int i = 0; i < st.nslots; i++)
    if (st.slots[i].used && st.slots[i].tid == tid)
      return i;
  return -1;
}

static int slot_of_current(void) { return slot_of_tid(current_tid()); }

static void arm_timer(int slot) {
  rthread *t = &st.slots[slot];
  struct sigevent sev;
  memset(&sev, 0, sizeof sev);
  sev.sigev_notify = SIGEV_THREAD_ID;
  sev.sigev_signo = st.signal;
  sev.sigev_value.sival_int = TIMER_COOKIE | slot;
  sev._sigev_un._tid = t->tid;
  int id;
  if (syscall(SYS_timer_create, thread_clock(t->tid), &sev, &id) != 0)
    return;
  /* First expiry random in (0, period]: short threads get their share. */
  uint64_t first = 1 + cp_random_below(st.period_ns);
  struct itimerspec its = {
      .it_interval = {(time_t)(st.period_ns / 1000000000ull),
                      (long)(st.period_ns % 1000000000ull)},
      .it_value = {(time_t)(first / 1000000000ull),
                   (long)(first % 1000000000ull)},
  };
  if (syscall(SYS_timer_settime, id, 0, &its, NULL) != 0) {
    syscall(SYS_timer_delete, id);
    return;
  }
  t->timer_id = id;
  t->has_timer = 1;
}

static void disarm_timer(rthread *t) {
  if (t->has_timer) {
    syscall(SYS_timer_delete, t->timer_id);
    t->has_timer = 0;
  }
}

/* With the GVL: a slot for thread `th` (native id `tid`). */
static int add_slot(VALUE th, pid_t tid) {
  int free_slot = -1;
  for (int i = 0; i < MAX_THREADS; i++)
    if (!st.slots[i].used) {
      free_slot = i;
      break;
    }
  if (free_slot < 0)
    return -1;
  rthread *t = &st.slots[free_slot];
  if (!t->stack) {
    t->stack = calloc(st.max_frames + 2, sizeof *t->stack);
    if (!t->stack)
      return -1;
  } else {
    /* max_frames may have grown since the slot was first used. */
    uint64_t *s = realloc(t->stack, (st.max_frames + 2) * sizeof *s);
    if (!s)
      return -1;
    t->stack = s;
  }
  pthread_mutex_lock(&st.lock);
  t->thread = th;
  t->tid = tid;
  t->nstack = 0;
  t->own_ns = t->other_ns = 0;
  t->labels = 0;
  t->span = t->lrs = 0;
  t->name = Qnil;
  t->name_ns = 0;
  t->has_timer = 0;
  atomic_store(&t->pending, 0);
  atomic_store(&t->pending_gc, 0);
  t->last_cpu_ns = clock_ns(thread_clock(tid));
  t->used = 1;
  if (free_slot >= st.nslots)
    st.nslots = free_slot + 1;
  pthread_mutex_unlock(&st.lock);
  if (atomic_load(&st.cpu_active))
    arm_timer(free_slot);
  return free_slot;
}

static void free_slot(int i) {
  rthread *t = &st.slots[i];
  disarm_timer(t);
  pthread_mutex_lock(&st.lock);
  t->used = 0;
  t->thread = Qnil;
  t->name = Qnil;
  pthread_mutex_unlock(&st.lock);
}

/* With the GVL: Thread#name `name` to the core if it changed. */
static void update_name(rthread *t, VALUE name) {
  t->name_ns = monotonic_ns();
  if (rb_equal(name, t->name))
    return;
  if (NIL_P(name)) {
    contprof_set_thread_name(t->tid, NULL);
  } else {
    char buf[256];
    copy_cstr(name, buf, sizeof buf);
    contprof_set_thread_name(t->tid, buf);
    name = rb_str_new_frozen(name);
  }
  t->name = name;
}

/* With the GVL, on thread `slot`: its name, at most every NAME_NS. */
static void refresh_own_name(int slot) {
  rthread *t = &st.slots[slot];
  if (monotonic_ns() - t->name_ns >= NAME_NS)
    update_name(t, rb_funcall(rb_thread_current(), id_name, 0));
}

/* With the GVL: discovers new threads (slots, timers), forgets dead ones,
 * passes Thread#name to the core. Allocates (Thread.list). */
static void scan_threads(void) {
  VALUE list = rb_funcall(rb_cThread, id_list, 0);
  long n = RARRAY_LEN(list);
  static char seen[MAX_THREADS];
  memset(seen, 0, sizeof seen);
  for (long k = 0; k < n; k++) {
    VALUE th = rb_ary_entry(list, k);
    if (th == st.sampler)
      continue; /* our own */
    int slot = -1;
    for (int i = 0; i < st.nslots; i++)
      if (st.slots[i].used && st.slots[i].thread == th) {
        slot = i;
        break;
      }
    if (slot < 0) {
      pid_t tid;
      if (th == rb_thread_current()) {
        /* Ruby 3.1 keeps the parent's id in the child of fork. */
        tid = current_tid();
      } else {
        VALUE ntid = rb_funcall(th, id_native_thread_id, 0);
        if (NIL_P(ntid))
          continue; /* not started yet */
        tid = (pid_t)NUM2INT(ntid);
      }
      int stale = slot_of_tid(tid); /* a cached native thread, reused */
      if (stale >= 0)
        free_slot(stale);
      slot = add_slot(th, tid);
      if (slot < 0)
        continue;
    }
    seen[slot] = 1;
    update_name(&st.slots[slot], rb_funcall(th, id_name, 0));
  }
  for (int i = 0; i < st.nslots; i++)
    if (st.slots[i].used && !seen[i])
      free_slot(i);
  RB_GC_GUARD(list);
}

/* With the GVL, on thread `slot`: its Ruby stack into the slot. */
static void capture_current(int slot) {
  VALUE frames[st.max_frames];
  int lines[st.max_frames];
  uint64_t words[st.max_frames + 1];
  int n = rb_profile_frames(0, (int)st.max_frames, frames, lines);
  size_t m = 0;
  for (int i = 0; i < n; i++)
    words[m++] = frame_word(frames[i], lines[i]);
  if (m == 0)
    words[m++] = unknown_frame;
  rthread *t = &st.slots[slot];
  pthread_mutex_lock(&st.lock);
  memcpy(t->stack, words, m * sizeof *words);
  t->nstack = m;
  t->own_ns = monotonic_ns();
  t->labels = contprof_labels_current();
  pthread_mutex_unlock(&st.lock);
}

/* With the GVL: another thread's stack from Thread#backtrace_locations (the
 * only public way in Ruby 3.1); names are Location#label (no class). */
static void capture_other(int slot) {
  rthread *t = &st.slots[slot];
  VALUE locs = rb_funcall(t->thread, id_backtrace_locations, 2, INT2FIX(0),
                          INT2FIX((int)st.max_frames));
  uint64_t words[st.max_frames + 1];
  size_t m = 0;
  if (!NIL_P(locs)) {
    long n = RARRAY_LEN(locs);
    for (long i = 0; i < n && m < st.max_frames; i++) {
      VALUE loc = rb_ary_entry(locs, i);
      char fn[512], file[1024];
      copy_cstr(rb_funcall(loc, id_label, 0), fn, sizeof fn);
      copy_cstr(rb_funcall(loc, id_path, 0), file, sizeof file);
      int line = NUM2INT(rb_funcall(loc, id_lineno, 0));
      uint64_t w = contprof_frame_intern(fn[0] ? fn : "<unknown>", file, line);
      words[m++] = w ? w : unknown_frame;
    }
  }
  pthread_mutex_lock(&st.lock);
  t->other_ns = monotonic_ns();
  if (m) {
    memcpy(t->stack, words, m * sizeof *words);
    t->nstack = m;
  }
  pthread_mutex_unlock(&st.lock);
  RB_GC_GUARD(locs);
}

/* --- postponed jobs (GVL, interrupt check) ------------------------------- */

static void record_cpu(const uint64_t *frames, size_t n, int64_t count,
                       int64_t ns) {
  contprof_sample s = {.frames = frames,
                       .nframes = n,
                       .labels = CONTPROF_LABELS_OF_CALLER,
                       .kind = CONTPROF_KIND_CPU,
                       .count = count,
                       .quantity = ns};
  contprof_record(&s);
}

/* The signalled thread's pending CPU periods, with its current stack. Other
 * threads' periods wait for their own next job (the job queue is VM-wide). */
static void cpu_job(void *arg) {
  (void)arg;
  if (!st.running || st.in_sampler)
    return;
  int slot = slot_of_current();
  if (slot < 0)
    return;
  rthread *t = &st.slots[slot];
  int64_t ticks = atomic_exchange(&t->pending, 0);
  int64_t gticks = atomic_exchange(&t->pending_gc, 0);
  if (ticks + gticks <= 0)
    return;
  st.in_sampler = 1;
  capture_current(slot);
  refresh_own_name(slot);
  uint64_t now = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  int64_t delta = now > t->last_cpu_ns ? (int64_t)(now - t->last_cpu_ns) : 0;
  t->last_cpu_ns = now;
  int64_t gc_ns = delta * gticks / (ticks + gticks);
  uint64_t frames[st.max_frames + 2];
  pthread_mutex_lock(&st.lock);
  size_t n = t->nstack;
  memcpy(frames + 1, t->stack, n * sizeof *frames);
  pthread_mutex_unlock(&st.lock);
  if (ticks > 0)
    record_cpu(frames + 1, n, ticks, delta - gc_ns);
  if (gticks > 0) {
    frames[0] = gc_frame;
    record_cpu(frames, n + 1, gticks, gc_ns);
  }
  st.in_sampler = 0;
}

/* Wall: the GVL holder's own stack (the ticker records every thread's). */
static void tick_job(void *arg) {
  (void)arg;
  if (!st.running || st.in_sampler)
    return;
  st.in_sampler = 1;
  int me = slot_of_current();
  if (me >= 0) {
    capture_current(me);
    refresh_own_name(me);
  }
  st.in_sampler = 0;
}

/* With the GVL, on the sampler thread: forgets ended threads and refreshes
 * the stacks of threads that do not run (no own samples). */
static void refresh_others(void) {
  uint64_t now = monotonic_ns();
  int refreshed = 0;
  for (int i = 0; i < st.nslots; i++) {
    rthread *t = &st.slots[i];
    if (!t->used)
      continue;
    if (!RTEST(rb_funcall(t->thread, id_alive, 0))) {
      free_slot(i); /* no wall time after its end */
      continue;
    }
    if (refreshed >= REFRESH_PER_TICK)
      continue;
    /* Blocked (sleep, join, Mutex, Queue...): its stack as soon as it
     * blocked after running, then now and then. Runnable but not seen
     * running itself (I/O without the GVL, or waiting for the GVL): its own
     * last stack, else now and then. */
    int stale;
    if (RTEST(rb_funcall(t->thread, id_stop_p, 0)))
      stale = t->own_ns >= t->other_ns || now - t->other_ns > STALE_BLOCKED_NS;
    else
      stale =
          now - t->own_ns > STALE_OWN_NS && now - t->other_ns > STALE_OTHER_NS;
    if (stale) {
      capture_other(i);
      refreshed++;
    }
  }
}

/* The "contprof" Ruby thread: Thread.list every 100 ms (new threads get
 * their CPU timer, names), and in wall mode every interval the stacks of the
 * threads that are not running. A Ruby thread, because only a thread holding
 * the GVL may read other threads' stacks, and when every application thread
 * is blocked no postponed job runs. */
static void *sampler_wait(void *arg) {
  uint64_t ns = *(uint64_t *)arg;
  pthread_mutex_lock(&st.lock);
  if (!st.sampler_stop) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    uint64_t t = (uint64_t)until.tv_nsec + ns;
    until.tv_sec += (time_t)(t / 1000000000ull);
    until.tv_nsec = (long)(t % 1000000000ull);
    pthread_cond_timedwait(&st.sampler_cond, &st.lock, &until);
  }
  pthread_mutex_unlock(&st.lock);
  return NULL;
}

static void sampler_unblock(void *arg) {
  (void)arg;
  pthread_mutex_lock(&st.lock);
  pthread_cond_broadcast(&st.sampler_cond);
  pthread_mutex_unlock(&st.lock);
}

static VALUE sampler_main(void *arg) {
  (void)arg;
  int wall = (st.set.profiles & CONTPROF_SELF(CONTPROF_KIND_WALL)) != 0;
  uint64_t interval =
      wall ? (uint64_t)st.set.wall_interval_ms * 1000000ull : SCAN_NS;
  uint64_t last_scan = monotonic_ns();
  tls_is_sampler = 1;
  int own = slot_of_current(); /* made by the thread-begin hook */
  if (own >= 0)
    free_slot(own);
  while (!st.sampler_stop) {
    rb_thread_call_without_gvl(sampler_wait, &interval, sampler_unblock, NULL);
    if (st.sampler_stop || !st.running)
      break;
    st.in_sampler = 1;
    uint64_t now = monotonic_ns();
    if (now - last_scan >= SCAN_NS) {
      last_scan = now;
      scan_threads();
    }
    if (wall)
      refresh_others();
    st.in_sampler = 0;
  }
  return Qnil;
}

static void alloc_job(void *arg) {
  (void)arg;
  if (st.in_sampler)
    return;
  st.in_sampler = 1;
  uint64_t words[st.max_frames + 1];
  while (st.ring_count > 0) {
    alloc_pending *a = &st.ring[st.ring_head];
    size_t m = 0;
    for (int j = 0; j < a->n; j++)
      words[m++] = frame_word(a->frames[j], a->lines[j]);
    if (!m)
      words[m++] = unknown_frame;
    a->n = 0; /* its VALUEs need no marking any more */
    st.ring_head = (st.ring_head + 1) % ALLOC_RING;
    st.ring_count--;
    if (!st.running)
      continue;
    contprof_sample s = {.frames = words,
                         .nframes = m,
                         .tid = a->tid,
                         .labels = a->labels,
                         .span_id = a->span,
                         .local_root_span_id = a->lrs,
                         .kind = CONTPROF_KIND_ALLOC,
                         .count = st.alloc_mean,
                         .quantity = st.alloc_mean * SLOT_BYTES};
    contprof_record(&s);
  }
  if (st.alloc_dropped && st.running) {
    contprof_sample s = {.frames = &dropped_frame,
                         .nframes = 1,
                         .labels = CONTPROF_LABELS_OF_CALLER,
                         .kind = CONTPROF_KIND_ALLOC,
                         .count = st.alloc_dropped * st.alloc_mean,
                         .quantity =
                             st.alloc_dropped * st.alloc_mean * SLOT_BYTES};
    contprof_record(&s);
  }
  st.alloc_dropped = 0;
  st.in_sampler = 0;
}

/* --- hooks ---------------------------------------------------------------- */

/* Async-signal-safe: runs in the CPU timer's signal handler. Adds the expiry
 * (1 + overrun periods) to the slot named by the timer and registers the
 * postponed job (rb_postponed_job_register_one is async-signal-safe). */
static void on_cpu_signal(int sig, siginfo_t *info, void *uc) {
  int saved_errno = errno;
  if (info->si_code != SI_TIMER ||
      ((unsigned)info->si_value.sival_int & COOKIE_MASK) != TIMER_COOKIE) {
    if ((st.old_sa.sa_flags & SA_SIGINFO) && st.old_sa.sa_sigaction)
      st.old_sa.sa_sigaction(sig, info, uc);
    else if (!(st.old_sa.sa_flags & SA_SIGINFO) &&
             st.old_sa.sa_handler != SIG_DFL &&
             st.old_sa.sa_handler != SIG_IGN && st.old_sa.sa_handler)
      st.old_sa.sa_handler(sig);
    errno = saved_errno;
    return;
  }
  unsigned slot = (unsigned)info->si_value.sival_int & ~COOKIE_MASK;
  if (slot < MAX_THREADS && atomic_load(&st.cpu_active)) {
    int64_t w = 1 + (info->si_overrun > 0 ? info->si_overrun : 0);
    if (rb_during_gc()) { /* a flag read: what stackprof does here too */
      atomic_store(&st.gc_slot, (int)slot);
      atomic_fetch_add(&st.slots[slot].pending_gc, w);
    } else {
      atomic_fetch_add(&st.slots[slot].pending, w);
    }
    rb_postponed_job_register_one(0, cpu_job, NULL);
  }
  errno = saved_errno;
}

static int slot_of_caller(void);

/* Thread start and end (with the GVL, on that thread): the slot (CPU timer,
 * labels) from its first instruction, no wall time after its end. */
static void on_thread(VALUE tpval, void *data) {
  (void)data;
  if (!st.running)
    return;
  rb_event_flag_t ev =
      rb_tracearg_event_flag(rb_tracearg_from_tracepoint(tpval));
  if (ev == RUBY_EVENT_THREAD_BEGIN) {
    if (rb_thread_current() != st.sampler)
      slot_of_caller();
  } else {
    int slot = slot_of_current();
    if (slot >= 0)
      free_slot(slot);
  }
}

static long geometric(long mean) {
  if (mean <= 1)
    return 1;
  return 1 + (long)cp_random_exp((double)mean);
}

/* In object allocation (NEWOBJ): no Ruby allocation, no GC. Copies the raw
 * frames; alloc_job names them. */
static void on_newobj(VALUE tpval, void *data) {
  (void)tpval;
  (void)data;
  if (--st.alloc_countdown > 0)
    return;
  st.alloc_countdown = geometric(st.alloc_mean);
  if (!st.running || st.in_sampler)
    return;
  if (st.ring_count == ALLOC_RING) {
    st.alloc_dropped++;
    return;
  }
  alloc_pending *a = &st.ring[(st.ring_head + st.ring_count) % ALLOC_RING];
  if (!a->frames) {
    a->frames = calloc(st.max_frames, sizeof *a->frames);
    a->lines = calloc(st.max_frames, sizeof *a->lines);
    if (!a->frames || !a->lines)
      return;
  }
  a->n = rb_profile_frames(0, (int)st.max_frames, a->frames, a->lines);
  a->tid = current_tid();
  a->labels = contprof_labels_current();
  int slot = slot_of_tid(a->tid);
  a->span = slot >= 0 ? st.slots[slot].span : 0;
  a->lrs = slot >= 0 ? st.slots[slot].lrs : 0;
  st.ring_count++;
  rb_postponed_job_register_one(0, alloc_job, NULL);
}

/* --- ticker thread (no GVL, no Ruby API but postponed-job registration) -- */

static void *ticker_main(void *arg) {
  (void)arg;
  contprof_own_thread_begin(); /* its CPU is the profiler's */
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  uint64_t interval = (uint64_t)st.set.wall_interval_ms * 1000000ull;
  uint64_t last = monotonic_ns();
  uint64_t *frames = malloc((st.max_frames + 2) * sizeof *frames);
  pthread_mutex_lock(&st.lock);
  while (!st.ticker_stop && frames) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    uint64_t ns = (uint64_t)until.tv_nsec + interval;
    until.tv_sec += (time_t)(ns / 1000000000ull);
    until.tv_nsec = (long)(ns % 1000000000ull);
    while (!st.ticker_stop &&
           pthread_cond_timedwait(&st.cond, &st.lock, &until) != ETIMEDOUT)
      ;
    if (st.ticker_stop)
      break;
    uint64_t now = monotonic_ns();
    int64_t elapsed = (int64_t)(now - last);
    last = now;
    rb_postponed_job_register_one(0, tick_job, NULL);
    int gc = rb_during_gc();
    int gc_slot = atomic_load(&st.gc_slot);
    for (int i = 0; i < st.nslots; i++) {
      rthread *t = &st.slots[i];
      if (!t->used)
        continue;
      size_t n = t->nstack;
      memcpy(frames + 1, t->stack, n * sizeof *frames);
      if (!n)
        frames[1 + n++] = unknown_frame;
      int in_gc = gc && gc_slot == i;
      frames[0] = gc_frame;
      contprof_sample s = {.frames = in_gc ? frames : frames + 1,
                           .nframes = in_gc ? n + 1 : n,
                           .tid = t->tid,
                           .labels = t->labels,
                           .span_id = t->span,
                           .local_root_span_id = t->lrs,
                           .kind = CONTPROF_KIND_WALL,
                           .count = 1,
                           .quantity = elapsed};
      contprof_record(&s);
    }
  }
  pthread_mutex_unlock(&st.lock);
  free(frames);
  contprof_own_thread_end();
  return NULL;
}

/* --- start / stop --------------------------------------------------------- */

static const char *option_of(const char *name, void *ctx) {
  (void)ctx;
  for (size_t i = 0; i < st.nopts; i++)
    if (strcmp(st.opt_names[i], name) == 0)
      return st.opt_values[i];
  return NULL;
}

static contprof_runtime runtime = {
    .name = "ruby",
    .self_sampled =
        CONTPROF_SELF(CONTPROF_KIND_CPU) | CONTPROF_SELF(CONTPROF_KIND_WALL) |
        CONTPROF_SELF(CONTPROF_KIND_ALLOC) |
        CONTPROF_SELF(CONTPROF_KIND_INUSE) | CONTPROF_SELF(CONTPROF_KIND_LOCK),
    .option = option_of,
};

static int install_handler(void) {
  if (st.handler_installed)
    return 0;
  int candidates[2 + 32];
  int nc = 0;
  candidates[nc++] = SIGPROF;
  for (int s = SIGRTMIN + 2; s <= SIGRTMAX - 2 && nc < 34; s++)
    candidates[nc++] = s;
  for (int k = 0; k < nc; k++) {
    struct sigaction cur;
    if (sigaction(candidates[k], NULL, &cur) != 0)
      continue;
    if ((cur.sa_flags & SA_SIGINFO) || cur.sa_handler != SIG_DFL)
      continue; /* the application's */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_cpu_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(candidates[k], &sa, &st.old_sa) != 0)
      continue;
    st.signal = candidates[k];
    st.handler_installed = 1;
    return 0;
  }
  return -1;
}

static VALUE keeper_new(void) {
  return TypedData_Wrap_Struct(rb_cObject, &keeper_type, &st);
}

/* With the GVL, the core running: starts timers, tracepoints, the ticker. */
static void start_sampling(void) {
  contprof_runtime_settings set;
  if (contprof_runtime_settings_get(&set) != 0)
    return;
  st.set = set;
  st.max_frames = (size_t)set.max_frames;
  st.period_ns = 1000000000ull / (uint64_t)(set.cpu_hz > 0 ? set.cpu_hz : 100);
  if (!gc_frame) {
    gc_frame = contprof_frame_intern("[GC]", "", 0);
    unknown_frame = contprof_frame_intern("[unknown]", "", 0);
    dropped_frame = contprof_frame_intern("[dropped]", "", 0);
  }
  for (int i = 0; i < MAX_THREADS; i++)
    if (st.slots[i].used)
      free_slot(i);
  for (int i = 0; i < ALLOC_RING; i++) {
    free(st.ring[i].frames);
    free(st.ring[i].lines);
    st.ring[i].frames = NULL;
    st.ring[i].lines = NULL;
    st.ring[i].n = 0;
  }
  st.ring_head = st.ring_count = 0;
  st.nslots = 0;
  int cpu = (set.profiles & CONTPROF_SELF(CONTPROF_KIND_CPU)) != 0;
  if (cpu && install_handler() != 0) {
    rb_warn("contprof: no free signal for the CPU timers; CPU profile off");
    cpu = 0;
  }
  atomic_store(&st.cpu_active, cpu);
  st.running = 1;
  st.in_sampler = 1;
  scan_threads();
  st.in_sampler = 0;
  if (NIL_P(st.tp_thread))
    st.tp_thread = rb_tracepoint_new(
        0, RUBY_EVENT_THREAD_BEGIN | RUBY_EVENT_THREAD_END, on_thread, NULL);
  rb_tracepoint_enable(st.tp_thread);
  if (set.profiles & CONTPROF_SELF(CONTPROF_KIND_ALLOC)) {
    st.alloc_mean = set.alloc_sample_bytes / SLOT_BYTES;
    if (st.alloc_mean < 1)
      st.alloc_mean = 1;
    st.alloc_countdown = geometric(st.alloc_mean);
    if (NIL_P(st.tp_newobj))
      st.tp_newobj =
          rb_tracepoint_new(0, RUBY_INTERNAL_EVENT_NEWOBJ, on_newobj, NULL);
    rb_tracepoint_enable(st.tp_newobj);
  }
  st.ticker_stop = 0;
  if (set.profiles & CONTPROF_SELF(CONTPROF_KIND_WALL)) {
    /* Created with every signal blocked, so that none is delivered to it
     * before its first instruction either (see ticker_main). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    st.ticker_running =
        pthread_create(&st.ticker, NULL, ticker_main, NULL) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
  }
  /* The "contprof" Ruby thread only for wall: it takes the GVL now and then,
   * which a CPU-bound thread pays with a switch (and, on a busy machine,
   * with a wait for a CPU). CPU-only: thread-begin/end hooks find threads,
   * and each thread reads its own name in its samples. */
  st.sampler_stop = 0;
  if (set.profiles & CONTPROF_SELF(CONTPROF_KIND_WALL)) {
    st.sampler = rb_thread_create(sampler_main, NULL);
    rb_funcall(st.sampler, rb_intern("name="), 1, rb_str_new_cstr("contprof"));
  }
}

/* With the GVL: undoes start_sampling. The CPU signal already queued to this
 * thread is taken here, so that none reaches an exec'd image. */
static void stop_sampling(void) {
  if (!st.running)
    return;
  st.running = 0;
  if (!NIL_P(st.sampler)) {
    pthread_mutex_lock(&st.lock);
    st.sampler_stop = 1;
    pthread_cond_broadcast(&st.sampler_cond);
    pthread_mutex_unlock(&st.lock);
    if (st.sampler != rb_thread_current())
      rb_funcall(st.sampler, rb_intern("join"), 0);
    st.sampler = Qnil;
  }
  atomic_store(&st.cpu_active, 0);
  if (!NIL_P(st.tp_newobj))
    rb_tracepoint_disable(st.tp_newobj);
  if (!NIL_P(st.tp_thread))
    rb_tracepoint_disable(st.tp_thread);
  for (int i = 0; i < st.nslots; i++)
    disarm_timer(&st.slots[i]);
  if (st.handler_installed) {
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, st.signal);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    struct timespec zero = {0, 0};
    while (sigtimedwait(&set, NULL, &zero) == st.signal)
      ;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
  }
}

static void *join_ticker(void *arg) {
  (void)arg;
  if (st.ticker_running) {
    pthread_mutex_lock(&st.lock);
    st.ticker_stop = 1;
    pthread_cond_broadcast(&st.cond);
    pthread_mutex_unlock(&st.lock);
    pthread_join(st.ticker, NULL);
    st.ticker_running = 0;
  }
  return NULL;
}

typedef struct {
  int rc;
  int flush;
} core_call;

static void *core_stop_or_flush(void *arg) {
  core_call *c = arg;
  if (!c->flush)
    join_ticker(NULL);
  c->rc = c->flush ? contprof_flush() : contprof_stop();
  return NULL;
}

static void free_options(void) {
  for (size_t i = 0; i < st.nopts; i++) {
    free(st.opt_names[i]);
    free(st.opt_values[i]);
  }
  free(st.opt_names);
  free(st.opt_values);
  st.opt_names = st.opt_values = NULL;
  st.nopts = 0;
}

static int copy_option(VALUE key, VALUE value, VALUE arg) {
  (void)arg;
  if (NIL_P(value))
    return ST_CONTINUE;
  key = rb_String(key);
  value = rb_String(value);
  st.opt_names[st.nopts] = strdup(StringValueCStr(key));
  st.opt_values[st.nopts] = strdup(StringValueCStr(value));
  st.nopts++;
  return ST_CONTINUE;
}

/* Contprof::Native.start({"CONTPROF_SERVICE" => "x", ...}) -> true, false
 * (disabled or already running). */
static VALUE n_start(VALUE self, VALUE opts) {
  (void)self;
  Check_Type(opts, T_HASH);
  if (st.running || contprof_is_running())
    return Qfalse;
  free_options();
  long n = RHASH_SIZE(opts);
  st.opt_names = calloc((size_t)n + 1, sizeof *st.opt_names);
  st.opt_values = calloc((size_t)n + 1, sizeof *st.opt_values);
  if (!st.opt_names || !st.opt_values)
    rb_raise(rb_eNoMemError, "contprof: out of memory");
  rb_hash_foreach(opts, copy_option, Qnil);
  runtime.version = st.version;
  int rc = contprof_start_runtime(NULL, &runtime);
  if (rc == CONTPROF_ERR_DISABLED || rc == CONTPROF_ERR_ALREADY_STARTED)
    return Qfalse;
  if (rc != 0)
    rb_raise(eError, "contprof: %s", contprof_strerror(rc));
  start_sampling();
  return Qtrue;
}

static VALUE n_stop(VALUE self) {
  (void)self;
  stop_sampling();
  core_call c = {0, 0};
  rb_thread_call_without_gvl(core_stop_or_flush, &c, RUBY_UBF_IO, NULL);
  return c.rc == 0 ? Qtrue : Qfalse;
}

static VALUE n_flush(VALUE self) {
  (void)self;
  core_call c = {0, 1};
  rb_thread_call_without_gvl(core_stop_or_flush, &c, RUBY_UBF_IO, NULL);
  return c.rc == 0 ? Qtrue : Qfalse;
}

/* contprof_stats_detailed as a Hash named like the profiles' comments
 * (docs/overhead.md): the last period's, or the sums since the start. */
static VALUE n_overhead(VALUE self, VALUE since_start) {
  (void)self;
  contprof_detailed_stats s = {.size = sizeof s};
  int total = RTEST(since_start);
  if (contprof_stats_detailed(total ? NULL : &s, total ? &s : NULL) !=
      CONTPROF_OK)
    rb_raise(rb_eRuntimeError, "contprof_stats_detailed failed");
  static const char *const names[CONTPROF_PROFILE_TYPES] = {
      "cpu", "wall", "alloc", "heap", "lock"};
  const contprof_overhead *o = &s.overhead;
  VALUE h = rb_hash_new(), per = rb_hash_new();
#define SET(hash, key, v) rb_hash_aset(hash, rb_str_new_cstr(key), v)
  SET(h, "profiler_cpu_ns", ULL2NUM(o->profiler_cpu_ns));
  SET(h, "profiler_threads_cpu_ns", ULL2NUM(o->profiler_threads_cpu_ns));
  SET(h, "profiler_hooks_ns", ULL2NUM(o->profiler_hooks_ns));
  SET(h, "profiler_kernel_ns", ULL2NUM(s.profiler_kernel_ns));
  SET(h, "profiler_drain_ns", ULL2NUM(s.profiler_drain_ns));
  SET(h, "process_cpu_ns", ULL2NUM(o->process_cpu_ns));
  SET(h, "profiler_overhead_pct", DBL2NUM(o->profiler_overhead_pct));
  SET(h, "samples", ULL2NUM(o->samples));
  SET(h, "drops", ULL2NUM(o->drops));
  SET(h, "profiler_rss_bytes", ULL2NUM(o->profiler_rss_bytes));
  SET(h, "max_overhead_pct", DBL2NUM(s.max_overhead_pct));
  for (int k = 0; k < CONTPROF_PROFILE_TYPES; k++) {
    const contprof_profile_stats *p = &s.profiles[k];
    if (!p->enabled)
      continue;
    VALUE e = rb_hash_new();
    SET(e, "samples", ULL2NUM(p->samples));
    SET(e, "drops", ULL2NUM(p->drops));
    SET(e, "thinned", ULL2NUM(p->thinned));
    SET(e, "hooks_ns", ULL2NUM(p->hooks_ns));
    SET(e, "kernel_ns", ULL2NUM(p->kernel_ns));
    SET(e, "threads_cpu_ns", ULL2NUM(p->threads_cpu_ns));
    SET(e, "sampling", DBL2NUM(p->sampling));
    SET(e, "slowdown", UINT2NUM(p->slowdown));
    SET(e, "slowdown_max", UINT2NUM(p->slowdown_max));
    SET(per, names[k], e);
  }
  SET(h, "profiles", per);
#undef SET
  return h;
}

static VALUE n_running_p(VALUE self) {
  (void)self;
  return st.running && contprof_is_running() ? Qtrue : Qfalse;
}

/* In the child of Process._fork: the core restarted itself (new pid and
 * runtime-id) from its atfork handler; timers and the ticker are gone. */
static VALUE n_after_fork_child(VALUE self) {
  (void)self;
  if (!st.running)
    return Qnil;
  st.ticker_running = 0;
  st.sampler = Qnil; /* only the forking thread lives on */
  st.in_sampler = 0; /* the sampler may have been switched out mid-way */
  st.running = 0;
  atomic_store(&st.cpu_active, 0);
  if (!NIL_P(st.tp_newobj))
    rb_tracepoint_disable(st.tp_newobj);
  if (!NIL_P(st.tp_thread))
    rb_tracepoint_disable(st.tp_thread);
  for (int i = 0; i < st.nslots; i++)
    st.slots[i].has_timer = 0; /* not inherited */
  if (contprof_is_running())
    start_sampling();
  return Qnil;
}

static void atfork_prepare(void) { pthread_mutex_lock(&st.lock); }
static void atfork_parent(void) { pthread_mutex_unlock(&st.lock); }
static void atfork_child(void) {
  pthread_mutex_init(&st.lock, NULL);
  pthread_cond_init(&st.cond, NULL);
  pthread_cond_init(&st.sampler_cond, NULL);
  st.fork_gen++;
}

/* --- labels and spans ------------------------------------------------------
 */

/* With the GVL: the calling thread's slot, made now if the scan has not seen
 * the thread yet (its labels and span ids must be known from the start). */
static int slot_of_caller(void) {
  int slot = slot_of_current();
  if (slot < 0 && st.running && !tls_is_sampler)
    slot = add_slot(rb_thread_current(), current_tid());
  return slot;
}

static void labels_changed(void) {
  int slot = slot_of_caller();
  if (slot >= 0) {
    pthread_mutex_lock(&st.lock);
    st.slots[slot].labels = contprof_labels_current();
    pthread_mutex_unlock(&st.lock);
  }
}

static VALUE n_label_push(VALUE self, VALUE key, VALUE value) {
  (void)self;
  contprof_label_scope scope;
  int rc =
      contprof_label_push(StringValueCStr(key), StringValueCStr(value), &scope);
  if (rc != 0)
    rb_raise(eError, "contprof: %s", contprof_strerror(rc));
  labels_changed();
  return ULL2NUM(((uint64_t)scope.previous << 32) | scope.valid);
}

static VALUE n_label_pop(VALUE self, VALUE token) {
  (void)self;
  uint64_t v = NUM2ULL(token);
  contprof_label_scope scope = {.previous = (uint32_t)(v >> 32),
                                .valid = (uint32_t)v};
  contprof_label_pop(&scope);
  labels_changed();
  return Qnil;
}

static VALUE n_set_span(VALUE self, VALUE span, VALUE lrs) {
  (void)self;
  uint64_t s = NIL_P(span) ? 0 : NUM2ULL(span);
  uint64_t l = NIL_P(lrs) ? 0 : NUM2ULL(lrs);
  contprof_set_span(s, l);
  int slot = slot_of_caller();
  if (slot >= 0) {
    pthread_mutex_lock(&st.lock);
    st.slots[slot].span = s;
    st.slots[slot].lrs = l;
    pthread_mutex_unlock(&st.lock);
  }
  return Qnil;
}

static VALUE n_current_span(VALUE self) {
  (void)self;
  int slot = slot_of_current();
  if (slot < 0)
    return rb_ary_new_from_args(2, INT2FIX(0), INT2FIX(0));
  return rb_ary_new_from_args(2, ULL2NUM(st.slots[slot].span),
                              ULL2NUM(st.slots[slot].lrs));
}

static VALUE n_set_endpoint(VALUE self, VALUE lrs, VALUE name) {
  (void)self;
  int rc = contprof_set_endpoint(NUM2ULL(lrs), StringValueCStr(name));
  if (rc != 0)
    rb_raise(eError, "contprof: %s", contprof_strerror(rc));
  return Qnil;
}

static VALUE n_signal(VALUE self) {
  (void)self;
  return st.handler_installed ? INT2FIX(st.signal) : Qnil;
}

__attribute__((visibility("default"))) void Init_contprof(void) {
  mContprof = rb_define_module("Contprof");
  mNative = rb_define_module_under(mContprof, "Native");
  eError = rb_define_class_under(mContprof, "Error", rb_eStandardError);
  id_list = rb_intern("list");
  id_native_thread_id = rb_intern("native_thread_id");
  id_name = rb_intern("name");
  id_backtrace_locations = rb_intern("backtrace_locations");
  id_label = rb_intern("label");
  id_path = rb_intern("path");
  id_lineno = rb_intern("lineno");
  id_alive = rb_intern("alive?");
  id_stop_p = rb_intern("stop?");
  VALUE v = rb_const_get(rb_cObject, rb_intern("RUBY_VERSION"));
  copy_cstr(v, st.version, sizeof st.version);
  cache = calloc(CACHE_SIZE, sizeof *cache);
  if (!cache)
    rb_raise(rb_eNoMemError, "contprof: out of memory");
  st.tp_newobj = Qnil;
  st.tp_thread = Qnil;
  rb_gc_register_address(&st.tp_thread);
  st.sampler = Qnil;
  rb_gc_register_address(&st.sampler);
  for (int i = 0; i < MAX_THREADS; i++) {
    st.slots[i].thread = Qnil;
    st.slots[i].name = Qnil;
  }
  rb_gc_register_address(&st.tp_newobj);
  st.keeper = keeper_new();
  rb_gc_register_address(&st.keeper);
  pthread_atfork(atfork_prepare, atfork_parent, atfork_child);

  rb_define_module_function(mNative, "start", n_start, 1);
  rb_define_module_function(mNative, "stop", n_stop, 0);
  rb_define_module_function(mNative, "flush", n_flush, 0);
  rb_define_module_function(mNative, "running?", n_running_p, 0);
  rb_define_module_function(mNative, "overhead", n_overhead, 1);
  rb_define_module_function(mNative, "after_fork_child", n_after_fork_child, 0);
  rb_define_module_function(mNative, "label_push", n_label_push, 2);
  rb_define_module_function(mNative, "label_pop", n_label_pop, 1);
  rb_define_module_function(mNative, "set_span", n_set_span, 2);
  rb_define_module_function(mNative, "current_span", n_current_span, 0);
  rb_define_module_function(mNative, "set_endpoint", n_set_endpoint, 2);
  rb_define_module_function(mNative, "signal", n_signal, 0);
}
