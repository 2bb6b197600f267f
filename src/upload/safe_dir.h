/* A trusted directory for the files contprof writes (the output directory of
 * the file sink, the spool directory of the HTTP sinks): opened once, walked
 * component by component without following planted symbolic links, created
 * 0700 where missing, and refused unless nobody but this user (and root) can
 * add, replace or remove files in it. The rules are in docs/security.md
 * ("Output and spool directories"). Files are then made relative to the
 * descriptor (openat O_EXCL|O_NOFOLLOW, linkat, renameat, unlinkat), so the
 * path is resolved once and its length does not matter. Not thread-safe:
 * each owner serialises its calls. */
#ifndef CP_SAFE_DIR_H
#define CP_SAFE_DIR_H

#include <stddef.h>
#include <sys/types.h>

#include "own_fd.h"

typedef struct cp_safe_dir {
  cp_own_fd own; /* O_DIRECTORY|O_CLOEXEC, fd -1 until opened */
  char *path;    /* as configured: messages and re-opening */
} cp_safe_dir;

/* Remembers path (not opened yet). 0, or -1 when out of memory. */
int cp_safe_dir_init(cp_safe_dir *d, const char *path);

/* The directory's descriptor: opened (and created) on first use, opened
 * again when the application closed ours or put another file at its number
 * (checked by device and inode), and its owner and mode checked again on
 * every call (one fstat). -1 with errno set and a sentence for the caller's
 * one `contprof:` line in why. */
int cp_safe_dir_get(cp_safe_dir *d, char *why, size_t why_len);

/* Closes the descriptor if it is still ours; frees the path. */
void cp_safe_dir_release(cp_safe_dir *d);

/* The walk itself: a new descriptor for path under the rules, or -1 with
 * errno and why. */
int cp_safe_dir_open(const char *path, char *why, size_t why_len);

/* Creates name in dirfd for writing, mode 0600, with O_EXCL|O_NOFOLLOW, as
 * a descriptor of ours (own_fd.h: close it with cp_own_close). A file
 * already there (left by a process that died, or planted: the directory is
 * trusted, so only this user or root can have put it there) is unlinked,
 * never followed, and the creation tried once more. Returns own->fd or -1. */
int cp_safe_dir_create_file(int dirfd, const char *name, cp_own_fd *own);

#endif
