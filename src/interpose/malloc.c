/* The malloc family (malloc, free, calloc, realloc, reallocarray,
 * posix_memalign, aligned_alloc, memalign, valloc, pvalloc,
 * malloc_usable_size): hooks that forward to the next allocator in the
 * lookup order (glibc, or jemalloc/tcmalloc preloaded after us) and tell the
 * allocation sampler (samplers/alloc.h) about what it chose to sample.
 *
 * Cost: every hook ends in a tail jump to the real allocator unless it
 * samples. An allocation adds a thread-local subtraction and a branch
 * (cp_alloc_count), on or off (off, a call every CP_ALLOC_OFF_GAP bytes
 * finds it off). A free adds, once the heap profile has run or the
 * bootstrap arena was used, a hash and one load from the live table's 64 KiB
 * filter (before, one predictable branch): the arena's blocks are marked in
 * the filter (cp_heap_mark_always), so that no range check precedes it.
 *
 * Recursion: the real allocator is found with the one lookup (real.h),
 * which may itself allocate: while this thread is resolving, allocations come
 * from a static bootstrap arena that free() recognises and ignores. What the
 * sampler does while recording goes through the re-entry guard
 * (thread_state.h). */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "interpose/real.h"
#include "passthrough.h"
#include "samplers/alloc.h"
#include "thread_state.h"

#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#define RETURN_ADDRESS() ((uint64_t)(uintptr_t)__builtin_return_address(0))

#define BOOT_ARENA_BYTES (64 * 1024)

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

/* Read on every call: the real functions, alone on their cache line (the
 * sampling flag is the sampler's: cp_alloc_count). */
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
  char pad[64];
} hot = {.malloc = resolving_malloc,
         .free = resolving_free,
         .calloc = resolving_calloc,
         .realloc = resolving_realloc};

static _Atomic int resolve_state; /* 0 not yet, 1 in progress, 2 done */
static _Atomic int not_first;     /* another malloc precedes ours */

static _Alignas(64) unsigned char boot_arena[BOOT_ARENA_BYTES];
static _Atomic size_t boot_used;

/* --- the bootstrap arena ----------------------------------------------- */

CP_PASSTHROUGH static int in_boot_arena(const void *p) {
  return (uintptr_t)p - (uintptr_t)boot_arena < BOOT_ARENA_BYTES;
}

/* Async-signal-safe, lock-free bump allocation: for the allocations dlsym
 * makes before the real allocator is known. Never reused (zeroed memory),
 * never freed; each block's size sits in the 8 bytes before it. */
CP_PASSTHROUGH static void *boot_alloc(size_t size, size_t align) {
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
      /* Its free, realloc or reallocarray must take the slow path, which
       * knows the arena. */
      cp_heap_mark_always(start);
      return (void *)start;
    }
  }
}

CP_PASSTHROUGH static size_t boot_size(const void *p) {
  size_t size;
  memcpy(&size, (const unsigned char *)p - 8, sizeof size);
  return size;
}

/* --- finding the real allocator ---------------------------------------- */

CP_PASSTHROUGH static void *real_posix_memalign_based(size_t align,
                                                      size_t size) {
  void *p = NULL;
  int rc = hot.posix_memalign(&p, align, size);
  if (rc) {
    errno = rc;
    return NULL;
  }
  return p;
}

/* Emulations over the next allocator's own functions. */
CP_PASSTHROUGH static void *emulated_memalign(size_t align, size_t size) {
  /* glibc rounds alignments that are not powers of two up. */
  size_t a = sizeof(void *);
  while (a < align && a < ((size_t)1 << (sizeof(size_t) * 8 - 2)))
    a <<= 1;
  return real_posix_memalign_based(a, size);
}

CP_PASSTHROUGH static void *emulated_valloc(size_t size) {
  return real_posix_memalign_based((size_t)sysconf(_SC_PAGESIZE), size);
}

CP_PASSTHROUGH static void *emulated_pvalloc(size_t size) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t rounded = (size + page - 1) & ~(page - 1);
  if (rounded < size) {
    errno = ENOMEM;
    return NULL;
  }
  return real_posix_memalign_based(page, rounded ? rounded : page);
}

