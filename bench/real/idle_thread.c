/* An LD_PRELOAD library that starts one idle thread in the process, and
 * again in each child of fork: what any in-process profiler's own thread
 * costs a program whose application has one thread (its descriptor table
 * is then shared, and the kernel takes a reference on the file at each
 * call on a descriptor). For bench/real/side_by_side.sh:
 *
 *   cc -O2 -shared -fPIC -pthread -o idle_thread.so bench/real/idle_thread.c
 *   SBS_ENV="LD_PRELOAD=$PWD/idle_thread.so" bench/real/side_by_side.sh */
#include <pthread.h>
#include <unistd.h>

static void *idle(void *arg) {
  (void)arg;
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
  start_idle();
  pthread_atfork(NULL, NULL, start_idle);
}
