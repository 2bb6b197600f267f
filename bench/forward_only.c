/* forward_only: the cheapest possible malloc interposer, for
 * bench/alloc_overhead.sh. It forwards malloc, free, calloc and realloc to
 * the next allocator and does nothing else: what any LD_PRELOAD allocation
 * profiler pays before it counts a byte (one more indirect jump per call).
 * Not for use outside the benchmark: it has no bootstrap for allocations
 * made before its constructor (glibc's dlsym makes none). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

static void *(*next_malloc)(size_t);
static void (*next_free)(void *);
static void *(*next_calloc)(size_t, size_t);
static void *(*next_realloc)(void *, size_t);

__attribute__((constructor)) static void resolve(void) {
  next_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
  next_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
  next_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
  next_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
}

void *malloc(size_t size) { return next_malloc(size); }
void free(void *p) { next_free(p); }
void *calloc(size_t n, size_t size) { return next_calloc(n, size); }
void *realloc(void *p, size_t size) { return next_realloc(p, size); }
