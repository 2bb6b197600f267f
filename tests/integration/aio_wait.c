/* libaio's io_getevents and io_pgetevents while the wall sampler signals
 * this thread (test_aio_wait, 1 ms wall interval): with nothing submitted,
 * each waits out its 300 ms timeout and returns 0 events, where a sampling
 * signal made it return -EINTR within milliseconds before the hooks
 * (interpose/waits.c). Then an asynchronous poll of a pipe that another
 * thread writes 200 ms into a wait is returned when it completes,
 * and the application's own signal still ends a wait with -EINTR. Prints a
 * line per call; exits 0 only if every one is right. */
#include <errno.h>
#include <libaio.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int failures;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Never early; late only by scheduling. */
static void check(const char *what, int ok, double took, double want) {
  int on_time = took >= want - 0.002 && took < want + 0.5;
  printf("%-18s %s took %.3f s (want %.3f)\n", what,
         ok && on_time ? "ok" : "WRONG", took, want);
  failures += !(ok && on_time);
}

static int pipe_fds[2];

static void *write_later(void *arg) {
  (void)arg;
  struct timespec d = {0, 200000000};
  nanosleep(&d, NULL);
  if (write(pipe_fds[1], "late", 4) != 4)
    failures++;
  return NULL;
}

static void on_alarm(int sig) { (void)sig; }

int main(void) {
  io_context_t ctx = 0;
  int rc = io_setup(8, &ctx);
  if (rc != 0) {
    printf("io_setup: skipped, no AIO here (%s)\n", strerror(-rc));
    return 0;
  }
  struct io_event ev[4];
  struct timespec wait = {0, 300000000};
  double t = now();
  rc = io_getevents(ctx, 1, 4, ev, &wait);
  check("io_getevents", rc == 0, now() - t, 0.3);

  sigset_t none;
  sigemptyset(&none);
  t = now();
  rc = io_pgetevents(ctx, 1, 4, ev, &wait, &none);
  if (rc == -ENOSYS)
    printf("%-18s skipped: not in this kernel\n", "io_pgetevents");
  else
    check("io_pgetevents", rc == 0, now() - t, 0.3);

  /* An asynchronous poll of a pipe that is written 200 ms later: the wait
   * returns its event then. (A buffered read would run inside io_submit
   * itself, which a signal, any signal, fails with EINTR in the event.) */
  if (pipe(pipe_fds) != 0)
    return 2;
  struct iocb cb, *cbs[1] = {&cb};
  io_prep_poll(&cb, pipe_fds[0], POLLIN);
  pthread_t writer;
  t = now();
  int submitted = io_submit(ctx, 1, cbs);
  if (submitted == -EINVAL) {
    printf("%-18s skipped: no asynchronous poll in this kernel\n",
           "io_getevents data");
  } else {
    pthread_create(&writer, NULL, write_later, NULL);
    struct timespec long_wait = {2, 0};
    rc = submitted == 1 ? io_getevents(ctx, 1, 4, ev, &long_wait) : submitted;
    pthread_join(writer, NULL);
    int got = rc == 1 && ev[0].obj == &cb && (ev[0].res & POLLIN);
    if (!got)
      printf("submitted %d, got %d events, res %ld\n", submitted, rc,
             rc == 1 ? (long)ev[0].res : 0L);
    check("io_getevents data", got, now() - t, 0.2);
  }

  /* The application's own signal still interrupts. */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sa.sa_flags = SA_RESTART; /* never restarted all the same */
  sigaction(SIGALRM, &sa, NULL);
  alarm(1);
  struct timespec three = {3, 0};
  t = now();
  rc = io_getevents(ctx, 1, 4, ev, &three);
  check("app EINTR", rc == -EINTR, now() - t, 1.0);
  io_destroy(ctx);
  return failures ? 1 : 0;
}
