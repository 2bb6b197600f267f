/* Merging pprof profiles by function identity: strings are interned once,
 * functions keyed by (name, system name, file, start line), locations by
 * their whole inline chain of (function, line) (or, unsymbolized, by mapping
 * file and file offset), samples by (locations, labels). Each input is read,
 * folded in one pass and freed before the next is read. */
#include "profmerge.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "exporter/pprof.h"

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -1;
}

/* ---- hashing ------------------------------------------------------------- */

static inline uint64_t mix(uint64_t h, uint64_t x) {
  h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, s + i, 8);
    h = mix(h, w);
  }
  uint64_t w = 0;
  memcpy(&w, s + i, n - i);
  return mix(h, w ^ n);
}

/* Open addressing: a slot holds the entry's hash and its index + 1. */
typedef struct hslot {
  uint32_t hash, idx1;
} hslot;

typedef struct htab {
  hslot *s;
  size_t cap, count; /* cap: 0 or a power of two */
} htab;

/* ---- the merge ----------------------------------------------------------- */

typedef struct m_function {
  uint32_t name, system_name, filename;
  int64_t start_line;
} m_function;

/* Compared with memcmp: no padding (its bytes would be indeterminate). */
typedef struct m_line {
  uint64_t function; /* output id */
  int64_t line;
} m_line;

typedef struct m_location {
  uint32_t lines, nlines; /* into m->lines */
  uint32_t mapping;       /* output id, for unsymbolized ones only */
  uint64_t address;
} m_location;

typedef struct m_mapping {
  uint64_t start, limit, offset;
  uint32_t filename, build_id;
} m_mapping;

typedef struct m_label { /* memcmp'd too: pad is always 0 */
  uint32_t key, str, unit, pad;
  int64_t num;
} m_label;

typedef struct m_sample {
  uint32_t stack, nstack;  /* into m->stacks (output location ids) */
  uint32_t labels, nlabel; /* into m->labels */
} m_sample;

_Static_assert(sizeof(m_line) == 16 && sizeof(m_label) == 24,
               "m_line and m_label have no padding");

/* A growable array: items of one size, with the bytes it holds counted. */
typedef struct vec {
  void *p;
  size_t n, cap;
} vec;

struct cp_merge {
  cp_merge_options opts;
  char **drop; /* label keys to drop */
  size_t ndrop;
  size_t bytes; /* what the tables below hold */

  vec strs; /* char *; index 0 is "" */
  htab str_ix;
  vec funcs; /* m_function; id = index + 1 */
  htab func_ix;
  vec lines; /* m_line */
  vec locs;  /* m_location; id = index + 1 */
  htab loc_ix;
  vec maps; /* m_mapping; id = index + 1 */
  htab map_ix;
  vec samples; /* m_sample */
  htab sample_ix;
  vec stacks; /* uint32_t */
  vec labels; /* m_label */
  vec values; /* int64_t, ntypes per sample */

  size_t ntypes;
  uint32_t type[64], unit[64];
  char *default_type;
  uint32_t period_type, period_unit;
  int64_t period;
  int64_t time_min, time_max; /* nanoseconds; 0: unknown */
  size_t count;
  char first_path[256];

  /* Per input, reused: input index -> output index. */
  vec smap, fmap, lmap; /* int64_t strings, uint32 functions/locations */
  vec scratch_stack, scratch_labels;
};

static int vec_reserve(cp_merge *m, vec *v, size_t need, size_t size) {
  if (need <= v->cap)
    return 0;
  size_t cap = v->cap ? v->cap : 16;
  while (cap < need) {
    if (cap > SIZE_MAX / 2 / size)
      return -1;
    cap *= 2;
  }
  void *p = realloc(v->p, cap * size);
  if (!p)
    return -1;
  m->bytes += (cap - v->cap) * size;
  v->p = p;
  v->cap = cap;
  return 0;
}

static void vec_free(vec *v) {
  free(v->p);
  memset(v, 0, sizeof *v);
}

#define VEC_AT(v, T, i) (((T *)(v).p)[i])

/* Grows tab to keep it under half full. */
static int htab_grow(cp_merge *m, htab *t) {
  if ((t->count + 1) * 2 <= t->cap)
    return 0;
  size_t cap = t->cap ? t->cap * 2 : 1024;
  if (cap > UINT32_MAX)
    return -1;
  hslot *s = calloc(cap, sizeof *s);
  if (!s)
    return -1;
  for (size_t i = 0; i < t->cap; i++)
    if (t->s[i].idx1) {
      size_t j = t->s[i].hash & (cap - 1);
      while (s[j].idx1)
        j = (j + 1) & (cap - 1);
      s[j] = t->s[i];
    }
  m->bytes += (cap - t->cap) * sizeof *s;
  free(t->s);
  t->s = s;
  t->cap = cap;
  return 0;
}

static uint32_t intern(cp_merge *m, const char *s) {
  size_t n = strlen(s);
  uint32_t h = (uint32_t)hash_bytes(s, n);
  if (htab_grow(m, &m->str_ix) != 0)
    return UINT32_MAX;
  size_t j = h & (m->str_ix.cap - 1);
  for (; m->str_ix.s[j].idx1; j = (j + 1) & (m->str_ix.cap - 1))
    if (m->str_ix.s[j].hash == h &&
        strcmp(VEC_AT(m->strs, char *, m->str_ix.s[j].idx1 - 1), s) == 0)
      return m->str_ix.s[j].idx1 - 1;
  if (m->strs.n >= UINT32_MAX - 1 ||
      vec_reserve(m, &m->strs, m->strs.n + 1, sizeof(char *)) != 0)
    return UINT32_MAX;
  char *copy = malloc(n + 1);
  if (!copy)
    return UINT32_MAX;
  memcpy(copy, s, n + 1);
  m->bytes += n + 1;
  VEC_AT(m->strs, char *, m->strs.n) = copy;
  m->str_ix.s[j] = (hslot){h, (uint32_t)++m->strs.n};
  m->str_ix.count++;
  return (uint32_t)(m->strs.n - 1);
}

