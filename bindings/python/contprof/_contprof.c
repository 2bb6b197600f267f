/* contprof's CPython extension: samples Python frames into libcontprof.
 *
 * - CPU and wall: one native sampler thread wakes every 1/CONTPROF_CPU_HZ
 *   (and CONTPROF_WALL_INTERVAL_MS) and reads every thread's interpreter
 *   frames WITHOUT the GIL, at the moment the sample is due: each read is a
 *   process_vm_readv() of our own memory, which fails (EFAULT) instead of
 *   faulting on freed memory. A stack is accepted only if every frame's code
 *   object has the code type, its instruction lies inside the code, the
 *   chain has no cycle, and a second read of every frame after the walk
 *   finds it unchanged; otherwise the sample is dropped, counted, and its
 *   time charged to a "[dropped]" frame (docs/python.md). Per thread the
 *   CPU-clock delta of its kernel tid since its previous sample (when > 0)
 *   and the elapsed wall time are recorded. Code objects are named from
 *   copies too (their strings and line table), through a cache keyed by the
 *   code object's address, instruction and identity fields.
 * - With CONTPROF_PYTHON_NATIVE=1, a CPU sample of a running thread is
 *   answered by that thread in a signal handler: its native stack (the
 *   core's unwinder) and its Python frames at one instant, merged by the
 *   sampler into one stack (see "native frames in place" below).
 * - Where process_vm_readv is refused (seccomp), the sampler takes the GIL
 *   for each pass and reads in place, as before 0.2 (one `contprof:` line).
 * - Struct layouts: 3.8-3.10 PyFrameObject chains, 3.11-3.12 the
 *   _PyInterpreterFrame chain from the interpreter's own headers; from 3.13
 *   on the offsets the interpreter publishes in _PyRuntime.debug_offsets,
 *   checked at start and then tried on the calling thread's own stack.
 * - Allocations: PyMem_SetAllocator hooks on the MEM and OBJ domains (both
 *   are only called with the GIL held, so the sampling state below needs no
 *   other lock) sample allocated bytes as a Poisson process with mean
 *   CONTPROF_ALLOC_SAMPLE_BYTES, unbiased like src/samplers/alloc.c. Sampled
 *   pointers live in a bounded table until freed; the uploader thread
 *   reports them as the live heap in before_export without the GIL.
 * - Labels and spans: the calling thread's C labels (libcontprof's TLS) plus
 *   a per-thread record, keyed by the kernel thread id, that the sampler
 *   reads for other threads (under threads_lock). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if PY_VERSION_HEX < 0x03080000
#define CP_UNSUPPORTED "CPython older than 3.8"
#elif defined(Py_GIL_DISABLED)
#define CP_UNSUPPORTED                                                         \
  "a free-threaded CPython build (its frames are not "                         \
  "protected by a GIL)"
#elif PY_VERSION_HEX < 0x030B0000
#include <frameobject.h>
#define CP_FRAME_OBJECTS 1 /* 3.8-3.10 */
#elif PY_VERSION_HEX < 0x030D0000
#define Py_BUILD_CORE 1
#include "internal/pycore_frame.h"
#undef Py_BUILD_CORE
#define CP_COMPILED_LAYOUT 1 /* 3.11, 3.12 */
#else
#define CP_DEBUG_OFFSETS 1 /* 3.13 and newer */
#endif

#ifdef CP_UNSUPPORTED
/* Refused at import with one clear message, nothing else compiled. */
PyMODINIT_FUNC PyInit__contprof(void) {
  PyErr_SetString(PyExc_ImportError,
                  "contprof: " CP_UNSUPPORTED " is not supported");
  return NULL;
}
#else

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <linux/futex.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "config.h"
#include "contprof/profiler.h"
#include "contprof/runtime.h"
#include "random.h"
#include "safe_read.h"
#include "trace.h"

#define MAX_STACK 1024         /* frames per sample (CONTPROF_MAX_FRAMES) */
#define HEAP_FRAMES 64         /* frames kept per live sampled allocation */
#define THREAD_TABLE_SIZE 4096 /* Python threads tracked at once */
#define THREAD_WALK_MAX 4096   /* thread states read per pass */
#define NAME_REFRESH_NS 1000000000ull
#define LATENCY_RING 65536 /* sample due -> frames read, in us */

/* --- options: the keyword arguments of contprof.start ------------------ */

typedef struct option {
  char *name, *value;
} option;

static struct {
  option *user; /* start()'s keyword arguments, by variable name */
  size_t nuser;
  option norm[12]; /* values this module parsed itself, normalised */
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
    "CONTPROF_LOG_LEVEL",        "CONTPROF_PYTHON_NATIVE",
    "CONTPROF_PYTHON_READS"};

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

static void norm_add_str(const char *name, const char *value) {
  opts.norm[opts.nnorm].name = strdup(name);
  opts.norm[opts.nnorm].value = strdup(value);
  opts.nnorm++;
}

static void norm_add(const char *name, const char *fmt, long value) {
  char buf[64];
  snprintf(buf, sizeof buf, fmt, value);
  norm_add_str(name, buf);
}

/* --- state -------------------------------------------------------------- */

static struct {
  int running;
  int cpu_on, wall_on, alloc_on, heap_on;
  int python_native;       /* CONTPROF_PYTHON_NATIVE */
  int python_reads_direct; /* CONTPROF_PYTHON_READS=direct */
  int log_level;
  int64_t cpu_period_ns, wall_period_ns;
  size_t max_frames;
  double alloc_rate;
  long heap_max_tracked;
  char version[32];
  PyInterpreterState *interp;
} cfg;

/* --- layout: where the fields the walk reads are, for this interpreter -- */

#define TS_WINDOW_MAX 1024 /* bytes of a thread state read at once */
#define FR_WINDOW_MAX 128  /* of a frame */
#define CO_WINDOW_MAX 256  /* of a code object */

static struct layout {
  int ok;            /* checked and tried on our own stack */
  int frame_objects; /* 3.8-3.10: PyFrameObject chain, position = f_lasti */
  int lasti_units;   /* 3.10: f_lasti counts code units, not bytes */
  int via_cframe;    /* 3.11, 3.12: tstate->cframe->current_frame */
  int tid_native;    /* the thread key is its kernel tid (3.11+) */
  int has_owner;     /* _PyInterpreterFrame.owner: >= 3 is not Python */
  int has_firsttraceable; /* 3.11, 3.12: incomplete frames are skipped */
  int code_is_var;        /* Py_SIZE(code) is its length in code units */
  int linetable;          /* 0: co_lnotab (3.8, 3.9), 1: 3.10, 2: 3.11+ */
  uintptr_t tag_mask;     /* 3.14+: f_executable is a tagged reference */
  size_t ts_next, ts_interp, ts_frame, ts_key, cf_current, ts_window;
  size_t fr_back, fr_code, fr_pos, fr_owner, fr_window;
  size_t fr_entry; /* 3.11: _PyInterpreterFrame.is_entry (0: none) */
  size_t co_filename, co_name, co_linetable, co_firstlineno, co_code,
      co_firsttraceable, co_window;
  size_t str_state, str_length, str_ascii, str_compact;
  size_t interp_threads_head; /* 3.13+: offset in PyInterpreterState */
  char source[48];            /* "compiled-in" or "debug offsets 3.13" */
} L;

static size_t max3(size_t a, size_t b, size_t c) {
  size_t m = a > b ? a : b;
  return m > c ? m : c;
}

/* The offsets this extension was compiled with; 3.13+ takes the frame and
 * thread offsets from the interpreter (layout_from_debug_offsets). */
static void layout_compiled(void) {
  L.str_state = offsetof(PyASCIIObject, state);
  L.str_length = offsetof(PyASCIIObject, length);
  L.str_ascii = sizeof(PyASCIIObject);
  L.str_compact = sizeof(PyCompactUnicodeObject);
  L.ts_next = offsetof(PyThreadState, next);
  L.ts_interp = offsetof(PyThreadState, interp);
  L.co_filename = offsetof(PyCodeObject, co_filename);
  L.co_firstlineno = offsetof(PyCodeObject, co_firstlineno);
#ifdef CP_DEBUG_OFFSETS
  L.co_name = offsetof(PyCodeObject, co_qualname);
  L.co_linetable = offsetof(PyCodeObject, co_linetable);
  L.co_code = offsetof(PyCodeObject, co_code_adaptive);
  L.linetable = 2;
#elif defined(CP_COMPILED_LAYOUT)
  L.via_cframe = 1;
  L.tid_native = 1;
  L.has_owner = 1;
  L.has_firsttraceable = 1;
  L.code_is_var = 1;
  L.linetable = 2;
  L.ts_frame = offsetof(PyThreadState, cframe);
  L.cf_current = offsetof(_PyCFrame, current_frame);
  L.ts_key = offsetof(PyThreadState, native_thread_id);
  L.fr_back = offsetof(_PyInterpreterFrame, previous);
  L.fr_code = offsetof(_PyInterpreterFrame, f_code);
  L.fr_pos = offsetof(_PyInterpreterFrame, prev_instr);
  L.fr_owner = offsetof(_PyInterpreterFrame, owner);
#if PY_VERSION_HEX < 0x030C0000
  L.fr_entry = offsetof(_PyInterpreterFrame, is_entry);
#endif
  L.co_name = offsetof(PyCodeObject, co_qualname);
  L.co_linetable = offsetof(PyCodeObject, co_linetable);
  L.co_code = offsetof(PyCodeObject, co_code_adaptive);
  L.co_firsttraceable = offsetof(PyCodeObject, _co_firsttraceable);
  snprintf(L.source, sizeof L.source, "compiled-in");
#else
  L.frame_objects = 1;
  L.lasti_units = PY_VERSION_HEX >= 0x030A0000;
  L.ts_frame = offsetof(PyThreadState, frame);
  L.ts_key = offsetof(PyThreadState, thread_id);
  L.fr_back = offsetof(PyFrameObject, f_back);
  L.fr_code = offsetof(PyFrameObject, f_code);
  L.fr_pos = offsetof(PyFrameObject, f_lasti);
  L.co_name = offsetof(PyCodeObject, co_name);
#if PY_VERSION_HEX >= 0x030A0000
  L.co_linetable = offsetof(PyCodeObject, co_linetable);
  L.linetable = 1;
#else
  L.co_linetable = offsetof(PyCodeObject, co_lnotab);
  L.linetable = 0;
#endif
  snprintf(L.source, sizeof L.source, "compiled-in");
#endif
}

#ifdef CP_DEBUG_OFFSETS
/* _PyRuntime.debug_offsets as 64-bit words after the 8-byte cookie: word
 * indices of the fields we use, for the struct of 3.13 and of 3.14 (which
 * added interpreter_state.threads_main, .code_object_generation and
 * .tlbc_generation). A newer minor is tried with the 3.14 indices and
 * refused if the checks below or the trial walk disagree. */
typedef struct dbg_index {
  int ts_size, ts_next, ts_interp, ts_frame, ts_native, is_threads_head;
  int fr_size, fr_back, fr_code, fr_pos, fr_owner;
  int co_size, co_filename, co_qualname, co_linetable, co_firstlineno, co_code;
} dbg_index;
static const dbg_index dbg_313 = {18, 20, 21, 22, 24, 8,  27, 28, 29,
                                  30, 32, 33, 34, 36, 37, 38, 42};
static const dbg_index dbg_314 = {21, 23, 24, 25, 27, 8,  30, 31, 32,
                                  33, 35, 38, 39, 41, 42, 43, 47};

/* Fills L from the interpreter's debug offsets; NULL or why not. */
static const char *layout_from_debug_offsets(void) {
  const char *rt = dlsym(RTLD_DEFAULT, "_PyRuntime");
  if (!rt)
    return "_PyRuntime is not exported by this interpreter";
  if (memcmp(rt, "xdebugpy", 8) != 0)
    return "_PyRuntime.debug_offsets has no xdebugpy cookie";
  const uint64_t *w = (const uint64_t *)(const void *)(rt + 8);
  uint64_t ver = w[0];
  unsigned major = (unsigned)(ver >> 24 & 0xff),
           minor = (unsigned)(ver >> 16 & 0xff);
  if (major != 3 || minor < 13)
    return "debug offsets older than 3.13";
  if (minor != (PY_VERSION_HEX >> 16 & 0xff))
    return "debug offsets of another minor version than this build";
  if (w[1] != 0)
    return "a free-threaded interpreter";
  const dbg_index *d = minor == 13 ? &dbg_313 : &dbg_314;
  uint64_t ts_size = w[d->ts_size], fr_size = w[d->fr_size],
           co_size = w[d->co_size];
  if (ts_size < 64 || ts_size > 65536 || fr_size < 32 || fr_size > 1024 ||
      co_size < 64 || co_size > 4096)
    return "implausible struct sizes";
  const int ts_f[] = {d->ts_next, d->ts_interp, d->ts_frame, d->ts_native};
  for (size_t i = 0; i < 4; i++)
    if (w[ts_f[i]] + 8 > ts_size || w[ts_f[i]] + 8 > TS_WINDOW_MAX)
      return "a thread state offset out of range";
  const int fr_f[] = {d->fr_back, d->fr_code, d->fr_pos, d->fr_owner};
  for (size_t i = 0; i < 4; i++)
    if (w[fr_f[i]] + 8 > fr_size || w[fr_f[i]] + 8 > FR_WINDOW_MAX)
      return "a frame offset out of range";
  /* The code object is a public struct: the interpreter's offsets must be
   * the ones this build sees (a wrong guess of the 3.14+ indices lands
   * elsewhere). */
  if (co_size != sizeof(PyCodeObject) ||
      w[d->co_filename] != offsetof(PyCodeObject, co_filename) ||
      w[d->co_qualname] != offsetof(PyCodeObject, co_qualname) ||
      w[d->co_linetable] != offsetof(PyCodeObject, co_linetable) ||
      w[d->co_firstlineno] != offsetof(PyCodeObject, co_firstlineno) ||
      w[d->co_code] != offsetof(PyCodeObject, co_code_adaptive))
    return "code object offsets differ from this build's PyCodeObject";
  L.tid_native = 1;
  L.has_owner = 1;
  L.code_is_var = 1;
  L.tag_mask = minor >= 14 ? 7 : 0;
  L.ts_next = w[d->ts_next];
  L.ts_interp = w[d->ts_interp];
  L.ts_frame = w[d->ts_frame];
  L.ts_key = w[d->ts_native];
  L.interp_threads_head = w[d->is_threads_head];
  L.fr_back = w[d->fr_back];
  L.fr_code = w[d->fr_code];
  L.fr_pos = w[d->fr_pos];
  L.fr_owner = w[d->fr_owner];
  snprintf(L.source, sizeof L.source, "debug offsets %u.%u", major, minor);
  return NULL;
}
#endif

