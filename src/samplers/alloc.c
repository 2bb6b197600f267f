/* Allocation and live-heap sampler: hooks on the malloc family that forward
 * to the next allocator in the lookup order (glibc, or jemalloc/tcmalloc
 * preloaded after us), sample allocated bytes as a Poisson process (mean
 * CONTPROF_ALLOC_SAMPLE_BYTES, per-thread countdown, exponential gaps) and
 * report each sample unbiased: scale = 1 / (1 - exp(-size/rate)) on count and
 * bytes. Samples go to the ring (alloc-samples, alloc-space) and, with the
 * heap profile, into the live table (heap_table.h) until freed; the in-use
 * profile is a snapshot of that table taken at export.
 *
 * Cost: every hook ends in a tail jump to the real allocator unless it
 * samples. With sampling off, an allocation adds one predictable branch on a
 * read-mostly flag; with sampling on, a thread-local subtraction. A free
 * adds a range check (the bootstrap arena) and, once the heap profile has
 * run, a hash and one load from the live table's 4 KiB filter (before, one
 * predictable branch). Only sampled allocations unwind.
 *
 * Recursion: the real allocator is found with dlsym(RTLD_NEXT), which may
 * itself allocate: those allocations come from a static bootstrap arena that
 * free() recognises and ignores. While a sample is recorded, a thread-local
 * guard (initial-exec TLS) sends nested allocations (libunwind's first use on
 * a thread) straight to the real allocator; the profiler's own threads carry
 * the guard permanently. */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <malloc.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "aggregator/aggregator.h"
#include "common.h"
#include "heap_table.h"
#include "labels.h"
#include "random.h"
#include "record.h"
#include "sampler.h"
#include "stats.h"
#include "unwind.h"

#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#define RETURN_ADDRESS() ((uint64_t)(uintptr_t)__builtin_return_address(0))

#define HEAP_MAX_FRAMES 256 /* frames kept per live allocation */
#define BOOT_ARENA_BYTES (64 * 1024)
#define GUARD_BUSY 1u     /* recording a sample on this thread */
#define GUARD_INTERNAL 2u /* a profiler thread: never sampled */
#define GUARD_NESTED                                                           \
  4u /* per cp_alloc_guard_begin: the profiler's own                           \
      * work on an application thread */

typedef void *(*malloc_fn)(size_t);
typedef void *(*calloc_fn)(size_t, size_t);
typedef void *(*realloc_fn)(void *, size_t);
typedef void *(*reallocarray_fn)(void *, size_t, size_t);
typedef void (*free_fn)(void *);
typedef int (*posix_memalign_fn)(void **, size_t, size_t);
typedef void *(*memalign_fn)(size_t, size_t);
typedef void *(*valloc_fn)(size_t);
typedef size_t (*usable_fn)(void *);

/* Until the real allocator is published, the four hottest entry points
 * hold these: they resolve it, or fall back to the bootstrap arena, so those
 * hooks never test for a missing entry point. */
static void *resolving_malloc(size_t size);
static void resolving_free(void *p);
static void *resolving_calloc(size_t n, size_t size);
static void *resolving_realloc(void *p, size_t size);

/* Read on every call: the real functions and the sampling flag, alone on
 * their cache lines. */
static struct {
  _Alignas(64) malloc_fn malloc;
  calloc_fn calloc;
  realloc_fn realloc;
  reallocarray_fn reallocarray;
  free_fn free;
  posix_memalign_fn posix_memalign;
  memalign_fn aligned_alloc;
  memalign_fn memalign;
  valloc_fn valloc;
  valloc_fn pvalloc;
  usable_fn usable_size;
  _Atomic int sampling; /* alloc or heap sampling is on */
  char pad[64];
} hot = {.malloc = resolving_malloc,
         .free = resolving_free,
         .calloc = resolving_calloc,
         .realloc = resolving_realloc};

static _Atomic int resolve_state; /* 0 not yet, 1 in progress, 2 done */
static _Atomic int not_first;     /* another malloc precedes ours */
static CP_TLS int resolving;      /* this thread is inside dlsym */

