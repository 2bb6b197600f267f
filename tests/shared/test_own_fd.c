/* Descriptors held beside the application (src/own_fd.c): ours are moved
 * above the numbers the application allocates from; when the application
 * closes one and puts its own file at the number, we leave that file open
 * and say so; whole-file reads and directory listings go through our
 * descriptor only. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "own_fd.h"
#include "test.h"

static char dir[64];

static void make_dir(void) {
  if (dir[0])
    return;
  snprintf(dir, sizeof dir, "/tmp/contprof-own-fd-XXXXXX");
  CHECK(mkdtemp(dir) != NULL);
}

static void test_ours_are_above_the_floor(void) {
  struct rlimit nofile;
  CHECK_EQ_INT(getrlimit(RLIMIT_NOFILE, &nofile), 0);
  int floor = cp_own_fd_floor();
  CHECK(floor >= 1);
  CHECK(nofile.rlim_cur == RLIM_INFINITY || (rlim_t)floor < nofile.rlim_cur);
  cp_own_fd own;
  struct stat st;
  int fd = cp_own_open(&own, AT_FDCWD, "/proc/self/maps", O_RDONLY, 0, &st);
  CHECK(fd >= floor);
  CHECK_EQ_INT(own.fd, fd);
  CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
  CHECK(own.ino == st.st_ino && own.dev == st.st_dev);
  /* The low number the open returned is free again. */
  int low = open("/dev/null", O_RDONLY | O_CLOEXEC);
  CHECK(low >= 0 && low < floor);
  close(low);
  CHECK(cp_own_fd_is_ours(&own));
  CHECK_EQ_INT(cp_own_close(&own), 0);
  CHECK_EQ_INT(own.fd, -1);
  CHECK(fcntl(fd, F_GETFD) < 0 && errno == EBADF);
}

/* Under a low limit the floor is half of it: still above the numbers a
 * program that uses a few descriptors gets. */
static void test_floor_follows_the_limit(void) {
  struct rlimit saved, low;
  CHECK_EQ_INT(getrlimit(RLIMIT_NOFILE, &saved), 0);
  low = saved;
  low.rlim_cur = 256;
  if (setrlimit(RLIMIT_NOFILE, &low) != 0) {
    printf("SKIP: cannot lower RLIMIT_NOFILE\n");
    return;
  }
  CHECK_EQ_INT(cp_own_fd_floor(), 128);
  cp_own_fd own;
  CHECK(cp_own_open(&own, AT_FDCWD, "/", O_RDONLY | O_DIRECTORY, 0, NULL) >=
        128);
  cp_own_close(&own);
  setrlimit(RLIMIT_NOFILE, &saved);
}

/* The application closes our descriptor and opens a socket of its own at
 * the number (a closefrom loop, then its own files): our close leaves it,
 * tells us (EBADF), and nothing of ours reaches it. */
static void test_replaced_number_is_left_alone(void) {
  make_dir();
  char path[128];
  snprintf(path, sizeof path, "%s/ours", dir);
  cp_own_fd own;
  CHECK(cp_own_open(&own, AT_FDCWD, path, O_WRONLY | O_CREAT | O_EXCL, 0600,
                    NULL) >= 0);
  int number = own.fd;
  close(number); /* the application's close loop */
  int sv[2];
  CHECK_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  CHECK_EQ_INT(dup2(sv[0], number), number);
  close(sv[0]);
  CHECK(!cp_own_fd_is_ours(&own));
  errno = 0;
  CHECK_EQ_INT(cp_own_close(&own), -1);
  CHECK_EQ_INT(errno, EBADF);
  /* The application's socket is still open and connected. */
  struct stat st;
  CHECK(fstat(number, &st) == 0 && S_ISSOCK(st.st_mode));
  CHECK_EQ_INT(write(sv[1], "x", 1), 1);
  char c = 0;
  CHECK_EQ_INT(read(number, &c, 1), 1);
  CHECK_EQ_INT(c, 'x');
  close(number);
  close(sv[1]);
  unlink(path);
}

static int count_name(const char *name, void *arg) {
  int *seen = arg;
  int i;
  if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
    seen[100]++;
  else if (sscanf(name, "f%d", &i) == 1 && i >= 0 && i < 100)
    seen[i]++;
  else
    seen[101]++;
  return 0;
}

static int stop_at_first(const char *name, void *arg) {
  (void)name;
  ++*(int *)arg;
  return 1;
}

/* Every entry once, "." and ".." left out, from the start whatever the
 * offset; a callback ends the listing early. */
static void test_list_dir(void) {
  char sub[128];
  make_dir();
  snprintf(sub, sizeof sub, "%s/list", dir);
  CHECK_EQ_INT(mkdir(sub, 0700), 0);
  for (int i = 0; i < 100; i++) {
    char p[160];
    snprintf(p, sizeof p, "%s/f%d", sub, i);
    int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    CHECK(fd >= 0);
    close(fd);
  }
  cp_own_fd own;
  CHECK(cp_own_open(&own, AT_FDCWD, sub, O_RDONLY | O_DIRECTORY, 0, NULL) >= 0);
  for (int round = 0; round < 2; round++) {
    int seen[102] = {0};
    CHECK_EQ_INT(cp_own_list_dir(&own, count_name, seen), 0);
    int once = 0;
    for (int i = 0; i < 100; i++)
      once += seen[i] == 1;
    CHECK_EQ_INT(once, 100);
    CHECK_EQ_INT(seen[100], 0);
    CHECK_EQ_INT(seen[101], 0);
  }
  int calls = 0;
  CHECK_EQ_INT(cp_own_list_dir(&own, stop_at_first, &calls), 0);
  CHECK_EQ_INT(calls, 1);
  cp_own_close(&own);
  for (int i = 0; i < 100; i++) {
    char p[160];
    snprintf(p, sizeof p, "%s/f%d", sub, i);
    unlink(p);
  }
  rmdir(sub);
}

/* A /proc file read whole (its size is 0 to fstat), and a file over the
 * bound refused. */
static void test_read_all(void) {
  cp_own_fd own;
  CHECK(cp_own_open(&own, AT_FDCWD, "/proc/self/maps", O_RDONLY, 0, NULL) >= 0);
  size_t len = 0;
  char *maps = cp_own_read_all(&own, (size_t)64 << 20, &len);
  CHECK(maps != NULL);
  if (maps) {
    CHECK_EQ_INT(strlen(maps), len);
    CHECK(len > 0 && maps[len - 1] == '\n');
    CHECK(strstr(maps, "[stack]") != NULL);
  }
  free(maps);
  errno = 0;
  CHECK(cp_own_read_all(&own, 64, &len) == NULL);
  CHECK_EQ_INT(errno, EFBIG);
  cp_own_close(&own);
}

static void cleanup(void) {
  if (dir[0])
    rmdir(dir);
}

TEST_MAIN(T(test_ours_are_above_the_floor), T(test_floor_follows_the_limit),
          T(test_replaced_number_is_left_alone), T(test_list_dir),
          T(test_read_all), T(cleanup))