/* --- reads that cannot fault --------------------------------------------- */

#if PY_VERSION_HEX < 0x030D0000
#define PyThreadState_GetUnchecked _PyThreadState_UncheckedGet
#endif

static int layout_checked; /* layout_check ran (once per process) */
static int safe_reads;     /* process_vm_readv works on this process */
static pid_t self_pid;

/* Reads on the sampler thread (direct_here, set at each pass) are plain
 * copies that end at a fault instead of the process (src/safe_read.h;
 * docs/python.md, "Reading without the GIL"): no system call per read.
 * Elsewhere (the mixed-stack handler on an application thread, whose mask
 * and handlers we do not control), and where the fault handlers are not
 * ours any more, process_vm_readv. */
static int direct_ok;          /* CONTPROF_PYTHON_READS=direct, installed */
static CP_TLS int direct_here; /* this thread may copy directly now */

/* Pages found unmapped by a direct read (a data-stack chunk's first page
 * has none below it): windows stop above them. Direct-mapped; a page
 * mapped again later only costs a smaller window. Sampler thread only. */
#define NO_PAGE_SLOTS 64
static uintptr_t no_page[NO_PAGE_SLOTS];

static size_t no_page_slot(uintptr_t page) {
  return (size_t)((page >> 12) * 0x9e3779b97f4a7c15ull >> 58);
}

static int direct(uintptr_t addr, void *dst, size_t n) {
  uintptr_t at = cp_safe_copy(dst, (const void *)addr, n);
  if (!at)
    return 0;
  uintptr_t page = at & ~(uintptr_t)4095;
  no_page[no_page_slot(page)] = page;
  return -1;
}

/* Copies n bytes at addr. With safe_reads a bad address is an error, never
 * a fault (the sampler reads other threads' state without the GIL);
 * otherwise only called with the GIL on live objects. */
static int rd(uintptr_t addr, void *dst, size_t n) {
  if (addr < 4096)
    return -1;
  if (!safe_reads) {
    memcpy(dst, (const void *)addr, n);
    return 0;
  }
  if (direct_here)
    return direct(addr, dst, n);
  struct iovec l = {dst, n}, r = {(void *)addr, n};
  return process_vm_readv(self_pid, &l, 1, &r, 1, 0) == (ssize_t)n ? 0 : -1;
}

/* Many reads in one call: 0 when every one succeeded. */
static int rdv(struct iovec *local, struct iovec *remote, size_t n) {
  for (size_t i = 0; i < n; i += 1024) {
    size_t k = n - i < 1024 ? n - i : 1024, want = 0;
    for (size_t j = 0; j < k; j++) {
      if ((uintptr_t)remote[i + j].iov_base < 4096)
        return -1;
      want += local[i + j].iov_len;
    }
    if (!safe_reads) {
      for (size_t j = 0; j < k; j++)
        memcpy(local[i + j].iov_base, remote[i + j].iov_base,
               local[i + j].iov_len);
      continue;
    }
    if (direct_here) {
      for (size_t j = 0; j < k; j++)
        if (direct((uintptr_t)remote[i + j].iov_base, local[i + j].iov_base,
                   local[i + j].iov_len) != 0)
          return -1;
      continue;
    }
    if (process_vm_readv(self_pid, local + i, k, remote + i, k, 0) !=
        (ssize_t)want)
      return -1;
  }
  return 0;
}

static uint64_t word_at(const unsigned char *buf, size_t off) {
  uint64_t v;
  memcpy(&v, buf + off, sizeof v);
  return v;
}

static int32_t int_at(const unsigned char *buf, size_t off) {
  int32_t v;
  memcpy(&v, buf + off, sizeof v);
  return v;
}

/* --- the walk: a thread's frames as (code object, position, identity) --- */

/* What names a frame: the code object's address, the byte offset of its
 * instruction (-1: not started), and the identity fields that tell a code
 * object from a later one at the same address. */
typedef struct codeid {
  uintptr_t code;
  int32_t addrq, firstlineno;
  uintptr_t name, filename, linetable;
} codeid;

/* 3.11+ frames sit next to each other on the thread's data stack (a newer
 * frame above an older one): one read of the WIN_SIZE bytes below a frame
 * usually holds the next dozens, so a stack costs a few system calls, not
 * one per frame. Only with safe reads: the bytes below a frame may be
 * unmapped. */
#define WIN_SIZE 4096
#define WIN_MAX 16

typedef struct walk_scratch {
  uintptr_t frame[MAX_STACK], code[MAX_STACK], back[MAX_STACK];
  uint64_t pos[MAX_STACK];
  int src[MAX_STACK];    /* the window frame i was read from, or -1 */
  int seg[MAX_STACK];    /* entry markers passed before frame i (see walk) */
  int co_src[MAX_STACK]; /* an earlier frame with the same code, or -1 */
  unsigned char co[MAX_STACK][CO_WINDOW_MAX];
  unsigned char again[MAX_STACK][FR_WINDOW_MAX];
  unsigned char win[WIN_MAX][WIN_SIZE + FR_WINDOW_MAX];
  unsigned char win_again[WIN_MAX][WIN_SIZE + FR_WINDOW_MAX];
  uintptr_t win_base[WIN_MAX];
  size_t win_len[WIN_MAX], nwin;
  struct iovec lv[2 * MAX_STACK + WIN_MAX], rv[2 * MAX_STACK + WIN_MAX];
  uintptr_t seen[4 * MAX_STACK]; /* open addressing: cycle check */
  /* The slots of seen the last walk filled: cleared at the next one's
   * start, instead of all 32 KiB (a memset per thread per pass). */
  uint16_t seen_used[2 * MAX_STACK + 16];
  size_t nseen;
} walk_scratch;

enum { WALK_TORN = -1 };

static int seen_add(walk_scratch *s, uintptr_t f) {
  const size_t mask = 4 * MAX_STACK - 1;
  for (size_t i = (size_t)(f >> 4) * 0x9e3779b97f4a7c15ull >> 40 & mask;;
       i = (i + 1) & mask) {
    if (s->seen[i] == f)
      return 1;
    if (!s->seen[i]) {
      s->seen[i] = f;
      s->seen_used[s->nseen++] = (uint16_t)i;
      return 0;
    }
  }
}

/* The window holding frame f (read now if need be), or -1: 3.11+ only
 * (before, frames are separate objects). */
static int window_of(walk_scratch *s, uintptr_t f) {
  if (L.frame_objects || !safe_reads)
    return -1; /* in-place reads stay inside the frame */
  /* Compared as distances: a torn back link near UINTPTR_MAX made
   * f + fr_window wrap and pass (found by the churn test on 3.11.7). */
  for (size_t j = s->nwin; j-- > 0;)
    if (f >= s->win_base[j] && s->win_len[j] >= L.fr_window &&
        f - s->win_base[j] <= s->win_len[j] - L.fr_window)
      return (int)j;
  if (s->nwin == WIN_MAX)
    return -1;
  /* The WIN_SIZE bytes below the frame's end; if the page below is not
   * mapped (the start of a data stack chunk), from the frame's own page. */
  uintptr_t end = f + L.fr_window, start = end > WIN_SIZE ? end - WIN_SIZE : 0;
  uintptr_t below = start & ~(uintptr_t)4095, own = f & ~(uintptr_t)4095;
  if (direct_here && below < own && no_page[no_page_slot(below)] == below)
    start = own; /* a direct read found it unmapped: no fault again */
  size_t j = s->nwin;
  if (rd(start, s->win[j], end - start) != 0) {
    start = own;
    if (rd(start, s->win[j], end - start) != 0)
      return -1;
  }
  s->win_base[j] = start;
  s->win_len[j] = end - start;
  s->nwin++;
  return (int)j;
}

/* The stack from frame `first` (leaf first) into out, at most max (<=
 * MAX_STACK) frames; *truncated when deeper. Returns the frame count or
 * WALK_TORN: an unreadable or cyclic chain, a code object that is not one,
 * an instruction outside its code, or a frame that changed between the
 * walk and the second read after it. Bounded: 2 * max + 16 frames
 * visited, one read per frame, then one batched read. Async-signal-safe
 * (reads, memcpy, memset; no lock, no allocation): the mixed-stack handler
 * runs it on its own thread.
 *
 * With seg (mixed stacks): seg[i] is the number of the interpreter's
 * evaluation calls (_PyEval_EvalFrameDefault) entered leafward of out[i],
 * that is which of those calls, from the leaf, runs it, and *nentries how
 * many the walk passed in all: 3.8-3.10 one call per frame object; 3.11
 * frames up to and including one marked is_entry; 3.12+ frames leafward
 * of a C-stack shim frame (FRAME_OWNED_BY_CSTACK, pushed by each call). */
static long walk_segments(uintptr_t first, codeid *out, size_t max,
                          int *truncated, walk_scratch *s, int *seg,
                          size_t *nentries) {
  size_t n = 0, steps = 0, entries = 0;
  *truncated = 0;
  for (size_t i = 0; i < s->nseen; i++)
    s->seen[s->seen_used[i]] = 0;
  s->nseen = 0;
  s->nwin = 0;
  unsigned char fr[FR_WINDOW_MAX];
  for (uintptr_t f = first; f;) {
    if (n == max || steps++ >= 2 * max + 16) {
      *truncated = 1;
      break;
    }
    /* Frames are pointer-aligned and far from both ends of the address
     * space; anything else is a torn link. */
    if ((f & 7) || f < 4096 || f > UINTPTR_MAX - 2 * WIN_SIZE || seen_add(s, f))
      return WALK_TORN;
    int w = window_of(s, f);
    if (w >= 0)
      memcpy(fr, s->win[w] + (f - s->win_base[w]), L.fr_window);
    else if (rd(f, fr, L.fr_window) != 0)
      return WALK_TORN;
    uintptr_t back = (uintptr_t)word_at(fr, L.fr_back);
    if (L.has_owner && (signed char)fr[L.fr_owner] >= 3) {
      /* A C-stack shim frame (3.12+), not Python code: an evaluation
       * call's entry (4, 3.14's base frame, is not). */
      if ((signed char)fr[L.fr_owner] == 3)
        entries++;
      f = back;
      continue;
    }
    s->seg[n] = (int)entries;
    if (L.frame_objects || (L.fr_entry && fr[L.fr_entry]))
      entries++;
    s->frame[n] = f;
    s->src[n] = w;
    s->code[n] = (uintptr_t)word_at(fr, L.fr_code) & ~L.tag_mask;
    s->back[n] = back;
    s->pos[n] = L.frame_objects ? (uint64_t)(int64_t)int_at(fr, L.fr_pos)
                                : word_at(fr, L.fr_pos);
    n++;
    f = back;
  }
  /* Every code object (once per run of recursion), and every frame again:
   * its window, or itself. */
  size_t nv = 0;
  for (size_t i = 0; i < n; i++) {
    s->co_src[i] = -1;
    for (size_t j = i > 8 ? i - 8 : 0; j < i; j++)
      if (s->code[j] == s->code[i] && s->co_src[j] < 0)
        s->co_src[i] = (int)j;
    if (s->co_src[i] < 0) {
      s->lv[nv] = (struct iovec){s->co[i], L.co_window};
      s->rv[nv++] = (struct iovec){(void *)s->code[i], L.co_window};
    }
    if (s->src[i] < 0) {
      s->lv[nv] = (struct iovec){s->again[i], L.fr_window};
      s->rv[nv++] = (struct iovec){(void *)s->frame[i], L.fr_window};
    }
  }
  for (size_t j = 0; j < s->nwin; j++) {
    s->lv[nv] = (struct iovec){s->win_again[j], s->win_len[j]};
    s->rv[nv++] = (struct iovec){(void *)s->win_base[j], s->win_len[j]};
  }
  if (nv && rdv(s->lv, s->rv, nv) != 0)
    return WALK_TORN;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    const unsigned char *co =
        s->co[s->co_src[i] < 0 ? i : (size_t)s->co_src[i]];
    const unsigned char *fa =
        s->src[i] < 0
            ? s->again[i]
            : s->win_again[s->src[i]] + (s->frame[i] - s->win_base[s->src[i]]);
    if (((uintptr_t)word_at(fa, L.fr_code) & ~L.tag_mask) != s->code[i] ||
        (uintptr_t)word_at(fa, L.fr_back) != s->back[i])
      return WALK_TORN; /* popped or pushed over while we read */
    if ((uintptr_t)word_at(co, offsetof(PyObject, ob_type)) !=
        (uintptr_t)&PyCode_Type)
      return WALK_TORN;
    int64_t units;
    if (L.frame_objects) {
      int64_t lasti = (int64_t)s->pos[i];
      if (lasti < -1 || lasti > (1 << 28))
        return WALK_TORN;
      units = lasti < 0 ? -1 : L.lasti_units ? lasti : lasti / 2;
    } else {
      int64_t d = (int64_t)(s->pos[i] - (s->code[i] + L.co_code));
      units = d < 0 ? -1 : d / 2;
      int64_t len = (int64_t)word_at(co, offsetof(PyVarObject, ob_size));
      if (d < -2 || (L.code_is_var && units >= len))
        return WALK_TORN;
      if (L.has_firsttraceable &&
          (signed char)fa[L.fr_owner] != 1 /* generator */ &&
          units < int_at(co, L.co_firsttraceable))
        continue; /* pushed, not started: _PyFrame_IsIncomplete */
    }
    if (seg)
      seg[k] = s->seg[i];
    out[k++] = (codeid){.code = s->code[i],
                        .addrq = (int32_t)(units < 0 ? -1 : units * 2),
                        .firstlineno = int_at(co, L.co_firstlineno),
                        .name = (uintptr_t)word_at(co, L.co_name),
                        .filename = (uintptr_t)word_at(co, L.co_filename),
                        .linetable = (uintptr_t)word_at(co, L.co_linetable)};
  }
  if (nentries)
    *nentries = entries;
  return (long)k;
}

