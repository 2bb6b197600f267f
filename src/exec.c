/* exec under the profiler: what happens around an exec (the hooks are in
 * interpose/exec_calls.c and call cp_exec_begin / cp_exec_came_back).
 *
 * LD_PRELOAD is inherited, so a program that execs another (a shell, a
 * supervisor, a pre-fork server re-executing itself) brings the profiler
 * into the new image too. The policy (CONTPROF_FOLLOW_EXEC, default on):
 *
 * - Before the exec, the profiler stops on the calling thread: every sampler
 *   stops (timers deleted, the wall thread joined, ITIMER_PROF disarmed), the
 *   last profile of the old image is written or uploaded (an empty one is
 *   not), and a sampling signal still pending on the thread is discarded.
 *   The new image then starts with no timer and no pending signal of ours: a
 *   SIGPROF reaching it would kill it (the handler is reset to the default
 *   action by exec).
 * - Followed (the default), the new image profiles itself as its own
 *   program with a new runtime-id. Not followed, the profiler's library is
 *   removed from LD_PRELOAD in the environment the new image gets, and
 *   from the process's own at start (cp_exec_leave_environ), for the
 *   children that no hook sees started.
 * - If exec fails, profiling starts again where it was.
 *
 * A vfork child (which shares the parent's memory and runs on the parent's
 * stack) must not touch the profiler: its pid is not the one the profiler
 * started in, and then only the environment is edited. posix_spawn execs
 * inside glibc, in a child that shares the caller's memory (CLONE_VM |
 * CLONE_VFORK): its hooks (cp_spawn_begin, cp_spawn_end) edit the
 * environment as for exec and leave ignored signals ignored, but stop
 * nothing, since the caller goes on.
 *
 * Stack: a few hundred bytes, whatever the environment's size (a thread's
 * stack may be small, and a vfork child runs on its parent's). The
 * environment is passed on untouched unless LD_PRELOAD must lose this
 * library; that copy goes in a mapping of its own (mmap, which a vfork child
 * may call, unlike malloc), unmapped if exec comes back. A vfork child whose
 * exec succeeded leaves its mapping in the address space it shared: the
 * thread that called vfork, the only one that can see the record (in its
 * thread-local storage), unmaps it at its next exec (docs/security.md, "exec
 * hooks").
 *
 * exec from a signal handler that interrupted the profiler (or malloc) may
 * deadlock in the stop: POSIX allows execve there, the stop does not. */
#include "exec.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common.h"
#include "profiler_internal.h"
#include "samplers/signals.h"

/* The file name of this library (for LD_PRELOAD), resolved once. */
static const char *own_basename(void) {
  static const char *name;
  const char *n = __atomic_load_n(&name, __ATOMIC_ACQUIRE);
  if (!n) {
    Dl_info info;
    n = "";
    if (dladdr((void *)own_basename, &info) && info.dli_fname) {
      const char *slash = strrchr(info.dli_fname, '/');
      n = slash ? slash + 1 : info.dli_fname;
    }
    __atomic_store_n(&name, n, __ATOMIC_RELEASE);
  }
  return n;
}

/* Copies the entries of an LD_PRELOAD value (separated by ':' or spaces)
 * that do not name this library into out (NULL: only counts; else at least
 * strlen(value) + 1 bytes), ':'-separated. Returns how many named it. */
static size_t strip_preload(const char *value, char *out) {
  const char *self = own_basename();
  size_t self_len = strlen(self), used = 0, removed = 0;
  const char *p = value;
  while (*p) {
    while (*p == ':' || *p == ' ')
      p++;
    const char *end = p;
    while (*end && *end != ':' && *end != ' ')
      end++;
    size_t n = (size_t)(end - p);
    if (!n)
      break;
    const char *base = p;
    for (const char *q = p; q < end; q++)
      if (*q == '/')
        base = q + 1;
    int ours = self_len && (size_t)(end - base) == self_len &&
               memcmp(base, self, self_len) == 0;
    if (ours) {
      removed++;
    } else if (out) {
      if (used)
        out[used++] = ':';
      memcpy(out + used, p, n);
      used += n;
    }
    p = end;
  }
  if (out)
    out[used] = 0;
  return removed;
}

#define PRELOAD_VAR "LD_PRELOAD="
#define PRELOAD_VAR_LEN (sizeof PRELOAD_VAR - 1)

