/* Naming a few addresses without a symbol table (symbol_scan.h). */
#include "aggregator/symbol_scan.h"

#include <stdlib.h>
#include <string.h>

/* Bytes of a name compared or copied per read. */
#define NAME_CHUNK 128

/* The best symbol at one address so far (the table's dedupe). */
typedef struct pick {
  const cp_elf_symbols *t; /* NULL: none yet */
  uint64_t size, bound;
  uint64_t name; /* offset in t's string table */
  int rank;
  int ambiguous; /* tied with another of other size or bound */
} pick;

/* What the addresses' nearest symbols (and their successors) need. */
typedef struct scan_state {
  const uint64_t *addrs;
  size_t n;
  /* Gaps: gap j holds the symbols in (addrs[j - 1], addrs[j]], the last one
   * those above addrs[n - 1]; their highest and lowest address. */
  uint64_t *gap_max, *gap_min;
  unsigned char *gap_has;
  /* The distinct nearest-symbol addresses (near) and successors (next), in
   * ascending order, and what the second pass finds about each. */
  uint64_t *near, *next;
  size_t nnear, nnext;
  pick *win;
  unsigned char *spanned; /* a sized symbol spans near[k] */
  unsigned char *next_named;
  cp_elf_sym *chunk;
} scan_state;

/* Up to len bytes of the name at off in t's string table into buf, NUL
 * past the table's end (where the table ends its last name). 0 or -1. */
static int name_chunk(const cp_elf_symbols *t, uint64_t off, char *buf,
                      size_t len) {
  memset(buf, 0, len);
  if (off >= t->str_size)
    return 0;
  uint64_t avail = t->str_size - off;
  return cp_elf_read(t->r, t->str_offset + off, avail < len ? avail : len, buf);
}

/* strcmp of two names in string tables: <0, 0, >0; *err set on a failed
 * read. */
static int name_cmp(const cp_elf_symbols *ta, uint64_t a,
                    const cp_elf_symbols *tb, uint64_t b, int *err) {
  char x[NAME_CHUNK], y[NAME_CHUNK];
  for (;;) {
    if (name_chunk(ta, a, x, sizeof x) != 0 ||
        name_chunk(tb, b, y, sizeof y) != 0) {
      *err = 1;
      return 0;
    }
    for (size_t i = 0; i < NAME_CHUNK; i++) {
      if (x[i] != y[i])
        return (unsigned char)x[i] < (unsigned char)y[i] ? -1 : 1;
      if (x[i] == '\0')
        return 0;
    }
    a += NAME_CHUNK;
    b += NAME_CHUNK;
  }
}

/* A malloc'd copy of the name at off, or NULL (a failed read, no memory). */
static char *name_copy(const cp_elf_symbols *t, uint64_t off) {
  size_t len = 0, cap = 0;
  char *s = NULL;
  for (;;) {
    if (len + NAME_CHUNK + 1 > cap) {
      cap = cap ? cap * 2 : NAME_CHUNK * 2;
      char *grown = realloc(s, cap);
      if (!grown)
        break;
      s = grown;
    }
    if (name_chunk(t, off + len, s + len, NAME_CHUNK) != 0)
      break;
    size_t got = strnlen(s + len, NAME_CHUNK);
    len += got;
    if (got < NAME_CHUNK) {
      s[len] = '\0';
      return s;
    }
  }
  free(s);
  return NULL;
}

/* The first index of v[0..n) (ascending) whose value is >= x. */
static size_t lower_bound(const uint64_t *v, size_t n, uint64_t x) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (v[mid] < x)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* Calls each(st, t, sym) for every function symbol of t; 0, or -1 when a
 * read failed or each did. */
static int each_function(scan_state *st, const cp_elf_symbols *t,
                         int (*each)(scan_state *, const cp_elf_symbols *,
                                     const cp_elf_sym *)) {
  for (uint64_t done = 0; done < t->count; done += CP_ELF_SYMS_PER_READ) {
    uint64_t k = t->count - done < CP_ELF_SYMS_PER_READ ? t->count - done
                                                        : CP_ELF_SYMS_PER_READ;
    if (cp_elf_read(t->r, t->symtab->sh_offset + done * sizeof(cp_elf_sym),
                    k * sizeof(cp_elf_sym), st->chunk) != 0)
      return -1;
    for (uint64_t i = 0; i < k; i++)
      if (cp_elf_is_function(t, &st->chunk[i]) &&
          each(st, t, &st->chunk[i]) != 0)
        return -1;
  }
  return 0;
}