static long walk(uintptr_t first, codeid *out, size_t max, int *truncated,
                 walk_scratch *s) {
  return walk_segments(first, out, max, truncated, s, NULL, NULL);
}

/* The frame chain's head of thread state ts, read through rd. */
static int first_frame(const unsigned char *tsw, uintptr_t *f) {
  uintptr_t p = (uintptr_t)word_at(tsw, L.ts_frame);
  if (L.via_cframe && p) {
    uint64_t cur;
    if (rd(p + L.cf_current, &cur, sizeof cur) != 0)
      return -1;
    p = (uintptr_t)cur;
  }
  *f = p;
  return 0;
}

/* --- naming a frame, from copies ----------------------------------------- */

/* A str object's text as UTF-8 into buf (NUL-terminated, truncated to
 * cap-1 bytes); "?" for anything that is not a compact str. */
static void read_str(uintptr_t addr, char *buf, size_t cap) {
  unsigned char h[128];
  snprintf(buf, cap, "?");
  /* Only the header every str has: a short one ends right after it. */
  if (L.str_ascii > sizeof h || rd(addr, h, L.str_ascii) != 0 ||
      (uintptr_t)word_at(h, offsetof(PyObject, ob_type)) !=
          (uintptr_t)&PyUnicode_Type)
    return;
  uint32_t state;
  memcpy(&state, h + L.str_state, sizeof state);
  int64_t len = (int64_t)word_at(h, L.str_length);
  unsigned kind = state >> 2 & 7, compact = state >> 5 & 1,
           ascii = state >> 6 & 1;
  if (!compact || len < 0 || len > (1 << 20))
    return;
  if (ascii) {
    /* A longer string keeps what fits with "..." after it. */
    size_t m = (size_t)len < cap - 1 ? (size_t)len : cap - 4;
    /* A partial copy (the object freed and unmapped meanwhile) leaves buf
     * without its terminator: "?" then. */
    if (rd(addr + L.str_ascii, buf, m) != 0)
      snprintf(buf, cap, "?");
    else if (m < (size_t)len)
      memcpy(buf + m, "...", 4);
    else
      buf[m] = 0;
    return;
  }
  if (kind != 1 && kind != 2 && kind != 4)
    return;
  unsigned char data[1024];
  size_t m =
      (size_t)len * kind < sizeof data ? (size_t)len : sizeof data / kind;
  if (rd(addr + L.str_compact, data, m * kind) != 0)
    return;
  size_t o = 0;
  for (size_t i = 0; i < m; i++) {
    uint32_t c = kind == 1   ? data[i]
                 : kind == 2 ? (uint32_t)data[2 * i] | data[2 * i + 1] << 8
                             : (uint32_t)data[4 * i] | data[4 * i + 1] << 8 |
                                   data[4 * i + 2] << 16 |
                                   (uint32_t)data[4 * i + 3] << 24;
    unsigned char u[4];
    size_t nu;
    if (c < 0x80) {
      u[0] = (unsigned char)c, nu = 1;
    } else if (c < 0x800) {
      u[0] = (unsigned char)(0xc0 | c >> 6);
      u[1] = (unsigned char)(0x80 | (c & 63)), nu = 2;
    } else if (c < 0x10000) {
      u[0] = (unsigned char)(0xe0 | c >> 12);
      u[1] = (unsigned char)(0x80 | (c >> 6 & 63));
      u[2] = (unsigned char)(0x80 | (c & 63)), nu = 3;
    } else {
      u[0] = (unsigned char)(0xf0 | (c >> 18 & 7));
      u[1] = (unsigned char)(0x80 | (c >> 12 & 63));
      u[2] = (unsigned char)(0x80 | (c >> 6 & 63));
      u[3] = (unsigned char)(0x80 | (c & 63)), nu = 4;
    }
    if (o + nu >= cap) {
      m = 0; /* cut short */
      break;
    }
    memcpy(buf + o, u, nu);
    o += nu;
  }
  if (m < (size_t)len) { /* cut short: "..." after whole characters */
    size_t written = o;
    if (o > cap - 4)
      o = cap - 4;
    while (o > 0 && o < written && (buf[o] & 0xc0) == 0x80)
      o--; /* buf[o], the first byte left out, continues a character */
    memcpy(buf + o, "...", 3);
    o += 3;
  }
  buf[o] = 0;
}

#define LINETABLE_MAX 65536

static unsigned varint(const unsigned char *p, size_t n, size_t *i) {
  unsigned v = 0, shift = 0;
  while (*i < n) {
    unsigned b = p[(*i)++];
    v |= (b & 63) << shift;
    shift += 6;
    if (!(b & 64) || shift > 30)
      break;
  }
  return v;
}

/* The line of byte offset addrq, parsed from a copy of the code object's
 * line table (as PyCode_Addr2Line would, for each format); the first line
 * when the table is unreadable. */
static int read_line(const codeid *id, unsigned char *tab) {
  int line = id->firstlineno;
  unsigned char h[64];
  size_t hdr = offsetof(PyBytesObject, ob_sval);
  if (id->addrq < 0 || rd(id->linetable, h, hdr) != 0 ||
      (uintptr_t)word_at(h, offsetof(PyObject, ob_type)) !=
          (uintptr_t)&PyBytes_Type)
    return line;
  int64_t n = (int64_t)word_at(h, offsetof(PyVarObject, ob_size));
  if (n <= 0 || n > LINETABLE_MAX || rd(id->linetable + hdr, tab, (size_t)n))
    return line;
  size_t size = (size_t)n, i = 0;
  int64_t addr = 0, q = id->addrq;
  if (L.linetable == 0) { /* 3.8, 3.9: (address delta, line delta) bytes */
    for (; i + 1 < size; i += 2) {
      addr += tab[i];
      if (addr > q)
        break;
      line += (signed char)tab[i + 1];
    }
    return line;
  }
  if (L.linetable == 1) { /* 3.10: (bytes delta, line delta or -128) */
    for (; i + 1 < size; i += 2) {
      signed char ld = (signed char)tab[i + 1];
      if (ld != -128)
        line += ld;
      addr += tab[i];
      if (q < addr)
        return line;
    }
    return line;
  }
  /* 3.11+: the location table (CPython's Objects/locations.md), in code
   * units. */
  q /= 2;
  while (i < size) {
    unsigned b = tab[i++];
    if (!(b & 0x80))
      break;
    unsigned code = b >> 3 & 15, len = (b & 7) + 1;
    if (code == 14) {
      unsigned u = varint(tab, size, &i);
      line += u & 1 ? -(int)(u >> 1) : (int)(u >> 1);
      for (int k = 0; k < 3; k++)
        varint(tab, size, &i);
    } else if (code == 13) {
      unsigned u = varint(tab, size, &i);
      line += u & 1 ? -(int)(u >> 1) : (int)(u >> 1);
    } else if (code >= 10 && code <= 12) {
      line += (int)code - 10;
      i += 2;
    } else if (code < 10) {
      i += 1;
    }
    addr += len;
    if (q < addr)
      return line;
  }
  return line;
}

/* --- the name cache: codeid -> frame word -------------------------------- */

/* One per user (the sampler thread; allocation hooks under the GIL), never
 * shared between threads. No references are held: an entry is valid for a
 * code object at the same address only if its identity fields are equal,
 * and then names and lines are the same. */
typedef struct name_slot {
  codeid id;
  uint64_t word;
} name_slot;

typedef struct name_cache {
  name_slot *slots;
  size_t mask, used;
  unsigned char tab[LINETABLE_MAX];
} name_cache;

static int cache_init(name_cache *c, size_t bits) {
  if (c->slots)
    return 0;
  c->slots = calloc((size_t)1 << bits, sizeof *c->slots);
  c->mask = ((size_t)1 << bits) - 1;
  return c->slots ? 0 : -1;
}

static int id_eq(const codeid *a, const codeid *b) {
  return a->code == b->code && a->addrq == b->addrq &&
         a->firstlineno == b->firstlineno && a->name == b->name &&
         a->filename == b->filename && a->linetable == b->linetable;
}

/* The frame word of id: cached, or named from copies and interned (not on
 * the sampling path: after the thread's frames are read). 0 when the frame
 * table is full. */
static uint64_t frame_word(name_cache *c, const codeid *id) {
  uint64_t h = ((uint64_t)id->code >> 4) * 0x9e3779b97f4a7c15ull ^
               (uint64_t)(uint32_t)id->addrq * 0xff51afd7ed558ccdull;
  size_t slot = (size_t)(h >> 20) & c->mask, home = slot;
  for (int probe = 0; probe < 8; probe++, slot = (slot + 1) & c->mask) {
    name_slot *s = &c->slots[slot];
    if (!s->word)
      break;
    if (id_eq(&s->id, id))
      return s->word;
    if (probe == 7)
      slot = home; /* a long run: replace the home slot */
  }
  char name[256], file[512];
  read_str(id->name, name, sizeof name);
  read_str(id->filename, file, sizeof file);
  uint64_t word = contprof_frame_intern(name, file, read_line(id, c->tab));
  if (!word)
    return 0;
  if (c->used >= (c->mask + 1) / 2) {
    memset(c->slots, 0, (c->mask + 1) * sizeof *c->slots);
    c->used = 0;
  }
  if (!c->slots[slot].word)
    c->used++;
  c->slots[slot] = (name_slot){*id, word};
  return word;
}

static uint64_t truncated_word, no_frame_word, dropped_word;

/* Frame words of a walk's output, in place; frames the table cannot take
 * are left out. */
static size_t name_frames(name_cache *c, const codeid *ids, size_t n,
                          int truncated, uint64_t *out) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t w = frame_word(c, &ids[i]);
    if (w)
      out[k++] = w;
  }
  if (truncated && k && truncated_word)
    out[k - 1] = truncated_word;
  return k;
}

/* --- the layout check -------------------------------------------------- */

static walk_scratch alloc_scratch; /* allocation hooks, under the GIL */
static name_cache alloc_names;
static codeid alloc_ids[MAX_STACK];

/* The head of the interpreter's thread list. */
static uintptr_t threads_head(void) {
#ifdef CP_DEBUG_OFFSETS
  uint64_t h;
  return rd((uintptr_t)cfg.interp + L.interp_threads_head, &h, sizeof h) == 0
             ? (uintptr_t)h
             : 0;
#else
  return (uintptr_t)PyInterpreterState_ThreadHead(cfg.interp);
#endif
}

/* With the GIL, once at start: sets L and tries it on this thread: the
 * thread list must hold our own thread state with our key, and our walk
 * must give the frames the interpreter itself reports (count, leaf code
 * object, its name and line). NULL when it all agrees, or why not. */
static const char *layout_check(void) {
  memset(&L, 0, sizeof L);
  layout_compiled();
#ifdef CP_DEBUG_OFFSETS
  const char *why = layout_from_debug_offsets();
  if (why)
    return why;
#endif
  L.ts_window = max3(L.ts_next, L.ts_interp, max3(L.ts_frame, L.ts_key, 0)) + 8;
  L.fr_window =
      max3(L.fr_back, L.fr_code, max3(L.fr_pos, L.fr_owner, L.fr_entry)) + 8;
  L.co_window =
      max3(L.co_filename + 8, L.co_name + 8,
           max3(L.co_linetable + 8, L.co_firstlineno + 4,
                max3(L.co_firsttraceable + 4, sizeof(PyVarObject), 0)));
  if (L.ts_window > TS_WINDOW_MAX || L.fr_window > FR_WINDOW_MAX ||
      L.co_window > CO_WINDOW_MAX)
    return "offsets beyond the read windows";
  PyThreadState *me = PyThreadState_Get();
  unsigned char tsw[TS_WINDOW_MAX];
  uintptr_t ts = threads_head(), found = 0;
  for (int i = 0; ts && i < THREAD_WALK_MAX && !found; i++) {
    if (rd(ts, tsw, L.ts_window) != 0)
      return "the thread list is unreadable";
    if (ts == (uintptr_t)me)
      found = ts;
    else
      ts = (uintptr_t)word_at(tsw, L.ts_next);
  }
  if (!found)
    return "our own thread state is not in the thread list";
  if ((uintptr_t)word_at(tsw, L.ts_interp) != (uintptr_t)cfg.interp)
    return "a thread state's interpreter differs";
  uint64_t key = word_at(tsw, L.ts_key);
  if (L.tid_native ? key != (uint64_t)gettid()
                   : key != (uint64_t)PyThread_get_thread_ident())
    return "a thread state's thread id differs";
  uintptr_t f;
  int truncated;
  if (first_frame(tsw, &f) != 0)
    return "the current frame is unreadable";
  long n = walk(f, alloc_ids, MAX_STACK, &truncated, &alloc_scratch);
  if (n <= 0)
    return "our own stack could not be walked";
  PyFrameObject *fo = PyEval_GetFrame(); /* borrowed */
  long want = 0;
  for (PyFrameObject *p = fo; p && want <= MAX_STACK; want++) {
#if PY_VERSION_HEX >= 0x03090000
    PyFrameObject *b = PyFrame_GetBack(p);
    Py_XDECREF(b); /* still referenced by p */
    p = b;
#else
    p = p->f_back;
#endif
  }
  if (!fo || n != want)
    return "the walk and the interpreter disagree on the depth";
#if PY_VERSION_HEX >= 0x03090000
  PyCodeObject *code = PyFrame_GetCode(fo);
  Py_DECREF(code); /* still referenced by fo */
#else
  PyCodeObject *code = fo->f_code;
#endif
  if (alloc_ids[0].code != (uintptr_t)code)
    return "the walk and the interpreter disagree on the leaf code object";
  char name[256];
  read_str(alloc_ids[0].name, name, sizeof name);
  PyObject *want_name = PyObject_GetAttrString(
      (PyObject *)code,
      L.co_name == offsetof(PyCodeObject, co_name) ? "co_name" : "co_qualname");
  const char *wn = want_name ? PyUnicode_AsUTF8(want_name) : NULL;
  int same = wn && strcmp(wn, name) == 0;
  Py_XDECREF(want_name);
  PyErr_Clear();
  if (!same)
    return "the walk and the interpreter disagree on the leaf's name";
  if (read_line(&alloc_ids[0], alloc_names.tab) != PyFrame_GetLineNumber(fo)) {
    return "the walk and the interpreter disagree on the leaf's line";
  }
  L.ok = 1;
  return NULL;
}

