/* A program that takes over every descriptor number 3..63 while it is being
 * profiled (test_unwind_descriptors.c): after the profiler has unwound its
 * stacks, it closes 3..63, puts its own socket pairs and files on those
 * numbers, then computes (recursion of varying depth in fresh threads, in a
 * signal handler of its own, with allocations) and checks that no byte
 * arrived on its sockets, its files are unchanged (content and offset) and
 * every descriptor is still the one it opened. Prints "descriptors intact"
 * and exits 0 when so; prints what differs and exits 3 otherwise.
 *
 *   fd_takeover_workload DIR SECONDS    (DIR: where to create its files)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LOW_FD 3
#define HIGH_FD 63
#define FILE_BYTES 32

enum { KIND_NONE, KIND_SOCKET, KIND_FILE };
static struct {
  int kind;
  dev_t dev;
  ino_t ino;
  char content[FILE_BYTES];
} fds[HIGH_FD + 1];

static volatile uint64_t sink;

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Recursion through several functions (new return addresses for the
 * unwinder's caches), allocating on the way down. */
__attribute__((noinline)) static uint64_t takeover_leaf(uint64_t x) {
  for (int i = 0; i < 2000; i++)
    x = x * 6364136223846793005ull + 1442695040888963407ull;
  return x;
}
__attribute__((noinline)) static uint64_t takeover_b(int depth, uint64_t x);
__attribute__((noinline)) static uint64_t takeover_a(int depth, uint64_t x) {
  if (depth <= 0)
    return takeover_leaf(x);
  char *p = depth % 8 == 0 ? malloc(4096 + (size_t)(x & 4095)) : NULL;
  if (p)
    p[0] = (char)x;
  uint64_t r = takeover_b(depth - 1, x + 1) + (p ? (uint64_t)p[0] : 0);
  free(p);
  return r;
}
__attribute__((noinline)) static uint64_t takeover_b(int depth, uint64_t x) {
  volatile char pad[64 + (depth & 7) * 16]; /* frames of varying size */
  pad[0] = (char)x;
  return depth <= 0 ? takeover_leaf(x) : takeover_a(depth - 1, x ^ pad[0]);
}

/* The application's own signal handler computes too: samples taken in it
 * unwind through the kernel's signal frame. */
static void on_usr1(int sig) {
  (void)sig;
  sink += takeover_a(12, sink);
}

/* Computes for `ns` nanoseconds at depths 1..40, raising SIGUSR1 now and
 * then. */
__attribute__((noinline)) static void takeover_work(uint64_t ns) {
  uint64_t end = mono_ns() + ns;
  for (int i = 0; mono_ns() < end; i++) {
    sink += takeover_a(1 + i % 40, (uint64_t)i);
    if (i % 16 == 0)
      raise(SIGUSR1);
  }
}

static void *worker(void *arg) {
  takeover_work(*(uint64_t *)arg);
  return NULL;
}

static int remember(int fd, int kind) {
  struct stat st;
  if (fd < 0 || fd > HIGH_FD || fstat(fd, &st) != 0)
    return -1;
  fds[fd].kind = kind;
  fds[fd].dev = st.st_dev;
  fds[fd].ino = st.st_ino;
  return 0;
}

/* Fills the numbers LOW_FD..HIGH_FD with socket pairs and files in DIR. */
static int take_over(const char *dir) {
  for (int fd = LOW_FD; fd <= HIGH_FD; fd++)
    close(fd);
  for (int n = 0;; n++) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
      return -1;
    if (sv[0] > HIGH_FD || sv[1] > HIGH_FD) {
      close(sv[0]);
      close(sv[1]);
      return 0;
    }
    remember(sv[0], KIND_SOCKET);
    remember(sv[1], KIND_SOCKET);
    char path[512];
    snprintf(path, sizeof path, "%s/file-%d", dir, n);
    int f = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
    if (f < 0)
      return -1;
    if (f > HIGH_FD) {
      close(f);
      return 0;
    }
    char content[FILE_BYTES];
    memset(content, 'a' + n % 26, sizeof content);
    if (pwrite(f, content, sizeof content, 0) != (ssize_t)sizeof content)
      return -1;
    memcpy(fds[f].content, content, sizeof content);
    remember(f, KIND_FILE);
  }
}

/* Prints each descriptor that changed; returns how many did. */
static int check_descriptors(void) {
  int bad = 0, sockets = 0, files = 0;
  for (int fd = LOW_FD; fd <= HIGH_FD; fd++) {
    if (fds[fd].kind == KIND_NONE)
      continue;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_dev != fds[fd].dev ||
        st.st_ino != fds[fd].ino) {
      printf("fd %d: closed or replaced\n", fd);
      bad++;
      continue;
    }
    if (fds[fd].kind == KIND_SOCKET) {
      char b[64];
      ssize_t n = recv(fd, b, sizeof b, MSG_DONTWAIT);
      if (n != -1 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
        printf("fd %d: socket received %zd bytes\n", fd, n);
        bad++;
      }
      sockets++;
    } else {
      char b[FILE_BYTES + 16];
      ssize_t n = pread(fd, b, sizeof b, 0);
      off_t off = lseek(fd, 0, SEEK_CUR);
      if (n != FILE_BYTES || memcmp(b, fds[fd].content, FILE_BYTES) != 0 ||
          off != 0) {
        printf("fd %d: file changed (%zd bytes, offset %lld)\n", fd, n,
               (long long)off);
        bad++;
      }
      files++;
    }
  }
  printf("info %d sockets, %d files checked\n", sockets, files);
  return bad;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: fd_takeover_workload DIR SECONDS\n");
    return 2;
  }
  uint64_t ns = (uint64_t)(atof(argv[2]) * 1e9);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sigaction(SIGUSR1, &sa, NULL);
  /* The profiler samples (and unwinds) this first, with its descriptors as
   * it opened them. */
  takeover_work(200000000ull);
  if (take_over(argv[1]) != 0) {
    perror("take over descriptors");
    return 2;
  }
  fflush(stdout);
  /* Fresh threads: their first samples take the unwinder's slower paths. */
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    pthread_create(&t[i], NULL, worker, &ns);
  takeover_work(ns);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  int bad = check_descriptors();
  if (bad) {
    printf("%d descriptors changed\n", bad);
    return 3;
  }
  printf("descriptors intact\n");
  return 0;
}
