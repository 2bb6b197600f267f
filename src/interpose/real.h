/* The one lookup of the function an interposed one stands in front of, and
 * what the rest of the profiler may ask of the interposition layer
 * (src/interpose/: every libc function contprof defines, one file per
 * family; docs/architecture.md). */
#ifndef CP_INTERPOSE_REAL_H
#define CP_INTERPOSE_REAL_H

#include <errno.h>
#include <signal.h>
#include <stddef.h>

/* The next definition of name after this library in the lookup order
 * (handle RTLD_NEXT), or in the object `handle` names (RTLD_DEFAULT, libc's
 * handle), never one of ours: `self` is the hook's address, and with
 * self_object set anything defined in the same object as `self` is refused
 * too (the malloc family: in PIC code `&free` is whatever the lookup order
 * chose). With RTLD_NEXT and nothing found (linked into an executable, the
 * next may be our own), libc's. NULL when none.
 *
 * Not a hot path: dlsym may take the loader's locks and allocate. While it
 * runs the thread is marked `resolving` (thread_state.h): a malloc hook
 * reached meanwhile serves from its bootstrap arena and a lock hook polls,
 * instead of looking up their own functions inside dlsym. errno is
 * preserved. */
void *cp_real_lookup(void *handle, const char *name, void *self,
                     int self_object);

/* Whether fn and other are defined by the same loaded object
 * (_dl_find_object, else dladdr). */
int cp_same_object(void *fn, void *other);

/* cp_real_lookup(RTLD_NEXT, name, self, 0). */
void *cp_real_symbol(const char *name, void *self);

/* Where each hook keeps its real function, listed in the section
 * cp_real_slots (CP_REAL_OR puts one there), for cp_interpose_resolve_all. */
typedef struct cp_real_slot {
  const char *name;
  void **fn;  /* the hook's real_NAME */
  void *self; /* the hook */
} cp_real_slot;

/* In an interposed function: fn_NAME becomes the real NAME (resolved once,
 * then one acquire load), or the function returns `fail` (an expression:
 * (errno = ENOSYS, -1) for most). */
#define CP_REAL_OR(type, name, fail)                                           \
  static type real_##name;                                                     \
  static const cp_real_slot real_slot_##name                                   \
      __attribute__((used, section("cp_real_slots"), aligned(8))) = {          \
          #name, (void **)&real_##name, (void *)name};                         \
  type fn_##name = __atomic_load_n(&real_##name, __ATOMIC_ACQUIRE);            \
  if (!fn_##name) {                                                            \
    fn_##name = (type)cp_real_symbol(#name, (void *)name);                     \
    if (!fn_##name)                                                            \
      return fail;                                                             \
    __atomic_store_n(&real_##name, fn_##name, __ATOMIC_RELEASE);               \
  }

/* CP_REAL_OR for functions that return int and set errno. */
#define CP_REAL(type, name) CP_REAL_OR(type, name, (errno = ENOSYS, -1))

/* --- what the samplers and the profiler ask of this layer --------------- */

/* The C library's sigaction, past the hook (samplers/signals.c installs
 * the sampling handlers with it). */
int cp_real_sigaction(int sig, const struct sigaction *act,
                      struct sigaction *old);

/* Whether every dlclose / sigaltstack call of the process comes to our hook
 * (this library is first in the lookup order, as when preloaded or linked
 * into the program): only then may a sampler trust what the hook counted.
 * Not signal-safe (dlsym); call at start. */
int cp_interpose_sees_dlclose(void);
int cp_interpose_sees_sigaltstack(void);
/* Whether the application's sigaction calls come to this library's hook
 * (it is first in the lookup order: preloaded or linked). */
int cp_interpose_sees_sigaction(void);

/* Finds the real allocator now (at the allocation sampler's start, outside
 * any hook). Returns 1 when another malloc comes before ours in the lookup
 * order (the application then reaches our hooks only for what that one
 * lacks: nothing is sampled). */
int cp_interpose_malloc_resolve(void);
/* Whether p was handed out by the malloc hooks' bootstrap arena (for
 * tests). */
int cp_interpose_malloc_boot_block(const void *p);

/* Finds the C library's lock functions now (the lock sampler's start; they
 * are also looked up when the library loads). */
void cp_interpose_locks_resolve(void);

/* Finds the real dl_iterate_phdr and dlclose now (cp_unwind_init, outside
 * any signal handler: a handler that meets dl_iterate_phdr unresolved lists
 * no objects). */
void cp_interpose_loader_resolve(void);

/* Has fn (NULL: nothing) called before every dlclose, on the calling
 * thread, before the object goes: the core reads the loaded objects there
 * the first time (symbols read lazily, docs/symbols.md). */
void cp_interpose_before_dlclose(void (*fn)(void));

/* Resolves every hook's real function that no call has resolved yet. A
 * process that forks calls it (on the profiler's thread, once it has
 * forked): a hook resolved lazily is resolved again by dlsym in every child
 * that calls it first (PostgreSQL's backends call signalfd, the postmaster
 * does not), where the parent's answer would be inherited. Not
 * signal-safe (dlsym). */
void cp_interpose_resolve_all(void);

/* In the child of fork (only the forking thread exists): forget state the
 * parent's other threads held (pthread_create's start slots). */
void cp_interpose_after_fork_child(void);

/* Direct system calls for an application of one thread (interpose/direct.h,
 * docs/overhead.md "One thread's system calls"): whether the configuration
 * allows them (CONTPROF_DIRECT_CALLS), and how many application threads the
 * registry found at its last scan of /proc/self/task (0: not known, as
 * while it is not running). */
void cp_interpose_direct_calls(int allowed);
void cp_interpose_threads_listed(size_t listed);

#endif
