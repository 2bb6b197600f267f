/* Per-thread labels: interned immutable label sets, reclaimed when no one
 * holds them, and the thread's current set id in initial-exec TLS so that
 * signal handlers read it with one load.
 *
 * Lifetime (see labels.h and docs/security.md, "Bounded memory"). Each set
 * has one atomic state word: its slot's generation, a live bit, the number of
 * holders and, once that is zero, the epoch it was retired in. Holders are the
 * thread whose current set it is, each open scope that will restore it
 * (scope->previous), and each live heap sample (cp_labels_hold). Pushing
 * takes a hold on the new set; the old current set's hold passes to the
 * scope, and back on pop, which gives the popped set's hold back. A thread
 * that exits gives back its current set's hold (a key destructor).
 *
 * A sample names a set only while some thread holds it (the handler copies
 * the current id of its own thread, which cannot pop meanwhile), so every
 * sample naming a set retired in epoch E is drained and exported by the end
 * of the second export after E; the epoch advances after each export
 * (cp_labels_collect), and a set is freed once the epoch is E + 2. While the
 * profiler is stopped nothing is pending: sets no one holds are freed at
 * once. Frees happen under intern_lock, never during a read pin (the
 * exporter's). Signal handlers never read a set, only copy an id; hold and
 * release are lock-free CAS loops. Slots are stored in chunks that never
 * move nor go away, and ids carry the slot's 16-bit generation, so a stale id
 * finds a dead or different-generation slot and reads as empty. */
#include "labels.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "contprof/profiler.h"
#include "contprof/runtime.h"

#define SLOT_BITS 16
#define SLOT_MASK ((1u << SLOT_BITS) - 1)
/* Slot 0 is the empty set; slot 0xffff is never used, so no id is
 * CONTPROF_LABELS_OF_CALLER (UINT32_MAX). */
#define MAX_SLOTS SLOT_MASK
#define CHUNK_BITS 8
#define CHUNK_SIZE (1u << CHUNK_BITS)
#define MAX_CHUNKS (1u << (SLOT_BITS - CHUNK_BITS))
#define INDEX_SIZE (2u << SLOT_BITS) /* open addressing: slot or 0 */
#define MAX_LABELS_PER_SET 32
#define DEFAULT_MEMORY_LIMIT ((size_t)16 << 20)
#define MIN_MEMORY_LIMIT ((size_t)2 << 20)
#define WARN_INTERVAL_NS 60000000000ull /* one line a minute per kind */

/* The state word: holders in bits 0..22, live in 23, the retiring epoch in
 * 24..47, the slot's generation in 48..63. */
#define REFS_MASK 0x7fffffull
#define LIVE_BIT (1ull << 23)
#define EPOCH_SHIFT 24
#define EPOCH_MASK 0xffffffull
#define GEN_SHIFT 48
#define ST_REFS(s) ((s)&REFS_MASK)
#define ST_EPOCH(s) (((s) >> EPOCH_SHIFT) & EPOCH_MASK)
#define ST_GEN(s) ((uint32_t)((s) >> GEN_SHIFT))

typedef struct labelset {
  _Atomic uint64_t state;
  uint64_t hash;
  uint32_t n;
  uint32_t next_free; /* free-list link (slot number), 0 = end */
  size_t bytes;       /* what `labels` takes, strings included */
  cp_label *labels;   /* one block: the array, then its strings */
} labelset;

static labelset *_Atomic chunks[MAX_CHUNKS];
static pthread_mutex_t intern_lock = PTHREAD_MUTEX_INITIALIZER;
/* Under intern_lock: */
static uint32_t high_water = 1; /* slots below it have been used */
static uint32_t free_head;      /* freed slots, linked by next_free */
static uint32_t *index_table;   /* live slots by hash; rebuilt after frees */
/* The sets' own bytes; the tables (the index, 512 KiB, and slot chunks up
 * to 3 MiB, kept once made) are bounded by the slot count instead. */
static size_t memory_used;
/* Set without intern_lock: the profiler sets it from its fork-child
 * handler, which may run before ours has released the lock. */
static _Atomic size_t memory_limit = DEFAULT_MEMORY_LIMIT;
static int readers; /* read pins */
/* Signalled when the last read pin goes: a full table waits for it to sweep
 * (at most READER_WAIT_NS) instead of refusing the set. */
