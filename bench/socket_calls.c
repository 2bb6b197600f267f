/* What a socket call costs a process: N recv calls with MSG_DONTWAIT on an
 * empty Unix socket pair (each a system call that fails with EAGAIN at
 * once, the call an event loop makes when a socket has nothing more), then
 * N send+recv pairs of 64 bytes, then the same with read on a non-blocking
 * socket and write+read pairs. Run plain and with a preloaded library to
 * read what its socket hooks add per call (bench/socket_call_cost.sh).
 *
 *   socket_calls N [thread|thread-own-table]
 *
 * `thread`: one idle thread beside the one that calls, as any profiler's
 * thread; `thread-own-table`: the same thread with a descriptor table of
 * its own (unshare(CLONE_FILES), then every descriptor of its copy closed),
 * so that the kernel sees one user of the caller's table and only the C
 * library's bookkeeping for a process of two threads remains
 * (docs/overhead.md, "One thread's system calls").
 *
 * Prints `recv_ns=X pair_ns=Y read_ns=Z rw_pair_ns=W`: wall ns per call
 * and per pair (the thread does nothing else). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static void *idle(void *arg) {
  (void)arg;
  for (;;)
    pause();
  return NULL;
}

static _Atomic int own_table_ready;

static void *idle_own_table(void *arg) {
  (void)arg;
  if (unshare(CLONE_FILES) == 0)
    syscall(SYS_close_range, 0u, ~0u, 0u);
  own_table_ready = 1;
  for (;;)
    pause();
  return NULL;
}

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 1000000;
  pthread_t t;
  if (argc > 2 && strcmp(argv[2], "thread") == 0 &&
      pthread_create(&t, NULL, idle, NULL) != 0)
    return 2;
  if (argc > 2 && strcmp(argv[2], "thread-own-table") == 0) {
    if (pthread_create(&t, NULL, idle_own_table, NULL) != 0)
      return 2;
    while (!own_table_ready)
      sched_yield();
  }
  int sv[2];
  if (n <= 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
    return 2;
  char buf[64] = {0};
  double t0 = now_ns();
  for (long i = 0; i < n; i++)
    if (recv(sv[0], buf, sizeof buf, MSG_DONTWAIT) != -1)
      return 3;
  double t1 = now_ns();
  for (long i = 0; i < n; i++)
    if (send(sv[1], buf, sizeof buf, 0) != (ssize_t)sizeof buf ||
        recv(sv[0], buf, sizeof buf, 0) != (ssize_t)sizeof buf)
      return 4;
  double t2 = now_ns();
  fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
  for (long i = 0; i < n; i++)
    if (read(sv[0], buf, sizeof buf) != -1)
      return 5;
  double t3 = now_ns();
  for (long i = 0; i < n; i++)
    if (write(sv[1], buf, sizeof buf) != (ssize_t)sizeof buf ||
        read(sv[0], buf, sizeof buf) != (ssize_t)sizeof buf)
      return 6;
  double t4 = now_ns();
  printf("recv_ns=%.1f pair_ns=%.1f read_ns=%.1f rw_pair_ns=%.1f\n",
         (t1 - t0) / (double)n, (t2 - t1) / (double)n, (t3 - t2) / (double)n,
         (t4 - t3) / (double)n);
  return 0;
}