cp_merge *cp_merge_create(const cp_merge_options *opts) {
  /* Each input's file, gunzipped copy and arena chunks are freed before
   * the next is read: from the heap they are reused; as mmaps (glibc's
   * default above 128 kB) every file faulted in fresh zeroed pages: 80 to
   * 130 ms of system time on the benchmark's 200 files, 10 to 30 ms now.
   * Only the command line calls this. */
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 128 << 20);
  cp_merge *m = calloc(1, sizeof *m);
  if (!m)
    return NULL;
  m->opts = *opts;
  if (!m->opts.max_memory)
    m->opts.max_memory = PPROF_READ_MAX_MEMORY;
  if (intern(m, "") != 0)
    goto fail;
  for (const char *d = opts->drop_labels; d && *d;) {
    size_t n = strcspn(d, ",");
    if (n) {
      char **nd = realloc(m->drop, (m->ndrop + 1) * sizeof *nd);
      if (!nd)
        goto fail;
      m->drop = nd;
      if (!(m->drop[m->ndrop] = strndup(d, n)))
        goto fail;
      m->ndrop++;
    }
    d += n;
    d += *d == ',';
  }
  return m;
fail:
  cp_merge_destroy(m);
  return NULL;
}

void cp_merge_destroy(cp_merge *m) {
  if (!m)
    return;
  for (size_t i = 0; i < m->strs.n; i++)
    free(VEC_AT(m->strs, char *, i));
  for (size_t i = 0; i < m->ndrop; i++)
    free(m->drop[i]);
  free(m->drop);
  free(m->default_type);
  vec *vs[] = {&m->strs,          &m->funcs,         &m->lines,  &m->locs,
               &m->maps,          &m->samples,       &m->stacks, &m->labels,
               &m->values,        &m->smap,          &m->fmap,   &m->lmap,
               &m->scratch_stack, &m->scratch_labels};
  for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++)
    vec_free(vs[i]);
  htab *hs[] = {&m->str_ix, &m->func_ix, &m->loc_ix, &m->map_ix, &m->sample_ix};
  for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++)
    free(hs[i]->s);
  free(m);
}

size_t cp_merge_count(const cp_merge *m) { return m->count; }

/* ---- one input ----------------------------------------------------------- */

/* Id -> position in the input's array: direct when the ids are 1..n in
 * order (pprof.c and Go write them so), else a sorted copy searched. */
typedef struct id_ix {
  bool direct;
  uint64_t *pairs; /* id, position, sorted by id */
  size_t n;
} id_ix;

static int pair_cmp(const void *a, const void *b) {
  const uint64_t *x = a, *y = b;
  return x[0] < y[0] ? -1 : x[0] > y[0];
}

#define ID_IX_BUILD(ix, items, count)                                          \
  do {                                                                         \
    (ix)->n = (count);                                                         \
    (ix)->direct = true;                                                       \
    (ix)->pairs = NULL;                                                        \
    for (size_t i_ = 0; i_ < (count); i_++)                                    \
      if ((items)[i_]->id != i_ + 1) {                                         \
        (ix)->direct = false;                                                  \
        break;                                                                 \
      }                                                                        \
    if (!(ix)->direct) {                                                       \
      (ix)->pairs = malloc(((count) ? (count) : 1) * 2 * sizeof(uint64_t));    \
      if ((ix)->pairs) {                                                       \
        for (size_t i_ = 0; i_ < (count); i_++) {                              \
          (ix)->pairs[2 * i_] = (items)[i_]->id;                               \
          (ix)->pairs[2 * i_ + 1] = i_;                                        \
        }                                                                      \
        qsort((ix)->pairs, (count), 2 * sizeof(uint64_t), pair_cmp);           \
      }                                                                        \
    }                                                                          \
  } while (0)

/* Position of id, or SIZE_MAX. */
static size_t id_ix_find(const id_ix *ix, uint64_t id) {
  if (ix->direct)
    return id >= 1 && id <= ix->n ? (size_t)(id - 1) : SIZE_MAX;
  size_t lo = 0, hi = ix->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (ix->pairs[2 * mid] < id)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < ix->n && ix->pairs[2 * lo] == id ? (size_t)ix->pairs[2 * lo + 1]
                                               : SIZE_MAX;
}

typedef struct input {
  cp_merge *m;
  const pprof_profile *p;
  int vmap[64]; /* output type -> input value index */
  id_ix funcs, locs, maps;
} input;

/* The output string of input string index i (interned on first use). */
static uint32_t in_str(input *in, int64_t i) {
  if (i < 0 || (uint64_t)i >= in->p->n_string_table)
    return 0;
  uint32_t *s = &VEC_AT(in->m->smap, uint32_t, i);
  if (*s == UINT32_MAX)
    *s = intern(in->m, in->p->string_table[i]);
  return *s;
}

/* Appends ", type/unit" to buf, whole or not at all: what does not fit
 * ends the list with ", ..." once. */
static void add_type_name(char *buf, size_t len, const char *type,
                          const char *unit) {
  size_t used = strlen(buf);
  if (used >= 5 && strcmp(buf + used - 5, ", ...") == 0)
    return;
  size_t need = (used ? 2 : 0) + strlen(type) + 1 + strlen(unit);
  if (used + need + 6 <= len)
    snprintf(buf + used, len - used, "%s%s/%s", used ? ", " : "", type, unit);
  else if (used + 6 <= len)
    snprintf(buf + used, len - used, "%s...", used ? ", " : "");
}

/* Chooses the output sample types from the first input, and maps every
 * input's types onto them: by type and unit, in any order. */
