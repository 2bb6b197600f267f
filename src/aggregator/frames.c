/* Runtime frames (function, file, line) interned into frame words. The table
 * is append-only and stored in chunks that never move, so lookups take no
 * lock; interning takes one mutex. */
#include "frames.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_BITS 12
#define CHUNK_SIZE (1u << CHUNK_BITS)
#define MAX_CHUNKS 256 /* about one million distinct frames */
#define INDEX_BITS 21

typedef struct entry {
  cp_runtime_frame frame;
  uint64_t hash;
} entry;

/* The profiler's own frames have fixed ids in a first chunk that needs no
 * allocation: a native process, which interns no runtime frame, never
 * allocates the table (its index alone is 8 MiB of address space, and
 * mapping it cost every short-lived process about 30 us on a VM). */
enum { ID_TRUNCATED = 1, ID_DROPPED, ID_OVERFLOW, FIRST_FREE_ID };
static entry first_chunk[CHUNK_SIZE] = {
    [ID_TRUNCATED] = {{"[truncated]", "", 0}, 0},
    [ID_DROPPED] = {{"[dropped]", "", 0}, 0},
    [ID_OVERFLOW] = {{"[overflow]", "", 0}, 0},
};
static entry *chunks[MAX_CHUNKS] = {first_chunk};
/* id 0 is never used */
static _Atomic uint32_t frame_count = FIRST_FREE_ID;
static uint32_t *index_table;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static entry *entry_at(uint32_t id) {
  return &chunks[id >> CHUNK_BITS][id & (CHUNK_SIZE - 1)];
}

static uint64_t hash_frame(const char *function, const char *file,
                           int64_t line) {
  uint64_t h = 1469598103934665603ull;
  for (const char *p = function; *p; p++)
    h = (h ^ (unsigned char)*p) * 1099511628211ull;
  h = (h ^ 0xff) * 1099511628211ull;
  for (const char *p = file; *p; p++)
    h = (h ^ (unsigned char)*p) * 1099511628211ull;
  h = (h ^ (uint64_t)line) * 1099511628211ull;
  return h;
}

uint64_t contprof_frame_intern(const char *function, const char *file,
                               int64_t line) {
  if (!function)
    function = "";
  if (!file)
    file = "";
  uint64_t h = hash_frame(function, file, line);
  uint32_t id = 0;
  pthread_mutex_lock(&lock);
  const size_t mask = (1u << INDEX_BITS) - 1;
  if (!index_table) {
    if (!(index_table = calloc(mask + 1, sizeof *index_table)))
      goto out;
    /* The fixed ids are found like any other. */
    for (uint32_t i = ID_TRUNCATED; i < FIRST_FREE_ID; i++) {
      entry *f = entry_at(i);
      f->hash = hash_frame(f->frame.function, f->frame.file, f->frame.line);
      size_t at = f->hash & mask;
      while (index_table[at])
        at = (at + 1) & mask;
      index_table[at] = i;
    }
  }
  size_t slot = h & mask;
  for (;; slot = (slot + 1) & mask) {
    uint32_t cand = index_table[slot];
    if (cand == 0)
      break;
    entry *e = entry_at(cand);
    if (e->hash == h && e->frame.line == line &&
        strcmp(e->frame.function, function) == 0 &&
        strcmp(e->frame.file, file) == 0) {
      id = cand;
      goto out;
    }
  }
  uint32_t next = atomic_load_explicit(&frame_count, memory_order_relaxed);
  /* Keep the index at most half full. */
  if (next >= CHUNK_SIZE * MAX_CHUNKS || next >= (mask + 1) / 2)
    goto out;
  if (!chunks[next >> CHUNK_BITS] &&
      !(chunks[next >> CHUNK_BITS] = calloc(CHUNK_SIZE, sizeof(entry))))
    goto out;
  entry *e = entry_at(next);
  e->frame.function = strdup(function);
  e->frame.file = strdup(file);
  if (!e->frame.function || !e->frame.file) {
    free((char *)e->frame.function);
    free((char *)e->frame.file);
    goto out;
  }
  e->frame.line = line;
  e->hash = h;
  index_table[slot] = next;
  atomic_store_explicit(&frame_count, next + 1, memory_order_release);
  id = next;
out:
  pthread_mutex_unlock(&lock);
  return id ? (CONTPROF_FRAME_RUNTIME | id) : 0;
}

const cp_runtime_frame *cp_frame_runtime_get(uint64_t word) {
  if (!cp_frame_is_runtime(word))
    return NULL;
  uint64_t id = word & ~CONTPROF_FRAME_RUNTIME;
  if (id == 0 || id >= atomic_load_explicit(&frame_count, memory_order_acquire))
    return NULL;
  return &entry_at((uint32_t)id)->frame;
}

uint64_t cp_frame_truncated(void) {
  return CONTPROF_FRAME_RUNTIME | ID_TRUNCATED;
}

uint64_t cp_frame_dropped(void) { return CONTPROF_FRAME_RUNTIME | ID_DROPPED; }

uint64_t cp_frame_overflow(void) {
  return CONTPROF_FRAME_RUNTIME | ID_OVERFLOW;
}

/* A thread that held the lock at fork is gone in the child: hold it across
 * fork so the child's copy is always free. It guards only short, non-nesting
 * critical sections, so taking it before fork cannot deadlock. */
static void fork_prepare(void) { pthread_mutex_lock(&lock); }
static void fork_release(void) { pthread_mutex_unlock(&lock); }
__attribute__((constructor)) static void register_fork_handlers(void) {
  pthread_atfork(fork_prepare, fork_release, fork_release);
}
