/* One generation of aggregated samples: locations, a call tree of unique
 * paths, and merged samples keyed by (leaf node, labels, thread, trace ids,
 * time bucket). Memory is accounted and bounded; past the bound new paths fold
 * into the "[overflow]" stack. See calltree.h. */
#include "calltree.h"

#include <stdlib.h>
#include <string.h>

#include "frames.h"

/* An open-addressing index of entry numbers (stored + 1; 0 = empty). */
typedef struct index {
  uint32_t *slots;
  size_t cap; /* power of two, or 0 */
  size_t used;
} index_t;

typedef struct thread_name {
  pid_t tid;
  char *name;
} thread_name;

struct cp_generation {
  uint64_t id;
  size_t memory_limit;
  size_t memory_used;

  cp_location *locs;
  uint64_t *loc_words; /* the frame word each location was made from */
  size_t nlocs, locs_cap;
  index_t loc_index;

  cp_node *nodes;
  size_t nnodes, nodes_cap;
  index_t node_index;

  cp_sample *samples;
  size_t nsamples, samples_cap;
  index_t sample_index;

  thread_name *threads;
  size_t nthreads, threads_cap;
  index_t thread_index;

  uint32_t overflow_sample;
  uint64_t samples_added;
  uint64_t samples_overflowed;
};

static uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

static uint64_t hash_key(const cp_sample_key *k) {
  uint64_t h = mix64(((uint64_t)k->node << 32) | k->labels);
  h = mix64(h ^ (uint32_t)k->tid);
  h = mix64(h ^ k->span_id);
  h = mix64(h ^ k->local_root_span_id);
  return mix64(h ^ k->time_bucket_ns);
}

static int same_key(const cp_sample_key *a, const cp_sample_key *b) {
  return a->node == b->node && a->labels == b->labels && a->tid == b->tid &&
         a->span_id == b->span_id &&
         a->local_root_span_id == b->local_root_span_id &&
         a->time_bucket_ns == b->time_bucket_ns;
}

static uint64_t loc_hash(const cp_generation *g, uint32_t i) {
  return mix64(g->loc_words[i]);
}
static uint64_t node_hash(const cp_generation *g, uint32_t i) {
  return mix64(((uint64_t)g->nodes[i].parent << 32) | g->nodes[i].location);
}
static uint64_t sample_hash(const cp_generation *g, uint32_t i) {
  return hash_key(&g->samples[i].key);
}
static uint64_t thread_hash(const cp_generation *g, uint32_t i) {
  return mix64((uint32_t)g->threads[i].tid);
}

/* Makes room for one more entry, within the memory bound. */
static int index_reserve(cp_generation *g, index_t *ix,
                         uint64_t (*hash_of)(const cp_generation *, uint32_t)) {
  if ((ix->used + 1) * 2 <= ix->cap)
    return 0;
  size_t cap = ix->cap ? ix->cap * 2 : 256;
  size_t extra = (cap - ix->cap) * sizeof(uint32_t);
  if (g->memory_used + extra > g->memory_limit)
    return -1;
  uint32_t *slots = calloc(cap, sizeof *slots);
  if (!slots)
    return -1;
  for (size_t i = 0; i < ix->cap; i++) {
    uint32_t e = ix->slots[i];
    if (!e)
      continue;
    size_t s = hash_of(g, e - 1) & (cap - 1);
    while (slots[s])
      s = (s + 1) & (cap - 1);
    slots[s] = e;
  }
  free(ix->slots);
  ix->slots = slots;
  ix->cap = cap;
  g->memory_used += extra;
  return 0;
}

/* Grows an array of `size`-byte elements to hold one more, within bounds. */
static int array_reserve(cp_generation *g, void **arr, size_t *cap, size_t n,
                         size_t size) {
  if (n < *cap)
    return 0;
  size_t new_cap = *cap ? *cap * 2 : 64;
  size_t extra = (new_cap - *cap) * size;
  if (g->memory_used + extra > g->memory_limit)
    return -1;
  void *grown = realloc(*arr, new_cap * size);
  if (!grown)
    return -1;
  *arr = grown;
  *cap = new_cap;
  g->memory_used += extra;
  return 0;
}

static void resolve_location(cp_generation *g, uint64_t word, cp_location *l) {
  memset(l, 0, sizeof *l);
  if (cp_frame_is_runtime(word)) {
    const cp_runtime_frame *f = cp_frame_runtime_get(word);
    if (f) {
      l->function = f->function;
      l->file = f->file;
      l->line = f->line;
    }
    return;
  }
  cp_symbol sym;
  cp_symbols_lookup(word, &sym);
  l->address = word;
  l->mapping = sym.mapping;
  l->function = sym.function;
  if (sym.mapping)
    cp_symbols_mark_used(sym.mapping, g->id);
}

