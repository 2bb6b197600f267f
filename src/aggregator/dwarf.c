/* DWARF line and inline-chain lookup with elfutils' libdw (docs/symbols.md):
 * objects opened with libelf's pread mode (no mmap: a file truncated on disk
 * cannot raise SIGBUS here), debug information found in the object, its
 * .gnu_debuglink file or the build-id tree and checked against the build
 * id, per-CU address ranges, a per-(module, address) cache, one budget. */
#include "aggregator/dwarf.h"
#include "aggregator/dwarf_cursor.h"

#include <dlfcn.h>
#include <dwarf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aggregator/dw_lib.h"
#include "aggregator/dwarf_line.h"
#include "aggregator/symbols.h"
#include "common.h"
#include "own_fd.h"

#define DEFAULT_DEBUG_ROOT "/usr/lib/debug"
#define MAX_BUILD_ID_HEX 129
/* How many earlier CU ranges a lookup inspects for one that holds the
 * address (ranges of different CUs may nest, e.g. with LTO). */
#define RANGE_LOOKBACK 16
/* libdw's cost per parsed line-table row and per CU (struct sizes of
 * elfutils 0.188 rounded up), counted as estimates (docs/symbols.md). */
#define LINE_ROW_BYTES 48
#define CU_BYTES 512
/* The most modules remembered (open or not): a process maps far fewer. */
#define MAX_MODULES 4096
/* The most modules open at once (their images and parsed tables). */
#define MAX_OPEN_MODULES 32
/* Zero bytes after a module's image (see module.image). */
#define IMAGE_PAD ((size_t)64 << 10)

/* The out-of-line functions of one compile unit, indexed when an address
 * first falls in it: lookups then descend from the function alone instead
 * of walking the CU (dwarf_getscopes is linear in the CU's DIEs). */
/* [lo, hi): the first member of fn_range and cu_range, so that one
 * comparator sorts and one search finds either. */
typedef struct addr_span {
  uint64_t lo, hi;
} addr_span;

typedef struct fn_range {
  addr_span span;
  Dwarf_Off die; /* the DW_TAG_subprogram */
} fn_range;

typedef struct cu_info {
  Dwarf_Off off; /* offset of the CU's DIE */
  int counted;   /* libdw's line table is in the module's bytes */
  int indexed;   /* fns built */
  /* Our reading of its line table (dwarf_line.c): 0 not yet, 1 lines,
   * -1 refused (libdw's dwarf_getsrc_die and file table then), -2 over
   * the cap (no lines in this unit: libdw's would take more). */
  int own_lines;
  cp_dwline_table lines;
  fn_range *fns; /* sorted by lo */
  size_t nfns;
} cu_info;

typedef struct cu_range {
  addr_span span;
  size_t cu; /* index in the module's cus */
} cu_range;

/* One cached chain, serialised: frames then their strings. */
typedef struct cache_entry {
  struct cache_entry *next; /* in its hash bucket */
  uint64_t addr;
  uint32_t n, bytes;
  struct {
    uint32_t function, system_name, file, decl_file;
    int64_t line, start_line;
  } f[];
  /* strings follow the n frames */
} cache_entry;

typedef struct module {
  struct module *next;
  char *path;
  uint64_t dev, ino;
  char build_id[MAX_BUILD_ID_HEX];
  int opened;  /* an attempt was made; dw NULL: no DWARF */
  int refused; /* identity mismatch or over the cap: never DWARF */
  /* Its reading was put off by the read gate (cp_dwarf_set_read_gate),
   * estimated at deferred_ns; asked again, at a lookup, once
   * DEFER_RETRY_NS have passed since deferred_at (monotonic). Said once. */
  int deferred, deferral_said;
  uint64_t deferred_ns, deferred_at;
  cp_own_fd file, debug_file; /* debug_file.fd -1: the object has its own */
  Elf *elf, *debug_elf;
  /* The file libdw reads, copied whole into memory with IMAGE_PAD zero
   * bytes after it, and its Elf: libdw 0.188 reads past the end of a
   * corrupt section (strlen in its line-table reader); with the image, such
   * reads stay in our buffer and stop at a zero. No descriptor stays open. */
  unsigned char *image;
  size_t image_bytes;
  Elf *image_elf;
  Dwarf *dw;
  /* dwz's supplementary file (.gnu_debugaltlink), read the same way and
   * handed to libdw with dwarf_setalt: names and inlined functions that
   * several objects share live there. NULL without one. */
  unsigned char *alt_image;
  Elf *alt_elf;
  Dwarf *alt_dw;
  /* The sections dwarf_line.c reads (in image_elf, decompressed by
   * dwarf_begin_elf); line NULL: libdw reads every line table. */
  cp_dwline_sections secs;
  cu_range *ranges;
  size_t nranges;
  cu_info *cus;
  size_t ncus;
  size_t open_bytes; /* sections, line tables, ranges: freed on close */
  cache_entry **buckets;
  size_t nbuckets, nentries;
  size_t cache_bytes;
  uint64_t tick;
} module;

static pthread_mutex_t dwarf_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t dwarf_lock_pid;

static struct {
  module *modules;
  size_t nmodules;
  size_t budget, used;
  uint64_t tick;
  cp_dwarf_read_gate gate; /* NULL: every module is read */
  uint64_t spent_ns;       /* CPU this process spent opening modules */
  uint64_t deferred;       /* lookups left without lines by the gate */
  char root[PATH_MAX];
  char debug_path[PATH_MAX]; /* the debug file module_open found */
} st = {.budget = CP_DWARF_DEFAULT_BUDGET, .root = DEFAULT_DEBUG_ROOT};

/* ---- Opening ------------------------------------------------------------- */

static void build_id_hex(Elf *elf, char *out) {
  const void *id = NULL;
  ssize_t n = cp_dw.dwelf_elf_gnu_build_id(elf, &id);
  out[0] = '\0';
  if (n <= 0 || n > (MAX_BUILD_ID_HEX - 1) / 2)
    return;
  for (ssize_t i = 0; i < n; i++)
    snprintf(out + 2 * i, 3, "%02x", ((const unsigned char *)id)[i]);
}

/* The inflated size a compressed section's header gives, read from fd
 * (the file elf was opened on): gelf_getchdr would have libelf read the
 * whole section first (ELF_C_READ), which for libc6-dbg's libc was 3.7 MB
 * read twice, a tenth of a first export's cost. 0 if unreadable. */
static uint64_t chdr_size(Elf *elf, int fd, const GElf_Shdr *sh) {
  if (cp_dw.gelf_getclass(elf) == ELFCLASS64) {
    Elf64_Chdr ch;
    if (sh->sh_size >= sizeof ch &&
        pread(fd, &ch, sizeof ch, (off_t)sh->sh_offset) == (ssize_t)sizeof ch)
      return ch.ch_size;
  } else {
    Elf32_Chdr ch;
    if (sh->sh_size >= sizeof ch &&
        pread(fd, &ch, sizeof ch, (off_t)sh->sh_offset) == (ssize_t)sizeof ch)
      return ch.ch_size;
  }
  return 0;
}

/* Bytes libdw reads when it opens elf's debug information (elf opened on
 * fd): every .debug_* section (decompressed size for compressed ones); 0
 * when it has no .debug_info. */
static uint64_t debug_bytes_inflated(Elf *elf, int fd, uint64_t *inflated) {
  size_t shstrndx;
  *inflated = 0;
  if (cp_dw.elf_getshdrstrndx(elf, &shstrndx) != 0)
    return 0;
  uint64_t total = 0;
  int has_info = 0;
  for (Elf_Scn *scn = cp_dw.elf_nextscn(elf, NULL); scn;
       scn = cp_dw.elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (!cp_dw.gelf_getshdr(scn, &sh) || sh.sh_type == SHT_NOBITS)
      continue;
    const char *name = cp_dw.elf_strptr(elf, shstrndx, sh.sh_name);
    if (!name ||
        (strncmp(name, ".debug_", 7) != 0 && strncmp(name, ".zdebug_", 8) != 0))
      continue;
    if (strcmp(name, ".debug_info") == 0 || strcmp(name, ".zdebug_info") == 0)
      has_info = 1;
    /* A compressed section is held twice: as read and decompressed. */
    uint64_t size = sh.sh_size;
    if (sh.sh_flags & SHF_COMPRESSED)
      *inflated += chdr_size(elf, fd, &sh);
    else if (name[1] == 'z')
      *inflated += size * 8; /* .zdebug: known only once inflated */
    total += size;
  }
  if (!has_info)
    *inflated = 0;
  return has_info ? total + *inflated : 0;
}

static uint64_t debug_bytes(Elf *elf, int fd) {
  uint64_t inflated;
  return debug_bytes_inflated(elf, fd, &inflated);
}

/* A candidate debug file: open, matching the build id, with .debug_info.
 * Sets *existed when the file was there at all. */
static int try_debug_file(module *m, const char *path, int *existed) {
  struct stat sb;
  cp_own_fd own;
  int fd = cp_own_open_regular(&own, path, &sb);
  if (fd < 0)
    return -1;
  *existed = 1;
  Elf *elf = cp_dw.elf_begin(fd, ELF_C_READ, NULL);
  if (elf && cp_dw.elf_kind(elf) == ELF_K_ELF) {
    char id[MAX_BUILD_ID_HEX];
    build_id_hex(elf, id);
    if ((m->build_id[0] == '\0' || strcmp(id, m->build_id) == 0) &&
        debug_bytes(elf, fd) > 0) {
      m->debug_file = own;
      m->debug_elf = elf;
      snprintf(st.debug_path, sizeof st.debug_path, "%s", path);
      cp_debug("symbols: debug information of %s from %s", m->path, path);
      return 0;
    }
  }
  if (elf)
    cp_dw.elf_end(elf);
  cp_own_close(&own);
  return -1;
}

