/* contprof's CPython extension: samples Python frames into libcontprof.
 *
 * - CPU and wall: one native sampler thread wakes every 1/CONTPROF_CPU_HZ
 *   (and CONTPROF_WALL_INTERVAL_MS), takes the GIL, walks every thread
 *   state's interpreter frames (read in place: no frame objects are made),
 *   and records per thread the CPU-clock delta since its previous sample
 *   (only when > 0) and the elapsed wall time. Holding the GIL makes the
 *   walk consistent: no other thread can run Python meanwhile.
 * - Allocations: PyMem_SetAllocator hooks on the MEM and OBJ domains (both
 *   are only called with the GIL held, so the sampling state below needs no
 *   other lock) sample allocated bytes as a Poisson process with mean
 *   CONTPROF_ALLOC_SAMPLE_BYTES, unbiased like src/samplers/alloc.c. Sampled
 *   pointers live in a bounded table until freed; the uploader thread
 *   reports them as the live heap in before_export without the GIL.
 * - Labels and spans: the calling thread's C labels (libcontprof's TLS) plus
 *   a per-thread record, keyed by the thread state's unique id, that the
 *   sampler reads for other threads.
 *
 * Everything touched by both the sampler and the hooks is only touched with
 * the GIL held; the heap table is also read by the uploader thread, under
 * heap.lock. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define Py_BUILD_CORE 1
#include "internal/pycore_frame.h"
#undef Py_BUILD_CORE
#define CP_PY311 1
#elif PY_VERSION_HEX >= 0x03080000 && PY_VERSION_HEX < 0x030B0000
#include <frameobject.h>
#define CP_PY_OLD 1
#else
#error "contprof: this CPython's frame layout is not supported (3.8 to 3.11)"
#endif

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "contprof/profiler.h"
#include "contprof/runtime.h"
#include "trace.h"

#define MAX_STACK 1024         /* frames per sample (CONTPROF_MAX_FRAMES) */
#define HEAP_FRAMES 64         /* frames kept per live sampled allocation */
#define FRAME_CACHE_BITS 15    /* (code, instruction) -> frame word */
#define THREAD_TABLE_SIZE 4096 /* Python threads tracked at once */
#define NAME_REFRESH_NS 1000000000ull

/* --- options: the keyword arguments of contprof.start ------------------ */

typedef struct option {
  char *name, *value;
} option;

static struct {
  option *user; /* start()'s keyword arguments, by variable name */
  size_t nuser;
  option norm[8]; /* values this module parsed itself, normalised */
  size_t nnorm;
} opts;

static const char *option_find(const option *o, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(o[i].name, name) == 0)
      return o[i].value;
  return NULL;
}

static void options_free(void) {
  for (size_t i = 0; i < opts.nuser; i++) {
    free(opts.user[i].name);
    free(opts.user[i].value);
  }
  free(opts.user);
  for (size_t i = 0; i < opts.nnorm; i++) {
    free(opts.norm[i].name);
    free(opts.norm[i].value);
  }
  memset(&opts, 0, sizeof opts);
}

/* The core's option callback: no GIL, C data only. */
static const char *runtime_option(const char *name, void *ctx) {
  (void)ctx;
  const char *v = option_find(opts.norm, opts.nnorm, name);
  return v ? v : option_find(opts.user, opts.nuser, name);
}

/* The variables this module needs itself: parsed once here (with the
 * core's parser, so the same defaults and `contprof:` warnings), then handed
 * to the core already valid so that no warning is printed twice. */
static const char *const own_vars[] = {
    "CONTPROF_PROFILES",         "CONTPROF_CPU_HZ",
    "CONTPROF_WALL_INTERVAL_MS", "CONTPROF_ALLOC_SAMPLE_BYTES",
    "CONTPROF_HEAP_MAX_TRACKED", "CONTPROF_MAX_FRAMES",
    "CONTPROF_LOG_LEVEL"};

static const char *own_option(const char *name, void *ctx) {
  (void)ctx;
  for (size_t i = 0; i < sizeof own_vars / sizeof *own_vars; i++)
    if (strcmp(own_vars[i], name) == 0) {
      const char *v = option_find(opts.user, opts.nuser, name);
      /* secure_getenv: nothing of a setuid invoker's (docs/security.md). */
      return v ? v : secure_getenv(name);
    }
  return NULL;
}

static void norm_add(const char *name, const char *fmt, long value) {
  char buf[64];
  snprintf(buf, sizeof buf, fmt, value);
  opts.norm[opts.nnorm].name = strdup(name);
  opts.norm[opts.nnorm].value = strdup(buf);
  opts.nnorm++;
}

/* --- state -------------------------------------------------------------- */

static struct {
  int running;
  int cpu_on, wall_on, alloc_on, heap_on;
  int64_t cpu_period_ns, wall_period_ns;
  size_t max_frames;
  double alloc_rate;
  long heap_max_tracked;
  char version[32];
  PyInterpreterState *interp;
} cfg;

/* --- frames: (code object, instruction) -> frame word -------------------- */

typedef struct frame_slot {
  PyCodeObject *code; /* strong reference: its address cannot be reused */
  int lasti;
  uint64_t word;
} frame_slot;

static frame_slot frame_cache[1u << FRAME_CACHE_BITS];
static size_t frame_cache_used;
static uint64_t truncated_word, no_frame_word;

/* With the GIL. Drops every cached code object (may free them). */
static void frame_cache_clear(void) {
  for (size_t i = 0; i < (1u << FRAME_CACHE_BITS); i++) {
    PyCodeObject *c = frame_cache[i].code;
    frame_cache[i].code = NULL;
    Py_XDECREF(c);
  }
  frame_cache_used = 0;
}

