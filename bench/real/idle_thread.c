/* An LD_PRELOAD library that starts one idle thread in the process, and
 * again in each child of fork: what any in-process profiler's own thread
 * costs a program whose application has one thread (its descriptor table
 * is then shared, and the kernel takes a reference on the file at each
 * call on a descriptor). With IDLE_UNSHARE=1 the thread takes a table of
 * its own (unshare(CLONE_FILES)) and closes its copy, so that the
 * application's table has one user again: what is left is the C library's
 * part (docs/overhead.md, "One thread's system calls"). For
 * bench/real/side_by_side.sh:
 *
 *   cc -O2 -shared -fPIC -pthread -o idle_thread.so bench/real/idle_thread.c
 *   SBS_ENV="LD_PRELOAD=$PWD/idle_thread.so" bench/real/side_by_side.sh
 *   SBS_BASE_ENV="LD_PRELOAD=$PWD/idle_thread.so" \
 *     SBS_ENV="LD_PRELOAD=$PWD/idle_thread.so IDLE_UNSHARE=1" \
 *     bench/real/side_by_side.sh nginx */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

static int unshare_table;

static void *idle(void *arg) {
  (void)arg;
  if (unshare_table && unshare(CLONE_FILES) == 0)
    syscall(SYS_close_range, 0u, ~0u, 0u);
  for (;;)
    pause();
  return NULL;
}

static void start_idle(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, idle, NULL) == 0)
    pthread_detach(t);
}

__attribute__((constructor)) static void idle_thread_init(void) {
  const char *e = getenv("IDLE_UNSHARE");
  unshare_table = e && e[0] == '1';
  start_idle();
  pthread_atfork(NULL, NULL, start_idle);
}
