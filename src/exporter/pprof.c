/* The pprof builder: a profile's model (strings, mappings, functions,
 * locations, merged samples) kept in plain arrays with hash indexes, and a
 * thin encoder (pprof_encode) that is the only code touching protobuf-c. */
#include "exporter/pprof.h"

#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "profile.pb-c.h"

/* ---- model ---------------------------------------------------------------
 * Strings are referred to by their string table index everywhere below. */

typedef struct pp_value_type {
  int64_t type, unit;
} pp_value_type;

typedef struct pp_mapping {
  uint64_t start, limit, file_offset;
  int64_t filename, build_id;
  bool has_functions;
} pp_mapping;

typedef struct pp_function {
  int64_t name, system_name, filename, start_line;
} pp_function;

typedef struct pp_line {
  uint64_t function_id;
  int64_t line;
} pp_line;

/* lines[first_line, first_line + nlines) of the builder: innermost (the
 * inlined function) first, the function it was inlined into last. */
typedef struct pp_location {
  uint64_t mapping_id, address;
  size_t first_line, nlines;
} pp_location;

typedef struct pp_label {
  int64_t key, str, num, num_unit;
} pp_label;

/* One block per sample: values[nvalues], then locations[nlocations], then
 * labels[nlabels] (sorted, so that equal label sets compare equal). */
typedef struct pp_sample {
  int64_t *values;
  uint64_t *locations;
  pp_label *labels;
  size_t nlocations, nlabels;
} pp_sample;

/* Open addressing table of entry indexes, keyed by a hash the caller
 * computes; equality is the caller's, so one table type serves every kind of
 * entry. Slots hold index + 1 (0 is empty). */
typedef struct index_map {
  size_t *slots;
  uint64_t *hashes;
  size_t cap; /* 0 or a power of two */
  size_t count;
} index_map;

struct pprof_builder {
  char **strings;
  size_t nstrings, strings_cap;
  index_map string_index;

  pp_value_type *sample_types;
  size_t nsample_types, sample_types_cap;
  int64_t default_sample_type;
  pp_value_type period_type;
  int64_t period;
  int64_t time_nanos, duration_nanos;
  int64_t *comments;
  size_t ncomments, comments_cap;

  pp_mapping *mappings; /* id = index + 1, and likewise below */
  size_t nmappings, mappings_cap;
  index_map mapping_index;

  pp_function *functions;
  size_t nfunctions, functions_cap;
  index_map function_index;

  pp_location *locations;
  size_t nlocations, locations_cap;
  index_map location_index;
  pp_line *lines; /* of every location, see pp_location */
  size_t nlines, lines_cap;

  pp_sample *samples;
  size_t nsamples, samples_cap;
  index_map sample_index;
  size_t total_labels; /* over all samples, sizes the encoder's arrays */
};

/* ---- helpers ------------------------------------------------------------- */

/* Returns the array p with room for need elements of size elem (moved if it
 * had to grow; *cap updated), or NULL on ENOMEM with p untouched. */
static void *grow(void *p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap)
    return p;
  size_t ncap = *cap ? *cap : 16;
  while (ncap < need) {
    if (ncap > SIZE_MAX / 2)
      return NULL;
    ncap *= 2;
  }
  if (ncap > SIZE_MAX / elem)
    return NULL;
  void *np = realloc(p, ncap * elem);
  if (np)
    *cap = ncap;
  return np;
}

static uint64_t hash_bytes(uint64_t h, const void *data, size_t len) {
  const unsigned char *p = data;
  for (size_t i = 0; i < len; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull; /* FNV-1a */
  }
  return h;
}

