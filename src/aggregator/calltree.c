/* One generation of aggregated samples: locations, a call tree of unique
 * paths, and merged samples keyed by (leaf node, labels, thread, trace ids,
 * time bucket). Memory is accounted and bounded; past the bound new paths fold
 * into the "[overflow]" stack. See calltree.h. */
#include "calltree.h"

#include <stdlib.h>
#include <string.h>

#include "frames.h"
#include "passthrough.h"

/* An open-addressing index of entry numbers: a slot holds entry + 1 (0 =
 * empty) in its low bits (id_mask) and the top bits of the entry's hash above
 * them, so that a probe touches only the entries whose tag matches (about
 * one in a thousand others at a million entries), which keeps probing cheap
 * at up to four fifths full. The capacity grows by half (any size: the home
 * slot is the hash scaled to it), so the index is 53% to 80% full where
 * power-of-two doubling at most half full had cost 8 to 16 bytes per entry,
 * as much as a sample row. */
typedef struct index {
  uint32_t *slots; /* no_slots while empty: a probe finds nothing there */
  size_t cap;      /* slots, or 0 */
  size_t used;
  uint32_t id_mask; /* the entry-number bits: 2^k - 1 > cap */
} index_t;

static uint32_t no_slots[1];

/* A probe for one hash: candidate entries in slot order. */
typedef struct probe {
  size_t slot;
  uint32_t tag, id_mask;
} probe_t;

static probe_t probe_start(const index_t *ix, uint64_t h) {
  probe_t p = {.slot = (size_t)(((h & 0xffffffffu) * (uint64_t)ix->cap) >> 32),
               .tag = (uint32_t)(h >> 32) & ~ix->id_mask,
               .id_mask = ix->id_mask};
  return p;
}

/* The next entry whose tag matches, or -1 at the first empty slot. */
static int64_t probe_next(const index_t *ix, probe_t *p) {
  for (;;) {
    uint32_t e = ix->slots[p->slot];
    if (!e)
      return -1;
    if (++p->slot == ix->cap)
      p->slot = 0;
    if ((e & ~p->id_mask) == p->tag)
      return (int64_t)(e & p->id_mask) - 1;
  }
}

/* Nodes, rows, contexts and value columns live in chunks of CHUNK_LEN
 * entries: growth copies nothing (no pause on the drain thread for a large
 * table) and leaves at most one chunk unused, where doubling arrays left up
 * to half of each table unused. */
#define CHUNK_BITS 10
#define CHUNK_LEN ((size_t)1 << CHUNK_BITS)
#define CHUNK_MASK (CHUNK_LEN - 1)

typedef struct chunked {
  char **chunk;  /* a NULL chunk of a value column reads as zeros */
  size_t nchunk; /* pointers allocated */
} chunked;

/* A sample row: its leaf node and its context (thread, labels, trace ids,
 * time bucket), which samples of many stacks share and which is therefore
 * stored once, in the context table. */
typedef struct row {
  uint32_t node;
  uint32_t ctx;
} row;

typedef struct context {
  uint32_t labels;
  pid_t tid;
  uint64_t span_id;
  uint64_t local_root_span_id;
  uint64_t time_bucket_ns;
} context;

/* The values of one kind for one row. A generation only holds columns of
 * the kinds added to it (a CPU-only process stores one column, not five),
 * and a column starts narrow: 32-bit count and 32-bit residual, the
 * quantity being count * ratio + residual with the kind's ratio fixed by
 * its first sample (a POSIX-timer CPU sample is one period a count, so its
 * residual stays 0; a perf one is a period give or take its overshoot). The
 * first sum that does not fit widens the whole column to 64-bit count and
 * quantity. Sums wrap modulo 2^64 either way, so the values read back are
 * exactly the 64-bit sums. */
typedef struct narrow_values {
  int32_t count;
  int32_t residual;
} narrow_values;

typedef struct kind_values {
  int64_t count;
  int64_t quantity;
} kind_values;

