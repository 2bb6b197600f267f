/* The bounded spool of an HTTP sink (see spool.h). Files are named
 * <sink>.<order, 20 digits>.<pid>.<n>.spool so that a directory listing
 * sorts them in delivery order and names the process that owns them. The
 * directory is a trusted one (safe_dir.h) and every file is made, read,
 * renamed and removed relative to its descriptor. A file read back is input
 * like any other: it must be a regular file of this user that nobody else
 * can write, of bounded size, and its target a plain path
 * (cp_spool_target_ok), else it is removed (docs/security.md, "Spool
 * files"). */
#include "spool.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "random.h"
#include "safe_dir.h"

#define SPOOL_MAGIC "CPSPOOL1"
#define SPOOL_MAX_FILE ((size_t)1 << 30)

struct cp_spool {
  cp_safe_dir dir; /* dir.path NULL: memory only */
  char *sink;
  size_t max_items, max_bytes;
  cp_spool_item *head, *tail;
  size_t count, bytes;  /* queued */
  cp_spool_item *taken; /* being sent, NULL otherwise */
  int taken_doomed;     /* dropped if it comes back */
  uint64_t dropped;
  uint64_t next_file;
  int dir_error_reported;
  /* Whose files: "PID-TOKEN" with a lock file of that name held (flock) for
   * the spool's life, else "PID" (no lock could be made: liveness is then
   * kill(PID, 0), which is wrong across PID namespaces). */
  char tag[40];
  cp_own_fd lock;
  char lock_name[320];
};

cp_spool_item *cp_spool_item_new(const char *target, uint64_t order) {
  cp_spool_item *it = calloc(1, sizeof *it);
  if (!it || !(it->target = strdup(target))) {
    free(it);
    return NULL;
  }
  it->order = order;
  it->bytes = strlen(target) + 64;
  return it;
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

int cp_spool_item_add_part(cp_spool_item *it, const char *name,
                           const char *filename, const char *content_type,
                           const uint8_t *data, size_t len) {
  if (it->nparts == CP_SPOOL_MAX_PARTS)
    return -1;
  cp_spool_part *p = &it->parts[it->nparts];
  p->name = strdup(name);
  p->filename = dup_or_null(filename);
  p->content_type = dup_or_null(content_type);
  p->data = malloc(len ? len : 1);
  if (!p->name || (filename && !p->filename) ||
      (content_type && !p->content_type) || !p->data) {
    free(p->name);
    free(p->filename);
    free(p->content_type);
    free(p->data);
    memset(p, 0, sizeof *p);
    return -1;
  }
  if (len)
    memcpy(p->data, data, len);
  p->len = len;
  it->nparts++;
  it->bytes += len + 64;
  return 0;
}

void cp_spool_item_free(cp_spool_item *it) {
  if (!it)
    return;
  for (size_t i = 0; i < it->nparts; i++) {
    free(it->parts[i].name);
    free(it->parts[i].filename);
    free(it->parts[i].content_type);
    free(it->parts[i].data);
  }
  free(it->target);
  free(it->file);
  free(it);
}

/* ---- files ----------------------------------------------------------------
 */

typedef struct wbuf {
  uint8_t *p;
  size_t len, cap;
  int failed;
} wbuf;

static void put(wbuf *w, const void *data, size_t len) {
  if (w->failed)
    return;
  if (w->len + len > w->cap) {
    size_t cap = w->cap ? w->cap : 4096;
    while (cap < w->len + len)
      cap *= 2;
    uint8_t *grown = realloc(w->p, cap);
    if (!grown) {
      w->failed = 1;
      return;
    }
    w->p = grown;
    w->cap = cap;
  }
  memcpy(w->p + w->len, data, len);
  w->len += len;
}

static void put_bytes(wbuf *w, const void *data, size_t len) {
  uint64_t n = data ? len : UINT64_MAX; /* UINT64_MAX: NULL string */
  put(w, &n, sizeof n);
  if (data)
    put(w, data, len);
}

static void put_str(wbuf *w, const char *s) {
  put_bytes(w, s, s ? strlen(s) : 0);
}

int cp_spool_encode(const cp_spool_item *it, uint8_t **out, size_t *len) {
  wbuf w = {0};
  put(&w, SPOOL_MAGIC, 8);
  put_str(&w, it->target);
  put(&w, &it->order, sizeof it->order);
  uint64_t n = it->nparts;
  put(&w, &n, sizeof n);
  for (size_t i = 0; i < it->nparts; i++) {
    put_str(&w, it->parts[i].name);
    put_str(&w, it->parts[i].filename);
    put_str(&w, it->parts[i].content_type);
    put_bytes(&w, it->parts[i].data, it->parts[i].len);
  }
  if (w.failed) {
    free(w.p);
    return errno = ENOMEM, -1;
  }
  *out = w.p;
  *len = w.len;
  return 0;
}

/* The spool directory's descriptor, or -1 (said once, until a file is
 * written again). */
static int spool_dir(cp_spool *s) {
  if (!s->dir.path)
    return -1;
  char why[1024];
  int fd = cp_safe_dir_get(&s->dir, why, sizeof why);
  if (fd < 0 && !s->dir_error_reported) {
    s->dir_error_reported = 1;
    cp_error("%s: cannot use the spool directory: %s; undelivered profiles "
             "stay in memory only",
             s->sink, why);
  }
  return fd;
}

static void remove_file(cp_spool *s, const cp_spool_item *it) {
  int dfd;
  if (it->file && (dfd = spool_dir(s)) >= 0)
    unlinkat(dfd, it->file, 0);
}

/* Written under a temporary name (O_EXCL|O_NOFOLLOW) and renamed into place:
 * a reader never sees half a file. */
static int write_file(int dfd, const char *name, const uint8_t *p, size_t len) {
  char tmp[320];
  snprintf(tmp, sizeof tmp, "%s.tmp", name);
  cp_own_fd own;
  int fd = cp_safe_dir_create_file(dfd, tmp, &own);
  if (fd < 0)
    return -1;
  int err = 0;
  while (len && !err) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      err = n == 0 ? ENOSPC : errno;
      break;
    }
    p += n;
    len -= (size_t)n;
  }
  if (!err && fsync(fd) != 0)
    err = errno;
  if (cp_own_close(&own) != 0 && !err)
    err = errno;
  if (!err && renameat(dfd, tmp, dfd, name) != 0)
    err = errno;
  if (err) {
    unlinkat(dfd, tmp, 0);
    return errno = err, -1;
  }
  return 0;
}

