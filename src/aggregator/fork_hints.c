/* The table of what children of fork symbolized themselves (fork_hints.h).
 *
 * Open addressing over CP_FORK_HINTS entries in a shared anonymous mapping.
 * An entry's pc word is its state: 0 free, 1 being written, anything else
 * the pc, stored last (release) after the path's hash, so a reader that
 * sees a pc (acquire) sees its hash. Entries are never removed or reused.
 * The count of entries written is raised after each is complete (release):
 * a reader that reads it (acquire) before a scan sees every entry it
 * counts, and a later count tells it to scan again. */
#include "aggregator/fork_hints.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>

#define PROBES 32 /* entries an insert looks at before it gives up */

typedef struct hint_entry {
  _Atomic uint64_t pc;
  _Atomic uint64_t path_hash;
} hint_entry;

typedef struct hint_table {
  _Alignas(64) _Atomic uint64_t added;
  hint_entry e[CP_FORK_HINTS];
} hint_table;

_Static_assert((CP_FORK_HINTS & (CP_FORK_HINTS - 1)) == 0,
               "CP_FORK_HINTS is a power of two");

static struct {
  pthread_mutex_t lock; /* the reader's state below */
  hint_table *_Atomic table;
  _Atomic int writer; /* a child: puts */
  int reader;         /* has forked: takes */
  uint64_t scanned_added;
  int scanning; /* a scan stopped at max: it goes on from cursor */
  uint64_t scan_added;
  size_t cursor;
  uint64_t taken[CP_FORK_HINTS / 64]; /* entries this process took */
} hints = {.lock = PTHREAD_MUTEX_INITIALIZER};

uint64_t cp_fork_hints_path_hash(const char *path) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const unsigned char *p = (const unsigned char *)path; p && *p; p++)
    h = (h ^ *p) * 0x100000001b3ull;
  return h;
}

void cp_fork_hints_before_fork(void) {
  if (atomic_load(&hints.table))
    return;
  void *m = mmap(NULL, sizeof(hint_table), PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m != MAP_FAILED)
    atomic_store(&hints.table, m);
}

void cp_fork_hints_after_fork_parent(void) {
  pthread_mutex_lock(&hints.lock);
  hints.reader = 1;
  pthread_mutex_unlock(&hints.lock);
}

int cp_fork_hints_has_forked(void) {
  pthread_mutex_lock(&hints.lock);
  int forked = hints.reader;
  pthread_mutex_unlock(&hints.lock);
  return forked;
}

void cp_fork_hints_after_fork_child(void) {
  /* A thread of the parent may have held the lock: made anew. What the
   * parent took stays taken: the child inherited its answers. */
  pthread_mutex_init(&hints.lock, NULL);
  atomic_store(&hints.writer, atomic_load(&hints.table) != NULL);
  hints.reader = 0; /* until it forks: its siblings' hints are not its own */
}

void cp_fork_hints_put(uint64_t pc, uint64_t path_hash) {
  hint_table *t = atomic_load_explicit(&hints.table, memory_order_acquire);
  if (!t || !atomic_load_explicit(&hints.writer, memory_order_relaxed) ||
      pc < 2)
    return;
  uint64_t h =
      (pc ^ (path_hash * 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull;
  for (size_t probe = 0; probe < PROBES; probe++) {
    hint_entry *e = &t->e[((h >> 32) + probe) & (CP_FORK_HINTS - 1)];
    uint64_t v = atomic_load_explicit(&e->pc, memory_order_acquire);
    if (v == pc &&
        atomic_load_explicit(&e->path_hash, memory_order_relaxed) == path_hash)
      return;
    if (v != 0)
      continue;
    uint64_t expected = 0;
    if (!atomic_compare_exchange_strong_explicit(
            &e->pc, &expected, 1, memory_order_acquire, memory_order_relaxed))
      continue;
    atomic_store_explicit(&e->path_hash, path_hash, memory_order_relaxed);
    atomic_store_explicit(&e->pc, pc, memory_order_release);
    atomic_fetch_add_explicit(&t->added, 1, memory_order_release);
    return;
  }
}

size_t cp_fork_hints_take(cp_fork_hint *out, size_t max) {
  hint_table *t = atomic_load_explicit(&hints.table, memory_order_acquire);
  size_t n = 0;
  if (!t || !max)
    return 0;
  pthread_mutex_lock(&hints.lock);
  if (!hints.reader)
    goto done;
  if (!hints.scanning) {
    uint64_t added = atomic_load_explicit(&t->added, memory_order_acquire);
    if (added == hints.scanned_added)
      goto done;
    hints.scanning = 1;
    hints.scan_added = added;
    hints.cursor = 0;
  }
  for (; hints.cursor < CP_FORK_HINTS && n < max; hints.cursor++) {
    size_t i = hints.cursor;
    uint64_t pc = atomic_load_explicit(&t->e[i].pc, memory_order_acquire);
    if (pc < 2 || (hints.taken[i / 64] >> (i % 64)) & 1)
      continue;
    hints.taken[i / 64] |= 1ull << (i % 64);
    out[n].pc = pc;
    out[n].path_hash =
        atomic_load_explicit(&t->e[i].path_hash, memory_order_relaxed);
    n++;
  }
  if (hints.cursor >= CP_FORK_HINTS) {
    hints.scanning = 0;
    hints.scanned_added = hints.scan_added;
  }
done:
  pthread_mutex_unlock(&hints.lock);
  return n;
}