/* .gnu_debuglink next to the object, in .debug/ beside it and under the
 * root; then the build-id tree. */
static int find_debug_file(module *m, int *existed) {
  char cand[PATH_MAX];
  GElf_Word crc;
  const char *link = cp_dw.dwelf_elf_gnu_debuglink(m->elf, &crc);
  if (link && link[0] && !strchr(link, '/')) {
    const char *slash = strrchr(m->path, '/');
    int dir_len = slash ? (int)(slash - m->path) : 0;
    const char *forms[] = {"%s%.*s/%s", "%s%.*s/.debug/%s", "%s%.*s/%s"};
    for (size_t i = 0; i < CP_ARRAY_SIZE(forms); i++) {
      int n = snprintf(cand, sizeof cand, forms[i], i == 2 ? st.root : "",
                       dir_len, m->path, link);
      if (n > 0 && (size_t)n < sizeof cand && strcmp(cand, m->path) != 0 &&
          try_debug_file(m, cand, existed) == 0)
        return 0;
    }
  }
  if (strlen(m->build_id) > 2) {
    int n = snprintf(cand, sizeof cand, "%s/.build-id/%.2s/%s.debug", st.root,
                     m->build_id, m->build_id + 2);
    if (n > 0 && (size_t)n < sizeof cand &&
        try_debug_file(m, cand, existed) == 0)
      return 0;
  }
  return -1;
}

/* qsort's order for arrays of structs that start with an addr_span. */
static int span_cmp(const void *pa, const void *pb) {
  const addr_span *a = pa, *b = pb;
  return a->lo < b->lo ? -1 : a->lo > b->lo;
}

static const uint8_t *section_data(Elf *elf, size_t shstrndx, const char *name,
                                   size_t *size);

/* One .debug_aranges entry: [lo, hi) is code of the unit whose header is
 * at offset unit of .debug_info. */
typedef struct arange {
  uint64_t unit, lo, hi;
} arange;

static int arange_cmp(const void *pa, const void *pb) {
  const arange *a = pa, *b = pb;
  if (a->unit != b->unit)
    return a->unit < b->unit ? -1 : 1;
  return a->lo < b->lo ? -1 : a->lo > b->lo;
}

/* Reads .debug_aranges (p, size bytes: little-endian, 32- or 64-bit DWARF,
 * version 2 as in DWARF 2 to 5, 8-byte addresses, no segments) into *out,
 * sorted by unit. Returns the entries' count, 0 with none; -1 when a set
 * is malformed or of another kind: then the section is not used at all.
 * Bounded by size. */
static ptrdiff_t read_aranges(const uint8_t *p, size_t size, arange **out) {
  *out = NULL;
  if (!p || size == 0)
    return 0;
  arange *a = malloc((size / 16 + 1) * sizeof *a);
  if (!a)
    return -1;
  size_t n = 0;
  dwc_cursor c = {p, p + size, 0};
  while (dwc_left(&c)) {
    const uint8_t *set = c.p;
    unsigned offset_bytes = 4;
    uint64_t len = dwc_n(&c, 4);
    if (len == 0xffffffffu) {
      len = dwc_n(&c, 8);
      offset_bytes = 8;
    } else if (len >= 0xfffffff0u) {
      goto bad;
    }
    if (c.bad || len > dwc_left(&c) || len < 2 + offset_bytes + 2)
      goto bad;
    dwc_cursor t = {c.p, c.p + len, 0};
    c.p += len;
    uint64_t version = dwc_n(&t, 2);
    uint64_t unit = dwc_n(&t, offset_bytes);
    uint64_t address_size = dwc_n(&t, 1), segment_size = dwc_n(&t, 1);
    if (version != 2 || address_size != 8 || segment_size != 0)
      goto bad;
    /* The tuples start at the set's first multiple of twice the address
     * size; a set too short for that padding has none. */
    size_t header = (size_t)(t.p - set);
    dwc_skip(&t, (16 - header % 16) % 16);
    while (dwc_left(&t) >= 16) {
      uint64_t lo = dwc_n(&t, 8), length = dwc_n(&t, 8);
      if (lo == 0 && length == 0)
        break;
      if (length && lo + length > lo)
        a[n++] = (arange){unit, lo, lo + length};
    }
  }
  qsort(a, n, sizeof *a, arange_cmp);
  *out = a;
  return (ptrdiff_t)n;
bad:
  free(a);
  return -1;
}

/* The first of n aranges (sorted by unit) of unit, or NULL. */
static const arange *aranges_of(const arange *a, size_t n, uint64_t unit) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (a[mid].unit < unit)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < n && a[lo].unit == unit ? &a[lo] : NULL;
}

typedef struct range_builder {
  module *m;
  size_t cap, cus_cap;
  int have_cu; /* the unit being read has its cu_info */
} range_builder;

/* Adds [lo, hi) to the unit whose root DIE is at die_off (its cu_info
 * made at its first range). 0, or -1 out of memory. */
static int add_range(range_builder *b, Dwarf_Off die_off, uint64_t lo,
                     uint64_t hi) {
  module *m = b->m;
  if (!b->have_cu) {
    cu_info *cus = cp_grow_array(m->cus, &b->cus_cap, m->ncus + 1, sizeof *cus);
    if (!cus)
      return -1;
    m->cus = cus;
    m->cus[m->ncus++] = (cu_info){.off = die_off};
    b->have_cu = 1;
  }
  cu_range *ranges =
      cp_grow_array(m->ranges, &b->cap, m->nranges + 1, sizeof *ranges);
  if (!ranges)
    return -1;
  m->ranges = ranges;
  m->ranges[m->nranges++] = (cu_range){{lo, hi}, m->ncus - 1};
  return 0;
}

/* Every compile unit's address ranges, sorted. A unit that .debug_aranges
 * lists takes its ranges from there; any other (clang emits no
 * .debug_aranges; a unit of hand-written assembly may be missing from it)
 * from its root DIE, whose attributes cost libdw the decoding of the unit's
 * abbreviations: for libc6-dbg's libc, 4,126 units, a quarter of a
 * process's first export (docs/symbols.md). */
static int build_ranges(module *m) {
  range_builder b = {.m = m};
  arange *ar = NULL;
  size_t shstrndx, ar_size = 0;
  GElf_Ehdr eh;
  const uint8_t *ar_sec =
      cp_dw.gelf_getehdr(m->image_elf, &eh) &&
              eh.e_ident[EI_DATA] == ELFDATA2LSB &&
              cp_dw.elf_getshdrstrndx(m->image_elf, &shstrndx) == 0
          ? section_data(m->image_elf, shstrndx, ".debug_aranges", &ar_size)
          : NULL;
  ptrdiff_t nar = read_aranges(ar_sec, ar_size, &ar);
  if (nar < 0)
    nar = 0; /* malformed: every unit from its DIE */
  int rc = 0;
  size_t listed = 0, by_die = 0;
  Dwarf_CU *cu = NULL;
  Dwarf_Die cudie;
  uint8_t unit_type;
  while (rc == 0 && cp_dw.dwarf_get_units(m->dw, cu, &cu, NULL, &unit_type,
                                          &cudie, NULL) == 0) {
    if (unit_type != DW_UT_compile && unit_type != DW_UT_partial)
      continue;
    b.have_cu = 0;
    Dwarf_Off die_off = cp_dw.dwarf_dieoffset(&cudie);
    const arange *a =
        aranges_of(ar, (size_t)nar, die_off - cp_dw.dwarf_cuoffset(&cudie));
    if (a) {
      for (const arange *e = a; rc == 0 && e < ar + nar && e->unit == a->unit;
           e++)
        rc = add_range(&b, die_off, e->lo, e->hi);
      listed++;
      continue;
    }
    by_die++;
    Dwarf_Addr base, lo, hi;
    ptrdiff_t off = 0;
    while (rc == 0 &&
           (off = cp_dw.dwarf_ranges(&cudie, off, &base, &lo, &hi)) > 0)
      if (hi > lo)
        rc = add_range(&b, die_off, lo, hi);
  }
  free(ar);
  cp_debug("symbols: %s: %zu units found in .debug_aranges, %zu by their DIE",
           m->path, listed, by_die);
  if (rc == 0 && m->nranges)
    qsort(m->ranges, m->nranges, sizeof *m->ranges, span_cmp);
  return rc;
}

/* Adds the address ranges of the subprograms among die's children (and in
 * namespaces, to a bounded depth) to c. */
