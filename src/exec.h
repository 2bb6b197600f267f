/* What happens around an exec under the profiler (exec.c): the exec hooks
 * (interpose/exec_calls.c) call cp_exec_begin before the real call and
 * cp_exec_came_back if it returned. */
#ifndef CP_EXEC_H
#define CP_EXEC_H

#include <stddef.h>
#include <sys/types.h>

/* A mapping that holds a changed environment. */
typedef struct cp_exec_env {
  void *addr;
  size_t len;
  pid_t pid; /* the process that made it */
} cp_exec_env;

/* Before an exec: reclaims what a vfork child's exec left, returns the
 * environment the new image gets (envp, or a copy without this library in
 * LD_PRELOAD when exec is not followed, described in *m), and stops the
 * profiler (*stopped: whether it was running). Fixed stack use. */
char *const *cp_exec_begin(char *const *envp, cp_exec_env *m, int *stopped);

/* The exec came back (it failed): profiling starts again where it was, the
 * environment's copy is unmapped. */
void cp_exec_came_back(cp_exec_env *m, int stopped);

/* Around posix_spawn and posix_spawnp, whose child execs inside the C
 * library: the environment the new image gets (as cp_exec_begin's, in *m),
 * and the signals the application ignores under a handler of ours set to
 * SIG_IGN, since the child resets every handled signal to the default
 * where it keeps an ignored one ignored. The profiler goes on: the calling
 * process continues. cp_spawn_end gives the handlers back and unmaps the
 * copy (the call returns once the child has exec'd or exited). */
char *const *cp_spawn_begin(char *const *envp, cp_exec_env *m);
void cp_spawn_end(cp_exec_env *m);

/* When exec is not followed: this library leaves the process's own
 * LD_PRELOAD (setenv: the value replaced in place), so that no child gets
 * it, however it is started: system and popen, which spawn inside the C
 * library where no hook sees them, a raw execve, a program that copies its
 * environment for a child. The process keeps the library it has loaded.
 * Called at each start (a no-op once removed, and when LD_PRELOAD does not
 * name this library: linked into the program). */
void cp_exec_leave_environ(void);

#endif