/* --- per-thread records -------------------------------------------------- */

/* A thread's record is keyed by its kernel thread id (3.11+; the pthread id
 * before), not by its thread state: a native thread that calls into Python
 * now and then (PyGILState_Ensure, Release) gets a new thread state each
 * time, but its CPU clock goes on, and its labels are its own. The table is
 * under threads_lock: the sampler holds it for a pass (without the GIL);
 * Python threads take it briefly (with the GIL) for their labels. The
 * sampler never waits for the GIL while holding it. */
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
  uint64_t native_since; /* its CPU sample waits for it to run, since */
  int native_unanswered; /* a request of ours may be pending on it */
} pythread;

static pythread threads_tab[THREAD_TABLE_SIZE];
static size_t threads_used;
static pthread_mutex_t threads_lock = PTHREAD_MUTEX_INITIALIZER;

static int64_t clock_ns(clockid_t c) {
  struct timespec t;
  if (clock_gettime(c, &t) != 0)
    return -1;
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static uint64_t monotonic_ns(void) {
  return (uint64_t)clock_ns(CLOCK_MONOTONIC);
}

/* With the GIL (or our own thread state): its key. */
static uint64_t ts_key(PyThreadState *ts) {
  uint64_t k;
  memcpy(&k, (const char *)ts + L.ts_key, sizeof k);
  return k;
}

/* The CPU clock of kernel thread tid (see clock_getcpuclockid(3)): the
 * kernel's CPUCLOCK_SCHED encoding. A thread that has exited just fails. */
static clockid_t thread_cpu_clock(pid_t tid) {
  return (clockid_t)((~(unsigned)tid << 3) | 6u);
}

static size_t key_slot(uint64_t key) {
  return (size_t)(key * 0x9e3779b97f4a7c15ull >> 40) & (THREAD_TABLE_SIZE - 1);
}

/* Before 3.11 a thread state holds the thread's pthread_t (glibc: the
 * address of its struct pthread), not its kernel tid. The offset of the tid
 * in struct pthread is found on our own thread at start and checked on the
 * namer thread (-1: not found, then tids come from threading, with the
 * GIL); the sampler then reads a new thread's tid with a safe read. */
static long pthread_tid_off = -1;

static void pthread_tid_calibrate(void) {
  int32_t buf[512];
  pid_t me = (pid_t)gettid();
  pthread_tid_off = -1;
  if (rd((uintptr_t)pthread_self(), buf, sizeof buf) != 0)
    return;
  for (size_t i = 0; i < 512; i++)
    if (buf[i] == me) {
      pthread_tid_off = (long)(i * sizeof *buf);
      return;
    }
}

/* The kernel tid of the thread whose pthread_t is key, or 0. */
static pid_t pthread_tid(uint64_t key) {
  int32_t tid;
  if (pthread_tid_off < 0 || !safe_reads ||
      rd((uintptr_t)key + (uintptr_t)pthread_tid_off, &tid, sizeof tid) != 0)
    return 0;
  return tid > 0 ? (pid_t)tid : 0;
}

/* Under threads_lock. The record of key, created when create is set (then
 * with a CPU baseline of 0: a thread first seen has used its CPU since it
 * began). Before 3.11 a record is created with a known tid, or with the
 * GIL, while the thread (whose pthread id gives its clock) is known to be
 * alive. NULL when the table is full. */
static pythread *thread_of_tid(uint64_t key, int create, pid_t tid) {
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
  if (L.tid_native || tid > 0) {
    t->tid = L.tid_native ? (pid_t)key : tid;
    t->cpu_clock = thread_cpu_clock(t->tid);
    t->has_clock = 1;
  } else {
    t->has_clock = pthread_getcpuclockid((pthread_t)key, &t->cpu_clock) == 0;
  }
  threads_used++;
  return t;
}

static pythread *thread_of(uint64_t key, int create) {
  return thread_of_tid(key, create, 0);
}

/* Under threads_lock, before 3.11: record t now belongs to a new thread
 * tid that got the same pthread_t; it starts afresh. */
static void thread_renew(pythread *t, pid_t tid, uint64_t now) {
  uint64_t key = t->key;
  memset(t, 0, sizeof *t);
  t->key = key;
  t->tid = tid;
  t->cpu_clock = thread_cpu_clock(tid);
  t->has_clock = 1;
  t->last_wall_ns = now - (uint64_t)cfg.wall_period_ns;
}

/* Under threads_lock: drops the records of threads that are gone (not seen
 * in this pass and their CPU clock no longer readable); rebuilt in place. */
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

/* With the GIL, under threads_lock: the calling thread's record, created if
 * needed. */
static pythread *current_thread_locked(void) {
  pythread *t = thread_of(ts_key(PyThreadState_Get()), 1);
  if (t && !t->tid)
    t->tid = (pid_t)gettid();
  return t;
}

/* With the GIL: the calling thread's labels and span ids into its record. */
static void current_thread_update(int labels, int span, uint64_t span_id,
                                  uint64_t root) {
  pthread_mutex_lock(&threads_lock);
  pythread *t = current_thread_locked();
  if (t && labels)
    t->labels = contprof_labels_current();
  if (t && span) {
    t->span_id = span_id;
    t->local_root_span_id = root;
  }
  pthread_mutex_unlock(&threads_lock);
}

/* --- the sampler thread -------------------------------------------------- */

static struct {
  pthread_t thread, namer;
  int started, namer_started;
  pthread_mutex_t lock;
  pthread_cond_t wake, namer_wake;
  int stop;
  int needs_gil;        /* no safe reads here: passes hold the GIL */
  int names_due;        /* a new thread was seen: name it soon */
  uint64_t namer_key;   /* the namer's own thread: never sampled */
  PyThreadState *gilts; /* the sampler's thread state when needs_gil */
  uint64_t pass;
  /* Counters (under threads_lock), read by stats(). */
  uint64_t samples, dropped, retried, threads_unreadable;
  uint64_t syscall_passes; /* direct reads chosen, the handlers not ours */
  uint32_t latency_us[LATENCY_RING];
  uint64_t latencies;
} sampler = {.lock = PTHREAD_MUTEX_INITIALIZER};

static walk_scratch sampler_scratch;
static name_cache sampler_names;
static codeid sampler_ids[MAX_STACK];

/* The GIL guard of the allocation hooks: set while this module itself runs
 * with the GIL (recording an allocation, naming threads), whose
 * allocations are not sampled. */
static int in_profiler;

static const char *utf8_or(PyObject *s, const char *fallback) {
  const char *u = s && PyUnicode_Check(s) ? PyUnicode_AsUTF8(s) : NULL;
  if (!u) {
    PyErr_Clear();
    return fallback;
  }
  return u;
}

/* With the GIL, on the namer thread: threading's names as `thread name`,
 * read from threading._active (threading is not imported if unused); before
 * 3.11 also each thread's kernel tid and its record. */
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
      if (!L.tid_native && tid > 0) {
        /* Before 3.11 a thread state does not know its kernel tid. Its
         * record is made here: the thread is alive while in _active. */
        unsigned long ident = PyLong_AsUnsignedLong(key);
        pthread_mutex_lock(&threads_lock);
        pythread *t = thread_of(ident, 1);
        /* Only a record without a tid: threading's _native_id of a forked
         * child's thread is still the parent's. */
        if (t && !t->tid)
          thread_renew(t, (pid_t)tid, monotonic_ns());
        pthread_mutex_unlock(&threads_lock);
      }
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

/* --- native frames in place (CONTPROF_PYTHON_NATIVE) --------------------- *
 * With the option on, a CPU sample of a thread that is running asks that
 * thread for its stacks: a real-time signal (tgkill) whose handler unwinds
 * the thread's native stack with the core's unwinder and walks its own
 * Python frames (walk_segments), both at the same instant, and publishes
 * them in `native`. The sampler waits at most NATIVE_WAIT_NS for the
 * answer, then merges off the handler: each _PyEval_EvalFrameDefault
 * native frame becomes the Python frames that call runs, the interpreter's
 * own frames between Python frames are dropped, the native frames below
 * the innermost Python frame are kept. Anything that does not line up, or
 * no answer in time, gives the Python-only stack, counted (docs/python.md,
 * "Native frames"). One request at a time: the sampler asks the threads one
 * after the other. */

#define NATIVE_MAX 512               /* native frames per answer */
#define NATIVE_WAIT_NS 10000000ull   /* the sampler's wait for an answer */
#define NATIVE_SEGS 16               /* the interpreter's executable segments */
#define NATIVE_CARRY_NS 200000000ull /* a CPU sample waits for a CPU */
#define NATIVE_LATER ((size_t)-1)

/* The slot's state word (a futex): a request number << 2 | phase. The
 * number makes a late handler's compare-and-swap fail once the sampler has
 * given up on its request and made another. */
enum { NS_IDLE = 0, NS_REQ = 1, NS_BUSY = 2, NS_DONE = 3 };

static struct {
  int on;  /* CONTPROF_PYTHON_NATIVE, and set up */
  int sig; /* our signal; 0 until installed (then for the process's life) */
  uintptr_t eval_lo, eval_hi; /* _PyEval_EvalFrameDefault's code */
  uintptr_t seg_lo[NATIVE_SEGS], seg_hi[NATIVE_SEGS]; /* the interpreter's */
  size_t nsegs;
  uint32_t state; /* NS_*, see above */
  /* The request, written by the sampler before NS_REQ. */
  pid_t tid;
  uintptr_t tstate;
  size_t max_frames;
  /* The answer, written by the handler before NS_DONE. */
  int ok, native_truncated, py_truncated;
  size_t nnative, nentries;
  long npy;
  uint64_t frames[NATIVE_MAX + CONTPROF_NATIVE_UNWIND_SLACK];
  codeid ids[MAX_STACK];
  int seg[MAX_STACK];
  /* Counters (the sampler's, under threads_lock), read by stats(). */
  uint64_t requests, merged, timeouts, not_running, mismatched, unreadable;
  uint64_t handler_ns; /* CPU time in the handler (its owner adds it) */
} native;
static walk_scratch native_scratch; /* the handler's */

/* The mixed-stack request's handler, on the sampled thread.
 * Async-signal-safe and bounded: the slot is taken with one
 * compare-and-swap (a late or stray request does nothing), then the core's
 * unwinder (contprof_native_unwind_signal: no lock, no allocation), one walk of
 * this thread's own frames with reads that cannot fault, one store and a
 * futex wake; errno is kept. A signal that is not a tgkill from this
 * process goes to the application's handler (contprof_native_signal_chain). */
static void native_handler(int sig, siginfo_t *info, void *uc) {
  int saved = errno;
  if (!info || info->si_code != SI_TKILL || info->si_pid != self_pid) {
    contprof_native_signal_chain(sig, info, uc);
    errno = saved;
    return;
  }
  uint32_t s = __atomic_load_n(&native.state, __ATOMIC_ACQUIRE);
  if ((s & 3) != NS_REQ ||
      __atomic_load_n(&native.tid, __ATOMIC_RELAXED) != (pid_t)gettid() ||
      !__atomic_compare_exchange_n(&native.state, &s, (s & ~3u) | NS_BUSY, 0,
                                   __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
    errno = saved;
    return;
  }
  int64_t t0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  native.ok = 0;
  native.nnative = 0;
  /* -1: another of the profiler's handlers is unwinding on this thread
   * (the unwinder's per-thread cache is not re-entrant): no answer. */
  long nnative = contprof_native_unwind_signal(uc, native.frames, NATIVE_MAX,
                                               &native.native_truncated);
  if (nnative >= 0) {
    native.nnative = (size_t)nnative;
    unsigned char tsw[TS_WINDOW_MAX];
    uintptr_t first = 0;
    uint64_t own = L.tid_native ? (uint64_t)gettid() : (uint64_t)pthread_self();
    if (rd(native.tstate, tsw, L.ts_window) == 0 &&
        word_at(tsw, L.ts_key) == own && first_frame(tsw, &first) == 0) {
      native.npy = walk_segments(first, native.ids, native.max_frames,
                                 &native.py_truncated, &native_scratch,
                                 native.seg, &native.nentries);
      native.ok = native.npy > 0;
    }
  }
  int64_t t1 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  if (t0 >= 0 && t1 >= t0)
    native.handler_ns += (uint64_t)(t1 - t0);
  __atomic_store_n(&native.state, (s & ~3u) | NS_DONE, __ATOMIC_RELEASE);
  syscall(SYS_futex, &native.state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
  errno = saved;
}

/* Where native frame i of the answer is: 2 in _PyEval_EvalFrameDefault, 1
 * elsewhere in the interpreter (the executable or libpython), 0 outside.
 * Return addresses (i > 0) are looked up at the call instruction. */
static int native_class(size_t i) {
  uintptr_t pc = (uintptr_t)native.frames[i] - (i > 0);
  if (pc >= native.eval_lo && pc < native.eval_hi)
    return 2;
  for (size_t j = 0; j < native.nsegs; j++)
    if (pc >= native.seg_lo[j] && pc < native.seg_hi[j])
      return 1;
  return 0;
}

/* On the sampler thread: the answer as one stack into out (named), or 0
 * when its native evaluation calls are not exactly the Python frames'
 * (an unwind cut short, a thread caught entering or leaving a call, a
 * custom frame evaluator, a truncated side). Leaf first: the native frames
 * below the innermost evaluation call, then per call its Python frames and
 * the native frames outside the interpreter between it and the next (a C
 * extension that calls back into Python); the interpreter's own frames
 * between calls and everything above the outermost call are dropped.
 * Below the innermost call, when the leaf is in another object (libz, an
 * extension module), the interpreter's frames between the outermost such
 * frame and the call are dropped too: they are the call's plumbing
 * (cfunction_vectorcall_*, PyObject_Vectorcall), present or not depending
 * on how the call site was specialised, and would split one C call into
 * several stacks. When every frame there is the interpreter's (sorted(),
 * a builtin), all are kept. */
static size_t native_merge(uint64_t *out, size_t max) {
  size_t nn = native.nnative, np = (size_t)native.npy, neval = 0;
  if (native.native_truncated || native.py_truncated)
    return 0;
  long cut = -1; /* the outermost frame outside the interpreter below the
                  * innermost call */
  for (size_t i = 0; i < nn; i++) {
    int c = native_class(i);
    neval += c == 2;
    if (c == 0 && neval == 0)
      cut = (long)i;
  }
  if (neval == 0 || neval != native.nentries)
    return 0;
  size_t k = 0, p = 0, call = 0;
  for (size_t i = 0; i < nn && call < neval && k < max; i++) {
    int c = native_class(i);
    if (call == 0 && c != 2) {
      if (cut < 0 || (long)i <= cut)
        out[k++] = native.frames[i];
    } else if (c == 2) {
      for (; p < np && native.seg[p] == (int)call && k < max; p++) {
        uint64_t w = frame_word(&sampler_names, &native.ids[p]);
        if (!w)
          return 0;
        out[k++] = w;
      }
      call++;
    } else if (c == 0) {
      out[k++] = native.frames[i];
    }
  }
  if (k == max && (p < np || call < neval)) {
    if (truncated_word)
      out[max - 1] = truncated_word;
    return max;
  }
  return p == np ? k : 0;
}

/* Reads the start of /proc/self/task/TID/<name> into buf, NUL-terminated.
 * Returns 0 when it cannot be read (the thread is gone). */
static int read_task_file(pid_t tid, const char *name, char *buf, size_t size) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/task/%d/%s", (int)tid, name);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0;
  ssize_t n = read(fd, buf, size - 1);
  close(fd);
  if (n <= 0)
    return 0;
  buf[n] = 0;
  return 1;
}

/* Whether thread t is on a CPU or waiting for one, not blocked: its CPU
 * clock moved since `cpu` (read a few microseconds ago; with a tick-based
 * scheduler clock, as on this VM, it rarely does), or /proc says R. A
 * blocked thread is not sent the signal: it would have a call cut short
 * that SA_RESTART does not restart (poll, nanosleep) in C code that may
 * not retry. */
static int native_running(const pythread *t, int64_t cpu) {
  if (clock_ns(t->cpu_clock) > cpu)
    return 1;
  char buf[512];
  if (!read_task_file(t->tid, "stat", buf, sizeof buf))
    return 0;
  const char *r = strrchr(buf, ')');
  return r && r[1] == ' ' && r[2] == 'R';
}

/* Thread t's CPU sample waits for it to run (NATIVE_LATER), or, once it
 * has waited NATIVE_CARRY_NS, is taken now with the Python stack (0). */
static size_t native_defer(pythread *t) {
  uint64_t now = monotonic_ns();
  if (!t->native_since)
    t->native_since = now;
  if (now - t->native_since <= NATIVE_CARRY_NS)
    return NATIVE_LATER;
  t->native_since = 0;
  return 0;
}

/* Whether our signal is still pending on thread tid (a request it has not
 * taken yet: real-time signals queue, so no second one is sent). */
static int native_pending(pid_t tid) {
  char buf[2048];
  if (!read_task_file(tid, "status", buf, sizeof buf))
    return 1;
  const char *p = strstr(buf, "\nSigPnd:");
  if (!p)
    return 1;
  unsigned long long mask = strtoull(p + 8, NULL, 16);
  return (mask >> (native.sig - 1) & 1) != 0;
}

static size_t native_wait(uint32_t seq, pythread *t, uint64_t *out, size_t max);

/* On the sampler thread, under threads_lock: a CPU sample of thread t
 * (thread state at tsp, CPU clock `cpu` read for this sample) as a mixed
 * stack into out (at most max frames); 0: the caller takes the Python-only
 * stack; NATIVE_LATER: the thread is blocked, or did not answer in time
 * (it waits for a CPU): its CPU sample is taken at a later tick that finds
 * it running,
 * with the CPU time carried over, for at most NATIVE_CARRY_NS (then with
 * the Python stack). Bounded: at most 2 x NATIVE_WAIT_NS of waiting. */
static size_t native_sample(pythread *t, uintptr_t tsp, int64_t cpu,
                            uint64_t *out, size_t max) {
  if (!native.on || !t->tid || !t->has_clock)
    return 0;
  if (!native_running(t, cpu)) {
    native.not_running++;
    return native_defer(t);
  }
  if (t->native_unanswered) {
    if (native_pending(t->tid)) {
      native.timeouts++;
      return native_defer(t);
    }
    t->native_unanswered = 0;
  }
  uint32_t s = __atomic_load_n(&native.state, __ATOMIC_ACQUIRE);
  if ((s & 3) == NS_BUSY) {
    native.timeouts++; /* an abandoned request is still being answered */
    return 0;
  }
  /* Idle, or a late answer to an abandoned request: the slot is ours. */
  uint32_t seq = (s & ~3u) + 4;
  __atomic_store_n(&native.tid, t->tid, __ATOMIC_RELAXED);
  __atomic_store_n(&native.tstate, tsp, __ATOMIC_RELAXED);
  native.max_frames = cfg.max_frames;
  __atomic_store_n(&native.state, seq | NS_REQ, __ATOMIC_RELEASE);
  native.requests++;
  if (syscall(SYS_tgkill, self_pid, t->tid, native.sig) != 0) {
    __atomic_store_n(&native.state, seq | NS_IDLE, __ATOMIC_RELEASE);
    native.timeouts++;
    return 0;
  }
  /* Python threads take threads_lock with the GIL held (labels, spans,
   * sampled allocations): not held while we wait. Records are neither
   * moved nor freed meanwhile (only this thread sweeps the table). */
  pthread_mutex_unlock(&threads_lock);
  size_t k = native_wait(seq, t, out, max);
  pthread_mutex_lock(&threads_lock);
  return k;
}

/* native_sample's wait for the answer to request seq and its merge, on the
 * sampler thread without threads_lock. Bounded: at most 2 x
 * NATIVE_WAIT_NS. */
static size_t native_wait(uint32_t seq, pythread *t, uint64_t *out,
                          size_t max) {
  uint64_t deadline = monotonic_ns() + NATIVE_WAIT_NS;
  int extended = 0;
  for (;;) {
    uint32_t s = __atomic_load_n(&native.state, __ATOMIC_ACQUIRE);
    if (s == (seq | NS_DONE))
      break;
    uint64_t now = monotonic_ns();
    if (now >= deadline) {
      uint32_t want = seq | NS_REQ;
      if (__atomic_compare_exchange_n(&native.state, &want, seq | NS_IDLE, 0,
                                      __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        native.timeouts++; /* not started: the thread did not run */
        t->native_unanswered = 1;
        return native_defer(t);
      }
      if (want == (seq | NS_DONE))
        break;
      if (extended) {
        native.timeouts++; /* left busy; the next request finds it */
        return native_defer(t);
      }
      extended = 1; /* the handler runs: give it one more wait */
      deadline = now + NATIVE_WAIT_NS;
      continue;
    }
    uint64_t left = deadline - now;
    struct timespec ts = {.tv_sec = (time_t)(left / 1000000000),
                          .tv_nsec = (long)(left % 1000000000)};
    syscall(SYS_futex, &native.state, FUTEX_WAIT_PRIVATE, s, &ts, NULL, 0);
  }
  size_t k = 0;
  t->native_since = 0;
  if (!native.ok)
    native.unreadable++;
  else if (!(k = native_merge(out, max)))
    native.mismatched++;
  else
    native.merged++;
  __atomic_store_n(&native.state, seq | NS_IDLE, __ATOMIC_RELEASE);
  return k;
}

/* Finds the executable segments of the object that holds pc. */
static int native_segments(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  uintptr_t pc = (uintptr_t)data;
  size_t n = 0;
  int holds = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
      continue;
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
    holds |= pc >= lo && pc < hi;
    if (n < NATIVE_SEGS) {
      native.seg_lo[n] = lo;
      native.seg_hi[n++] = hi;
    }
  }
  if (!holds)
    return 0;
  native.nsegs = n;
  return 1;
}

/* With the GIL, at start: CONTPROF_PYTHON_NATIVE's setup (once per
 * process: the signal stays installed). NULL when on, or why not. */
static const char *native_setup(void) {
  if (!safe_reads)
    return "process_vm_readv is refused here";
  if (!native.eval_hi) {
    void *ev = dlsym(RTLD_DEFAULT, "_PyEval_EvalFrameDefault");
    Dl_info di;
    const ElfW(Sym) *sym = NULL;
    if (!ev || !dladdr1(ev, &di, (void **)&sym, RTLD_DL_SYMENT) || !sym ||
        di.dli_saddr != ev || sym->st_size == 0)
      return "_PyEval_EvalFrameDefault's code is not found";
    native.nsegs = 0;
    dl_iterate_phdr(native_segments, ev);
    if (!native.nsegs)
      return "the interpreter's code segments are not found";
    native.eval_lo = (uintptr_t)ev;
    native.eval_hi = (uintptr_t)ev + sym->st_size;
  }
  if (!native.sig) {
    int sig = contprof_native_signal_install(SIGRTMIN + 4, native_handler);
    if (sig <= 0)
      return "no free real-time signal";
    native.sig = sig;
  }
  return NULL;
}

/* On the sampler thread, once per pass with CPU samples: an application
 * that installed its own handler for our signal (signal.signal) gets it
 * back untouched, and the sampler stops asking. */
static void native_check_signal(void) {
  struct sigaction cur;
  if (!native.on || sigaction(native.sig, NULL, &cur) != 0)
    return;
  if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == native_handler)
    return;
  native.on = 0;
  fprintf(stderr,
          "contprof: signal %d was given another handler; Python samples "
          "are taken without native frames from now on\n",
          native.sig);
}

/* stats()'s native_* counters. */
static void native_stats(PyObject *d) {
  const struct {
    const char *key;
    uint64_t v;
  } c[] = {{"native_on", (uint64_t)native.on},
           {"native_signal", (uint64_t)native.sig},
           {"native_requests", native.requests},
           {"native_merged", native.merged},
           {"native_timeouts", native.timeouts},
           {"native_not_running", native.not_running},
           {"native_mismatched", native.mismatched},
           {"native_unreadable", native.unreadable},
           {"native_handler_ns", native.handler_ns}};
  for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
    PyObject *v = PyLong_FromUnsignedLongLong((unsigned long long)c[i].v);
    if (v)
      PyDict_SetItemString(d, c[i].key, v);
    Py_XDECREF(v);
  }
}

