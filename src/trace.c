/* Trace correlation (see trace.h): per-thread span ids in initial-exec TLS,
 * written so that a signal handler on the same thread never sees half an
 * update; a bounded local-root-span -> endpoint mapping; per-period request
 * counts per endpoint. */
#include "trace.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "contprof/profiler.h"

#define MAX_ENDPOINTS 4096       /* distinct endpoint names kept */
#define ENDPOINT_INDEX_SIZE 8192 /* open addressing, 2 x MAX_ENDPOINTS */
#define ROOTS_PER_TABLE 32768    /* the mapping keeps 32768..65536 roots */
#define ROOT_INDEX_SIZE (2 * ROOTS_PER_TABLE)
#define MAX_ENDPOINT_LEN 1024

/* --- span ids ---------------------------------------------------------- */

typedef struct span_pair {
  uint64_t span_id;
  uint64_t local_root_span_id;
} span_pair;

/* Two slots and the index of the current one: the setter fills the other
 * slot, then flips the index, so a handler interrupting it reads one whole
 * pair. */
static CP_TLS span_pair spans[2];
static CP_TLS unsigned current_span;

void contprof_set_span(uint64_t span_id, uint64_t local_root_span_id) {
  unsigned next = current_span ^ 1u;
  spans[next].span_id = span_id;
  spans[next].local_root_span_id = local_root_span_id;
  atomic_signal_fence(memory_order_release);
  current_span = next;
}

/* Async-signal-safe: TLS loads only. */
void cp_trace_current(uint64_t *span_id, uint64_t *local_root_span_id) {
  unsigned i = current_span;
  atomic_signal_fence(memory_order_acquire);
  *span_id = spans[i].span_id;
  *local_root_span_id = spans[i].local_root_span_id;
}

/* --- endpoints ----------------------------------------------------------- */

/* A table of local root span ids: two of them, the older one dropped when the
 * newer fills, so memory stays bounded and recent requests are always found. */
typedef struct root_table {
  uint64_t ids[ROOT_INDEX_SIZE]; /* 0 = empty */
  uint32_t endpoint[ROOT_INDEX_SIZE];
  size_t used;
} root_table;

static struct {
  pthread_mutex_t lock;
  char *names[MAX_ENDPOINTS];
  uint64_t name_hash[MAX_ENDPOINTS];
  uint32_t index[ENDPOINT_INDEX_SIZE]; /* endpoint number + 1, 0 empty */
  size_t nnames;
  int64_t counts[MAX_ENDPOINTS]; /* requests in the current period */
  root_table *tables[2];         /* [0] newer, [1] older */
} tr = {.lock = PTHREAD_MUTEX_INITIALIZER};

