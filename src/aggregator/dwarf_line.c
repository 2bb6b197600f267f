/* A DWARF line-number program reader (docs/symbols.md): the state machine
 * of DWARF 2-5 section 6.2 over one unit's program, rows kept as 16-byte
 * records in one array, stably sorted by address the way libdw sorts them,
 * file names left in the sections and joined to their directory on use. */
#include "aggregator/dwarf_line.h"
#include "aggregator/dwarf_cursor.h"

#include <stdlib.h>
#include <string.h>

/* The few constants used (dwarf.h's values; not included, so that the
 * reader builds without elfutils' headers). */
enum {
  LNS_copy = 1,
  LNS_advance_pc,
  LNS_advance_line,
  LNS_set_file,
  LNS_set_column,
  LNS_negate_stmt,
  LNS_set_basic_block,
  LNS_const_add_pc,
  LNS_fixed_advance_pc,
  LNS_set_prologue_end,
  LNS_set_epilogue_begin,
  LNS_set_isa,
};
enum { LNE_end_sequence = 1, LNE_set_address, LNE_define_file };
enum { LNCT_path = 1, LNCT_directory_index };
enum {
  FORM_data2 = 0x05,
  FORM_data4 = 0x06,
  FORM_data8 = 0x07,
  FORM_string = 0x08,
  FORM_block = 0x09,
  FORM_block1 = 0x0a,
  FORM_data1 = 0x0b,
  FORM_strp = 0x0e,
  FORM_udata = 0x0f,
  FORM_data16 = 0x1e,
  FORM_line_strp = 0x1f,
};

/* More files or directories than this in one unit: refused (real units
 * have hundreds; the array must stay bounded whatever the input says). */
#define MAX_ENTRIES (1u << 20)

/* The string at off in a string section, NULL unless terminated in it. */
static const char *section_str(const uint8_t *sec, size_t size, uint64_t off) {
  if (!sec || off >= size || !memchr(sec + off, 0, size - off))
    return NULL;
  return (const char *)sec + off;
}

/* Reads one entry-format value: a string for DW_LNCT_path, a number for
 * the directory index, skipped otherwise. -1 on a form not handled. */
static int read_form(dwc_cursor *c, const cp_dwline_sections *s, unsigned form,
                     unsigned offset_size, const char **str, uint64_t *num) {
  *str = NULL;
  *num = 0;
  switch (form) {
  case FORM_string:
    *str = dwc_cstr(c);
    return 0;
  case FORM_strp:
    *str = section_str(s->str, s->str_size, dwc_n(c, offset_size));
    return 0;
  case FORM_line_strp:
    *str = section_str(s->line_str, s->line_str_size, dwc_n(c, offset_size));
    return 0;
  case FORM_udata:
    *num = dwc_uleb(c);
    return 0;
  case FORM_data1:
    *num = dwc_n(c, 1);
    return 0;
  case FORM_data2:
    *num = dwc_n(c, 2);
    return 0;
  case FORM_data4:
    *num = dwc_n(c, 4);
    return 0;
  case FORM_data8:
    *num = dwc_n(c, 8);
    return 0;
  case FORM_data16:
    dwc_n(c, 8);
    dwc_n(c, 8);
    return 0;
  case FORM_block:
  case FORM_block1: {
    uint64_t len = form == FORM_block ? dwc_uleb(c) : dwc_n(c, 1);
    if (c->bad || len > (uint64_t)(c->end - c->p)) {
      c->bad = 1;
      return 0;
    }
    c->p += len;
    return 0;
  }
  default:
    return -1; /* strx, the supplementary file's strings, ...: libdw's */
  }
}

/* The bytes a table may still take, shared by its arrays. */
typedef struct limit {
  size_t left;
  int over; /* an array would have gone past it */
} limit;

typedef struct growing {
  void *items;
  size_t n, cap, size;
  limit *lim;
} growing;

static void *grow(growing *g) {
  if (g->n == g->cap) {
    size_t cap = g->cap ? g->cap * 2 : 64;
    if ((cap - g->cap) * g->size > g->lim->left) {
      g->lim->over = 1;
      return NULL;
    }
    g->lim->left -= (cap - g->cap) * g->size;
    void *p = realloc(g->items, cap * g->size);
    if (!p)
      return NULL;
    g->items = p;
    g->cap = cap;
  }
  return (char *)g->items + g->n++ * g->size;
}

/* Directory and file entries of a DWARF 5 header: entry formats, then the
 * entries. dirs is NULL when reading directories. */
