/* Preloaded by test_lines: a system where libdw.so.1 cannot be loaded
 * (dlopen of it fails, every other dlopen goes through). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>

void *dlopen(const char *file, int mode) {
  if (file && strstr(file, "libdw.so"))
    return NULL;
  void *(*real)(const char *, int) =
      (void *(*)(const char *, int))dlsym(RTLD_NEXT, "dlopen");
  return real ? real(file, mode) : NULL;
}