static const char *utf8_or(PyObject *s, const char *fallback) {
  const char *u = s && PyUnicode_Check(s) ? PyUnicode_AsUTF8(s) : NULL;
  if (!u) {
    PyErr_Clear();
    return fallback;
  }
  return u;
}

/* With the GIL. The frame word of code at instruction lasti (in code units
 * on 3.11, bytes before), interned once. From an allocation hook
 * (may_evict 0) a full cache is not cleared: a code object's deallocation
 * must not run inside the allocator. */
static uint64_t frame_word(PyCodeObject *code, int lasti, int may_evict) {
  uint64_t h = ((uint64_t)(uintptr_t)code >> 4) * 0x9e3779b97f4a7c15ull ^
               (uint64_t)(unsigned)lasti * 0xff51afd7ed558ccdull;
  const size_t mask = (1u << FRAME_CACHE_BITS) - 1;
  size_t slot = (size_t)(h >> 20) & mask;
  for (;; slot = (slot + 1) & mask) {
    frame_slot *s = &frame_cache[slot];
    if (!s->code)
      break;
    if (s->code == code && s->lasti == lasti)
      return s->word;
  }
#ifdef CP_PY311
  int line = PyCode_Addr2Line(code, lasti * (int)sizeof(_Py_CODEUNIT));
  const char *name = utf8_or(code->co_qualname, "?");
#else
  int line = PyCode_Addr2Line(code, lasti);
  const char *name = utf8_or(code->co_name, "?");
#endif
  const char *file = utf8_or(code->co_filename, "?");
  uint64_t word = contprof_frame_intern(name, file, line);
  if (!word)
    return 0;
  if (frame_cache_used >= (mask + 1) / 2) {
    if (!may_evict)
      return word;
    frame_cache_clear();
    return frame_word(code, lasti, 0);
  }
  Py_INCREF(code);
  frame_cache[slot] = (frame_slot){code, lasti, word};
  frame_cache_used++;
  return word;
}

/* With the GIL: ts's Python stack, leaf first, into out (at most max). The
 * interpreter's frames are read in place; none is materialised. */
static size_t walk_frames(PyThreadState *ts, uint64_t *out, size_t max,
                          int may_evict) {
  size_t n = 0;
#ifdef CP_PY311
  _PyInterpreterFrame *f = ts->cframe ? ts->cframe->current_frame : NULL;
  for (; f && n < max; f = f->previous) {
    if (_PyFrame_IsIncomplete(f))
      continue;
    uint64_t w = frame_word(f->f_code, _PyInterpreterFrame_LASTI(f), may_evict);
    if (w)
      out[n++] = w;
  }
#else
  PyFrameObject *f = ts->frame;
  for (; f && n < max; f = f->f_back) {
    uint64_t w = frame_word(f->f_code, f->f_lasti, may_evict);
    if (w)
      out[n++] = w;
  }
#endif
  if (f && n == max && truncated_word)
    out[max - 1] = truncated_word;
  return n;
}

/* --- per-thread records -------------------------------------------------- */

/* A thread's record is keyed by its kernel thread id (3.11; the pthread id
 * before), not by its thread state: a native thread that calls into Python
 * now and then (PyGILState_Ensure, Release) gets a new thread state each
 * time, but its CPU clock goes on, and its labels are its own. */
typedef struct pythread {
  uint64_t key; /* 0 = free */
  pid_t tid;    /* 0 until known (before 3.11: from threading) */
  clockid_t cpu_clock;
  int has_clock;
  uint32_t labels;
  uint64_t span_id, local_root_span_id;
  int64_t last_cpu_ns;   /* thread CPU clock at its previous sample */
  uint64_t last_wall_ns; /* monotonic time of its previous wall sample */
  uint64_t pass;         /* the sampler pass that last saw it */
} pythread;

static pythread threads_tab[THREAD_TABLE_SIZE];
static size_t threads_used;

