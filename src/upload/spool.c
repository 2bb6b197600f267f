/* The bounded spool of an HTTP sink (see spool.h). Files are named
 * <sink>.<order, 20 digits>.<pid>.<n>.spool so that a directory listing
 * sorts them in delivery order and names the process that owns them. */
#include "spool.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

#define SPOOL_MAGIC "CPSPOOL1"
#define SPOOL_MAX_FILE ((size_t)1 << 30)

struct cp_spool {
  char *dir;
  char *sink;
  size_t max_items, max_bytes;
  cp_spool_item *head, *tail;
  size_t count, bytes;  /* queued */
  cp_spool_item *taken; /* being sent, NULL otherwise */
  int taken_doomed;     /* dropped if it comes back */
  uint64_t dropped;
  uint64_t next_file;
  int dir_error_reported;
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

static int write_file(const char *path, const uint8_t *p, size_t len) {
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return -1;
  while (len) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int err = n == 0 ? ENOSPC : errno;
      close(fd);
      unlink(tmp);
      return errno = err, -1;
    }
    p += n;
    len -= (size_t)n;
  }
  if (fsync(fd) != 0 || close(fd) != 0 || rename(tmp, path) != 0) {
    int err = errno;
    unlink(tmp);
    return errno = err, -1;
  }
  return 0;
}

static void persist(cp_spool *s, cp_spool_item *it) {
  if (!s->dir || it->file)
    return;
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
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.%020" PRIu64 ".%d.%" PRIu64 ".spool",
           s->dir, s->sink, it->order, (int)getpid(), s->next_file++);
  if (!w.failed && cp_make_dirs(s->dir) == 0 &&
      write_file(path, w.p, w.len) == 0) {
    it->file = strdup(path);
    if (!it->file)
      unlink(path);
    s->dir_error_reported = 0;
  } else if (!s->dir_error_reported) {
    s->dir_error_reported = 1;
    cp_error("cannot write to the spool directory %s: %s; undelivered "
             "profiles stay in memory only",
             s->dir, strerror(w.failed ? ENOMEM : errno));
  }
  free(w.p);
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

static cp_spool_item *read_item(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return NULL;
  struct stat st;
  uint8_t *data = NULL;
  if (fstat(fd, &st) != 0 || (size_t)st.st_size > SPOOL_MAX_FILE ||
      !(data = malloc((size_t)st.st_size + 1))) {
    close(fd);
    return NULL;
  }
  size_t got = 0;
  while (got < (size_t)st.st_size) {
    ssize_t n = read(fd, data + got, (size_t)st.st_size - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    got += (size_t)n;
  }
  close(fd);
  rbuf r = {data, got, 0, 0};
  char magic[8];
  get(&r, magic, 8);
  cp_spool_item *it = NULL;
  size_t len;
  int isnull;
  char *target = NULL;
  if (!r.failed && memcmp(magic, SPOOL_MAGIC, 8) == 0)
    target = (char *)get_bytes(&r, &len, &isnull);
  uint64_t order = 0, nparts = 0;
  get(&r, &order, sizeof order);
  get(&r, &nparts, sizeof nparts);
  if (target && !r.failed && nparts <= CP_SPOOL_MAX_PARTS)
    it = cp_spool_item_new(target, order);
  for (uint64_t i = 0; it && i < nparts; i++) {
    int n1, n2, n3, n4;
    size_t dlen = 0;
    char *name = (char *)get_bytes(&r, &len, &n1);
    char *filename = (char *)get_bytes(&r, &len, &n2);
    char *type = (char *)get_bytes(&r, &len, &n3);
    uint8_t *d = get_bytes(&r, &dlen, &n4);
    if (r.failed || !name || n4 ||
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
  if (it->file)
    unlink(it->file);
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

/* Adopts the files of processes that are gone (and of an earlier profiler
 * in this very process), claiming each with a rename so that two starting
 * processes never both deliver it. */
static void adopt_files(cp_spool *s) {
  DIR *d = opendir(s->dir);
  if (!d)
    return;
  char **names = NULL;
  size_t n = 0, cap = 0;
  size_t prefix = strlen(s->sink);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    if (len < prefix + 7 || strncmp(e->d_name, s->sink, prefix) != 0 ||
        e->d_name[prefix] != '.' || strcmp(e->d_name + len - 6, ".spool"))
      continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 16;
      char **grown = realloc(names, cap * sizeof *names);
      if (!grown)
        break;
      names = grown;
    }
    if (!(names[n] = strdup(e->d_name)))
      break;
    n++;
  }
  closedir(d);
  if (n > 1) /* names is NULL when the directory had none */
    qsort(names, n, sizeof *names, name_cmp);
  size_t adopted = 0, bad = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t order, num;
    int pid;
    if (sscanf(names[i] + prefix + 1, "%20" SCNu64 ".%d.%" SCNu64, &order, &pid,
               &num) != 3)
      goto next;
    if (pid != getpid() && (kill(pid, 0) == 0 || errno == EPERM))
      goto next; /* a live process owns it */
    char from[4200], to[4200];
    snprintf(from, sizeof from, "%s/%s", s->dir, names[i]);
    snprintf(to, sizeof to, "%s/%s.%020" PRIu64 ".%d.%" PRIu64 ".spool", s->dir,
             s->sink, order, (int)getpid(), s->next_file++);
    if (strcmp(from, to) != 0 && rename(from, to) != 0)
      goto next; /* another process claimed it */
    cp_spool_item *it = read_item(to);
    if (!it) {
      bad++;
      unlink(to);
      goto next;
    }
    it->file = strdup(to);
    cp_spool_push(s, it);
    adopted++;
  next:
    free(names[i]);
  }
  free(names);
  if (adopted)
    cp_info("%s: %zu undelivered profiles found in %s, sending them first",
            s->sink, adopted, s->dir);
  if (bad)
    cp_warn("%s: %zu unreadable files in the spool directory %s removed",
            s->sink, bad, s->dir);
}

cp_spool *cp_spool_create(const char *dir, const char *sink_name,
                          size_t max_items, size_t max_bytes) {
  cp_spool *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  s->sink = strdup(sink_name);
  s->dir = dir ? strdup(dir) : NULL;
  if (!s->sink || (dir && !s->dir)) {
    cp_spool_destroy(s);
    return NULL;
  }
  s->max_items = max_items ? max_items : 1;
  s->max_bytes = max_bytes ? max_bytes : 1;
  if (s->dir)
    adopt_files(s);
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
  free(s->dir);
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
  if (it->file)
    unlink(it->file);
  cp_spool_item_free(it);
}

int cp_spool_put_back(cp_spool *s, cp_spool_item *it) {
  int doomed = s->taken == it && s->taken_doomed;
  if (s->taken == it)
    s->taken = NULL;
  if (doomed || over_bounds(s, 1, it->bytes)) {
    s->dropped++;
    if (it->file)
      unlink(it->file);
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

void cp_spool_persist_all(cp_spool *s) {
  for (cp_spool_item *it = s->head; it; it = it->next)
    persist(s, it);
  if (s->taken)
    persist(s, s->taken);
}

size_t cp_spool_count(const cp_spool *s) { return s->count; }
uint64_t cp_spool_dropped(const cp_spool *s) { return s->dropped; }