static _Alignas(64) unsigned char boot_arena[BOOT_ARENA_BYTES];
static _Atomic size_t boot_used;

static struct {
  _Atomic uint32_t epoch; /* bumped at each start: threads redraw their gap */
  int alloc_on, heap_on;
  /* Mean bytes between samples in force: CONTPROF_ALLOC_SAMPLE_BYTES times
   * the governor's slowdown. */
  _Atomic double rate;
  double base_rate; /* CONTPROF_ALLOC_SAMPLE_BYTES */
  size_t max_frames;
  size_t heap_frames;
  cp_heap_entry *scratch; /* the uploader's copy of one entry */
  uint64_t overflows_reported;
  int warned_not_first;
} alloc;

static CP_TLS int64_t tls_countdown; /* bytes until the next sample */
static CP_TLS uint32_t tls_epoch;
static CP_TLS double tls_gap_mean; /* the mean of the gap counting down */
static CP_TLS uint32_t tls_guard;

/* --- the bootstrap arena ----------------------------------------------- */

static int in_boot_arena(const void *p) {
  return (uintptr_t)p - (uintptr_t)boot_arena < BOOT_ARENA_BYTES;
}

/* Async-signal-safe, lock-free bump allocation: for the allocations dlsym
 * makes before the real allocator is known. Never reused (zeroed memory),
 * never freed; each block's size sits in the 8 bytes before it. */
static void *boot_alloc(size_t size, size_t align) {
  if (align < 16)
    align = 16;
  if (align > 4096 || (align & (align - 1)) || size > BOOT_ARENA_BYTES) {
    errno = ENOMEM;
    return NULL;
  }
  size_t used = atomic_load_explicit(&boot_used, memory_order_relaxed);
  for (;;) {
    uintptr_t base = (uintptr_t)boot_arena;
    uintptr_t start = (base + used + 8 + align - 1) & ~(uintptr_t)(align - 1);
    size_t end = (size_t)(start - base) + size;
    if (end > BOOT_ARENA_BYTES) {
      errno = ENOMEM;
      return NULL;
    }
    if (atomic_compare_exchange_weak_explicit(&boot_used, &used, end,
                                              memory_order_relaxed,
                                              memory_order_relaxed)) {
      memcpy((void *)(start - 8), &size, sizeof size);
      return (void *)start;
    }
  }
}

static size_t boot_size(const void *p) {
  size_t size;
  memcpy(&size, (const unsigned char *)p - 8, sizeof size);
  return size;
}

/* --- finding the real allocator ---------------------------------------- */

/* Whether fn is defined by the same object as the real malloc: a function
 * the next allocator lacks (jemalloc has no pvalloc or reallocarray) would
 * otherwise come from glibc and hand out memory the other one frees. */
static int same_object(void *fn, void *malloc_fn_ptr) {
  Dl_info a, b;
  if (!fn || !dladdr(fn, &a) || !dladdr(malloc_fn_ptr, &b))
    return 0;
  return a.dli_fbase == b.dli_fbase;
}

static void *real_posix_memalign_based(size_t align, size_t size) {
  void *p = NULL;
  int rc = hot.posix_memalign(&p, align, size);
  if (rc) {
    errno = rc;
    return NULL;
  }
  return p;
}

/* Emulations over the next allocator's own functions. */
static void *emulated_memalign(size_t align, size_t size) {
  /* glibc rounds alignments that are not powers of two up. */
  size_t a = sizeof(void *);
  while (a < align && a < ((size_t)1 << (sizeof(size_t) * 8 - 2)))
    a <<= 1;
  return real_posix_memalign_based(a, size);
}

static void *emulated_valloc(size_t size) {
  return real_posix_memalign_based((size_t)sysconf(_SC_PAGESIZE), size);
}

static void *emulated_pvalloc(size_t size) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t rounded = (size + page - 1) & ~(page - 1);
  if (rounded < size) {
    errno = ENOMEM;
    return NULL;
  }
  return real_posix_memalign_based(page, rounded ? rounded : page);
}

