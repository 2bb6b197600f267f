/* Reads pprof files back: bounded gunzip, protobuf-c decoding under a memory
 * budget, validation, lookups, and the "top" table. Written for hostile input:
 * every size is checked before it is trusted. */
#include "exporter/pprof_read.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return -1;
}

/* "256 MiB" for whole MiB, else "1000 bytes": how limits are named. */
static const char *limit_text(size_t bytes, char *buf, size_t len) {
  if (bytes >= ((size_t)1 << 20) && bytes % ((size_t)1 << 20) == 0)
    snprintf(buf, len, "%zu MiB", bytes >> 20);
  else
    snprintf(buf, len, "%zu bytes", bytes);
  return buf;
}

static int too_large(char *err, size_t errlen, const char *what, size_t limit) {
  char text[48];
  return fail(err, errlen, "profile too large (%s over the %s limit)", what,
              limit_text(limit, text, sizeof text));
}

/* ---- escaping ------------------------------------------------------------ */

size_t pprof_utf8_length(const unsigned char *p, uint32_t *cp) {
  unsigned c = p[0];
  size_t n;
  uint32_t v, min;
  if (c < 0x80) {
    *cp = c;
    return 1;
  } else if (c >= 0xc2 && c <= 0xdf) {
    n = 2, v = c & 0x1f, min = 0x80;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3, v = c & 0x0f, min = 0x800;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4, v = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  for (size_t i = 1; i < n; i++) {
    if ((p[i] & 0xc0) != 0x80) /* also stops at the terminating NUL */
      return 0;
    v = (v << 6) | (p[i] & 0x3f);
  }
  if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
    return 0;
  *cp = v;
  return n;
}

void pprof_fput_escaped(const char *s, FILE *out) {
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    uint32_t cp = 0;
    size_t n = pprof_utf8_length(p, &cp);
    if (n == 0 || cp < 0x20 || cp == 0x7f) { /* invalid byte, C0, DEL */
      fprintf(out, "\\x%02x", *p);
      p++;
    } else if (cp >= 0x80 && cp <= 0x9f) { /* C1: CSI is 0xc2 0x9b */
      fprintf(out, "\\x%02x\\x%02x", p[0], p[1]);
      p += n;
    } else if ((cp >= 0x202a && cp <= 0x202e) ||
               (cp >= 0x2066 && cp <= 0x2069)) {
      fprintf(out, "\\u%04x", (unsigned)cp);
      p += n;
    } else {
      fwrite(p, 1, n, out);
      p += n;
    }
  }
}

/* ---- gunzip -------------------------------------------------------------- */

int pprof_gunzip(const uint8_t *in, size_t len, size_t max_out, uint8_t **out,
                 size_t *out_len, char *err, size_t errlen) {
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  if (inflateInit2(&zs, 15 + 32) != Z_OK)
    return fail(err, errlen, "cannot start zlib");
  /* Start near the usual ratio and double; never trust the gzip trailer's
   * size. One byte beyond max_out tells "too big" from "exactly max_out". */
  size_t limit = max_out < SIZE_MAX ? max_out + 1 : max_out;
  size_t cap = len < SIZE_MAX / 4 ? len * 4 : SIZE_MAX;
  if (cap < 4096)
    cap = 4096;
  if (cap > limit)
    cap = limit;
  uint8_t *buf = malloc(cap ? cap : 1);
  if (!buf) {
    inflateEnd(&zs);
    return fail(err, errlen, "out of memory");
  }
  size_t in_done = 0, out_done = 0;
  int rc = -1;
  for (;;) {
    if (out_done == cap) {
      if (cap >= limit) {
        too_large(err, errlen, "uncompressed size", max_out);
        goto done;
      }
      size_t ncap = cap > limit / 2 ? limit : cap * 2;
      uint8_t *nb = realloc(buf, ncap);
      if (!nb) {
        fail(err, errlen, "out of memory");
        goto done;
      }
      buf = nb;
      cap = ncap;
    }
    size_t in_chunk = len - in_done, out_chunk = cap - out_done;
    if (in_chunk > UINT_MAX)
      in_chunk = UINT_MAX;
    if (out_chunk > UINT_MAX)
      out_chunk = UINT_MAX;
    zs.next_in = (Bytef *)(in + in_done);
    zs.avail_in = (uInt)in_chunk;
    zs.next_out = buf + out_done;
    zs.avail_out = (uInt)out_chunk;
    int zrc = inflate(&zs, Z_NO_FLUSH);
    in_done += in_chunk - zs.avail_in;
    out_done += out_chunk - zs.avail_out;
    if (zrc == Z_STREAM_END) {
      if (in_done == len)
        break;
      /* Another gzip member follows (what `cat a.gz b.gz` makes). */
      if (len - in_done >= 2 && in[in_done] == 0x1f &&
          in[in_done + 1] == 0x8b && inflateReset(&zs) == Z_OK)
        continue;
      fail(err, errlen, "%zu bytes of trailing garbage after the gzip data",
           len - in_done);
      goto done;
    }
    if (zrc == Z_OK)
      continue;
    if (zrc == Z_BUF_ERROR && out_done == cap)
      continue; /* the output is full: grow and go on */
    if (zrc == Z_BUF_ERROR && in_done == len) {
      fail(err, errlen, "truncated gzip data");
      goto done;
    }
    if (zrc == Z_MEM_ERROR) {
      fail(err, errlen, "out of memory");
      goto done;
    }
    fail(err, errlen, "corrupt gzip data (%s)",
         zs.msg ? zs.msg : "no detail from zlib");
    goto done;
  }
  if (out_done > max_out) {
    too_large(err, errlen, "uncompressed size", max_out);
    goto done;
  }
  *out = buf;
  *out_len = out_done;
  buf = NULL;
  rc = 0;
done:
  free(buf);
  inflateEnd(&zs);
  return rc;
}