static int64_t clock_ns(clockid_t c) {
  struct timespec t;
  if (clock_gettime(c, &t) != 0)
    return -1;
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static uint64_t monotonic_ns(void) {
  return (uint64_t)clock_ns(CLOCK_MONOTONIC);
}

#ifdef CP_PY311
static uint64_t ts_key(PyThreadState *ts) {
  return (uint64_t)ts->native_thread_id;
}
#else
static uint64_t ts_key(PyThreadState *ts) { return (uint64_t)ts->thread_id; }
#endif

/* The CPU clock of kernel thread tid (see clock_getcpuclockid(3)): the
 * kernel's CPUCLOCK_SCHED encoding. A thread that has exited just fails. */
static clockid_t thread_cpu_clock(pid_t tid) {
  return (clockid_t)((~(unsigned)tid << 3) | 6u);
}

static size_t key_slot(uint64_t key) {
  return (size_t)(key * 0x9e3779b97f4a7c15ull >> 40) & (THREAD_TABLE_SIZE - 1);
}

/* With the GIL. The record of ts, created when create is set (then with a
 * CPU baseline of 0: a thread first seen has used its CPU since it began).
 * NULL when the table is full. */
static pythread *thread_of(PyThreadState *ts, int create) {
  uint64_t key = ts_key(ts);
  if (!key)
    return NULL;
  const size_t mask = THREAD_TABLE_SIZE - 1;
  size_t slot = key_slot(key);
  for (;; slot = (slot + 1) & mask) {
    pythread *t = &threads_tab[slot];
    if (t->key == key)
      return t;
    if (t->key == 0)
      break;
  }
  if (!create || threads_used >= THREAD_TABLE_SIZE / 2)
    return NULL;
  pythread *t = &threads_tab[slot];
  memset(t, 0, sizeof *t);
  t->key = key;
#ifdef CP_PY311
  t->tid = (pid_t)key;
  t->cpu_clock = thread_cpu_clock(t->tid);
  t->has_clock = 1;
#else
  t->has_clock =
      pthread_getcpuclockid((pthread_t)ts->thread_id, &t->cpu_clock) == 0;
#endif
  threads_used++;
  return t;
}

/* With the GIL: drops the records of threads that are gone (not seen in
 * this pass and their CPU clock no longer readable); rebuilt in place. */
static void threads_sweep(uint64_t pass) {
  static pythread keep[THREAD_TABLE_SIZE];
  size_t n = 0;
  for (size_t i = 0; i < THREAD_TABLE_SIZE; i++) {
    pythread *t = &threads_tab[i];
    if (t->key &&
        (t->pass == pass || (t->has_clock && clock_ns(t->cpu_clock) >= 0)))
      keep[n++] = *t;
  }
  if (n == threads_used)
    return;
  memset(threads_tab, 0, sizeof threads_tab);
  threads_used = 0;
  const size_t mask = THREAD_TABLE_SIZE - 1;
  for (size_t i = 0; i < n; i++) {
    size_t slot = key_slot(keep[i].key);
    while (threads_tab[slot].key)
      slot = (slot + 1) & mask;
    threads_tab[slot] = keep[i];
    threads_used++;
  }
}

/* With the GIL: the calling thread's record, created if needed. */
static pythread *current_thread(void) {
  pythread *t = thread_of(PyThreadState_Get(), 1);
  if (t && !t->tid)
    t->tid = (pid_t)gettid();
  return t;
}

/* --- the sampler thread -------------------------------------------------- */

static struct {
  pthread_t thread;
  int started;
  pthread_mutex_t lock;
  pthread_cond_t wake;
  int stop;
  PyThreadState *ts; /* the sampler's own thread state: never sampled */
  uint64_t pass;
  uint64_t next_names_ns;
} sampler = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* The GIL guard of the allocation hooks: set while this module itself runs
 * with the GIL (sampling, recording an allocation), whose allocations are
 * not sampled. */
static int in_profiler;

/* With the GIL, on the sampler thread: threading's names as `thread name`,
 * read from threading._active (threading is not imported if unused). */
static void name_threads(void) {
  PyObject *modules = PyImport_GetModuleDict(); /* borrowed */
  PyObject *threading =
      modules ? PyDict_GetItemString(modules, "threading") : NULL;
  PyObject *active =
      threading ? PyObject_GetAttrString(threading, "_active") : NULL;
  if (active && PyDict_Check(active)) {
    PyObject *key, *th;
    Py_ssize_t pos = 0;
    while (PyDict_Next(active, &pos, &key, &th)) {
      PyObject *native = PyObject_GetAttrString(th, "_native_id");
      PyObject *name = PyObject_GetAttrString(th, "_name");
      long tid = native && PyLong_Check(native) ? PyLong_AsLong(native) : 0;
      const char *s = utf8_or(name, NULL);
      if (tid > 0 && s)
        contprof_set_thread_name((pid_t)tid, s);
#ifndef CP_PY_OLD
      (void)key;
#else
      /* Before 3.11 a thread state does not know its kernel tid. */
      unsigned long ident = PyLong_AsUnsignedLong(key);
      for (size_t i = 0; tid > 0 && i < THREAD_TABLE_SIZE; i++)
        if (threads_tab[i].key == ident)
          threads_tab[i].tid = (pid_t)tid;
#endif
      Py_XDECREF(native);
      Py_XDECREF(name);
    }
  }
  Py_XDECREF(active);
  PyErr_Clear();
}

static void record(const uint64_t *frames, size_t n, const pythread *t,
                   contprof_sample_kind kind, int64_t quantity) {
  contprof_sample s = {.frames = frames,
                       .nframes = n,
                       .tid = t->tid,
                       .labels = t->labels,
                       .span_id = t->span_id,
                       .local_root_span_id = t->local_root_span_id,
                       .kind = kind,
                       .count = 1,
                       .quantity = quantity};
  contprof_record(&s);
}

/* With the GIL, on the sampler thread: one sample of every Python thread. */
static void sample_pass(int do_cpu, int do_wall) {
  static uint64_t frames[MAX_STACK];
  in_profiler = 1;
  PyObject *et, *ev, *tb;
  PyErr_Fetch(&et, &ev, &tb);
  if (frame_cache_used >= (1u << FRAME_CACHE_BITS) / 2)
    frame_cache_clear();
  uint64_t pass = ++sampler.pass;
  uint64_t now = monotonic_ns();
  int fresh = 0;
  size_t seen = 0;
  for (PyThreadState *ts = PyInterpreterState_ThreadHead(cfg.interp); ts;
       ts = PyThreadState_Next(ts)) {
    if (ts == sampler.ts)
      continue;
    pythread *t = thread_of(ts, 0);
    if (!t) {
      if (!(t = thread_of(ts, 1)))
        continue;
      t->last_wall_ns = now - (uint64_t)cfg.wall_period_ns;
      fresh = 1;
    }
    t->pass = pass;
    seen++;
    if (!t->tid)
      continue; /* before 3.11, until threading names it */
    size_t n = walk_frames(ts, frames, cfg.max_frames, 1);
    int64_t cpu = do_cpu && t->has_clock ? clock_ns(t->cpu_clock) : -1;
    /* A smaller clock: the tid was reused by a new thread. */
    int64_t cpu_delta = cpu < 0                 ? 0
                        : cpu >= t->last_cpu_ns ? cpu - t->last_cpu_ns
                                                : cpu;
    if (cpu >= 0)
      t->last_cpu_ns = cpu;
    uint64_t wall_delta = now - t->last_wall_ns;
    if (do_wall)
      t->last_wall_ns = now;
    if (n == 0)
      continue; /* a thread state with no Python frame: native code */
    if (do_cpu && cpu_delta > 0)
      record(frames, n, t, CONTPROF_KIND_CPU, cpu_delta);
    if (do_wall)
      record(frames, n, t, CONTPROF_KIND_WALL, (int64_t)wall_delta);
  }
  /* Threads gone (or not in Python now): checked once a second. */
  int second = now >= sampler.next_names_ns;
  if (second && seen != threads_used)
    threads_sweep(pass);
  if (fresh || second) {
    name_threads();
    sampler.next_names_ns = now + NAME_REFRESH_NS;
  }
  PyErr_Restore(et, ev, tb);
  in_profiler = 0;
}

static void *sampler_main(void *arg) {
  (void)arg;
  pthread_setname_np(pthread_self(), "contprof-python");
  PyGILState_STATE g = PyGILState_Ensure();
  sampler.ts = PyThreadState_Get();
  PyThreadState *saved = PyEval_SaveThread();
  uint64_t now = monotonic_ns();
  uint64_t next_cpu = now + (uint64_t)cfg.cpu_period_ns;
  uint64_t next_wall = now + (uint64_t)cfg.wall_period_ns;
  pthread_mutex_lock(&sampler.lock);
  for (;;) {
    uint64_t deadline = cfg.cpu_on ? next_cpu : next_wall;
    if (cfg.wall_on && next_wall < deadline)
      deadline = next_wall;
    while (!sampler.stop && (now = monotonic_ns()) < deadline) {
      struct timespec ts = {.tv_sec = (time_t)(deadline / 1000000000),
                            .tv_nsec = (long)(deadline % 1000000000)};
      pthread_cond_timedwait(&sampler.wake, &sampler.lock, &ts);
    }
    if (sampler.stop)
      break;
    pthread_mutex_unlock(&sampler.lock);
    int do_cpu = cfg.cpu_on && now >= next_cpu;
    int do_wall = cfg.wall_on && now >= next_wall;
    PyEval_RestoreThread(saved);
    if (!sampler.stop)
      sample_pass(do_cpu, do_wall);
    saved = PyEval_SaveThread();
    /* Deadlines keep their rhythm; ticks missed (a long wait for the GIL)
     * are skipped, the clock deltas still cover the time. */
    now = monotonic_ns();
    if (do_cpu)
      for (next_cpu += (uint64_t)cfg.cpu_period_ns; next_cpu <= now;)
        next_cpu += (uint64_t)cfg.cpu_period_ns;
    if (do_wall)
      for (next_wall += (uint64_t)cfg.wall_period_ns; next_wall <= now;)
        next_wall += (uint64_t)cfg.wall_period_ns;
    pthread_mutex_lock(&sampler.lock);
  }
  pthread_mutex_unlock(&sampler.lock);
  PyEval_RestoreThread(saved);
  sampler.ts = NULL;
  PyGILState_Release(g);
  return NULL;
}

static int sampler_start(void) {
  if (!cfg.cpu_on && !cfg.wall_on)
    return 0;
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(&sampler.wake, &a);
  pthread_condattr_destroy(&a);
  sampler.stop = 0;
  sampler.next_names_ns = 0;
  if (pthread_create(&sampler.thread, NULL, sampler_main, NULL) != 0)
    return -1;
  sampler.started = 1;
  return 0;
}

/* Without the GIL (the sampler needs it to finish its pass). */
static void sampler_stop(void) {
  if (!sampler.started)
    return;
  pthread_mutex_lock(&sampler.lock);
  sampler.stop = 1;
  pthread_cond_signal(&sampler.wake);
  pthread_mutex_unlock(&sampler.lock);
  pthread_join(sampler.thread, NULL);
  pthread_cond_destroy(&sampler.wake);
  sampler.started = 0;
}

/* --- allocations: Poisson byte sampling and the live heap ---------------- */

typedef struct heap_entry {
  void *ptr;
  int64_t count, bytes; /* unbiased */
  pid_t tid;
  uint32_t labels;
  uint64_t span_id, local_root_span_id;
  uint32_t nframes;
  uint32_t next_free;
  uint64_t frames[HEAP_FRAMES];
} heap_entry;

static struct {
  pthread_mutex_t lock; /* the uploader reads; GIL holders write */
  heap_entry *entries;  /* max entries, 1-based ids; entries[0] unused */
  uint32_t *index;      /* open addressing on the pointer: entry ids */
  size_t index_mask;
  uint32_t free_head;
  size_t next_unused; /* entries past it were never used (untouched) */
  size_t max, live;
  uint64_t untracked; /* sampled but the table was full */
  uint64_t untracked_reported;
} heap = {.lock = PTHREAD_MUTEX_INITIALIZER};

static struct {
  int installed;
  int64_t countdown; /* bytes until the next sample (GIL) */
  uint64_t rng;
} alloc = {.countdown = INT64_MAX};

typedef struct hook_ctx {
  PyMemAllocatorEx orig;
} hook_ctx;
static hook_ctx mem_hook, obj_hook;

static size_t ptr_slot(const void *p) {
  return (size_t)(((uint64_t)(uintptr_t)p >> 4) * 0x9e3779b97f4a7c15ull >> 32) &
         heap.index_mask;
}

/* With the GIL and heap.lock, or before sampling starts. */
static void heap_reset(void) {
  if (!heap.entries)
    return;
  memset(heap.index, 0, (heap.index_mask + 1) * sizeof *heap.index);
  for (size_t i = 1; i < heap.next_unused; i++) {
    if (heap.entries[i].ptr)
      contprof_labels_release(heap.entries[i].labels);
    heap.entries[i].ptr = NULL;
    heap.entries[i].labels = 0;
  }
  heap.free_head = 0;
  heap.next_unused = 1;
  heap.live = 0;
}

static int heap_init(long max) {
  if (heap.entries)
    return 0; /* sized by the first start */
  size_t cap = 1;
  while (cap < (size_t)max * 2)
    cap <<= 1;
  heap.entries = calloc((size_t)max + 1, sizeof *heap.entries);
  heap.index = calloc(cap, sizeof *heap.index);
  if (!heap.entries || !heap.index) {
    free(heap.entries);
    free(heap.index);
    heap.entries = NULL;
    heap.index = NULL;
    return -1;
  }
  heap.max = (size_t)max;
  heap.index_mask = cap - 1;
  heap.next_unused = 1;
  return 0;
}

/* Allocation hook, with the GIL: removes p if it is tracked. Bounded: one
 * probe sequence, and heap.lock only when p was sampled. */
static void heap_forget(void *p) {
  size_t mask = heap.index_mask, slot = ptr_slot(p);
  for (;; slot = (slot + 1) & mask) {
    uint32_t id = heap.index[slot];
    if (id == 0)
      return;
    if (heap.entries[id].ptr == p)
      break;
  }
  pthread_mutex_lock(&heap.lock);
  uint32_t id = heap.index[slot];
  heap.entries[id].ptr = NULL;
  contprof_labels_release(heap.entries[id].labels);
  heap.entries[id].labels = 0;
  heap.entries[id].next_free = heap.free_head;
  heap.free_head = id;
  heap.live--;
  /* Backward-shift deletion keeps every probe sequence unbroken. */
  size_t hole = slot;
  for (size_t j = (hole + 1) & mask; heap.index[j]; j = (j + 1) & mask) {
    size_t home = ptr_slot(heap.entries[heap.index[j]].ptr);
    if (((j - home) & mask) >= ((j - hole) & mask)) {
      heap.index[hole] = heap.index[j];
      hole = j;
    }
  }
  heap.index[hole] = 0;
  pthread_mutex_unlock(&heap.lock);
}

/* Allocation hook, with the GIL. */
static void heap_track(PyThreadState *ts, void *p, const uint64_t *frames,
                       size_t n, int64_t count, int64_t bytes) {
  if (!heap.free_head && heap.next_unused > heap.max) {
    heap.untracked++;
    return;
  }
  pythread *t = thread_of(ts, 0);
  pthread_mutex_lock(&heap.lock);
  uint32_t id;
  if (heap.free_head) {
    id = heap.free_head;
    heap.free_head = heap.entries[id].next_free;
  } else {
    id = (uint32_t)heap.next_unused++;
  }
  heap_entry *e = &heap.entries[id];
  e->ptr = p;
  e->count = count;
  e->bytes = bytes;
  e->tid = (pid_t)gettid();
  /* Held while the allocation lives: the set outlives the scope. */
  e->labels = contprof_labels_hold(contprof_labels_current());
  e->span_id = t ? t->span_id : 0;
  e->local_root_span_id = t ? t->local_root_span_id : 0;
  e->nframes = (uint32_t)(n < HEAP_FRAMES ? n : HEAP_FRAMES);
  memcpy(e->frames, frames, e->nframes * sizeof *frames);
  size_t slot = ptr_slot(p);
  while (heap.index[slot])
    slot = (slot + 1) & heap.index_mask;
  heap.index[slot] = id;
  heap.live++;
  pthread_mutex_unlock(&heap.lock);
}

/* The core's before_export, on the uploader thread, without the GIL: the
 * live sampled allocations as the in-use snapshot. */
static void before_export(void *ctx) {
  (void)ctx;
  if (!heap.entries)
    return;
  pthread_mutex_lock(&heap.lock);
  for (size_t i = 1; i < heap.next_unused; i++) {
    const heap_entry *e = &heap.entries[i];
    if (!e->ptr)
      continue;
    contprof_sample s = {.frames = e->frames,
                         .nframes = e->nframes,
                         .tid = e->tid,
                         .labels = e->labels,
                         .span_id = e->span_id,
                         .local_root_span_id = e->local_root_span_id,
                         .kind = CONTPROF_KIND_INUSE,
                         .count = e->count,
                         .quantity = e->bytes};
    contprof_record(&s);
  }
  uint64_t lost = heap.untracked - heap.untracked_reported;
  heap.untracked_reported = heap.untracked;
  pthread_mutex_unlock(&heap.lock);
  if (lost)
    fprintf(stderr,
            "contprof: %llu sampled Python allocations were not tracked for "
            "the heap profile (CONTPROF_HEAP_MAX_TRACKED is full)\n",
            (unsigned long long)lost);
}

/* xorshift64*, with the GIL. */
static uint64_t rng_next(void) {
  uint64_t x = alloc.rng;
  if (x == 0)
    x = monotonic_ns() ^ ((uint64_t)getpid() << 32) ^ 0x9e3779b97f4a7c15ull;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  alloc.rng = x;
  return x * 0x2545f4914f6cdd1dull;
}

static double rng_unit(void) {
  return (double)((rng_next() >> 11) + 1) * (1.0 / 9007199254740992.0);
}

static int64_t next_gap(void) {
  double gap = -log(rng_unit()) * cfg.alloc_rate;
  return gap >= 4.0e18 ? (int64_t)4e18 : (int64_t)gap;
}

static int64_t round_unbiased(double x) {
  double whole = floor(x);
  return (int64_t)whole + (rng_unit() <= x - whole ? 1 : 0);
}

/* Allocation hook, with the GIL: the countdown ran out at p (size bytes).
 * Records the Python stack of the allocating code, unbiased by
 * 1 / (1 - exp(-size/mean)). Frames are read in place, nothing here runs
 * Python code; the module's own allocations meanwhile are not sampled. */
static void alloc_sampled(void *p, size_t size) {
  alloc.countdown = next_gap();
  if (in_profiler || !cfg.running)
    return;
  PyThreadState *ts = _PyThreadState_UncheckedGet();
  if (!ts)
    return;
  in_profiler = 1;
  PyObject *et, *ev, *tb;
  PyErr_Fetch(&et, &ev, &tb);
  static uint64_t frames[MAX_STACK];
  size_t n = walk_frames(ts, frames, cfg.max_frames, 0);
  if (n == 0 && no_frame_word) {
    frames[0] = no_frame_word;
    n = 1;
  }
  double prob = -expm1(-(double)size / cfg.alloc_rate);
  double scale = prob > 0 ? 1.0 / prob : 1.0;
  int64_t count = round_unbiased(scale);
  int64_t bytes = (int64_t)(scale * (double)size + 0.5);
  if (cfg.alloc_on)
    contprof_record(&(contprof_sample){.frames = frames,
                                       .nframes = n,
                                       .labels = CONTPROF_LABELS_OF_CALLER,
                                       .kind = CONTPROF_KIND_ALLOC,
                                       .count = count,
                                       .quantity = bytes});
  if (cfg.heap_on)
    heap_track(ts, p, frames, n, count, bytes);
  PyErr_Restore(et, ev, tb);
  in_profiler = 0;
}

/* The hooks: the original allocator, then one subtraction (and for frees
 * and reallocs one probe of the live table while it holds entries). */
static void *hook_malloc(void *ctx, size_t size) {
  hook_ctx *h = ctx;
  void *p = h->orig.malloc(h->orig.ctx, size);
  if (p && (alloc.countdown -= (int64_t)size) < 0)
    alloc_sampled(p, size);
  return p;
}

static void *hook_calloc(void *ctx, size_t nelem, size_t elsize) {
  hook_ctx *h = ctx;
  void *p = h->orig.calloc(h->orig.ctx, nelem, elsize);
  size_t size = nelem * elsize;
  if (p && (alloc.countdown -= (int64_t)size) < 0)
    alloc_sampled(p, size);
  return p;
}

static void *hook_realloc(void *ctx, void *ptr, size_t size) {
  hook_ctx *h = ctx;
  void *p = h->orig.realloc(h->orig.ctx, ptr, size);
  if (p && ptr && heap.live)
    heap_forget(ptr);
  if (p && (alloc.countdown -= (int64_t)size) < 0)
    alloc_sampled(p, size);
  return p;
}

static void hook_free(void *ctx, void *ptr) {
  hook_ctx *h = ctx;
  if (ptr && heap.live)
    heap_forget(ptr);
  h->orig.free(h->orig.ctx, ptr);
}

static void hooks_install(void) {
  if (alloc.installed)
    return;
  PyMem_GetAllocator(PYMEM_DOMAIN_MEM, &mem_hook.orig);
  PyMem_GetAllocator(PYMEM_DOMAIN_OBJ, &obj_hook.orig);
  PyMemAllocatorEx m = {&mem_hook, hook_malloc, hook_calloc, hook_realloc,
                        hook_free};
  PyMemAllocatorEx o = {&obj_hook, hook_malloc, hook_calloc, hook_realloc,
                        hook_free};
  PyMem_SetAllocator(PYMEM_DOMAIN_MEM, &m);
  PyMem_SetAllocator(PYMEM_DOMAIN_OBJ, &o);
  alloc.installed = 1;
}

/* Puts the original allocators back unless someone (tracemalloc) wrapped
 * ours meanwhile: then ours stay, idle (cfg.running is 0). */
static void hooks_uninstall(void) {
  if (!alloc.installed)
    return;
  PyMemAllocatorEx cur;
  PyMem_GetAllocator(PYMEM_DOMAIN_MEM, &cur);
  if (cur.ctx != &mem_hook)
    return;
  PyMem_GetAllocator(PYMEM_DOMAIN_OBJ, &cur);
  if (cur.ctx != &obj_hook)
    return;
  PyMem_SetAllocator(PYMEM_DOMAIN_MEM, &mem_hook.orig);
  PyMem_SetAllocator(PYMEM_DOMAIN_OBJ, &obj_hook.orig);
  alloc.installed = 0;
}

/* --- fork ---------------------------------------------------------------- */

/* pthread_atfork child handler: only the forking thread (which held the
 * GIL, so no hook was mid-update) survives; the uploader that may have held
 * heap.lock is gone. The parent's live heap is not the child's. */
static void atfork_child(void) {
  pthread_mutex_init(&heap.lock, NULL);
  pthread_mutex_init(&sampler.lock, NULL);
  sampler.started = 0;
  sampler.ts = NULL;
  heap_reset();
  heap.untracked = heap.untracked_reported = 0;
  alloc.rng = 0;
}

/* --- module functions ---------------------------------------------------- */

static PyObject *py_start(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *dict;
  if (!PyArg_ParseTuple(args, "O!", &PyDict_Type, &dict))
    return NULL;
  if (cfg.running || contprof_is_running())
    return PyLong_FromLong(CONTPROF_ERR_ALREADY_STARTED);
  options_free();
  Py_ssize_t pos = 0, n = PyDict_Size(dict);
  PyObject *k, *v;
  opts.user = calloc((size_t)n + 1, sizeof *opts.user);
  while (PyDict_Next(dict, &pos, &k, &v)) {
    const char *ks = PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : NULL;
    const char *vs = PyUnicode_Check(v) ? PyUnicode_AsUTF8(v) : NULL;
    if (!ks || !vs) {
      options_free();
      PyErr_SetString(PyExc_TypeError, "options must map str to str");
      return NULL;
    }
    opts.user[opts.nuser].name = strdup(ks);
    opts.user[opts.nuser].value = strdup(vs);
    opts.nuser++;
  }

  cp_config c;
  if (cp_config_load(&c, NULL, own_option, NULL) != 0) {
    options_free();
    return PyLong_FromLong(CONTPROF_ERR_NOMEM);
  }
  unsigned profiles = c.profiles;
  if (profiles & CP_PROFILE_LOCK) {
    fprintf(stderr, "contprof: the lock profile is not available for Python "
                    "code; ignored\n");
    profiles &= ~(unsigned)CP_PROFILE_LOCK;
  }
  char buf[64];
  opts.norm[0].name = strdup("CONTPROF_PROFILES");
  opts.norm[0].value =
      strdup(profiles ? cp_profiles_string(profiles, buf, sizeof buf) : "");
  opts.nnorm = 1;
  norm_add("CONTPROF_CPU_HZ", "%ld", c.cpu_hz);
  norm_add("CONTPROF_WALL_INTERVAL_MS", "%ld", c.wall_interval_ms);
  norm_add("CONTPROF_ALLOC_SAMPLE_BYTES", "%ld", c.alloc_sample_bytes);
  norm_add("CONTPROF_HEAP_MAX_TRACKED", "%ld", c.heap_max_tracked);
  norm_add("CONTPROF_MAX_FRAMES", "%ld", c.max_frames);
  static const char *const levels[] = {"error", "warn", "info", "debug"};
  if ((unsigned)c.log_level < 4) {
    opts.norm[opts.nnorm].name = strdup("CONTPROF_LOG_LEVEL");
    opts.norm[opts.nnorm].value = strdup(levels[c.log_level]);
    opts.nnorm++;
  }

  cfg.cpu_on = !!(profiles & CP_PROFILE_CPU);
  cfg.wall_on = !!(profiles & CP_PROFILE_WALL);
  cfg.alloc_on = !!(profiles & CP_PROFILE_ALLOC);
  cfg.heap_on = !!(profiles & CP_PROFILE_HEAP);
  cfg.cpu_period_ns = 1000000000 / c.cpu_hz;
  cfg.wall_period_ns = (int64_t)c.wall_interval_ms * 1000000;
  cfg.max_frames =
      (size_t)c.max_frames < MAX_STACK ? (size_t)c.max_frames : MAX_STACK;
  cfg.alloc_rate = (double)c.alloc_sample_bytes;
  cfg.heap_max_tracked = c.heap_max_tracked;
  cp_config_free(&c);

  if (cfg.heap_on && heap_init(cfg.heap_max_tracked) != 0) {
    fprintf(stderr, "contprof: no memory for the heap profile's table\n");
    cfg.heap_on = 0;
  }
  if (!truncated_word)
    truncated_word = contprof_frame_intern("[truncated]", "", 0);
  if (!no_frame_word)
    no_frame_word = contprof_frame_intern("[no Python frame]", "", 0);

  static contprof_runtime rt;
  rt = (contprof_runtime){.name = "cpython",
                          .version = cfg.version,
                          .self_sampled = CONTPROF_SELF(CONTPROF_KIND_CPU) |
                                          CONTPROF_SELF(CONTPROF_KIND_WALL) |
                                          CONTPROF_SELF(CONTPROF_KIND_ALLOC) |
                                          CONTPROF_SELF(CONTPROF_KIND_INUSE),
                          .option = runtime_option,
                          .before_export = before_export};
  int rc;
  Py_BEGIN_ALLOW_THREADS rc = contprof_start_runtime(NULL, &rt);
  Py_END_ALLOW_THREADS if (rc != 0) {
    options_free();
    return PyLong_FromLong(rc);
  }
  cfg.interp = PyThreadState_Get()->interp;
  cfg.running = 1;

  /* Baselines: CPU used before start is not this profile's. */
  memset(threads_tab, 0, sizeof threads_tab);
  threads_used = 0;
  uint64_t now = monotonic_ns();
  for (PyThreadState *ts = PyInterpreterState_ThreadHead(cfg.interp); ts;
       ts = PyThreadState_Next(ts)) {
    pythread *t = thread_of(ts, 1);
    if (!t)
      break;
    int64_t cpu = t->has_clock ? clock_ns(t->cpu_clock) : -1;
    t->last_cpu_ns = cpu > 0 ? cpu : 0;
    t->last_wall_ns = now;
  }
  pythread *me = current_thread();
  if (me) {
    me->labels = contprof_labels_current();
    cp_trace_current(&me->span_id, &me->local_root_span_id);
  }
  if (cfg.alloc_on || cfg.heap_on) {
    alloc.countdown = next_gap();
    hooks_install();
  }
  if (sampler_start() != 0)
    fprintf(stderr, "contprof: cannot start the Python sampler thread: %s\n",
            strerror(errno));
  return PyLong_FromLong(0);
}

/* Stops this module's sampling; the core's state is the caller's. */
static void stop_sampling(void) {
  cfg.running = 0;
  Py_BEGIN_ALLOW_THREADS sampler_stop();
  Py_END_ALLOW_THREADS
}

static PyObject *py_stop(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  if (!cfg.running)
    return PyLong_FromLong(CONTPROF_ERR_NOT_STARTED);
  stop_sampling();
  int rc;
  /* The uploader runs before_export (the live heap) for the last profile:
   * without the GIL, so it may wait for the uploader. */
  Py_BEGIN_ALLOW_THREADS rc = contprof_stop();
  Py_END_ALLOW_THREADS hooks_uninstall();
  alloc.countdown = INT64_MAX;
  pthread_mutex_lock(&heap.lock);
  heap_reset();
  pthread_mutex_unlock(&heap.lock);
  options_free();
  return PyLong_FromLong(rc);
}

static PyObject *py_flush(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  int rc;
  Py_BEGIN_ALLOW_THREADS rc = contprof_flush();
  Py_END_ALLOW_THREADS return PyLong_FromLong(rc);
}

static PyObject *py_is_running(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  return PyBool_FromLong(cfg.running && contprof_is_running());
}

static PyObject *py_strerror(PyObject *self, PyObject *args) {
  (void)self;
  int rc;
  if (!PyArg_ParseTuple(args, "i", &rc))
    return NULL;
  return PyUnicode_FromString(contprof_strerror(rc));
}

/* Label scopes travel to Python as one integer. */
static PyObject *py_label_push(PyObject *self, PyObject *args) {
  (void)self;
  const char *key, *value;
  if (!PyArg_ParseTuple(args, "ss", &key, &value))
    return NULL;
  contprof_label_scope scope;
  int rc = contprof_label_push(key, value, &scope);
  if (rc != 0) {
    PyErr_Format(PyExc_ValueError, "contprof: label %s=%s: %s", key, value,
                 contprof_strerror(rc));
    return NULL;
  }
  pythread *t = current_thread();
  if (t)
    t->labels = contprof_labels_current();
  return PyLong_FromUnsignedLongLong((unsigned long long)scope.previous << 32 |
                                     scope.valid);
}

static PyObject *py_label_pop(PyObject *self, PyObject *arg) {
  (void)self;
  unsigned long long token = PyLong_AsUnsignedLongLong(arg);
  if (PyErr_Occurred())
    return NULL;
  contprof_label_scope scope = {.previous = (uint32_t)(token >> 32),
                                .valid = (uint32_t)token};
  contprof_label_pop(&scope);
  pythread *t = current_thread();
  if (t)
    t->labels = contprof_labels_current();
  Py_RETURN_NONE;
}

static PyObject *py_set_span(PyObject *self, PyObject *args) {
  (void)self;
  unsigned long long span, root;
  if (!PyArg_ParseTuple(args, "KK", &span, &root))
    return NULL;
  contprof_set_span(span, root);
  pythread *t = current_thread();
  if (t) {
    t->span_id = span;
    t->local_root_span_id = root;
  }
  Py_RETURN_NONE;
}

static PyObject *py_set_endpoint(PyObject *self, PyObject *args) {
  (void)self;
  unsigned long long root;
  const char *name;
  if (!PyArg_ParseTuple(args, "Ks", &root, &name))
    return NULL;
  return PyLong_FromLong(contprof_set_endpoint(root, name));
}

/* os.register_at_fork(after_in_child=...), with the GIL: the core has
 * restarted itself (or not: CONTPROF_FOLLOW_FORK=0); the sampler thread
 * is gone. The forking thread keeps its labels and span ids (libcontprof's
 * TLS survives fork); its CPU clock starts again at 0 in the child. */
static PyObject *py_after_fork_child(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  if (!cfg.running)
    Py_RETURN_NONE;
  memset(threads_tab, 0, sizeof threads_tab);
  threads_used = 0;
  if (!contprof_is_running()) {
    cfg.running = 0;
    hooks_uninstall();
    alloc.countdown = INT64_MAX;
    options_free();
    Py_RETURN_NONE;
  }
  pythread *me = current_thread();
  if (me) {
    me->labels = contprof_labels_current();
    cp_trace_current(&me->span_id, &me->local_root_span_id);
    me->last_wall_ns = monotonic_ns();
  }
  if (sampler_start() != 0)
    fprintf(stderr, "contprof: cannot start the Python sampler thread: %s\n",
            strerror(errno));
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"start", py_start, METH_VARARGS,
     "start(options: dict[str, str]) -> status; options by variable name"},
    {"stop", py_stop, METH_NOARGS, "stop() -> status"},
    {"flush", py_flush, METH_NOARGS, "flush() -> status"},
    {"is_running", py_is_running, METH_NOARGS, "is_running() -> bool"},
    {"strerror", py_strerror, METH_VARARGS, "strerror(status) -> str"},
    {"label_push", py_label_push, METH_VARARGS,
     "label_push(key, value) -> token"},
    {"label_pop", py_label_pop, METH_O, "label_pop(token)"},
    {"set_span", py_set_span, METH_VARARGS,
     "set_span(span_id, local_root_span_id)"},
    {"set_endpoint", py_set_endpoint, METH_VARARGS,
     "set_endpoint(local_root_span_id, endpoint) -> status"},
    {"after_fork_child", py_after_fork_child, METH_NOARGS,
     "after_fork_child(): restart sampling in a forked child"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT,
                                    "_contprof",
                                    "contprof's native part",
                                    -1,
                                    methods,
                                    NULL,
                                    NULL,
                                    NULL,
                                    NULL};

PyMODINIT_FUNC PyInit__contprof(void) {
  PyObject *m = PyModule_Create(&module);
  if (!m)
    return NULL;
  /* "3.11.2 (main, ...)" -> "3.11.2" */
  snprintf(cfg.version, sizeof cfg.version, "%s", Py_GetVersion());
  cfg.version[strcspn(cfg.version, " ")] = 0;
  static int atfork_registered;
  if (!atfork_registered) {
    pthread_atfork(NULL, NULL, atfork_child);
    atfork_registered = 1;
  }
  PyModule_AddIntConstant(m, "OK", CONTPROF_OK);
  PyModule_AddIntConstant(m, "ERR_ALREADY_STARTED",
                          CONTPROF_ERR_ALREADY_STARTED);
  PyModule_AddIntConstant(m, "ERR_NOT_STARTED", CONTPROF_ERR_NOT_STARTED);
  PyModule_AddIntConstant(m, "ERR_DISABLED", CONTPROF_ERR_DISABLED);
  PyModule_AddStringConstant(m, "VERSION", CONTPROF_VERSION_STRING);
  return m;
}