typedef struct kind_column {
  chunked cells; /* narrow_values, or kind_values once wide */
  int used;      /* ratio is set */
  int wide;
  int64_t ratio;
} kind_column;

typedef struct thread_name {
  pid_t tid;
  char *name;
} thread_name;

struct cp_generation {
  uint64_t id;
  size_t memory_limit;
  size_t memory_used;
  cp_gen_memory mem; /* memory_used by part */

  cp_location *locs;
  uint64_t *loc_words; /* the frame word each location was made from */
  size_t nlocs, locs_cap;
  index_t loc_index;
  /* Locations whose object's symbol table was not read when they were made
   * (cp_gen_resolve_pending names them). */
  uint32_t *pending;
  size_t npending, pending_cap;
  int defer_reads; /* cp_gen_set_defer_reads */

  chunked nodes; /* cp_node */
  size_t nnodes;
  index_t node_index;

  chunked rows; /* row */
  size_t nrows;
  index_t row_index;

  kind_column values[CONTPROF_KIND_COUNT]; /* parallel to rows */

  chunked contexts; /* context; 0 is the empty one */
  size_t ncontexts;
  index_t context_index;

  thread_name *threads;
  size_t nthreads, threads_cap;
  index_t thread_index;

  int forgot; /* cp_gen_forget_addresses ran: not every node is indexed */
  uint32_t overflow_row;
  /* The overflow row's values: kept here, where they always fit. */
  kind_values overflow_values[CONTPROF_KIND_COUNT];
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

static void *chunk_entry(const chunked *a, size_t i, size_t size) {
  return a->chunk[i >> CHUNK_BITS] + (i & CHUNK_MASK) * size;
}

static cp_node *node_at(const cp_generation *g, size_t i) {
  return chunk_entry(&g->nodes, i, sizeof(cp_node));
}
static row *row_at(const cp_generation *g, size_t i) {
  return chunk_entry(&g->rows, i, sizeof(row));
}
static context *context_at(const cp_generation *g, size_t i) {
  return chunk_entry(&g->contexts, i, sizeof(context));
}

/* Counts `extra` bytes against the bound; 0, or -1 past it. */
static int charge(cp_generation *g, size_t *part, size_t extra) {
  if (g->memory_used + extra > g->memory_limit)
    return -1;
  g->memory_used += extra;
  *part += extra;
  return 0;
}

/* Makes entry i of a chunked table addressable (zeroed), within the
 * bound. */
static int chunk_reserve(cp_generation *g, chunked *a, size_t i, size_t size,
                         size_t *part) {
  size_t c = i >> CHUNK_BITS;
  if (c >= a->nchunk) {
    size_t n = a->nchunk ? a->nchunk * 2 : 4;
    while (n <= c)
      n *= 2;
    size_t extra = (n - a->nchunk) * sizeof *a->chunk;
    if (g->memory_used + extra > g->memory_limit)
      return -1;
    char **grown = realloc(a->chunk, n * sizeof *grown);
    if (!grown)
      return -1;
    memset(grown + a->nchunk, 0, extra);
    a->chunk = grown;
    a->nchunk = n;
    charge(g, part, extra);
  }
  if (!a->chunk[c]) {
    if (g->memory_used + CHUNK_LEN * size > g->memory_limit)
      return -1;
    if (!(a->chunk[c] = calloc(CHUNK_LEN, size)))
      return -1;
    charge(g, part, CHUNK_LEN * size);
  }
  return 0;
}

static void chunk_free(chunked *a) {
  for (size_t c = 0; c < a->nchunk; c++)
    free(a->chunk[c]);
  free(a->chunk);
}

static uint64_t hash_context(const context *c) {
  uint64_t h = mix64(((uint64_t)c->labels << 32) | (uint32_t)c->tid);
  h = mix64(h ^ c->span_id);
  h = mix64(h ^ c->local_root_span_id);
  return mix64(h ^ c->time_bucket_ns);
}

static int same_context(const context *a, const context *b) {
  return a->labels == b->labels && a->tid == b->tid &&
         a->span_id == b->span_id &&
         a->local_root_span_id == b->local_root_span_id &&
         a->time_bucket_ns == b->time_bucket_ns;
}

static uint64_t hash_pair(uint32_t a, uint32_t b) {
  return mix64(((uint64_t)a << 32) | b);
}

static uint64_t loc_hash(const cp_generation *g, uint32_t i) {
  return mix64(g->loc_words[i]);
}
/* Nodes are found by (parent, frame word), so that a frame seen before
 * costs one probe, not a location probe and then a node probe. */
static uint64_t node_key_hash(uint32_t parent, uint64_t word) {
  return mix64(word ^ ((uint64_t)parent * 0x9e3779b97f4a7c15ull));
}
static uint64_t node_hash(const cp_generation *g, uint32_t i) {
  const cp_node *n = node_at(g, i);
  return node_key_hash(n->parent, g->loc_words[n->location]);
}
static uint64_t row_hash(const cp_generation *g, uint32_t i) {
  const row *r = row_at(g, i);
  return hash_pair(r->node, r->ctx);
}
static uint64_t context_hash(const cp_generation *g, uint32_t i) {
  return hash_context(context_at(g, i));
}
static uint64_t thread_hash(const cp_generation *g, uint32_t i) {
  return mix64((uint32_t)g->threads[i].tid);
}

static void index_free(index_t *ix) {
  if (ix->slots != no_slots)
    free(ix->slots);
}

/* Puts entry i, of hash h, into an index with room for it. */
static void index_insert(index_t *ix, uint64_t h, uint32_t i) {
  probe_t p = probe_start(ix, h);
  while (ix->slots[p.slot])
    if (++p.slot == ix->cap)
      p.slot = 0;
  ix->slots[p.slot] = p.tag | (i + 1);
  ix->used++;
}

#define ALL_SLOTS ((size_t)-1)

/* Makes room for one more entry, numbered next, within the memory bound.
 * The index holds entries first..next-1, or with first ALL_SLOTS whichever
 * are in its slots: the location index, which cp_gen_forget_addresses
 * empties of program counters, so that its entry numbers run ahead of used
 * (a slot must still hold next + 1). */
static int index_reserve(cp_generation *g, index_t *ix, size_t first,
                         size_t next,
                         uint64_t (*hash_of)(const cp_generation *, uint32_t),
                         size_t *part) {
  if ((ix->used + 1) * 5 <= ix->cap * 4 && next + 1 < ix->cap)
    return 0;
  size_t cap = ix->cap ? ix->cap + ix->cap / 2 : 64;
  while (cap <= next + 1)
    cap += cap / 2;
  if (cap > UINT32_MAX)
    return -1;
  size_t extra = (cap - ix->cap) * sizeof(uint32_t);
  if (g->memory_used + extra > g->memory_limit)
    return -1;
  unsigned bits = 64 - (unsigned)__builtin_clzll(cap);
  index_t grown = {calloc(cap, sizeof(uint32_t)), cap, 0,
                   bits >= 32 ? UINT32_MAX : (1u << bits) - 1};
  if (!grown.slots)
    return -1;
  if (first != ALL_SLOTS) {
    /* Entries first..next-1 are all indexed: rehash them in their order,
     * which reads the tables front to back; slot order reads them at
     * random, a cache miss per entry once the tables outgrow the cache. */
    for (size_t e = first; e < next; e++)
      index_insert(&grown, hash_of(g, (uint32_t)e), (uint32_t)e);
  } else {
    for (size_t i = 0; i < ix->cap; i++)
      if (ix->slots[i]) {
        uint32_t e = (ix->slots[i] & ix->id_mask) - 1;
        index_insert(&grown, hash_of(g, e), e);
      }
  }
  index_free(ix);
  *ix = grown;
  charge(g, part, extra);
  return 0;
}

/* Doubles the array *items of *cap elements of elem bytes (first_cap for
 * an empty one), charging `part`; -1 past the bound or without memory. */
static int grow_charged(cp_generation *g, void **items, size_t *cap,
                        size_t first_cap, size_t elem, size_t *part) {
  size_t grown_cap = *cap ? *cap * 2 : first_cap;
  size_t extra = (grown_cap - *cap) * elem;
  if (g->memory_used + extra > g->memory_limit)
    return -1;
  void *grown = realloc(*items, grown_cap * elem);
  if (!grown)
    return -1;
  *items = grown;
  *cap = grown_cap;
  charge(g, part, extra);
  return 0;
}

/* Notes location `index` as pending; -1 (then resolve it now) past the
 * memory bound. */
static int pending_add(cp_generation *g, uint32_t index) {
  if (g->npending == g->pending_cap) {
    void *items = g->pending;
    if (grow_charged(g, &items, &g->pending_cap, 64, sizeof *g->pending,
                     &g->mem.locations))
      return -1;
    g->pending = items;
  }
  g->pending[g->npending++] = index;
  return 0;
}

/* Location `index` (*l) of frame word `word`: its mapping, and its function
 * when the object's symbol table is read; else the location is pending. */
static void resolve_location(cp_generation *g, uint32_t index, uint64_t word,
                             cp_location *l) {
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
  if (!g->defer_reads)
    cp_symbols_lookup(word, &sym);
  else if (cp_symbols_lookup_cached(word, &sym) == 1 &&
           pending_add(g, index) != 0)
    cp_symbols_lookup_in(sym.mapping, word, &sym);
  l->address = word;
  l->mapping = sym.mapping;
  l->function = sym.function;
  if (sym.mapping)
    cp_symbols_mark_used(sym.mapping, g->id);
}

void cp_gen_set_defer_reads(cp_generation *g, int on) { g->defer_reads = on; }

/* Locations named per call of cp_symbols_lookup_batch at most. */
#define RESOLVE_BATCH 256

typedef struct pending_item {
  const cp_mapping *mapping;
  uint64_t address;
  uint32_t index;
} pending_item;

static int pending_item_cmp(const void *pa, const void *pb) {
  const pending_item *a = pa, *b = pb;
  if (a->mapping != b->mapping)
    return (uintptr_t)a->mapping < (uintptr_t)b->mapping ? -1 : 1;
  return a->address < b->address ? -1 : a->address > b->address;
}

size_t cp_gen_resolve_pending(cp_generation *g, int (*stop)(void)) {
  pending_item item[RESOLVE_BATCH];
  uint64_t pcs[RESOLVE_BATCH];
  const char *functions[RESOLVE_BATCH];
  while (g->npending && !(stop && stop())) {
    /* A batch by mapping: one read, or one scan, of each file for all its
     * addresses (a short-lived process's few samples: symbols.h). */
    size_t n = g->npending < RESOLVE_BATCH ? g->npending : RESOLVE_BATCH;
    g->npending -= n;
    for (size_t i = 0; i < n; i++) {
      uint32_t index = g->pending[g->npending + i];
      item[i] =
          (pending_item){g->locs[index].mapping, g->locs[index].address, index};
    }
    qsort(item, n, sizeof *item, pending_item_cmp);
    for (size_t i = 0, j; i < n; i = j) {
      for (j = i; j < n && item[j].mapping == item[i].mapping; j++)
        pcs[j - i] = item[j].address;
      cp_symbols_lookup_batch(item[i].mapping, pcs, j - i, functions);
      for (size_t k = i; k < j; k++)
        g->locs[item[k].index].function = functions[k - i];
    }
  }
  return g->npending;
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
  charge(g, &g->mem.locations, extra);
  return 0;
}

/* The location of a frame word, created on first sight; -1 past the bound. */
static int64_t location_of(cp_generation *g, uint64_t word) {
  uint64_t h = mix64(word);
  probe_t p = probe_start(&g->loc_index, h);
  for (int64_t e; (e = probe_next(&g->loc_index, &p)) >= 0;)
    if (g->loc_words[e] == word)
      return e;
  if (index_reserve(g, &g->loc_index, ALL_SLOTS, g->nlocs, loc_hash,
                    &g->mem.locations) ||
      locs_reserve(g))
    return -1;
  uint32_t i = (uint32_t)g->nlocs++;
  g->loc_words[i] = word;
  resolve_location(g, i, word, &g->locs[i]);
  index_insert(&g->loc_index, h, i);
  return i;
}

/* The child of parent for frame word `word` (its location made on first
 * sight), created on first sight; -1 past the bound. */
static int64_t child_of(cp_generation *g, uint32_t parent, uint64_t word) {
  uint64_t h = node_key_hash(parent, word);
  probe_t p = probe_start(&g->node_index, h);
  for (int64_t e; (e = probe_next(&g->node_index, &p)) >= 0;) {
    const cp_node *n = node_at(g, (size_t)e);
    if (n->parent == parent && g->loc_words[n->location] == word)
      return e;
  }
  int64_t loc = location_of(g, word);
  /* After cp_gen_forget_addresses the index holds only some nodes: grow it
   * from its slots then. */
  if (loc < 0 ||
      index_reserve(g, &g->node_index, g->forgot ? ALL_SLOTS : 1, g->nnodes,
                    node_hash, &g->mem.node_index) ||
      chunk_reserve(g, &g->nodes, g->nnodes, sizeof(cp_node), &g->mem.nodes))
    return -1;
  uint32_t i = (uint32_t)g->nnodes++;
  *node_at(g, i) = (cp_node){parent, (uint32_t)loc};
  index_insert(&g->node_index, h, i);
  return i;
}

/* The context of a sample key, created on first sight; -1 past the bound. */
static int64_t context_of(cp_generation *g, const cp_sample_key *key) {
  context c = {key->labels, key->tid, key->span_id, key->local_root_span_id,
               key->time_bucket_ns};
  uint64_t h = hash_context(&c);
  probe_t p = probe_start(&g->context_index, h);
  for (int64_t e; (e = probe_next(&g->context_index, &p)) >= 0;)
    if (same_context(context_at(g, (size_t)e), &c))
      return e;
  if (index_reserve(g, &g->context_index, 0, g->ncontexts, context_hash,
                    &g->mem.contexts) ||
      chunk_reserve(g, &g->contexts, g->ncontexts, sizeof(context),
                    &g->mem.contexts))
    return -1;
  uint32_t i = (uint32_t)g->ncontexts++;
  *context_at(g, i) = c;
  index_insert(&g->context_index, h, i);
  return i;
}

/* The row of (leaf node, context), created on first sight; -1 past the
 * bound. */
static int64_t row_of(cp_generation *g, uint32_t node, uint32_t ctx) {
  uint64_t h = hash_pair(node, ctx);
  probe_t p = probe_start(&g->row_index, h);
  for (int64_t e; (e = probe_next(&g->row_index, &p)) >= 0;) {
    const row *r = row_at(g, (size_t)e);
    if (r->node == node && r->ctx == ctx)
      return e;
  }
  if (index_reserve(g, &g->row_index, 0, g->nrows, row_hash,
                    &g->mem.row_index) ||
      chunk_reserve(g, &g->rows, g->nrows, sizeof(row), &g->mem.rows))
    return -1;
  uint32_t i = (uint32_t)g->nrows++;
  *row_at(g, i) = (row){node, ctx};
  index_insert(&g->row_index, h, i);
  return i;
}

cp_generation *cp_gen_create(uint64_t id, size_t memory_limit) {
  cp_generation *g = calloc(1, sizeof *g);
  if (!g)
    return NULL;
  g->id = id;
  g->loc_index.slots = g->node_index.slots = g->row_index.slots =
      g->context_index.slots = g->thread_index.slots = no_slots;
  /* The root, the empty context and the overflow stack are made up front so
   * that they always fit. */
  g->memory_limit = (size_t)-1;
  int64_t node = -1, ctx = -1, r = -1;
  if (chunk_reserve(g, &g->nodes, 0, sizeof(cp_node), &g->mem.nodes) == 0) {
    *node_at(g, 0) = (cp_node){0, 0};
    g->nnodes = 1;
    node = child_of(g, 0, cp_frame_overflow());
  }
  if (node >= 0) {
    cp_sample_key empty = {0};
    ctx = context_of(g, &empty);
  }
  if (ctx == 0)
    r = row_of(g, (uint32_t)node, 0);
  if (r < 0) {
    cp_gen_destroy(g);
    return NULL;
  }
  g->overflow_row = (uint32_t)r;
  g->memory_limit = memory_limit;
  return g;
}

void cp_gen_destroy(cp_generation *g) {
  if (!g)
    return;
  free(g->locs);
  free(g->loc_words);
  free(g->pending);
  index_free(&g->loc_index);
  chunk_free(&g->nodes);
  index_free(&g->node_index);
  chunk_free(&g->rows);
  index_free(&g->row_index);
  for (int k = 0; k < CONTPROF_KIND_COUNT; k++)
    chunk_free(&g->values[k].cells);
  chunk_free(&g->contexts);
  index_free(&g->context_index);
  for (size_t i = 0; i < g->nthreads; i++)
    free(g->threads[i].name);
  free(g->threads);
  index_free(&g->thread_index);
  free(g);
}

uint64_t cp_gen_id(const cp_generation *g) { return g->id; }

static uint64_t wrap_mul(int64_t a, int64_t b) {
  return (uint64_t)a * (uint64_t)b;
}

static int fits32(int64_t v) { return v >= INT32_MIN && v <= INT32_MAX; }

/* Rewrites a narrow column wide, chunk by chunk; -1 past the bound (then
 * nothing changed). */
static int widen(cp_generation *g, kind_column *col) {
  size_t present = 0;
  for (size_t c = 0; c < col->cells.nchunk; c++)
    present += col->cells.chunk[c] != NULL;
  size_t extra =
      present * CHUNK_LEN * (sizeof(kind_values) - sizeof(narrow_values));
  if (g->memory_used + extra > g->memory_limit)
    return -1;
  char **wide = calloc(col->cells.nchunk, sizeof *wide);
  if (!wide)
    return -1;
  for (size_t c = 0; c < col->cells.nchunk; c++) {
    if (!col->cells.chunk[c])
      continue;
    if (!(wide[c] = malloc(CHUNK_LEN * sizeof(kind_values)))) {
      for (size_t k = 0; k < c; k++)
        free(wide[k]);
      free(wide);
      return -1;
    }
  }
  for (size_t c = 0; c < col->cells.nchunk; c++) {
    if (!col->cells.chunk[c])
      continue;
    const narrow_values *from = (const narrow_values *)col->cells.chunk[c];
    kind_values *to = (kind_values *)wide[c];
    for (size_t i = 0; i < CHUNK_LEN; i++)
      to[i] = (kind_values){from[i].count,
                            (int64_t)(wrap_mul(from[i].count, col->ratio) +
                                      (uint64_t)(int64_t)from[i].residual)};
    free(col->cells.chunk[c]);
  }
  free(col->cells.chunk);
  col->cells.chunk = wide;
  col->wide = 1;
  charge(g, &g->mem.values, extra);
  return 0;
}

/* Adds to row r's values of kind; -1 when its column has no room. */
static int add_values(cp_generation *g, uint32_t r, contprof_sample_kind kind,
                      int64_t count, int64_t quantity) {
  kind_column *col = &g->values[kind];
  if (!col->used) {
    col->used = 1;
    col->ratio = count > 0 ? quantity / count : 0;
  }
  size_t size = col->wide ? sizeof(kind_values) : sizeof(narrow_values);
  if (chunk_reserve(g, &col->cells, r, size, &g->mem.values))
    return -1;
  if (!col->wide) {
    narrow_values *v = chunk_entry(&col->cells, r, sizeof *v);
    int64_t residual =
        (int64_t)((uint64_t)quantity - wrap_mul(count, col->ratio));
    int64_t c, res;
    if (!__builtin_add_overflow((int64_t)v->count, count, &c) &&
        !__builtin_add_overflow((int64_t)v->residual, residual, &res) &&
        fits32(c) && fits32(res)) {
      v->count = (int32_t)c;
      v->residual = (int32_t)res;
      return 0;
    }
    if (widen(g, col))
      return -1;
  }
  kind_values *v = chunk_entry(&col->cells, r, sizeof *v);
  v->count = (int64_t)((uint64_t)v->count + (uint64_t)count);
  v->quantity = (int64_t)((uint64_t)v->quantity + (uint64_t)quantity);
  return 0;
}

int cp_gen_add(cp_generation *g, const uint64_t *frames, size_t nframes,
               int truncated, const cp_sample_key *key,
               contprof_sample_kind kind, int64_t count, int64_t quantity) {
  if ((unsigned)kind >= CONTPROF_KIND_COUNT)
    return -1;
  g->samples_added++;
  int64_t node = 0;
  if (truncated) {
    node = child_of(g, 0, cp_frame_truncated());
  }
  for (size_t i = nframes; i-- > 0 && node >= 0;) {
    uint64_t word = frames[i];
    if (i > 0 && !cp_frame_is_runtime(word)) {
      /* A function of ours between two of the application's frames: not
       * in the stack the application would have without us. */
      if (cp_passthrough_holds(word))
        continue;
      /* Callers' return addresses point after the call: step back into
       * it. */
      if (word > 0)
        word--;
    }
    node = child_of(g, (uint32_t)node, word);
  }
  int64_t ctx = node < 0 ? -1 : context_of(g, key);
  int64_t r = ctx < 0 ? -1 : row_of(g, (uint32_t)node, (uint32_t)ctx);
  if (r >= 0 && (uint32_t)r != g->overflow_row &&
      add_values(g, (uint32_t)r, kind, count, quantity) == 0)
    return 0;
  kind_values *o = &g->overflow_values[kind];
  o->count = (int64_t)((uint64_t)o->count + (uint64_t)count);
  o->quantity = (int64_t)((uint64_t)o->quantity + (uint64_t)quantity);
  if (r == g->overflow_row)
    return 0;
  g->samples_overflowed++;
  return 1;
}

void cp_gen_forget_addresses(cp_generation *g) {
  /* Keep runtime frames, drop every program counter from the index. */
  if (!g->loc_index.cap)
    return;
  memset(g->loc_index.slots, 0, g->loc_index.cap * sizeof(uint32_t));
  g->loc_index.used = 0;
  for (uint32_t i = 0; i < g->nlocs; i++)
    if (cp_frame_is_runtime(g->loc_words[i]))
      index_insert(&g->loc_index, loc_hash(g, i), i);
  /* Nodes are found by frame word: drop those of the forgotten program
   * counters, so that their words make new nodes with new locations (the
   * dropped nodes' children can only be reached through them). */
  g->forgot = 1;
  memset(g->node_index.slots, 0, g->node_index.cap * sizeof(uint32_t));
  g->node_index.used = 0;
  for (uint32_t i = 1; i < g->nnodes; i++)
    if (cp_frame_is_runtime(g->loc_words[node_at(g, i)->location]))
      index_insert(&g->node_index, node_hash(g, i), i);
}

/* The entry of tid in the thread table, or -1. */
static int64_t thread_find(const cp_generation *g, pid_t tid) {
  probe_t p = probe_start(&g->thread_index, mix64((uint32_t)tid));
  for (int64_t e; (e = probe_next(&g->thread_index, &p)) >= 0;)
    if (g->threads[e].tid == tid)
      return e;
  return -1;
}

/* Room for one more thread name, within the bound. */
static int threads_reserve(cp_generation *g) {
  if (g->nthreads < g->threads_cap)
    return 0;
  void *items = g->threads;
  if (grow_charged(g, &items, &g->threads_cap, 16, sizeof *g->threads,
                   &g->mem.threads))
    return -1;
  g->threads = items;
  return 0;
}

void cp_gen_set_thread_name(cp_generation *g, pid_t tid, const char *name) {
  int64_t e = thread_find(g, tid);
  if (e >= 0) {
    thread_name *t = &g->threads[e];
    if (strcmp(t->name, name) == 0)
      return;
    char *copy = strdup(name);
    if (!copy)
      return;
    g->memory_used += strlen(copy) + 1;
    g->memory_used -= strlen(t->name) + 1;
    g->mem.threads += strlen(copy) + 1;
    g->mem.threads -= strlen(t->name) + 1;
    free(t->name);
    t->name = copy;
    return;
  }
  if (index_reserve(g, &g->thread_index, 0, g->nthreads, thread_hash,
                    &g->mem.threads) ||
      threads_reserve(g))
    return;
  char *copy = strdup(name);
  if (!copy)
    return;
  g->threads[g->nthreads] = (thread_name){tid, copy};
  index_insert(&g->thread_index, mix64((uint32_t)tid), (uint32_t)g->nthreads++);
  g->memory_used += strlen(copy) + 1;
  g->mem.threads += strlen(copy) + 1;
}

const char *cp_gen_thread_name(const cp_generation *g, pid_t tid) {
  int64_t e = thread_find(g, tid);
  return e >= 0 ? g->threads[e].name : NULL;
}

size_t cp_gen_location_count(const cp_generation *g) { return g->nlocs; }
const cp_location *cp_gen_location(const cp_generation *g, size_t i) {
  return &g->locs[i];
}
size_t cp_gen_node_count(const cp_generation *g) { return g->nnodes; }
const cp_node *cp_gen_node(const cp_generation *g, size_t i) {
  return node_at(g, i);
}
size_t cp_gen_sample_count(const cp_generation *g) { return g->nrows; }

void cp_gen_sample(const cp_generation *g, size_t i, cp_sample *out) {
  const row *r = row_at(g, i);
  const context *c = context_at(g, r->ctx);
  out->key = (cp_sample_key){.node = r->node,
                             .labels = c->labels,
                             .tid = c->tid,
                             .span_id = c->span_id,
                             .local_root_span_id = c->local_root_span_id,
                             .time_bucket_ns = c->time_bucket_ns};
  for (int k = 0; k < CONTPROF_KIND_COUNT; k++) {
    const kind_column *col = &g->values[k];
    kind_values v = {0, 0};
    size_t chunk = i >> CHUNK_BITS;
    if (chunk < col->cells.nchunk && col->cells.chunk[chunk]) {
      if (col->wide) {
        v = *(const kind_values *)chunk_entry(&col->cells, i, sizeof v);
      } else {
        const narrow_values *n =
            chunk_entry(&col->cells, i, sizeof(narrow_values));
        v.count = n->count;
        v.quantity = (int64_t)(wrap_mul(n->count, col->ratio) +
                               (uint64_t)(int64_t)n->residual);
      }
    }
    if (i == g->overflow_row)
      v = g->overflow_values[k];
    int at = cp_kind_value_index((contprof_sample_kind)k);
    out->values[at] = v.count;
    out->values[at + 1] = v.quantity;
  }
}

uint64_t cp_gen_samples_added(const cp_generation *g) {
  return g->samples_added;
}
uint64_t cp_gen_samples_overflowed(const cp_generation *g) {
  return g->samples_overflowed;
}
size_t cp_gen_memory_used(const cp_generation *g) { return g->memory_used; }

void cp_gen_memory_breakdown(const cp_generation *g, cp_gen_memory *out) {
  *out = g->mem;
}