static pthread_cond_t readers_gone = PTHREAD_COND_INITIALIZER;
#define READER_WAIT_NS 200000000ull
/* A sweep scans every slot. While profiling, one per epoch frees all it
 * can (a set becomes free only when the epoch moves), so a full table asks
 * for none until then; while stopped, a sweep that freed nothing (every set
 * held) is not repeated for SWEEP_INTERVAL_NS. */
#define SWEEP_INTERVAL_NS 10000000ull
static uint32_t swept_epoch = UINT32_MAX;
static uint64_t fruitless_sweep_ns;
static uint64_t last_warn_ns[3];
static _Atomic uint32_t epoch;
static _Atomic int profiling;

static CP_TLS uint32_t current_set;
static CP_TLS int exit_hook_set;
static pthread_key_t exit_key;
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;

/* The slot of id, or NULL for the empty set and ids that were never handed
 * out. Async-signal-safe. */
static labelset *slot_of(uint32_t id) {
  uint32_t slot = id & SLOT_MASK;
  if (slot == 0 || slot >= MAX_SLOTS)
    return NULL;
  labelset *chunk =
      atomic_load_explicit(&chunks[slot >> CHUNK_BITS], memory_order_acquire);
  return chunk ? &chunk[slot & (CHUNK_SIZE - 1)] : NULL;
}

static uint32_t make_id(uint64_t state, uint32_t slot) {
  return (ST_GEN(state) << SLOT_BITS) | slot;
}

static int names(uint64_t state, uint32_t id) {
  return (state & LIVE_BIT) && ST_GEN(state) == id >> SLOT_BITS;
}

/* Async-signal-safe: one TLS load. */
uint32_t cp_labels_current(void) { return current_set; }

uint32_t contprof_labels_current(void) { return current_set; }

size_t cp_labelset_get(uint32_t id, const cp_label **labels) {
  *labels = NULL;
  labelset *s = slot_of(id);
  if (!s || !names(atomic_load_explicit(&s->state, memory_order_acquire), id))
    return 0;
  *labels = s->labels;
  return s->n;
}

void cp_labels_read_begin(void) {
  pthread_mutex_lock(&intern_lock);
  readers++;
  pthread_mutex_unlock(&intern_lock);
}

void cp_labels_read_end(void) {
  pthread_mutex_lock(&intern_lock);
  if (--readers == 0)
    pthread_cond_broadcast(&readers_gone);
  pthread_mutex_unlock(&intern_lock);
}

/* Waits, at most READER_WAIT_NS, until no export reads sets, so that a sweep
 * can run. Caller holds intern_lock (released while waiting). */
static void wait_for_readers_locked(void) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  uint64_t ns = (uint64_t)deadline.tv_nsec + READER_WAIT_NS;
  deadline.tv_sec += (time_t)(ns / 1000000000ull);
  deadline.tv_nsec = (long)(ns % 1000000000ull);
  while (readers &&
         pthread_cond_timedwait(&readers_gone, &intern_lock, &deadline) == 0) {
  }
}

/* Async-signal-safe, lock-free. */
uint32_t cp_labels_hold(uint32_t id) {
  labelset *s = slot_of(id);
  if (!s)
    return 0;
  uint64_t st = atomic_load_explicit(&s->state, memory_order_relaxed);
  do {
    if (!names(st, id) || ST_REFS(st) == REFS_MASK)
      return 0;
  } while (!atomic_compare_exchange_weak_explicit(
      &s->state, &st, st + 1, memory_order_acquire, memory_order_relaxed));
  return id;
}

/* Async-signal-safe, lock-free. The last holder stamps the epoch. */
void cp_labels_release(uint32_t id) {
  labelset *s = slot_of(id);
  if (!s)
    return;
  uint64_t st = atomic_load_explicit(&s->state, memory_order_relaxed), next;
  do {
    if (!names(st, id) || ST_REFS(st) == 0)
      return; /* freed or unbalanced: nothing to give back */
    next = st - 1;
    if (ST_REFS(next) == 0) {
      uint64_t e = atomic_load_explicit(&epoch, memory_order_relaxed);
      next = (next & ~(EPOCH_MASK << EPOCH_SHIFT)) |
             ((e & EPOCH_MASK) << EPOCH_SHIFT);
    }
  } while (!atomic_compare_exchange_weak_explicit(
      &s->state, &st, next, memory_order_release, memory_order_relaxed));
}