static void persist(cp_spool *s, cp_spool_item *it) {
  if (!s->dir.path || it->file)
    return;
  char name[256];
  snprintf(name, sizeof name, "%s.%020" PRIu64 ".%s.%" PRIu64 ".spool", s->sink,
           it->order, s->tag, s->next_file++);
  uint8_t *data = NULL;
  size_t len = 0;
  int dfd = spool_dir(s);
  if (dfd < 0)
    return;
  if (cp_spool_encode(it, &data, &len) == 0 &&
      write_file(dfd, name, data, len) == 0) {
    it->file = strdup(name);
    if (!it->file)
      unlinkat(dfd, name, 0);
    s->dir_error_reported = 0;
  } else if (!s->dir_error_reported) {
    s->dir_error_reported = 1;
    cp_error("%s: cannot write to the spool directory %s: %s; undelivered "
             "profiles stay in memory only",
             s->sink, s->dir.path, strerror(errno));
  }
  free(data);
}

typedef struct rbuf {
  const uint8_t *p;
  size_t len, pos;
  int failed;
} rbuf;

static void get(rbuf *r, void *out, size_t len) {
  if (r->failed || r->len - r->pos < len) {
    r->failed = 1;
    memset(out, 0, len);
    return;
  }
  memcpy(out, r->p + r->pos, len);
  r->pos += len;
}

