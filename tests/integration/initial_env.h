/* The environment a test program started with, as the kernel keeps it
 * (/proc/self/environ): the profiler's start may have changed the
 * process's own since (with CONTPROF_FOLLOW_EXEC=0 it takes itself out of
 * LD_PRELOAD), and a test of the exec hooks must hand them an environment
 * that still names the library. */
#ifndef CP_TEST_INITIAL_ENV_H
#define CP_TEST_INITIAL_ENV_H

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

/* NULL-terminated, in static storage (at most 64 KiB, 511 variables). */
static inline char **initial_environment(void) {
  static char text[65536];
  static char *vars[512];
  int fd = open("/proc/self/environ", O_RDONLY);
  ssize_t n = fd >= 0 ? read(fd, text, sizeof text - 1) : -1;
  if (fd >= 0)
    close(fd);
  size_t count = 0;
  for (ssize_t i = 0; i < n && count < 511; i += (ssize_t)strlen(text + i) + 1)
    vars[count++] = text + i;
  vars[count] = NULL;
  return vars;
}

#endif
