/* cpurun: runs a command and measures it as the kernel accounts it.
 *
 *   cpurun OUT COMMAND [ARG...]
 *
 * Runs COMMAND (its stdout/stderr pass through), waits for it with wait4 and
 * appends one line "wall_s user_s sys_s status" to the file OUT: the wall time
 * from fork to reaping (CLOCK_MONOTONIC), and the user and system CPU time of
 * the child's whole process (every thread, the profiler's own included), to
 * the microsecond. Exits with the child's status. Used by the bench scripts
 * instead of /usr/bin/time, which prints CPU time to 10 ms only. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double tv_s(struct timeval tv) {
  return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: cpurun OUT COMMAND [ARG...]\n");
    return 2;
  }
  FILE *out = fopen(argv[1], "a");
  if (!out) {
    fprintf(stderr, "cpurun: %s: %s\n", argv[1], strerror(errno));
    return 2;
  }
  double start = now_s();
  pid_t pid = fork();
  if (pid < 0) {
    perror("cpurun: fork");
    return 2;
  }
  if (pid == 0) {
    fclose(out);
    execvp(argv[2], argv + 2);
    fprintf(stderr, "cpurun: %s: %s\n", argv[2], strerror(errno));
    _exit(127);
  }
  int status;
  struct rusage ru;
  while (wait4(pid, &status, 0, &ru) < 0) {
    if (errno != EINTR) {
      perror("cpurun: wait4");
      return 2;
    }
  }
  double wall = now_s() - start;
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  fprintf(out, "%.6f %.6f %.6f %d\n", wall, tv_s(ru.ru_utime),
          tv_s(ru.ru_stime), code);
  fclose(out);
  return code;
}