uint32_t contprof_labels_hold(uint32_t id) { return cp_labels_hold(id); }
void contprof_labels_release(uint32_t id) { cp_labels_release(id); }

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

/* One `contprof:` line per kind a minute. Caller holds intern_lock. */
enum { WARN_KEY, WARN_VALUE, WARN_FULL };
static int warn_due(int kind) {
  uint64_t now = cp_monotonic_ns();
  if (last_warn_ns[kind] && now - last_warn_ns[kind] < WARN_INTERVAL_NS)
    return 0;
  last_warn_ns[kind] = now;
  return 1;
}

static void index_insert_locked(uint32_t slot, uint64_t hash) {
  size_t i = hash & (INDEX_SIZE - 1);
  while (index_table[i])
    i = (i + 1) & (INDEX_SIZE - 1);
  index_table[i] = slot;
}

/* Frees the sets no one holds whose last samples are exported (all of them
 * while the profiler is stopped), unless a reader is pinned; `force`: even
 * if a sweep just ran. Caller holds intern_lock. Returns how many were
 * freed. */
static size_t sweep_locked(int force) {
  if (readers || !index_table)
    return 0;
  uint32_t now = atomic_load(&epoch);
  int stopped = !atomic_load(&profiling);
  uint64_t now_ns = cp_monotonic_ns();
  if (!force && (stopped ? fruitless_sweep_ns &&
                               now_ns - fruitless_sweep_ns < SWEEP_INTERVAL_NS
                         : now == swept_epoch))
    return 0;
  swept_epoch = now;
  size_t freed = 0;
  for (uint32_t slot = 1; slot < high_water; slot++) {
    labelset *s = slot_of(slot);
    uint64_t st = atomic_load_explicit(&s->state, memory_order_acquire);
    if (!(st & LIVE_BIT) || ST_REFS(st) != 0)
      continue;
    if (!stopped && ((now - ST_EPOCH(st)) & EPOCH_MASK) < 2)
      continue;
    /* Dead, and the next generation: stale ids stop naming it. A hold
     * that came meanwhile (a heap sample) makes the exchange fail. */
    uint64_t dead = (uint64_t)((ST_GEN(st) + 1) & 0xffff) << GEN_SHIFT;
    if (!atomic_compare_exchange_strong_explicit(
            &s->state, &st, dead, memory_order_acq_rel, memory_order_relaxed))
      continue;
    memory_used -= s->bytes;
    free(s->labels);
    s->labels = NULL;
    s->n = 0;
    s->bytes = 0;
    s->next_free = free_head;
    free_head = slot;
    freed++;
  }
  fruitless_sweep_ns = freed ? 0 : now_ns;
  if (freed) {
    memset(index_table, 0, INDEX_SIZE * sizeof *index_table);
    for (uint32_t slot = 1; slot < high_water; slot++) {
      labelset *s = slot_of(slot);
      if (atomic_load_explicit(&s->state, memory_order_relaxed) & LIVE_BIT)
        index_insert_locked(slot, s->hash);
    }
  }
  return freed;
}

/* A free slot (allocating its chunk), or 0 when none is left. Caller holds
 * intern_lock. */
static uint32_t take_slot_locked(void) {
  if (free_head) {
    uint32_t slot = free_head;
    free_head = slot_of(slot)->next_free;
    return slot;
  }
  if (high_water >= MAX_SLOTS)
    return 0;
  uint32_t slot = high_water;
  if (!atomic_load_explicit(&chunks[slot >> CHUNK_BITS],
                            memory_order_relaxed)) {
    labelset *chunk = calloc(CHUNK_SIZE, sizeof *chunk);
    if (!chunk)
      return 0;
    atomic_store_explicit(&chunks[slot >> CHUNK_BITS], chunk,
                          memory_order_release);
  }
  high_water++;
  return slot;
}

/* Returns the id of the set l[0..n) (sorted by key) with one hold taken for
 * the caller, adding the set if new; 0 and *err on failure. Caller holds
 * intern_lock. */