/* A malloc'd copy (NUL-terminated) or NULL for a NULL string; *isnull. */
static uint8_t *get_bytes(rbuf *r, size_t *len, int *isnull) {
  uint64_t n;
  get(r, &n, sizeof n);
  *isnull = 0;
  if (r->failed)
    return NULL;
  if (n == UINT64_MAX) {
    *isnull = 1;
    return NULL;
  }
  if (n > r->len - r->pos) {
    r->failed = 1;
    return NULL;
  }
  uint8_t *out = malloc(n + 1);
  if (!out) {
    r->failed = 1;
    return NULL;
  }
  memcpy(out, r->p + r->pos, n);
  out[n] = 0;
  r->pos += n;
  *len = n;
  return out;
}

int cp_spool_target_ok(const char *target) {
  if (!*target)
    return 1; /* the base URL alone: Datadog's agentless intake */
  if (target[0] != '/' || target[1] == '/')
    return 0; /* "@host/x", ".evil.com/x", "//host/x": another host */
  static const char allowed[] = "-._~!$&'()*+,;=:/?";
  size_t n = 0;
  for (const char *p = target; *p; p++, n++) {
    unsigned char c = (unsigned char)*p;
    if (n >= CP_SPOOL_MAX_TARGET)
      return 0;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
        (c >= '0' && c <= '9') || strchr(allowed, c))
      continue;
    if (c == '%' && isxdigit((unsigned char)p[1]) &&
        isxdigit((unsigned char)p[2]))
      continue; /* the two digits pass as alphanumerics */
    return 0;   /* '@', '\\', '#', spaces, controls, non-ASCII */
  }
  return 1;
}

/* Part names, file names and content types go into the multipart headers
 * of the body: printable ASCII without quotes or backslashes. */
static int header_word_ok(const char *s, size_t len) {
  if (!s)
    return 1;
  if (strlen(s) != len || len > 256)
    return 0;
  for (; *s; s++)
    if (*s < 0x20 || *s > 0x7e || *s == '"' || *s == '\\')
      return 0;
  return 1;
}

cp_spool_item *cp_spool_parse(const uint8_t *buf, size_t buf_len) {
  rbuf r = {buf, buf_len, 0, 0};
  char magic[8];
  get(&r, magic, 8);
  cp_spool_item *it = NULL;
  size_t len = 0;
  int isnull;
  char *target = NULL;
  if (!r.failed && memcmp(magic, SPOOL_MAGIC, 8) == 0)
    target = (char *)get_bytes(&r, &len, &isnull);
  uint64_t order = 0, nparts = 0;
  get(&r, &order, sizeof order);
  get(&r, &nparts, sizeof nparts);
  /* The target is appended to the sink's base URL, with its credentials:
   * only a path on that host. */
  if (target && !r.failed && nparts <= CP_SPOOL_MAX_PARTS &&
      strlen(target) == len && cp_spool_target_ok(target))
    it = cp_spool_item_new(target, order);
  for (uint64_t i = 0; it && i < nparts; i++) {
    int n1, n2, n3, n4;
    size_t l1 = 0, l2 = 0, l3 = 0, dlen = 0;
    char *name = (char *)get_bytes(&r, &l1, &n1);
    char *filename = (char *)get_bytes(&r, &l2, &n2);
    char *type = (char *)get_bytes(&r, &l3, &n3);
    uint8_t *d = get_bytes(&r, &dlen, &n4);
    if (r.failed || !name || n4 || !header_word_ok(name, l1) ||
        !header_word_ok(filename, l2) || !header_word_ok(type, l3) ||
        cp_spool_item_add_part(it, name, filename, type, d, dlen) != 0) {
      cp_spool_item_free(it);
      it = NULL;
    }
    free(name);
    free(filename);
    free(type);
    free(d);
  }
  if (it && r.pos != r.len) {
    cp_spool_item_free(it);
    it = NULL;
  }
  free(target);
  return it;
}

/* Reads the spool file name in dfd. NULL when it is refused: *unsafe set
 * when the file itself is not one this user wrote (a link, a FIFO or
 * device, another owner, writable by others, too large), clear when its
 * content is malformed or its target not a plain path, -1 when it could not
 * be read whole (it stays for a later start). Nothing is opened
 * before it is known to be a regular file: opening a FIFO would block, a
 * device could act. */
