/* Blocking calls that signals interrupt (nanosleep, sleep, usleep,
 * clock_nanosleep, poll, select, epoll_wait, epoll_pwait, epoll_pwait2,
 * ppoll, pselect, the fortified poll and ppoll, System V semop, semtimedop and
 * msgrcv, and socket calls on sockets with SO_RCVTIMEO or SO_SNDTIMEO: recv,
 * recvfrom, accept, send, connect, read, readv, write, writev, recvmmsg,
 * sendmmsg), each made while the wall sampler signals this thread: every one
 * must take its full time and return what it would without the profiler. Then
 * an application signal must still interrupt nanosleep and recv with EINTR.
 * Prints one line per call and exits 0 only if every result is right.
 *
 * `blocking_calls race ROUNDS` (bench/eintr_race.sh) measures instead how
 * often the application's own signal fails to interrupt: ROUNDS times an
 * ITIMER_REAL SIGALRM 2 to 3.8 ms into a nanosleep of 300 ms, which the wall
 * sampler signals too; prints `rounds=N lost_eintr=K`. */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/msg.h>
#include <sys/select.h>
#include <sys/sem.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int failures;

static void check_within(const char *what, int ok, double took, double want,
                         double early) {
  int on_time = took >= want - early && took < want + 0.5;
  printf("%-16s %s took %.3f s (want %.3f)\n", what,
         ok && on_time ? "ok" : "WRONG", took, want);
  failures += !(ok && on_time);
}

static void check(const char *what, int ok, double took, double want) {
  /* Never early; late only by scheduling. */
  check_within(what, ok, took, want, 0.002);
}

/* A socket's timeout is counted on the clock of the last tick, by the
 * kernel and by the hooks (interpose/socket_calls.c), which lags by up to
 * about two ticks after a wakeup: the call may end that much early. */
static void check_socket(const char *what, int ok, double took, double want) {
  struct timespec res;
  double tick = clock_getres(CLOCK_MONOTONIC_COARSE, &res) == 0
                    ? (double)res.tv_sec + (double)res.tv_nsec / 1e9
                    : 0.01;
  check_within(what, ok, took, want, 2 * tick + 0.002);
}

static void on_alarm(int sig) { (void)sig; }

static void set_timeout(int fd, int opt, long ms) {
  struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof tv);
}

/* A TCP socket listening on 127.0.0.1 (port chosen by the kernel). */
static int tcp_listener(struct sockaddr_in *addr, int backlog) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  memset(addr, 0, sizeof *addr);
  addr->sin_family = AF_INET;
  addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof *addr;
  if (fd < 0 || bind(fd, (struct sockaddr *)addr, len) != 0 ||
      listen(fd, backlog) != 0 ||
      getsockname(fd, (struct sockaddr *)addr, &len) != 0)
    return -1;
  return fd;
}

static void *send_later(void *arg) {
  struct timespec t = {0, 200000000};
  nanosleep(&t, NULL);
  send(*(int *)arg, "late", 4, 0);
  return NULL;
}

/* Socket calls with timeouts: the kernel returns EINTR for them whatever
 * SA_RESTART says. Each must wait for its data or its timeout. */