/* ---- decoding ------------------------------------------------------------ */

/* protobuf-c allocates one struct per message, so a small hostile input can
 * ask for far more memory than its size (an empty Sample is 2 bytes on the
 * wire, 80 in memory). The budget stops that. */
typedef struct alloc_budget {
  size_t used, limit;
  bool exceeded;
  pprof_arena *arena; /* allocate from it instead of malloc, or NULL */
} alloc_budget;

/* An arena: chunks bumped through, all freed at once. A decoded profile is
 * thousands of small messages; one malloc and one free each cost more than
 * decoding them when a command reads hundreds of files. */
struct pprof_arena {
  struct pprof_arena *next; /* chunks, newest first */
  size_t size, at;          /* this chunk's bytes, and those used */
  max_align_t data[];
};

#define ARENA_CHUNK ((size_t)1 << 20)

/* The head (the caller's handle, no data) links the chunks, newest (the
 * one bumped through) first. */
static void *arena_alloc(alloc_budget *b, size_t size) {
  pprof_arena *head = b->arena, *cur = head->next;
  size = (size + 15) & ~(size_t)15;
  if (!cur || size > cur->size - cur->at) {
    size_t chunk = size > ARENA_CHUNK ? size : ARENA_CHUNK;
    if (chunk + sizeof *cur > b->limit - b->used) {
      b->exceeded = true;
      return NULL;
    }
    if (!(cur = malloc(sizeof *cur + chunk)))
      return NULL;
    b->used += sizeof *cur + chunk;
    *cur = (pprof_arena){head->next, chunk, 0};
    head->next = cur;
  }
  void *p = (char *)cur->data + cur->at;
  cur->at += size;
  return p;
}

static void *budget_alloc(void *data, size_t size) {
  alloc_budget *b = data;
  if (size > b->limit - b->used) {
    b->exceeded = true;
    return NULL;
  }
  if (b->arena)
    return arena_alloc(b, size);
  void *p = malloc(size);
  if (p)
    b->used += malloc_usable_size(p);
  return p;
}

static void budget_free(void *data, void *p) {
  alloc_budget *b = data;
  if (b->arena)
    return; /* freed with the arena */
  if (p)
    b->used -= malloc_usable_size(p);
  free(p);
}

void pprof_arena_free(pprof_arena *a) {
  while (a) {
    pprof_arena *next = a->next;
    free(a);
    a = next;
  }
}

/* A varint at *p (below end), or -1 when truncated or over 10 bytes. */
static int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 70 && *p < end; shift += 7) {
    uint8_t b = *(*p)++;
    *v |= (uint64_t)(b & 0x7f) << (shift < 64 ? shift : 63);
    if (!(b & 0x80))
      return 0;
  }
  return -1;
}

/* The least memory protobuf-c will ask for to decode data: one struct (and
 * its pointer) per repeated message or string at the top level, counted in
 * one pass over the wire format without decoding. A file of 8M empty
 * samples is refused here, before any of it is allocated. Malformed input
 * ends the count; the decoder then says what is wrong. */
static size_t least_decoded_size(const uint8_t *data, size_t len) {
  static const size_t per_field[] = {
      [1] = sizeof(Perftools__Profiles__ValueType),
      [2] = sizeof(Perftools__Profiles__Sample),
      [3] = sizeof(Perftools__Profiles__Mapping),
      [4] = sizeof(Perftools__Profiles__Location),
      [5] = sizeof(Perftools__Profiles__Function),
      [6] = 1, /* a string: its bytes, counted below, and a NUL */
  };
  const uint8_t *p = data, *end = data + len;
  size_t total = 0;
  while (p < end) {
    uint64_t key, n;
    if (read_varint(&p, end, &key) != 0)
      break;
    uint64_t field = key >> 3;
    switch (key & 7) {
    case 0:
      if (read_varint(&p, end, &n) != 0)
        return total;
      break;
    case 1:
      if (end - p < 8)
        return total;
      p += 8;
      break;
    case 5:
      if (end - p < 4)
        return total;
      p += 4;
      break;
    case 2:
      if (read_varint(&p, end, &n) != 0 || n > (uint64_t)(end - p))
        return total;
      p += n;
      if (field < sizeof per_field / sizeof per_field[0] && per_field[field])
        /* The struct, the pointer to it, and malloc's 16-byte minimum. */
        total += per_field[field] + sizeof(void *) + 16 +
                 (field == 6 ? (size_t)n : 0);
      break;
    default:
      return total;
    }
  }
  return total;
}

