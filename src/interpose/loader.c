/* The loader family: dl_iterate_phdr and dlclose. The unwinders need to
 * know when a thread holds the loader's lock (dl_iterate_phdr: unwinding
 * then could deadlock with the loader, unwind.c's loader_busy) and when an
 * object may have been unloaded (dlclose: the frame-pointer walker's table
 * of objects is stale, fpwalk.c); a fork must not copy the loader's lock
 * held by a thread the child will not have (fork_guard.h). */
#include <dlfcn.h>
#include <link.h>
#include <stdatomic.h>

#include "fork_guard.h"
#include "interpose/real.h"
#include "passthrough.h"
#include "samplers/fpwalk.h"
#include "thread_state.h"

typedef int (*dl_iterate_phdr_fn)(int (*)(struct dl_phdr_info *, size_t,
                                          void *),
                                  void *);
typedef int (*dlclose_fn)(void *);

static dl_iterate_phdr_fn real_dl_iterate_phdr;
static dlclose_fn real_dlclose;

CP_PASSTHROUGH void cp_interpose_loader_resolve(void) {
  if (!__atomic_load_n(&real_dl_iterate_phdr, __ATOMIC_ACQUIRE))
    __atomic_store_n(&real_dl_iterate_phdr,
                     (dl_iterate_phdr_fn)cp_real_symbol(
                         "dl_iterate_phdr", (void *)dl_iterate_phdr),
                     __ATOMIC_RELEASE);
  if (!__atomic_load_n(&real_dlclose, __ATOMIC_ACQUIRE))
    __atomic_store_n(&real_dlclose,
                     (dlclose_fn)cp_real_symbol("dlclose", (void *)dlclose),
                     __ATOMIC_RELEASE);
}

/* Interposed: marks the thread while it holds the loader's lock (see
 * unwind.c's loader_busy), and keeps it out of a fork (fork_guard.h).
 * libunwind's own calls come here too. The real function is found at
 * cp_unwind_init, outside any handler (dlsym is not async-signal-safe); a
 * handler that finds it missing lists no objects. */
CP_PASSTHROUGH int dl_iterate_phdr(int (*callback)(struct dl_phdr_info *,
                                                   size_t, void *),
                                   void *data) {
  dl_iterate_phdr_fn fn =
      __atomic_load_n(&real_dl_iterate_phdr, __ATOMIC_ACQUIRE);
  if (!fn) {
    if (cp_thread.in_handler)
      return 0;
    cp_interpose_loader_resolve();
    fn = __atomic_load_n(&real_dl_iterate_phdr, __ATOMIC_ACQUIRE);
    if (!fn)
      return 0;
  }
  if (!cp_fork_guard_enter())
    return 0;
  cp_thread.in_loader++;
  int rc = fn(callback, data);
  cp_thread.in_loader--;
  cp_fork_guard_exit();
  return rc;
}

static void (*_Atomic before_dlclose)(void);

CP_PASSTHROUGH void cp_interpose_before_dlclose(void (*fn)(void)) {
  atomic_store_explicit(&before_dlclose, fn, memory_order_release);
}

/* Interposed: counted before and after (fpwalk.c compares the count with
 * the one its table was built at). */
CP_PASSTHROUGH int dlclose(void *handle) {
  dlclose_fn fn = __atomic_load_n(&real_dlclose, __ATOMIC_ACQUIRE);
  if (!fn) {
    cp_interpose_loader_resolve();
    fn = __atomic_load_n(&real_dlclose, __ATOMIC_ACQUIRE);
    if (!fn)
      return -1;
  }
  void (*before)(void) =
      atomic_load_explicit(&before_dlclose, memory_order_acquire);
  if (before && cp_guard_open()) /* the application's call, not ours */
    before();
  cp_fpwalk_on_dlclose();
  int rc = fn(handle);
  cp_fpwalk_on_dlclose();
  return rc;
}

/* This library's own dlclose, whatever the lookup order chose for
 * `&dlclose` (in PIC code that is the first definition). */
extern __typeof(dlclose) cp_own_dlclose
    __attribute__((alias("dlclose"), visibility("hidden"), copy(dlclose)));

CP_PASSTHROUGH int cp_interpose_sees_dlclose(void) {
  cp_interpose_loader_resolve();
  return __atomic_load_n(&real_dlclose, __ATOMIC_ACQUIRE) != NULL &&
         cp_real_lookup(RTLD_DEFAULT, "dlclose", NULL, 0) ==
             (void *)cp_own_dlclose;
}