/* On the sampler thread, without the GIL (with it when needs_gil): one
 * sample of every Python thread, due at `due`. Bounded: THREAD_WALK_MAX
 * thread states, each one walk (see walk). */
static void sample_pass(int do_cpu, int do_wall, uint64_t due) {
  static uint64_t frames[MAX_STACK];
  unsigned char tsw[TS_WINDOW_MAX];
  pthread_mutex_lock(&threads_lock);
  uint64_t pass = ++sampler.pass;
  if (do_cpu)
    native_check_signal();
  uint64_t now = monotonic_ns();
  size_t seen = 0;
  uintptr_t ts = threads_head();
  for (int i = 0; ts && i < THREAD_WALK_MAX; i++) {
    if (rd(ts, tsw, L.ts_window) != 0 ||
        (uintptr_t)word_at(tsw, L.ts_interp) != (uintptr_t)cfg.interp) {
      /* A thread state freed while we read the list: the rest of this
       * pass is unreadable. */
      sampler.threads_unreadable++;
      break;
    }
    uint64_t key = word_at(tsw, L.ts_key);
    uintptr_t first = 0, tsp = ts;
    int head_ok = first_frame(tsw, &first) == 0;
    ts = (uintptr_t)word_at(tsw, L.ts_next);
    if (!key || key == sampler.namer_key)
      continue;
    pythread *t = thread_of(key, 0);
    if (t && !L.tid_native) {
      /* glibc reuses a finished thread's struct pthread, so a new thread
       * can have the key of an old record: tell them apart by the tid. */
      pid_t tid = pthread_tid(key);
      if (tid && tid != t->tid)
        thread_renew(t, tid, now);
      else if (!tid && t->tid && t->has_clock && clock_ns(t->cpu_clock) < 0)
        t->tid = 0; /* gone; the namer names the new one */
    }
    if (!t) {
      pid_t tid = L.tid_native ? 0 : pthread_tid(key);
      if (!L.tid_native && !tid) {
        sampler.names_due = 1; /* its record is made with the GIL */
        continue;
      }
      if (!(t = thread_of_tid(key, 1, tid)))
        continue;
      t->last_wall_ns = now - (uint64_t)cfg.wall_period_ns;
      sampler.names_due = 1;
    }
    t->pass = pass;
    seen++;
    if (!t->tid)
      continue; /* before 3.11, until threading names it */
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
    if (!do_wall && cpu_delta <= 0)
      continue; /* no CPU since its last sample: nothing to read */
    size_t nk = do_cpu && cpu_delta > 0
                    ? native_sample(t, tsp, cpu, frames, cfg.max_frames)
                    : 0;
    if (nk == NATIVE_LATER) {
      /* The CPU sample waits for a tick that finds the thread running,
       * which gets this one's CPU time too; a wall sample is taken now. */
      t->last_cpu_ns -= cpu_delta;
      cpu_delta = 0;
      if (!do_wall)
        continue;
      nk = 0;
    }
    if (nk) {
      /* The mixed stack of a running thread (for wall too, when due in
       * the same pass: it is this moment's stack). */
      uint64_t got = monotonic_ns();
      sampler.latency_us[sampler.latencies++ % LATENCY_RING] =
          (uint32_t)((got > due ? got - due : 0) / 1000);
      sampler.samples++;
      record(frames, nk, t, CONTPROF_KIND_CPU, cpu_delta);
      if (do_wall)
        record(frames, nk, t, CONTPROF_KIND_WALL, (int64_t)wall_delta);
      continue;
    }
    int truncated = 0;
    long n = head_ok ? walk(first, sampler_ids, cfg.max_frames, &truncated,
                            &sampler_scratch)
                     : WALK_TORN;
    if (n == WALK_TORN && head_ok) {
      /* Once more from the thread's current frame: most tears are a
       * return or call that raced the walk, over in microseconds. */
      sampler.retried++;
      if (rd(tsp, tsw, L.ts_window) == 0 && first_frame(tsw, &first) == 0)
        n = walk(first, sampler_ids, cfg.max_frames, &truncated,
                 &sampler_scratch);
    }
    uint64_t read_at = monotonic_ns();
    sampler.latency_us[sampler.latencies++ % LATENCY_RING] =
        (uint32_t)((read_at > due ? read_at - due : 0) / 1000);
    if (n == 0)
      continue; /* a thread state with no Python frame: native code */
    size_t k;
    if (n == WALK_TORN) {
      sampler.dropped++;
      frames[0] = dropped_word;
      k = dropped_word ? 1 : 0;
    } else {
      sampler.samples++;
      k = name_frames(&sampler_names, sampler_ids, (size_t)n, truncated,
                      frames);
    }
    if (k == 0)
      continue;
    if (do_cpu && cpu_delta > 0)
      record(frames, k, t, CONTPROF_KIND_CPU, cpu_delta);
    if (do_wall)
      record(frames, k, t, CONTPROF_KIND_WALL, (int64_t)wall_delta);
  }
  /* Threads gone (or not in Python now): checked once a second. */
  static uint64_t next_sweep;
  if (now >= next_sweep) {
    if (seen != threads_used)
      threads_sweep(pass);
    next_sweep = now + NAME_REFRESH_NS;
  }
  pthread_mutex_unlock(&threads_lock);
}