/* Room for one more location (and its frame word), within the bound. */
static int locs_reserve(cp_generation *g) {
  if (g->nlocs < g->locs_cap)
    return 0;
  size_t cap = g->locs_cap ? g->locs_cap * 2 : 64;
  size_t extra = (cap - g->locs_cap) * (sizeof *g->locs + sizeof(uint64_t));
  if (g->memory_used + extra > g->memory_limit)
    return -1;
  cp_location *locs = realloc(g->locs, cap * sizeof *locs);
  if (!locs)
    return -1;
  g->locs = locs;
  uint64_t *words = realloc(g->loc_words, cap * sizeof *words);
  if (!words)
    return -1;
  g->loc_words = words;
  g->locs_cap = cap;
  g->memory_used += extra;
  return 0;
}

/* The location of a frame word, created on first sight; -1 past the bound. */
static int64_t location_of(cp_generation *g, uint64_t word) {
  uint64_t h = mix64(word);
  if (g->loc_index.cap) {
    size_t mask = g->loc_index.cap - 1;
    for (size_t s = h & mask;; s = (s + 1) & mask) {
      uint32_t e = g->loc_index.slots[s];
      if (!e)
        break;
      if (g->loc_words[e - 1] == word)
        return e - 1;
    }
  }
  if (index_reserve(g, &g->loc_index, loc_hash) || locs_reserve(g))
    return -1;
  uint32_t i = (uint32_t)g->nlocs++;
  g->loc_words[i] = word;
  resolve_location(g, word, &g->locs[i]);
  size_t mask = g->loc_index.cap - 1;
  size_t s = h & mask;
  while (g->loc_index.slots[s])
    s = (s + 1) & mask;
  g->loc_index.slots[s] = i + 1;
  g->loc_index.used++;
  return i;
}

/* The child of parent for location loc, created on first sight; -1 past the
 * bound. */
static int64_t child_of(cp_generation *g, uint32_t parent, uint32_t loc) {
  uint64_t h = mix64(((uint64_t)parent << 32) | loc);
  size_t mask = g->node_index.cap - 1;
  for (size_t s = h & mask; g->node_index.cap; s = (s + 1) & mask) {
    uint32_t e = g->node_index.slots[s];
    if (!e)
      break;
    if (g->nodes[e - 1].parent == parent && g->nodes[e - 1].location == loc)
      return e - 1;
  }
  if (index_reserve(g, &g->node_index, node_hash) ||
      array_reserve(g, (void **)&g->nodes, &g->nodes_cap, g->nnodes,
                    sizeof *g->nodes))
    return -1;
  uint32_t i = (uint32_t)g->nnodes++;
  g->nodes[i] = (cp_node){parent, loc};
  mask = g->node_index.cap - 1;
  size_t s = h & mask;
  while (g->node_index.slots[s])
    s = (s + 1) & mask;
  g->node_index.slots[s] = i + 1;
  g->node_index.used++;
  return i;
}

static int64_t sample_of(cp_generation *g, const cp_sample_key *key) {
  uint64_t h = hash_key(key);
  size_t mask = g->sample_index.cap - 1;
  for (size_t s = h & mask; g->sample_index.cap; s = (s + 1) & mask) {
    uint32_t e = g->sample_index.slots[s];
    if (!e)
      break;
    if (same_key(&g->samples[e - 1].key, key))
      return e - 1;
  }
  if (index_reserve(g, &g->sample_index, sample_hash) ||
      array_reserve(g, (void **)&g->samples, &g->samples_cap, g->nsamples,
                    sizeof *g->samples))
    return -1;
  uint32_t i = (uint32_t)g->nsamples++;
  memset(&g->samples[i], 0, sizeof g->samples[i]);
  g->samples[i].key = *key;
  mask = g->sample_index.cap - 1;
  size_t s = h & mask;
  while (g->sample_index.slots[s])
    s = (s + 1) & mask;
  g->sample_index.slots[s] = i + 1;
  g->sample_index.used++;
  return i;
}

cp_generation *cp_gen_create(uint64_t id, size_t memory_limit) {
  cp_generation *g = calloc(1, sizeof *g);
  if (!g)
    return NULL;
  g->id = id;
  /* The overflow stack is made up front so that it always fits. */
  g->memory_limit = (size_t)-1;
  int64_t root = -1, loc = -1, node = -1, sample = -1;
  if (array_reserve(g, (void **)&g->nodes, &g->nodes_cap, 0,
                    sizeof *g->nodes) == 0) {
    g->nodes[0] = (cp_node){0, 0};
    g->nnodes = 1;
    root = 0;
  }
  if (root == 0)
    loc = location_of(g, cp_frame_overflow());
  if (loc >= 0)
    node = child_of(g, 0, (uint32_t)loc);
  if (node >= 0) {
    cp_sample_key key = {.node = (uint32_t)node};
    sample = sample_of(g, &key);
  }
  if (sample < 0) {
    cp_gen_destroy(g);
    return NULL;
  }
  g->overflow_sample = (uint32_t)sample;
  g->memory_limit = memory_limit;
  return g;
}

void cp_gen_destroy(cp_generation *g) {
  if (!g)
    return;
  free(g->locs);
  free(g->loc_words);
  free(g->loc_index.slots);
  free(g->nodes);
  free(g->node_index.slots);
  free(g->samples);
  free(g->sample_index.slots);
  for (size_t i = 0; i < g->nthreads; i++)
    free(g->threads[i].name);
  free(g->threads);
  free(g->thread_index.slots);
  free(g);
}