static uint64_t hash_u64(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

/* Spreads the bits so that the low bits used as slot index are good. */
static uint64_t hash_finish(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

#define HASH_SEED 0xcbf29ce484222325ull

/* Ensures one more entry fits with the load factor at most 1/2. */
static int index_map_reserve(index_map *m) {
  if (m->cap && (m->count + 1) * 2 <= m->cap)
    return 0;
  size_t ncap = m->cap ? m->cap : 32;
  while ((m->count + 1) * 2 > ncap) {
    if (ncap > SIZE_MAX / 2 / sizeof(uint64_t))
      return -1;
    ncap *= 2;
  }
  size_t *slots = calloc(ncap, sizeof *slots);
  uint64_t *hashes = malloc(ncap * sizeof *hashes);
  if (!slots || !hashes) {
    free(slots);
    free(hashes);
    return -1;
  }
  for (size_t i = 0; i < m->cap; i++) {
    if (!m->slots[i])
      continue;
    size_t j = (size_t)m->hashes[i] & (ncap - 1);
    while (slots[j])
      j = (j + 1) & (ncap - 1);
    slots[j] = m->slots[i];
    hashes[j] = m->hashes[i];
  }
  free(m->slots);
  free(m->hashes);
  m->slots = slots;
  m->hashes = hashes;
  m->cap = ncap;
  return 0;
}

typedef bool (*entry_eq)(const pprof_builder *b, size_t entry, const void *key);

/* Returns the slot holding the entry equal to key, or the empty slot where it
 * belongs. The map must have capacity (index_map_reserve). */
static size_t index_map_probe(const index_map *m, const pprof_builder *b,
                              uint64_t h, entry_eq eq, const void *key) {
  size_t j = (size_t)h & (m->cap - 1);
  while (m->slots[j]) {
    if (m->hashes[j] == h && eq(b, m->slots[j] - 1, key))
      return j;
    j = (j + 1) & (m->cap - 1);
  }
  return j;
}

static void index_map_set(index_map *m, size_t slot, uint64_t h, size_t entry) {
  m->slots[slot] = entry + 1;
  m->hashes[slot] = h;
  m->count++;
}

static void index_map_free(index_map *m) {
  free(m->slots);
  free(m->hashes);
}

/* ---- builder ------------------------------------------------------------- */

pprof_builder *pprof_builder_create(void) {
  pprof_builder *b = calloc(1, sizeof *b);
  if (!b)
    return NULL;
  if (pprof_string(b, "") != 0) {
    pprof_builder_destroy(b);
    return NULL;
  }
  return b;
}

void pprof_builder_destroy(pprof_builder *b) {
  if (!b)
    return;
  for (size_t i = 0; i < b->nstrings; i++)
    free(b->strings[i]);
  free(b->strings);
  index_map_free(&b->string_index);
  free(b->sample_types);
  free(b->comments);
  free(b->mappings);
  index_map_free(&b->mapping_index);
  free(b->functions);
  index_map_free(&b->function_index);
  free(b->locations);
  free(b->lines);
  index_map_free(&b->location_index);
  for (size_t i = 0; i < b->nsamples; i++)
    free(b->samples[i].values); /* the sample's one block */
  free(b->samples);
  index_map_free(&b->sample_index);
  free(b);
}

static bool string_eq(const pprof_builder *b, size_t entry, const void *key) {
  return strcmp(b->strings[entry], key) == 0;
}

int64_t pprof_string(pprof_builder *b, const char *s) {
  if (!s)
    s = "";
  size_t len = strlen(s);
  uint64_t h = hash_finish(hash_bytes(HASH_SEED, s, len));
  if (index_map_reserve(&b->string_index) != 0)
    return -1;
  size_t slot = index_map_probe(&b->string_index, b, h, string_eq, s);
  if (b->string_index.slots[slot])
    return (int64_t)(b->string_index.slots[slot] - 1);
  char **strings =
      grow(b->strings, &b->strings_cap, b->nstrings + 1, sizeof *strings);
  if (!strings)
    return -1;
  b->strings = strings;
  char *copy = malloc(len + 1);
  if (!copy)
    return -1;
  memcpy(copy, s, len + 1);
  b->strings[b->nstrings] = copy;
  index_map_set(&b->string_index, slot, h, b->nstrings);
  return (int64_t)b->nstrings++;
}

int pprof_add_sample_type(pprof_builder *b, const char *type,
                          const char *unit) {
  /* Existing samples would lack a value for the new type. */
  if (b->nsamples > 0 || b->nsample_types >= INT_MAX)
    return -1;
  int64_t t = pprof_string(b, type), u = pprof_string(b, unit);
  if (t < 0 || u < 0)
    return -1;
  pp_value_type *types = grow(b->sample_types, &b->sample_types_cap,
                              b->nsample_types + 1, sizeof *types);
  if (!types)
    return -1;
  b->sample_types = types;
  b->sample_types[b->nsample_types] = (pp_value_type){t, u};
  return (int)b->nsample_types++;
}

void pprof_set_default_sample_type(pprof_builder *b, const char *type) {
  int64_t t = pprof_string(b, type);
  b->default_sample_type = t < 0 ? 0 : t;
}

void pprof_set_period(pprof_builder *b, const char *type, const char *unit,
                      int64_t period) {
  int64_t t = pprof_string(b, type), u = pprof_string(b, unit);
  b->period_type = (pp_value_type){t < 0 ? 0 : t, u < 0 ? 0 : u};
  b->period = period;
}

void pprof_set_time(pprof_builder *b, int64_t time_nanos,
                    int64_t duration_nanos) {
  b->time_nanos = time_nanos;
  b->duration_nanos = duration_nanos;
}

void pprof_add_comment(pprof_builder *b, const char *comment) {
  int64_t c = pprof_string(b, comment);
  if (c < 0)
    return; /* a lost comment is not worth failing the profile */
  int64_t *comments =
      grow(b->comments, &b->comments_cap, b->ncomments + 1, sizeof *comments);
  if (!comments)
    return;
  b->comments = comments;
  b->comments[b->ncomments++] = c;
}

static bool mapping_eq(const pprof_builder *b, size_t entry, const void *key) {
  const pp_mapping *m = &b->mappings[entry], *k = key;
  return m->start == k->start && m->filename == k->filename;
}

uint64_t pprof_add_mapping(pprof_builder *b, uint64_t start, uint64_t limit,
                           uint64_t file_offset, const char *filename,
                           const char *build_id, int has_functions) {
  int64_t f = pprof_string(b, filename), id = pprof_string(b, build_id);
  if (f < 0 || id < 0 || index_map_reserve(&b->mapping_index) != 0)
    return 0;
  pp_mapping m = {start, limit, file_offset, f, id, has_functions != 0};
  uint64_t h = hash_finish(hash_u64(hash_u64(HASH_SEED, start), (uint64_t)f));
  size_t slot = index_map_probe(&b->mapping_index, b, h, mapping_eq, &m);
  if (b->mapping_index.slots[slot])
    return b->mapping_index.slots[slot];
  pp_mapping *mappings =
      grow(b->mappings, &b->mappings_cap, b->nmappings + 1, sizeof *mappings);
  if (!mappings)
    return 0;
  b->mappings = mappings;
  b->mappings[b->nmappings] = m;
  index_map_set(&b->mapping_index, slot, h, b->nmappings);
  return ++b->nmappings;
}

static bool function_eq(const pprof_builder *b, size_t entry, const void *key) {
  const pp_function *f = &b->functions[entry], *k = key;
  return f->name == k->name && f->system_name == k->system_name &&
         f->filename == k->filename;
}

uint64_t pprof_add_function(pprof_builder *b, const char *name,
                            const char *system_name, const char *filename,
                            int64_t start_line) {
  int64_t n = pprof_string(b, name), s = pprof_string(b, system_name),
          f = pprof_string(b, filename);
  if (n < 0 || s < 0 || f < 0 || index_map_reserve(&b->function_index) != 0)
    return 0;
  pp_function fn = {n, s, f, start_line};
  uint64_t h = hash_u64(hash_u64(hash_u64(HASH_SEED, (uint64_t)n), (uint64_t)s),
                        (uint64_t)f);
  h = hash_finish(h);
  size_t slot = index_map_probe(&b->function_index, b, h, function_eq, &fn);
  if (b->function_index.slots[slot])
    return b->function_index.slots[slot];
  pp_function *functions = grow(b->functions, &b->functions_cap,
                                b->nfunctions + 1, sizeof *functions);
  if (!functions)
    return 0;
  b->functions = functions;
  b->functions[b->nfunctions] = fn;
  index_map_set(&b->function_index, slot, h, b->nfunctions);
  return ++b->nfunctions;
}

/* A location being looked up: its lines are the caller's. */
typedef struct location_key {
  uint64_t mapping_id, address;
  const pprof_line *lines;
  size_t nlines;
} location_key;

static bool location_eq(const pprof_builder *b, size_t entry, const void *key) {
  const pp_location *l = &b->locations[entry];
  const location_key *k = key;
  if (l->mapping_id != k->mapping_id || l->address != k->address ||
      l->nlines != k->nlines)
    return false;
  for (size_t i = 0; i < k->nlines; i++) {
    const pp_line *have = &b->lines[l->first_line + i];
    if (have->function_id != k->lines[i].function_id ||
        have->line != k->lines[i].line)
      return false;
  }
  return true;
}

uint64_t pprof_add_location_lines(pprof_builder *b, uint64_t mapping_id,
                                  uint64_t address, const pprof_line *lines,
                                  size_t nlines) {
  /* A dangling id would make the profile invalid for every reader. */
  if (mapping_id > b->nmappings || nlines > PPROF_MAX_LINES)
    return 0;
  for (size_t i = 0; i < nlines; i++)
    if (lines[i].function_id == 0 || lines[i].function_id > b->nfunctions)
      return 0;
  if (index_map_reserve(&b->location_index) != 0)
    return 0;
  location_key key = {mapping_id, address, lines, nlines};
  uint64_t h = hash_u64(hash_u64(HASH_SEED, mapping_id), address);
  for (size_t i = 0; i < nlines; i++)
    h = hash_u64(hash_u64(h, lines[i].function_id), (uint64_t)lines[i].line);
  h = hash_finish(h);
  size_t slot = index_map_probe(&b->location_index, b, h, location_eq, &key);
  if (b->location_index.slots[slot])
    return b->location_index.slots[slot];
  pp_location *locations = grow(b->locations, &b->locations_cap,
                                b->nlocations + 1, sizeof *locations);
  if (!locations)
    return 0;
  b->locations = locations;
  if (nlines) {
    pp_line *all =
        grow(b->lines, &b->lines_cap, b->nlines + nlines, sizeof *all);
    if (!all)
      return 0;
    b->lines = all;
  }
  for (size_t i = 0; i < nlines; i++)
    b->lines[b->nlines + i] = (pp_line){lines[i].function_id, lines[i].line};
  b->locations[b->nlocations] =
      (pp_location){mapping_id, address, b->nlines, nlines};
  b->nlines += nlines;
  index_map_set(&b->location_index, slot, h, b->nlocations);
  return ++b->nlocations;
}

uint64_t pprof_add_location(pprof_builder *b, uint64_t mapping_id,
                            uint64_t address, uint64_t function_id,
                            int64_t line) {
  if (function_id > b->nfunctions)
    return 0;
  pprof_line one = {function_id, line};
  return pprof_add_location_lines(b, mapping_id, address, &one,
                                  function_id ? 1 : 0);
}

static int label_cmp(const void *a, const void *b) {
  const pp_label *x = a, *y = b;
  if (x->key != y->key)
    return x->key < y->key ? -1 : 1;
  if (x->str != y->str)
    return x->str < y->str ? -1 : 1;
  if (x->num != y->num)
    return x->num < y->num ? -1 : 1;
  if (x->num_unit != y->num_unit)
    return x->num_unit < y->num_unit ? -1 : 1;
  return 0;
}

static bool sample_eq(const pprof_builder *b, size_t entry, const void *key) {
  const pp_sample *s = &b->samples[entry], *k = key;
  return s->nlocations == k->nlocations && s->nlabels == k->nlabels &&
         memcmp(s->locations, k->locations,
                s->nlocations * sizeof *s->locations) == 0 &&
         memcmp(s->labels, k->labels, s->nlabels * sizeof *s->labels) == 0;
}

static int64_t add_saturating(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    return b > 0 ? INT64_MAX : INT64_MIN;
  return r;
}

int pprof_add_sample(pprof_builder *b, const uint64_t *location_ids,
                     size_t nlocations, const int64_t *values, size_t nvalues,
                     const pprof_label *labels, size_t nlabels) {
  if (nvalues != b->nsample_types)
    return -1;
  for (size_t i = 0; i < nlocations; i++)
    if (location_ids[i] == 0 || location_ids[i] > b->nlocations)
      return -1;
  if (nlocations > (SIZE_MAX / 4) / sizeof(uint64_t) ||
      nlabels > (SIZE_MAX / 4) / sizeof(pp_label) ||
      nvalues > (SIZE_MAX / 4) / sizeof(int64_t))
    return -1;
  size_t size = nvalues * sizeof(int64_t) + nlocations * sizeof(uint64_t) +
                nlabels * sizeof(pp_label);
  pp_sample s = {0};
  s.values = malloc(size ? size : 1);
  if (!s.values)
    return -1;
  s.locations = (uint64_t *)(s.values + nvalues);
  s.labels = (pp_label *)(s.locations + nlocations);
  s.nlocations = nlocations;
  s.nlabels = nlabels;
  if (nvalues)
    memcpy(s.values, values, nvalues * sizeof *values);
  if (nlocations)
    memcpy(s.locations, location_ids, nlocations * sizeof *location_ids);
  for (size_t i = 0; i < nlabels; i++) {
    pp_label *l = &s.labels[i];
    l->key = pprof_string(b, labels[i].key);
    l->str = labels[i].str ? pprof_string(b, labels[i].str) : 0;
    l->num = labels[i].str ? 0 : labels[i].num;
    l->num_unit = (!labels[i].str && labels[i].num_unit)
                      ? pprof_string(b, labels[i].num_unit)
                      : 0;
    if (l->key < 0 || l->str < 0 || l->num_unit < 0)
      goto fail;
  }
  if (nlabels > 1)
    qsort(s.labels, nlabels, sizeof *s.labels, label_cmp);

  uint64_t h = hash_u64(HASH_SEED, nlocations);
  for (size_t i = 0; i < nlocations; i++)
    h = hash_u64(h, s.locations[i]);
  for (size_t i = 0; i < nlabels; i++) {
    h = hash_u64(hash_u64(h, (uint64_t)s.labels[i].key),
                 (uint64_t)s.labels[i].str);
    h = hash_u64(hash_u64(h, (uint64_t)s.labels[i].num),
                 (uint64_t)s.labels[i].num_unit);
  }
  h = hash_finish(h);
  if (index_map_reserve(&b->sample_index) != 0)
    goto fail;
  size_t slot = index_map_probe(&b->sample_index, b, h, sample_eq, &s);
  if (b->sample_index.slots[slot]) {
    pp_sample *same = &b->samples[b->sample_index.slots[slot] - 1];
    for (size_t i = 0; i < nvalues; i++)
      same->values[i] = add_saturating(same->values[i], values[i]);
    free(s.values);
    return 0;
  }
  pp_sample *samples =
      grow(b->samples, &b->samples_cap, b->nsamples + 1, sizeof *samples);
  if (!samples)
    goto fail;
  b->samples = samples;
  b->samples[b->nsamples] = s;
  index_map_set(&b->sample_index, slot, h, b->nsamples);
  b->nsamples++;
  b->total_labels += nlabels;
  return 0;
fail:
  free(s.values);
  return -1;
}

size_t pprof_sample_count(const pprof_builder *b) { return b->nsamples; }

/* ---- encoder: the only protobuf-c code ----------------------------------- */

/* Every array the protobuf-c message points to; the builder's own arrays are
 * borrowed (strings, location ids, values) and never written to. */
typedef struct encode_arena {
  Perftools__Profiles__ValueType *value_types, **value_type_ptrs;
  Perftools__Profiles__ValueType period_type;
  Perftools__Profiles__Mapping *mappings, **mapping_ptrs;
  Perftools__Profiles__Function *functions, **function_ptrs;
  Perftools__Profiles__Location *locations, **location_ptrs;
  Perftools__Profiles__Line *lines, **line_ptrs;
  Perftools__Profiles__Sample *samples, **sample_ptrs;
  Perftools__Profiles__Label *labels, **label_ptrs;
} encode_arena;

static void encode_arena_free(encode_arena *a) {
  free(a->value_types);
  free(a->value_type_ptrs);
  free(a->mappings);
  free(a->mapping_ptrs);
  free(a->functions);
  free(a->function_ptrs);
  free(a->locations);
  free(a->location_ptrs);
  free(a->lines);
  free(a->line_ptrs);
  free(a->samples);
  free(a->sample_ptrs);
  free(a->labels);
  free(a->label_ptrs);
}

/* calloc that succeeds (with a non-NULL pointer) for n == 0. */
static void *alloc_array(size_t n, size_t size) {
  return calloc(n ? n : 1, size);
}

int pprof_encode(const pprof_builder *b, uint8_t **out, size_t *len) {
  encode_arena a = {0};
  Perftools__Profiles__Profile p = PERFTOOLS__PROFILES__PROFILE__INIT;
  int rc = -1;

  a.value_types = alloc_array(b->nsample_types, sizeof *a.value_types);
  a.value_type_ptrs = alloc_array(b->nsample_types, sizeof *a.value_type_ptrs);
  a.mappings = alloc_array(b->nmappings, sizeof *a.mappings);
  a.mapping_ptrs = alloc_array(b->nmappings, sizeof *a.mapping_ptrs);
  a.functions = alloc_array(b->nfunctions, sizeof *a.functions);
  a.function_ptrs = alloc_array(b->nfunctions, sizeof *a.function_ptrs);
  a.locations = alloc_array(b->nlocations, sizeof *a.locations);
  a.location_ptrs = alloc_array(b->nlocations, sizeof *a.location_ptrs);
  a.lines = alloc_array(b->nlines, sizeof *a.lines);
  a.line_ptrs = alloc_array(b->nlines, sizeof *a.line_ptrs);
  a.samples = alloc_array(b->nsamples, sizeof *a.samples);
  a.sample_ptrs = alloc_array(b->nsamples, sizeof *a.sample_ptrs);
  a.labels = alloc_array(b->total_labels, sizeof *a.labels);
  a.label_ptrs = alloc_array(b->total_labels, sizeof *a.label_ptrs);
  if (!a.value_types || !a.value_type_ptrs || !a.mappings || !a.mapping_ptrs ||
      !a.functions || !a.function_ptrs || !a.locations || !a.location_ptrs ||
      !a.lines || !a.line_ptrs || !a.samples || !a.sample_ptrs || !a.labels ||
      !a.label_ptrs)
    goto done;

  for (size_t i = 0; i < b->nsample_types; i++) {
    Perftools__Profiles__ValueType *vt = &a.value_types[i];
    perftools__profiles__value_type__init(vt);
    vt->type = b->sample_types[i].type;
    vt->unit = b->sample_types[i].unit;
    a.value_type_ptrs[i] = vt;
  }
  p.n_sample_type = b->nsample_types;
  p.sample_type = a.value_type_ptrs;

  size_t label_at = 0;
  for (size_t i = 0; i < b->nsamples; i++) {
    const pp_sample *s = &b->samples[i];
    Perftools__Profiles__Sample *ps = &a.samples[i];
    perftools__profiles__sample__init(ps);
    ps->n_location_id = s->nlocations;
    ps->location_id = s->locations;
    ps->n_value = b->nsample_types;
    ps->value = s->values;
    ps->n_label = s->nlabels;
    ps->label = &a.label_ptrs[label_at];
    for (size_t j = 0; j < s->nlabels; j++, label_at++) {
      Perftools__Profiles__Label *l = &a.labels[label_at];
      perftools__profiles__label__init(l);
      l->key = s->labels[j].key;
      l->str = s->labels[j].str;
      l->num = s->labels[j].num;
      l->num_unit = s->labels[j].num_unit;
      a.label_ptrs[label_at] = l;
    }
    a.sample_ptrs[i] = ps;
  }
  p.n_sample = b->nsamples;
  p.sample = a.sample_ptrs;

  for (size_t i = 0; i < b->nmappings; i++) {
    const pp_mapping *m = &b->mappings[i];
    Perftools__Profiles__Mapping *pm = &a.mappings[i];
    perftools__profiles__mapping__init(pm);
    pm->id = i + 1;
    pm->memory_start = m->start;
    pm->memory_limit = m->limit;
    pm->file_offset = m->file_offset;
    pm->filename = m->filename;
    pm->build_id = m->build_id;
    pm->has_functions = m->has_functions;
    a.mapping_ptrs[i] = pm;
  }
  p.n_mapping = b->nmappings;
  p.mapping = a.mapping_ptrs;

  for (size_t i = 0; i < b->nlocations; i++) {
    const pp_location *l = &b->locations[i];
    Perftools__Profiles__Location *pl = &a.locations[i];
    perftools__profiles__location__init(pl);
    pl->id = i + 1;
    pl->mapping_id = l->mapping_id;
    pl->address = l->address;
    for (size_t j = 0; j < l->nlines; j++) {
      const pp_line *from = &b->lines[l->first_line + j];
      Perftools__Profiles__Line *line = &a.lines[l->first_line + j];
      perftools__profiles__line__init(line);
      line->function_id = from->function_id;
      line->line = from->line;
      a.line_ptrs[l->first_line + j] = line;
    }
    if (l->nlines) {
      pl->n_line = l->nlines;
      pl->line = &a.line_ptrs[l->first_line];
    }
    a.location_ptrs[i] = pl;
  }
  p.n_location = b->nlocations;
  p.location = a.location_ptrs;

  for (size_t i = 0; i < b->nfunctions; i++) {
    const pp_function *f = &b->functions[i];
    Perftools__Profiles__Function *pf = &a.functions[i];
    perftools__profiles__function__init(pf);
    pf->id = i + 1;
    pf->name = f->name;
    pf->system_name = f->system_name;
    pf->filename = f->filename;
    pf->start_line = f->start_line;
    a.function_ptrs[i] = pf;
  }
  p.n_function = b->nfunctions;
  p.function = a.function_ptrs;

  p.n_string_table = b->nstrings;
  p.string_table = b->strings;
  p.time_nanos = b->time_nanos;
  p.duration_nanos = b->duration_nanos;
  if (b->period_type.type || b->period_type.unit || b->period) {
    perftools__profiles__value_type__init(&a.period_type);
    a.period_type.type = b->period_type.type;
    a.period_type.unit = b->period_type.unit;
    p.period_type = &a.period_type;
  }
  p.period = b->period;
  p.n_comment = b->ncomments;
  p.comment = b->comments;
  p.default_sample_type = b->default_sample_type;

  size_t size = perftools__profiles__profile__get_packed_size(&p);
  uint8_t *buf = malloc(size ? size : 1);
  if (!buf)
    goto done;
  size_t packed = perftools__profiles__profile__pack(&p, buf);
  if (packed != size) {
    free(buf);
    goto done;
  }
  *out = buf;
  *len = size;
  rc = 0;
done:
  encode_arena_free(&a);
  return rc;
}

/* ---- gzip ---------------------------------------------------------------- */

/* Level 1, as Go's runtime/pprof writes its profiles: zlib at its default
 * level was 210 M of the 573 M instructions of a first export with lines
 * (docs/benchmarks.md, "Native lines"), and level 1 halves a later export's
 * CPU for 4.7% more bytes. A profile is made every period in a process we
 * share; its bytes are sent once. */
int pprof_gzip(const uint8_t *in, size_t len, uint8_t **out, size_t *out_len) {
  return pprof_gzip_level(in, len, Z_BEST_SPEED, out, out_len);
}

int pprof_gzip_level(const uint8_t *in, size_t len, int level, uint8_t **out,
                     size_t *out_len) {
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  /* zlib's state for a window of 2^bits bytes and its hash is 4 x 2^(bits
   * + 2) bytes, cleared in part at each start: sized to the input (a
   * short-lived process's profile is a few KiB, and it paid 256 KiB of
   * fresh pages to compress it at exit), at most zlib's defaults. On 200
   * PostgreSQL backends' profiles (7-8 KiB each) the output grew 0.02%. */
  int bits = 9;
  while (bits < 15 && ((size_t)1 << bits) < len + 262)
    bits++;
  if (deflateInit2(&zs, level, Z_DEFLATED, bits + 16, bits - 7,
                   Z_DEFAULT_STRATEGY) != Z_OK)
    return -1;
  /* deflateBound counts the gzip wrapper, so one pass usually suffices; the
   * loop still copes with inputs beyond zlib's 32-bit counters. */
  size_t cap = (size_t)deflateBound(&zs, (uLong)len);
  if (cap < 64)
    cap = 64;
  uint8_t *buf = malloc(cap);
  if (!buf) {
    deflateEnd(&zs);
    return -1;
  }
  size_t in_done = 0, out_done = 0;
  int zrc;
  do {
    if (out_done == cap) {
      if (cap > SIZE_MAX / 2)
        goto fail;
      uint8_t *nb = realloc(buf, cap * 2);
      if (!nb)
        goto fail;
      buf = nb;
      cap *= 2;
    }
    size_t in_chunk = len - in_done, out_chunk = cap - out_done;
    if (in_chunk > UINT_MAX)
      in_chunk = UINT_MAX;
    if (out_chunk > UINT_MAX)
      out_chunk = UINT_MAX;
    zs.next_in = (Bytef *)(in ? in + in_done : NULL);
    zs.avail_in = (uInt)in_chunk;
    zs.next_out = buf + out_done;
    zs.avail_out = (uInt)out_chunk;
    int flush = in_done + in_chunk == len ? Z_FINISH : Z_NO_FLUSH;
    zrc = deflate(&zs, flush);
    if (zrc == Z_STREAM_ERROR)
      goto fail;
    in_done += in_chunk - zs.avail_in;
    out_done += out_chunk - zs.avail_out;
  } while (zrc != Z_STREAM_END);
  deflateEnd(&zs);
  *out = buf;
  *out_len = out_done;
  return 0;
fail:
  deflateEnd(&zs);
  free(buf);
  return -1;
}

/* ---- folding light samples (backends with sample or size limits) -------- */

typedef struct fold_weight {
  double weight;
  size_t index;
} fold_weight;

static int fold_weight_cmp(const void *a, const void *b) {
  const fold_weight *x = a, *y = b;
  if (x->weight != y->weight)
    return x->weight > y->weight ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}

static const char *str_of(const pprof_builder *b, int64_t i) {
  return (i >= 0 && (size_t)i < b->nstrings) ? b->strings[i] : "";
}

static uint64_t fold_copy_location(pprof_builder *nb, const pprof_builder *b,
                                   uint64_t id, uint64_t *loc_map) {
  if (loc_map[id])
    return loc_map[id];
  const pp_location *l = &b->locations[id - 1];
  uint64_t mapping = 0;
  if (l->mapping_id) {
    const pp_mapping *m = &b->mappings[l->mapping_id - 1];
    mapping = pprof_add_mapping(nb, m->start, m->limit, m->file_offset,
                                str_of(b, m->filename), str_of(b, m->build_id),
                                m->has_functions);
    if (!mapping)
      return 0;
  }
  pprof_line lines[PPROF_MAX_LINES];
  for (size_t j = 0; j < l->nlines; j++) {
    const pp_line *from = &b->lines[l->first_line + j];
    const pp_function *f = &b->functions[from->function_id - 1];
    lines[j].function_id =
        pprof_add_function(nb, str_of(b, f->name), str_of(b, f->system_name),
                           str_of(b, f->filename), f->start_line);
    lines[j].line = from->line;
    if (!lines[j].function_id)
      return 0;
  }
  loc_map[id] =
      pprof_add_location_lines(nb, mapping, l->address, lines, l->nlines);
  return loc_map[id];
}

pprof_builder *pprof_fold(const pprof_builder *b, size_t keep,
                          const char *other_name) {
  pprof_builder *nb = pprof_builder_create();
  fold_weight *w = calloc(b->nsamples + 1, sizeof *w);
  uint64_t *loc_map = calloc(b->nlocations + 1, sizeof *loc_map);
  double *totals = calloc(b->nsample_types + 1, sizeof *totals);
  int64_t *other = calloc(b->nsample_types + 1, sizeof *other);
  uint64_t *stack = NULL;
  pprof_label *labels = NULL;
  size_t max_depth = 0, max_labels = 0;
  for (size_t i = 0; i < b->nsamples; i++) {
    if (b->samples[i].nlocations > max_depth)
      max_depth = b->samples[i].nlocations;
    if (b->samples[i].nlabels > max_labels)
      max_labels = b->samples[i].nlabels;
  }
  stack = calloc(max_depth + 1, sizeof *stack);
  labels = calloc(max_labels + 1, sizeof *labels);
  if (!nb || !w || !loc_map || !totals || !other || !stack || !labels)
    goto fail;

  for (size_t t = 0; t < b->nsample_types; t++)
    if (pprof_add_sample_type(nb, str_of(b, b->sample_types[t].type),
                              str_of(b, b->sample_types[t].unit)) < 0)
      goto fail;
  if (b->default_sample_type)
    pprof_set_default_sample_type(nb, str_of(b, b->default_sample_type));
  if (b->period_type.type || b->period)
    pprof_set_period(nb, str_of(b, b->period_type.type),
                     str_of(b, b->period_type.unit), b->period);
  pprof_set_time(nb, b->time_nanos, b->duration_nanos);
  for (size_t i = 0; i < b->ncomments; i++)
    pprof_add_comment(nb, str_of(b, b->comments[i]));

  /* A sample's weight: its share of each type's total, summed, so that a
   * stack heavy in any one type is kept. */
  for (size_t i = 0; i < b->nsamples; i++)
    for (size_t t = 0; t < b->nsample_types; t++)
      totals[t] += fabs((double)b->samples[i].values[t]);
  for (size_t i = 0; i < b->nsamples; i++) {
    w[i].index = i;
    for (size_t t = 0; t < b->nsample_types; t++)
      if (totals[t] > 0)
        w[i].weight += fabs((double)b->samples[i].values[t]) / totals[t];
  }
  qsort(w, b->nsamples, sizeof *w, fold_weight_cmp);

  int folded = 0;
  for (size_t k = 0; k < b->nsamples; k++) {
    const pp_sample *s = &b->samples[w[k].index];
    if (k >= keep) {
      for (size_t t = 0; t < b->nsample_types; t++)
        other[t] = add_saturating(other[t], s->values[t]);
      folded = 1;
      continue;
    }
    for (size_t d = 0; d < s->nlocations; d++)
      if (!(stack[d] = fold_copy_location(nb, b, s->locations[d], loc_map)))
        goto fail;
    for (size_t l = 0; l < s->nlabels; l++) {
      const pp_label *pl = &s->labels[l];
      labels[l] =
          (pprof_label){str_of(b, pl->key), pl->str ? str_of(b, pl->str) : NULL,
                        pl->num, pl->num_unit ? str_of(b, pl->num_unit) : NULL};
    }
    if (pprof_add_sample(nb, stack, s->nlocations, s->values, b->nsample_types,
                         labels, s->nlabels) != 0)
      goto fail;
  }
  if (folded) {
    uint64_t f = pprof_add_function(nb, other_name, other_name, "", 0);
    uint64_t l = f ? pprof_add_location(nb, 0, 0, f, 0) : 0;
    if (!l || pprof_add_sample(nb, &l, 1, other, b->nsample_types, NULL, 0))
      goto fail;
  }
  goto done;
fail:
  pprof_builder_destroy(nb);
  nb = NULL;
done:
  free(w);
  free(loc_map);
  free(totals);
  free(other);
  free(stack);
  free(labels);
  return nb;
}