static void *sampler_main(void *arg) {
  (void)arg;
  pthread_setname_np(pthread_self(), "contprof-python");
  contprof_own_thread_begin(); /* its CPU is the profiler's */
  /* Direct reads recover from SIGSEGV and SIGBUS only where they are not
   * blocked: this thread starts with every signal blocked. */
  sigset_t faults;
  sigemptyset(&faults);
  sigaddset(&faults, SIGSEGV);
  sigaddset(&faults, SIGBUS);
  pthread_sigmask(SIG_UNBLOCK, &faults, NULL);
  PyGILState_STATE g = PyGILState_UNLOCKED;
  PyThreadState *saved = NULL;
  if (sampler.needs_gil) {
    g = PyGILState_Ensure();
    saved = PyEval_SaveThread();
  }
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
    if (saved)
      PyEval_RestoreThread(saved);
    /* Once a pass: the application may have replaced the fault handlers
     * (then this pass, and the next ones, use process_vm_readv). */
    direct_here = direct_ok && cp_safe_read_ready();
    if (direct_ok && !direct_here)
      __atomic_fetch_add(&sampler.syscall_passes, 1, __ATOMIC_RELAXED);
    if (!sampler.stop)
      sample_pass(do_cpu, do_wall, deadline);
    if (saved)
      saved = PyEval_SaveThread();
    /* Deadlines keep their rhythm; ticks missed (a long pass, a wait for
     * the GIL where it is needed) are skipped, the clock deltas still
     * cover the time. */
    now = monotonic_ns();
    if (do_cpu)
      for (next_cpu += (uint64_t)cfg.cpu_period_ns; next_cpu <= now;)
        next_cpu += (uint64_t)cfg.cpu_period_ns;
    if (do_wall)
      for (next_wall += (uint64_t)cfg.wall_period_ns; next_wall <= now;)
        next_wall += (uint64_t)cfg.wall_period_ns;
    pthread_mutex_lock(&sampler.lock);
    if (sampler.names_due)
      pthread_cond_signal(&sampler.namer_wake);
  }
  pthread_mutex_unlock(&sampler.lock);
  if (saved) {
    PyEval_RestoreThread(saved);
    PyGILState_Release(g);
  }
  contprof_own_thread_end();
  return NULL;
}

/* The namer: the only thread of this module that waits for the GIL (once
 * a second, or soon after a new thread appears), to read threading's names;
 * the sampler goes on meanwhile. */
static void *namer_main(void *arg) {
  (void)arg;
  pthread_setname_np(pthread_self(), "contprof-pyname");
  contprof_own_thread_begin(); /* its CPU is the profiler's */
  PyGILState_STATE g = PyGILState_Ensure();
  sampler.namer_key = ts_key(PyThreadState_Get());
  if (pthread_tid_off >= 0 &&
      pthread_tid((uint64_t)pthread_self()) != (pid_t)gettid())
    pthread_tid_off = -1; /* the offset was a coincidence: use threading */
  PyThreadState *saved = PyEval_SaveThread();
  pthread_mutex_lock(&sampler.lock);
  while (!sampler.stop) {
    pthread_mutex_unlock(&sampler.lock);
    PyEval_RestoreThread(saved);
    if (!sampler.stop) {
      in_profiler = 1;
      PyObject *et, *ev, *tb;
      PyErr_Fetch(&et, &ev, &tb);
      name_threads();
      PyErr_Restore(et, ev, tb);
      in_profiler = 0;
    }
    saved = PyEval_SaveThread();
    pthread_mutex_lock(&sampler.lock);
    /* At most ten times a second, whatever the sampler asks: a thread
     * state threading does not know keeps asking. */
    uint64_t now = monotonic_ns(), soonest = now + NAME_REFRESH_NS / 10,
             deadline = now + NAME_REFRESH_NS;
    sampler.names_due = 0;
    while (!sampler.stop && (now = monotonic_ns()) < deadline &&
           (now < soonest || !sampler.names_due)) {
      uint64_t until = now < soonest ? soonest : deadline;
      struct timespec ts = {.tv_sec = (time_t)(until / 1000000000),
                            .tv_nsec = (long)(until % 1000000000)};
      pthread_cond_timedwait(&sampler.namer_wake, &sampler.lock, &ts);
    }
  }
  pthread_mutex_unlock(&sampler.lock);
  PyEval_RestoreThread(saved);
  PyGILState_Release(g);
  contprof_own_thread_end();
  return NULL;
}

/* Starts one of our threads with every signal blocked (it inherits the
 * mask it is created with): a signal the application blocks, to take it
 * with sigwait, or sends to the process would otherwise be delivered to it,
 * where its default action may end the process and the application's
 * waits are not woken. The sampler unblocks the faults its direct reads
 * recover from. */
static int start_thread_blocked(pthread_t *t, void *(*fn)(void *)) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  int rc = pthread_create(t, NULL, fn, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return rc;
}

static int sampler_start(void) {
  if ((!cfg.cpu_on && !cfg.wall_on) || !L.ok)
    return 0;
  if (cache_init(&sampler_names, 15) != 0)
    return -1;
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(&sampler.wake, &a);
  pthread_cond_init(&sampler.namer_wake, &a);
  pthread_condattr_destroy(&a);
  sampler.stop = 0;
  sampler.names_due = 0;
  sampler.namer_key = 0;
  if (start_thread_blocked(&sampler.namer, namer_main) != 0)
    return -1;
  sampler.namer_started = 1;
  if (start_thread_blocked(&sampler.thread, sampler_main) != 0)
    return -1;
  sampler.started = 1;
  return 0;
}

/* Without the GIL (the namer, and the sampler when it needs the GIL, must
 * be able to finish). */
