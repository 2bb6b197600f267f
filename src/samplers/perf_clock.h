/* A perf task clock (PERF_COUNT_SW_TASK_CLOCK) on one thread, opened
 * disabled and made to signal it, and the overflow its handler gives back,
 * the way the CPU sampler does it (cpu.c), the kernel-cost measurement
 * (kernel_cost.c) and the bench programs that measure its cost with no
 * profiler loaded (bench/sample_clocks.h); and the loop whose CPU time, with
 * the clock and without, measures that cost (kernel_cost.c;
 * bench/sample_clock_cost.c). Header-only so that all build them from one
 * place. */
#ifndef CP_SAMPLERS_PERF_CLOCK_H
#define CP_SAMPLERS_PERF_CLOCK_H

#include <fcntl.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* Async-signal-safe (one system call): a task clock on thread tid that
 * overflows every period_ns of its CPU time, kernel mode left out when
 * exclude_kernel is set. Returns the descriptor (close-on-exec), or -1 with
 * errno set. */
static inline int cp_perf_task_clock_open(pid_t tid, uint64_t period_ns,
                                          int exclude_kernel) {
  struct perf_event_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_TASK_CLOCK;
  attr.sample_period = period_ns;
  attr.disabled = 1;
  attr.exclude_kernel = (unsigned)exclude_kernel;
  attr.exclude_hv = 1;
  return (int)syscall(SYS_perf_event_open, &attr, tid, -1, -1,
                      PERF_FLAG_FD_CLOEXEC);
}

/* Overflows a perf task clock may make before a handler gives them back
 * (its refresh limit, PERF_EVENT_IOC_REFRESH): at most this many of its
 * signals are queued at once. */
#define CP_PERF_AHEAD 2

/* Async-signal-safe (three fcntl): each overflow of fd sends sig to thread
 * tid, with fd in si_fd. Returns 0, or -1 with errno set. */
static inline int cp_perf_task_clock_signal(int fd, pid_t tid, int sig) {
  struct f_owner_ex owner = {F_OWNER_TID, tid};
  if (fcntl(fd, F_SETOWN_EX, &owner) != 0 || fcntl(fd, F_SETSIG, sig) != 0 ||
      fcntl(fd, F_SETFL, O_ASYNC | O_NONBLOCK) != 0)
    return -1;
  return 0;
}

/* Async-signal-safe (one ioctl): the handler of fd's signal sig gives back
 * the overflow that signal took, so that CP_PERF_AHEAD stay allowed and the
 * event keeps running. A standard signal that ended the limit (hup:
 * POLL_HUP, the event stopped) may have had others merged into it, each an
 * overflow never given back: the whole limit is given again. Real-time
 * signals queue (none merge). Returns the ioctl's result. */
static inline int cp_perf_task_clock_give_back(int fd, int sig, int hup) {
  return ioctl(fd, PERF_EVENT_IOC_REFRESH,
               hup && sig < SIGRTMIN ? CP_PERF_AHEAD : 1);
}

/* n steps of a loop that touches no memory (x, a sink the caller keeps so
 * that the loop is not optimised away): the calling thread's CPU time it
 * took, in ns. */
static inline uint64_t cp_spin_thread_cpu_ns(long n, volatile double *x) {
  struct timespec a, b;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
  double v = 1;
  for (long i = 0; i < n; i++)
    v = v * 1.0000001 + 1e-9;
  *x = v;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
  return (uint64_t)(b.tv_sec - a.tv_sec) * 1000000000ull +
         (uint64_t)(b.tv_nsec - a.tv_nsec);
}

#endif