static uint64_t hash_string(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static uint64_t hash_id(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

/* Endpoint number of name (added if new), or -1. Caller holds tr.lock. */
static int intern_endpoint(const char *name) {
  uint64_t h = hash_string(name);
  size_t slot = h & (ENDPOINT_INDEX_SIZE - 1);
  for (;; slot = (slot + 1) & (ENDPOINT_INDEX_SIZE - 1)) {
    uint32_t e = tr.index[slot];
    if (e == 0)
      break;
    if (tr.name_hash[e - 1] == h && strcmp(tr.names[e - 1], name) == 0)
      return (int)(e - 1);
  }
  if (tr.nnames == MAX_ENDPOINTS)
    return -1;
  char *copy = strdup(name);
  if (!copy)
    return -1;
  size_t e = tr.nnames++;
  tr.names[e] = copy;
  tr.name_hash[e] = h;
  tr.index[slot] = (uint32_t)e + 1;
  return (int)e;
}

/* The slot of id in t: where it is, or the empty slot where it would go. */
static size_t root_slot(const root_table *t, uint64_t id) {
  size_t slot = hash_id(id) & (ROOT_INDEX_SIZE - 1);
  while (t->ids[slot] != 0 && t->ids[slot] != id)
    slot = (slot + 1) & (ROOT_INDEX_SIZE - 1);
  return slot;
}

/* Caller holds tr.lock. Returns the entry of id, or NULL. */
static uint32_t *find_root(uint64_t id) {
  for (int i = 0; i < 2; i++) {
    root_table *t = tr.tables[i];
    if (!t)
      continue;
    size_t slot = root_slot(t, id);
    if (t->ids[slot] == id)
      return &t->endpoint[slot];
  }
  return NULL;
}

int contprof_set_endpoint(uint64_t local_root_span_id, const char *endpoint) {
  if (local_root_span_id == 0 || !endpoint || !*endpoint ||
      strnlen(endpoint, MAX_ENDPOINT_LEN + 1) > MAX_ENDPOINT_LEN)
    return CONTPROF_ERR_INVALID;
  int rc = CONTPROF_OK;
  pthread_mutex_lock(&tr.lock);
  int e = intern_endpoint(endpoint);
  uint32_t *entry = e < 0 ? NULL : find_root(local_root_span_id);
  if (e < 0) {
    rc = tr.nnames == MAX_ENDPOINTS ? CONTPROF_ERR_LABELS_FULL
                                    : CONTPROF_ERR_NOMEM;
  } else if (entry) {
    *entry = (uint32_t)e; /* renamed: already counted */
  } else {
    if (!tr.tables[0] || tr.tables[0]->used == ROOTS_PER_TABLE) {
      /* The newer table is full: the older one is forgotten and reused. */
      root_table *t = tr.tables[1] ? tr.tables[1] : malloc(sizeof *t);
      if (t) {
        memset(t, 0, sizeof *t);
        tr.tables[1] = tr.tables[0];
        tr.tables[0] = t;
      }
    }
    root_table *t = tr.tables[0];
    if (t && t->used < ROOTS_PER_TABLE) {
      size_t slot = root_slot(t, local_root_span_id);
      t->ids[slot] = local_root_span_id;
      t->endpoint[slot] = (uint32_t)e;
      t->used++;
      tr.counts[e]++;
    } else {
      rc = CONTPROF_ERR_NOMEM;
    }
  }
  pthread_mutex_unlock(&tr.lock);
  return rc;
}

const char *cp_trace_endpoint_of(uint64_t local_root_span_id) {
  if (local_root_span_id == 0)
    return NULL;
  pthread_mutex_lock(&tr.lock);
  uint32_t *entry = find_root(local_root_span_id);
  const char *name = entry ? tr.names[*entry] : NULL;
  pthread_mutex_unlock(&tr.lock);
  return name;
}

size_t cp_trace_endpoint_counts_take(cp_endpoint_count **out) {
  *out = NULL;
  pthread_mutex_lock(&tr.lock);
  size_t n = 0;
  for (size_t e = 0; e < tr.nnames; e++)
    n += tr.counts[e] > 0;
  cp_endpoint_count *counts = n ? malloc(n * sizeof *counts) : NULL;
  if (counts) {
    size_t i = 0;
    for (size_t e = 0; e < tr.nnames; e++)
      if (tr.counts[e] > 0) {
        counts[i++] = (cp_endpoint_count){tr.names[e], tr.counts[e]};
        tr.counts[e] = 0;
      }
  } else {
    n = 0; /* none, or out of memory: the counts wait for the next call */
  }
  pthread_mutex_unlock(&tr.lock);
  *out = counts;
  return n;
}

/* A thread that held the lock at fork is gone in the child: hold it across
 * fork (short, non-nesting critical sections, as in labels.c). */
static void fork_prepare(void) { pthread_mutex_lock(&tr.lock); }
static void fork_release(void) { pthread_mutex_unlock(&tr.lock); }
/* The parent reports the requests it counted; the child starts from none. */
static void fork_child(void) {
  memset(tr.counts, 0, sizeof tr.counts);
  pthread_mutex_unlock(&tr.lock);
}
__attribute__((constructor)) static void register_fork_handlers(void) {
  pthread_atfork(fork_prepare, fork_release, fork_child);
}
