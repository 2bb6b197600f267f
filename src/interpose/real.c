/* The one lookup of real functions for every hook (see real.h). */
#include "interpose/real.h"

#include <dlfcn.h>
#include <errno.h>
#include <gnu/libc-version.h>
#include <unistd.h>

#include "common.h"
#include "interpose/direct.h"
#include "thread_state.h"

/* _dl_find_object (glibc 2.35) answers from the loader's sorted table of
 * objects; dladdr also looks for the nearest symbol, a scan of the object's
 * dynamic symbols: the few dozen calls made when the hooks resolve took 0.5
 * ms of every process's start-up here (2.3 M instructions for libc). */
int cp_same_object(void *fn, void *self) {
#ifdef DLFO_EH_SEGMENT_TYPE
  struct dl_find_object fa, fb;
  if (fn && self && _dl_find_object(fn, &fa) == 0 &&
      _dl_find_object(self, &fb) == 0)
    return fa.dlfo_link_map == fb.dlfo_link_map;
#endif
  Dl_info a, b;
  if (!fn || !self || !dladdr(fn, &a) || !dladdr(self, &b))
    return 0;
  return a.dli_fbase == b.dli_fbase;
}

int cp_direct_is_libc(_Atomic signed char *state, void *fn) {
  signed char s = atomic_load_explicit(state, memory_order_relaxed);
  if (s < 0) {
    s = (signed char)cp_same_object(fn, (void *)gnu_get_libc_version);
    atomic_store_explicit(state, s, memory_order_relaxed);
  }
  return s;
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

/* The linker's bounds of the section CP_REAL_OR fills; weak: the command
 * without hooks (none.c) has none. */
extern const cp_real_slot __start_cp_real_slots[] __attribute__((weak));
extern const cp_real_slot __stop_cp_real_slots[] __attribute__((weak));

void cp_interpose_resolve_all(void) {
  int resolved = 0;
  for (const cp_real_slot *s = __start_cp_real_slots;
       s && s < __stop_cp_real_slots; s++) {
    if (__atomic_load_n(s->fn, __ATOMIC_ACQUIRE))
      continue;
    void *fn = cp_real_symbol(s->name, s->self);
    if (fn) {
      __atomic_store_n(s->fn, fn, __ATOMIC_RELEASE);
      resolved++;
    }
  }
  cp_debug("interpose: pid %d resolved %d more real functions for its "
           "children",
           (int)getpid(), resolved);
}
