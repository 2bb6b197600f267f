/* Per-thread labels: interned immutable label sets, and the thread's current
 * set id in initial-exec TLS so that signal handlers read it with one load.
 * Sets are stored in fixed chunks that never move, so readers need no lock. */
#include "labels.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "contprof/profiler.h"
#include "contprof/runtime.h"

#define CHUNK_BITS 8
#define CHUNK_SIZE (1u << CHUNK_BITS)
#define MAX_CHUNKS 256 /* 65536 distinct label sets */
#define MAX_LABELS_PER_SET 32
#define INDEX_SIZE (2 * CHUNK_SIZE * MAX_CHUNKS)

typedef struct labelset {
  uint64_t hash;
  size_t n;
  cp_label *labels;
} labelset;

static labelset *chunks[MAX_CHUNKS];
static _Atomic uint32_t set_count = 1; /* id 0: the empty set */
static uint32_t *index_table;          /* open addressing: id or 0 */
static pthread_mutex_t intern_lock = PTHREAD_MUTEX_INITIALIZER;
static CP_TLS uint32_t current_set;

static labelset *set_at(uint32_t id) {
  return &chunks[id >> CHUNK_BITS][id & (CHUNK_SIZE - 1)];
}

/* Async-signal-safe: one TLS load. */
uint32_t cp_labels_current(void) { return current_set; }

uint32_t contprof_labels_current(void) { return current_set; }

size_t cp_labelset_get(uint32_t id, const cp_label **labels) {
  if (id == 0 || id >= atomic_load_explicit(&set_count, memory_order_acquire)) {
    *labels = NULL;
    return 0;
  }
  labelset *s = set_at(id);
  *labels = s->labels;
  return s->n;
}

static uint64_t hash_labels(const cp_label *l, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) {
    for (const char *p = l[i].key; *p; p++)
      h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
    for (const char *p = l[i].value; *p; p++)
      h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h = (h ^ 0xfe) * 1099511628211ull;
  }
  return h | 1;
}

static int same_labels(const labelset *s, const cp_label *l, size_t n) {
  if (s->n != n)
    return 0;
  for (size_t i = 0; i < n; i++)
    if (strcmp(s->labels[i].key, l[i].key) ||
        strcmp(s->labels[i].value, l[i].value))
      return 0;
  return 1;
}

/* Returns the id of the set l[0..n) (sorted by key), adding it if new; 0 and
 * *err on failure. Caller holds intern_lock. */
static uint32_t intern_locked(const cp_label *l, size_t n, int *err) {
  if (n == 0)
    return 0;
  if (!index_table) {
    index_table = calloc(INDEX_SIZE, sizeof *index_table);
    if (!index_table)
      return *err = CONTPROF_ERR_NOMEM, 0;
  }
  uint64_t h = hash_labels(l, n);
  size_t slot = h & (INDEX_SIZE - 1);
  for (;; slot = (slot + 1) & (INDEX_SIZE - 1)) {
    uint32_t id = index_table[slot];
    if (id == 0)
      break;
    if (set_at(id)->hash == h && same_labels(set_at(id), l, n))
      return id;
  }
  uint32_t id = atomic_load_explicit(&set_count, memory_order_relaxed);
  if (id >= CHUNK_SIZE * MAX_CHUNKS)
    return *err = CONTPROF_ERR_LABELS_FULL, 0;
  labelset *chunk = chunks[id >> CHUNK_BITS];
  if (!chunk) {
    chunk = calloc(CHUNK_SIZE, sizeof *chunk);
    if (!chunk)
      return *err = CONTPROF_ERR_NOMEM, 0;
    chunks[id >> CHUNK_BITS] = chunk;
  }
  cp_label *copy = calloc(n, sizeof *copy);
  if (!copy)
    return *err = CONTPROF_ERR_NOMEM, 0;
  for (size_t i = 0; i < n; i++) {
    copy[i].key = strdup(l[i].key);
    copy[i].value = strdup(l[i].value);
    if (!copy[i].key || !copy[i].value) {
      for (size_t j = 0; j <= i; j++) {
        free((char *)copy[j].key);
        free((char *)copy[j].value);
      }
      free(copy);
      return *err = CONTPROF_ERR_NOMEM, 0;
    }
  }
  labelset *s = &chunk[id & (CHUNK_SIZE - 1)];
  s->hash = h;
  s->n = n;
  s->labels = copy;
  index_table[slot] = id;
  atomic_store_explicit(&set_count, id + 1, memory_order_release);
  return id;
}

int contprof_label_push(const char *key, const char *value,
                        contprof_label_scope *scope) {
  if (!key || !*key || !value || !scope)
    return CONTPROF_ERR_INVALID;
  scope->valid = 0;
  const cp_label *old;
  size_t n_old = cp_labelset_get(current_set, &old);
  cp_label next[MAX_LABELS_PER_SET];
  size_t n = 0, i = 0;
  /* Merge key into the sorted set, replacing an earlier value of the key. */
  while (i < n_old && strcmp(old[i].key, key) < 0)
    next[n++] = old[i++];
  if (i < n_old && strcmp(old[i].key, key) == 0)
    i++;
  if (n_old - i + n + 1 > MAX_LABELS_PER_SET)
    return CONTPROF_ERR_LABELS_FULL;
  next[n++] = (cp_label){key, value};
  while (i < n_old)
    next[n++] = old[i++];

  int err = 0;
  pthread_mutex_lock(&intern_lock);
  uint32_t id = intern_locked(next, n, &err);
  pthread_mutex_unlock(&intern_lock);
  if (err)
    return err;
  scope->previous = current_set;
  scope->valid = 1;
  current_set = id;
  return CONTPROF_OK;
}

void contprof_label_pop(contprof_label_scope *scope) {
  if (!scope || !scope->valid)
    return;
  current_set = scope->previous;
  scope->valid = 0;
}

void contprof_labels_clear(void) { current_set = 0; }

/* A thread that held the lock at fork is gone in the child: hold it across
 * fork so the child's copy is always free. It guards only short, non-nesting
 * critical sections, so taking it before fork cannot deadlock. */
static void fork_prepare(void) { pthread_mutex_lock(&intern_lock); }
static void fork_release(void) { pthread_mutex_unlock(&intern_lock); }
__attribute__((constructor)) static void register_fork_handlers(void) {
  pthread_atfork(fork_prepare, fork_release, fork_release);
}