static uint32_t intern_locked(const cp_label *l, size_t n, int *err) {
  if (n == 0)
    return 0;
  if (!index_table) {
    index_table = calloc(INDEX_SIZE, sizeof *index_table);
    if (!index_table)
      return *err = CONTPROF_ERR_NOMEM, 0;
  }
  uint64_t h = hash_labels(l, n);
  for (size_t i = h & (INDEX_SIZE - 1); index_table[i];
       i = (i + 1) & (INDEX_SIZE - 1)) {
    labelset *s = slot_of(index_table[i]);
    uint64_t st = atomic_load_explicit(&s->state, memory_order_relaxed);
    if ((st & LIVE_BIT) && s->hash == h && same_labels(s, l, n)) {
      /* Held or retired (not yet freed: frees need this lock). */
      uint32_t id = make_id(st, index_table[i]);
      if (cp_labels_hold(id))
        return id;
    }
  }

  size_t bytes = n * sizeof(cp_label);
  for (size_t i = 0; i < n; i++)
    bytes += strlen(l[i].key) + strlen(l[i].value) + 2;
  uint32_t slot = 0;
  if (memory_used + bytes <= memory_limit)
    slot = take_slot_locked();
  if (!slot) {
    /* An export's read pin blocks the sweep: a set refused for that alone
     * was seen in test_labels (1 of 140,000). */
    wait_for_readers_locked();
    if (sweep_locked(0) && memory_used + bytes <= memory_limit)
      slot = take_slot_locked();
  }
  if (!slot) {
    if (warn_due(WARN_FULL))
      cp_warn("labels: a new label set is refused: %zu kB of label sets in "
              "use, limit %zu kB (a quarter of CONTPROF_MAX_MEMORY_MB) or "
              "%u sets; sets are freed two profiles after their last use",
              memory_used >> 10, memory_limit >> 10, MAX_SLOTS - 1);
    return *err = CONTPROF_ERR_LABELS_FULL, 0;
  }
  cp_label *copy = malloc(bytes);
  labelset *s = slot_of(slot);
  if (!copy) {
    s->next_free = free_head;
    free_head = slot;
    return *err = CONTPROF_ERR_NOMEM, 0;
  }
  char *text = (char *)(copy + n);
  for (size_t i = 0; i < n; i++) {
    size_t k = strlen(l[i].key) + 1, v = strlen(l[i].value) + 1;
    copy[i].key = memcpy(text, l[i].key, k);
    copy[i].value = memcpy(text + k, l[i].value, v);
    text += k + v;
  }
  s->hash = h;
  s->n = (uint32_t)n;
  s->labels = copy;
  s->bytes = bytes;
  memory_used += bytes;
  /* The generation was advanced when the slot was freed (0 when new). */
  uint64_t st = atomic_load_explicit(&s->state, memory_order_relaxed);
  uint64_t live = ((uint64_t)ST_GEN(st) << GEN_SHIFT) | LIVE_BIT | 1;
  atomic_store_explicit(&s->state, live, memory_order_release);
  index_insert_locked(slot, h);
  return make_id(live, slot);
}

/* A thread that exits with labels set gives its current set back. */
static void thread_exit(void *unused) {
  (void)unused;
  uint32_t id = current_set;
  current_set = 0;
  exit_hook_set = 0;
  cp_labels_release(id);
}
static void make_exit_key(void) {
  if (pthread_key_create(&exit_key, thread_exit) != 0)
    exit_key = (pthread_key_t)-1;
}
static void ensure_exit_hook(void) {
  if (exit_hook_set)
    return;
  pthread_once(&exit_key_once, make_exit_key);
  if (exit_key != (pthread_key_t)-1 &&
      pthread_setspecific(exit_key, (void *)1) == 0)
    exit_hook_set = 1;
}

/* value, or a copy in buf (CP_LABEL_MAX_VALUE_BYTES + 1 bytes) cut at a
 * UTF-8 character boundary and ended with "..." when it is longer. */
static const char *bounded_value(const char *value, char *buf, int *cut) {
  size_t len = strnlen(value, CP_LABEL_MAX_VALUE_BYTES + 1);
  *cut = len > CP_LABEL_MAX_VALUE_BYTES;
  if (!*cut)
    return value;
  size_t keep = CP_LABEL_MAX_VALUE_BYTES - 3;
  while (keep > 0 && ((unsigned char)value[keep] & 0xc0) == 0x80)
    keep--; /* value[keep] continues a character: cut before it starts */
  memcpy(buf, value, keep);
  memcpy(buf + keep, "...", 4);
  return buf;
}