static void *emulated_reallocarray(void *p, size_t n, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(n, size, &bytes)) {
    errno = ENOMEM;
    return NULL;
  }
  return hot.realloc(p, bytes);
}

static size_t no_usable_size(void *p) {
  (void)p;
  return 0;
}

/* Whether fn is where a defined symbol starts, not a PLT stub: an executable
 * built without -fPIE that takes a function's address exports its PLT entry
 * as the function's address (a "canonical PLT"), and dlsym(RTLD_DEFAULT)
 * then returns that stub, which only jumps to the real definition. */
static int is_definition(void *fn) {
  Dl_info info;
  const ElfW(Sym) *sym = NULL;
  if (!fn || !dladdr1(fn, &info, (void **)&sym, RTLD_DL_SYMENT) || !sym)
    return 0;
  /* The stub's symbol is undefined in the executable (it only has a
   * value), and dladdr reports it. */
  return info.dli_saddr == fn && sym->st_shndx != SHN_UNDEF;
}

extern __typeof(malloc) cp_alloc_own_malloc
    __attribute__((alias("malloc"), visibility("hidden"), copy(malloc)));

/* dlsym, but never one of our own hooks (compared by object: in PIC code
 * `&free` is whatever the lookup order chose). */
static void *next_symbol(void *from, const char *name) {
  void *fn = dlsym(from, name);
  return fn && same_object(fn, (void *)cp_alloc_own_malloc) ? NULL : fn;
}

/* Resolves every real function once. The first caller does it; its nested
 * allocations (inside dlsym), and other threads' allocations meanwhile, come
 * from the bootstrap arena: waiting could deadlock with the loader lock. */
static int ensure_resolved(void) {
  if (LIKELY(atomic_load_explicit(&resolve_state, memory_order_acquire) == 2))
    return 1;
  int expected = 0;
  if (resolving ||
      !atomic_compare_exchange_strong(&resolve_state, &expected, 1))
    return atomic_load_explicit(&resolve_state, memory_order_acquire) == 2;
  resolving = 1;
  int saved_errno = errno;
  /* Normally our malloc is the one the program calls, and the real one is
   * the next in the lookup order. When another allocator comes first
   * (LD_PRELOAD=libjemalloc.so:libcontprof_preload.so, or one linked into
   * the executable), the program reaches our hooks only for what that one
   * lacks (jemalloc: pvalloc, reallocarray): forward those to it, since it
   * frees them, and never sample (its frees bypass us). */
  void *from = RTLD_NEXT;
  malloc_fn m;
  void *first = dlsym(RTLD_DEFAULT, "malloc");
  if (first && !same_object(first, (void *)cp_alloc_own_malloc) &&
      is_definition(first)) {
    from = RTLD_DEFAULT;
    m = (malloc_fn)first;
    atomic_store(&not_first, 1);
  } else {
    m = (malloc_fn)next_symbol(from, "malloc");
  }
  if (!m) {
    /* Nothing after us (linked into an executable with a static libc
     * stub?): ask the C library itself. */
    from = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    m = from ? (malloc_fn)next_symbol(from, "malloc") : NULL;
  }
  if (!m) {
    static const char msg[] = "contprof: no malloc to forward to\n";
    (void)!write(2, msg, sizeof msg - 1);
    abort();
  }
  /* Resolved into a copy, then published: each hook reads its own entry
   * point with acquire and needs that one only (an emulation needs the
   * entry points it is made of, published before it). free first, malloc
   * last: a thread that sees an allocating entry point can free what it
   * gets. */
  void *f;
  free_fn rfree = (free_fn)next_symbol(from, "free");
  realloc_fn rrealloc = (realloc_fn)next_symbol(from, "realloc");
  calloc_fn rcalloc = (calloc_fn)next_symbol(from, "calloc");
  f = next_symbol(from, "malloc_usable_size");
  usable_fn rusable = same_object(f, (void *)m) ? (usable_fn)f : no_usable_size;
  f = next_symbol(from, "posix_memalign");
  posix_memalign_fn rposix =
      same_object(f, (void *)m) ? (posix_memalign_fn)f : NULL;
  if (!rfree || !rrealloc || !rcalloc || !rposix) {
    static const char msg[] =
        "contprof: the next allocator lacks free, realloc, calloc or "
        "posix_memalign\n";
    (void)!write(2, msg, sizeof msg - 1);
    abort();
  }
#define PUBLISH(name, value)                                                   \
  __atomic_store_n(&hot.name, value, __ATOMIC_RELEASE)
  PUBLISH(free, rfree);
  PUBLISH(usable_size, rusable);
  PUBLISH(posix_memalign, rposix);
  PUBLISH(realloc, rrealloc);
  PUBLISH(calloc, rcalloc);
  f = next_symbol(from, "memalign");
  PUBLISH(memalign,
          same_object(f, (void *)m) ? (memalign_fn)f : emulated_memalign);
  f = next_symbol(from, "aligned_alloc");
  PUBLISH(aligned_alloc,
          same_object(f, (void *)m) ? (memalign_fn)f : emulated_memalign);
  f = next_symbol(from, "valloc");
  PUBLISH(valloc, same_object(f, (void *)m) ? (valloc_fn)f : emulated_valloc);
  f = next_symbol(from, "pvalloc");
  PUBLISH(pvalloc, same_object(f, (void *)m) ? (valloc_fn)f : emulated_pvalloc);
  f = next_symbol(from, "reallocarray");
  PUBLISH(reallocarray, same_object(f, (void *)m) ? (reallocarray_fn)f
                                                  : emulated_reallocarray);
  PUBLISH(malloc, m);
#undef PUBLISH
  errno = saved_errno;
  resolving = 0;
  atomic_store_explicit(&resolve_state, 2, memory_order_release);
  return 1;
}