static int index_children(cu_info *c, size_t *cap, Dwarf_Die *parent,
                          int depth) {
  Dwarf_Die child;
  if (depth > 8 || cp_dw.dwarf_child(parent, &child) != 0)
    return 0;
  do {
    int tag = cp_dw.dwarf_tag(&child);
    if (tag == DW_TAG_namespace || tag == DW_TAG_module) {
      if (index_children(c, cap, &child, depth + 1) != 0)
        return -1;
      continue;
    }
    /* Declarations and inlined functions' abstract instances have no
     * code: the abbreviation says so without reading the DIE. */
    if (tag != DW_TAG_subprogram ||
        (!cp_dw.dwarf_hasattr(&child, DW_AT_low_pc) &&
         !cp_dw.dwarf_hasattr(&child, DW_AT_ranges)))
      continue;
    Dwarf_Addr base, lo, hi;
    ptrdiff_t off = 0;
    while ((off = cp_dw.dwarf_ranges(&child, off, &base, &lo, &hi)) > 0) {
      if (hi <= lo)
        continue;
      fn_range *fns = cp_grow_array(c->fns, cap, c->nfns + 1, sizeof *fns);
      if (!fns)
        return -1;
      c->fns = fns;
      c->fns[c->nfns++] = (fn_range){{lo, hi}, cp_dw.dwarf_dieoffset(&child)};
    }
  } while (cp_dw.dwarf_siblingof(&child, &child) == 0);
  return 0;
}

static void index_cu(module *m, cu_info *c, Dwarf_Die *cudie) {
  c->indexed = 1;
  size_t cap = 0;
  if (index_children(c, &cap, cudie, 0) != 0) {
    free(c->fns);
    c->fns = NULL;
    c->nfns = 0;
    return;
  }
  if (c->nfns)
    qsort(c->fns, c->nfns, sizeof *c->fns, span_cmp);
  size_t more = cap * sizeof *c->fns;
  m->open_bytes += more;
  st.used += more;
}

/* Images are mapped, not malloc'ed: in huge pages where the kernel has them
 * (madvise mode), since a first export writes some 12 MB of them (libc6-dbg's
 * libc) and a fault per 4 KiB page cost this VM more than the inflating. The
 * mapping's size is kept in the 64 bytes before the image. Under
 * AddressSanitizer they come from calloc, so that a read past the padding
 * (test_dwarf's mutated files, the fuzzer) is still reported. */
#if defined(__SANITIZE_ADDRESS__)
#define CP_IMAGE_CALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CP_IMAGE_CALLOC 1
#endif
#endif

