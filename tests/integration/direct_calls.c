/* The descriptor calls that the hooks make directly while the application
 * has one thread (src/interpose/direct.h): run under `contprof run
 * --profiles wall,cpu` with a 1 ms wall interval, and with
 * libcp_direct_shim.so preloaded behind the profiler (an interposer that
 * counts the writes it forwards). Checks that
 *
 * - each call returns what the C library's would: data, end of file,
 *   EAGAIN, ENOENT, EEXIST, EBADF, a timeout's 0, a new file's mode;
 * - a read blocked on a socket with a receive timeout, signalled by the
 *   wall sampler, still waits its full time and fails with EAGAIN;
 * - the interposer behind ours sees every write;
 * - a thread blocked in read is cancelled by another thread's
 *   pthread_cancel at once, and a process of one thread that cancels
 *   itself is cancelled at its next recv, as without the profiler (the
 *   calls go through the C library's bookkeeping from then on).
 *
 * Prints one line per check; exits 0 only if all are right. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int failures;

static void check(const char *what, int ok) {
  printf("%-28s %s\n", what, ok ? "ok" : "WRONG");
  fflush(stdout);
  failures += !ok;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void results(void) {
  int p[2];
  if (pipe(p) != 0)
    exit(2);
  char buf[16] = {0};
  check("write", write(p[1], "hello", 5) == 5);
  check("read", read(p[0], buf, sizeof buf) == 5 && !memcmp(buf, "hello", 5));
  struct iovec out[2] = {{"ab", 2}, {"cde", 3}};
  check("writev", writev(p[1], out, 2) == 5);
  char x[2], y[8];
  struct iovec in[2] = {{x, sizeof x}, {y, sizeof y}};
  check("readv",
        readv(p[0], in, 2) == 5 && !memcmp(x, "ab", 2) && !memcmp(y, "cde", 3));
  close(p[1]);
  check("read at end of file", read(p[0], buf, sizeof buf) == 0);
  close(p[0]);
  errno = 0;
  check("read of a closed fd", read(p[0], buf, 1) == -1 && errno == EBADF);

  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
    exit(2);
  errno = 0;
  check("recv, nothing to read",
        recv(sv[0], buf, sizeof buf, MSG_DONTWAIT) == -1 && errno == EAGAIN);
  check("send", send(sv[1], "ping", 4, 0) == 4);
  check("recv",
        recv(sv[0], buf, sizeof buf, 0) == 4 && !memcmp(buf, "ping", 4));
  check("sendto", sendto(sv[1], "pong", 4, 0, NULL, 0) == 4);
  struct sockaddr_un from;
  socklen_t fromlen = sizeof from;
  check("recvfrom", recvfrom(sv[0], buf, sizeof buf, 0,
                             (struct sockaddr *)&from, &fromlen) == 4 &&
                        !memcmp(buf, "pong", 4));
  struct iovec iov = {"msg", 3};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
  check("sendmsg", sendmsg(sv[1], &m, 0) == 3);
  char r[8];
  struct iovec riov = {r, sizeof r};
  struct msghdr rm = {.msg_iov = &riov, .msg_iovlen = 1};
  check("recvmsg", recvmsg(sv[0], &rm, 0) == 3 && !memcmp(r, "msg", 3));

  struct pollfd pfd = {sv[0], POLLIN, 0};
  check("poll, nothing", poll(&pfd, 1, 0) == 0);
  check("send again", send(sv[1], "z", 1, 0) == 1);
  check("poll, ready", poll(&pfd, 1, 1000) == 1 && (pfd.revents & POLLIN));
  int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = sv[0]};
  epoll_ctl(ep, EPOLL_CTL_ADD, sv[0], &ev);
  struct epoll_event got;
  check("epoll_wait, ready",
        epoll_wait(ep, &got, 1, 1000) == 1 && got.data.fd == sv[0]);
  check("recv the byte", recv(sv[0], buf, 1, 0) == 1 && buf[0] == 'z');
  check("epoll_wait, nothing", epoll_wait(ep, &got, 1, 50) == 0);
  close(ep);

  int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  snprintf(addr.sun_path, sizeof addr.sun_path, "/tmp/cp_direct.%d",
           (int)getpid());
  unlink(addr.sun_path);
  errno = 0;
  int c = socket(AF_UNIX, SOCK_STREAM, 0);
  check("connect, no such path",
        connect(c, (struct sockaddr *)&addr, sizeof addr) == -1 &&
            errno == ENOENT);
  close(c);
  if (bind(lfd, (struct sockaddr *)&addr, sizeof addr) != 0 ||
      listen(lfd, 4) != 0)
    exit(2);
  errno = 0;
  check("accept, nobody", accept(lfd, NULL, NULL) == -1 && errno == EAGAIN);
  c = socket(AF_UNIX, SOCK_STREAM, 0);
  check("connect", connect(c, (struct sockaddr *)&addr, sizeof addr) == 0);
  int a = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
  check("accept4", a >= 0);
  close(a);
  close(c);
  close(lfd);
  unlink(addr.sun_path);

  /* Blocked in a direct call while the wall sampler signals the thread
   * every millisecond: the call waits its full timeout. */
  struct timeval tv = {0, 300000};
  setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  double t = now();
  errno = 0;
  ssize_t rc = read(sv[0], buf, sizeof buf);
  double took = now() - t;
  printf("read with a timeout took %.3f s\n", took);
  check("read with a timeout",
        rc == -1 && errno == EAGAIN && took > 0.28 && took < 0.8);
  close(sv[0]);
  close(sv[1]);
}

