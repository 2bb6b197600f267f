/* Finding the function an interposed one stands in front of (restart.c,
 * exec.c). Not for the malloc hooks, which must not allocate (alloc.c). */
#ifndef CP_INTERPOSE_H
#define CP_INTERPOSE_H

#include <dlfcn.h>
#include <errno.h>

/* The next definition of name after this library, never `self` (linked
 * into an executable, RTLD_NEXT may find our own): libc's otherwise. */
static inline void *cp_real_symbol(const char *name, void *self) {
  void *fn = dlsym(RTLD_NEXT, name);
  if (!fn || fn == self) {
    void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    fn = libc ? dlsym(libc, name) : NULL;
  }
  return fn;
}

/* In an interposed function returning int: fn_NAME becomes the real NAME
 * (resolved once), or the function fails with ENOSYS. */
#define CP_REAL(type, name)                                                    \
  static type real_##name;                                                     \
  type fn_##name = __atomic_load_n(&real_##name, __ATOMIC_ACQUIRE);            \
  if (!fn_##name) {                                                            \
    fn_##name = (type)cp_real_symbol(#name, (void *)name);                     \
    if (!fn_##name)                                                            \
      return errno = ENOSYS, -1;                                               \
    __atomic_store_n(&real_##name, fn_##name, __ATOMIC_RELEASE);               \
  }

#endif
