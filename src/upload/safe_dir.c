/* Trusted directories for the file sink and the spool (see safe_dir.h and
 * docs/security.md, "Output and spool directories"). */
#include "safe_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DIR_FLAGS (O_RDONLY | O_DIRECTORY | O_CLOEXEC)

/* A directory on the way: owned by root or by us, and either not writable by
 * group and others or sticky (like /tmp: others may add entries there but
 * cannot rename or remove ours). Another user could otherwise swap the next
 * component while we walk. */
static int parent_ok(const struct stat *st, uid_t euid, const char *path,
                     size_t path_len, char *why, size_t why_len) {
  if (st->st_uid != 0 && st->st_uid != euid) {
    snprintf(why, why_len,
             "%.*s, on the way to %s, is owned by uid %u (only root or uid %u "
             "may own it)",
             (int)path_len, path, path, (unsigned)st->st_uid, (unsigned)euid);
    return 0;
  }
  if ((st->st_mode & (S_IWGRP | S_IWOTH)) && !(st->st_mode & S_ISVTX)) {
    snprintf(why, why_len,
             "%.*s, on the way to %s, is writable by group or others "
             "without the sticky bit (mode %04o)",
             (int)path_len, path, path, (unsigned)(st->st_mode & 07777));
    return 0;
  }
  return 1;
}

/* The directory itself: ours and writable by us only, so nobody else can
 * plant, replace or remove a file in it. */
static int final_ok(const struct stat *st, uid_t euid, const char *path,
                    char *why, size_t why_len) {
  if (!S_ISDIR(st->st_mode)) {
    snprintf(why, why_len, "%s is not a directory", path);
    return 0;
  }
  if (st->st_uid != euid) {
    snprintf(why, why_len,
             "%s is owned by uid %u, not by this process's user (uid %u)", path,
             (unsigned)st->st_uid, (unsigned)euid);
    return 0;
  }
  if (st->st_mode & (S_IWGRP | S_IWOTH)) {
    snprintf(why, why_len, "%s is writable by group or others (mode %04o)",
             path, (unsigned)(st->st_mode & 07777));
    return 0;
  }
  return 1;
}

static int fail(int fd, int err, char *why, size_t why_len, const char *path,
                size_t path_len) {
  if (fd >= 0)
    close(fd);
  snprintf(why, why_len, "%.*s: %s", (int)path_len, path, strerror(err));
  errno = err;
  return -1;
}

static int refuse(int fd) {
  close(fd);
  errno = EPERM;
  return -1;
}

int cp_safe_dir_open(const char *path, char *why, size_t why_len) {
  uid_t euid = geteuid();
  if (!path || !*path) {
    snprintf(why, why_len, "the directory is an empty string");
    errno = ENOENT;
    return -1;
  }
  /* A relative path starts at the working directory: checked like any
   * directory on the way (its own ancestors are not: the process holds it
   * by inode, a rename above it changes nothing). */
  int fd = open(path[0] == '/' ? "/" : ".", DIR_FLAGS);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0)
    return fail(fd, errno, why, why_len, path[0] == '/' ? "/" : ".", 1);
  if (!parent_ok(&st, euid, path[0] == '/' ? "/" : ".", 1, why, why_len))
    return refuse(fd);
  const char *p = path;
  while (*p) {
    while (*p == '/')
      p++;
    if (!*p)
      break;
    const char *end = strchrnul(p, '/');
    size_t len = (size_t)(end - p), upto = (size_t)(end - path);
    char name[NAME_MAX + 1];
    if (len > NAME_MAX)
      return fail(fd, ENAMETOOLONG, why, why_len, path, upto);
    memcpy(name, p, len);
    name[len] = 0;
    p = end;
    if (strcmp(name, ".") == 0)
      continue;
    int next = openat(fd, name, DIR_FLAGS | O_NOFOLLOW);
    if (next < 0 && errno == ENOENT) {
      if (mkdirat(fd, name, 0700) != 0 && errno != EEXIST)
        return fail(fd, errno, why, why_len, path, upto);
      next = openat(fd, name, DIR_FLAGS | O_NOFOLLOW);
    }
    if (next < 0 && (errno == ELOOP || errno == ENOTDIR)) {
      /* A symbolic link is followed only when root or this user made it
       * (/var/run -> /run): in a directory that passed the checks nobody
       * else can have put it there or swap it. What it leads to is then
       * checked like any directory. */
      int err = errno;
      struct stat ls;
      if (fstatat(fd, name, &ls, AT_SYMLINK_NOFOLLOW) != 0 ||
          !S_ISLNK(ls.st_mode))
        return fail(fd, err == ELOOP ? ENOTDIR : err, why, why_len, path, upto);
      if (ls.st_uid != 0 && ls.st_uid != euid) {
        snprintf(why, why_len,
                 "%.*s is a symbolic link owned by uid %u (only links of "
                 "root or uid %u are followed)",
                 (int)upto, path, (unsigned)ls.st_uid, (unsigned)euid);
        return refuse(fd);
      }
      next = openat(fd, name, DIR_FLAGS);
    }
    if (next < 0)
      return fail(fd, errno, why, why_len, path, upto);
    close(fd);
    fd = next;
    if (fstat(fd, &st) != 0)
      return fail(fd, errno, why, why_len, path, upto);
    const char *rest = p;
    while (*rest == '/')
      rest++;
    if (*rest && !parent_ok(&st, euid, path, upto, why, why_len))
      return refuse(fd);
  }
  if (!final_ok(&st, euid, path, why, why_len))
    return refuse(fd);
  return fd;
}

int cp_safe_dir_init(cp_safe_dir *d, const char *path) {
  memset(d, 0, sizeof *d);
  d->own.fd = -1;
  d->path = strdup(path);
  return d->path ? 0 : -1;
}

/* Our descriptor if it still is ours, and a directory: the application may
 * have closed it and reused its number (own_fd.h). */
static int still_ours(const cp_safe_dir *d, struct stat *st) {
  return cp_own_fd_stat(&d->own, st) && S_ISDIR(st->st_mode);
}

int cp_safe_dir_get(cp_safe_dir *d, char *why, size_t why_len) {
  struct stat st;
  if (still_ours(d, &st)) {
    /* Owner and mode again: someone may have opened it up since. */
    if (!final_ok(&st, geteuid(), d->path, why, why_len))
      return errno = EPERM, -1;
    return d->own.fd;
  }
  d->own.fd = -1; /* gone, or someone else's now: never close it */
  int fd = cp_safe_dir_open(d->path, why, why_len);
  if (fd < 0)
    return -1;
  /* Kept between periods: above the application's numbers (own_fd.h). */
  if (cp_own_adopt(&d->own, fd) < 0) {
    snprintf(why, why_len, "%s: %s", d->path, strerror(errno));
    return -1;
  }
  return d->own.fd;
}

void cp_safe_dir_release(cp_safe_dir *d) {
  cp_own_close(&d->own); /* only while it is still ours */
  free(d->path);
  d->path = NULL;
}

int cp_safe_dir_create_file(int dirfd, const char *name, cp_own_fd *own) {
  const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW;
  int fd = cp_own_open(own, dirfd, name, flags, 0600, NULL);
  if (fd < 0 && errno == EEXIST && unlinkat(dirfd, name, 0) == 0)
    fd = cp_own_open(own, dirfd, name, flags, 0600, NULL);
  return fd;
}