/* pprof_decode, naming `named_limit` when the budget is exceeded and
 * storing in *used (may be NULL) the bytes the profile keeps. With arena
 * non-NULL the profile is allocated in a new arena stored there (freed
 * with pprof_arena_free, never with pprof_profile_free). */
static int decode_within(const uint8_t *data, size_t len, size_t max_memory,
                         size_t named_limit, size_t *used, pprof_profile **out,
                         pprof_arena **arena, char *err, size_t errlen) {
  *out = NULL;
  if (least_decoded_size(data, len) > max_memory)
    return too_large(err, errlen, "decoded size", named_limit);
  alloc_budget budget = {0, max_memory, false, NULL};
  if (arena && !(budget.arena = calloc(1, sizeof *budget.arena)))
    return fail(err, errlen, "out of memory");
  ProtobufCAllocator allocator = {budget_alloc, budget_free, &budget};
  pprof_profile *p =
      perftools__profiles__profile__unpack(&allocator, len, data);
  int rc = -1;
  if (!p && budget.exceeded)
    too_large(err, errlen, "decoded size", named_limit);
  else if (!p)
    fail(err, errlen, "not a pprof profile (protobuf decoding failed)");
  else
    rc = pprof_validate(p, err, errlen);
  if (rc != 0) {
    /* budget_alloc hands out plain malloc memory without an arena:
     * pprof_profile_free releases it with protobuf-c's default allocator. */
    if (budget.arena)
      pprof_arena_free(budget.arena);
    else
      pprof_profile_free(p);
    return -1;
  }
  if (used)
    *used = budget.used;
  if (arena)
    *arena = budget.arena;
  *out = p;
  return 0;
}

int pprof_decode(const uint8_t *data, size_t len, size_t max_memory,
                 pprof_profile **out, char *err, size_t errlen) {
  return decode_within(data, len, max_memory, max_memory, NULL, out, NULL, err,
                       errlen);
}

/* Gunzips (when gzip) and decodes within max_memory bytes for the
 * uncompressed copy and the decoded profile together; named_limit is the
 * limit messages name (the caller's whole budget). */
static int read_buffer_within(const uint8_t *data, size_t len, size_t max_bytes,
                              size_t max_memory, size_t named_limit,
                              size_t *used, pprof_profile **out,
                              pprof_arena **arena, char *err, size_t errlen) {
  *out = NULL;
  if (len == 0)
    return fail(err, errlen, "empty file");
  uint8_t *plain = NULL;
  size_t remaining = max_memory;
  if (len >= 2 && data[0] == 0x1f && data[1] == 0x8b) {
    size_t max_out = max_bytes < max_memory ? max_bytes : max_memory;
    if (pprof_gunzip(data, len, max_out, &plain, &len, err, errlen)) {
      if (max_out == max_memory && strstr(err ? err : "", "too large"))
        too_large(err, errlen, "uncompressed size", named_limit);
      return -1;
    }
    data = plain;
    remaining -= len;
  } else if (len > max_bytes) {
    return too_large(err, errlen, "uncompressed size", max_bytes);
  }
  size_t budget = PPROF_DECODE_MEMORY_FLOOR;
  budget = len > (SIZE_MAX - budget) / PPROF_DECODE_MEMORY_RATIO
               ? SIZE_MAX
               : budget + len * PPROF_DECODE_MEMORY_RATIO;
  if (budget > remaining)
    budget = remaining;
  int rc = decode_within(data, len, budget, named_limit, used, out, arena, err,
                         errlen);
  free(plain);
  return rc;
}

int pprof_read_buffer(const uint8_t *data, size_t len, size_t max_bytes,
                      pprof_profile **out, char *err, size_t errlen) {
  return read_buffer_within(data, len, max_bytes, PPROF_READ_MAX_MEMORY,
                            PPROF_READ_MAX_MEMORY, NULL, out, NULL, err,
                            errlen);
}

int pprof_read_file(const char *path, pprof_profile **out, char *err,
                    size_t errlen) {
  return pprof_read_file_within(path, PPROF_READ_MAX_MEMORY, NULL, out, err,
                                errlen);
}

