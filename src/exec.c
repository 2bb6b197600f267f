/* exec under the profiler.
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
 *   removed from LD_PRELOAD in the environment the new image gets.
 * - If exec fails, profiling starts again where it was.
 *
 * A vfork child (which shares the parent's memory and runs on the parent's
 * stack) must not touch the profiler: its pid is not the one the profiler
 * started in, and then only the environment is edited, on the stack. Profiling
 * does not follow into posix_spawn's children through these hooks (glibc execs
 * there internally); they get LD_PRELOAD as is.
 *
 * exec from a signal handler that interrupted the profiler (or malloc) may
 * deadlock in the stop: POSIX allows execve there, the stop does not. */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common.h"
#include "interpose.h"
#include "profiler_internal.h"

extern char **environ;

typedef int (*execve_fn)(const char *, char *const[], char *const[]);
typedef int (*execvpe_fn)(const char *, char *const[], char *const[]);
typedef int (*fexecve_fn)(int, char *const[], char *const[]);
typedef int (*execveat_fn)(int, const char *, char *const[], char *const[],
                           int);

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

/* Writes value with the entries naming this library removed into out
 * (size len); returns 0, or -1 if it does not fit. LD_PRELOAD separates
 * entries with ':' or spaces. */
static int strip_preload(const char *value, char *out, size_t len) {
  const char *self = own_basename();
  size_t self_len = strlen(self), used = 0;
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
    if (!ours) {
      if (used + n + 2 > len)
        return -1;
      if (used)
        out[used++] = ':';
      memcpy(out + used, p, n);
      used += n;
    }
    p = end;
  }
  out[used] = 0;
  return 0;
}

#define PRELOAD_MAX 4096

/* The environment the new image gets: envp as is when exec is followed,
 * else a copy (in `copy`, on the caller's stack, with the new LD_PRELOAD in
 * `buf`) without this library in LD_PRELOAD. */
static char *const *exec_environment(char *const *envp, char **copy,
                                     size_t ncopy, char *buf) {
  if (cp_profiler_follow_exec() || !envp)
    return envp;
  size_t n = 0, at = (size_t)-1;
  for (; envp[n]; n++)
    if (strncmp(envp[n], "LD_PRELOAD=", 11) == 0)
      at = n;
  if (at == (size_t)-1 || n + 1 > ncopy)
    return envp;
  memcpy(buf, "LD_PRELOAD=", 11);
  if (strip_preload(envp[at] + 11, buf + 11, PRELOAD_MAX - 11) != 0)
    return envp;
  for (size_t i = 0; i < n; i++)
    copy[i] = i == at ? buf : envp[i];
  copy[n] = NULL;
  return copy;
}

static size_t env_count(char *const *envp) {
  size_t n = 0;
  while (envp && envp[n])
    n++;
  return n + 1;
}

/* The body every hook shares: stop, call, restart if it came back. */
#define EXEC_WITH(envp_in, call)                                               \
  do {                                                                         \
    size_t ncopy_ = env_count(envp_in);                                        \
    char *copy_[ncopy_];                                                       \
    char buf_[PRELOAD_MAX];                                                    \
    char *const *env = exec_environment((envp_in), copy_, ncopy_, buf_);       \
    int stopped_ = cp_profiler_before_exec();                                  \
    int rc_ = (call);                                                          \
    int errno_ = errno;                                                        \
    if (stopped_)                                                              \
      cp_profiler_exec_failed();                                               \
    errno = errno_;                                                            \
    return rc_;                                                                \
  } while (0)

int execve(const char *path, char *const argv[], char *const envp[]) {
  CP_REAL(execve_fn, execve);
  EXEC_WITH(envp, fn_execve(path, argv, env));
}

int execvpe(const char *file, char *const argv[], char *const envp[]) {
  CP_REAL(execvpe_fn, execvpe);
  EXEC_WITH(envp, fn_execvpe(file, argv, env));
}

int execv(const char *path, char *const argv[]) {
  CP_REAL(execve_fn, execve);
  EXEC_WITH(environ, fn_execve(path, argv, env));
}

int execvp(const char *file, char *const argv[]) {
  CP_REAL(execvpe_fn, execvpe);
  EXEC_WITH(environ, fn_execvpe(file, argv, env));
}

int fexecve(int fd, char *const argv[], char *const envp[]) {
  CP_REAL(fexecve_fn, fexecve);
  EXEC_WITH(envp, fn_fexecve(fd, argv, env));
}

int execveat(int dirfd, const char *path, char *const argv[],
             char *const envp[], int flags) {
  CP_REAL(execveat_fn, execveat);
  EXEC_WITH(envp, fn_execveat(dirfd, path, argv, env, flags));
}

/* execl, execle, execlp: the arguments become an array on the stack (as
 * glibc does), then the array forms above. */
#define COLLECT_ARGS(arg0, ap, argv)                                           \
  size_t argc_ = 1;                                                            \
  va_start(ap, arg0);                                                          \
  while (va_arg(ap, const char *))                                             \
    argc_++;                                                                   \
  va_end(ap);                                                                  \
  char *argv[argc_ + 1];                                                       \
  argv[0] = (char *)(arg0);                                                    \
  va_start(ap, arg0);                                                          \
  for (size_t i_ = 1; i_ <= argc_; i_++)                                       \
    argv[i_] = va_arg(ap, char *);

int execl(const char *path, const char *arg, ...) {
  va_list ap;
  COLLECT_ARGS(arg, ap, argv);
  va_end(ap);
  return execv(path, argv);
}

int execlp(const char *file, const char *arg, ...) {
  va_list ap;
  COLLECT_ARGS(arg, ap, argv);
  va_end(ap);
  return execvp(file, argv);
}

int execle(const char *path, const char *arg, ...) {
  va_list ap;
  COLLECT_ARGS(arg, ap, argv);
  char *const *envp = va_arg(ap, char *const *);
  va_end(ap);
  return execve(path, argv, envp);
}
