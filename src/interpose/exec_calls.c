/* The exec family: execve, execv, execvp, execvpe, execl, execlp, execle,
 * fexecve, execveat. Each stops the profiler and prepares the new image's
 * environment (src/exec.c: cp_exec_begin, which says what and why), calls
 * the real function, and starts profiling again if the exec came back.
 * Stack: a few hundred bytes whatever the environment's size (a vfork child
 * runs on its parent's stack). And posix_spawn, posix_spawnp, whose child
 * execs inside the C library (cp_spawn_begin). system() and popen() spawn
 * through the C library's internal posix_spawn, which no hook sees: their
 * children get the environment as it is and the default for a signal the
 * application ignores under a handler of ours (docs/signals.md). */
#include <errno.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

#include "common.h"
#include "exec.h"
#include "interpose/real.h"
#include "passthrough.h"

extern char **environ;

typedef int (*execve_fn)(const char *, char *const[], char *const[]);
typedef int (*execvpe_fn)(const char *, char *const[], char *const[]);
typedef int (*fexecve_fn)(int, char *const[], char *const[]);
typedef int (*execveat_fn)(int, const char *, char *const[], char *const[],
                           int);

/* The body every hook shares: stop, call, restart if it came back. Fixed
 * stack use, whatever the environment. */
#define EXEC_WITH(envp_in, call)                                               \
  do {                                                                         \
    cp_exec_env map_;                                                          \
    int stopped_;                                                              \
    char *const *env = cp_exec_begin((envp_in), &map_, &stopped_);             \
    int rc_ = (call);                                                          \
    int errno_ = errno;                                                        \
    cp_exec_came_back(&map_, stopped_);                                        \
    errno = errno_;                                                            \
    return rc_;                                                                \
  } while (0)

CP_PASSTHROUGH int execve(const char *path, char *const argv[],
                          char *const envp[]) {
  CP_REAL(execve_fn, execve);
  EXEC_WITH(envp, fn_execve(path, argv, env));
}

CP_PASSTHROUGH int execvpe(const char *file, char *const argv[],
                           char *const envp[]) {
  CP_REAL(execvpe_fn, execvpe);
  EXEC_WITH(envp, fn_execvpe(file, argv, env));
}

CP_PASSTHROUGH int execv(const char *path, char *const argv[]) {
  CP_REAL(execve_fn, execve);
  EXEC_WITH(environ, fn_execve(path, argv, env));
}

CP_PASSTHROUGH int execvp(const char *file, char *const argv[]) {
  CP_REAL(execvpe_fn, execvpe);
  EXEC_WITH(environ, fn_execvpe(file, argv, env));
}

CP_PASSTHROUGH int fexecve(int fd, char *const argv[], char *const envp[]) {
  CP_REAL(fexecve_fn, fexecve);
  EXEC_WITH(envp, fn_fexecve(fd, argv, env));
}

CP_PASSTHROUGH int execveat(int dirfd, const char *path, char *const argv[],
                            char *const envp[], int flags) {
  CP_REAL(execveat_fn, execveat);
  EXEC_WITH(envp, fn_execveat(dirfd, path, argv, env, flags));
}

/* posix_spawn and posix_spawnp: the child execs inside the C library, so
 * the environment and the ignored signals are prepared around the call
 * (exec.c: cp_spawn_begin); the caller's profiling goes on. */
typedef int (*posix_spawn_fn)(pid_t *, const char *,
                              const posix_spawn_file_actions_t *,
                              const posix_spawnattr_t *, char *const[],
                              char *const[]);

#define SPAWN_WITH(envp_in, call)                                              \
  do {                                                                         \
    cp_exec_env map_;                                                          \
    char *const *env = cp_spawn_begin((envp_in), &map_);                       \
    int rc_ = (call);                                                          \
    int errno_ = errno;                                                        \
    cp_spawn_end(&map_);                                                       \
    errno = errno_;                                                            \
    return rc_;                                                                \
  } while (0)

CP_PASSTHROUGH int posix_spawn(pid_t *pid, const char *path,
                               const posix_spawn_file_actions_t *actions,
                               const posix_spawnattr_t *attr,
                               char *const argv[], char *const envp[]) {
  CP_REAL_OR(posix_spawn_fn, posix_spawn, ENOSYS);
  SPAWN_WITH(envp, fn_posix_spawn(pid, path, actions, attr, argv, env));
}

CP_PASSTHROUGH int posix_spawnp(pid_t *pid, const char *file,
                                const posix_spawn_file_actions_t *actions,
                                const posix_spawnattr_t *attr,
                                char *const argv[], char *const envp[]) {
  CP_REAL_OR(posix_spawn_fn, posix_spawnp, ENOSYS);
  SPAWN_WITH(envp, fn_posix_spawnp(pid, file, actions, attr, argv, env));
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

CP_PASSTHROUGH int execl(const char *path, const char *arg, ...) {
  va_list ap;
  COLLECT_ARGS(arg, ap, argv);
  va_end(ap);
  return execv(path, argv);
}

CP_PASSTHROUGH int execlp(const char *file, const char *arg, ...) {
  va_list ap;
  COLLECT_ARGS(arg, ap, argv);
  va_end(ap);
  return execvp(file, argv);
}

CP_PASSTHROUGH int execle(const char *path, const char *arg, ...) {
  va_list ap;
  COLLECT_ARGS(arg, ap, argv);
  char *const *envp = va_arg(ap, char *const *);
  va_end(ap);
  return execve(path, argv, envp);
}