int pprof_read_file_within(const char *path, size_t max_memory, size_t *used,
                           pprof_profile **out, char *err, size_t errlen) {
  return pprof_read_file_arena(path, max_memory, used, out, NULL, err, errlen);
}

int pprof_read_file_arena(const char *path, size_t max_memory, size_t *used,
                          pprof_profile **out, pprof_arena **arena, char *err,
                          size_t errlen) {
  *out = NULL;
  /* The file's own bytes count too; it is read whole. */
  size_t max_file =
      max_memory < PPROF_READ_MAX_BYTES ? max_memory : PPROF_READ_MAX_BYTES;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    return fail(err, errlen, "%s", strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return fail(err, errlen, "%s", strerror(e));
  }
  if (S_ISDIR(st.st_mode)) {
    close(fd);
    return fail(err, errlen, "is a directory");
  }
  if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > max_file) {
    close(fd);
    return too_large(err, errlen, "file size", max_file);
  }
  /* Read to EOF rather than trusting st_size, so pipes work too. */
  size_t cap = 0, len = 0;
  uint8_t *buf = NULL;
  /* st_size + 1 so that EOF is seen without growing. */
  size_t want = S_ISREG(st.st_mode) ? (size_t)st.st_size + 1 : 0;
  for (;;) {
    if (len == cap) {
      if (cap > max_file) {
        free(buf);
        close(fd);
        return too_large(err, errlen, "file size", max_file);
      }
      size_t ncap = cap ? cap * 2 : (want > 1 ? want : 65536);
      if (ncap > max_file + 1)
        ncap = max_file + 1;
      uint8_t *nb = realloc(buf, ncap);
      if (!nb) {
        free(buf);
        close(fd);
        return fail(err, errlen, "out of memory");
      }
      buf = nb;
      cap = ncap;
    }
    ssize_t n = read(fd, buf + len, cap - len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int e = errno;
      free(buf);
      close(fd);
      return fail(err, errlen, "%s", strerror(e));
    }
    if (n == 0)
      break;
    len += (size_t)n;
  }
  close(fd);
  size_t rest = max_memory > cap ? max_memory - cap : 0;
  int rc = read_buffer_within(buf, len, PPROF_READ_MAX_BYTES, rest, max_memory,
                              used, out, arena, err, errlen);
  free(buf);
  return rc;
}

void pprof_profile_free(pprof_profile *p) {
  if (p)
    perftools__profiles__profile__free_unpacked(p, NULL);
}

/* ---- id index ------------------------------------------------------------ */

/* Ids sorted for binary search: (id, position in the profile's array). */
typedef struct id_pos {
  uint64_t id;
  size_t pos;
} id_pos;

static int id_pos_cmp(const void *a, const void *b) {
  const id_pos *x = a, *y = b;
  return x->id < y->id ? -1 : x->id > y->id;
}

/* Fills a sorted index of n ids read by get(). Returns NULL on ENOMEM. */
static id_pos *id_index_build(const void *items, size_t n,
                              uint64_t (*get)(const void *items, size_t i)) {
  id_pos *ix = malloc((n ? n : 1) * sizeof *ix);
  if (!ix)
    return NULL;
  for (size_t i = 0; i < n; i++)
    ix[i] = (id_pos){get(items, i), i};
  qsort(ix, n, sizeof *ix, id_pos_cmp);
  return ix;
}

/* Position of id, or SIZE_MAX. */
static size_t id_index_find(const id_pos *ix, size_t n, uint64_t id) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (ix[mid].id < id)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < n && ix[lo].id == id ? ix[lo].pos : SIZE_MAX;
}

static uint64_t mapping_id(const void *items, size_t i) {
  return ((Perftools__Profiles__Mapping *const *)items)[i]->id;
}
static uint64_t function_id(const void *items, size_t i) {
  return ((Perftools__Profiles__Function *const *)items)[i]->id;
}
static uint64_t location_id(const void *items, size_t i) {
  return ((Perftools__Profiles__Location *const *)items)[i]->id;
}

/* Zero or a duplicate id, after sorting, or 0 when all are fine. */
static int id_index_check(const id_pos *ix, size_t n, const char *what,
                          char *err, size_t errlen) {
  for (size_t i = 0; i < n; i++) {
    if (ix[i].id == 0)
      return fail(err, errlen, "%s with id 0", what);
    if (i > 0 && ix[i].id == ix[i - 1].id)
      return fail(err, errlen, "duplicate %s id %llu", what,
                  (unsigned long long)ix[i].id);
  }
  return 0;
}

/* ---- validation ---------------------------------------------------------- */

typedef struct validator {
  const pprof_profile *p;
  char *err;
  size_t errlen;
} validator;

static int check_str(const validator *v, int64_t index, const char *what,
                     size_t item) {
  if (index < 0 || (uint64_t)index >= v->p->n_string_table)
    return fail(v->err, v->errlen,
                "string index %lld of %s %zu out of range (%zu strings)",
                (long long)index, what, item, v->p->n_string_table);
  return 0;
}

