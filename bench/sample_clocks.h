/* The two per-thread CPU sampling clocks, armed as src/samplers/cpu.c arms
 * them, for the standalone bench programs that measure them with no
 * profiler loaded (switch_cost.c, sample_clock_cost.c). The perf task clock
 * is opened and made to signal by the sampler's own code
 * (src/samplers/perf_clock.h). */
#ifndef BENCH_SAMPLE_CLOCKS_H
#define BENCH_SAMPLE_CLOCKS_H

#include <fcntl.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../src/samplers/perf_clock.h"

/* A perf task clock on thread tid with the given sample period. sig 0: no
 * signal, the event counts and overflows only; else each overflow sends sig
 * to tid, refresh overflows allowed (PERF_EVENT_IOC_REFRESH). *fd_out is
 * set before the event starts, for a handler that gives overflows back.
 * Returns the descriptor, or -1 with errno set. */
static inline int bench_perf_clock(pid_t tid, uint64_t period_ns, int sig,
                                   int refresh, volatile int *fd_out) {
  int fd = cp_perf_task_clock_open(tid, period_ns, 0);
  if (fd < 0)
    return -1;
  if (fd_out)
    *fd_out = fd;
  if (!sig) {
    ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
    return fd;
  }
  cp_perf_task_clock_signal(fd, tid, sig);
  ioctl(fd, PERF_EVENT_IOC_REFRESH, refresh);
  return fd;
}

/* A POSIX timer on the calling thread's CPU clock, sending sig to thread
 * tid every period_ns of it. Returns 0, or -1 with errno set. */
static inline int bench_posix_clock(pid_t tid, uint64_t period_ns, int sig,
                                    timer_t *out) {
  struct sigevent sev;
  memset(&sev, 0, sizeof sev);
  sev.sigev_notify = SIGEV_THREAD_ID;
  sev.sigev_signo = sig;
  sev._sigev_un._tid = tid;
  if (timer_create(CLOCK_THREAD_CPUTIME_ID, &sev, out) != 0)
    return -1;
  struct itimerspec its = {
      {(time_t)(period_ns / 1000000000ull), (long)(period_ns % 1000000000ull)},
      {(time_t)(period_ns / 1000000000ull), (long)(period_ns % 1000000000ull)}};
  return timer_settime(*out, 0, &its, NULL);
}

#endif