static int read_v5_entries(dwc_cursor *c, const cp_dwline_sections *s,
                           unsigned offset_size, growing *out,
                           const growing *dirs) {
  unsigned nformats = (unsigned)dwc_n(c, 1);
  uint64_t desc[256], form[256];
  int path = -1, index = -1;
  for (unsigned i = 0; i < nformats; i++) {
    desc[i] = dwc_uleb(c);
    form[i] = dwc_uleb(c);
    if (desc[i] == LNCT_path)
      path = (int)i;
    else if (desc[i] == LNCT_directory_index)
      index = (int)i;
  }
  uint64_t n = dwc_uleb(c);
  if (c->bad || n > MAX_ENTRIES || (n && path < 0) ||
      (n && dirs && index < 0) ||
      (nformats && n > (uint64_t)(c->end - c->p) / nformats))
    return -1;
  for (uint64_t k = 0; k < n; k++) {
    const char *name = NULL;
    uint64_t dir = 0;
    for (unsigned i = 0; i < nformats; i++) {
      const char *str;
      uint64_t num;
      if (read_form(c, s, (unsigned)form[i], offset_size, &str, &num) != 0)
        return -1;
      if ((int)i == path)
        name = str;
      else if ((int)i == index)
        dir = num;
    }
    if (c->bad || !name)
      return -1;
    if (dirs) {
      if (dir >= dirs->n)
        return -1;
      cp_dwline_file *f = grow(out);
      if (!f)
        return -1;
      f->dir = ((const char *const *)dirs->items)[dir];
      f->name = name;
    } else {
      const char **d = grow(out);
      if (!d)
        return -1;
      *d = name;
    }
  }
  return 0;
}

/* A file entry of a header before DWARF 5, or of DW_LNE_define_file. */
static int add_v4_file(dwc_cursor *c, growing *files, const growing *dirs) {
  const char *name = dwc_cstr(c);
  uint64_t dir = dwc_uleb(c);
  dwc_uleb(c); /* modification time */
  dwc_uleb(c); /* length */
  if (c->bad || dir >= dirs->n || files->n >= MAX_ENTRIES)
    return -1;
  cp_dwline_file *f = grow(files);
  if (!f)
    return -1;
  f->dir = ((const char *const *)dirs->items)[dir];
  f->name = name;
  return 0;
}

/* libdw's order: by address; at one address, an end of sequence before
 * the rows that start there, otherwise as emitted. */
static int row_before(const cp_dwline_row *a, const cp_dwline_row *b) {
  if (a->addr != b->addr)
    return a->addr < b->addr;
  return (a->file & CP_DWLINE_END) && !(b->file & CP_DWLINE_END);
}

/* Stable natural merge sort of rows: compilers emit them mostly in order
 * (one sequence per text section of the unit), so the runs are few and
 * long, and a table already in order costs one pass. */
static int sort_rows(cp_dwline_row *rows, size_t n) {
  size_t nruns = 1;
  for (size_t i = 1; i < n; i++)
    nruns += row_before(&rows[i], &rows[i - 1]);
  if (nruns <= 1)
    return 0;
  /* Run starts, then n; rewritten in place as runs merge. */
  size_t *starts = malloc((nruns + 1) * sizeof *starts);
  cp_dwline_row *tmp = malloc(n * sizeof *tmp);
  if (!starts || !tmp) {
    free(starts);
    free(tmp);
    return -1;
  }
  size_t k = 0;
  starts[k++] = 0;
  for (size_t i = 1; i < n; i++)
    if (row_before(&rows[i], &rows[i - 1]))
      starts[k++] = i;
  starts[k] = n;
  cp_dwline_row *src = rows, *dst = tmp;
  while (nruns > 1) {
    size_t out = 0;
    for (size_t r = 0; r < nruns; r += 2) {
      size_t lo = starts[r], mid = starts[r + 1];
      size_t hi = r + 2 <= nruns ? starts[r + 2] : mid;
      size_t a = lo, b = mid, w = lo;
      while (a < mid && b < hi)
        dst[w++] = row_before(&src[b], &src[a]) ? src[b++] : src[a++];
      memcpy(dst + w, src + a, (mid - a) * sizeof *src);
      w += mid - a;
      memcpy(dst + w, src + b, (hi - b) * sizeof *src);
      starts[out++] = lo;
    }
    starts[out] = n;
    nruns = out;
    cp_dwline_row *t = src;
    src = dst;
    dst = t;
  }
  if (src != rows)
    memcpy(rows, src, n * sizeof *rows);
  free(starts);
  free(tmp);
  return 0;
}