static int validate_strings(const validator *v) {
  const pprof_profile *p = v->p;
  for (size_t i = 0; i < p->n_sample_type; i++)
    if (check_str(v, p->sample_type[i]->type, "sample type", i) ||
        check_str(v, p->sample_type[i]->unit, "sample type unit", i))
      return -1;
  for (size_t i = 0; i < p->n_sample; i++)
    for (size_t j = 0; j < p->sample[i]->n_label; j++) {
      const Perftools__Profiles__Label *l = p->sample[i]->label[j];
      if (check_str(v, l->key, "label key of sample", i) ||
          check_str(v, l->str, "label of sample", i) ||
          check_str(v, l->num_unit, "label unit of sample", i))
        return -1;
    }
  for (size_t i = 0; i < p->n_mapping; i++)
    if (check_str(v, p->mapping[i]->filename, "mapping filename", i) ||
        check_str(v, p->mapping[i]->build_id, "mapping build id", i))
      return -1;
  for (size_t i = 0; i < p->n_function; i++) {
    const Perftools__Profiles__Function *f = p->function[i];
    if (check_str(v, f->name, "function name", i) ||
        check_str(v, f->system_name, "function system name", i) ||
        check_str(v, f->filename, "function filename", i))
      return -1;
  }
  for (size_t i = 0; i < p->n_comment; i++)
    if (check_str(v, p->comment[i], "comment", i))
      return -1;
  if (check_str(v, p->drop_frames, "drop_frames", 0) ||
      check_str(v, p->keep_frames, "keep_frames", 0) ||
      check_str(v, p->default_sample_type, "default_sample_type", 0))
    return -1;
  if (p->period_type && (check_str(v, p->period_type->type, "period type", 0) ||
                         check_str(v, p->period_type->unit, "period unit", 0)))
    return -1;
  return 0;
}

int pprof_validate(const pprof_profile *p, char *err, size_t errlen) {
  validator v = {p, err, errlen};
  if (p->n_string_table == 0)
    return fail(err, errlen, "empty string table");
  if (p->string_table[0][0] != '\0')
    return fail(err, errlen, "string_table[0] is not \"\"");
  if (validate_strings(&v) != 0)
    return -1;
  for (size_t i = 0; i < p->n_sample; i++)
    if (p->sample[i]->n_value != p->n_sample_type)
      return fail(err, errlen, "sample %zu has %zu values for %zu sample types",
                  i, p->sample[i]->n_value, p->n_sample_type);

  int rc = -1;
  id_pos *maps = id_index_build(p->mapping, p->n_mapping, mapping_id);
  id_pos *funcs = id_index_build(p->function, p->n_function, function_id);
  id_pos *locs = id_index_build(p->location, p->n_location, location_id);
  if (!maps || !funcs || !locs) {
    fail(err, errlen, "out of memory");
    goto done;
  }
  if (id_index_check(maps, p->n_mapping, "mapping", err, errlen) ||
      id_index_check(funcs, p->n_function, "function", err, errlen) ||
      id_index_check(locs, p->n_location, "location", err, errlen))
    goto done;
  for (size_t i = 0; i < p->n_location; i++) {
    const Perftools__Profiles__Location *l = p->location[i];
    if (l->mapping_id &&
        id_index_find(maps, p->n_mapping, l->mapping_id) == SIZE_MAX) {
      fail(err, errlen, "location %llu refers to missing mapping %llu",
           (unsigned long long)l->id, (unsigned long long)l->mapping_id);
      goto done;
    }
    for (size_t j = 0; j < l->n_line; j++) {
      uint64_t f = l->line[j]->function_id;
      if (f && id_index_find(funcs, p->n_function, f) == SIZE_MAX) {
        fail(err, errlen, "location %llu refers to missing function %llu",
             (unsigned long long)l->id, (unsigned long long)f);
        goto done;
      }
    }
  }
  /* Ids 1..n (what pprof.c and Go write), sorted above: a range check
   * then stands for the search, which dominated reading a large profile. */
  bool dense =
      p->n_location == 0 || locs[p->n_location - 1].id == p->n_location;
  for (size_t i = 0; i < p->n_sample; i++) {
    const Perftools__Profiles__Sample *s = p->sample[i];
    for (size_t j = 0; j < s->n_location_id; j++)
      if (dense ? s->location_id[j] - 1 >= p->n_location
                : id_index_find(locs, p->n_location, s->location_id[j]) ==
                      SIZE_MAX) {
        fail(err, errlen, "sample %zu refers to missing location %llu", i,
             (unsigned long long)s->location_id[j]);
        goto done;
      }
  }
  rc = 0;
done:
  free(maps);
  free(funcs);
  free(locs);
  return rc;
}