static int map_types(input *in, const char *path, char *err, size_t errlen) {
  cp_merge *m = in->m;
  const pprof_profile *p = in->p;
  if (p->n_sample_type == 0)
    return fail(err, errlen, "%s: no sample types", path);
  if (m->count == 0) {
    if (m->opts.type) {
      int i = pprof_sample_type_index(p, m->opts.type);
      if (i < 0)
        return fail(err, errlen, "%s: no sample type %s", path, m->opts.type);
      m->type[0] = in_str(in, p->sample_type[i]->type);
      m->unit[0] = in_str(in, p->sample_type[i]->unit);
      m->ntypes = 1;
    } else {
      if (p->n_sample_type > 64)
        return fail(err, errlen, "%s: %zu sample types (at most 64)", path,
                    p->n_sample_type);
      for (size_t i = 0; i < p->n_sample_type; i++) {
        m->type[i] = in_str(in, p->sample_type[i]->type);
        m->unit[i] = in_str(in, p->sample_type[i]->unit);
      }
      m->ntypes = p->n_sample_type;
      if (p->default_sample_type &&
          !(m->default_type = strdup(pprof_str(p, p->default_sample_type))))
        return fail(err, errlen, "out of memory");
    }
    snprintf(m->first_path, sizeof m->first_path, "%s", path);
  }
  if (!m->opts.type && p->n_sample_type != m->ntypes)
    goto differ;
  for (size_t t = 0; t < m->ntypes; t++) {
    const char *type = VEC_AT(m->strs, char *, m->type[t]);
    const char *unit = VEC_AT(m->strs, char *, m->unit[t]);
    int i = pprof_sample_type_index(p, type);
    if (i < 0 && m->opts.type)
      return fail(err, errlen, "%s: no sample type %s", path, type);
    if (i < 0)
      goto differ;
    if (strcmp(pprof_str(p, p->sample_type[i]->unit), unit) != 0)
      return fail(err, errlen, "%s: sample type %s is in %s, in %s in %s", path,
                  type, pprof_str(p, p->sample_type[i]->unit), unit,
                  m->first_path);
    in->vmap[t] = i;
  }
  return 0;
differ:;
  char have[400] = "", want[400] = "";
  for (size_t i = 0; i < p->n_sample_type; i++)
    add_type_name(have, sizeof have, pprof_str(p, p->sample_type[i]->type),
                  pprof_str(p, p->sample_type[i]->unit));
  for (size_t i = 0; i < m->ntypes; i++)
    add_type_name(want, sizeof want, VEC_AT(m->strs, char *, m->type[i]),
                  VEC_AT(m->strs, char *, m->unit[i]));
  return fail(err, errlen,
              "%s: sample types (%s) differ from those of %s (%s); keep one "
              "with --type",
              path, have, m->first_path, want);
}

static uint32_t add_function(input *in,
                             const Perftools__Profiles__Function *f) {
  cp_merge *m = in->m;
  m_function key = {in_str(in, f->name), in_str(in, f->system_name),
                    in_str(in, f->filename), f->start_line};
  if (key.name == UINT32_MAX || key.system_name == UINT32_MAX ||
      key.filename == UINT32_MAX || htab_grow(m, &m->func_ix) != 0)
    return 0;
  uint32_t h =
      (uint32_t)mix(mix(mix(mix(1, key.name), key.system_name), key.filename),
                    (uint64_t)key.start_line);
  size_t j = h & (m->func_ix.cap - 1);
  for (; m->func_ix.s[j].idx1; j = (j + 1) & (m->func_ix.cap - 1)) {
    const m_function *e =
        &VEC_AT(m->funcs, m_function, m->func_ix.s[j].idx1 - 1);
    if (m->func_ix.s[j].hash == h && e->name == key.name &&
        e->system_name == key.system_name && e->filename == key.filename &&
        e->start_line == key.start_line)
      return m->func_ix.s[j].idx1;
  }
  if (vec_reserve(m, &m->funcs, m->funcs.n + 1, sizeof key) != 0)
    return 0;
  VEC_AT(m->funcs, m_function, m->funcs.n++) = key;
  m->func_ix.s[j] = (hslot){h, (uint32_t)m->funcs.n};
  m->func_ix.count++;
  return (uint32_t)m->funcs.n;
}

static uint32_t add_mapping(input *in, const Perftools__Profiles__Mapping *mp) {
  cp_merge *m = in->m;
  uint32_t file = in_str(in, mp->filename), bid = in_str(in, mp->build_id);
  if (file == UINT32_MAX || bid == UINT32_MAX || htab_grow(m, &m->map_ix) != 0)
    return 0;
  uint32_t h = (uint32_t)mix(mix(2, file), bid);
  size_t j = h & (m->map_ix.cap - 1);
  for (; m->map_ix.s[j].idx1; j = (j + 1) & (m->map_ix.cap - 1)) {
    const m_mapping *e = &VEC_AT(m->maps, m_mapping, m->map_ix.s[j].idx1 - 1);
    if (m->map_ix.s[j].hash == h && e->filename == file && e->build_id == bid)
      return m->map_ix.s[j].idx1;
  }
  if (vec_reserve(m, &m->maps, m->maps.n + 1, sizeof(m_mapping)) != 0)
    return 0;
  VEC_AT(m->maps, m_mapping, m->maps.n++) = (m_mapping){
      mp->memory_start, mp->memory_limit, mp->file_offset, file, bid};
  m->map_ix.s[j] = (hslot){h, (uint32_t)m->maps.n};
  m->map_ix.count++;
  return (uint32_t)m->maps.n;
}

/* A location by its inline chain (functions mapped already), or, without
 * lines, by its mapping's file and the address's offset in that file (the
 * same across processes of one build, whatever ASLR chose). */
static uint32_t add_location(input *in,
                             const Perftools__Profiles__Location *l) {
  cp_merge *m = in->m;
  const pprof_profile *p = in->p;
  size_t first = m->lines.n;
  uint32_t mapping = 0;
  uint64_t address = 0;
  if (l->n_line > UINT32_MAX ||
      vec_reserve(m, &m->lines, first + l->n_line, sizeof(m_line)) != 0)
    return 0;
  uint64_t h = mix(3, l->n_line);
  for (size_t i = 0; i < l->n_line; i++) {
    size_t fpos = id_ix_find(&in->funcs, l->line[i]->function_id);
    uint32_t f = fpos == SIZE_MAX ? 0 : VEC_AT(m->fmap, uint32_t, fpos);
    if (fpos != SIZE_MAX && f == 0)
      return 0;
    VEC_AT(m->lines, m_line, first + i) = (m_line){f, l->line[i]->line};
    h = mix(mix(h, f), (uint64_t)l->line[i]->line);
  }
  if (l->n_line == 0) {
    size_t mpos = id_ix_find(&in->maps, l->mapping_id);
    address = l->address;
    if (mpos != SIZE_MAX) {
      const Perftools__Profiles__Mapping *mp = p->mapping[mpos];
      if (!(mapping = add_mapping(in, mp)))
        return 0;
      const m_mapping *om = &VEC_AT(m->maps, m_mapping, mapping - 1);
      address = l->address - mp->memory_start + mp->file_offset - om->offset +
                om->start;
    }
    h = mix(mix(h, mapping), address);
  }
  if (htab_grow(m, &m->loc_ix) != 0)
    return 0;
  uint32_t h32 = (uint32_t)h;
  size_t j = h32 & (m->loc_ix.cap - 1);
  for (; m->loc_ix.s[j].idx1; j = (j + 1) & (m->loc_ix.cap - 1)) {
    const m_location *e = &VEC_AT(m->locs, m_location, m->loc_ix.s[j].idx1 - 1);
    if (m->loc_ix.s[j].hash == h32 && e->nlines == l->n_line &&
        e->mapping == mapping && e->address == address &&
        (l->n_line == 0 || memcmp(&VEC_AT(m->lines, m_line, e->lines),
                                  &VEC_AT(m->lines, m_line, first),
                                  l->n_line * sizeof(m_line)) == 0))
      return m->loc_ix.s[j].idx1;
  }
  if (first > UINT32_MAX ||
      vec_reserve(m, &m->locs, m->locs.n + 1, sizeof(m_location)) != 0)
    return 0;
  m->lines.n += l->n_line; /* keep the chain */
  VEC_AT(m->locs, m_location, m->locs.n++) =
      (m_location){(uint32_t)first, (uint32_t)l->n_line, mapping, address};
  m->loc_ix.s[j] = (hslot){h32, (uint32_t)m->locs.n};
  m->loc_ix.count++;
  return (uint32_t)m->locs.n;
}