/* First pass: the highest and lowest symbol address in each gap. */
static int note_gap(scan_state *st, const cp_elf_symbols *t,
                    const cp_elf_sym *s) {
  (void)t;
  uint64_t x = s->st_value;
  size_t j = lower_bound(st->addrs, st->n, x);
  if (!st->gap_has[j] || x > st->gap_max[j])
    st->gap_max[j] = x;
  if (!st->gap_has[j] || x < st->gap_min[j])
    st->gap_min[j] = x;
  st->gap_has[j] = 1;
  return 0;
}

/* Second pass: the best symbol at each nearest address, whether a sized
 * symbol spans one, whether a successor has a name. */
static int note_candidate(scan_state *st, const cp_elf_symbols *t,
                          const cp_elf_sym *s) {
  uint64_t x = s->st_value;
  size_t k = lower_bound(st->near, st->nnear, x);
  if (s->st_size > 0) {
    uint64_t end = x + s->st_size < x ? UINT64_MAX : x + s->st_size;
    for (size_t i = k; i < st->nnear && st->near[i] < end; i++)
      if (st->near[i] > x)
        st->spanned[i] = 1;
  }
  size_t u = lower_bound(st->next, st->nnext, x);
  int at_near = k < st->nnear && st->near[k] == x;
  int at_next = u < st->nnext && st->next[u] == x && !st->next_named[u];
  if (!at_near && !at_next)
    return 0;
  char head[8];
  if (name_chunk(t, s->st_name, head, sizeof head) != 0)
    return -1;
  if (head[0] == '\0')
    return 0; /* no name: not in the table */
  if (at_next)
    st->next_named[u] = 1;
  if (!at_near)
    return 0;
  pick *w = &st->win[k];
  pick p = {.t = t,
            .size = s->st_size,
            .bound = cp_elf_symbol_bound(t->r, s),
            .name = s->st_name,
            .rank = cp_elf_symbol_rank(s, head)};
  if (!w->t || p.rank > w->rank) {
    *w = p;
    return 0;
  }
  if (p.rank < w->rank)
    return 0;
  int err = 0;
  int c = name_cmp(t, p.name, w->t, w->name, &err);
  if (err)
    return -1;
  if (c < 0) {
    *w = p;
  } else if (c == 0 && (p.size != w->size || p.bound != w->bound)) {
    w->ambiguous = 1; /* the table's sort may keep either */
  }
  return 0;
}

/* The answer for address a, whose nearest symbol is near[k] and successor
 * next[u] (SIZE_MAX: none). */
static int answer(const scan_state *st, uint64_t a, size_t k, size_t u,
                  cp_scan_answer *out) {
  *out = (cp_scan_answer){.known = 0};
  if (u != SIZE_MAX && !st->next_named[u])
    return 0; /* the table's next symbol is further: not worth a pass */
  int has_next = u != SIZE_MAX;
  uint64_t next = has_next ? st->next[u] : 0;
  uint64_t hi = has_next ? next : UINT64_MAX; /* the answer holds up to it */
  if (k == SIZE_MAX) {                        /* nothing at or below a */
    *out = (cp_scan_answer){.known = 1, .lo = 0, .hi = hi};
    return 0;
  }
  const pick *w = &st->win[k];
  uint64_t s0 = st->near[k];
  if (!w->t || w->ambiguous)
    return 0;
  uint64_t end;
  if (w->size > 0) {
    end = s0 + w->size < s0 ? UINT64_MAX : s0 + w->size;
  } else {
    /* As the table: up to its section's end or the next symbol. A sized
     * symbol spanning it drops it (see below). */
    end = w->bound > s0 ? w->bound : 0;
    if (has_next && (end == 0 || next < end))
      end = next;
  }
  uint64_t covered = end > s0 ? end - s0 : 0;
  if (covered > UINT32_MAX)
    covered = UINT32_MAX; /* the table's entries hold 32-bit sizes */
  int names_a = a - s0 < covered && (w->size > 0 || !st->spanned[k]);
  if (names_a) {
    char *name = name_copy(w->t, w->name);
    if (!name)
      return -1;
    uint64_t top = s0 + covered;
    *out = (cp_scan_answer){.known = 1,
                            .lo = s0,
                            .hi = top < hi ? top : hi,
                            .start = s0,
                            .name = name};
    return 0;
  }
  /* The nearest symbol does not name a: the table looks at the ones before
   * it, where only a sized one spanning s0 could cover a. */
  if (st->spanned[k])
    return 0;
  *out = (cp_scan_answer){.known = 1, .lo = s0 + covered, .hi = hi};
  return 0;
}