/* --- sampling ---------------------------------------------------------- */

/* Async-signal-safe: the bytes until the next sample, exponential with
 * mean `mean`. */
static int64_t next_gap(double mean) {
  double gap = cp_random_exp(mean);
  return gap >= 4.0e18 ? (int64_t)4e18 : (int64_t)gap;
}

/* Hot path (malloc hook), bounded, no locks, no allocation: reserves a ring
 * slot and/or a live-table entry, unwinds once into one of them, fills both.
 * No signal masking (two system calls per sample): cp_unwind_here flags the
 * unwind so that a sampling handler arriving meanwhile drops its sample
 * instead of unwinding on top of it, and ring slots are per-reservation. */
static void record_sample(void *p, size_t size, uint64_t caller_ra,
                          double mean) {
  double prob = -expm1(-(double)size / mean);
  double scale = prob > 0 ? 1.0 / prob : 1.0;
  int64_t count = cp_random_round(scale);
  int64_t bytes = (int64_t)(scale * (double)size + 0.5);

  cp_ring *ring = alloc.alloc_on ? cp_agg_ring() : NULL;
  cp_record rec;
  cp_raw_sample *s =
      ring ? cp_record_begin(&rec, ring, CONTPROF_KIND_ALLOC, count, bytes)
           : NULL;
  cp_heap_entry *e = alloc.heap_on ? cp_heap_entry_take() : NULL;
  uint64_t *frames = NULL;
  size_t max = 0;
  if (s) {
    frames = s->frames;
    max = cp_ring_max_frames(ring) - CP_UNWIND_SLACK;
    if (max > alloc.max_frames)
      max = alloc.max_frames;
  } else if (e) {
    frames = e->frames;
    max = alloc.heap_frames;
  }
  if (frames) {
    int truncated = 0;
    size_t n = cp_unwind_here(frames, max, caller_ra, &truncated);
    if (e) {
      size_t keep = n;
      int cut = truncated;
      if (frames != e->frames) {
        keep = n < alloc.heap_frames ? n : alloc.heap_frames;
        memcpy(e->frames, frames, keep * sizeof *frames);
        cut |= keep < n;
      }
      /* The ring slot, when there is one, holds the thread and labels. */
      e->tid = s ? s->tid : cp_gettid();
      /* The live sample keeps its label set from being freed; the heap
       * table gives the hold back when the entry goes. */
      e->labels = cp_labels_hold(s ? s->labels : cp_labels_current());
      e->count = count;
      e->bytes = bytes;
      e->nframes = (uint32_t)keep;
      e->truncated = (uint32_t)cut;
      cp_heap_entry_publish(e, (uintptr_t)p);
    }
    if (s)
      cp_record_commit(&rec, n, truncated);
  }
}