static int label_cmp(const void *a, const void *b) {
  const m_label *x = a, *y = b;
  if (x->key != y->key)
    return x->key < y->key ? -1 : 1;
  if (x->str != y->str)
    return x->str < y->str ? -1 : 1;
  if (x->num != y->num)
    return x->num < y->num ? -1 : 1;
  return x->unit < y->unit ? -1 : x->unit > y->unit;
}

static bool dropped(const cp_merge *m, const char *key) {
  if (m->opts.drop_all_labels)
    return true;
  for (size_t i = 0; i < m->ndrop; i++)
    if (strcmp(m->drop[i], key) == 0)
      return true;
  return false;
}

static int add_sample(input *in, const Perftools__Profiles__Sample *s,
                      char *err, size_t errlen) {
  cp_merge *m = in->m;
  const pprof_profile *p = in->p;
  bool any = false;
  for (size_t t = 0; t < m->ntypes; t++)
    any |= s->value[in->vmap[t]] != 0;
  if (!any)
    return 0; /* nothing to add: a sample of another type's values */
  if (s->n_location_id > UINT32_MAX || s->n_label > UINT32_MAX ||
      vec_reserve(m, &m->scratch_stack, s->n_location_id, sizeof(uint32_t)) ||
      vec_reserve(m, &m->scratch_labels, s->n_label, sizeof(m_label)))
    return fail(err, errlen, "out of memory");
  uint32_t *stack = m->scratch_stack.p;
  m_label *labels = m->scratch_labels.p;
  uint64_t h = mix(4, s->n_location_id);
  size_t nstack = 0, nlabel = 0;
  for (size_t i = 0; i < s->n_location_id; i++) {
    size_t pos = id_ix_find(&in->locs, s->location_id[i]);
    if (pos == SIZE_MAX)
      continue; /* validated: does not happen */
    stack[nstack] = VEC_AT(m->lmap, uint32_t, pos);
    h = mix(h, stack[nstack++]);
  }
  for (size_t i = 0; i < s->n_label; i++) {
    const Perftools__Profiles__Label *l = s->label[i];
    if ((m->ndrop || m->opts.drop_all_labels) &&
        dropped(m, pprof_str(p, l->key)))
      continue;
    labels[nlabel++] =
        (m_label){in_str(in, l->key), in_str(in, l->str),
                  in_str(in, l->num_unit), 0, l->str ? 0 : l->num};
  }
  if (nlabel > 1)
    qsort(labels, nlabel, sizeof *labels, label_cmp);
  for (size_t i = 0; i < nlabel; i++)
    h = mix(mix(mix(mix(h, labels[i].key), labels[i].str), labels[i].unit),
            (uint64_t)labels[i].num);
  if (htab_grow(m, &m->sample_ix) != 0)
    return fail(err, errlen, "out of memory");
  uint32_t h32 = (uint32_t)(h ^ (h >> 32));
  size_t j = h32 & (m->sample_ix.cap - 1), idx = SIZE_MAX;
  for (; m->sample_ix.s[j].idx1; j = (j + 1) & (m->sample_ix.cap - 1)) {
    const m_sample *e =
        &VEC_AT(m->samples, m_sample, m->sample_ix.s[j].idx1 - 1);
    if (m->sample_ix.s[j].hash == h32 && e->nstack == nstack &&
        e->nlabel == nlabel &&
        (nstack == 0 || memcmp(&VEC_AT(m->stacks, uint32_t, e->stack), stack,
                               nstack * sizeof *stack) == 0) &&
        (nlabel == 0 || memcmp(&VEC_AT(m->labels, m_label, e->labels), labels,
                               nlabel * sizeof *labels) == 0)) {
      idx = m->sample_ix.s[j].idx1 - 1;
      break;
    }
  }
  if (idx == SIZE_MAX) {
    if (m->stacks.n + nstack > UINT32_MAX ||
        m->labels.n + nlabel > UINT32_MAX ||
        vec_reserve(m, &m->samples, m->samples.n + 1, sizeof(m_sample)) ||
        vec_reserve(m, &m->stacks, m->stacks.n + nstack, sizeof *stack) ||
        vec_reserve(m, &m->labels, m->labels.n + nlabel, sizeof *labels) ||
        vec_reserve(m, &m->values, m->values.n + m->ntypes, sizeof(int64_t)))
      return fail(err, errlen, "out of memory");
    stack = m->scratch_stack.p; /* unchanged: not reserved above */
    if (nstack)                 /* the arrays may still be NULL when empty */
      memcpy(&VEC_AT(m->stacks, uint32_t, m->stacks.n), stack,
             nstack * sizeof *stack);
    if (nlabel)
      memcpy(&VEC_AT(m->labels, m_label, m->labels.n), labels,
             nlabel * sizeof *labels);
    memset(&VEC_AT(m->values, int64_t, m->values.n), 0,
           m->ntypes * sizeof(int64_t));
    VEC_AT(m->samples, m_sample, m->samples.n) =
        (m_sample){(uint32_t)m->stacks.n, (uint32_t)nstack,
                   (uint32_t)m->labels.n, (uint32_t)nlabel};
    m->stacks.n += nstack;
    m->labels.n += nlabel;
    m->values.n += m->ntypes;
    idx = m->samples.n++;
    m->sample_ix.s[j] = (hslot){h32, (uint32_t)m->samples.n};
    m->sample_ix.count++;
  }
  int64_t *v = &VEC_AT(m->values, int64_t, idx * m->ntypes);
  for (size_t t = 0; t < m->ntypes; t++)
    if (__builtin_add_overflow(v[t], s->value[in->vmap[t]], &v[t]))
      return fail(err, errlen,
                  "the sum of %s values overflows a 64-bit integer",
                  VEC_AT(m->strs, char *, m->type[t]));
  return 0;
}