static void sampler_stop(void) {
  pthread_mutex_lock(&sampler.lock);
  sampler.stop = 1;
  pthread_cond_broadcast(&sampler.wake);
  pthread_cond_broadcast(&sampler.namer_wake);
  pthread_mutex_unlock(&sampler.lock);
  if (sampler.started)
    pthread_join(sampler.thread, NULL);
  if (sampler.namer_started)
    pthread_join(sampler.namer, NULL);
  if (sampler.started || sampler.namer_started) {
    pthread_cond_destroy(&sampler.wake);
    pthread_cond_destroy(&sampler.namer_wake);
  }
  sampler.started = sampler.namer_started = 0;
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
  uint64_t span_id = 0, root = 0;
  pthread_mutex_lock(&threads_lock);
  pythread *t = thread_of(ts_key(ts), 0);
  if (t) {
    span_id = t->span_id;
    root = t->local_root_span_id;
  }
  pthread_mutex_unlock(&threads_lock);
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
  e->span_id = span_id;
  e->local_root_span_id = root;
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

/* With the GIL: Python bytes until the next sample, exponential with the
 * configured mean (the core's random source, random.h). */
static int64_t next_gap(void) {
  double gap = cp_random_exp(cfg.alloc_rate);
  return gap >= 4.0e18 ? (int64_t)4e18 : (int64_t)gap;
}

/* Allocation hook, with the GIL: the countdown ran out at p (size bytes).
 * Records the Python stack of the allocating code, unbiased by
 * 1 / (1 - exp(-size/mean)). Frames are read in place, nothing here runs
 * Python code; the module's own allocations meanwhile are not sampled. */
static void alloc_sampled(void *p, size_t size) {
  alloc.countdown = next_gap();
  if (in_profiler || !cfg.running)
    return;
  PyThreadState *ts = PyThreadState_GetUnchecked();
  if (!ts || !L.ok)
    return;
  in_profiler = 1;
  static uint64_t frames[MAX_STACK];
  uintptr_t first;
  int truncated = 0;
  long n = 0;
  if (first_frame((const unsigned char *)ts, &first) == 0)
    n = walk(first, alloc_ids, cfg.max_frames, &truncated, &alloc_scratch);
  size_t k =
      n > 0 ? name_frames(&alloc_names, alloc_ids, (size_t)n, truncated, frames)
            : 0;
  if (k == 0 && no_frame_word) {
    frames[0] = no_frame_word;
    k = 1;
  }
  double prob = -expm1(-(double)size / cfg.alloc_rate);
  double scale = prob > 0 ? 1.0 / prob : 1.0;
  int64_t count = cp_random_round(scale);
  int64_t bytes = (int64_t)(scale * (double)size + 0.5);
  if (cfg.alloc_on)
    contprof_record(&(contprof_sample){.frames = frames,
                                       .nframes = k,
                                       .labels = CONTPROF_LABELS_OF_CALLER,
                                       .kind = CONTPROF_KIND_ALLOC,
                                       .count = count,
                                       .quantity = bytes});
  if (cfg.heap_on)
    heap_track(ts, p, frames, k, count, bytes);
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
  pthread_mutex_init(&threads_lock, NULL);
  sampler.started = sampler.namer_started = 0;
  self_pid = getpid();
  if (sampler_names.slots) { /* the sampler may have been mid-insert */
    memset(sampler_names.slots, 0,
           (sampler_names.mask + 1) * sizeof *sampler_names.slots);
    sampler_names.used = 0;
  }
  heap_reset();
  heap.untracked = heap.untracked_reported = 0;
  cp_random_reseed(); /* not the parent's draws */
  /* No request survives: the sampled threads are gone. */
  __atomic_store_n(&native.state, NS_IDLE, __ATOMIC_RELAXED);
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
  norm_add("CONTPROF_PYTHON_NATIVE", "%ld", c.python_native);
  norm_add_str("CONTPROF_PYTHON_READS",
               c.python_reads_direct ? "direct" : "syscall");
  static const char *const levels[] = {"error", "warn", "info", "debug"};
  if ((unsigned)c.log_level < 4)
    norm_add_str("CONTPROF_LOG_LEVEL", levels[c.log_level]);

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
  cfg.log_level = c.log_level;
  cfg.python_native = c.python_native;
  cfg.python_reads_direct = c.python_reads_direct;
  cp_config_free(&c);

  if (cfg.heap_on && heap_init(cfg.heap_max_tracked) != 0) {
    fprintf(stderr, "contprof: no memory for the heap profile's table\n");
    cfg.heap_on = 0;
  }
  if (!truncated_word)
    truncated_word = contprof_frame_intern("[truncated]", "", 0);
  if (!no_frame_word)
    no_frame_word = contprof_frame_intern("[no Python frame]", "", 0);
  if (!dropped_word)
    dropped_word = contprof_frame_intern(
        "[dropped: Python stack changed while read]", "", 0);
  if (!layout_checked) {
    /* Once per process: reads that cannot fault, then the layout. */
    self_pid = getpid();
    uint64_t probe = 42, got = 0;
    struct iovec l = {&got, sizeof got}, r = {&probe, sizeof probe};
    safe_reads =
        process_vm_readv(self_pid, &l, 1, &r, 1, 0) == (ssize_t)sizeof got &&
        got == probe;
    if (!safe_reads)
      fprintf(stderr,
              "contprof: process_vm_readv is refused here (%s); the Python "
              "sampler takes the GIL to read frames\n",
              strerror(errno));
    cfg.interp = PyThreadState_Get()->interp;
    const char *why = layout_check();
    if (!why && !L.tid_native && safe_reads)
      pthread_tid_calibrate();
    if (why)
      fprintf(stderr,
              "contprof: CPython %s: %s; Python CPU, wall and allocation "
              "stacks are not sampled\n",
              cfg.version, why);
    layout_checked = 1;
  }
  sampler.needs_gil = !safe_reads;
  direct_ok = 0;
  if (safe_reads && cfg.python_reads_direct) {
    if (cp_safe_read_install() == 0)
      direct_ok = 1;
    else
      fprintf(stderr, "contprof: CONTPROF_PYTHON_READS=direct: the fault "
                      "handlers cannot be installed here; the Python sampler "
                      "reads with process_vm_readv\n");
  }
  native.on = 0;
  if (cfg.python_native && L.ok && cfg.cpu_on) {
    const char *why = native_setup();
    if (why)
      fprintf(stderr,
              "contprof: CONTPROF_PYTHON_NATIVE: %s; Python stacks are "
              "sampled without native frames\n",
              why);
    native.on = !why;
  }
  native.requests = native.merged = native.timeouts = 0;
  native.not_running = native.mismatched = native.unreadable = 0;
  native.handler_ns = 0;
  if (L.ok && cache_init(&alloc_names, 12) != 0)
    L.ok = 0;

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
  pthread_mutex_lock(&threads_lock);
  for (PyThreadState *ts = PyInterpreterState_ThreadHead(cfg.interp); ts;
       ts = PyThreadState_Next(ts)) {
    pythread *t = thread_of(ts_key(ts), 1);
    if (!t)
      break;
    int64_t cpu = t->has_clock ? clock_ns(t->cpu_clock) : -1;
    t->last_cpu_ns = cpu > 0 ? cpu : 0;
    t->last_wall_ns = now;
  }
  pythread *me = current_thread_locked();
  if (me) {
    me->labels = contprof_labels_current();
    cp_trace_current(&me->span_id, &me->local_root_span_id);
  }
  sampler.samples = sampler.dropped = sampler.threads_unreadable = 0;
  sampler.syscall_passes = 0;
  sampler.retried = 0;
  sampler.latencies = 0;
  pthread_mutex_unlock(&threads_lock);
  if ((cfg.alloc_on || cfg.heap_on) && L.ok) {
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
  if (cfg.log_level >= 2 && (sampler.dropped || sampler.threads_unreadable))
    fprintf(stderr,
            "contprof: Python sampler: %llu stacks read, %llu dropped "
            "(changed while read), %llu passes cut short by an exiting "
            "thread\n",
            (unsigned long long)sampler.samples,
            (unsigned long long)sampler.dropped,
            (unsigned long long)sampler.threads_unreadable);
  if (cfg.log_level >= 2 && native.on)
    fprintf(stderr,
            "contprof: Python native frames: %llu of %llu requests merged; "
            "%llu not answered in time, %llu did not line up, %llu "
            "unreadable; %llu samples of threads not running\n",
            (unsigned long long)native.merged,
            (unsigned long long)native.requests,
            (unsigned long long)native.timeouts,
            (unsigned long long)native.mismatched,
            (unsigned long long)native.unreadable,
            (unsigned long long)native.not_running);
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

/* Sets d[key] = v (a new reference); 0, or -1 with an exception. */
static int dict_take(PyObject *d, const char *key, PyObject *v) {
  int rc = v ? PyDict_SetItemString(d, key, v) : -1;
  Py_XDECREF(v);
  return rc;
}

/* contprof_stats_detailed as a dict named like the profiles' comments
 * (docs/overhead.md): the last period's, or with since_start the sums
 * since the start. */
static PyObject *py_overhead(PyObject *self, PyObject *args) {
  (void)self;
  int since_start = 0;
  if (!PyArg_ParseTuple(args, "|p", &since_start))
    return NULL;
  contprof_detailed_stats s = {.size = sizeof s};
  if (contprof_stats_detailed(since_start ? NULL : &s,
                              since_start ? &s : NULL) != CONTPROF_OK) {
    PyErr_SetString(PyExc_RuntimeError, "contprof_stats_detailed failed");
    return NULL;
  }
  static const char *const names[CONTPROF_PROFILE_TYPES] = {
      "cpu", "wall", "alloc", "heap", "lock"};
  const contprof_overhead *o = &s.overhead;
  PyObject *d = PyDict_New(), *per = PyDict_New();
  if (!d || !per ||
      dict_take(d, "profiler_cpu_ns",
                PyLong_FromUnsignedLongLong(o->profiler_cpu_ns)) ||
      dict_take(d, "profiler_threads_cpu_ns",
                PyLong_FromUnsignedLongLong(o->profiler_threads_cpu_ns)) ||
      dict_take(d, "profiler_hooks_ns",
                PyLong_FromUnsignedLongLong(o->profiler_hooks_ns)) ||
      dict_take(d, "profiler_kernel_ns",
                PyLong_FromUnsignedLongLong(s.profiler_kernel_ns)) ||
      dict_take(d, "profiler_drain_ns",
                PyLong_FromUnsignedLongLong(s.profiler_drain_ns)) ||
      dict_take(d, "process_cpu_ns",
                PyLong_FromUnsignedLongLong(o->process_cpu_ns)) ||
      dict_take(d, "profiler_overhead_pct",
                PyFloat_FromDouble(o->profiler_overhead_pct)) ||
      dict_take(d, "samples", PyLong_FromUnsignedLongLong(o->samples)) ||
      dict_take(d, "drops", PyLong_FromUnsignedLongLong(o->drops)) ||
      dict_take(d, "profiler_rss_bytes",
                PyLong_FromUnsignedLongLong(o->profiler_rss_bytes)) ||
      dict_take(d, "max_overhead_pct", PyFloat_FromDouble(s.max_overhead_pct)))
    goto fail;
  for (int k = 0; k < CONTPROF_PROFILE_TYPES; k++) {
    const contprof_profile_stats *p = &s.profiles[k];
    if (!p->enabled)
      continue;
    PyObject *e = Py_BuildValue(
        "{s:K,s:K,s:K,s:K,s:K,s:K,s:d,s:I,s:I}", "samples",
        (unsigned long long)p->samples, "drops", (unsigned long long)p->drops,
        "thinned", (unsigned long long)p->thinned, "hooks_ns",
        (unsigned long long)p->hooks_ns, "kernel_ns",
        (unsigned long long)p->kernel_ns, "threads_cpu_ns",
        (unsigned long long)p->threads_cpu_ns, "sampling", p->sampling,
        "slowdown", p->slowdown, "slowdown_max", p->slowdown_max);
    if (dict_take(per, names[k], e))
      goto fail;
  }
  if (PyDict_SetItemString(d, "profiles", per))
    goto fail;
  Py_DECREF(per);
  return d;
fail:
  Py_XDECREF(d);
  Py_XDECREF(per);
  return NULL;
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
  current_thread_update(1, 0, 0, 0);
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
  current_thread_update(1, 0, 0, 0);
  Py_RETURN_NONE;
}

/* --- label sets that follow asyncio tasks -------------------------------
 *
 * The package keeps each context's labels (contextvars) as a held label set
 * and switches the thread to a context's set around every asyncio callback
 * (docs/python.md, "asyncio"). These functions do that with libcontprof's
 * public hold/release and scopes, and publish the thread's set in its record
 * (under threads_lock, like label_push: the sampler reads a thread's labels
 * and stack in one pass under that lock, so a switch is never seen half
 * done and a sample's labels are those of the callback whose frames it
 * read). All with the GIL. */

/* With the GIL: makes id (0 = none) the calling thread's current set, the
 * thread taking a hold on it and giving its old set's hold back, unless
 * keep_old: then the old set's hold passes to the caller (a scope), and the
 * old id is returned. A set that no longer exists reads as 0. With publish,
 * the thread's record (what the sampler reads) follows. */
static uint32_t thread_labels_switch(uint32_t id, int keep_old, int publish) {
  uint32_t old = contprof_labels_current();
  id = contprof_labels_hold(id);
  if (keep_old)
    contprof_labels_hold(old); /* the pop below gives one back */
  contprof_label_scope scope = {.previous = id, .valid = 1};
  contprof_label_pop(&scope); /* current = id; releases old */
  if (publish)
    current_thread_update(1, 0, 0, 0);
  return old;
}

/* labels_make(base, ((key, value), ...)) -> id: the set base (an id held
 * by the caller, 0 = none) with the items added (a key's later value wins),
 * held once for the caller, who gives it back with labels_release. The
 * calling thread's own labels are left as they were. */
static PyObject *py_labels_make(PyObject *self, PyObject *args) {
  (void)self;
  unsigned long base;
  PyObject *items;
  if (!PyArg_ParseTuple(args, "kO!", &base, &PyTuple_Type, &items))
    return NULL;
  Py_ssize_t n = PyTuple_GET_SIZE(items);
  if (n > 32) {
    PyErr_SetString(PyExc_ValueError, "contprof: more than 32 labels");
    return NULL;
  }
  /* Parsed first: nothing below allocates from Python while the thread's
   * labels are borrowed (an allocation sample would carry them). */
  const char *keys[32], *values[32];
  for (Py_ssize_t i = 0; i < n; i++)
    if (!PyArg_ParseTuple(PyTuple_GET_ITEM(items, i), "ss", &keys[i],
                          &values[i]))
      return NULL;
  contprof_label_scope scopes[32];
  /* Made on the thread's own labels, briefly (not published: the sampler
   * goes on reading the thread's set). */
  uint32_t outer = thread_labels_switch((uint32_t)base, 1, 0);
  int rc = 0;
  Py_ssize_t pushed = 0;
  for (; pushed < n && rc == 0; pushed++)
    rc = contprof_label_push(keys[pushed], values[pushed], &scopes[pushed]);
  int failed = rc != 0;
  Py_ssize_t bad = pushed - 1;
  if (failed)
    pushed--; /* the failed push left no scope */
  uint32_t made = failed ? 0 : contprof_labels_hold(contprof_labels_current());
  while (pushed > 0)
    contprof_label_pop(&scopes[--pushed]);
  /* Back to the thread's own set: the scope's hold passes back. */
  contprof_label_scope back = {.previous = outer, .valid = 1};
  contprof_label_pop(&back);
  if (failed) {
    PyErr_Format(PyExc_ValueError, "contprof: label %s=%s: %s", keys[bad],
                 values[bad], contprof_strerror(rc));
    return NULL;
  }
  return PyLong_FromUnsignedLong(made);
}

/* labels_release(id): gives back a hold of labels_make. */
static PyObject *py_labels_release(PyObject *self, PyObject *arg) {
  (void)self;
  unsigned long id = PyLong_AsUnsignedLong(arg);
  if (PyErr_Occurred())
    return NULL;
  contprof_labels_release((uint32_t)id);
  Py_RETURN_NONE;
}

/* The wrapped asyncio.events.Handle._run, in C because it runs around
 * every callback of every event loop (docs/benchmarks.md, "Python",
 * asyncio). Set by asyncio_setup: the ContextVar of contprof.labels, and
 * _tasks._task_set for a task whose name set is not cached yet; by
 * asyncio_method: asyncio's own _run, and the method that wraps it. */
#if PY_VERSION_HEX < 0x03090000
#define PyObject_Vectorcall _PyObject_Vectorcall
#endif

static PyObject *aio_ref(PyObject *o) {
  Py_INCREF(o);
  return o;
}

static struct {
  PyObject *var, *task_set, *ctx_get, *run, *method;
  PyObject *span_var; /* contprof.set_span's ContextVar: (span, root) */
  PyObject *s_context, *s_callback, *s_self, *s_get_name, *s_cache, *s_id;
} aio;

/* The names and Context.get the functions below use, made once. */
static int aio_strings(void) {
  if (aio.s_id)
    return 0;
  aio.ctx_get = PyObject_GetAttrString((PyObject *)&PyContext_Type, "get");
  aio.s_context = PyUnicode_InternFromString("_context");
  aio.s_callback = PyUnicode_InternFromString("_callback");
  aio.s_self = PyUnicode_InternFromString("__self__");
  aio.s_get_name = PyUnicode_InternFromString("get_name");
  aio.s_cache = PyUnicode_InternFromString("_contprof_labels");
  if (!aio.ctx_get || !aio.s_context || !aio.s_callback || !aio.s_self ||
      !aio.s_get_name || !aio.s_cache)
    return -1;
  aio.s_id = PyUnicode_InternFromString("id");
  return aio.s_id ? 0 : -1;
}

/* asyncio_setup(var, task_set, span_var): at each start that wraps
 * Handle._run. */
static PyObject *py_asyncio_setup(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *var, *task_set, *span_var;
  if (!PyArg_ParseTuple(args, "OOO", &var, &task_set, &span_var))
    return NULL;
  if (aio_strings() != 0)
    return NULL;
  Py_INCREF(var);
  Py_INCREF(task_set);
  Py_INCREF(span_var);
  Py_XSETREF(aio.var, var);
  Py_XSETREF(aio.task_set, task_set);
  Py_XSETREF(aio.span_var, span_var);
  Py_RETURN_NONE;
}

/* _asyncio's wrappers are named "TaskStepMethWrapper" (3.8-3.11) or
 * "_asyncio.TaskStepMethWrapper" (3.12+): compared, not searched for. */
static int is_step_wrapper(const char *tn) {
  if (strncmp(tn, "_asyncio.", 9) == 0)
    tn += 9;
  return tn[0] == 'T' && (strcmp(tn, "TaskStepMethWrapper") == 0 ||
                          strcmp(tn, "TaskWakeupMethWrapper") == 0);
}

/* The task whose step (or wakeup, which steps it) callback cb is, or NULL
 * (a new reference): _asyncio's TaskStepMethWrapper and, before 3.10,
 * TaskWakeupMethWrapper (their __self__); 3.10+'s builtin task_wakeup
 * method; the pure-Python Task's bound __step and __wakeup. */
static PyObject *callback_task(PyObject *cb) {
  PyObject *task = NULL;
  const char *tn = Py_TYPE(cb)->tp_name;
  if (PyCFunction_Check(cb)) {
    PyCFunctionObject *f = (PyCFunctionObject *)cb;
    if (f->m_ml && strcmp(f->m_ml->ml_name, "task_wakeup") == 0 && f->m_self)
      task = aio_ref(f->m_self);
  } else if (PyMethod_Check(cb)) {
    PyObject *fn = PyMethod_GET_FUNCTION(cb);
    PyObject *name =
        PyFunction_Check(fn) ? ((PyFunctionObject *)fn)->func_name : NULL;
    if (name && PyUnicode_Check(name) &&
        (PyUnicode_CompareWithASCIIString(name, "__step") == 0 ||
         PyUnicode_CompareWithASCIIString(name, "__wakeup") == 0))
      task = aio_ref(PyMethod_GET_SELF(cb));
  } else if (is_step_wrapper(tn)) {
    task = PyObject_GetAttr(cb, aio.s_self);
    if (!task)
      PyErr_Clear();
  }
  return task;
}

/* The id of LabelSet base (None: 0). Errors are left to the caller. */
static uint32_t base_labels(PyObject *base) {
  uint32_t id = 0;
  if (base && base != Py_None) {
    PyObject *r = PyObject_GetAttr(base, aio.s_id);
    if (r)
      id = (uint32_t)PyLong_AsUnsignedLong(r);
    Py_XDECREF(r);
  }
  return id;
}

/* The id of base's labels with task's `task name`: from the task's cache
 * (base, name, LabelSet, id, previous entry or None) when base and the
 * name match, else from _tasks._task_set (which makes and caches it). */
static uint32_t task_labels(PyObject *task, PyObject *base) {
  uint32_t id = 0;
  PyObject *name = PyObject_CallMethodObjArgs(task, aio.s_get_name, NULL);
  if (!name)
    return 0;
  PyObject *c = PyObject_GetAttr(task, aio.s_cache);
  if (!c)
    PyErr_Clear();
  PyObject *r = NULL;
  /* The entry, then the one before it (a labels block left). */
  for (PyObject *e = c; e && !r;) {
    if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) < 5)
      break;
    int same =
        PyTuple_GET_ITEM(e, 0) == base
            ? PyObject_RichCompareBool(PyTuple_GET_ITEM(e, 1), name, Py_EQ)
            : 0;
    if (same < 0)
      PyErr_Clear(); /* a name that does not compare: made again below */
    if (same == 1)
      r = aio_ref(PyTuple_GET_ITEM(e, 3));
    e = e == c ? PyTuple_GET_ITEM(e, 4) : NULL;
  }
  if (!r)
    r = PyObject_CallFunctionObjArgs(aio.task_set, task, base, NULL);
  if (r)
    id = (uint32_t)PyLong_AsUnsignedLong(r);
  Py_XDECREF(r);
  Py_XDECREF(c);
  Py_DECREF(name);
  return id;
}

/* The span ids of contprof.set_span's ContextVar in ctx: a (span, root)
 * tuple, or none (0, 0). Errors are cleared. */
static void context_span(PyObject *ctx, uint64_t *span, uint64_t *root) {
  *span = *root = 0;
  if (!ctx || !aio.span_var)
    return;
  PyObject *get_args[2] = {ctx, aio.span_var};
  PyObject *v = PyObject_Vectorcall(aio.ctx_get, get_args, 2, NULL);
  if (v && PyTuple_Check(v) && PyTuple_GET_SIZE(v) == 2) {
    *span = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(v, 0));
    *root = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(v, 1));
  }
  Py_XDECREF(v);
  if (PyErr_Occurred()) {
    PyErr_Clear();
    *span = *root = 0;
  }
}

