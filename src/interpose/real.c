/* The one lookup of real functions for every hook (see real.h). */
#include "interpose/real.h"

#include <dlfcn.h>
#include <errno.h>

#include "thread_state.h"

int cp_same_object(void *fn, void *self) {
  Dl_info a, b;
  if (!fn || !self || !dladdr(fn, &a) || !dladdr(self, &b))
    return 0;
  return a.dli_fbase == b.dli_fbase;
}

static void *checked(void *handle, const char *name, void *self,
                     int self_object) {
  void *fn = dlsym(handle, name);
  if (fn && (fn == self || (self_object && cp_same_object(fn, self))))
    return NULL;
  return fn;
}

void *cp_real_lookup(void *handle, const char *name, void *self,
                     int self_object) {
  int saved_errno = errno;
  cp_thread.resolving++;
  void *fn = checked(handle, name, self, self_object);
  if (!fn && handle == RTLD_NEXT) {
    /* Linked statically into the executable: ask libc directly. */
    void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    fn = libc ? checked(libc, name, self, self_object) : NULL;
  }
  cp_thread.resolving--;
  errno = saved_errno;
  return fn;
}

void *cp_real_symbol(const char *name, void *self) {
  return cp_real_lookup(RTLD_NEXT, name, self, 0);
}