static int merge_profile(cp_merge *m, const pprof_profile *p, const char *path,
                         char *err, size_t errlen) {
  input in = {.m = m, .p = p};
  int rc = -1;
  if (vec_reserve(m, &m->smap, p->n_string_table, sizeof(uint32_t)) != 0)
    return fail(err, errlen, "out of memory");
  memset(m->smap.p, 0xff, p->n_string_table * sizeof(uint32_t));
  if (map_types(&in, path, err, errlen) != 0)
    return -1;
  ID_IX_BUILD(&in.funcs, p->function, p->n_function);
  ID_IX_BUILD(&in.locs, p->location, p->n_location);
  ID_IX_BUILD(&in.maps, p->mapping, p->n_mapping);
  if ((!in.funcs.direct && !in.funcs.pairs) ||
      (!in.locs.direct && !in.locs.pairs) ||
      (!in.maps.direct && !in.maps.pairs) ||
      vec_reserve(m, &m->fmap, p->n_function, sizeof(uint32_t)) ||
      vec_reserve(m, &m->lmap, p->n_location, sizeof(uint32_t))) {
    fail(err, errlen, "out of memory");
    goto done;
  }
  for (size_t i = 0; i < p->n_function; i++)
    if (!(VEC_AT(m->fmap, uint32_t, i) = add_function(&in, p->function[i]))) {
      fail(err, errlen, "out of memory");
      goto done;
    }
  for (size_t i = 0; i < p->n_location; i++)
    if (!(VEC_AT(m->lmap, uint32_t, i) = add_location(&in, p->location[i]))) {
      fail(err, errlen, "out of memory");
      goto done;
    }
  for (size_t i = 0; i < p->n_sample; i++)
    if (add_sample(&in, p->sample[i], err, errlen) != 0)
      goto done;
  if (m->count == 0 && p->period_type) {
    m->period_type = in_str(&in, p->period_type->type);
    m->period_unit = in_str(&in, p->period_type->unit);
    m->period = p->period;
  }
  if (p->time_nanos > 0) {
    int64_t end = p->time_nanos;
    if (p->duration_nanos > 0 && end <= INT64_MAX - p->duration_nanos)
      end += p->duration_nanos;
    if (!m->time_min || p->time_nanos < m->time_min)
      m->time_min = p->time_nanos;
    if (end > m->time_max)
      m->time_max = end;
  }
  m->count++;
  rc = 0;
done:
  free(in.funcs.pairs);
  free(in.locs.pairs);
  free(in.maps.pairs);
  return rc;
}

/* Merges a profile read already, then checks the memory budget. */
static int merge_read(cp_merge *m, pprof_profile *p, pprof_arena *arena,
                      const char *path, char *err, size_t errlen) {
  int rc = merge_profile(m, p, path, err, errlen);
  pprof_arena_free(arena);
  if (rc != 0 && strncmp(err, path, strlen(path)) != 0) { /* name the file */
    char msg[512];
    snprintf(msg, sizeof msg, "%s", err);
    fail(err, errlen, "%s: %s", path, msg);
  }
  if (rc == 0 && m->bytes > m->opts.max_memory)
    return fail(err, errlen,
                "%s: the merged profile is over the %zu MiB memory limit "
                "(--max-memory)",
                path, m->opts.max_memory >> 20);
  return rc;
}

/* The reader names the share of the budget it was given; the user knows
 * --max-memory. */
static int read_failed(const cp_merge *m, const char *path, const char *msg,
                       char *err, size_t errlen) {
  const char *what = strstr(msg, "profile too large (");
  if (what) {
    const char *end = strstr(msg, " over the ");
    return fail(err, errlen,
                "%s: profile too large (%.*s over what the %zu MiB of "
                "--max-memory leave)",
                path, end ? (int)(end - msg - 19) : 0, msg + 19,
                m->opts.max_memory >> 20);
  }
  return fail(err, errlen, "%s: %s", path, msg);
}

/* Reading (gunzip, decode, validate: about half the time) runs in a second
 * thread, one file ahead of the merge. Memory stays bounded: at most two
 * profiles are decoded at once, each within half of what the merged result
 * leaves of the budget. */
typedef struct reader {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  char **files;
  size_t n;
  cp_merge *m;
  size_t merged_bytes; /* under mu: m->bytes after the last merge */
  bool full, stop;     /* the hand-off slot */
  pprof_profile *p;
  pprof_arena *arena;
  int rc;
  char err[512];
} reader;

static void *reader_main(void *arg) {
  reader *r = arg;
  for (size_t i = 0; i < r->n; i++) {
    pthread_mutex_lock(&r->mu);
    size_t used = r->merged_bytes, max = r->m->opts.max_memory;
    pthread_mutex_unlock(&r->mu);
    char msg[400];
    pprof_profile *p = NULL;
    pprof_arena *arena = NULL;
    int rc =
        pprof_read_file_arena(r->files[i], used < max ? (max - used) / 2 : 0,
                              NULL, &p, &arena, msg, sizeof msg);
    pthread_mutex_lock(&r->mu);
    while (r->full && !r->stop)
      pthread_cond_wait(&r->cv, &r->mu);
    if (r->stop) {
      pthread_mutex_unlock(&r->mu);
      pprof_arena_free(arena);
      return NULL;
    }
    r->p = p;
    r->arena = arena;
    r->rc = rc;
    if (rc != 0)
      snprintf(r->err, sizeof r->err, "%s", msg);
    r->full = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (rc != 0)
      return NULL;
  }
  return NULL;
}

