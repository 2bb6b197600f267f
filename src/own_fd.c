/* Descriptors held beside the application (see own_fd.h). */
#include "own_fd.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <unistd.h>

int cp_own_fd_floor(void) {
  struct rlimit nofile = {1024, 1024};
  getrlimit(RLIMIT_NOFILE, &nofile);
  rlim_t soft =
      nofile.rlim_cur == RLIM_INFINITY ? (rlim_t)1 << 20 : nofile.rlim_cur;
  if (soft >= 2 * (rlim_t)FD_SETSIZE)
    return FD_SETSIZE;
  return (int)(soft / 2);
}

/* cp_own_adopt, with fd's fstat left in *st. */
static int adopt(cp_own_fd *o, int fd, struct stat *st) {
  o->fd = -1;
  if (fd < 0)
    return -1;
  if (fstat(fd, st) != 0) {
    int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  int floor = cp_own_fd_floor();
  if (fd < floor) {
    int high = fcntl(fd, F_DUPFD_CLOEXEC, floor);
    if (high >= 0) {
      /* The low number is closed only if it is still the file: between
       * the open and here the application may have closed it and taken
       * the number. */
      cp_own_fd low = {.fd = fd, .dev = st->st_dev, .ino = st->st_ino};
      if (cp_own_fd_is_ours(&low))
        close(fd);
      fd = high;
    }
  }
  o->fd = fd;
  o->dev = st->st_dev;
  o->ino = st->st_ino;
  return fd;
}

int cp_own_adopt(cp_own_fd *o, int fd) {
  struct stat st;
  return adopt(o, fd, &st);
}

int cp_own_open(cp_own_fd *o, int dirfd, const char *path, int flags,
                mode_t mode, struct stat *st) {
  struct stat own_st;
  return adopt(o, openat(dirfd, path, flags | O_CLOEXEC, mode),
               st ? st : &own_st);
}

int cp_own_open_regular(cp_own_fd *o, const char *path, struct stat *st) {
  if (stat(path, st) != 0 || !S_ISREG(st->st_mode))
    return -1;
  if (cp_own_open(o, AT_FDCWD, path, O_RDONLY | O_NOCTTY | O_NONBLOCK, 0, st) <
      0)
    return -1;
  if (!S_ISREG(st->st_mode)) {
    cp_own_close(o);
    return -1;
  }
  return o->fd;
}

int cp_own_fd_stat(const cp_own_fd *o, struct stat *st) {
  return o->fd >= 0 && fstat(o->fd, st) == 0 && st->st_dev == o->dev &&
         st->st_ino == o->ino;
}

int cp_own_fd_is_ours(const cp_own_fd *o) {
  struct stat st;
  return cp_own_fd_stat(o, &st);
}

int cp_own_close(cp_own_fd *o) {
  int rc = 0;
  if (o->fd >= 0 && cp_own_fd_is_ours(o))
    rc = close(o->fd);
  else if (o->fd >= 0)
    rc = -1, errno = EBADF;
  o->fd = -1;
  return rc;
}

char *cp_own_read_all(const cp_own_fd *o, size_t max, size_t *len) {
  size_t cap = max < 16384 ? max : 16384, n = 0;
  char *buf = malloc(cap + 1);
  while (buf) {
    ssize_t got = pread(o->fd, buf + n, cap - n, (off_t)n);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      break;
    if (got == 0) {
      buf[n] = '\0';
      *len = n;
      return buf;
    }
    n += (size_t)got;
    if (n == cap) {
      if (cap >= max) {
        errno = EFBIG;
        break;
      }
      size_t grown = cap * 2 > max ? max : cap * 2;
      char *more = realloc(buf, grown + 1);
      if (!more)
        break;
      buf = more;
      cap = grown;
    }
  }
  free(buf);
  return NULL;
}

int cp_own_list_dir(const cp_own_fd *o,
                    int (*each)(const char *name, void *arg), void *arg) {
  if (lseek(o->fd, 0, SEEK_SET) != 0)
    return -1;
  _Alignas(struct dirent64) char buf[8192];
  for (;;) {
    ssize_t n = getdents64(o->fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return n < 0 ? -1 : 0;
    for (ssize_t at = 0; at < n;) {
      const struct dirent64 *e = (const void *)(buf + at);
      at += e->d_reclen;
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
        continue;
      if (each(e->d_name, arg))
        return 0;
    }
  }
}
