/* _exit and _Exit. A process that ends with them runs no atexit handler,
 * so the last profile, which ours writes at exit, was lost: dash (Debian's
 * /bin/sh) ends every shell and subshell this way, forking programs their
 * children. The hook writes it first when that is safe
 * (cp_profiler_before_exit: this process started the profiler, and the
 * thread is not in a signal handler), then ends the process: through the
 * next definition of _exit (libc's, or a sanitizer's), or the system call
 * itself, which is all libc's does, when that one cannot be looked up (a
 * vfork child must not call dlsym, nor a signal handler: the loader's and
 * its parent's locks). */
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common.h"
#include "interpose/real.h"
#include "profiler_internal.h"

typedef void (*exit_fn)(int);

static exit_fn real_exit;

void _exit(int status) {
  exit_fn fn = __atomic_load_n(&real_exit, __ATOMIC_ACQUIRE);
  if (cp_profiler_before_exit(__builtin_frame_address(0)) && !fn) {
    fn = (exit_fn)cp_real_symbol("_exit", (void *)_exit);
    __atomic_store_n(&real_exit, fn, __ATOMIC_RELEASE);
  }
  if (fn)
    fn(status);
  for (;;) {
    syscall(SYS_exit_group, status);
    syscall(SYS_exit, status);
  }
}

void _Exit(int status) { _exit(status); }