static int merge_files(cp_merge *m, char **files, size_t n, char *err,
                       size_t errlen) {
  if (n == 1) { /* no thread for one file: it would only wait */
    char msg[400];
    pprof_profile *p = NULL;
    pprof_arena *arena = NULL;
    size_t budget =
        m->bytes < m->opts.max_memory ? m->opts.max_memory - m->bytes : 0;
    if (pprof_read_file_arena(files[0], budget, NULL, &p, &arena, msg,
                              sizeof msg))
      return read_failed(m, files[0], msg, err, errlen);
    return merge_read(m, p, arena, files[0], err, errlen);
  }
  reader r = {.files = files, .n = n, .m = m, .merged_bytes = m->bytes};
  pthread_mutex_init(&r.mu, NULL);
  pthread_cond_init(&r.cv, NULL);
  pthread_t th;
  if (pthread_create(&th, NULL, reader_main, &r) != 0) {
    pthread_mutex_destroy(&r.mu);
    pthread_cond_destroy(&r.cv);
    return fail(err, errlen, "cannot start a thread");
  }
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < n; i++) {
    pthread_mutex_lock(&r.mu);
    while (!r.full)
      pthread_cond_wait(&r.cv, &r.mu);
    pprof_profile *p = r.p;
    pprof_arena *arena = r.arena;
    int read_rc = r.rc;
    if (read_rc != 0)
      read_failed(m, files[i], r.err, err, errlen);
    r.full = false;
    r.p = NULL;
    r.arena = NULL;
    pthread_cond_broadcast(&r.cv);
    pthread_mutex_unlock(&r.mu);
    rc = read_rc != 0 ? -1 : merge_read(m, p, arena, files[i], err, errlen);
    pthread_mutex_lock(&r.mu);
    r.merged_bytes = m->bytes;
    pthread_mutex_unlock(&r.mu);
    cp_progress("merging", i + 1, n);
  }
  pthread_mutex_lock(&r.mu);
  r.stop = true;
  pthread_cond_broadcast(&r.cv);
  pthread_mutex_unlock(&r.mu);
  pthread_join(th, NULL);
  pprof_arena_free(r.arena);
  pthread_mutex_destroy(&r.mu);
  pthread_cond_destroy(&r.cv);
  return rc;
}

static int name_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_pb_gz(const char *name) {
  size_t n = strlen(name);
  return name[0] != '.' && n > 6 && strcmp(name + n - 6, ".pb.gz") == 0;
}

static int list_add(cp_path_list *l, const char *a, const char *b) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 64;
    char **nv = realloc(l->v, cap * sizeof *nv);
    if (!nv)
      return -1;
    l->v = nv;
    l->cap = cap;
  }
  size_t len = strlen(a) + (b ? strlen(b) + 1 : 0) + 1;
  if (!(l->v[l->n] = malloc(len)))
    return -1;
  snprintf(l->v[l->n++], len, "%s%s%s", a, b ? "/" : "", b ? b : "");
  return 0;
}

int cp_path_list_add(cp_path_list *l, const char *path, char *err,
                     size_t errlen) {
  struct stat st;
  if (strcmp(path, "-") == 0) /* as contprof top reads it */
    path = "/dev/stdin";
  if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
    return list_add(l, path, NULL) ? fail(err, errlen, "out of memory") : 0;
  DIR *d = opendir(path);
  if (!d)
    return fail(err, errlen, "%s: %s", path, strerror(errno));
  size_t first = l->n;
  int rc = 0;
  struct dirent *e;
  while (rc == 0 && (e = readdir(d)))
    if (is_pb_gz(e->d_name) && list_add(l, path, e->d_name) != 0)
      rc = fail(err, errlen, "out of memory");
  closedir(d);
  if (rc == 0 && l->n == first)
    rc = fail(err, errlen, "%s: no .pb.gz files in the directory", path);
  if (l->n - first > 1)
    qsort(l->v + first, l->n - first, sizeof *l->v, name_cmp);
  return rc;
}

int cp_merge_add_paths(cp_merge *m, char *const *paths, size_t n, char *err,
                       size_t errlen) {
  cp_path_list l = {0};
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < n; i++)
    rc = cp_path_list_add(&l, paths[i], err, errlen);
  if (rc == 0)
    rc = merge_files(m, l.v, l.n, err, errlen);
  cp_progress_end();
  cp_path_list_free(&l);
  return rc;
}

void cp_path_list_free(cp_path_list *l) {
  for (size_t i = 0; i < l->n; i++)
    free(l->v[i]);
  free(l->v);
  *l = (cp_path_list){0};
}

/* ---- the merged profile out ---------------------------------------------- */