static void socket_calls(void) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
    check("socketpair", 0, 0, 0);
    return;
  }
  char buf[64];
  set_timeout(sv[0], SO_RCVTIMEO, 300);
  double t = now();
  ssize_t n = recv(sv[0], buf, sizeof buf, 0);
  check_socket("recv timeout", n == -1 && errno == EAGAIN, now() - t, 0.3);

  /* Data that comes within the timeout is received when it comes. */
  set_timeout(sv[0], SO_RCVTIMEO, 2000);
  pthread_t sender;
  t = now();
  pthread_create(&sender, NULL, send_later, &sv[1]);
  n = recv(sv[0], buf, sizeof buf, 0);
  pthread_join(sender, NULL);
  check("recv data", n == 4 && memcmp(buf, "late", 4) == 0, now() - t, 0.2);

  /* read and readv wait as recv does. With a size that is not a constant,
   * this fortified build (-D_FORTIFY_SOURCE=2, CMakeLists.txt) calls
   * __read_chk and __recv_chk instead. */
  set_timeout(sv[0], SO_RCVTIMEO, 300);
  t = now();
  n = read(sv[0], buf, sizeof buf);
  check_socket("read timeout", n == -1 && errno == EAGAIN, now() - t, 0.3);
  volatile size_t want = sizeof buf;
  t = now();
  n = read(sv[0], buf, want);
  check_socket("read_chk timeout", n == -1 && errno == EAGAIN, now() - t, 0.3);
  t = now();
  n = recv(sv[0], buf, want, 0);
  check_socket("recv_chk timeout", n == -1 && errno == EAGAIN, now() - t, 0.3);
  struct iovec iov = {buf, sizeof buf};
  t = now();
  n = readv(sv[0], &iov, 1);
  check_socket("readv timeout", n == -1 && errno == EAGAIN, now() - t, 0.3);
  struct mmsghdr mm = {.msg_hdr = {.msg_iov = &iov, .msg_iovlen = 1}};
  t = now();
  int got = recvmmsg(sv[0], &mm, 1, 0, NULL);
  check_socket("recvmmsg timeout", got == -1 && errno == EAGAIN, now() - t,
               0.3);
  /* A timeout that setsockopt's hook did not see (a raw system call):
   * counted from the interruption, so never early. */
  struct timeval raw = {0, 300000};
  syscall(SYS_setsockopt, sv[0], SOL_SOCKET, SO_RCVTIMEO, &raw, sizeof raw);
  t = now();
  n = read(sv[0], buf, sizeof buf);
  check_socket("read, raw timeout", n == -1 && errno == EAGAIN, now() - t, 0.3);

  /* A full socket: send waits for room until its timeout. */
  static char fill[65536];
  while (send(sv[1], fill, sizeof fill, MSG_DONTWAIT) > 0) {
  }
  set_timeout(sv[1], SO_SNDTIMEO, 300);
  t = now();
  n = send(sv[1], fill, sizeof fill, 0);
  check_socket("send timeout", n == -1 && errno == EAGAIN, now() - t, 0.3);

  /* write and writev wait as send does. */
  t = now();
  n = write(sv[1], fill, sizeof fill);
  check_socket("write timeout", n == -1 && errno == EAGAIN, now() - t, 0.3);
  struct iovec out = {fill, sizeof fill};
  t = now();
  n = writev(sv[1], &out, 1);
  check_socket("writev timeout", n == -1 && errno == EAGAIN, now() - t, 0.3);
  struct mmsghdr mo = {.msg_hdr = {.msg_iov = &out, .msg_iovlen = 1}};
  t = now();
  int sent = sendmmsg(sv[1], &mo, 1, 0);
  check_socket("sendmmsg timeout", sent == -1 && errno == EAGAIN, now() - t,
               0.3);
  close(sv[0]);
  close(sv[1]);

  /* Data that comes within the timeout is read when it comes. */
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
    check("socketpair", 0, 0, 0);
    return;
  }
  set_timeout(sv[0], SO_RCVTIMEO, 2000);
  t = now();
  pthread_create(&sender, NULL, send_later, &sv[1]);
  n = read(sv[0], buf, want);
  pthread_join(sender, NULL);
  check("read data", n == 4 && memcmp(buf, "late", 4) == 0, now() - t, 0.2);
  close(sv[0]);
  close(sv[1]);

  int udp = socket(AF_INET, SOCK_DGRAM, 0);
  struct sockaddr_in any = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  bind(udp, (struct sockaddr *)&any, sizeof any);
  set_timeout(udp, SO_RCVTIMEO, 300);
  t = now();
  n = recvfrom(udp, buf, sizeof buf, 0, NULL, NULL);
  check_socket("recvfrom timeout", n == -1 && errno == EAGAIN, now() - t, 0.3);
  close(udp);

  struct sockaddr_in addr;
  int lfd = tcp_listener(&addr, 1);
  set_timeout(lfd, SO_RCVTIMEO, 300);
  t = now();
  int afd = accept(lfd, NULL, NULL);
  check_socket("accept timeout", afd == -1 && errno == EAGAIN, now() - t, 0.3);

  /* A listener whose queue is full (backlog 0 takes one): the kernel
   * drops the next SYN and connect waits until its timeout, then fails
   * with EINPROGRESS. */
  struct sockaddr_in full;
  int qfd = tcp_listener(&full, 0);
  int first = socket(AF_INET, SOCK_STREAM, 0);
  int second = socket(AF_INET, SOCK_STREAM, 0);
  int queued = connect(first, (struct sockaddr *)&full, sizeof full) == 0;
  set_timeout(second, SO_SNDTIMEO, 300);
  t = now();
  int rc = connect(second, (struct sockaddr *)&full, sizeof full);
  check_socket("connect timeout", queued && rc == -1 && errno == EINPROGRESS,
               now() - t, 0.3);
  close(first);
  close(second);
  close(qfd);

  /* The application's own signal still interrupts a socket call. */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sa.sa_flags = SA_RESTART; /* the timeout makes it EINTR all the same */
  sigaction(SIGALRM, &sa, NULL);
  set_timeout(lfd, SO_RCVTIMEO, 3000);
  alarm(1);
  t = now();
  afd = accept(lfd, NULL, NULL);
  check("app EINTR accept", afd == -1 && errno == EINTR, now() - t, 1.0);
  close(lfd);
}

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