/* ---- lookups ------------------------------------------------------------- */

const char *pprof_str(const pprof_profile *p, int64_t index) {
  if (index < 0 || (uint64_t)index >= p->n_string_table)
    return "";
  return p->string_table[index];
}

int pprof_sample_type_index(const pprof_profile *p, const char *type) {
  for (size_t i = 0; i < p->n_sample_type && i < INT_MAX; i++)
    if (strcmp(pprof_str(p, p->sample_type[i]->type), type) == 0)
      return (int)i;
  return -1;
}

int pprof_default_sample_type_index(const pprof_profile *p) {
  if (p->n_sample_type == 0 || p->n_sample_type > INT_MAX)
    return -1;
  if (p->default_sample_type) {
    int i = pprof_sample_type_index(p, pprof_str(p, p->default_sample_type));
    if (i >= 0)
      return i;
  }
  return (int)p->n_sample_type - 1;
}

/* Ids are usually 1..n in array order: try that slot first. */
#define FIND_BY_ID(items, n, id)                                               \
  do {                                                                         \
    if ((id) == 0)                                                             \
      return NULL;                                                             \
    if ((id) <= (n) && (items)[(id)-1]->id == (id))                            \
      return (items)[(id)-1];                                                  \
    for (size_t i_ = 0; i_ < (n); i_++)                                        \
      if ((items)[i_]->id == (id))                                             \
        return (items)[i_];                                                    \
    return NULL;                                                               \
  } while (0)

const Perftools__Profiles__Mapping *pprof_find_mapping(const pprof_profile *p,
                                                       uint64_t id) {
  FIND_BY_ID(p->mapping, p->n_mapping, id);
}

const Perftools__Profiles__Function *pprof_find_function(const pprof_profile *p,
                                                         uint64_t id) {
  FIND_BY_ID(p->function, p->n_function, id);
}

const Perftools__Profiles__Location *pprof_find_location(const pprof_profile *p,
                                                         uint64_t id) {
  FIND_BY_ID(p->location, p->n_location, id);
}

size_t pprof_location_functions(const pprof_profile *p,
                                const Perftools__Profiles__Location *loc,
                                const char **names, size_t max) {
  for (size_t i = 0; i < loc->n_line && i < max; i++) {
    const Perftools__Profiles__Function *f =
        pprof_find_function(p, loc->line[i]->function_id);
    names[i] = f ? pprof_str(p, f->name) : "";
  }
  return loc->n_line;
}

const Perftools__Profiles__Label *
pprof_sample_label(const pprof_profile *p, const Perftools__Profiles__Sample *s,
                   const char *key) {
  for (size_t i = 0; i < s->n_label; i++)
    if (strcmp(pprof_str(p, s->label[i]->key), key) == 0)
      return s->label[i];
  return NULL;
}

const char *pprof_label_str(const pprof_profile *p,
                            const Perftools__Profiles__Label *label) {
  return label->str ? pprof_str(p, label->str) : NULL;
}

/* ---- top ----------------------------------------------------------------- */

/* Function name -> entry, open addressing; slots hold entry + 1. */
typedef struct top_state {
  pprof_top *top;
  size_t entries_cap;
  size_t *slots;
  size_t nslots;   /* power of two */
  uint64_t *stamp; /* per entry: the last sample that added to its cum */
  int lines;       /* entries per "function file:line", not per function */
} top_state;

static uint64_t hash_name(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 0x100000001b3ull;
  }
  return h ^ (h >> 29);
}

static int top_rehash(top_state *st, size_t nslots) {
  size_t *slots = calloc(nslots, sizeof *slots);
  if (!slots)
    return -1;
  for (size_t e = 0; e < st->top->nentries; e++) {
    size_t j = (size_t)hash_name(st->top->entries[e].name) & (nslots - 1);
    while (slots[j])
      j = (j + 1) & (nslots - 1);
    slots[j] = e + 1;
  }
  free(st->slots);
  st->slots = slots;
  st->nslots = nslots;
  return 0;
}

/* The entry of name (created with zero values if new), or SIZE_MAX. */
static size_t top_entry(top_state *st, const char *name) {
  pprof_top *t = st->top;
  if ((t->nentries + 1) * 2 > st->nslots) {
    if (st->nslots > SIZE_MAX / 4 / sizeof(size_t) ||
        top_rehash(st, st->nslots ? st->nslots * 2 : 64) != 0)
      return SIZE_MAX;
  }
  size_t j = (size_t)hash_name(name) & (st->nslots - 1);
  while (st->slots[j]) {
    if (strcmp(t->entries[st->slots[j] - 1].name, name) == 0)
      return st->slots[j] - 1;
    j = (j + 1) & (st->nslots - 1);
  }
  if (t->nentries == st->entries_cap) {
    size_t ncap = st->entries_cap ? st->entries_cap * 2 : 64;
    if (ncap > SIZE_MAX / sizeof(pprof_top_entry))
      return SIZE_MAX;
    pprof_top_entry *ne = realloc(t->entries, ncap * sizeof *ne);
    if (!ne)
      return SIZE_MAX;
    t->entries = ne;
    uint64_t *ns = realloc(st->stamp, ncap * sizeof *ns);
    if (!ns)
      return SIZE_MAX;
    st->stamp = ns;
    st->entries_cap = ncap;
  }
  char *copy = strdup(name);
  if (!copy)
    return SIZE_MAX;
  t->entries[t->nentries] = (pprof_top_entry){copy, 0, 0};
  st->stamp[t->nentries] = 0;
  st->slots[j] = t->nentries + 1;
  return t->nentries++;
}