/* Hot path (malloc hook), async-signal-safe: the thread's countdown ran out
 * at an allocation of `size` bytes that returned p (NULL: it failed).
 * Starts the next gap and records this allocation, unless the thread is
 * inside the profiler. */
__attribute__((noinline, cold)) static void sample_slow(void *p, size_t size,
                                                        uint64_t caller_ra) {
  if (tls_guard) {
    if (tls_guard & GUARD_INTERNAL)
      tls_countdown = INT64_MAX;
    return;
  }
  int saved_errno = errno;
  uint32_t epoch = atomic_load_explicit(&alloc.epoch, memory_order_acquire);
  if (tls_epoch != epoch) {
    /* The first countdown of this thread (or of this start): the gap
     * starts before this allocation. */
    tls_epoch = epoch;
    tls_gap_mean = atomic_load_explicit(&alloc.rate, memory_order_relaxed);
    tls_countdown = next_gap(tls_gap_mean) - (int64_t)size;
    if (tls_countdown >= 0) {
      errno = saved_errno;
      return;
    }
  }
  /* The gap that ended here was drawn with tls_gap_mean: its sample is
   * weighted with that mean, whatever the governor set meanwhile. */
  double mean = tls_gap_mean;
  tls_gap_mean = atomic_load_explicit(&alloc.rate, memory_order_relaxed);
  tls_countdown = next_gap(tls_gap_mean);
  if (p && atomic_load_explicit(&hot.sampling, memory_order_relaxed)) {
    tls_guard |= GUARD_BUSY;
    uint64_t began = cp_stats_hook_begin(CONTPROF_KIND_ALLOC);
    record_sample(p, size, caller_ra, mean);
    cp_stats_hook_end(CONTPROF_KIND_ALLOC, began);
    tls_guard &= ~GUARD_BUSY;
  }
  errno = saved_errno;
}

/* Hot path, async-signal-safe: counts an allocation of `size` bytes about to
 * be made; true when it is to be sampled (the caller then allocates and
 * calls sample_slow). Counting before the call lets every hook end in a
 * tail call to the real allocator when it does not sample: no stack frame,
 * no second return. (A failed allocation still counts its bytes: that only
 * moves the next sample a little earlier.) */
static inline __attribute__((always_inline)) int take_sample(size_t size) {
  /* Laid out for sampling on (the library is loaded to profile): the
   * countdown then follows with no taken branch. Laid out for off, the
   * profiled path took two more taken branches per call: 3 points of CPU on
   * the worst-case benchmark. */
  return LIKELY(atomic_load_explicit(&hot.sampling, memory_order_relaxed)) &&
         UNLIKELY((tls_countdown -= (int64_t)size) < 0);
}

/* Hot path, async-signal-safe: stops tracking p before it is freed (after
 * the free, another thread could be handed the same address). */
static inline __attribute__((always_inline)) void note_free(void *p) {
  if (UNLIKELY(cp_heap_may_track((uintptr_t)p)))
    cp_heap_untrack((uintptr_t)p);
}

/* --- the hooks --------------------------------------------------------- */

#define REAL(name) __atomic_load_n(&hot.name, __ATOMIC_ACQUIRE)

/* Before the real allocator is known: resolves it, or says why not (this
 * thread is inside dlsym, or another thread is resolving). */
__attribute__((noinline, cold)) static int resolve_slow(void) {
  return ensure_resolved();
}

__attribute__((noinline, cold)) static void *resolving_malloc(size_t size) {
  if (!resolve_slow())
    return boot_alloc(size, 0);
  return REAL(malloc)(size);
}

__attribute__((noinline, cold)) static void resolving_free(void *p) {
  if (resolve_slow())
    REAL(free)(p);
  /* else it cannot come from the real allocator yet: leak it */
}

