/* Thread names (see thread_names.h): the names bindings gave, in a bounded
 * table under one mutex, and the kernel's for the others. */
#include "thread_names.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "contprof/profiler.h"
#include "own_fd.h"

#define MAX_NAMED_THREADS 4096

static struct {
  pthread_mutex_t lock;
  size_t n;
  struct {
    pid_t tid;
    char name[64];
  } named[MAX_NAMED_THREADS];
} names = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void read_thread_name(pid_t tid, char *buf, size_t len) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/task/%d/comm", (int)tid);
  buf[0] = 0;
  cp_own_fd own;
  if (cp_own_open(&own, AT_FDCWD, path, O_RDONLY, 0, NULL) < 0)
    return;
  ssize_t n = pread(own.fd, buf, len - 1, 0);
  cp_own_close(&own);
  if (n <= 0)
    return;
  buf[n] = 0;
  char *nl = strchr(buf, '\n');
  if (nl)
    *nl = 0;
}

int cp_thread_names_set(pid_t tid, const char *name) {
  if (tid <= 0)
    return CONTPROF_ERR_INVALID;
  pthread_mutex_lock(&names.lock);
  size_t i = 0;
  while (i < names.n && names.named[i].tid != tid)
    i++;
  int rc = 0;
  if (!name) {
    if (i < names.n)
      names.named[i] = names.named[--names.n];
  } else if (i == names.n && names.n == MAX_NAMED_THREADS) {
    rc = CONTPROF_ERR_LABELS_FULL;
  } else {
    if (i == names.n)
      names.n++;
    names.named[i].tid = tid;
    snprintf(names.named[i].name, sizeof names.named[i].name, "%s", name);
  }
  pthread_mutex_unlock(&names.lock);
  return rc;
}

void cp_thread_name_of(pid_t tid, char *buf, size_t len) {
  pthread_mutex_lock(&names.lock);
  for (size_t i = 0; i < names.n; i++)
    if (names.named[i].tid == tid) {
      snprintf(buf, len, "%s", names.named[i].name);
      pthread_mutex_unlock(&names.lock);
      return;
    }
  pthread_mutex_unlock(&names.lock);
  read_thread_name(tid, buf, len);
}

void cp_thread_names_after_fork_child(void) {
  pthread_mutex_init(&names.lock, NULL);
  names.n = 0;
}