static unsigned char *image_alloc(size_t bytes) {
#ifdef CP_IMAGE_CALLOC
  return calloc(1, bytes);
#else
  size_t total = bytes + 64;
  unsigned char *p = mmap(NULL, total, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return NULL;
#ifdef MADV_HUGEPAGE
  if (total >= ((size_t)2 << 20))
    madvise(p, total, MADV_HUGEPAGE);
#endif
  memcpy(p, &total, sizeof total);
  return p + 64;
#endif
}

static void image_free(unsigned char *image) {
#ifdef CP_IMAGE_CALLOC
  free(image);
#else
  if (!image)
    return;
  size_t total;
  memcpy(&total, image - 64, sizeof total);
  munmap(image - 64, total);
#endif
}

/* Drops the descriptors and reading-mode Elfs used to find the debug
 * information (the image is what libdw reads). */
static void module_release_files(module *m) {
  if (m->debug_elf)
    cp_dw.elf_end(m->debug_elf);
  if (m->elf)
    cp_dw.elf_end(m->elf);
  cp_own_close(&m->debug_file);
  cp_own_close(&m->file);
  m->elf = m->debug_elf = NULL;
}

static void module_close(module *m) {
  if (m->dw)
    cp_dw.dwarf_end(m->dw); /* leaves an alt set with dwarf_setalt to us */
  if (m->alt_dw)
    cp_dw.dwarf_end(m->alt_dw);
  if (m->alt_elf)
    cp_dw.elf_end(m->alt_elf);
  image_free(m->alt_image);
  m->alt_image = NULL;
  m->alt_elf = NULL;
  m->alt_dw = NULL;
  if (m->image_elf)
    cp_dw.elf_end(m->image_elf);
  image_free(m->image);
  m->image = NULL;
  m->image_elf = NULL;
  m->image_bytes = 0;
  module_release_files(m);
  free(m->ranges);
  for (size_t i = 0; i < m->ncus; i++) {
    free(m->cus[i].fns);
    cp_dwline_free(&m->cus[i].lines);
  }
  memset(&m->secs, 0, sizeof m->secs);
  free(m->cus);
  m->cus = NULL;
  m->ncus = 0;
  m->dw = NULL;
  m->ranges = NULL;
  m->nranges = 0;
  st.used -= m->open_bytes;
  m->open_bytes = 0;
  m->opened = 0;
}

static void cache_clear(module *m) {
  for (size_t i = 0; i < m->nbuckets; i++) {
    while (m->buckets[i]) {
      cache_entry *e = m->buckets[i];
      m->buckets[i] = e->next;
      free(e);
    }
  }
  free(m->buckets);
  m->buckets = NULL;
  m->nbuckets = m->nentries = 0;
  st.used -= m->cache_bytes;
  m->cache_bytes = 0;
}

/* Closes least recently used modules (and drops their caches) other than
 * keep until need more bytes fit. */
static void make_room(size_t need, const module *keep) {
  while (st.used + need > st.budget) {
    module *victim = NULL;
    for (module *m = st.modules; m; m = m->next)
      if (m != keep && (m->open_bytes || m->cache_bytes) &&
          (!victim || m->tick < victim->tick))
        victim = m;
    if (!victim)
      return;
    cp_debug("symbols: closing the debug information of %s "
             "(CONTPROF_DWARF_MAX_MB)",
             victim->path);
    module_close(victim);
    cache_clear(victim);
  }
}

/* Closes the least recently used open modules (their caches stay) while
 * MAX_OPEN_MODULES are open. */
static void limit_open_modules(void) {
  for (;;) {
    size_t open = 0;
    module *victim = NULL;
    for (module *m = st.modules; m; m = m->next) {
      if (!m->dw)
        continue;
      open++;
      if (!victim || m->tick < victim->tick)
        victim = m;
    }
    if (open < MAX_OPEN_MODULES || !victim)
      return;
    module_close(victim);
  }
}

/* Reads [off, off + len) of fd into image at the same offset (cut at
 * size); -1 when the file is shorter. */
static int read_at(int fd, unsigned char *image, size_t size, uint64_t off,
                   uint64_t len) {
  if (off >= size)
    return len ? -1 : 0;
  if (len > size - off)
    len = size - off;
  size_t got = 0;
  while (got < len) {
    ssize_t r = pread(fd, image + off + got, len - got, (off_t)(off + got));
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return -1;
    got += (size_t)r;
  }
  return 0;
}

typedef struct skip_range {
  uint64_t off, end;
} skip_range;

static int skip_cmp(const void *pa, const void *pb) {
  const skip_range *a = pa, *b = pb;
  return a->off < b->off ? -1 : a->off > b->off;
}

/* Whether section sh (number index) is one libdw never reads for names,
 * lines and address ranges: loaded code and data, symbol tables, location
 * lists, call frames, macros, name indexes. */
static int image_skips(Elf *elf, size_t shstrndx, size_t index,
                       const GElf_Shdr *sh) {
  static const char *const unread[] = {".debug_loc",
                                       ".debug_loclists",
                                       ".debug_frame",
                                       ".debug_macro",
                                       ".debug_macinfo",
                                       ".debug_pubnames",
                                       ".debug_pubtypes",
                                       ".debug_gnu_pubnames",
                                       ".debug_gnu_pubtypes",
                                       ".debug_names",
                                       ".comment"};
  if (sh->sh_type == SHT_NOBITS || sh->sh_size == 0 || index == shstrndx)
    return 0;
  /* Loaded sections (code, data, dynamic symbols; notes are kept) and the
   * symbol table: ELF symbols are symbols.c's, read from the file. */
  if ((sh->sh_flags & SHF_ALLOC)
          ? sh->sh_type != SHT_NOTE
          : sh->sh_type == SHT_SYMTAB || sh->sh_type == SHT_STRTAB)
    return 1;
  const char *name = cp_dw.elf_strptr(elf, shstrndx, sh->sh_name);
  for (size_t i = 0; name && i < CP_ARRAY_SIZE(unread); i++)
    if (strcmp(name, unread[i]) == 0 ||
        (strncmp(name, ".zdebug_", 8) == 0 && unread[i][1] == 'd' &&
         strcmp(name + 8, unread[i] + 7) == 0))
      return 1;
  return 0;
}

/* Fills image (size bytes, zeroed) with the file of elf as libdw needs
 * it: everything but the sections it never reads, which stay zero (about
 * half of a shared object: its code and location lists), then the ELF,
 * program and section headers again so that no corrupt section table can
 * zero them. 0 on success. */
static int read_image(Elf *elf, int fd, unsigned char *image, size_t size) {
  size_t shnum = 0, shstrndx = 0, nskip = 0;
  skip_range *skip = NULL;
  GElf_Ehdr eh;
  if (!cp_dw.gelf_getehdr(elf, &eh) || cp_dw.elf_getshdrnum(elf, &shnum) != 0 ||
      cp_dw.elf_getshdrstrndx(elf, &shstrndx) != 0)
    return read_at(fd, image, size, 0, size);
  skip = shnum ? calloc(shnum, sizeof *skip) : NULL;
  for (Elf_Scn *scn = NULL; skip && (scn = cp_dw.elf_nextscn(elf, scn));) {
    GElf_Shdr sh;
    if (cp_dw.gelf_getshdr(scn, &sh) &&
        image_skips(elf, shstrndx, cp_dw.elf_ndxscn(scn), &sh) &&
        sh.sh_offset < size && nskip < shnum)
      skip[nskip++] = (skip_range){
          sh.sh_offset,
          sh.sh_size > size - sh.sh_offset ? size : sh.sh_offset + sh.sh_size};
  }
  if (nskip)
    qsort(skip, nskip, sizeof *skip, skip_cmp);
  uint64_t at = 0;
  int rc = 0;
  for (size_t i = 0; i < nskip && rc == 0; i++) {
    if (skip[i].off > at)
      rc = read_at(fd, image, size, at, skip[i].off - at);
    if (skip[i].end > at)
      at = skip[i].end;
  }
  free(skip);
  if (rc == 0 && at < size)
    rc = read_at(fd, image, size, at, size - at);
  /* The file may have shrunk since it was opened: its last byte is read. */
  if (rc == 0 && at >= size)
    rc = read_at(fd, image, size, size - 1, 1);
  if (rc == 0)
    rc = read_at(fd, image, size, 0, eh.e_ehsize);
  if (rc == 0 && eh.e_phnum)
    rc = read_at(fd, image, size, eh.e_phoff,
                 (uint64_t)eh.e_phnum * eh.e_phentsize);
  if (rc == 0 && shnum)
    rc = read_at(fd, image, size, eh.e_shoff, (uint64_t)shnum * eh.e_shentsize);
  return rc;
}

/* ---- Inflating compressed debug sections --------------------------------
 *
 * libelf inflates a compressed section (SHF_COMPRESSED, zlib) with zlib when
 * libdw opens the file: for libc6-dbg's libc, 8.4 MB out of 2.9 MB, 62 ms of
 * this machine's CPU, half of a process's first export. libdeflate inflates
 * the same in 15 ms. It is found with dlopen (Debian: libdeflate0) the first
 * time a compressed section is met, so that no process pays for loading it
 * at start; without it, libelf inflates as before. Each section it inflates
 * is appended to the image, followed by zero bytes, and its header in the
 * image is rewritten to say so (offset, size, no SHF_COMPRESSED), so libdw
 * reads it as if the file held it uncompressed. */

#define INFLATED_GAP 64 /* zero bytes after each inflated section */

static struct {
  int tried;
  void *dec; /* struct libdeflate_decompressor * */
  int (*zlib_decompress)(void *dec, const void *in, size_t in_bytes, void *out,
                         size_t out_bytes, size_t *actual);
} deflate_lib;

/* Under the module lock (module_open). */
static int deflate_ready(void) {
  if (!deflate_lib.tried) {
    deflate_lib.tried = 1;
    void *lib = dlopen("libdeflate.so.0", RTLD_NOW | RTLD_LOCAL);
    void *(*alloc)(void) =
        lib ? (void *(*)(void))dlsym(lib, "libdeflate_alloc_decompressor")
            : NULL;
    *(void **)&deflate_lib.zlib_decompress =
        lib ? dlsym(lib, "libdeflate_zlib_decompress") : NULL;
    deflate_lib.dec = alloc && deflate_lib.zlib_decompress ? alloc() : NULL;
    cp_debug("symbols: compressed debug sections inflated by %s",
             deflate_lib.dec ? "libdeflate" : "libelf (zlib)");
  }
  return deflate_lib.dec != NULL;
}

/* Inflates the compressed .debug_ sections of image (a copy of the file
 * elf was opened on, file_size bytes, in a zeroed buffer of cap bytes)
 * that libdw will read, into the buffer after the file. Returns the bytes
 * of the image from then on (file_size when nothing was inflated). A
 * section that does not inflate to exactly the size its header gives, or
 * does not fit, is left as it was. 64-bit ELF only. */
static size_t inflate_sections(Elf *elf, unsigned char *image, size_t file_size,
                               size_t cap) {
  GElf_Ehdr eh;
  size_t shnum = 0, shstrndx = 0, end = file_size;
  if (!cp_dw.gelf_getehdr(elf, &eh) || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_shentsize != sizeof(Elf64_Shdr) ||
      cp_dw.elf_getshdrnum(elf, &shnum) ||
      cp_dw.elf_getshdrstrndx(elf, &shstrndx) || eh.e_shoff > file_size ||
      shnum > (file_size - eh.e_shoff) / sizeof(Elf64_Shdr))
    return end;
  for (size_t i = 1; i < shnum; i++) {
    unsigned char *at_hdr = image + eh.e_shoff + i * sizeof(Elf64_Shdr);
    Elf64_Shdr sh;
    Elf64_Chdr ch;
    memcpy(&sh, at_hdr, sizeof sh);
    GElf_Shdr gsh;
    Elf_Scn *scn = cp_dw.elf_getscn(elf, i);
    const char *name = cp_dw.elf_strptr(elf, shstrndx, sh.sh_name);
    if (!(sh.sh_flags & SHF_COMPRESSED) || sh.sh_type == SHT_NOBITS || !name ||
        strncmp(name, ".debug_", 7) != 0 || !scn ||
        !cp_dw.gelf_getshdr(scn, &gsh) || image_skips(elf, shstrndx, i, &gsh) ||
        sh.sh_size < sizeof ch || sh.sh_offset > file_size ||
        sh.sh_size > file_size - sh.sh_offset)
      continue;
    memcpy(&ch, image + sh.sh_offset, sizeof ch);
    size_t from = (end + 7) & ~(size_t)7;
    if (ch.ch_type != ELFCOMPRESS_ZLIB || from > cap ||
        ch.ch_size > cap - from || cap - from - ch.ch_size < INFLATED_GAP ||
        !deflate_ready())
      continue;
    if (deflate_lib.zlib_decompress(
            deflate_lib.dec, image + sh.sh_offset + sizeof ch,
            sh.sh_size - sizeof ch, image + from, ch.ch_size, NULL) != 0) {
      memset(image + from, 0, ch.ch_size);
      continue;
    }
    sh.sh_offset = from;
    sh.sh_size = ch.ch_size;
    sh.sh_flags &= ~(Elf64_Xword)SHF_COMPRESSED;
    sh.sh_addralign = ch.ch_addralign ? ch.ch_addralign : 1;
    memcpy(at_hdr, &sh, sizeof sh);
    end = from + ch.ch_size + INFLATED_GAP;
  }
  return end;
}

/* A padded copy of the file elf was opened on (fd, file_size bytes) with
 * its compressed debug sections inflated (inflated: their sizes, from
 * debug_bytes_inflated); *bytes: the image's size, without the pad. NULL
 * if memory is short or the file cannot be read. */
static unsigned char *load_image(Elf *elf, int fd, size_t file_size,
                                 uint64_t inflated, size_t *bytes) {
  size_t room = (size_t)inflated + 32 * (INFLATED_GAP + 8);
  unsigned char *image = image_alloc(file_size + room + IMAGE_PAD);
  if (!image)
    return NULL;
  if (read_image(elf, fd, image, file_size) != 0) {
    image_free(image);
    return NULL;
  }
  *bytes = inflate_sections(elf, image, file_size, file_size + room);
  return image;
}

/* Opens path as m's dwz supplementary file if its build id is id (n
 * bytes; it must have one) and it fits the cap: a padded copy, as for the
 * main file (module.image), its own Dwarf handed to libdw. Returns the
 * bytes it holds, 0 when it is not the file. */
static uint64_t try_alt_file(module *m, const char *path, const void *id,
                             size_t n, uint64_t main_bytes) {
  struct stat sb;
  cp_own_fd own;
  int fd = cp_own_open_regular(&own, path, &sb);
  if (fd < 0)
    return 0;
  uint64_t bytes = 0, inflated = 0;
  size_t alt_bytes = 0;
  Elf *elf = cp_dw.elf_begin(fd, ELF_C_READ, NULL);
  const void *got = NULL;
  if (elf && cp_dw.elf_kind(elf) == ELF_K_ELF &&
      cp_dw.dwelf_elf_gnu_build_id(elf, &got) == (ssize_t)n && got &&
      memcmp(got, id, n) == 0 && debug_bytes_inflated(elf, fd, &inflated) > 0 &&
      sb.st_size > 0) {
    bytes = (uint64_t)sb.st_size + IMAGE_PAD + inflated;
    /* With the main file's bytes, not yet in st.used. */
    if (main_bytes + bytes <= st.budget)
      make_room((size_t)(main_bytes + bytes), m);
    if (main_bytes + bytes <= st.budget &&
        (m->alt_image =
             load_image(elf, fd, (size_t)sb.st_size, inflated, &alt_bytes)) &&
        (m->alt_elf = cp_dw.elf_memory((char *)m->alt_image, alt_bytes)))
      m->alt_dw = cp_dw.dwarf_begin_elf(m->alt_elf, DWARF_C_READ, NULL);
    if (!m->alt_dw) {
      if (m->alt_elf)
        cp_dw.elf_end(m->alt_elf);
      image_free(m->alt_image);
      m->alt_image = NULL;
      m->alt_elf = NULL;
      bytes = 0;
    } else {
      cp_debug("symbols: dwz supplementary file of %s: %s", m->path, path);
    }
  }
  if (elf)
    cp_dw.elf_end(elf);
  cp_own_close(&own);
  return bytes;
}

/* When m's DWARF refers to a dwz supplementary file, finds it and sets it
 * as libdw's alt: under the debug root's build-id tree by its build id,
 * then at the .gnu_debugaltlink path (absolute, re-rooted under a debug
 * root other than /usr/lib/debug, or relative to the directory of the
 * file holding the DWARF). libdw's own search would open and mmap the
 * file and keep its descriptor (and looks only in /usr/lib/debug).
 * Returns the bytes the alt holds (0 without one), or -1 when the file
 * needs one and none is found: then no lines, as libdw would otherwise
 * look for it itself. */
static int64_t open_alt(module *m, const char *dwarf_path,
                        uint64_t main_bytes) {
  const char *name = NULL;
  const void *id = NULL;
  ssize_t n = cp_dw.dwelf_dwarf_gnu_debugaltlink(m->dw, &name, &id);
  if (n <= 0)
    return 0;
  if (n > 64 || !name)
    return -1;
  char cand[PATH_MAX], hex[2 * 64 + 1];
  for (ssize_t i = 0; i < n; i++)
    snprintf(hex + 2 * i, 3, "%02x", ((const unsigned char *)id)[i]);
  uint64_t bytes = 0;
  int k = snprintf(cand, sizeof cand, "%s/.build-id/%.2s/%s.debug", st.root,
                   hex, hex + 2);
  if (k > 0 && (size_t)k < sizeof cand)
    bytes = try_alt_file(m, cand, id, (size_t)n, main_bytes);
  size_t root_len = strlen(DEFAULT_DEBUG_ROOT);
  if (!bytes && name[0] == '/' && strcmp(st.root, DEFAULT_DEBUG_ROOT) != 0 &&
      strncmp(name, DEFAULT_DEBUG_ROOT "/", root_len + 1) == 0) {
    k = snprintf(cand, sizeof cand, "%s%s", st.root, name + root_len);
    if (k > 0 && (size_t)k < sizeof cand)
      bytes = try_alt_file(m, cand, id, (size_t)n, main_bytes);
  }
  if (!bytes && name[0] == '/')
    bytes = try_alt_file(m, name, id, (size_t)n, main_bytes);
  if (!bytes && name[0] != '/') {
    const char *slash = strrchr(dwarf_path, '/');
    k = snprintf(cand, sizeof cand, "%.*s/%s",
                 slash ? (int)(slash - dwarf_path) : 1,
                 slash ? dwarf_path : ".", name);
    if (k > 0 && (size_t)k < sizeof cand)
      bytes = try_alt_file(m, cand, id, (size_t)n, main_bytes);
  }
  if (!bytes)
    return -1;
  cp_dw.dwarf_setalt(m->dw, m->alt_dw);
  return (int64_t)bytes;
}

/* The data of the section named name (or its .zdebug_ form) in elf, as
 * dwarf_begin_elf left it: NULL if still compressed. */
static const uint8_t *section_data(Elf *elf, size_t shstrndx, const char *name,
                                   size_t *size) {
  *size = 0;
  for (Elf_Scn *scn = cp_dw.elf_nextscn(elf, NULL); scn;
       scn = cp_dw.elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    const char *n;
    if (!cp_dw.gelf_getshdr(scn, &sh) || sh.sh_type == SHT_NOBITS ||
        !(n = cp_dw.elf_strptr(elf, shstrndx, sh.sh_name)))
      continue;
    if (strcmp(n, name) != 0 &&
        !(strncmp(n, ".zdebug_", 8) == 0 && strcmp(n + 8, name + 7) == 0))
      continue;
    Elf_Data *d = cp_dw.elf_getdata(scn, NULL);
    if ((sh.sh_flags & SHF_COMPRESSED) || !d || !d->d_buf ||
        (d->d_size >= 4 && memcmp(d->d_buf, "ZLIB", 4) == 0))
      return NULL;
    *size = d->d_size;
    return d->d_buf;
  }
  return NULL;
}

/* Points m->secs at the sections our line reader needs; left empty (libdw
 * reads the line tables) for a byte order other than ours. */
static void find_line_sections(module *m) {
  GElf_Ehdr eh;
  size_t shstrndx;
  memset(&m->secs, 0, sizeof m->secs);
  if (!cp_dw.gelf_getehdr(m->image_elf, &eh) ||
      cp_dw.elf_getshdrstrndx(m->image_elf, &shstrndx) != 0 ||
      eh.e_ident[EI_DATA] != ELFDATA2LSB ||
      __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__)
    return;
  cp_dwline_sections *s = &m->secs;
  s->str = section_data(m->image_elf, shstrndx, ".debug_str", &s->str_size);
  s->line_str = section_data(m->image_elf, shstrndx, ".debug_line_str",
                             &s->line_str_size);
  s->line = section_data(m->image_elf, shstrndx, ".debug_line", &s->line_size);
}

/* Opens m's object and debug information. Leaves m->dw NULL when there is
 * none; says why once when there is some but it is unusable. */
static void module_read(module *m) {
  limit_open_modules();
  m->opened = 1;
  m->deferred = 0;
  if (!m->deferral_said) /* not again at each retry */
    cp_debug("symbols: pid %d reads the debug information of %s", (int)getpid(),
             m->path);
  m->file.fd = m->debug_file.fd = -1;
  struct stat sb;
  if (cp_own_open_regular(&m->file, m->path, &sb) < 0)
    return;
  if ((m->dev || m->ino) &&
      ((uint64_t)sb.st_dev != m->dev || (uint64_t)sb.st_ino != m->ino)) {
    cp_warn("symbols: %s was replaced on disk since it was loaded: its "
            "frames get no lines",
            m->path);
    m->refused = 1;
    module_close(m);
    return;
  }
  m->elf = cp_dw.elf_begin(m->file.fd, ELF_C_READ, NULL);
  if (!m->elf || cp_dw.elf_kind(m->elf) != ELF_K_ELF) {
    module_close(m);
    return;
  }
  char id[MAX_BUILD_ID_HEX];
  build_id_hex(m->elf, id);
  if (m->build_id[0] && strcmp(id, m->build_id) != 0) {
    cp_warn("symbols: %s has another build id than the one loaded: its "
            "frames get no lines",
            m->path);
    m->refused = 1;
    module_close(m);
    return;
  }
  snprintf(m->build_id, sizeof m->build_id, "%s", id);

  int existed = 0;
  Elf *dbg = NULL;
  uint64_t inflated = 0;
  uint64_t bytes = debug_bytes_inflated(m->elf, m->file.fd, &inflated);
  if (bytes > 0) {
    dbg = m->elf;
  } else if (find_debug_file(m, &existed) == 0) {
    dbg = m->debug_elf;
    bytes = debug_bytes_inflated(dbg, m->debug_file.fd, &inflated);
  }
  if (!dbg) {
    if (existed)
      cp_warn("symbols: the debug file of %s is unusable (truncated, "
              "corrupt or of another build): function names only",
              m->path);
    module_close(m);
    return;
  }
  if (bytes > st.budget) {
    cp_warn("symbols: the debug information of %s (%llu kB) does not fit "
            "in CONTPROF_DWARF_MAX_MB (%zu kB): function names only",
            m->path, (unsigned long long)(bytes >> 10), st.budget >> 10);
    m->refused = 1;
    module_close(m);
    return;
  }
  /* libdw reads a copy of the file (see module.image, read_image). */
  int dbg_fd = dbg == m->elf ? m->file.fd : m->debug_file.fd;
  char dwarf_path[PATH_MAX];
  snprintf(dwarf_path, sizeof dwarf_path, "%s",
           dbg == m->elf ? m->path : st.debug_path);
  struct stat dsb;
  if (fstat(dbg_fd, &dsb) != 0 || dsb.st_size <= 0 ||
      (uint64_t)dsb.st_size + IMAGE_PAD + inflated > st.budget) {
    cp_warn("symbols: the debug information of %s (%llu kB with its file) "
            "does not fit in CONTPROF_DWARF_MAX_MB (%zu kB): function names "
            "only",
            m->path,
            (unsigned long long)(((uint64_t)dsb.st_size + inflated) >> 10),
            st.budget >> 10);
    m->refused = 1;
    module_close(m);
    return;
  }
  bytes = (uint64_t)dsb.st_size + IMAGE_PAD + inflated;
  uint64_t estimate_ns = bytes * CP_DWARF_READ_NS_PER_BYTE;
  if (st.gate && !st.gate(estimate_ns, st.spent_ns)) {
    if (!m->deferral_said) {
      m->deferral_said = 1;
      cp_debug("symbols: pid %d puts off reading the debug information of "
               "%s (%llu kB, about %llu ms): over the cap of its CPU so far",
               (int)getpid(), m->path, (unsigned long long)(bytes >> 10),
               (unsigned long long)(estimate_ns / 1000000));
    }
    m->deferred = 1;
    m->deferred_ns = estimate_ns;
    m->deferred_at = cp_monotonic_ns();
    module_close(m);
    return;
  }
  make_room((size_t)bytes, m);
  m->image =
      load_image(dbg, dbg_fd, (size_t)dsb.st_size, inflated, &m->image_bytes);
  if (m->image)
    m->image_elf = cp_dw.elf_memory((char *)m->image, m->image_bytes);
  module_release_files(m);
  m->dw = m->image_elf ? cp_dw.dwarf_begin_elf(m->image_elf, DWARF_C_READ, NULL)
                       : NULL;
  int64_t alt = m->dw ? open_alt(m, dwarf_path, bytes) : 0;
  if (alt < 0) {
    cp_warn("symbols: the dwz supplementary file of %s is missing, "
            "unreadable, of another build or over CONTPROF_DWARF_MAX_MB: "
            "function names only",
            m->path);
    m->refused = 1;
    module_close(m);
    return;
  }
  bytes += (uint64_t)alt;
  if (m->dw)
    find_line_sections(m);
  if (!m->dw || build_ranges(m) != 0) {
    cp_warn("symbols: the debug information of %s is unusable (%s): "
            "function names only",
            m->path, cp_dw.dwarf_errmsg(-1));
    m->refused = 1;
    module_close(m);
    return;
  }
  m->open_bytes = (size_t)bytes + m->nranges * sizeof *m->ranges +
                  m->ncus * (sizeof *m->cus + CU_BYTES);
  st.used += m->open_bytes;
}

/* ---- Resolving ----------------------------------------------------------- */

/* c's line table as our reader has it (read on first use), or NULL when it
 * refused it (then libdw's: dwarf_getsrc_die, dwarf_getsrcfiles) or when
 * it does not fit in what is left of the cap (c->own_lines -2: no lines
 * for the unit). */
static cp_dwline_table *cu_lines(module *m, cu_info *c, Dwarf_Die *cudie) {
  if (c->own_lines == 0) {
    c->own_lines = -1;
    Dwarf_Attribute a;
    Dwarf_Word off;
    Dwarf_Die d;
    uint8_t address_size = 0;
    size_t room = st.budget > st.used ? st.budget - st.used : 0;
    int rc = -1;
    if (m->secs.line &&
        cp_dw.dwarf_formudata(cp_dw.dwarf_attr(cudie, DW_AT_stmt_list, &a),
                              &off) == 0 &&
        cp_dw.dwarf_diecu(cudie, &d, &address_size, NULL))
      rc = cp_dwline_read(
          &m->secs, off,
          cp_dw.dwarf_formstring(cp_dw.dwarf_attr(cudie, DW_AT_comp_dir, &a)),
          address_size, room, &c->lines);
    if (rc == 0) {
      c->own_lines = 1;
      m->open_bytes += c->lines.bytes;
      st.used += c->lines.bytes;
    } else if (rc == -2) {
      c->own_lines = -2;
      cp_debug("symbols: a line table of %s does not fit in "
               "CONTPROF_DWARF_MAX_MB: no lines in that unit",
               m->path);
    }
  }
  return c->own_lines == 1 ? &c->lines : NULL;
}

/* The unit of m whose DIE is at off, or NULL (not one with code). */
static cu_info *cu_at(module *m, Dwarf_Off off) {
  size_t lo = 0, hi = m->ncus;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (m->cus[mid].off == off)
      return &m->cus[mid];
    if (m->cus[mid].off < off)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

/* Appends s to out's strings; returns the copy, or "" when full. */
static const char *chain_str(cp_line_chain *out, const char *s) {
  if (!s)
    return "";
  size_t len = strlen(s) + 1;
  if (len > sizeof out->strings - out->used)
    return "";
  char *p = out->strings + out->used;
  memcpy(p, s, len);
  out->used += len;
  return p;
}

/* The attributes chain_add reads, and the DIE each was found on. */
enum { FA_LINKAGE, FA_MIPS_LINKAGE, FA_NAME, FA_DECL_FILE, FA_DECL_LINE, FA_N };
#define FA_ORIGIN FA_N     /* bit of DW_AT_abstract_origin in a scan */
#define FA_SPEC (FA_N + 1) /* bit of DW_AT_specification */

typedef struct fn_attrs {
  Dwarf_Attribute a[FA_N + 2]; /* + the two links, in a scan */
  Dwarf_Die holder[FA_N];
  unsigned found; /* bit i: a[i] (and holder[i]) set */
} fn_attrs;

/* dwarf_getattrs callback: the first of each attribute of interest. */
static int fn_attr_cb(Dwarf_Attribute *attr, void *arg) {
  fn_attrs *scan = arg;
  int i;
  switch (cp_dw.dwarf_whatattr(attr)) {
  case DW_AT_linkage_name:
    i = FA_LINKAGE;
    break;
  case DW_AT_MIPS_linkage_name:
    i = FA_MIPS_LINKAGE;
    break;
  case DW_AT_name:
    i = FA_NAME;
    break;
  case DW_AT_decl_file:
    i = FA_DECL_FILE;
    break;
  case DW_AT_decl_line:
    i = FA_DECL_LINE;
    break;
  case DW_AT_abstract_origin:
    i = FA_ORIGIN;
    break;
  case DW_AT_specification:
    i = FA_SPEC;
    break;
  default:
    return DWARF_CB_OK;
  }
  if (!(scan->found & (1u << i))) {
    scan->a[i] = *attr;
    scan->found |= 1u << i;
  }
  return DWARF_CB_OK;
}

/* What dwarf_attr_integrate finds for each of chain_add's attributes, in
 * one pass over each DIE of the abstract-origin / specification chain
 * instead of several per attribute (it scans a DIE once for the attribute,
 * once for DW_AT_abstract_origin, once for DW_AT_specification): the same
 * order (the DIE, then its abstract origin, else its specification) and
 * the same bound (17 DIEs). */
static void fn_attrs_get(Dwarf_Die *fn, fn_attrs *fa) {
  Dwarf_Die die = *fn;
  fa->found = 0;
  for (int chain = 0; chain < 17; chain++) {
    fn_attrs scan;
    scan.found = 0;
    /* On a corrupt DIE, what was read before the error counts, as it
     * would for dwarf_attr. */
    int rc = cp_dw.dwarf_getattrs(&die, fn_attr_cb, &scan, 0);
    for (int i = 0; i < FA_N; i++)
      if (!(fa->found & (1u << i)) && (scan.found & (1u << i))) {
        fa->a[i] = scan.a[i];
        fa->holder[i] = die;
        fa->found |= 1u << i;
      }
    if (rc != 1 || fa->found == (1u << FA_N) - 1)
      return;
    Dwarf_Attribute *link = scan.found & (1u << FA_ORIGIN) ? &scan.a[FA_ORIGIN]
                            : scan.found & (1u << FA_SPEC) ? &scan.a[FA_SPEC]
                                                           : NULL;
    if (!link || !cp_dw.dwarf_formref_die(link, &die))
      return;
  }
}

static const char *fn_string(fn_attrs *fa, int i) {
  return fa->found & (1u << i) ? cp_dw.dwarf_formstring(&fa->a[i]) : NULL;
}

/* What dwarf_decl_file gives for the DIE holding fa's DW_AT_decl_file,
 * from our reading of its unit's line table when we have one (libdw's
 * would parse the whole table again), else libdw's. */
static const char *decl_file(module *m, fn_attrs *fa, char *buf, size_t size) {
  Dwarf_Die *holder = &fa->holder[FA_DECL_FILE];
  Dwarf_Die cudie;
  Dwarf_Word v;
  cu_info *c;
  cp_dwline_table *own;
  if (cp_dw.dwarf_cu_getdwarf(holder->cu) == m->dw &&
      cp_dw.dwarf_diecu(holder, &cudie, NULL, NULL) &&
      (c = cu_at(m, cp_dw.dwarf_dieoffset(&cudie)))) {
    if ((own = cu_lines(m, c, &cudie)))
      return cp_dw.dwarf_formudata(&fa->a[FA_DECL_FILE], &v) == 0 &&
                     cp_dwline_file_name(own, v, buf, size) == 0
                 ? buf
                 : NULL;
    if (c->own_lines == -2)
      return NULL; /* libdw's table would take more */
  }
  return cp_dw.dwarf_decl_file(holder);
}

static void chain_add(module *m, cp_line_chain *out, Dwarf_Die *fn,
                      const char *file, int64_t line) {
  if (out->n >= CP_DWARF_MAX_FRAMES)
    return;
  fn_attrs fa;
  fn_attrs_get(fn, &fa);
  const char *linkage = fn_string(&fa, FA_LINKAGE);
  if (!linkage)
    linkage = fn_string(&fa, FA_MIPS_LINKAGE);
  const char *name = fn_string(&fa, FA_NAME);
  char *plain = linkage ? cp_symbols_demangle(linkage) : NULL;
  cp_line_frame *f = &out->frames[out->n++];
  f->function = chain_str(out, plain ? plain : name ? name : linkage);
  f->system_name = linkage ? chain_str(out, linkage) : f->function;
  free(plain);
  f->file = chain_str(out, file);
  f->line = line;
  /* dwarf_decl_file/line on the DIE holding the attribute find it there. */
  char decl_path[PATH_MAX];
  f->decl_file =
      chain_str(out, fa.found & (1u << FA_DECL_FILE)
                         ? decl_file(m, &fa, decl_path, sizeof decl_path)
                         : NULL);
  /* What dwarf_decl_line would read again from the holder. */
  Dwarf_Word decl = 0;
  f->start_line =
      fa.found & (1u << FA_DECL_LINE) &&
              cp_dw.dwarf_formudata(&fa.a[FA_DECL_LINE], &decl) == 0 &&
              decl <= INT_MAX
          ? (int64_t)decl
          : 0;
}

/* The element of a sorted array of n structs of `size` bytes, each starting
 * with an addr_span, whose span holds addr, or NULL. Spans may nest or
 * overlap (RANGE_LOOKBACK): that many earlier starts are tried. */
static const void *find_span(const void *base, size_t n, size_t size,
                             uint64_t addr) {
  const char *a = base;
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (((const addr_span *)(a + mid * size))->lo <= addr)
      lo = mid + 1;
    else
      hi = mid;
  }
  for (size_t i = lo, seen = 0; i > 0 && seen < RANGE_LOOKBACK; i--, seen++)
    if (addr < ((const addr_span *)(a + (i - 1) * size))->hi)
      return a + (i - 1) * size;
  return NULL;
}

static const cu_range *find_range(const module *m, uint64_t addr) {
  return find_span(m->ranges, m->nranges, sizeof *m->ranges, addr);
}

/* The subprogram of c holding addr, or -1. */
static int find_function(const cu_info *c, uint64_t addr, Dwarf_Off *die) {
  const fn_range *f = find_span(c->fns, c->nfns, sizeof *c->fns, addr);
  if (!f)
    return -1;
  *die = f->die;
  return 0;
}

/* DW_AT_low_pc, DW_AT_high_pc and whether DW_AT_ranges is there. */
typedef struct pc_attrs {
  Dwarf_Attribute low, high;
  unsigned found; /* 1 low, 2 high, 4 ranges */
} pc_attrs;

static int pc_attr_cb(Dwarf_Attribute *attr, void *arg) {
  pc_attrs *p = arg;
  switch (cp_dw.dwarf_whatattr(attr)) {
  case DW_AT_low_pc:
    p->low = *attr;
    p->found |= 1;
    break;
  case DW_AT_high_pc:
    p->high = *attr;
    p->found |= 2;
    break;
  case DW_AT_ranges:
    p->found |= 4;
    return DWARF_CB_ABORT;
  }
  return DWARF_CB_OK;
}

/* dwarf_haspc(die, addr), with *no_pc set when die has no address at all;
 * the usual low_pc/high_pc pair is read in one pass over the attributes
 * (dwarf_haspc reads them in three), anything else by dwarf_haspc. */
static int die_haspc(Dwarf_Die *die, uint64_t addr, int *no_pc) {
  pc_attrs p;
  p.found = 0;
  *no_pc = 0;
  int rc = cp_dw.dwarf_getattrs(die, pc_attr_cb, &p, 0);
  if (rc == 1 && !(p.found & 5)) {
    *no_pc = 1;
    return 0;
  }
  Dwarf_Addr lo, hi;
  Dwarf_Word len;
  if (rc != 1 || p.found != 3 || cp_dw.dwarf_formaddr(&p.low, &lo) != 0)
    return cp_dw.dwarf_haspc(die, addr);
  if (cp_dw.dwarf_formaddr(&p.high, &hi) != 0) {
    if (cp_dw.dwarf_formudata(&p.high, &len) != 0)
      return cp_dw.dwarf_haspc(die, addr);
    hi = lo + len;
  }
  return addr >= lo && addr < hi;
}

/* Appends to path the inlined subroutines nested in die that hold addr,
 * outermost first, through lexical blocks (and blocks without addresses,
 * which may still hold some). Returns 1 when addr is in die's subtree. */
static int descend(Dwarf_Die *die, uint64_t addr, Dwarf_Die *path, int *n,
                   int depth) {
  Dwarf_Die child;
  if (depth > 64 || cp_dw.dwarf_child(die, &child) != 0)
    return 0;
  do {
    int tag = cp_dw.dwarf_tag(&child);
    if (tag != DW_TAG_inlined_subroutine && tag != DW_TAG_lexical_block &&
        tag != DW_TAG_try_block && tag != DW_TAG_catch_block)
      continue;
    int no_pc;
    int has = die_haspc(&child, addr, &no_pc);
    /* Only a lexical block without addresses is entered without them. */
    no_pc = no_pc && tag == DW_TAG_lexical_block;
    if (has != 1 && !no_pc)
      continue;
    int at = *n;
    if (tag == DW_TAG_inlined_subroutine && *n < CP_DWARF_MAX_FRAMES)
      path[(*n)++] = child;
    if (descend(&child, addr, path, n, depth + 1) || has == 1)
      return 1;
    *n = at; /* an address-less block that did not hold it */
  } while (cp_dw.dwarf_siblingof(&child, &child) == 0);
  return 0;
}

/* The chain of addr in m (open, with DWARF): the line of the innermost
 * scope, then for each inlined subroutine its call site in the caller. */
static void resolve(module *m, uint64_t addr, cp_line_chain *out) {
  const cu_range *r = find_range(m, addr);
  Dwarf_Die cu;
  if (!r || !cp_dw.dwarf_offdie(m->dw, m->cus[r->cu].off, &cu))
    return;
  cu_info *c = &m->cus[r->cu];
  char path_buf[PATH_MAX];
  const char *file = NULL;
  int line = 0;
  cp_dwline_table *own = cu_lines(m, c, &cu);
  if (own) {
    const cp_dwline_row *row = cp_dwline_find(own, addr);
    if (row) {
      line = (int)row->line;
      if (cp_dwline_file_name(own, row->file & ~CP_DWLINE_END, path_buf,
                              sizeof path_buf) == 0)
        file = path_buf;
    }
  } else if (c->own_lines != -2) {
    Dwarf_Line *ln = cp_dw.dwarf_getsrc_die(&cu, addr);
    if (ln) {
      file = cp_dw.dwarf_linesrc(ln, NULL, NULL);
      cp_dw.dwarf_lineno(ln, &line);
    }
  }
  if (!own && c->own_lines != -2 && !c->counted) {
    /* libdw keeps the CU's parsed line table until the module closes. */
    Dwarf_Lines *lines;
    size_t nlines = 0;
    if (cp_dw.dwarf_getsrclines(&cu, &lines, &nlines) == 0) {
      size_t more = nlines * LINE_ROW_BYTES;
      m->open_bytes += more;
      st.used += more;
    }
    c->counted = 1;
  }
  if (!c->indexed)
    index_cu(m, c, &cu);

  /* path[0] the subprogram, then the inlined subroutines holding addr,
   * outermost first. */
  Dwarf_Die path[CP_DWARF_MAX_FRAMES + 1];
  int n = 0;
  Dwarf_Off fn_off;
  if (find_function(c, addr, &fn_off) != 0 ||
      !cp_dw.dwarf_offdie(m->dw, fn_off, &path[0]))
    return;
  n = 1;
  int inl = 0;
  descend(&path[0], addr, path + 1, &inl, 0);
  n += inl;

  Dwarf_Files *files = NULL;
  size_t nfiles = 0;
  if (!own && (c->own_lines == -2 ||
               cp_dw.dwarf_getsrcfiles(&cu, &files, &nfiles) != 0))
    files = NULL;
  /* Innermost first; deeper than CP_DWARF_MAX_FRAMES, the outermost are
   * cut. */
  for (int i = n - 1; i >= 0 && out->n < CP_DWARF_MAX_FRAMES; i--) {
    chain_add(m, out, &path[i], file, line);
    if (i == 0)
      break;
    Dwarf_Attribute a;
    Dwarf_Word v;
    file = NULL;
    line = 0;
    if (cp_dw.dwarf_formudata(cp_dw.dwarf_attr(&path[i], DW_AT_call_file, &a),
                              &v) == 0) {
      if (own && cp_dwline_file_name(own, v, path_buf, sizeof path_buf) == 0)
        file = path_buf;
      else if (files && v < nfiles)
        file = cp_dw.dwarf_filesrc(files, v, NULL, NULL);
    }
    if (cp_dw.dwarf_formudata(cp_dw.dwarf_attr(&path[i], DW_AT_call_line, &a),
                              &v) == 0)
      line = (int)v;
  }
}

/* ---- Cache --------------------------------------------------------------- */

static size_t bucket_of(const module *m, uint64_t addr) {
  uint64_t h = addr * 0x9e3779b97f4a7c15ull;
  return (size_t)(h >> 32) & (m->nbuckets - 1);
}

static const cache_entry *cache_find(const module *m, uint64_t addr) {
  if (!m->nbuckets)
    return NULL;
  for (const cache_entry *e = m->buckets[bucket_of(m, addr)]; e; e = e->next)
    if (e->addr == addr)
      return e;
  return NULL;
}

static void cache_copy_out(const cache_entry *e, cp_line_chain *out) {
  const char *strings = (const char *)&e->f[e->n];
  out->n = 0;
  out->used = 0;
  for (uint32_t i = 0; i < e->n; i++) {
    cp_line_frame *f = &out->frames[out->n++];
    f->function = chain_str(out, strings + e->f[i].function);
    f->system_name = chain_str(out, strings + e->f[i].system_name);
    f->file = chain_str(out, strings + e->f[i].file);
    f->decl_file = chain_str(out, strings + e->f[i].decl_file);
    f->line = e->f[i].line;
    f->start_line = e->f[i].start_line;
  }
}

static uint32_t offset_in(const cp_line_chain *c, const char *s) {
  return (uint32_t)(s - c->strings);
}

static void cache_put(module *m, uint64_t addr, const cp_line_chain *c) {
  size_t head = sizeof(cache_entry) + c->n * sizeof(((cache_entry *)0)->f[0]);
  /* "" of frames whose strings did not fit points outside strings[]. */
  size_t bytes = head + c->used + 1;
  make_room(bytes + sizeof(void *), m);
  if (st.used + bytes > st.budget)
    return; /* this module alone fills the cap: not cached */
  if (m->nentries + 1 > m->nbuckets) {
    size_t nb = m->nbuckets ? m->nbuckets * 2 : 256;
    cache_entry **b = calloc(nb, sizeof *b);
    if (!b)
      return;
    for (size_t i = 0; i < m->nbuckets; i++) {
      while (m->buckets[i]) {
        cache_entry *e = m->buckets[i];
        m->buckets[i] = e->next;
        size_t j = (size_t)((e->addr * 0x9e3779b97f4a7c15ull) >> 32) & (nb - 1);
        e->next = b[j];
        b[j] = e;
      }
    }
    free(m->buckets);
    m->cache_bytes += (nb - m->nbuckets) * sizeof *b;
    st.used += (nb - m->nbuckets) * sizeof *b;
    m->buckets = b;
    m->nbuckets = nb;
  }
  cache_entry *e = malloc(bytes);
  if (!e)
    return;
  e->addr = addr;
  e->n = (uint32_t)c->n;
  e->bytes = (uint32_t)bytes;
  char *strings = (char *)&e->f[c->n];
  memcpy(strings, c->strings, c->used);
  strings[c->used] = '\0'; /* the "" for strings that did not fit */
  for (size_t i = 0; i < c->n; i++) {
    const cp_line_frame *f = &c->frames[i];
#define OFF(s)                                                                 \
  ((s) >= c->strings && (s) < c->strings + c->used ? offset_in(c, s)           \
                                                   : (uint32_t)c->used)
    e->f[i].function = OFF(f->function);
    e->f[i].system_name = OFF(f->system_name);
    e->f[i].file = OFF(f->file);
    e->f[i].decl_file = OFF(f->decl_file);
#undef OFF
    e->f[i].line = f->line;
    e->f[i].start_line = f->start_line;
  }
  size_t j = bucket_of(m, addr);
  e->next = m->buckets[j];
  m->buckets[j] = e;
  m->nentries++;
  m->cache_bytes += bytes;
  st.used += bytes;
}

/* ---- Public API ---------------------------------------------------------- */

/* Whether the gate still puts m off: asked again only every
 * DEFER_RETRY_NS (each attempt opens the file and its debug file to size
 * them). Caller holds dwarf_lock. */
#define DEFER_RETRY_NS 1000000000ull
static int still_deferred(module *m) {
  uint64_t now = cp_monotonic_ns();
  if (now - m->deferred_at < DEFER_RETRY_NS)
    return 1;
  m->deferred_at = now;
  return st.gate && !st.gate(m->deferred_ns, st.spent_ns);
}

/* Opens m (module_read), counting the CPU it took against the read gate's
 * allowance. Caller holds dwarf_lock. */
static void module_open(module *m) {
  uint64_t began = cp_clock_ns(CLOCK_THREAD_CPUTIME_ID);
  module_read(m);
  uint64_t took = cp_clock_ns(CLOCK_THREAD_CPUTIME_ID) - began;
  __atomic_add_fetch(&st.spent_ns, took, __ATOMIC_RELAXED); /* read unlocked */
  if (m->dw)
    cp_debug("symbols: pid %d read the debug information of %s in %llu us",
             (int)getpid(), m->path, (unsigned long long)(took / 1000));
}

static void lock_acquire(void) {
  pthread_mutex_lock(&dwarf_lock);
  if (!__atomic_load_n(&dwarf_lock_pid, __ATOMIC_RELAXED))
    __atomic_store_n(&dwarf_lock_pid, getpid(), __ATOMIC_RELAXED);
}

static module *module_get(const cp_dwarf_object *obj) {
  const char *id = obj->build_id ? obj->build_id : "";
  for (module *m = st.modules; m; m = m->next) {
    if (id[0] ? strcmp(m->build_id, id) == 0 && strcmp(m->path, obj->path) == 0
              : strcmp(m->path, obj->path) == 0 && m->dev == obj->dev &&
                    m->ino == obj->ino)
      return m;
  }
  if (st.nmodules >= MAX_MODULES || strlen(id) >= MAX_BUILD_ID_HEX)
    return NULL;
  module *m = calloc(1, sizeof *m);
  if (!m || !(m->path = strdup(obj->path))) {
    free(m);
    return NULL;
  }
  m->file.fd = m->debug_file.fd = -1;
  m->dev = obj->dev;
  m->ino = obj->ino;
  snprintf(m->build_id, sizeof m->build_id, "%s", id);
  m->next = st.modules;
  st.modules = m;
  st.nmodules++;
  return m;
}

size_t cp_dwarf_lookup(const cp_dwarf_object *obj, uint64_t elf_address,
                       cp_line_chain *out) {
  out->n = 0;
  out->used = 0;
  out->resolved = 0;
  if (!obj || !obj->path || obj->path[0] != '/')
    return 0;
  cp_symbols_demangle_prepare();
  lock_acquire();
  if (!cp_dw_load())
    goto out; /* said why once */
  module *m = module_get(obj);
  if (!m)
    goto out;
  m->tick = ++st.tick;
  const cache_entry *hit = cache_find(m, elf_address);
  if (hit) {
    cache_copy_out(hit, out);
    goto out;
  }
  if (m->refused)
    goto out;
  if (m->deferred && still_deferred(m))
    goto out_deferred;
  if (!m->opened) {
    module_open(m);
    if (m->deferred)
      goto out_deferred;
    if (!m->dw)
      m->refused = 1; /* said why once (if at all); not tried again */
  }
  if (m->dw) {
    resolve(m, elf_address, out);
    out->resolved = 1;
  }
  cache_put(m, elf_address, out);
  /* Alone over the cap (line tables parsed since it opened): close it; the
   * cache keeps what was resolved. */
  if (st.used > st.budget)
    make_room(0, NULL);
  goto out;
out_deferred:
  st.deferred++; /* not cached: a later lookup may read it */
out:
  pthread_mutex_unlock(&dwarf_lock);
  return out->n;
}

int cp_dwarf_prepare(const cp_dwarf_object *obj) {
  if (!obj || !obj->path || obj->path[0] != '/')
    return 0;
  lock_acquire();
  int tried = 0;
  /* Only while half the cap is free: a module opened ahead of time must
   * not evict one an export is about to read (it would be read twice). */
  module *m = st.used < st.budget / 2 && cp_dw_load() ? module_get(obj) : NULL;
  if (m && !m->opened && !m->refused) {
    m->tick = ++st.tick;
    module_open(m);
    if (!m->dw && !m->deferred)
      m->refused = 1;
    if (st.used > st.budget)
      make_room(0, NULL);
    tried = 1;
  }
  pthread_mutex_unlock(&dwarf_lock);
  return tried;
}

void cp_dwarf_set_budget(size_t bytes) {
  lock_acquire();
  st.budget = bytes;
  make_room(0, NULL);
  pthread_mutex_unlock(&dwarf_lock);
}

void cp_dwarf_set_read_gate(cp_dwarf_read_gate gate) {
  lock_acquire();
  st.gate = gate;
  pthread_mutex_unlock(&dwarf_lock);
}

void cp_dwarf_ask_again(void) {
  lock_acquire();
  for (module *m = st.modules; m; m = m->next)
    m->deferred_at = 0; /* over DEFER_RETRY_NS ago */
  pthread_mutex_unlock(&dwarf_lock);
}

uint64_t cp_dwarf_spent_ns(void) {
  return __atomic_load_n(&st.spent_ns, __ATOMIC_RELAXED);
}

uint64_t cp_dwarf_deferred(void) {
  lock_acquire();
  uint64_t n = st.deferred;
  pthread_mutex_unlock(&dwarf_lock);
  return n;
}

size_t cp_dwarf_memory_used(void) {
  lock_acquire();
  size_t used = st.used;
  pthread_mutex_unlock(&dwarf_lock);
  return used;
}

void cp_dwarf_set_debug_root(const char *dir) {
  lock_acquire();
  snprintf(st.root, sizeof st.root, "%s", dir ? dir : DEFAULT_DEBUG_ROOT);
  pthread_mutex_unlock(&dwarf_lock);
}

void cp_dwarf_after_fork_child(void) {
  /* As cp_symbols_after_fork_child: the modules are whole when the lock
   * was free at the fork (libdw is only called under it), and their
   * images, copied with the address space, are kept. */
  if (pthread_mutex_trylock(&dwarf_lock) == 0) {
    __atomic_store_n(&dwarf_lock_pid, getpid(), __ATOMIC_RELAXED);
    /* The child's CPU clock starts again at 0: so does what it spent. */
    __atomic_store_n(&st.spent_ns, 0, __ATOMIC_RELAXED);
    st.deferred = 0;
    size_t open = 0;
    for (const module *m = st.modules; m; m = m->next)
      open += m->dw != NULL;
    pthread_mutex_unlock(&dwarf_lock);
    cp_debug("symbols: pid %d keeps the debug information of its parent (%zu "
             "objects)",
             (int)getpid(), open);
    return;
  }
  cp_dwarf_reset();
}

void cp_dwarf_reset(void) {
  if (pthread_mutex_trylock(&dwarf_lock) != 0) {
    pid_t owner = __atomic_load_n(&dwarf_lock_pid, __ATOMIC_RELAXED);
    if (owner == 0 || owner == getpid()) {
      pthread_mutex_lock(&dwarf_lock);
    } else {
      /* Forked while another thread held it: leak, make the lock anew. */
      st.modules = NULL;
      st.nmodules = 0;
      st.used = 0;
      __atomic_store_n(&st.spent_ns, 0, __ATOMIC_RELAXED);
      st.deferred = 0;
      pthread_mutex_init(&dwarf_lock, NULL);
      __atomic_store_n(&dwarf_lock_pid, 0, __ATOMIC_RELAXED);
      return;
    }
  }
  while (st.modules) {
    module *m = st.modules;
    st.modules = m->next;
    module_close(m);
    cache_clear(m);
    free(m->path);
    free(m);
  }
  st.nmodules = 0;
  st.used = 0;
  __atomic_store_n(&st.spent_ns, 0, __ATOMIC_RELAXED);
  st.deferred = 0;
  __atomic_store_n(&dwarf_lock_pid, 0, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&dwarf_lock);
}