/* System V IPC waits: a semaphore posted and a message sent 300 ms later
 * by another thread, and a semtimedop that times out. A kernel without
 * System V IPC (some containers) skips them with a line. */
static int sysv_sem = -1, sysv_queue = -1;
struct sysv_msg {
  long type;
  char text[16];
};

static void *sysv_post_later(void *arg) {
  (void)arg;
  struct timespec d = {0, 300000000};
  nanosleep(&d, NULL);
  struct sembuf up = {0, 1, 0};
  semop(sysv_sem, &up, 1);
  nanosleep(&d, NULL);
  struct sysv_msg m = {1, "hello"};
  msgsnd(sysv_queue, &m, sizeof m.text, 0);
  return NULL;
}

static void sysv_waits(void) {
  sysv_sem = semget(IPC_PRIVATE, 1, IPC_CREAT | 0600);
  sysv_queue = msgget(IPC_PRIVATE, IPC_CREAT | 0600);
  if (sysv_sem < 0 || sysv_queue < 0) {
    printf("%-16s skipped: no System V IPC here (%s)\n", "semop, msgrcv",
           strerror(errno));
  } else {
    struct sembuf down = {0, -1, 0};
    struct timespec wait_ts = {0, 300000000};
    double t = now();
    int rc = semtimedop(sysv_sem, &down, 1, &wait_ts);
    check("semtimedop", rc == -1 && errno == EAGAIN, now() - t, 0.3);
    /* Both waits end on the poster's clock: 0.3 s and 0.6 s after it
     * starts (an early return is what is checked). */
    t = now();
    pthread_t th;
    pthread_create(&th, NULL, sysv_post_later, NULL);
    rc = semop(sysv_sem, &down, 1);
    check("semop", rc == 0, now() - t, 0.3);
    struct sysv_msg m;
    ssize_t n = msgrcv(sysv_queue, &m, sizeof m.text, 0, 0);
    check("msgrcv", n == (ssize_t)sizeof m.text && strcmp(m.text, "hello") == 0,
          now() - t, 0.6);
    pthread_join(th, NULL);
  }
  if (sysv_sem >= 0)
    semctl(sysv_sem, 0, IPC_RMID);
  if (sysv_queue >= 0)
    msgctl(sysv_queue, IPC_RMID, NULL);
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

  t = now();
  rc = epoll_pwait(ep, &ev, 1, 300, NULL);
  check("epoll_pwait", rc == 0, now() - t, 0.3);

  struct timespec wait_ts = {0, 300000000};
  t = now();
  rc = epoll_pwait2(ep, &ev, 1, &wait_ts, NULL);
  check("epoll_pwait2", rc == 0, now() - t, 0.3);

  t = now();
  rc = ppoll(&pfd, 1, &wait_ts, NULL);
  check("ppoll", rc == 0, now() - t, 0.3);

  /* With a count the compiler cannot check, this fortified build calls
   * __poll_chk and __ppoll_chk. */
  volatile nfds_t one = 1;
  t = now();
  rc = poll(&pfd, one, 300);
  check("poll_chk", rc == 0, now() - t, 0.3);

  t = now();
  rc = ppoll(&pfd, one, &wait_ts, NULL);
  check("ppoll_chk", rc == 0, now() - t, 0.3);

  t = now();
  FD_ZERO(&set);
  FD_SET(fds[0], &set);
  rc = pselect(fds[0] + 1, &set, NULL, NULL, &wait_ts, NULL);
  check("pselect", rc == 0 && !FD_ISSET(fds[0], &set), now() - t, 0.3);

  socket_calls();
  sysv_waits();

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
