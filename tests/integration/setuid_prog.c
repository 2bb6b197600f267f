/* A program linked with libcontprof.so that starts the profiler itself, for
 * test_setuid, which installs a copy setuid-root and runs it as nobody with a
 * hostile environment. Prints its ids and what contprof_start returned, burns
 * 0.5 s of CPU, stops the profiler (which writes the profile). */
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "contprof/profiler.h"

static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static volatile double sink;

static void __attribute__((noinline)) setuid_work(double seconds) {
  double end = cpu_seconds() + seconds;
  while (cpu_seconds() < end)
    for (int i = 0; i < 100000; i++)
      sink += i * 0.5;
}

int main(void) {
  int rc = contprof_start(NULL);
  printf("ruid=%d euid=%d start=%d\n", (int)getuid(), (int)geteuid(), rc);
  fflush(stdout);
  setuid_work(0.5);
  if (rc == 0)
    contprof_stop();
  return 0;
}
