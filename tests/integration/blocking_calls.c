/* Blocking calls that signals interrupt (nanosleep, sleep, usleep,
 * clock_nanosleep, poll, select, epoll_wait), each made while the wall
 * sampler signals this thread: every one must take its full time and return
 * what it would without the profiler. Then an application signal must still
 * interrupt nanosleep with EINTR. Prints one line per call and exits 0 only
 * if every result is right.
 *
 * `blocking_calls race ROUNDS` (bench/eintr_race.sh) measures instead how
 * often the application's own signal fails to interrupt: ROUNDS times an
 * ITIMER_REAL SIGALRM 2 to 3.8 ms into a nanosleep of 300 ms, which the wall
 * sampler signals too; prints `rounds=N lost_eintr=K`. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int failures;

static void check(const char *what, int ok, double took, double want) {
  /* Never early; late only by scheduling. */
  int on_time = took >= want - 0.002 && took < want + 0.5;
  printf("%-16s %s took %.3f s (want %.3f)\n", what,
         ok && on_time ? "ok" : "WRONG", took, want);
  failures += !(ok && on_time);
}

static void on_alarm(int sig) { (void)sig; }

static int race(int rounds) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sigaction(SIGALRM, &sa, NULL);
  int lost = 0;
  for (int i = 0; i < rounds; i++) {
    struct itimerval alarm_in = {{0, 0}, {0, 2000 + (i % 7) * 300}};
    setitimer(ITIMER_REAL, &alarm_in, NULL);
    struct timespec req = {0, 300000000}, rem;
    int rc = nanosleep(&req, &rem);
    lost += !(rc == -1 && errno == EINTR);
    /* A little CPU, so that the next sleep is a new wait to the sampler. */
    volatile unsigned x = 0;
    for (unsigned k = 0; k < 20000; k++)
      x += k;
  }
  printf("rounds=%d lost_eintr=%d\n", rounds, lost);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "race") == 0)
    return race(atoi(argv[2]));
  double t = now();
  unsigned left = sleep(1);
  check("sleep", left == 0, now() - t, 1.0);

  t = now();
  struct timespec req = {0, 300000000}, rem = {7, 7};
  int rc = nanosleep(&req, &rem);
  check("nanosleep", rc == 0 && rem.tv_sec == 7, now() - t, 0.3);

  t = now();
  rc = usleep(300000);
  check("usleep", rc == 0, now() - t, 0.3);

  t = now();
  rc = clock_nanosleep(CLOCK_MONOTONIC, 0, &req, NULL);
  check("clock_nanosleep", rc == 0, now() - t, 0.3);

  int fds[2];
  if (pipe(fds) != 0)
    return 2;
  t = now();
  struct pollfd pfd = {fds[0], POLLIN, 0};
  rc = poll(&pfd, 1, 300);
  check("poll", rc == 0, now() - t, 0.3);

  t = now();
  fd_set set;
  FD_ZERO(&set);
  FD_SET(fds[0], &set);
  struct timeval tv = {0, 300000};
  rc = select(fds[0] + 1, &set, NULL, NULL, &tv);
  check("select", rc == 0, now() - t, 0.3);

  int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = fds[0]};
  epoll_ctl(ep, EPOLL_CTL_ADD, fds[0], &ev);
  t = now();
  rc = epoll_wait(ep, &ev, 1, 300);
  check("epoll_wait", rc == 0, now() - t, 0.3);

  /* The application's own signal still interrupts. */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sigaction(SIGALRM, &sa, NULL);
  alarm(1);
  t = now();
  struct timespec long_req = {3, 0};
  rc = nanosleep(&long_req, &rem);
  int eintr = rc == -1 && errno == EINTR && rem.tv_sec >= 1;
  check("app EINTR", eintr, now() - t, 1.0);
  return failures ? 1 : 0;
}