/* The label set id a callback runs with: its context's labels (a LabelSet
 * or absent), plus `task name` for a task's step (cached on the task as
 * (base, name, LabelSet, id, ...); _tasks._task_set otherwise), and the
 * span ids its context holds (contprof.set_span). 0 on any error
 * (cleared): a callback is never failed by the profiler. */
static uint32_t callback_labels(PyObject *handle, uint64_t *span,
                                uint64_t *root) {
  uint32_t id = 0;
  PyObject *ctx = PyObject_GetAttr(handle, aio.s_context);
  PyObject *get_args[2] = {ctx, aio.var};
  PyObject *base =
      ctx ? PyObject_Vectorcall(aio.ctx_get, get_args, 2, NULL) : NULL;
  PyObject *cb = base ? PyObject_GetAttr(handle, aio.s_callback) : NULL;
  PyObject *task = cb ? callback_task(cb) : NULL;
  if (task && !PyErr_Occurred())
    id = task_labels(task, base);
  else
    id = base_labels(base);
  Py_XDECREF(task);
  Py_XDECREF(cb);
  Py_XDECREF(base);
  if (PyErr_Occurred()) {
    PyErr_Clear();
    id = 0;
  }
  context_span(ctx, span, root);
  Py_XDECREF(ctx);
  return id;
}

/* labels_set_task(task, base): the thread's labels become LabelSet base
 * (None: none) with task's name, or base alone when task is None (a labels
 * block entered or left: its context's set). */
static PyObject *py_labels_set_task(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *task, *base;
  if (!PyArg_ParseTuple(args, "OO", &task, &base) || aio_strings() != 0)
    return NULL;
  uint32_t id = task != Py_None && aio.task_set ? task_labels(task, base)
                                                : base_labels(base);
  if (PyErr_Occurred())
    return NULL;
  thread_labels_switch(id, 0, 1);
  Py_RETURN_NONE;
}

/* Handle._run while wrapped: aio.run(handle) (asyncio's own Handle._run)
 * with the thread's labels those of the callback, and back after. Bound
 * to the handle as a method (asyncio_method), so no Python frame of ours
 * runs or shows in the stacks. */
static PyObject *py_asyncio_handle_run(PyObject *self, PyObject *handle) {
  (void)self;
  PyObject *run = aio.run;
  if (!run) {
    PyErr_SetString(PyExc_RuntimeError, "contprof: asyncio_method not set");
    return NULL;
  }
  Py_INCREF(run); /* a callback may stop and restart the profiler */
  uint64_t span, root, old_span, old_root;
  uint32_t id = callback_labels(handle, &span, &root);
  cp_trace_current(&old_span, &old_root);
  int span_switched = span != old_span || root != old_root;
  uint32_t cur = contprof_labels_current();
  int switched = id != cur;
  uint32_t old = switched ? thread_labels_switch(id, 1, 0) : cur;
  if (span_switched)
    contprof_set_span(span, root);
  if (switched || span_switched) /* both in one update of the record */
    current_thread_update(1, 1, span, root);
  PyObject *r = PyObject_Vectorcall(run, &handle, 1, NULL);
  Py_DECREF(run);
  /* A labels block or set_span inside the callback may have changed the
   * thread's set or span; the thread gets its own back either way. */
  uint64_t now_span, now_root;
  cp_trace_current(&now_span, &now_root);
  int span_back = now_span != old_span || now_root != old_root;
  int labels_back = switched || contprof_labels_current() != old;
  if (labels_back) {
    if (!switched)
      old = contprof_labels_hold(old);
    contprof_label_scope scope = {.previous = old, .valid = 1};
    contprof_label_pop(&scope);
  }
  if (span_back)
    contprof_set_span(old_span, old_root);
  if (labels_back || span_back)
    current_thread_update(1, 1, old_span, old_root);
  return r;
}

static PyMethodDef asyncio_handle_run_def = {
    "_run", py_asyncio_handle_run, METH_O,
    "asyncio's Handle._run, with the callback's labels (contprof)"};

/* asyncio_method(run) -> the method to put in Handle._run in place of run
 * (an instancemethod of a builtin: it binds to the handle like a function
 * does). */
static PyObject *py_asyncio_method(PyObject *self, PyObject *run) {
  (void)self;
  if (!aio.var) {
    PyErr_SetString(PyExc_RuntimeError, "contprof: asyncio_setup first");
    return NULL;
  }
  if (!aio.method) {
    PyObject *f = PyCFunction_New(&asyncio_handle_run_def, NULL);
    aio.method = f ? PyInstanceMethod_New(f) : NULL;
    Py_XDECREF(f);
    if (!aio.method)
      return NULL;
  }
  Py_INCREF(run);
  Py_XSETREF(aio.run, run);
  Py_INCREF(aio.method);
  return aio.method;
}

static PyObject *py_set_span(PyObject *self, PyObject *args) {
  (void)self;
  unsigned long long span, root;
  if (!PyArg_ParseTuple(args, "KK", &span, &root))
    return NULL;
  contprof_set_span(span, root);
  current_thread_update(0, 1, span, root);
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
  self_pid = getpid();
  memset(threads_tab, 0, sizeof threads_tab);
  threads_used = 0;
  if (!contprof_is_running()) {
    cfg.running = 0;
    hooks_uninstall();
    alloc.countdown = INT64_MAX;
    options_free();
    Py_RETURN_NONE;
  }
  pthread_mutex_lock(&threads_lock);
  pythread *me = current_thread_locked();
  if (me) {
    me->labels = contprof_labels_current();
    cp_trace_current(&me->span_id, &me->local_root_span_id);
    me->last_wall_ns = monotonic_ns();
  }
  pthread_mutex_unlock(&threads_lock);
  if (sampler_start() != 0)
    fprintf(stderr, "contprof: cannot start the Python sampler thread: %s\n",
            strerror(errno));
  Py_RETURN_NONE;
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* The sampler's counters and its latency (sample due -> frames read) since
 * start: for tests and bench/. */
static PyObject *py_stats(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  static uint32_t lat[LATENCY_RING];
  pthread_mutex_lock(&threads_lock);
  uint64_t samples = sampler.samples, dropped = sampler.dropped,
           cut = sampler.threads_unreadable, nl = sampler.latencies,
           retried = sampler.retried;
  size_t n = nl < LATENCY_RING ? (size_t)nl : LATENCY_RING;
  memcpy(lat, sampler.latency_us, n * sizeof *lat);
  pthread_mutex_unlock(&threads_lock);
  qsort(lat, n, sizeof *lat, cmp_u32);
  /* reads: how the sampler reads, "direct" (copies that recover from
   * faults), "syscall" (process_vm_readv) or "gil" (in place, with it). */
  PyObject *d = Py_BuildValue(
      "{s:K,s:K,s:K,s:K,s:K,s:k,s:k,s:k,s:O,s:O,s:s,s:l,s:s,s:K,s:K}",
      "samples", (unsigned long long)samples, "dropped",
      (unsigned long long)dropped, "retried", (unsigned long long)retried,
      "passes_cut_short", (unsigned long long)cut, "latency_n",
      (unsigned long long)n, "latency_p50_us",
      (unsigned long)(n ? lat[n / 2] : 0), "latency_p99_us",
      (unsigned long)(n ? lat[n * 99 / 100] : 0), "latency_max_us",
      (unsigned long)(n ? lat[n - 1] : 0), "without_gil",
      safe_reads ? Py_True : Py_False, "layout_ok", L.ok ? Py_True : Py_False,
      "layout", L.source, "pthread_tid_offset", pthread_tid_off, "reads",
      direct_ok    ? "direct"
      : safe_reads ? "syscall"
                   : "gil",
      "read_faults", (unsigned long long)cp_safe_read_faults(),
      "syscall_passes",
      (unsigned long long)__atomic_load_n(&sampler.syscall_passes,
                                          __ATOMIC_RELAXED));
  if (d) {
    native_stats(d);
  }
  return d;
}

static PyMethodDef methods[] = {
    {"stats", py_stats, METH_NOARGS,
     "stats() -> dict: the Python sampler's counters and latency"},
    {"start", py_start, METH_VARARGS,
     "start(options: dict[str, str]) -> status; options by variable name"},
    {"stop", py_stop, METH_NOARGS, "stop() -> status"},
    {"flush", py_flush, METH_NOARGS, "flush() -> status"},
    {"is_running", py_is_running, METH_NOARGS, "is_running() -> bool"},
    {"overhead", py_overhead, METH_VARARGS,
     "overhead(since_start=False) -> dict: what the profiler cost"},
    {"strerror", py_strerror, METH_VARARGS, "strerror(status) -> str"},
    {"label_push", py_label_push, METH_VARARGS,
     "label_push(key, value) -> token"},
    {"label_pop", py_label_pop, METH_O, "label_pop(token)"},
    {"labels_make", py_labels_make, METH_VARARGS,
     "labels_make(base, ((key, value), ...)) -> held set id"},
    {"labels_release", py_labels_release, METH_O, "labels_release(id)"},
    {"asyncio_setup", py_asyncio_setup, METH_VARARGS,
     "asyncio_setup(labels_var, task_set)"},
    {"labels_set_task", py_labels_set_task, METH_VARARGS,
     "labels_set_task(task or None, LabelSet or None)"},
    {"asyncio_method", py_asyncio_method, METH_O,
     "asyncio_method(run) -> Handle._run that runs run with the labels"},
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

#endif /* CP_UNSUPPORTED */