int cp_dwline_read(const cp_dwline_sections *s, uint64_t offset,
                   const char *comp_dir, unsigned address_size,
                   size_t max_bytes, cp_dwline_table *t) {
  memset(t, 0, sizeof *t);
  limit lim = {max_bytes, 0};
  if (!s->line || offset >= s->line_size ||
      (address_size != 4 && address_size != 8))
    return -1;
  dwc_cursor c = {s->line + offset, s->line + s->line_size, 0};
  growing dirs = {NULL, 0, 0, sizeof(const char *), &lim};
  growing files = {NULL, 0, 0, sizeof(cp_dwline_file), &lim};
  growing rows = {NULL, 0, 0, sizeof(cp_dwline_row), &lim};

  unsigned offset_size = 4;
  uint64_t unit_length = dwc_n(&c, 4);
  if (unit_length == 0xffffffffu) {
    unit_length = dwc_n(&c, 8);
    offset_size = 8;
  }
  if (c.bad || unit_length > (uint64_t)(c.end - c.p))
    goto fail;
  c.end = c.p + unit_length;
  unsigned version = (unsigned)dwc_n(&c, 2);
  if (c.bad || version < 2 || version > 5)
    goto fail;
  if (version >= 5 &&
      (dwc_n(&c, 1) != address_size || dwc_n(&c, 1) != 0 /* segment */))
    goto fail;
  uint64_t header_length = dwc_n(&c, offset_size);
  if (c.bad || header_length > (uint64_t)(c.end - c.p))
    goto fail;
  const uint8_t *program = c.p + header_length;
  unsigned min_insn = (unsigned)dwc_n(&c, 1);
  unsigned max_ops = version >= 4 ? (unsigned)dwc_n(&c, 1) : 1;
  unsigned default_is_stmt = (unsigned)dwc_n(&c, 1);
  (void)default_is_stmt; /* rows of both kinds are kept, as libdw does */
  int line_base = (int8_t)dwc_n(&c, 1);
  unsigned line_range = (unsigned)dwc_n(&c, 1);
  unsigned opcode_base = (unsigned)dwc_n(&c, 1);
  if (c.bad || max_ops == 0 || opcode_base == 0 ||
      (size_t)(c.end - c.p) < opcode_base - 1)
    goto fail;
  const uint8_t *std_lengths = c.p - 1; /* [opcode], from 1 */
  c.p += opcode_base - 1;

  if (version < 5) {
    /* Directory 0 is the unit's, file 0 does not exist (libdw: "???"). */
    const char **d = grow(&dirs);
    cp_dwline_file *f = grow(&files);
    if (!d || !f)
      goto fail;
    *d = comp_dir;
    *f = (cp_dwline_file){NULL, "???"};
    while (!c.bad && c.p < c.end && *c.p) {
      const char *dir = dwc_cstr(&c);
      if (dirs.n >= MAX_ENTRIES || !(d = grow(&dirs)))
        goto fail;
      *d = dir;
    }
    dwc_n(&c, 1);
    while (!c.bad && c.p < c.end && *c.p)
      if (add_v4_file(&c, &files, &dirs) != 0)
        goto fail;
    dwc_n(&c, 1);
  } else {
    if (read_v5_entries(&c, s, offset_size, &dirs, NULL) != 0 ||
        read_v5_entries(&c, s, offset_size, &files, &dirs) != 0)
      goto fail;
    if (files.n == 0) {
      cp_dwline_file *f = grow(&files);
      if (!f)
        goto fail;
      *f = (cp_dwline_file){NULL, "???"};
    }
  }
  /* Vendor fields may follow the header (libdw allows CUBINs' 4 bytes). */
  if (c.bad || c.p > program)
    goto fail;
  c.p = program;

  /* line wraps as unsigned; a row's must be a non-negative int (libdw
   * keeps an int). */
  uint64_t addr = 0, file = 1, line = 1;
  unsigned op_index = 0;
  /* Most rows come from one-byte special opcodes: their line and
   * operation advances, computed once (no division per row). */
  int32_t special_line[256];
  uint32_t special_ops[256];
  for (unsigned op = opcode_base; line_range && op < 256; op++) {
    special_line[op] = line_base + (int)((op - opcode_base) % line_range);
    special_ops[op] = (op - opcode_base) / line_range;
  }
#define ADVANCE(adv)                                                           \
  do {                                                                         \
    if (max_ops == 1) {                                                        \
      addr += (uint64_t)min_insn * (adv);                                      \
    } else {                                                                   \
      uint64_t a_ = (uint64_t)op_index + (adv);                                \
      addr += (uint64_t)min_insn * (a_ / max_ops);                             \
      op_index = (unsigned)(a_ % max_ops);                                     \
    }                                                                          \
  } while (0)
  while (c.p < c.end) {
    unsigned op = *c.p++;
    int emit = 0, end = 0;
    if (op >= opcode_base) {
      if (line_range == 0)
        goto fail;
      line += (uint64_t)(int64_t)special_line[op];
      ADVANCE(special_ops[op]);
      emit = 1;
    } else if (op == 0) {
      uint64_t len = dwc_uleb(&c);
      if (c.bad || len == 0 || len > (uint64_t)(c.end - c.p))
        goto fail;
      const uint8_t *next = c.p + len;
      unsigned sub = *c.p++;
      dwc_cursor arg = {c.p, next, 0};
      if (sub == LNE_end_sequence) {
        emit = end = 1;
      } else if (sub == LNE_set_address) {
        if (len - 1 < address_size)
          goto fail;
        addr = dwc_n(&arg, address_size);
        op_index = 0;
      } else if (sub == LNE_define_file && version < 5) {
        if (add_v4_file(&arg, &files, &dirs) != 0)
          goto fail;
      }
      /* Others (discriminators, vendors') carry nothing we keep. */
      c.p = next;
    } else {
      switch (op) {
      case LNS_copy:
        emit = 1;
        break;
      case LNS_advance_pc:
        ADVANCE(dwc_uleb(&c));
        break;
      case LNS_advance_line:
        line += (uint64_t)dwc_sleb(&c);
        break;
      case LNS_set_file:
        file = dwc_uleb(&c);
        break;
      case LNS_const_add_pc:
        if (line_range == 0)
          goto fail;
        ADVANCE((255 - opcode_base) / line_range);
        break;
      case LNS_fixed_advance_pc:
        addr += dwc_n(&c, 2);
        op_index = 0;
        break;
      case LNS_negate_stmt:
      case LNS_set_basic_block:
      case LNS_set_prologue_end:
      case LNS_set_epilogue_begin:
        break;
      default: /* set_column, set_isa, and opcodes we do not know */
        for (unsigned k = std_lengths[op]; k > 0; k--)
          dwc_uleb(&c);
        break;
      }
    }
    if (c.bad)
      goto fail;
    if (emit) {
      if (line > INT32_MAX || file >= CP_DWLINE_END)
        goto fail;
      cp_dwline_row *r = rows.n < rows.cap
                             ? (cp_dwline_row *)rows.items + rows.n++
                             : grow(&rows);
      if (!r)
        goto fail;
      *r = (cp_dwline_row){addr, (uint32_t)line,
                           (uint32_t)file | (end ? CP_DWLINE_END : 0)};
      if (end) {
        addr = 0;
        op_index = 0;
        file = 1;
        line = 1;
      }
    }
  }
#undef ADVANCE
  if (sort_rows(rows.items, rows.n) != 0)
    goto fail;
  t->rows = rows.items;
  t->nrows = rows.n;
  /* As libdw: the highest address ends a sequence even if the compiler
   * forgot to say so. */
  if (t->nrows)
    t->rows[t->nrows - 1].file |= CP_DWLINE_END;
  t->files = files.items;
  t->nfiles = files.n;
  t->bytes = rows.cap * rows.size + files.cap * files.size;
  free(dirs.items);
  return 0;
fail:
  free(dirs.items);
  free(files.items);
  free(rows.items);
  return lim.over ? -2 : -1;
}

