/* An interposer preloaded behind the profiler's library (test_direct_calls):
 * counts the write calls it forwards to the C library (only write: the
 * test's other calls go straight to the C library behind ours).
 * cp_shim_calls() returns the count. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <unistd.h>

static _Atomic long calls;

long cp_shim_calls(void) { return atomic_load(&calls); }

ssize_t write(int fd, const void *buf, size_t n) {
  static ssize_t (*real)(int, const void *, size_t);
  if (!real)
    real = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
  atomic_fetch_add(&calls, 1);
  return real(fd, buf, n);
}