CP_PASSTHROUGH static void *emulated_reallocarray(void *p, size_t n,
                                                  size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(n, size, &bytes)) {
    errno = ENOMEM;
    return NULL;
  }
  return hot.realloc(p, bytes);
}

CP_PASSTHROUGH static size_t no_usable_size(void *p) {
  (void)p;
  return 0;
}

/* Whether fn is where a defined symbol starts, not a PLT stub: an executable
 * built without -fPIE that takes a function's address exports its PLT entry
 * as the function's address (a "canonical PLT"), and dlsym(RTLD_DEFAULT)
 * then returns that stub, which only jumps to the real definition. */
CP_PASSTHROUGH static int is_definition(void *fn) {
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

/* The one lookup, never one of our own hooks (compared by object: in PIC
 * code `&free` is whatever the lookup order chose). */
CP_PASSTHROUGH static void *next_symbol(void *from, const char *name) {
  return cp_real_lookup(from, name, (void *)cp_alloc_own_malloc, 1);
}

/* Resolves every real function once. The first caller does it; its nested
 * allocations (inside dlsym), and other threads' allocations meanwhile, come
 * from the bootstrap arena: waiting could deadlock with the loader lock. */
CP_PASSTHROUGH static int ensure_resolved(void) {
  if (LIKELY(atomic_load_explicit(&resolve_state, memory_order_acquire) == 2))
    return 1;
  int expected = 0;
  if (cp_thread.resolving ||
      !atomic_compare_exchange_strong(&resolve_state, &expected, 1))
    return atomic_load_explicit(&resolve_state, memory_order_acquire) == 2;
  cp_thread.resolving++;
  int saved_errno = errno;
  /* Normally our malloc is the one the program calls, and the real one is
   * the next in the lookup order. When another allocator comes first
   * (LD_PRELOAD=libjemalloc.so:libcontprof_preload.so, or one linked into
   * the executable), the program reaches our hooks only for what that one
   * lacks (jemalloc: pvalloc, reallocarray): forward those to it, since it
   * frees them, and never sample (its frees bypass us). */
  void *from = RTLD_NEXT;
  malloc_fn m;
  void *first = cp_real_lookup(RTLD_DEFAULT, "malloc", NULL, 0);
  if (first && !cp_same_object(first, (void *)cp_alloc_own_malloc) &&
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
   * gets. Each must be defined by the same object as the real malloc
   * (cp_same_object): one the next allocator lacks (jemalloc has no pvalloc
   * or reallocarray) would otherwise come from glibc and hand out memory the
   * other one frees. */
  void *f;
  free_fn rfree = (free_fn)next_symbol(from, "free");
  realloc_fn rrealloc = (realloc_fn)next_symbol(from, "realloc");
  calloc_fn rcalloc = (calloc_fn)next_symbol(from, "calloc");
  f = next_symbol(from, "malloc_usable_size");
  usable_fn rusable =
      cp_same_object(f, (void *)m) ? (usable_fn)f : no_usable_size;
  f = next_symbol(from, "posix_memalign");
  posix_memalign_fn rposix =
      cp_same_object(f, (void *)m) ? (posix_memalign_fn)f : NULL;
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
          cp_same_object(f, (void *)m) ? (memalign_fn)f : emulated_memalign);
  f = next_symbol(from, "aligned_alloc");
  PUBLISH(aligned_alloc,
          cp_same_object(f, (void *)m) ? (memalign_fn)f : emulated_memalign);
  f = next_symbol(from, "valloc");
  PUBLISH(valloc,
          cp_same_object(f, (void *)m) ? (valloc_fn)f : emulated_valloc);
  f = next_symbol(from, "pvalloc");
  PUBLISH(pvalloc,
          cp_same_object(f, (void *)m) ? (valloc_fn)f : emulated_pvalloc);
  f = next_symbol(from, "reallocarray");
  PUBLISH(reallocarray, cp_same_object(f, (void *)m) ? (reallocarray_fn)f
                                                     : emulated_reallocarray);
  PUBLISH(malloc, m);
#undef PUBLISH
  errno = saved_errno;
  cp_thread.resolving--;
  atomic_store_explicit(&resolve_state, 2, memory_order_release);
  return 1;
}

/* --- the hooks --------------------------------------------------------- */

#define REAL(name) __atomic_load_n(&hot.name, __ATOMIC_ACQUIRE)

/* Before the real allocator is known: resolves it, or says why not (this
 * thread is inside dlsym, or another thread is resolving). */
CP_PASSTHROUGH __attribute__((noinline, cold)) static int resolve_slow(void) {
  return ensure_resolved();
}

CP_PASSTHROUGH __attribute__((noinline, cold)) static void *
resolving_malloc(size_t size) {
  if (!resolve_slow())
    return boot_alloc(size, 0);
  return REAL(malloc)(size);
}

CP_PASSTHROUGH __attribute__((noinline, cold)) static void
resolving_free(void *p) {
  if (resolve_slow())
    REAL(free)(p);
  /* else it cannot come from the real allocator yet: leak it */
}

CP_PASSTHROUGH __attribute__((noinline, cold)) static void *
resolving_calloc(size_t n, size_t size) {
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
CP_PASSTHROUGH __attribute__((noinline, cold)) static void *
boot_realloc(void *p, size_t size) {
  void *q =
      resolve_slow() ? REAL(malloc)(size ? size : 1) : boot_alloc(size, 0);
  if (q && p)
    memcpy(q, p, boot_size(p) < size ? boot_size(p) : size);
  return q;
}

CP_PASSTHROUGH __attribute__((noinline, cold)) static void *
resolving_realloc(void *p, size_t size) {
  if (!resolve_slow())
    return boot_realloc(p, size);
  return REAL(realloc)(p, size);
}

/* The allocating hooks' slow paths (noinline, cold): this allocation is
 * sampled, or the pointer handed in may be tracked or from the bootstrap
 * arena. (Sampling starts only once the real allocator is known.) */
CP_PASSTHROUGH __attribute__((noinline, cold)) static void *
malloc_slow(size_t size, uint64_t caller_ra) {
  void *p = REAL(malloc)(size);
  cp_alloc_on_alloc(p, size, caller_ra);
  return p;
}

/* Hot path (each hook below): forwards, and notes what it sampled. No
 * locks, no allocation of its own; when nothing is sampled, a tail call. */
CP_PASSTHROUGH void *malloc(size_t size) {
  if (LIKELY(!cp_alloc_count(size)))
    return REAL(malloc)(size);
  return malloc_slow(size, RETURN_ADDRESS());
}

CP_PASSTHROUGH __attribute__((noinline, cold)) static void free_slow(void *p) {
  if (!p || in_boot_arena(p))
    return;
  if (UNLIKELY(cp_alloc_may_track(p)))
    cp_alloc_on_free(p);
  REAL(free)(p);
}

CP_PASSTHROUGH void free(void *p) {
  if (LIKELY(!cp_alloc_may_track(p))) { /* a bootstrap block would be */
    REAL(free)(p);
    return;
  }
  free_slow(p);
}

CP_PASSTHROUGH __attribute__((noinline, cold)) static void *
calloc_slow(size_t n, size_t size, uint64_t caller_ra) {
  void *p = REAL(calloc)(n, size);
  cp_alloc_on_alloc(p, n * size, caller_ra); /* p: no overflow */
  return p;
}

CP_PASSTHROUGH void *calloc(size_t n, size_t size) {
  size_t bytes;
  /* An overflowing request fails in the real calloc and is not counted. */
  if (UNLIKELY(__builtin_mul_overflow(n, size, &bytes)) ||
      LIKELY(!cp_alloc_count(bytes)))
    return REAL(calloc)(n, size);
  return calloc_slow(n, size, RETURN_ADDRESS());
}

/* counted: take_sample already counted this allocation and chose it. */
CP_PASSTHROUGH __attribute__((noinline, cold)) static void *
realloc_slow(void *p, size_t size, uint64_t caller_ra, int counted) {
  if (in_boot_arena(p))
    return boot_realloc(p, size);
  if (p)
    if (UNLIKELY(cp_alloc_may_track(p)))
      cp_alloc_on_free(p);
  int sampled = counted || cp_alloc_count(size);
  void *q = REAL(realloc)(p, size);
  if (sampled)
    cp_alloc_on_alloc(q, size, caller_ra);
  return q;
}

CP_PASSTHROUGH void *realloc(void *p, size_t size) {
  if (LIKELY(!cp_alloc_may_track(p))) { /* a bootstrap block would be */
    if (LIKELY(!cp_alloc_count(size)))
      return REAL(realloc)(p, size);
    return realloc_slow(p, size, RETURN_ADDRESS(), 1);
  }
  return realloc_slow(p, size, RETURN_ADDRESS(), 0);
}

CP_PASSTHROUGH __attribute__((noinline, cold)) static void *
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
    if (UNLIKELY(cp_alloc_may_track(p)))
      cp_alloc_on_free(p);
  int sampled = counted || cp_alloc_count(bytes);
  void *q = REAL(reallocarray)(p, n, size);
  if (sampled)
    cp_alloc_on_alloc(q, bytes, caller_ra);
  return q;
}

CP_PASSTHROUGH void *reallocarray(void *p, size_t n, size_t size) {
  reallocarray_fn real = REAL(reallocarray);
  size_t bytes;
  if (LIKELY(real) && LIKELY(!cp_alloc_may_track(p)) &&
      !__builtin_mul_overflow(n, size, &bytes)) {
    if (LIKELY(!cp_alloc_count(bytes)))
      return real(p, n, size);
    return reallocarray_slow(p, n, size, RETURN_ADDRESS(), 1);
  }
  return reallocarray_slow(p, n, size, RETURN_ADDRESS(), 0);
}

CP_PASSTHROUGH __attribute__((noinline, cold)) static int
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
  int sampled = counted || cp_alloc_count(size);
  int rc = REAL(posix_memalign)(out, align, size);
  if (sampled)
    cp_alloc_on_alloc(rc == 0 ? *out : NULL, size, caller_ra);
  return rc;
}