static void format_time(int64_t ns, char *buf, size_t len) {
  time_t t = (time_t)(ns / 1000000000);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Encodes the merged profile with protobuf-c, pointing into our tables. */
static int encode(cp_merge *m, uint8_t **out, size_t *out_len) {
  typedef Perftools__Profiles__ValueType VT;
  typedef Perftools__Profiles__Sample SA;
  typedef Perftools__Profiles__Label LA;
  typedef Perftools__Profiles__Mapping MA;
  typedef Perftools__Profiles__Location LO;
  typedef Perftools__Profiles__Line LI;
  typedef Perftools__Profiles__Function FU;
  Perftools__Profiles__Profile p = PERFTOOLS__PROFILES__PROFILE__INIT;
  char comment[256];
  snprintf(comment, sizeof comment, "contprof merge: %zu profiles", m->count);
  if (m->time_min) {
    char a[32], b[32];
    format_time(m->time_min, a, sizeof a);
    format_time(m->time_max, b, sizeof b);
    snprintf(comment + strlen(comment), sizeof comment - strlen(comment),
             ", from %s to %s (%.3f s)", a, b,
             (double)(m->time_max - m->time_min) / 1e9);
  }
  uint32_t comment_ix = intern(m, comment);
  uint32_t default_ix =
      m->default_type && cp_merge_type_index(m, m->default_type) >= 0
          ? intern(m, m->default_type)
          : 0;
  if (comment_ix == UINT32_MAX || default_ix == UINT32_MAX)
    return -1;
  size_t ns = m->samples.n, nl = m->locs.n, nf = m->funcs.n, nm = m->maps.n;
  VT vt[64], period_type = PERFTOOLS__PROFILES__VALUE_TYPE__INIT;
  VT *vtp[64];
  SA *sa = calloc(ns ? ns : 1, sizeof *sa);
  SA **sap = malloc((ns ? ns : 1) * sizeof *sap);
  uint64_t *locids = malloc((m->stacks.n ? m->stacks.n : 1) * sizeof *locids);
  LA *la = calloc(m->labels.n ? m->labels.n : 1, sizeof *la);
  LA **lap = malloc((m->labels.n ? m->labels.n : 1) * sizeof *lap);
  MA *ma = calloc(nm ? nm : 1, sizeof *ma);
  MA **map = malloc((nm ? nm : 1) * sizeof *map);
  LO *lo = calloc(nl ? nl : 1, sizeof *lo);
  LO **lop = malloc((nl ? nl : 1) * sizeof *lop);
  LI *li = calloc(m->lines.n ? m->lines.n : 1, sizeof *li);
  LI **lip = malloc((m->lines.n ? m->lines.n : 1) * sizeof *lip);
  FU *fu = calloc(nf ? nf : 1, sizeof *fu);
  FU **fup = malloc((nf ? nf : 1) * sizeof *fup);
  int64_t cix = comment_ix;
  int rc = -1;
  if (!sa || !sap || !locids || !la || !lap || !ma || !map || !lo || !lop ||
      !li || !lip || !fu || !fup)
    goto done;
  for (size_t t = 0; t < m->ntypes; t++) {
    perftools__profiles__value_type__init(&vt[t]);
    vt[t].type = m->type[t];
    vt[t].unit = m->unit[t];
    vtp[t] = &vt[t];
  }
  p.n_sample_type = m->ntypes;
  p.sample_type = vtp;
  for (size_t i = 0; i < m->stacks.n; i++)
    locids[i] = VEC_AT(m->stacks, uint32_t, i);
  for (size_t i = 0; i < m->labels.n; i++) {
    const m_label *l = &VEC_AT(m->labels, m_label, i);
    perftools__profiles__label__init(&la[i]);
    la[i].key = l->key;
    la[i].str = l->str;
    la[i].num = l->num;
    la[i].num_unit = l->unit;
    lap[i] = &la[i];
  }
  for (size_t i = 0; i < ns; i++) {
    const m_sample *s = &VEC_AT(m->samples, m_sample, i);
    perftools__profiles__sample__init(&sa[i]);
    sa[i].n_location_id = s->nstack;
    sa[i].location_id = locids + s->stack;
    sa[i].n_value = m->ntypes;
    sa[i].value = &VEC_AT(m->values, int64_t, i * m->ntypes);
    sa[i].n_label = s->nlabel;
    sa[i].label = lap + s->labels;
    sap[i] = &sa[i];
  }
  p.n_sample = ns;
  p.sample = sap;
  for (size_t i = 0; i < nm; i++) {
    const m_mapping *e = &VEC_AT(m->maps, m_mapping, i);
    perftools__profiles__mapping__init(&ma[i]);
    ma[i].id = i + 1;
    ma[i].memory_start = e->start;
    ma[i].memory_limit = e->limit;
    ma[i].file_offset = e->offset;
    ma[i].filename = e->filename;
    ma[i].build_id = e->build_id;
    map[i] = &ma[i];
  }
  p.n_mapping = nm;
  p.mapping = map;
  for (size_t i = 0; i < m->lines.n; i++) {
    const m_line *e = &VEC_AT(m->lines, m_line, i);
    perftools__profiles__line__init(&li[i]);
    li[i].function_id = e->function;
    li[i].line = e->line;
    lip[i] = &li[i];
  }
  for (size_t i = 0; i < nl; i++) {
    const m_location *e = &VEC_AT(m->locs, m_location, i);
    perftools__profiles__location__init(&lo[i]);
    lo[i].id = i + 1;
    lo[i].mapping_id = e->mapping;
    lo[i].address = e->address;
    lo[i].n_line = e->nlines;
    lo[i].line = lip + e->lines;
    lop[i] = &lo[i];
  }
  p.n_location = nl;
  p.location = lop;
  for (size_t i = 0; i < nf; i++) {
    const m_function *e = &VEC_AT(m->funcs, m_function, i);
    perftools__profiles__function__init(&fu[i]);
    fu[i].id = i + 1;
    fu[i].name = e->name;
    fu[i].system_name = e->system_name;
    fu[i].filename = e->filename;
    fu[i].start_line = e->start_line;
    fup[i] = &fu[i];
  }
  p.n_function = nf;
  p.function = fup;
  p.n_string_table = m->strs.n;
  p.string_table = m->strs.p;
  p.time_nanos = m->time_min;
  p.duration_nanos = m->time_max - m->time_min;
  if (m->period_type) {
    period_type.type = m->period_type;
    period_type.unit = m->period_unit;
    p.period_type = &period_type;
    p.period = m->period;
  }
  p.n_comment = 1;
  p.comment = &cix;
  p.default_sample_type = default_ix;
  size_t len = perftools__profiles__profile__get_packed_size(&p);
  uint8_t *raw = malloc(len ? len : 1);
  if (!raw)
    goto done;
  perftools__profiles__profile__pack(&p, raw);
  /* Level 1: compressing is the merge's last, serial step; on the
   * benchmark's 1.4 MB result it takes 15 ms instead of 50, for a file 8%
   * larger (docs/benchmarks.md). */
  rc = pprof_gzip_level(raw, len, 1, out, out_len);
  free(raw);
done:
  free(sa);
  free(sap);
  free(locids);
  free(la);
  free(lap);
  free(ma);
  free(map);
  free(lo);
  free(lop);
  free(li);
  free(lip);
  free(fu);
  free(fup);
  return rc;
}

static int write_all(int fd, const uint8_t *buf, size_t len) {
  while (len) {
    ssize_t n = write(fd, buf, len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return -1;
    buf += n;
    len -= (size_t)n;
  }
  return 0;
}

int cp_merge_write(cp_merge *m, const char *path, char *err, size_t errlen) {
  uint8_t *gz;
  size_t len;
  if (encode(m, &gz, &len) != 0)
    return fail(err, errlen, "out of memory encoding the merged profile");
  int rc = cp_write_output(path, gz, len, err, errlen);
  free(gz);
  return rc;
}

int cp_write_output(const char *path, const void *data, size_t len, char *err,
                    size_t errlen) {
  if (strcmp(path, "-") == 0) {
    if (write_all(1, data, len) != 0)
      return fail(err, errlen, "cannot write to stdout: %s", strerror(errno));
    return 0;
  }
  const char *slash = strrchr(path, '/');
  char dir[PATH_MAX];
  const char *base = slash ? slash + 1 : path;
  if (!*base)
    return fail(err, errlen, "%s: not a file name", path);
  snprintf(dir, sizeof dir, "%.*s",
           slash ? (int)(slash - path + (slash == path)) : 1,
           slash ? path : ".");
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    return fail(err, errlen, "%s: %s", dir, strerror(errno));
  /* A regular file (or none) is replaced at once by a rename, so that a
   * reader never sees half of it. Anything else is written through, as a
   * shell's redirection would: a symbolic link's target, /dev/stdout, a
   * FIFO; a rename would put a regular file in place of the link or the
   * device node (/dev/null, as root). */
  struct stat st;
  int exists = fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0;
  if (exists && !S_ISREG(st.st_mode)) {
    close(dfd);
    int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (fd < 0)
      return fail(err, errlen, "%s: %s", path, strerror(errno));
    int rc = write_all(fd, data, len);
    int e = errno;
    if (close(fd) != 0 && rc == 0)
      rc = -1, e = errno;
    return rc ? fail(err, errlen, "%s: %s", path, strerror(e)) : 0;
  }
  char tmp[NAME_MAX + 1];
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
    snprintf(tmp, sizeof tmp, ".contprof-%d-%d.tmp", (int)getpid(), attempt);
    /* The profiles it was made from are the owner's alone (0600); so is
     * the new file. A file replaced keeps its mode. */
    fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                0600);
    if (fd < 0 && errno != EEXIST)
      break;
  }
  if (fd < 0) {
    int e = errno;
    close(dfd);
    return fail(err, errlen, "%s: cannot create a file there: %s", dir,
                strerror(e));
  }
  if (exists)
    (void)fchmod(fd, st.st_mode & 07777);
  int rc = 0;
  if (write_all(fd, data, len) != 0 || close(fd) != 0) {
    rc = fail(err, errlen, "%s: %s", path, strerror(errno));
    unlinkat(dfd, tmp, 0);
  } else if (renameat(dfd, tmp, dfd, base) != 0) {
    rc = fail(err, errlen, "%s: %s", path, strerror(errno));
    unlinkat(dfd, tmp, 0);
  }
  close(dfd);
  return rc;
}