/* The name go tool pprof gives a frame without a function name. */
static size_t top_unnamed_entry(top_state *st, const pprof_profile *p,
                                const Perftools__Profiles__Location *loc) {
  const Perftools__Profiles__Mapping *m =
      loc ? pprof_find_mapping(p, loc->mapping_id) : NULL;
  const char *file = m ? pprof_str(p, m->filename) : "";
  if (!*file)
    return top_entry(st, "<unknown>");
  const char *base = strrchr(file, '/');
  base = base && base[1] ? base + 1 : file;
  size_t n = strlen(base) + 3;
  char *name = malloc(n);
  if (!name)
    return SIZE_MAX;
  snprintf(name, n, "[%s]", base);
  size_t e = top_entry(st, name);
  free(name);
  return e;
}

/* func_entry[] value of a function without a name. */
#define UNNAMED (SIZE_MAX - 1)

static int64_t sat_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    return b > 0 ? INT64_MAX : INT64_MIN;
  return r;
}

/* Adds one profile's samples of value index vi. Frames are resolved to
 * entries once per location: locs_first[i]..locs_first[i+1] of frames[]
 * hold location i's entries, leaf first. */
static int top_add_profile(top_state *st, const pprof_profile *p, int vi,
                           uint64_t *sample_no) {
  int rc = -1;
  size_t nframes = 0;
  for (size_t i = 0; i < p->n_location; i++)
    nframes += p->location[i]->n_line ? p->location[i]->n_line : 1;
  size_t *first = malloc((p->n_location + 1) * sizeof *first);
  size_t *frames = malloc((nframes ? nframes : 1) * sizeof *frames);
  size_t *func_entry =
      malloc((p->n_function ? p->n_function : 1) * sizeof *func_entry);
  id_pos *funcs = id_index_build(p->function, p->n_function, function_id);
  id_pos *locs = id_index_build(p->location, p->n_location, location_id);
  if (!first || !frames || !func_entry || !funcs || !locs)
    goto done;

  for (size_t i = 0; i < p->n_function; i++) {
    const char *name = pprof_str(p, p->function[i]->name);
    func_entry[i] = *name ? top_entry(st, name) : UNNAMED;
    if (func_entry[i] == SIZE_MAX)
      goto done;
  }
  size_t at = 0;
  for (size_t i = 0; i < p->n_location; i++) {
    const Perftools__Profiles__Location *loc = p->location[i];
    first[i] = at;
    for (size_t j = 0; j < (loc->n_line ? loc->n_line : 1); j++) {
      size_t fi = loc->n_line ? id_index_find(funcs, p->n_function,
                                              loc->line[j]->function_id)
                              : SIZE_MAX;
      size_t e = fi == SIZE_MAX ? UNNAMED : func_entry[fi];
      if (st->lines && e != UNNAMED) {
        /* go tool pprof -lines: "function file:line" (bounded: file names
         * come from the file). */
        const Perftools__Profiles__Function *f = p->function[fi];
        char key[1024];
        snprintf(key, sizeof key, "%.500s %.400s:%" PRId64,
                 pprof_str(p, f->name), pprof_str(p, f->filename),
                 loc->line[j]->line);
        e = top_entry(st, key);
      }
      if (e == UNNAMED) /* no function, or an empty name */
        e = top_unnamed_entry(st, p, loc);
      if (e == SIZE_MAX)
        goto done;
      frames[at++] = e;
    }
  }
  first[p->n_location] = at;

  pprof_top *t = st->top;
  for (size_t i = 0; i < p->n_sample; i++) {
    const Perftools__Profiles__Sample *s = p->sample[i];
    if ((size_t)vi >= s->n_value || s->value[vi] == 0)
      continue;
    int64_t v = s->value[vi];
    t->total = sat_add(t->total, v < 0 ? (v == INT64_MIN ? INT64_MAX : -v) : v);
    uint64_t stamp = ++*sample_no;
    bool leaf = true;
    for (size_t j = 0; j < s->n_location_id; j++) {
      size_t li = id_index_find(locs, p->n_location, s->location_id[j]);
      if (li == SIZE_MAX)
        continue; /* not validated; be lenient */
      for (size_t k = first[li]; k < first[li + 1]; k++) {
        size_t e = frames[k];
        if (leaf) {
          t->entries[e].flat = sat_add(t->entries[e].flat, v);
          leaf = false;
        }
        if (st->stamp[e] != stamp) { /* recursion counts once */
          st->stamp[e] = stamp;
          t->entries[e].cum = sat_add(t->entries[e].cum, v);
        }
      }
    }
  }
  rc = 0;
done:
  free(first);
  free(frames);
  free(func_entry);
  free(funcs);
  free(locs);
  return rc;
}