CP_PASSTHROUGH int posix_memalign(void **out, size_t align, size_t size) {
  posix_memalign_fn real = REAL(posix_memalign);
  if (LIKELY(real)) {
    if (LIKELY(!cp_alloc_count(size)))
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
  if (cp_alloc_count(bytes))                                                   \
    cp_alloc_on_alloc(p, bytes, RETURN_ADDRESS());                             \
  return p

CP_PASSTHROUGH void *aligned_alloc(size_t align, size_t size) {
  ALIGNED_HOOK_BODY(aligned_alloc, REAL(aligned_alloc)(align, size),
                    boot_alloc(size, align), size);
}

CP_PASSTHROUGH void *memalign(size_t align, size_t size) {
  ALIGNED_HOOK_BODY(memalign, REAL(memalign)(align, size),
                    boot_alloc(size, align), size);
}

CP_PASSTHROUGH void *valloc(size_t size) {
  ALIGNED_HOOK_BODY(valloc, REAL(valloc)(size), boot_alloc(size, 4096), size);
}

CP_PASSTHROUGH void *pvalloc(size_t size) {
  ALIGNED_HOOK_BODY(
      pvalloc, REAL(pvalloc)(size),
      boot_alloc(size ? (size + 4095) & ~(size_t)4095 : 4096, 4096), size);
}

CP_PASSTHROUGH size_t malloc_usable_size(void *p) {
  if (UNLIKELY(in_boot_arena(p)))
    return boot_size(p);
  if (!REAL(usable_size) && !resolve_slow())
    return 0;
  return REAL(usable_size)(p);
}

CP_PASSTHROUGH int cp_interpose_malloc_boot_block(const void *p) {
  return in_boot_arena(p);
}

CP_PASSTHROUGH int cp_interpose_malloc_resolve(void) {
  ensure_resolved();
  return atomic_load(&not_first);
}