static cp_spool_item *read_item(const cp_spool *s, int dfd, const char *name,
                                int *unsafe) {
  uint64_t max = s->max_bytes + ((size_t)1 << 20);
  if (max > SPOOL_MAX_FILE)
    max = SPOOL_MAX_FILE;
  uid_t euid = geteuid();
  struct stat ls, st;
  *unsafe = 1;
  if (fstatat(dfd, name, &ls, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(ls.st_mode))
    return NULL;
  cp_own_fd own;
  int fd = cp_own_open(&own, dfd, name,
                       O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0, &st);
  if (fd < 0)
    return NULL;
  uint8_t *data = NULL;
  if (!S_ISREG(st.st_mode) || st.st_ino != ls.st_ino ||
      st.st_dev != ls.st_dev || st.st_uid != euid ||
      (st.st_mode & (S_IWGRP | S_IWOTH)) || st.st_size < 0 ||
      (uint64_t)st.st_size > max || !(data = malloc((size_t)st.st_size + 1))) {
    cp_own_close(&own);
    return NULL;
  }
  *unsafe = 0;
  size_t got = 0;
  while (got < (size_t)st.st_size) {
    ssize_t n = pread(fd, data + got, (size_t)st.st_size - got, (off_t)got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    got += (size_t)n;
  }
  if (cp_own_close(&own) != 0) {
    /* The number became another file while we read: what was read may be
     * its. The spool file stays for the next start. */
    free(data);
    *unsafe = -1;
    return NULL;
  }
  cp_spool_item *it = cp_spool_parse(data, got);
  free(data);
  return it;
}

static void drop_oldest(cp_spool *s) {
  cp_spool_item *it = s->head;
  s->head = it->next;
  if (!s->head)
    s->tail = NULL;
  s->count--;
  s->bytes -= it->bytes;
  s->dropped++;
  remove_file(s, it);
  cp_spool_item_free(it);
}

static int over_bounds(const cp_spool *s, size_t add_items, size_t add_bytes) {
  size_t items = s->count + (s->taken ? 1 : 0) + add_items;
  size_t bytes = s->bytes + (s->taken ? s->taken->bytes : 0) + add_bytes;
  return items > s->max_items || bytes > s->max_bytes;
}

size_t cp_spool_push(cp_spool *s, cp_spool_item *it) {
  size_t dropped = 0;
  while (s->head && over_bounds(s, 1, it->bytes)) {
    drop_oldest(s);
    dropped++;
  }
  if (s->taken && over_bounds(s, 1, it->bytes))
    s->taken_doomed = 1; /* counted when it fails */
  it->next = NULL;
  if (s->tail)
    s->tail->next = it;
  else
    s->head = it;
  s->tail = it;
  s->count++;
  s->bytes += it->bytes;
  return dropped;
}

static int name_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

typedef struct {
  const char *sink;
  char **names;
  size_t n, cap;
} spool_names;

/* Keeps name if it is one of the sink's spool files. */
static int add_spool_name(const char *name, void *arg) {
  spool_names *l = arg;
  size_t len = strlen(name), prefix = strlen(l->sink);
  if (len < prefix + 7 || strncmp(name, l->sink, prefix) != 0 ||
      name[prefix] != '.' ||
      (strcmp(name + len - 6, ".spool") && strcmp(name + len - 5, ".lock")))
    return 0;
  char **grown = cp_grow_array(l->names, &l->cap, l->n + 1, sizeof *grown);
  if (!grown || !(grown[l->n] = strdup(name))) {
    l->names = grown ? grown : l->names;
    return 1;
  }
  l->names = grown;
  l->n++;
  return 0;
}

/* The lock file of the owner tagged "pid-token". */
static void lock_file_name(const cp_spool *s, int pid, const char *token,
                           char *out, size_t len) {
  snprintf(out, len, "%s.%d-%s.lock", s->sink, pid, token);
}

/* Whether the owner of a file named with pid (and token, "" for a name
 * without one) still runs. With a token: its lock file is held (flock),
 * whatever PID namespace it runs in; one found free is the owner gone and
 * is removed. Without (older files, or an owner that could not make its
 * lock): kill(pid, 0), true for this process's own files only when an
 * earlier spool of this process left them. */
static int owner_alive(cp_spool *s, int dfd, int pid, const char *token) {
  if (!*token)
    return pid != getpid() && (kill(pid, 0) == 0 || errno == EPERM);
  char name[320];
  lock_file_name(s, pid, token, name, sizeof name);
  if (s->lock.fd >= 0 && strcmp(name, s->lock_name) == 0)
    return 1; /* ours: not adopted again */
  int fd = openat(dfd, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return 0; /* never made, or removed by its owner as it stopped */
  struct stat st;
  int alive = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
              flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  if (!alive)
    unlinkat(dfd, name, 0);
  close(fd); /* releases the lock taken */
  return alive;
}

/* This spool's lock file, held while it lives (see owner_alive); s->tag
 * stays the pid alone when it cannot be made. */
static void take_owner_lock(cp_spool *s) {
  int dfd = spool_dir(s);
  if (dfd < 0)
    return;
  char token[17];
  snprintf(token, sizeof token, "%016" PRIx64, cp_random_u64());
  lock_file_name(s, (int)getpid(), token, s->lock_name, sizeof s->lock_name);
  if (cp_safe_dir_create_file(dfd, s->lock_name, &s->lock) < 0)
    return;
  if (flock(s->lock.fd, LOCK_EX | LOCK_NB) != 0) {
    cp_own_close(&s->lock);
    unlinkat(dfd, s->lock_name, 0);
    return;
  }
  snprintf(s->tag, sizeof s->tag, "%d-%s", (int)getpid(), token);
}

/* Adopts the files of processes that are gone (and of an earlier profiler
 * in this very process), claiming each with a rename so that two starting
 * processes never both deliver it. Files refused on reading are removed. */
static void adopt_files(cp_spool *s) {
  int dfd = spool_dir(s);
  if (dfd < 0)
    return;
  /* Its own descriptor for the listing, which moves the offset. */
  cp_own_fd list = CP_OWN_FD_NONE;
  spool_names found = {.sink = s->sink};
  if (cp_own_open(&list, dfd, ".", O_RDONLY | O_DIRECTORY, 0, NULL) < 0)
    return;
  cp_own_list_dir(&list, add_spool_name, &found);
  cp_own_close(&list);
  char **names = found.names;
  size_t n = found.n, prefix = strlen(s->sink);
  if (n > 1) /* names is NULL when the directory had none */
    qsort(names, n, sizeof *names, name_cmp);
  size_t adopted = 0, unsafe_files = 0, bad = 0, dropped = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t order, num;
    int pid, unsafe, at = 0;
    char token[17] = "";
    const char *rest = names[i] + prefix + 1;
    size_t nlen = strlen(names[i]);
    if (strcmp(names[i] + nlen - 5, ".lock") == 0) {
      /* A lock file whose owner is gone without removing it (_exit, a
       * crash), its spool files adopted or none: removed if free. */
      if (sscanf(rest, "%d-%16[0-9a-f].lock", &pid, token) == 2)
        owner_alive(s, dfd, pid, token);
      goto next;
    }
    if (sscanf(rest, "%20" SCNu64 ".%d%n", &order, &pid, &at) != 2 ||
        (rest[at] == '-' &&
         sscanf(rest + at, "-%16[0-9a-f].%" SCNu64, token, &num) != 2) ||
        (rest[at] != '-' && sscanf(rest + at, ".%" SCNu64, &num) != 1))
      goto next;
    if (owner_alive(s, dfd, pid, token))
      goto next;
    char to[256];
    snprintf(to, sizeof to, "%s.%020" PRIu64 ".%s.%" PRIu64 ".spool", s->sink,
             order, s->tag, s->next_file++);
    if (strcmp(names[i], to) != 0 && renameat(dfd, names[i], dfd, to) != 0)
      goto next; /* another process claimed it */
    cp_spool_item *it = read_item(s, dfd, to, &unsafe);
    if (!it && unsafe < 0)
      goto next;
    if (!it) {
      if (unsafe)
        unsafe_files++;
      else
        bad++;
      unlinkat(dfd, to, 0);
      goto next;
    }
    it->file = strdup(to);
    it->adopted = 1;
    dropped += cp_spool_push(s, it);
    adopted++;
  next:
    free(names[i]);
  }
  free(names);
  if (dropped)
    cp_warn("%s: %zu undelivered profiles found in %s, more than "
            "CONTPROF_SPOOL_MAX keeps: the oldest %zu dropped, %zu to send "
            "first",
            s->sink, adopted, s->dir.path, dropped, adopted - dropped);
  else if (adopted)
    cp_info("%s: %zu undelivered profiles found in %s, sending them first",
            s->sink, adopted, s->dir.path);
  if (unsafe_files || bad)
    cp_warn("%s: removed %zu spool file%s unsent from %s: %zu not regular "
            "files of uid %u that only it can write (or too large), %zu "
            "malformed or aimed at another URL",
            s->sink, unsafe_files + bad, unsafe_files + bad == 1 ? "" : "s",
            s->dir.path, unsafe_files, (unsigned)geteuid(), bad);
}

cp_spool *cp_spool_create(const char *dir, const char *sink_name,
                          size_t max_items, size_t max_bytes) {
  cp_spool *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  s->dir.own.fd = -1;
  s->lock.fd = -1;
  s->sink = strdup(sink_name);
  if (!s->sink || (dir && cp_safe_dir_init(&s->dir, dir) != 0)) {
    cp_spool_destroy(s);
    return NULL;
  }
  s->max_items = max_items ? max_items : 1;
  s->max_bytes = max_bytes ? max_bytes : 1;
  snprintf(s->tag, sizeof s->tag, "%d", (int)getpid());
  if (s->dir.path) {
    take_owner_lock(s);
    adopt_files(s);
  }
  return s;
}

void cp_spool_destroy(cp_spool *s) {
  if (!s)
    return;
  while (s->head) {
    cp_spool_item *it = s->head;
    s->head = it->next;
    cp_spool_item_free(it);
  }
  cp_spool_item_free(s->taken);
  if (s->lock.fd >= 0) {
    /* Its files are anyone's now: the lock file goes, then the lock. */
    int dfd = s->dir.path ? spool_dir(s) : -1;
    if (dfd >= 0)
      unlinkat(dfd, s->lock_name, 0);
    cp_own_close(&s->lock);
  }
  cp_safe_dir_release(&s->dir);
  free(s->sink);
  free(s);
}

cp_spool_item *cp_spool_take(cp_spool *s) {
  cp_spool_item *it = s->head;
  if (!it || s->taken)
    return NULL;
  s->head = it->next;
  if (!s->head)
    s->tail = NULL;
  s->count--;
  s->bytes -= it->bytes;
  s->taken = it;
  s->taken_doomed = 0;
  return it;
}

void cp_spool_finish(cp_spool *s, cp_spool_item *it) {
  if (s->taken == it)
    s->taken = NULL;
  remove_file(s, it);
  cp_spool_item_free(it);
}

int cp_spool_put_back(cp_spool *s, cp_spool_item *it) {
  int doomed = s->taken == it && s->taken_doomed;
  if (s->taken == it)
    s->taken = NULL;
  if (doomed || over_bounds(s, 1, it->bytes)) {
    s->dropped++;
    remove_file(s, it);
    cp_spool_item_free(it);
    return 1;
  }
  persist(s, it);
  it->next = s->head;
  s->head = it;
  if (!s->tail)
    s->tail = it;
  s->count++;
  s->bytes += it->bytes;
  return 0;
}

size_t cp_spool_persist_all(cp_spool *s) {
  size_t unsaved = 0;
  for (cp_spool_item *it = s->head; it; it = it->next) {
    persist(s, it);
    unsaved += !it->file;
  }
  if (s->taken) {
    persist(s, s->taken);
    unsaved += !s->taken->file;
  }
  return unsaved;
}

size_t cp_spool_count(const cp_spool *s) { return s->count; }

int cp_spool_has_own(const cp_spool *s) {
  if (s->taken && !s->taken->adopted)
    return 1;
  for (const cp_spool_item *it = s->head; it; it = it->next)
    if (!it->adopted)
      return 1;
  return 0;
}
uint64_t cp_spool_dropped(const cp_spool *s) { return s->dropped; }
