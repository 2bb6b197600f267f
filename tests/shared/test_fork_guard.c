/* A fork and the loader's lock (src/fork_guard.c, docs/signals.md "fork and
 * the loader's lock"): a fork waits for the profiler's own thread to leave
 * dl_iterate_phdr however long its section takes (a PostgreSQL child forked
 * while the postmaster's profiler thread built the walker's table for more
 * than the 100 ms the fork used to wait hung at its first unwind, on the
 * lock copied held), and the child lists its objects; a section the
 * application entered itself is waited for 1 s only, as it may wait for
 * anything. */
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fork_guard.h"
#include "test.h"
#include "thread_state.h"

#define SECTION_MS 400      /* the profiler's */
#define APP_SECTION_MS 1500 /* the application's */

typedef struct section {
  int internal; /* the thread is the profiler's */
  atomic_int inside, done;
} section;

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Holds the loader's lock for SECTION_MS, once. */
static int slow_callback(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)info;
  (void)size;
  section *s = arg;
  atomic_store(&s->inside, 1);
  long ms = s->internal ? SECTION_MS : APP_SECTION_MS;
  struct timespec pause = {ms / 1000, ms % 1000 * 1000000L};
  nanosleep(&pause, NULL);
  atomic_store(&s->done, 1);
  return 1;
}

static void *in_the_loader(void *arg) {
  section *s = arg;
  if (s->internal)
    cp_thread_mark_internal();
  dl_iterate_phdr(slow_callback, s);
  return NULL;
}

static int count_object(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)info;
  (void)size;
  ++*(int *)arg;
  return 0;
}

/* Starts a thread (the profiler's when internal) inside dl_iterate_phdr,
 * then runs the fork's prepare handler: returns how long it waited. */
static uint64_t prepare_while_inside(section *s, int internal, pthread_t *t) {
  s->internal = internal;
  CHECK_EQ_INT(pthread_create(t, NULL, in_the_loader, s), 0);
  while (!atomic_load(&s->inside))
    usleep(1000);
  uint64_t t0 = now_ms();
  cp_fork_guard_prepare();
  uint64_t waited = now_ms() - t0;
  printf("the fork waited %llu ms for %s section of %d ms\n",
         (unsigned long long)waited,
         internal ? "the profiler's" : "the application's",
         internal ? SECTION_MS : APP_SECTION_MS);
  return waited;
}

static void test_fork_waits_for_the_profilers_section(void) {
  section s = {0};
  pthread_t t;
  prepare_while_inside(&s, 1, &t);
  CHECK(atomic_load(&s.done));
  pid_t child = fork();
  if (child == 0) {
    cp_fork_guard_child();
    int n = 0;
    dl_iterate_phdr(count_object, &n);
    _exit(n > 0 ? 0 : 1);
  }
  cp_fork_guard_parent();
  CHECK(child > 0);
  /* A child that waits for the lock copied held never ends. */
  int status = -1;
  for (int i = 0; i < 500 && waitpid(child, &status, WNOHANG) == 0; i++)
    usleep(10000);
  if (status == -1) {
    printf("the child hangs\n");
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
  }
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  pthread_join(t, NULL);
}

static void test_fork_waits_little_for_the_application(void) {
  section s = {0};
  pthread_t t;
  uint64_t waited = prepare_while_inside(&s, 0, &t);
  CHECK(!atomic_load(&s.done));
  CHECK(waited >= 1000 && waited < APP_SECTION_MS);
  cp_fork_guard_parent();
  pthread_join(t, NULL);
}

TEST_MAIN(T(test_fork_waits_for_the_profilers_section),
          T(test_fork_waits_little_for_the_application))
