/* The exec family: execve, execv, execvp, execvpe, execl, execlp, execle,
 * fexecve, execveat. Each stops the profiler and prepares the new image's
 * environment (src/exec.c: cp_exec_begin, which says what and why), calls
 * the real function, and starts profiling again if the exec came back.
 * Stack: a few hundred bytes whatever the environment's size (a vfork child
 * runs on its parent's stack). */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

#include "common.h"
#include "exec.h"
#include "interpose/real.h"

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