static int top_entry_cmp(const void *a, const void *b) {
  const pprof_top_entry *x = a, *y = b;
  /* go tool pprof's FlatNameOrder: |flat| down, name up, |cum| down. */
  uint64_t fx = x->flat < 0 ? -(uint64_t)x->flat : (uint64_t)x->flat;
  uint64_t fy = y->flat < 0 ? -(uint64_t)y->flat : (uint64_t)y->flat;
  if (fx != fy)
    return fx > fy ? -1 : 1;
  int c = strcmp(x->name, y->name);
  if (c)
    return c;
  uint64_t cx = x->cum < 0 ? -(uint64_t)x->cum : (uint64_t)x->cum;
  uint64_t cy = y->cum < 0 ? -(uint64_t)y->cum : (uint64_t)y->cum;
  return cx > cy ? -1 : cx < cy;
}

int pprof_top_compute(const pprof_profile *const *profiles, size_t nprofiles,
                      const char *type, pprof_top *out, char *err,
                      size_t errlen) {
  return pprof_top_compute_lines(profiles, nprofiles, type, 0, out, err,
                                 errlen);
}

int pprof_top_compute_lines(const pprof_profile *const *profiles,
                            size_t nprofiles, const char *type, int lines,
                            pprof_top *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  for (size_t i = 0; !type && i < nprofiles; i++) {
    int d = pprof_default_sample_type_index(profiles[i]);
    if (d >= 0)
      type = pprof_str(profiles[i], profiles[i]->sample_type[d]->type);
  }
  if (!type)
    return fail(err, errlen, "no sample types");
  const char *unit = NULL;
  for (size_t i = 0; i < nprofiles; i++) {
    int vi = pprof_sample_type_index(profiles[i], type);
    if (vi < 0)
      continue;
    const char *u = pprof_str(profiles[i], profiles[i]->sample_type[vi]->unit);
    if (unit && strcmp(unit, u) != 0)
      return fail(err, errlen,
                  "sample type %s is in %s in one profile, %s in "
                  "another",
                  type, unit, u);
    unit = u;
    out->profiles_with_type++;
  }
  if (!unit)
    return fail(err, errlen, "no sample type %s", type);
  top_state st = {out, 0, NULL, 0, NULL, lines};
  out->type = strdup(type);
  out->unit = strdup(unit);
  if (!out->type || !out->unit)
    goto nomem;
  uint64_t sample_no = 0;
  for (size_t i = 0; i < nprofiles; i++) {
    int vi = pprof_sample_type_index(profiles[i], type);
    if (vi >= 0 && top_add_profile(&st, profiles[i], vi, &sample_no) != 0)
      goto nomem;
  }
  /* Like go tool pprof, list only functions that some value reached. */
  size_t kept = 0;
  for (size_t i = 0; i < out->nentries; i++) {
    if (out->entries[i].flat == 0 && out->entries[i].cum == 0)
      free(out->entries[i].name);
    else
      out->entries[kept++] = out->entries[i];
  }
  out->nentries = kept;
  if (kept > 1)
    qsort(out->entries, kept, sizeof *out->entries, top_entry_cmp);
  free(st.slots);
  free(st.stamp);
  return 0;
nomem:
  free(st.slots);
  free(st.stamp);
  pprof_top_free(out);
  return fail(err, errlen, "out of memory");
}

void pprof_top_free(pprof_top *top) {
  for (size_t i = 0; i < top->nentries; i++)
    free(top->entries[i].name);
  free(top->entries);
  free(top->type);
  free(top->unit);
  memset(top, 0, sizeof *top);
}

int pprof_sample_has_function(const pprof_profile *p,
                              const Perftools__Profiles__Sample *s,
                              const char *name) {
  for (size_t i = 0; i < s->n_location_id; i++) {
    const Perftools__Profiles__Location *loc =
        pprof_find_location(p, s->location_id[i]);
    if (!loc)
      continue;
    for (size_t l = 0; l < loc->n_line; l++) {
      const Perftools__Profiles__Function *f =
          pprof_find_function(p, loc->line[l]->function_id);
      if (f && strcmp(pprof_str(p, f->name), name) == 0)
        return 1;
    }
  }
  return 0;
}