typedef cp_exec_env env_map;

/* This thread's mapping in use by an exec, or left by a vfork child whose
 * exec succeeded (then pid is not ours). Initial-exec TLS: no allocation. */
static CP_TLS env_map pending_env;

static pid_t current_pid(void) { return (pid_t)syscall(SYS_getpid); }

/* Unmaps a mapping a vfork child left: this thread runs again, so that
 * child has exec'd (or exited) and nothing uses it. One of this process's
 * own is in use by an exec hook this thread is in (a signal handler's exec
 * interrupted it): left alone. */
static void reclaim_env(void) {
  if (pending_env.addr && pending_env.pid != current_pid()) {
    munmap(pending_env.addr, pending_env.len);
    pending_env.addr = NULL;
  }
}

/* After an exec that came back: the copy is not needed any more. */
static void release_env(env_map *m) {
  if (!m->addr)
    return;
  if (pending_env.addr == m->addr)
    pending_env.addr = NULL;
  munmap(m->addr, m->len);
  m->addr = NULL;
}

/* The environment the new image gets: envp itself when exec is followed or
 * when no LD_PRELOAD entry names this library; else a copy in which those
 * entries do not, in a mapping described in *m (else *m is empty). If the
 * mapping cannot be made, envp as is (the new image then profiles itself).
 * First reclaims what a vfork child's exec left. */
static char *const *exec_environment(char *const *envp, env_map *m) {
  reclaim_env();
  *m = (env_map){0};
  if (cp_profiler_follow_exec() || !envp)
    return envp;
  size_t n = 0, text = 0;
  for (; envp[n]; n++)
    if (strncmp(envp[n], PRELOAD_VAR, PRELOAD_VAR_LEN) == 0 &&
        strip_preload(envp[n] + PRELOAD_VAR_LEN, NULL))
      text += strlen(envp[n]) + 1;
  if (!text)
    return envp;
  size_t len = (n + 1) * sizeof(char *) + text;
  void *addr = mmap(NULL, len, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (addr == MAP_FAILED)
    return envp;
  *m = (env_map){addr, len, current_pid()};
  if (!pending_env.addr) /* else a hook this thread is in holds it */
    pending_env = *m;
  char **copy = addr;
  char *out = (char *)(copy + n + 1);
  for (size_t i = 0; i < n; i++) {
    copy[i] = envp[i];
    if (strncmp(envp[i], PRELOAD_VAR, PRELOAD_VAR_LEN) == 0 &&
        strip_preload(envp[i] + PRELOAD_VAR_LEN, NULL)) {
      copy[i] = out;
      memcpy(out, PRELOAD_VAR, PRELOAD_VAR_LEN);
      strip_preload(envp[i] + PRELOAD_VAR_LEN, out + PRELOAD_VAR_LEN);
      out += strlen(out) + 1;
    }
  }
  copy[n] = NULL;
  return copy;
}

void cp_exec_leave_environ(void) {
  if (cp_profiler_follow_exec())
    return;
  const char *value = getenv("LD_PRELOAD");
  if (!value || !strip_preload(value, NULL))
    return;
  char *left = malloc(strlen(value) + 1);
  if (!left)
    return;
  strip_preload(value, left);
  /* Replaced in place, never removed: unsetenv moves the other entries,
   * which a thread reading the environment meanwhile could miss. */
  if (setenv("LD_PRELOAD", left, 1) != 0)
    cp_warn("cannot take this library out of LD_PRELOAD (%s): programs "
            "started by system() or popen() are profiled too",
            strerror(errno));
  free(left);
}

char *const *cp_exec_begin(char *const *envp, cp_exec_env *m, int *stopped) {
  char *const *env = exec_environment(envp, m);
  *stopped = cp_profiler_before_exec();
  cp_signals_before_exec();
  return env;
}

void cp_exec_came_back(cp_exec_env *m, int stopped) {
  cp_signals_exec_failed();
  if (stopped)
    cp_profiler_exec_failed();
  release_env(m);
}

char *const *cp_spawn_begin(char *const *envp, cp_exec_env *m) {
  char *const *env = exec_environment(envp, m);
  cp_signals_before_spawn();
  return env;
}

void cp_spawn_end(cp_exec_env *m) {
  cp_signals_after_spawn();
  release_env(m);
}