__attribute__((noinline, cold)) static void *resolving_calloc(size_t n,
                                                              size_t size) {
  size_t bytes;
  if (resolve_slow())
    return REAL(calloc)(n, size);
  if (__builtin_mul_overflow(n, size, &bytes)) {
    errno = ENOMEM;
    return NULL;
  }
  return boot_alloc(bytes, 0); /* the arena is zeroed, never reused */
}

/* realloc of a bootstrap block: a fresh block with the old bytes. */
__attribute__((noinline, cold)) static void *boot_realloc(void *p,
                                                          size_t size) {
  void *q =
      resolve_slow() ? REAL(malloc)(size ? size : 1) : boot_alloc(size, 0);
  if (q && p)
    memcpy(q, p, boot_size(p) < size ? boot_size(p) : size);
  return q;
}

__attribute__((noinline, cold)) static void *resolving_realloc(void *p,
                                                               size_t size) {
  if (!resolve_slow())
    return boot_realloc(p, size);
  return REAL(realloc)(p, size);
}

/* The allocating hooks' slow paths (noinline, cold): this allocation is
 * sampled, or the pointer handed in may be tracked or from the bootstrap
 * arena. (Sampling starts only once the real allocator is known.) */
__attribute__((noinline, cold)) static void *malloc_slow(size_t size,
                                                         uint64_t caller_ra) {
  void *p = REAL(malloc)(size);
  sample_slow(p, size, caller_ra);
  return p;
}

/* Hot path (each hook below): forwards, and notes what it sampled. No
 * locks, no allocation of its own; when nothing is sampled, a tail call. */
void *malloc(size_t size) {
  if (LIKELY(!take_sample(size)))
    return REAL(malloc)(size);
  return malloc_slow(size, RETURN_ADDRESS());
}

__attribute__((noinline, cold)) static void free_slow(void *p) {
  if (!p || in_boot_arena(p))
    return;
  note_free(p);
  REAL(free)(p);
}

void free(void *p) {
  if (LIKELY(!in_boot_arena(p)) && LIKELY(!cp_heap_may_track((uintptr_t)p))) {
    REAL(free)(p);
    return;
  }
  free_slow(p);
}

__attribute__((noinline, cold)) static void *calloc_slow(size_t n, size_t size,
                                                         uint64_t caller_ra) {
  void *p = REAL(calloc)(n, size);
  sample_slow(p, n * size, caller_ra); /* p: no overflow */
  return p;
}

void *calloc(size_t n, size_t size) {
  size_t bytes;
  /* An overflowing request fails in the real calloc and is not counted. */
  if (UNLIKELY(__builtin_mul_overflow(n, size, &bytes)) ||
      LIKELY(!take_sample(bytes)))
    return REAL(calloc)(n, size);
  return calloc_slow(n, size, RETURN_ADDRESS());
}

/* counted: take_sample already counted this allocation and chose it. */
__attribute__((noinline, cold)) static void *
realloc_slow(void *p, size_t size, uint64_t caller_ra, int counted) {
  if (in_boot_arena(p))
    return boot_realloc(p, size);
  if (p)
    note_free(p);
  int sampled = counted || take_sample(size);
  void *q = REAL(realloc)(p, size);
  if (sampled)
    sample_slow(q, size, caller_ra);
  return q;
}

void *realloc(void *p, size_t size) {
  if (LIKELY(!in_boot_arena(p)) && LIKELY(!cp_heap_may_track((uintptr_t)p))) {
    if (LIKELY(!take_sample(size)))
      return REAL(realloc)(p, size);
    return realloc_slow(p, size, RETURN_ADDRESS(), 1);
  }
  return realloc_slow(p, size, RETURN_ADDRESS(), 0);
}

__attribute__((noinline, cold)) static void *
reallocarray_slow(void *p, size_t n, size_t size, uint64_t caller_ra,
                  int counted) {
  size_t bytes;
  if (__builtin_mul_overflow(n, size, &bytes)) {
    errno = ENOMEM;
    return NULL;
  }
  if (in_boot_arena(p) || (!REAL(reallocarray) && !resolve_slow()))
    return boot_realloc(p, bytes);
  if (p)
    note_free(p);
  int sampled = counted || take_sample(bytes);
  void *q = REAL(reallocarray)(p, n, size);
  if (sampled)
    sample_slow(q, bytes, caller_ra);
  return q;
}