int contprof_label_push(const char *key, const char *value,
                        contprof_label_scope *scope) {
  if (!key || !*key || !value || !scope)
    return CONTPROF_ERR_INVALID;
  scope->valid = 0;
  size_t key_len = strnlen(key, CP_LABEL_MAX_KEY_BYTES + 1);
  char cut_value[CP_LABEL_MAX_VALUE_BYTES + 1];
  int cut;
  value = bounded_value(value, cut_value, &cut);

  pthread_mutex_lock(&intern_lock);
  if (key_len > CP_LABEL_MAX_KEY_BYTES) {
    if (warn_due(WARN_KEY))
      cp_warn("labels: a label key longer than %d bytes is refused",
              CP_LABEL_MAX_KEY_BYTES);
    pthread_mutex_unlock(&intern_lock);
    return CONTPROF_ERR_INVALID;
  }
  if (cut && warn_due(WARN_VALUE))
    cp_warn("labels: a value of label \"%.*s\" is longer than %d bytes: "
            "cut, and ended with \"...\"",
            (int)key_len, key, CP_LABEL_MAX_VALUE_BYTES);
  /* The current set is held by this thread: the lock keeps it readable. */
  const cp_label *old;
  size_t n_old = cp_labelset_get(current_set, &old);
  cp_label next[MAX_LABELS_PER_SET];
  size_t n = 0, i = 0;
  /* Merge key into the sorted set, replacing an earlier value of the key. */
  while (i < n_old && strcmp(old[i].key, key) < 0)
    next[n++] = old[i++];
  if (i < n_old && strcmp(old[i].key, key) == 0)
    i++;
  if (n_old - i + n + 1 > MAX_LABELS_PER_SET) {
    pthread_mutex_unlock(&intern_lock);
    return CONTPROF_ERR_LABELS_FULL;
  }
  next[n++] = (cp_label){key, value};
  while (i < n_old)
    next[n++] = old[i++];

  int err = 0;
  uint32_t id = intern_locked(next, n, &err);
  pthread_mutex_unlock(&intern_lock);
  if (err)
    return err;
  ensure_exit_hook();
  /* The old set's hold passes to the scope; the new one is the thread's. */
  scope->previous = current_set;
  scope->valid = 1;
  current_set = id;
  return CONTPROF_OK;
}

void contprof_label_pop(contprof_label_scope *scope) {
  if (!scope || !scope->valid)
    return;
  uint32_t popped = current_set;
  current_set = scope->previous; /* the scope's hold passes back */
  scope->valid = 0;
  cp_labels_release(popped);
}

void contprof_labels_clear(void) {
  uint32_t cleared = current_set;
  current_set = 0;
  cp_labels_release(cleared);
}

void cp_labels_collect(void) {
  pthread_mutex_lock(&intern_lock);
  atomic_fetch_add(&epoch, 1);
  sweep_locked(1);
  pthread_mutex_unlock(&intern_lock);
}

/* Lock-free but for the sweep, which is skipped when the lock is taken: in
 * the child of fork the profiler's handler may run before ours, with the
 * lock still held by our prepare handler (handler order follows
 * registration, and constructors may run in either order). A later sweep
 * frees what this one would have. */
void cp_labels_set_profiling(int on) {
  atomic_store(&profiling, on);
  if (!on && pthread_mutex_trylock(&intern_lock) == 0) {
    sweep_locked(1);
    pthread_mutex_unlock(&intern_lock);
  }
}

void cp_labels_set_memory_limit(size_t bytes) {
  atomic_store(&memory_limit,
               bytes > MIN_MEMORY_LIMIT ? bytes : MIN_MEMORY_LIMIT);
}

size_t cp_labels_memory_used(void) {
  pthread_mutex_lock(&intern_lock);
  size_t used = memory_used;
  pthread_mutex_unlock(&intern_lock);
  return used;
}

/* A thread that held the lock at fork is gone in the child: hold it across
 * fork so the child's copy is always free. It guards only short, non-nesting
 * critical sections, so taking it before fork cannot deadlock. */
static void fork_prepare(void) { pthread_mutex_lock(&intern_lock); }
static void fork_release(void) { pthread_mutex_unlock(&intern_lock); }
/* In the child the exporter thread that held a read pin, and any thread
 * waiting for it, are gone: no pins, and a condition variable with no
 * waiters (a copy with phantom waiters could block a broadcast). */
static void fork_child(void) {
  readers = 0;
  readers_gone = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
  pthread_mutex_unlock(&intern_lock);
}
__attribute__((constructor)) static void register_fork_handlers(void) {
  pthread_atfork(fork_prepare, fork_release, fork_child);
}
