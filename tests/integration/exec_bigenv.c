/* exec with a large environment from a thread with a small stack, for
 * test_exec (the exec hooks must not put the environment on the stack):
 *   exec_bigenv exec PROGRAM [ARG...]
 *       a thread with a 128 KiB stack execs PROGRAM with the environment
 *       the program started with plus 20,000 variables; exits 126 if exec
 *       comes back
 *   exec_bigenv vfork N PROGRAM [ARG...]
 *       the same thread vforks N times, each child execs PROGRAM with that
 *       environment; prints how many exited 0 and the growth of anonymous
 *       writable memory over the loop ("ok=N anon_growth_kb=K") */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "initial_env.h"

#define EXTRA_VARS 20000
#define STACK_BYTES (128 * 1024)

static char **big_env;
static char **program_argv;
static int vfork_count;

/* The environment the program started with (its LD_PRELOAD as it came,
 * which the hooks must edit when exec is not followed) and EXTRA_VARS
 * more. */
static char **make_env(void) {
  char **start = initial_environment();
  size_t n = 0;
  while (start[n])
    n++;
  char **env = calloc(n + EXTRA_VARS + 1, sizeof *env);
  if (!env)
    return NULL;
  memcpy(env, start, n * sizeof *env);
  for (int i = 0; i < EXTRA_VARS; i++) {
    char buf[32];
    snprintf(buf, sizeof buf, "CP_PAD_%05d=x", i);
    env[n + (size_t)i] = strdup(buf);
  }
  return env;
}

/* Bytes of private anonymous read-write mappings (heap arenas, stacks, and
 * whatever the exec hooks map): what a leaked mapping adds to. */
static long anon_kb(void) {
  FILE *f = fopen("/proc/self/maps", "re");
  if (!f)
    return -1;
  char line[512];
  long kb = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    char perms[8];
    int name_at = 0;
    if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %n", &lo, &hi, perms, &name_at) <
        3)
      continue;
    if (strcmp(perms, "rw-p") == 0 &&
        (line[name_at] == '\n' || line[name_at] == 0))
      kb += (long)((hi - lo) / 1024);
  }
  fclose(f);
  return kb;
}

static void *exec_thread(void *arg) {
  (void)arg;
  execve(program_argv[0], program_argv, big_env);
  perror("execve");
  exit(126);
}

static int one_vfork(void) {
  pid_t pid = vfork();
  if (pid == 0) {
    execve(program_argv[0], program_argv, big_env);
    _exit(126);
  }
  int status = 0;
  return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
         WEXITSTATUS(status) == 0;
}

static void *vfork_thread(void *arg) {
  int *ok = arg;
  one_vfork(); /* warm-up: whatever the first exec maps once */
  /* And what the profiler maps in its first seconds: the uploader's thread
   * starts after one, on a stack of its own (an 8 MiB reservation, which
   * counts here though it is not touched). */
  struct timespec settle = {2, 0};
  nanosleep(&settle, NULL);
  long before = anon_kb();
  for (int i = 0; i < vfork_count; i++)
    *ok += one_vfork();
  printf("ok=%d anon_growth_kb=%ld\n", *ok, anon_kb() - before);
  return NULL;
}

int main(int argc, char **argv) {
  int vfork_mode = argc >= 4 && strcmp(argv[1], "vfork") == 0;
  if (!vfork_mode && !(argc >= 3 && strcmp(argv[1], "exec") == 0))
    return 2;
  vfork_count = vfork_mode ? atoi(argv[2]) : 0;
  program_argv = argv + (vfork_mode ? 3 : 2);
  if (!(big_env = make_env()))
    return 3;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, STACK_BYTES);
  pthread_t t;
  int ok = 0;
  if (pthread_create(&t, &attr, vfork_mode ? vfork_thread : exec_thread, &ok) !=
      0)
    return 4;
  pthread_join(t, NULL);
  return ok == vfork_count ? 0 : 1;
}