/* ---- reading the merged result ------------------------------------------- */

size_t cp_merge_ntypes(const cp_merge *m) { return m->ntypes; }
const char *cp_merge_type(const cp_merge *m, size_t i) {
  return VEC_AT(m->strs, char *, m->type[i]);
}
const char *cp_merge_unit(const cp_merge *m, size_t i) {
  return VEC_AT(m->strs, char *, m->unit[i]);
}
int cp_merge_type_index(const cp_merge *m, const char *type) {
  for (size_t i = 0; i < m->ntypes; i++)
    if (strcmp(cp_merge_type(m, i), type) == 0)
      return (int)i;
  return -1;
}
int cp_merge_default_type(const cp_merge *m) {
  if (!m->ntypes)
    return -1;
  int d = m->default_type ? cp_merge_type_index(m, m->default_type) : -1;
  return d >= 0 ? d : (int)m->ntypes - 1;
}

/* The frame names of each location, leaf first as in the Lines. */
int cp_merge_each_stack(cp_merge *m, cp_merge_stack_fn fn, void *arg) {
  size_t nl = m->locs.n, nframes = 0;
  for (size_t i = 0; i < nl; i++) {
    uint32_t n = VEC_AT(m->locs, m_location, i).nlines;
    nframes += n ? n : 1;
  }
  size_t *first = malloc((nl + 1) * sizeof *first);
  const char **names = malloc((nframes ? nframes : 1) * sizeof *names);
  const char **stack = NULL;
  size_t stack_cap = 0;
  int rc = -1;
  if (!first || !names)
    goto done;
  size_t at = 0;
  for (size_t i = 0; i < nl; i++) {
    const m_location *l = &VEC_AT(m->locs, m_location, i);
    first[i] = at;
    for (uint32_t k = 0; k < l->nlines; k++) {
      uint32_t f = VEC_AT(m->lines, m_line, l->lines + k).function;
      const char *name =
          f ? VEC_AT(m->strs, char *, VEC_AT(m->funcs, m_function, f - 1).name)
            : "";
      names[at++] = *name ? name : "<unknown>";
    }
    if (l->nlines == 0) {
      const char *file =
          l->mapping
              ? VEC_AT(m->strs, char *,
                       VEC_AT(m->maps, m_mapping, l->mapping - 1).filename)
              : "";
      const char *b = strrchr(file, '/');
      b = b && b[1] ? b + 1 : file;
      char name[300];
      snprintf(name, sizeof name, "[%s]", b);
      uint32_t s = *b ? intern(m, name) : intern(m, "<unknown>");
      if (s == UINT32_MAX)
        goto done;
      names[at++] = VEC_AT(m->strs, char *, s);
    }
  }
  first[nl] = at;
  for (size_t i = 0; i < m->samples.n; i++) {
    const m_sample *s = &VEC_AT(m->samples, m_sample, i);
    size_t n = 0;
    for (uint32_t k = 0; k < s->nstack; k++) {
      uint32_t l = VEC_AT(m->stacks, uint32_t, s->stack + k) - 1;
      n += first[l + 1] - first[l];
    }
    if (n > stack_cap) {
      const char **ns = realloc(stack, n * sizeof *ns);
      if (!ns)
        goto done;
      stack = ns;
      stack_cap = n;
    }
    size_t at2 = 0; /* root first: last location, its last line, first */
    for (uint32_t k = s->nstack; k-- > 0;) {
      uint32_t l = VEC_AT(m->stacks, uint32_t, s->stack + k) - 1;
      for (size_t f = first[l + 1]; f-- > first[l];)
        stack[at2++] = names[f];
    }
    if (fn(arg, stack, n, &VEC_AT(m->values, int64_t, i * m->ntypes)) != 0)
      goto done;
  }
  rc = 0;
done:
  free(first);
  free(names);
  free(stack);
  return rc;
}

/* ---- messages ------------------------------------------------------------ */

void cp_report(const char *prefix, const char *message) {
  fputs("contprof: ", stderr);
  pprof_fput_escaped(prefix, stderr);
  fputs(": ", stderr);
  pprof_fput_escaped(message, stderr);
  fputs("\n", stderr);
}

static struct timespec progress_start;
static bool progress_shown;

void cp_progress(const char *verb, size_t done, size_t total) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  if (!progress_start.tv_sec && !progress_start.tv_nsec) {
    progress_start = now;
    return;
  }
  if (now.tv_sec - progress_start.tv_sec < 1 || !isatty(2))
    return;
  fprintf(stderr, "\rcontprof: %s %zu/%zu", verb, done, total);
  progress_shown = true;
}

void cp_progress_end(void) {
  if (progress_shown)
    fputs("\r\033[K", stderr);
  progress_shown = false;
}