static void state_free(scan_state *st) {
  free(st->gap_max);
  free(st->gap_min);
  free(st->gap_has);
  free(st->near);
  free(st->next);
  free(st->win);
  free(st->spanned);
  free(st->next_named);
  free(st->chunk);
}

int cp_scan_names(const cp_elf_symbols *secs, size_t nsecs,
                  const uint64_t *addrs, size_t n, cp_scan_answer *out) {
  if (n == 0)
    return 0;
  if (n > CP_SCAN_MAX)
    return -1;
  scan_state st = {.addrs = addrs, .n = n};
  st.gap_max = malloc((n + 1) * sizeof *st.gap_max);
  st.gap_min = malloc((n + 1) * sizeof *st.gap_min);
  st.gap_has = calloc(n + 1, 1);
  st.near = malloc(n * sizeof *st.near);
  st.next = malloc(n * sizeof *st.next);
  st.win = calloc(n, sizeof *st.win);
  st.spanned = calloc(n, 1);
  st.next_named = calloc(n, 1);
  st.chunk = malloc(CP_ELF_SYMS_PER_READ * sizeof *st.chunk);
  int rc = -1;
  if (!st.gap_max || !st.gap_min || !st.gap_has || !st.near || !st.next ||
      !st.win || !st.spanned || !st.next_named || !st.chunk)
    goto done;
  for (size_t i = 0; i < nsecs; i++)
    if (each_function(&st, &secs[i], note_gap) != 0)
      goto done;

  /* Each address's nearest symbol: the highest of the last gap at or below
   * it that has one; its successor: the lowest of the first gap above.
   * near_of and next_of index near and next, SIZE_MAX for none. */
  size_t *near_of = malloc(n * sizeof *near_of);
  size_t *next_of = malloc(n * sizeof *next_of);
  if (!near_of || !next_of) {
    free(near_of);
    free(next_of);
    goto done;
  }
  for (size_t i = 0; i < n; i++) {
    if (st.gap_has[i] &&
        (st.nnear == 0 || st.near[st.nnear - 1] != st.gap_max[i]))
      st.near[st.nnear++] = st.gap_max[i];
    near_of[i] = st.nnear ? st.nnear - 1 : SIZE_MAX;
  }
  for (size_t i = n, seen = 0; i-- > 0;) {
    if (st.gap_has[i + 1]) {
      st.next[n - 1 - seen] = st.gap_min[i + 1];
      seen++;
    }
    next_of[i] = seen ? n - seen : SIZE_MAX;
  }
  /* next was filled from its end: move it to the front. */
  size_t first = n;
  for (size_t i = 0; i < n; i++)
    if (next_of[i] != SIZE_MAX && next_of[i] < first)
      first = next_of[i];
  st.nnext = first < n ? n - first : 0;
  memmove(st.next, st.next + (first < n ? first : 0),
          st.nnext * sizeof *st.next);
  for (size_t i = 0; i < n; i++)
    if (next_of[i] != SIZE_MAX)
      next_of[i] -= first;

  int failed = 0;
  for (size_t i = 0; i < nsecs && !failed; i++)
    failed = each_function(&st, &secs[i], note_candidate) != 0;
  for (size_t i = 0; i < n && !failed; i++)
    failed = answer(&st, addrs[i], near_of[i], next_of[i], &out[i]);
  free(near_of);
  free(next_of);
  if (failed) {
    for (size_t i = 0; i < n; i++)
      free(out[i].name);
    goto done;
  }
  rc = 0;
done:
  state_free(&st);
  return rc;
}