void *reallocarray(void *p, size_t n, size_t size) {
  reallocarray_fn real = REAL(reallocarray);
  size_t bytes;
  if (LIKELY(real) && LIKELY(!in_boot_arena(p)) &&
      LIKELY(!cp_heap_may_track((uintptr_t)p)) &&
      !__builtin_mul_overflow(n, size, &bytes)) {
    if (LIKELY(!take_sample(bytes)))
      return real(p, n, size);
    return reallocarray_slow(p, n, size, RETURN_ADDRESS(), 1);
  }
  return reallocarray_slow(p, n, size, RETURN_ADDRESS(), 0);
}

__attribute__((noinline, cold)) static int
posix_memalign_slow(void **out, size_t align, size_t size, uint64_t caller_ra,
                    int counted) {
  if (!REAL(posix_memalign) && !resolve_slow()) {
    if (align < sizeof(void *) || (align & (align - 1)))
      return EINVAL;
    int saved_errno = errno;
    void *p = boot_alloc(size, align);
    errno = saved_errno;
    if (!p)
      return ENOMEM;
    *out = p;
    return 0;
  }
  int sampled = counted || take_sample(size);
  int rc = REAL(posix_memalign)(out, align, size);
  if (sampled)
    sample_slow(rc == 0 ? *out : NULL, size, caller_ra);
  return rc;
}

int posix_memalign(void **out, size_t align, size_t size) {
  posix_memalign_fn real = REAL(posix_memalign);
  if (LIKELY(real)) {
    if (LIKELY(!take_sample(size)))
      return real(out, align, size);
    return posix_memalign_slow(out, align, size, RETURN_ADDRESS(), 1);
  }
  return posix_memalign_slow(out, align, size, RETURN_ADDRESS(), 0);
}

/* The body of aligned_alloc, memalign, valloc and pvalloc: rare, so one
 * shape for all (no tail call). */
#define ALIGNED_HOOK_BODY(name, real_call, boot_call, bytes)                   \
  if (!REAL(name) && !resolve_slow())                                          \
    return boot_call;                                                          \
  void *p = real_call;                                                         \
  if (take_sample(bytes))                                                      \
    sample_slow(p, bytes, RETURN_ADDRESS());                                   \
  return p

void *aligned_alloc(size_t align, size_t size) {
  ALIGNED_HOOK_BODY(aligned_alloc, REAL(aligned_alloc)(align, size),
                    boot_alloc(size, align), size);
}

void *memalign(size_t align, size_t size) {
  ALIGNED_HOOK_BODY(memalign, REAL(memalign)(align, size),
                    boot_alloc(size, align), size);
}

void *valloc(size_t size) {
  ALIGNED_HOOK_BODY(valloc, REAL(valloc)(size), boot_alloc(size, 4096), size);
}

void *pvalloc(size_t size) {
  ALIGNED_HOOK_BODY(
      pvalloc, REAL(pvalloc)(size),
      boot_alloc(size ? (size + 4095) & ~(size_t)4095 : 4096, 4096), size);
}

size_t malloc_usable_size(void *p) {
  if (UNLIKELY(in_boot_arena(p)))
    return boot_size(p);
  if (!REAL(usable_size) && !resolve_slow())
    return 0;
  return REAL(usable_size)(p);
}

/* --- the sampler interface --------------------------------------------- */

void cp_alloc_exclude_self(void) { tls_guard |= GUARD_INTERNAL; }
void cp_alloc_guard_begin(void) { tls_guard += GUARD_NESTED; }
void cp_alloc_guard_end(void) { tls_guard -= GUARD_NESTED; }

static void add_live(const cp_heap_entry *e, void *ctx) {
  cp_sample_key key = {.labels = e->labels, .tid = e->tid};
  cp_gen_add((cp_generation *)ctx, e->frames, e->nframes, (int)e->truncated,
             &key, CONTPROF_KIND_INUSE, e->count, e->bytes);
}