uint64_t cp_gen_id(const cp_generation *g) { return g->id; }

static void add_values(cp_sample *s, contprof_sample_kind kind, int64_t count,
                       int64_t quantity) {
  int v = cp_kind_value_index(kind);
  s->values[v] += count;
  s->values[v + 1] += quantity;
}

int cp_gen_add(cp_generation *g, const uint64_t *frames, size_t nframes,
               int truncated, const cp_sample_key *key_in,
               contprof_sample_kind kind, int64_t count, int64_t quantity) {
  if ((unsigned)kind >= CONTPROF_KIND_COUNT)
    return -1;
  g->samples_added++;
  int64_t node = 0;
  if (truncated) {
    int64_t loc = location_of(g, cp_frame_truncated());
    node = loc < 0 ? -1 : child_of(g, 0, (uint32_t)loc);
  }
  for (size_t i = nframes; i-- > 0 && node >= 0;) {
    uint64_t word = frames[i];
    /* Callers' return addresses point after the call: step back into it. */
    if (i > 0 && !cp_frame_is_runtime(word) && word > 0)
      word--;
    int64_t loc = location_of(g, word);
    node = loc < 0 ? -1 : child_of(g, (uint32_t)node, (uint32_t)loc);
  }
  int64_t sample = -1;
  if (node >= 0) {
    cp_sample_key key = *key_in;
    key.node = (uint32_t)node;
    sample = sample_of(g, &key);
  }
  if (sample < 0) {
    g->samples_overflowed++;
    add_values(&g->samples[g->overflow_sample], kind, count, quantity);
    return 1;
  }
  add_values(&g->samples[sample], kind, count, quantity);
  return 0;
}

void cp_gen_forget_addresses(cp_generation *g) {
  /* Keep runtime frames, drop every program counter from the index. */
  if (!g->loc_index.cap)
    return;
  memset(g->loc_index.slots, 0, g->loc_index.cap * sizeof(uint32_t));
  g->loc_index.used = 0;
  size_t mask = g->loc_index.cap - 1;
  for (uint32_t i = 0; i < g->nlocs; i++) {
    if (!cp_frame_is_runtime(g->loc_words[i]))
      continue;
    size_t s = loc_hash(g, i) & mask;
    while (g->loc_index.slots[s])
      s = (s + 1) & mask;
    g->loc_index.slots[s] = i + 1;
    g->loc_index.used++;
  }
}

/* The slot of tid in the thread index (empty if absent); index non-empty. */
static uint32_t *thread_slot(const cp_generation *g, pid_t tid) {
  size_t mask = g->thread_index.cap - 1;
  for (size_t s = mix64((uint32_t)tid) & mask;; s = (s + 1) & mask) {
    uint32_t e = g->thread_index.slots[s];
    if (!e || g->threads[e - 1].tid == tid)
      return &g->thread_index.slots[s];
  }
}

void cp_gen_set_thread_name(cp_generation *g, pid_t tid, const char *name) {
  uint32_t e = g->thread_index.cap ? *thread_slot(g, tid) : 0;
  if (e) {
    thread_name *t = &g->threads[e - 1];
    if (strcmp(t->name, name) == 0)
      return;
    char *copy = strdup(name);
    if (!copy)
      return;
    g->memory_used += strlen(copy) + 1;
    g->memory_used -= strlen(t->name) + 1;
    free(t->name);
    t->name = copy;
    return;
  }
  if (index_reserve(g, &g->thread_index, thread_hash) ||
      array_reserve(g, (void **)&g->threads, &g->threads_cap, g->nthreads,
                    sizeof *g->threads))
    return;
  char *copy = strdup(name);
  if (!copy)
    return;
  g->threads[g->nthreads] = (thread_name){tid, copy};
  *thread_slot(g, tid) = (uint32_t)++g->nthreads;
  g->thread_index.used++;
  g->memory_used += strlen(copy) + 1;
}

const char *cp_gen_thread_name(const cp_generation *g, pid_t tid) {
  if (!g->thread_index.cap)
    return NULL;
  uint32_t e = *thread_slot(g, tid);
  return e ? g->threads[e - 1].name : NULL;
}

size_t cp_gen_location_count(const cp_generation *g) { return g->nlocs; }
const cp_location *cp_gen_location(const cp_generation *g, size_t i) {
  return &g->locs[i];
}
size_t cp_gen_node_count(const cp_generation *g) { return g->nnodes; }
const cp_node *cp_gen_node(const cp_generation *g, size_t i) {
  return &g->nodes[i];
}
size_t cp_gen_sample_count(const cp_generation *g) { return g->nsamples; }
const cp_sample *cp_gen_sample(const cp_generation *g, size_t i) {
  return &g->samples[i];
}
uint64_t cp_gen_samples_added(const cp_generation *g) {
  return g->samples_added;
}
uint64_t cp_gen_samples_overflowed(const cp_generation *g) {
  return g->samples_overflowed;
}
size_t cp_gen_memory_used(const cp_generation *g) { return g->memory_used; }