/* The fortified entry points, called as -D_FORTIFY_SOURCE builds do. */
extern int __open_2(const char *path, int flags);
extern int __openat_2(int dirfd, const char *path, int flags);

static void file_results(void) {
  char dir[] = "/tmp/cp_direct_files.XXXXXX";
  if (!mkdtemp(dir))
    exit(2);
  char path[256];
  snprintf(path, sizeof path, "%s/f", dir);
  umask(022);
  int fd = open(path, O_CREAT | O_EXCL | O_RDWR, 0640);
  struct stat st;
  check("open, created",
        fd >= 0 && fstat(fd, &st) == 0 && (st.st_mode & 0777) == 0640);
  errno = 0;
  check("open, exists",
        open(path, O_CREAT | O_EXCL | O_RDWR, 0600) == -1 && errno == EEXIST);
  check("pwrite", pwrite(fd, "0123456789", 10, 100) == 10);
  char buf[16] = {0};
  check("pread", pread(fd, buf, 4, 103) == 4 && !memcmp(buf, "3456", 4));
  check("pread past the end", pread(fd, buf, 4, 200) == 0);
  check("close", close(fd) == 0);
  errno = 0;
  check("close again", close(fd) == -1 && errno == EBADF);
  int dfd = open(dir, O_RDONLY | O_DIRECTORY);
  fd = openat(dfd, "f", O_RDONLY);
  check("openat",
        fd >= 0 && pread(fd, buf, 2, 100) == 2 && !memcmp(buf, "01", 2));
  close(fd);
  errno = 0;
  check("openat, no such file",
        openat(dfd, "none", O_RDONLY) == -1 && errno == ENOENT);
  fd = openat(dfd, "g", O_CREAT | O_WRONLY, 0604);
  check("openat, created",
        fd >= 0 && fstat(fd, &st) == 0 && (st.st_mode & 0777) == 0604);
  close(fd);
  fd = open(dir, O_TMPFILE | O_RDWR, 0600);
  check("open, O_TMPFILE",
        (fd >= 0 && fstat(fd, &st) == 0 && (st.st_mode & 0777) == 0600) ||
            (fd == -1 && errno == EOPNOTSUPP));
  if (fd >= 0)
    close(fd);
  fd = __open_2(path, O_RDONLY);
  check("__open_2", fd >= 0 && close(fd) == 0);
  fd = __openat_2(dfd, "f", O_RDONLY);
  check("__openat_2", fd >= 0 && close(fd) == 0);
  close(dfd);
  unlinkat(AT_FDCWD, path, 0);
  snprintf(path, sizeof path, "%s/g", dir);
  unlink(path);
  rmdir(dir);
}

static int cancel_pipe[2];
static volatile int blocked;

static void *block_in_read(void *arg) {
  (void)arg;
  char c;
  blocked = 1;
  /* Nothing comes: only a cancellation ends it. */
  if (read(cancel_pipe[0], &c, 1) >= 0)
    blocked = 2;
  return NULL;
}

static void cancellation(void) {
  if (pipe(cancel_pipe) != 0)
    exit(2);
  pthread_t t;
  pthread_create(&t, NULL, block_in_read, NULL);
  while (!blocked)
    usleep(1000);
  usleep(50000); /* in read by now */
  double start = now();
  pthread_cancel(t);
  void *ret = NULL;
  pthread_join(t, &ret);
  check("another thread's cancel",
        ret == PTHREAD_CANCELED && now() - start < 2.0);

  /* A process of one thread that cancels itself: its next recv is a
   * cancellation point. A program of its own (this one again, as `direct_calls
   * self-cancel`), so that its profiler has started on one thread. */
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    execl("/proc/self/exe", "direct_calls", "self-cancel", (char *)NULL);
    _exit(2);
  }
  /* Cancelled, its thread was the application's last: the process ends
   * (the profiler's threads kept it alive, defunct, before 2026-12-06). */
  int status = 0;
  for (int i = 0; i < 1000 && waitpid(child, &status, WNOHANG) == 0; i++)
    usleep(10000);
  if (waitpid(child, &status, WNOHANG) == 0) {
    printf("self-cancelled program: still alive after 10 s\n");
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
  }
  printf("self-cancelled program: status %d\n", status);
  check("cancelling itself", WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* `direct_calls self-cancel`: exits 0 when cancelled at its recv, 3 when
 * the recv returned. */
static int self_cancel(void) {
  usleep(300000); /* the profiler's registry has counted this thread */
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0 ||
      send(sv[1], "x", 1, 0) != 1)
    return 2;
  pthread_cancel(pthread_self());
  char c;
  if (recv(sv[0], &c, 1, 0) != 1)
    syscall(SYS_exit_group, 4);
  /* Not cancelled. A raw exit: the _exit hook's last profile writes
   * files, and a cancellation point there would end the thread anyway. */
  syscall(SYS_exit_group, 3);
  return 3;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "self-cancel") == 0)
    return self_cancel();
  usleep(100000); /* the profiler has started its threads */
  results();
  file_results();
  long (*counted)(void) = (long (*)(void))dlsym(RTLD_DEFAULT, "cp_shim_calls");
  if (counted) {
    long before = counted();
    char buf[4];
    int p[2];
    if (pipe(p) != 0)
      return 2;
    for (int i = 0; i < 100; i++)
      if (write(p[1], "abcd", 4) != 4 || read(p[0], buf, 4) != 4)
        return 2;
    long seen = counted() - before;
    printf("the interposer behind saw %ld of 100 writes\n", seen);
    check("interposer behind ours", seen == 100);
  } else {
    check("interposer behind ours (not preloaded)", 0);
  }
  cancellation();
  return failures ? 1 : 0;
}