/* On the uploader thread: the in-use snapshot. */
static void alloc_before_export(cp_generation *g) {
  if (!alloc.heap_on || !alloc.scratch)
    return;
  cp_heap_foreach_live(add_live, g, alloc.scratch);
  long live = cp_heap_count_live();
  cp_stats_add_samples(CONTPROF_KIND_INUSE, live > 0 ? (uint64_t)live : 0);
  cp_stats_set_fixed_memory(CP_STATS_MEM_HEAP_TABLE, cp_heap_memory_used());
  uint64_t overflows = cp_heap_overflows();
  if (overflows > alloc.overflows_reported) {
    cp_warn("%llu sampled allocations were not tracked in the live heap "
            "(table of %zu full): inuse-* undercounts; raise "
            "CONTPROF_HEAP_MAX_TRACKED",
            (unsigned long long)(overflows - alloc.overflows_reported),
            cp_heap_capacity());
    alloc.overflows_reported = overflows;
  }
}

static int alloc_start(const cp_config *cfg) {
  ensure_resolved();
  alloc.alloc_on = (cfg->profiles & CP_PROFILE_ALLOC) != 0;
  alloc.heap_on = (cfg->profiles & CP_PROFILE_HEAP) != 0;
  alloc.base_rate = (double)cfg->alloc_sample_bytes;
  atomic_store(&alloc.rate, alloc.base_rate);
  alloc.max_frames = (size_t)cfg->max_frames;
  if (atomic_load(&not_first)) {
    if (!alloc.warned_not_first++)
      cp_warn("another malloc comes before contprof's in the lookup order "
              "(put libcontprof first in LD_PRELOAD): the alloc and heap "
              "profiles stay empty");
    return 0;
  }
  if (alloc.heap_on) {
    size_t frames =
        alloc.max_frames < HEAP_MAX_FRAMES ? alloc.max_frames : HEAP_MAX_FRAMES;
    if (cp_heap_init((size_t)cfg->heap_max_tracked, frames) != 0) {
      cp_error("cannot map the live-heap table: the heap profile is off");
      alloc.heap_on = 0;
    } else {
      /* The table made by the first start is kept (see heap_table.h). */
      alloc.heap_frames = cp_heap_frames_capacity() - CP_UNWIND_SLACK;
      if (!alloc.scratch)
        alloc.scratch = calloc(1, cp_heap_entry_bytes());
      if (!alloc.scratch)
        alloc.heap_on = 0;
    }
  }
  cp_unwind_init();
  atomic_fetch_add(&alloc.epoch, 1);
  atomic_store(&hot.sampling, alloc.alloc_on || alloc.heap_on);
  return 0;
}

/* Sampling stops; tracked allocations stay tracked (frees keep removing
 * them), so the last profile's in-use snapshot is right and a restart
 * reports what is still live. */
static void alloc_stop(void) { atomic_store(&hot.sampling, 0); }

/* Sampling stops until the child's profiler starts again. The parent's
 * tracked blocks are forgotten: the child's in-use profile is its own (a
 * pre-fork server's workers would otherwise each report the parent's heap). */
static void alloc_after_fork_child(void) {
  atomic_store(&hot.sampling, 0);
  tls_guard &= ~GUARD_BUSY;
  cp_heap_untrack_all();
}

/* On the profiler's thread: one sample every factor x the configured mean
 * bytes. A thread's gap in progress keeps its mean (and its sample's weight
 * uses it); the next gap is drawn with the new one. */
static void alloc_slow_down(unsigned factor) {
  atomic_store(&alloc.rate, alloc.base_rate * factor);
}

const cp_sampler cp_alloc_sampler = {
    .name = "alloc",
    .profile = CP_PROFILE_ALLOC | CP_PROFILE_HEAP,
    .start = alloc_start,
    .stop = alloc_stop,
    .after_fork_child = alloc_after_fork_child,
    .before_export = alloc_before_export,
    .slow_down = alloc_slow_down,
};