const cp_dwline_row *cp_dwline_find(const cp_dwline_table *t, uint64_t addr) {
  if (!t->nrows || t->rows[0].addr > addr)
    return NULL;
  size_t lo = 0, hi = t->nrows - 1;
  while (lo < hi) {
    size_t mid = hi - (hi - lo) / 2;
    if (addr < t->rows[mid].addr)
      hi = mid - 1;
    else
      lo = mid;
  }
  const cp_dwline_row *r = &t->rows[lo];
  return r->file & CP_DWLINE_END ? NULL : r;
}

int cp_dwline_file_name(const cp_dwline_table *t, uint64_t i, char *out,
                        size_t size) {
  if (!size)
    return -1;
  out[0] = '\0';
  if (i >= t->nfiles)
    return -1;
  const cp_dwline_file *f = &t->files[i];
  size_t used = 0;
  if (f->name[0] != '/' && f->dir) {
    size_t n = strlen(f->dir);
    if (n > size - 1)
      n = size - 1;
    memcpy(out, f->dir, n);
    used = n;
    if (used < size - 1)
      out[used++] = '/';
  }
  size_t n = strlen(f->name);
  if (n > size - 1 - used)
    n = size - 1 - used;
  memcpy(out + used, f->name, n);
  out[used + n] = '\0';
  return 0;
}

void cp_dwline_free(cp_dwline_table *t) {
  free(t->rows);
  free(t->files);
  memset(t, 0, sizeof *t);
}
