/* Symbolization of native program counters: /proc/self/maps, ELF symbol
 * tables (read with bounds-checked pread, never trusted), build ids and lazy
 * C++ demangling. Runs on the aggregator thread, never in a signal handler. */
#include "aggregator/symbols.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "aggregator/dwarf.h"
#include "aggregator/elf_image.h"
#include "aggregator/elf_plt.h"
#include "aggregator/fork_hints.h"
#include "aggregator/symbol_scan.h"
#include "common.h"
#include "own_fd.h"

/* /proc/self/maps: 65,530 mappings with long paths. */
#define MAX_MAPS_BYTES ((size_t)64 << 20)
/* The longest name handed to the demangler. */
#define MAX_DEMANGLE_CHARS 65536
/* How many earlier symbols a lookup inspects for one that encloses pc (nested
 * symbols, e.g. an assembly entry point inside a sized function). */
#define NESTED_LOOKBACK 16
/* A pc in no mapping re-reads /proc/self/maps even when no library was loaded
 * (code mapped without the dynamic loader), but at most this often. */
#define FORCED_MAPS_READ_INTERVAL_NS 1000000000ull
/* A table is built from at most this many symbol sections (a .symtab or
 * its debug file's, and a .dynsym: two in every file seen); the rest of a
 * file that has more are not read, by the table or by a scan. */
#define TABLE_MAX_SOURCES 8
/* Ranges a file's scans keep before its table is built instead. */
#define SCAN_MAX_RANGES 4096

/* ---- Types ------------------------------------------------------------- */

enum {
  SYM_MANGLED = 1u,   /* name starts with _Z */
  SYM_DEMANGLED = 2u, /* demangling was attempted */
  SYM_OWNED = 4u      /* name is a malloc'd demangled string */
};

typedef struct sym_entry {
  uint64_t start;   /* ELF virtual address */
  const char *name; /* in one of the file's strtabs, or owned (SYM_OWNED) */
  uint32_t size;    /* bytes covered, > 0 */
  uint32_t flags;
} sym_entry;

/* What a scan (symbol_scan.h) found for [lo, hi) of a file whose table is
 * put off: sym.name NULL when no function covers it. */
typedef struct scan_range {
  uint64_t lo, hi;
  sym_entry sym; /* sym.name: raw until demangled */
  char *raw;     /* the name as read, owned */
} scan_range;

typedef struct load_segment {
  uint64_t offset, vaddr, filesz, memsz;
  uint32_t flags;
} load_segment;

/* The symbol table of one ELF file (or the vdso image), shared by every
 * mapping of that file. */
typedef struct elf_file {
  struct elf_file *next; /* in symbols.files when cached */
  int cached;
  dev_t dev;
  ino_t ino;
  off_t size;
  struct timespec mtime;
  unsigned refs;
  char build_id[CP_ELF_BUILD_ID_LEN];
  load_segment *loads;
  size_t nloads;
  sym_entry *syms; /* sorted by start, starts unique */
  size_t nsyms;
  /* Its PLT stubs, named after what they jump to (elf_plt.h): built with
   * the table, and looked up before it; plt_syms[i] is plt.v[i]'s entry,
   * its name in plt.names. */
  cp_plt_stubs plt;
  sym_entry *plt_syms;
  /* page_first[k]: the first symbol starting at or after page_lo + k pages
   * (PAGE_INDEX_SHIFT), k < npages; NULL when not built. A lookup searches
   * between two entries instead of the whole table: a child of fork that
   * names its samples at exit missed the cache at each step of a search of
   * PostgreSQL's 30,000 symbols. */
  uint32_t *page_first;
  uint64_t page_lo;
  size_t npages;
  /* The string tables syms' names point into, each NUL-terminated: kept
   * whole, where copying the names into a table of their own was a strlen,
   * a copy and a fresh page every 4 KiB of names. */
  char **strtabs;
  size_t nstrtabs, strtab_bytes;
  size_t bytes; /* what this table takes, counted in symbols.table_bytes */
  /* Put off by the build gate (cp_symbols_set_build_gate): no table yet,
   * addresses named by scans, their answers kept in ranges (sorted by lo,
   * disjoint), until the table is built: when the gate allows it, when the
   * scans have cost what the build would, or when a scan cannot tell. */
  int table_deferred;
  int scan_undecided; /* a scan left an address to the table */
  /* Held by cp_symbols_resolve_file's cache (a reference of its own): a
   * tool naming a profile's locations one by one builds each table once. */
  int kept_for_files;
  char *open_path, *path; /* to open it again */
  uint64_t build_estimate_ns, scan_spent_ns;
  scan_range *ranges;
  size_t nranges, ranges_cap;
  /* The newest generation that may hold pointers into the table (evictable
   * below symbols.oldest_live_gen), and a lookup counter for LRU order. */
  uint64_t last_used_gen;
  uint64_t last_used_tick;
} elf_file;

/* One executable mapping. pub is what callers see; it stays first so that a
 * cp_mapping pointer converts back. */
typedef struct map_rec {
  cp_mapping pub;
  uint64_t dev, inode;
  uint64_t elf_delta; /* elf_address = pc + elf_delta (mod 2^64) */
  elf_file *file;     /* NULL: no symbols (deleted, unreadable, not ELF) */
  int file_read;      /* file (and elf_delta) read: on first use */
  int lines_prepared; /* cp_symbols_prepare_lines has seen it */
  /* The file's build id when first read: survives an eviction of file, for
   * checking the file DWARF lines come from (cp_symbols_lines). */
  char build_id[CP_ELF_BUILD_ID_LEN];
  char *path;
  struct map_rec *next_retired;
} map_rec;

/* What dl_iterate_phdr says about the loaded objects. */
typedef struct dl_state {
  int has_counters;
  unsigned long long adds, subs;
  uint64_t fingerprint; /* only without counters */
  size_t count;
} dl_state;

/* Guards symbols and every record and table it reaches. */
static pthread_mutex_t symbols_lock = PTHREAD_MUTEX_INITIALIZER;
/* The process that first took symbols_lock: a child of fork sees another. */
static pid_t symbols_lock_pid;

static struct {
  int initialized;
  map_rec **maps; /* current mappings, sorted by start */
  size_t nmaps;
  map_rec *retired; /* unloaded mappings, freed by cp_symbols_collect */
  elf_file *files;  /* symbol tables by file identity */
  int have_dl_state;
  dl_state dl;
  int change_pending; /* a mapping came or went since cp_symbols_refresh */
  uint64_t last_forced_read_ns;
  int maps_warned;
  /* The budget (cp_symbols_set_budget): every table counts against it;
   * the least recently used ones no live generation uses are evicted to
   * make room, and a file whose table does not fit gets .dynsym only, else
   * no function names. */
  size_t budget;
  size_t table_bytes;
  uint64_t oldest_live_gen; /* from cp_symbols_collect */
  uint64_t tick;
  uint64_t last_budget_warn_ns;
  /* A mapping may have become one cp_symbols_prepare_lines opens (first
   * used by a generation, or its file read) since its last scan found
   * none: without, each of its calls after every drain scanned every
   * mapping. */
  int prepare_pending;
} symbols = {.budget = CP_SYMBOLS_DEFAULT_BUDGET};

/* CONTPROF_SYMBOLIZE=none: files are read for their build id and segments
 * only (cp_symbols_set_names). Kept across cp_symbols_reset. */
static int names_off;
/* The build gate (cp_symbols_set_build_gate), and the CPU this process
 * spent building tables (atomic: read by the gate's owner). */
static cp_symbols_build_gate build_gate;
static uint64_t spent_ns;
/* Scans made, for the debug lines. */
static uint64_t scans;

static void spend(uint64_t ns) {
  __atomic_add_fetch(&spent_ns, ns, __ATOMIC_RELAXED);
}

/* Whether the build gate lets a table that costs about estimate_ns be
 * built now. */
static int build_allowed(uint64_t estimate_ns) {
  cp_symbols_build_gate gate = __atomic_load_n(&build_gate, __ATOMIC_ACQUIRE);
  return !gate ||
         gate(estimate_ns, __atomic_load_n(&spent_ns, __ATOMIC_RELAXED));
}

static int cmp_u64(const void *pa, const void *pb) {
  uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;
  return a < b ? -1 : a > b;
}
/* Addresses cp_symbols_lines read from debug information, and those it had
 * (resolved before, or inherited from the parent of fork). */
static uint64_t lines_read, lines_had;

/* ---- Demangling ---------------------------------------------------------- */

typedef char *(*cxa_demangle_fn)(const char *mangled, char *buf, size_t *n,
                                 int *status);

static pthread_once_t demangler_once = PTHREAD_ONCE_INIT;
static cxa_demangle_fn demangler;
static int demangler_resolved; /* atomic: demangler_once has run */

static void demangler_resolve_once(void) {
  void *fn = dlsym(RTLD_DEFAULT, "__cxa_demangle");
  if (!fn) {
    /* A C program may still run C++ code loaded RTLD_LOCAL; borrow the
     * demangler without linking libstdc++. The handle is kept for good. */
    void *handle = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_LOCAL);
    if (handle)
      fn = dlsym(handle, "__cxa_demangle");
  }
  if (!fn)
    cp_debug("symbols: no __cxa_demangle, C++ names stay mangled");
  /* dlsym returns data pointers; the cast through memcpy is the POSIX way. */
  memcpy(&demangler, &fn, sizeof demangler);
  __atomic_store_n(&demangler_resolved, 1, __ATOMIC_RELEASE);
}

/* May dlopen, so it is called without symbols_lock held: a library
 * constructor that calls into this module holds the loader lock. */
static void demangler_resolve(void) {
  pthread_once(&demangler_once, demangler_resolve_once);
}

static int demangler_is_resolved(void) {
  return __atomic_load_n(&demangler_resolved, __ATOMIC_ACQUIRE);
}

static int sym_needs_demangling(const sym_entry *s) {
  return (s->flags & (SYM_MANGLED | SYM_DEMANGLED)) == SYM_MANGLED;
}

/* name demangled (malloc'd), or NULL when it is not a C++ name or the
 * demangler is missing; a PLT stub's "@plt" (elf_plt.h) stays after it. */
static char *demangle(const char *name) {
  static const char plt[] = "@plt";
  size_t len = strlen(name);
  if (!demangler || len > MAX_DEMANGLE_CHARS)
    return NULL;
  size_t stem =
      len >= sizeof plt - 1 && strcmp(name + len - (sizeof plt - 1), plt) == 0
          ? len - (sizeof plt - 1)
          : len;
  char *copy = stem < len ? strndup(name, stem) : NULL;
  if (stem < len && !copy)
    return NULL;
  int status = -1;
  char *plain = demangler(copy ? copy : name, NULL, NULL, &status);
  free(copy);
  if (status != 0 || !plain) {
    free(plain);
    return NULL;
  }
  if (stem < len) {
    size_t n = strlen(plain);
    char *with = realloc(plain, n + sizeof plt);
    if (!with) {
      free(plain);
      return NULL;
    }
    memcpy(with + n, plt, sizeof plt);
    plain = with;
  }
  return plain;
}

/* Demangles s (of table f, may be NULL) in place the first time it is
 * looked up; the name counts in f's bytes. */
static void sym_demangle(elf_file *f, sym_entry *s) {
  if (!sym_needs_demangling(s))
    return;
  s->flags |= SYM_DEMANGLED;
  char *plain = demangle(s->name);
  if (plain) {
    s->name = plain;
    s->flags |= SYM_OWNED;
    if (f) {
      size_t n = strlen(plain) + 1;
      f->bytes += n;
      symbols.table_bytes += n;
    }
  }
}

/* ---- Collecting function symbols --------------------------------------- */

typedef struct sym_candidate {
  uint64_t start;
  uint64_t size;
  uint64_t bound; /* end of the containing section or segment, 0 unknown */
  const char *name;
  int rank; /* which of several symbols at one address names it */
} sym_candidate;

/* Candidates from every symbol table read; names point into strtabs, which
 * live until the table is built. */
typedef struct sym_builder {
  sym_candidate *v;
  size_t n, cap;
  char **strtabs;
  size_t nstrtabs, strtabs_cap;
  size_t strtab_bytes; /* of strtabs */
  int failed;          /* out of memory */
  /* Bytes held while building (sections read, candidates, the table)
   * against `limit`, and the room the table kept may take; over: it would
   * not fit in one of them. */
  size_t bytes, limit, table_room;
  int over;
} sym_builder;

/* Whether `more` bytes fit in the builder's budget; counts them if so. */
static int builder_take(sym_builder *b, uint64_t more) {
  if (more > b->limit || b->bytes > b->limit - more) {
    b->over = 1;
    return 0;
  }
  b->bytes += more;
  return 1;
}

static void builder_free(sym_builder *b) {
  for (size_t i = 0; i < b->nstrtabs; i++)
    free(b->strtabs[i]);
  free(b->strtabs);
  free(b->v);
}

/* Adds the functions of one symbol section (one of table_sources'). The
 * string table is read whole and kept (the candidates' names, then the
 * table's, point into it); the symbols are read CP_ELF_SYMS_PER_READ at a
 * time. */
static void collect_symbols(const cp_elf_symbols *t, sym_builder *b) {
  const cp_elf_reader *r = t->r;
  const cp_elf_shdr *symtab = t->symtab;
  uint64_t count = t->count;
  /* Room for every symbol as a candidate, reserved once: pages of it that
   * no function fills are never touched. */
  uint64_t want = b->n + count;
  uint64_t take =
      (want > b->cap ? (want - b->cap) * sizeof *b->v : 0) + t->str_size + 1;
  if (b->over || !builder_take(b, take))
    return;
  char *strtab = cp_elf_read_alloc(r, t->str_offset, t->str_size);
  char **strtabs = strtab ? cp_grow_array(b->strtabs, &b->strtabs_cap,
                                          b->nstrtabs + 1, sizeof *strtabs)
                          : NULL;
  if (strtabs)
    b->strtabs = strtabs; /* it may have moved */
  cp_elf_sym *chunk =
      strtabs ? malloc(CP_ELF_SYMS_PER_READ * sizeof *chunk) : NULL;
  sym_candidate *v =
      chunk && want > b->cap ? realloc(b->v, want * sizeof *v) : b->v;
  if (!strtab || !strtabs || !chunk || !v) {
    if (strtab)
      b->failed = 1; /* out of memory */
    else
      b->bytes -= take; /* unreadable: skipped, nothing kept */
    free(strtab);
    free(chunk);
    return;
  }
  b->strtabs[b->nstrtabs++] = strtab;
  b->strtab_bytes += t->str_size + 1;
  b->v = v;
  if (want > b->cap)
    b->cap = want;
  for (uint64_t done = 0; done < count; done += CP_ELF_SYMS_PER_READ) {
    uint64_t k = count - done < CP_ELF_SYMS_PER_READ ? count - done
                                                     : CP_ELF_SYMS_PER_READ;
    if (cp_elf_read(r, symtab->sh_offset + done * sizeof(cp_elf_sym),
                    k * sizeof(cp_elf_sym), chunk) != 0)
      break; /* the file shrank: what was read stays */
    for (uint64_t i = 0; i < k; i++) {
      const cp_elf_sym *s = &chunk[i];
      /* strtab is NUL-terminated at str_size, so every name ends. */
      const char *name = strtab + s->st_name;
      if (!cp_elf_is_function(t, s) || name[0] == '\0')
        continue;
      b->v[b->n++] = (sym_candidate){.start = s->st_value,
                                     .size = s->st_size,
                                     .bound = cp_elf_symbol_bound(r, s),
                                     .name = name,
                                     .rank = cp_elf_symbol_rank(s, name)};
    }
  }
  free(chunk);
}

static int candidate_cmp(const void *pa, const void *pb) {
  const sym_candidate *a = pa, *b = pb;
  if (a->start != b->start)
    return a->start < b->start ? -1 : 1;
  if (a->rank != b->rank)
    return a->rank > b->rank ? -1 : 1;
  return strcmp(a->name, b->name);
}

/* Sorts and dedupes the candidates into f->syms, which takes b's string
 * tables (the names point into them). Size-0 symbols cover up to the next
 * symbol (or their section's end); those inside a sized function are labels
 * within it and are dropped. Returns 0, -1 (ENOMEM) or -2 (the table would not
 * fit in b's budget). */
static int build_table(sym_builder *b, elf_file *f) {
  if (b->n == 0)
    return 0;
  qsort(b->v, b->n, sizeof *b->v, candidate_cmp);
  size_t kept = 0;
  for (size_t i = 0; i < b->n; i++) /* first of each start is the best */
    if (i == 0 || b->v[i].start != b->v[i - 1].start)
      b->v[kept++] = b->v[i];

  size_t out = 0;
  uint64_t sized_end = 0;
  for (size_t i = 0; i < kept; i++) {
    sym_candidate *c = &b->v[i];
    uint64_t end;
    if (c->size > 0) {
      end = c->start + c->size < c->start ? UINT64_MAX : c->start + c->size;
    } else {
      end = c->bound > c->start ? c->bound : 0;
      if (i + 1 < kept && (end == 0 || b->v[i + 1].start < end))
        end = b->v[i + 1].start;
      if (end <= c->start || c->start < sized_end)
        continue;
    }
    if (c->size > 0 && end > sized_end)
      sized_end = end;
    c->size = end - c->start > UINT32_MAX ? UINT32_MAX : end - c->start;
    b->v[out++] = *c;
  }
  if (out == 0)
    return 0;
  size_t table = out * sizeof *f->syms + b->strtab_bytes;
  if (table > b->table_room || !builder_take(b, out * sizeof *f->syms))
    return -2; /* over the budget */

  /* The entries are written over the candidates, front to back (entry i
   * ends before candidate i + 1 starts: an entry is smaller), and the array
   * is shrunk: no second array of fresh pages. */
  _Static_assert(sizeof(sym_entry) <= sizeof(sym_candidate),
                 "entries fit over the candidates");
  sym_entry *syms = (sym_entry *)(void *)b->v;
  for (size_t i = 0; i < out; i++) {
    sym_candidate c = b->v[i];
    syms[i] = (sym_entry){
        .start = c.start,
        .name = c.name,
        .size = (uint32_t)c.size,
        .flags = (c.name[0] == '_' && c.name[1] == 'Z') ? SYM_MANGLED : 0};
  }
  sym_entry *shrunk = realloc(syms, out * sizeof *syms);
  f->syms = shrunk ? shrunk : syms;
  b->v = NULL; /* f->syms now */
  b->n = b->cap = 0;
  f->nsyms = out;
  f->strtabs = b->strtabs;
  f->nstrtabs = b->nstrtabs;
  f->strtab_bytes = b->strtab_bytes;
  b->strtabs = NULL;
  b->nstrtabs = b->strtabs_cap = b->strtab_bytes = 0;
  return 0;
}

/* ---- Symbol tables ------------------------------------------------------- */

#define PAGE_INDEX_SHIFT 12
#define PAGE_INDEX_MAX ((size_t)1 << 16) /* pages: a 256 MiB span */

/* f->page_first over the span of f's symbols; left NULL when it would be
 * larger than PAGE_INDEX_MAX entries or memory runs out (lookups then
 * search the whole table). */
static void build_page_index(elf_file *f) {
  f->page_first = NULL;
  f->npages = 0;
  if (f->nsyms == 0 || f->nsyms > UINT32_MAX)
    return;
  uint64_t lo = f->syms[0].start >> PAGE_INDEX_SHIFT << PAGE_INDEX_SHIFT;
  uint64_t last = (f->syms[f->nsyms - 1].start - lo) >> PAGE_INDEX_SHIFT;
  if (last >= PAGE_INDEX_MAX)
    return;
  size_t npages = (size_t)last + 1;
  uint32_t *first = malloc(npages * sizeof *first);
  if (!first)
    return;
  size_t i = 0;
  for (size_t k = 0; k < npages; k++) {
    uint64_t page = lo + ((uint64_t)k << PAGE_INDEX_SHIFT);
    while (i < f->nsyms && f->syms[i].start < page)
      i++;
    first[k] = (uint32_t)i;
  }
  f->page_first = first;
  f->page_lo = lo;
  f->npages = npages;
}

/* Frees f's table: its entries, their demangled names, its string tables. */
static void file_drop_names(elf_file *f) {
  for (size_t i = 0; i < f->nsyms; i++)
    if (f->syms[i].flags & SYM_OWNED)
      free((char *)f->syms[i].name);
  for (size_t i = 0; i < f->nstrtabs; i++)
    free(f->strtabs[i]);
  free(f->strtabs);
  free(f->syms);
  f->strtabs = NULL;
  f->nstrtabs = f->strtab_bytes = 0;
  f->syms = NULL;
  f->nsyms = 0;
  for (size_t i = 0; f->plt_syms && i < f->plt.n; i++)
    if (f->plt_syms[i].flags & SYM_OWNED)
      free((char *)f->plt_syms[i].name);
  free(f->plt_syms);
  f->plt_syms = NULL;
  cp_plt_free(&f->plt);
}

static void file_free(elf_file *f) {
  symbols.table_bytes -= f->bytes;
  file_drop_names(f);
  for (size_t i = 0; i < f->nranges; i++) {
    if (f->ranges[i].sym.flags & SYM_OWNED)
      free((char *)f->ranges[i].sym.name);
    free(f->ranges[i].raw);
  }
  free(f->ranges);
  free(f->open_path);
  free(f->path);
  free(f->page_first);
  free(f->loads);
  free(f);
}

static void file_unref(elf_file *f);

/* Drops the table of f from every mapping: current ones read it again when
 * next used, unloaded ones (whose file may be gone) keep no names. Only for
 * tables no live generation uses. */
static void evict_locked(elf_file *f) {
  f->refs++; /* alive until every mapping has let go */
  if (f->kept_for_files) {
    f->kept_for_files = 0;
    file_unref(f);
  }
  for (size_t i = 0; i < symbols.nmaps; i++) {
    map_rec *m = symbols.maps[i];
    if (m->file == f) {
      m->file = NULL;
      m->file_read = 0;
      m->pub.build_id = "";
      file_unref(f);
    }
  }
  for (map_rec *m = symbols.retired; m; m = m->next_retired) {
    if (m->file == f) {
      m->file = NULL;
      m->pub.build_id = "";
      file_unref(f);
    }
  }
  file_unref(f);
}

/* Evicts least recently used tables that no live generation uses until
 * `need` more bytes fit in the budget, or none is left to evict. */
static void make_room_locked(size_t need) {
  if (need > symbols.budget)
    need = symbols.budget;
  while (symbols.table_bytes + need > symbols.budget) {
    elf_file *victim = NULL;
    for (elf_file *f = symbols.files; f; f = f->next)
      if ((f->last_used_gen < symbols.oldest_live_gen ||
           (f->kept_for_files && f->refs == 1)) &&
          (!victim || f->last_used_tick < victim->last_used_tick))
        victim = f;
    if (!victim)
      return;
    cp_debug("symbols: dropping a table of %zu kB (CONTPROF_SYMBOLS_MAX_MB)",
             victim->bytes >> 10);
    evict_locked(victim);
  }
}

/* The symbol sections a table of r is built from, in its order: r's
 * .symtab, else its debug file's (docs/symbols.md, "Where debug
 * information comes from"), then r's .dynsym; with dynsym_only, r's .dynsym
 * alone. The table (file_build_table), what it would cost (build_estimate) and
 * a scan (scan_image) all read this one list: a scan names an address as the
 * table would only when both read the same sections. */
typedef struct table_sources {
  cp_elf_symbols secs[TABLE_MAX_SOURCES];
  size_t n;
  uint64_t bytes; /* of their symbols and string tables */
  cp_elf_reader dbg;
  cp_own_fd dbg_own;
  int has_dbg; /* dbg is open (secs may point into it) */
} table_sources;

static void sources_add(table_sources *s, const cp_elf_reader *r,
                        uint32_t type) {
  for (size_t i = 0; i < r->shnum && s->n < TABLE_MAX_SOURCES; i++) {
    const cp_elf_shdr *sh = &r->shdrs[i];
    if (sh->sh_type == type && sh->sh_size > 0 &&
        cp_elf_symbols_of(r, sh, &s->secs[s->n]) == 0) {
      s->bytes += sh->sh_size + s->secs[s->n].str_size;
      s->n++;
    }
  }
}

/* Fills *s for r (the file at path, NULL for a memory image, with build id
 * build_id); sources_close after. Not to be copied: secs point into it. */
static void sources_open(table_sources *s, const cp_elf_reader *r,
                         const char *path, const char *build_id,
                         int dynsym_only) {
  s->n = 0;
  s->bytes = 0;
  s->has_dbg = 0;
  if (!dynsym_only) {
    int symtab = 0;
    for (size_t i = 0; i < r->shnum; i++)
      symtab |= r->shdrs[i].sh_type == SHT_SYMTAB && r->shdrs[i].sh_size > 0;
    if (symtab) {
      sources_add(s, r, SHT_SYMTAB);
    } else if (cp_elf_open_debug(r, path, build_id, &s->dbg, &s->dbg_own)) {
      s->has_dbg = 1;
      sources_add(s, &s->dbg, SHT_SYMTAB); /* its .dynsym has no contents */
    }
  }
  sources_add(s, r, SHT_DYNSYM);
}

static void sources_close(table_sources *s) {
  if (s->has_dbg)
    cp_elf_close_debug(&s->dbg, &s->dbg_own);
  s->has_dbg = 0;
  s->n = 0;
}

/* The sources of r's table as file_build_table takes them: none while
 * function names are off (CONTPROF_SYMBOLIZE), else sources_open's. */
static void table_sources_open(table_sources *s, const cp_elf_reader *r,
                               const char *path, const char *build_id) {
  if (__atomic_load_n(&names_off, __ATOMIC_RELAXED)) {
    s->n = 0;
    s->bytes = 0;
    s->has_dbg = 0;
    return;
  }
  sources_open(s, r, path, build_id, 0);
}

/* What building a table from s would cost: its symbols and names at
 * CP_SYMBOLS_BUILD_NS_PER_BYTE (a stripped library of a distribution with
 * its debug package: libc's debug file's .symtab is four times its own
 * .dynsym). */
static uint64_t build_estimate(const table_sources *s) {
  return s->bytes * CP_SYMBOLS_BUILD_NS_PER_BYTE;
}

/* f's PLT stubs from r, named (elf_plt.h), looked up before its table
 * (file_name). Built with a table that has names: the same symbols a
 * budget too small for a table leaves out. Out of memory: none. */
static void file_build_plt(elf_file *f, const cp_elf_reader *r) {
  cp_plt_stubs st;
  if (cp_elf_plt_stubs(r, &st) != 0 || st.n == 0) {
    cp_plt_free(&st);
    return;
  }
  sym_entry *v = malloc(st.n * sizeof *v);
  if (!v) {
    cp_plt_free(&st);
    return;
  }
  for (size_t i = 0; i < st.n; i++) {
    const char *name = st.names + st.v[i].name;
    v[i] = (sym_entry){.start = st.v[i].start,
                       .name = name,
                       .size = st.v[i].size,
                       .flags = (name[0] == '_' && name[1] == 'Z') ? SYM_MANGLED
                                                                   : 0};
  }
  f->plt = st;
  f->plt_syms = v;
}

/* Building one table (its sections read whole, a sorting buffer) may take
 * the budget again, and at least this: a small budget bounds what is kept,
 * not whether a library's table can be built at all. */
#define MIN_BUILD_BYTES ((size_t)64 << 20)

/* Builds f's table from r (path, NULL for memory images, locates debug
 * files) and src, its sources (table_sources_open, closed here), within
 * the symbol budget: when .symtab (with .dynsym) does not fit, .dynsym
 * alone; when that does not either, no symbols (the build id and segments
 * still serve module+offset). began: the thread's CPU clock before src was
 * opened (the build's cost, spent). 0, or -1 (out of memory). */
static int file_build_table(elf_file *f, const cp_elf_reader *r,
                            const char *path, table_sources *src,
                            uint64_t began) {
  cp_debug("symbols: pid %d reads the symbol table of %s", (int)getpid(),
           path ? path : "[vdso]");
  size_t fixed = f->bytes;
  uint64_t est = src->bytes; /* at most what the table keeps */
  make_room_locked(est > SIZE_MAX - fixed ? SIZE_MAX : (size_t)est + fixed);
  size_t room = symbols.budget > symbols.table_bytes
                    ? symbols.budget - symbols.table_bytes
                    : 0;
  size_t build =
      symbols.budget > MIN_BUILD_BYTES ? symbols.budget : MIN_BUILD_BYTES;
  room = room > fixed ? room - fixed : 0;
  sym_builder b = {.limit = build, .table_room = room};
  int named = !__atomic_load_n(&names_off, __ATOMIC_RELAXED);
  if (src->has_dbg)
    cp_debug("symbols: the functions of %s from its debug file", path);
  for (size_t i = 0; i < src->n; i++)
    collect_symbols(&src->secs[i], &b);
  sources_close(src);
  int rc = b.failed ? -1 : b.over ? -2 : build_table(&b, f);
  if (rc == -2) {
    /* Too big with .symtab: the exported functions alone. */
    file_drop_names(f);
    builder_free(&b);
    b = (sym_builder){.limit = build, .table_room = room};
    table_sources dyn;
    sources_open(&dyn, r, path, f->build_id, 1);
    for (size_t i = 0; i < dyn.n; i++)
      collect_symbols(&dyn.secs[i], &b);
    sources_close(&dyn);
    rc = b.failed ? -1 : b.over ? -2 : build_table(&b, f);
    uint64_t now = cp_monotonic_ns();
    if (now - symbols.last_budget_warn_ns >= 60000000000ull ||
        !symbols.last_budget_warn_ns) {
      symbols.last_budget_warn_ns = now;
      cp_warn("symbols: the symbol table of %s does not fit in "
              "CONTPROF_SYMBOLS_MAX_MB (%zu MiB, %zu kB left): %s",
              path ? path : "[vdso]", symbols.budget >> 20, room >> 10,
              rc == -2 ? "its functions are shown as module+offset"
                       : "only its exported functions are named");
    }
    if (rc == -2) {
      file_drop_names(f);
      rc = 0;
      named = 0;
    }
  }
  builder_free(&b);
  if (rc == 0 && named)
    file_build_plt(f, r);
  if (rc == 0) {
    build_page_index(f);
    size_t table = f->nsyms * sizeof *f->syms +
                   f->npages * sizeof *f->page_first + f->strtab_bytes +
                   f->plt.n * (sizeof *f->plt.v + sizeof *f->plt_syms) +
                   f->plt.names_bytes;
    f->bytes += table;
    symbols.table_bytes += table;
  }
  spend(cp_clock_ns(CLOCK_THREAD_CPUTIME_ID) - began);
  return rc;
}

/* Parses an ELF image: its build id, its segments and, unless may_defer and
 * the build gate puts it off, its table (file_build_table). path: as
 * there. Returns a file with refs == 1, or NULL when the image is not
 * usable ELF. */
static elf_file *file_parse(cp_elf_reader *r, const char *path, int may_defer) {
  if (cp_elf_open(r) != 0) {
    cp_elf_close(r);
    return NULL;
  }
  elf_file *f = calloc(1, sizeof *f);
  if (!f)
    goto fail;
  f->refs = 1;
  cp_elf_build_id(r, f->build_id);

  f->loads = calloc(r->phnum ? r->phnum : 1, sizeof *f->loads);
  if (!f->loads)
    goto fail;
  for (size_t i = 0; i < r->phnum; i++) {
    const cp_elf_phdr *ph = &r->phdrs[i];
    if (ph->p_type == PT_LOAD)
      f->loads[f->nloads++] = (load_segment){
          ph->p_offset, ph->p_vaddr, ph->p_filesz, ph->p_memsz, ph->p_flags};
  }
  f->bytes = sizeof *f + (r->phnum ? r->phnum : 1) * sizeof *f->loads;
  symbols.table_bytes += f->bytes;

  /* One opening of the table's sources (its debug file's, perhaps) for
   * both the gate's estimate and the build. */
  uint64_t began = cp_clock_ns(CLOCK_THREAD_CPUTIME_ID);
  table_sources src;
  table_sources_open(&src, r, path, f->build_id);
  if (may_defer && path && !__atomic_load_n(&names_off, __ATOMIC_RELAXED)) {
    uint64_t est = build_estimate(&src);
    if (!build_allowed(est)) {
      sources_close(&src);
      f->table_deferred = 1;
      f->build_estimate_ns = est;
      cp_elf_close(r);
      return f;
    }
  }
  if (file_build_table(f, r, path, &src, began) != 0)
    goto fail;
  cp_elf_close(r);
  return f;

fail:
  cp_elf_close(r);
  if (f)
    file_free(f);
  return NULL;
}

static void file_unref(elf_file *f) {
  if (!f || --f->refs > 0)
    return;
  if (f->cached) {
    elf_file **p = &symbols.files;
    while (*p && *p != f)
      p = &(*p)->next;
    if (*p)
      *p = f->next;
  }
  file_free(f);
}

/* Whether st is the file f was read from. */
static int same_file(const elf_file *f, const struct stat *st) {
  return f->dev == st->st_dev && f->ino == st->st_ino &&
         f->size == st->st_size && f->mtime.tv_sec == st->st_mtim.tv_sec &&
         f->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

/* The symbol table of the file at path (open_path is what to open, which may
 * be a /proc/self/map_files link), from the cache or freshly parsed (its
 * table possibly put off). Takes a reference. NULL when unreadable or not
 * ELF. */
static elf_file *file_get(const char *open_path, const char *path) {
  struct stat st;
  cp_own_fd own;
  int fd = cp_own_open_regular(&own, open_path, &st);
  if (fd < 0) {
    cp_debug("symbols: cannot open %s: %s", open_path, strerror(errno));
    return NULL;
  }
  for (elf_file *f = symbols.files; f; f = f->next) {
    if (same_file(f, &st)) {
      cp_own_close(&own);
      f->refs++;
      return f;
    }
  }
  cp_elf_reader r = {.fd = fd, .size = (uint64_t)st.st_size};
  elf_file *f = file_parse(&r, path, 1);
  cp_own_close(&own);
  if (!f) {
    cp_debug("symbols: %s is not a usable ELF file", path);
    return NULL;
  }
  if (f->table_deferred) {
    f->open_path = strdup(open_path);
    f->path = strdup(path);
    if (!f->open_path || !f->path) {
      file_unref(f);
      return NULL;
    }
    cp_debug("symbols: pid %d puts off the symbol table of %s (about %llu "
             "us): over the cap of its CPU so far",
             (int)getpid(), path,
             (unsigned long long)(f->build_estimate_ns / 1000));
  }
  f->dev = st.st_dev;
  f->ino = st.st_ino;
  f->size = st.st_size;
  f->mtime = st.st_mtim;
  f->cached = 1;
  f->next = symbols.files;
  symbols.files = f;
  return f;
}

/* f opened again into *r (its descriptor in *own): 0, or -1 when it cannot
 * be opened or is no longer the file it was. */
static int file_reopen(const elf_file *f, cp_elf_reader *r, cp_own_fd *own) {
  struct stat st;
  int fd = cp_own_open_regular(own, f->open_path, &st);
  if (fd < 0)
    return -1;
  *r = (cp_elf_reader){.fd = fd, .size = (uint64_t)st.st_size};
  if (!same_file(f, &st) || cp_elf_open(r) != 0) {
    cp_elf_close(r);
    cp_own_close(own);
    return -1;
  }
  return 0;
}

/* Builds the table put off for f. */
static void file_build_deferred(elf_file *f) {
  f->table_deferred = 0;
  cp_elf_reader r;
  cp_own_fd own;
  if (file_reopen(f, &r, &own) != 0)
    return; /* gone or changed: its addresses stay unnamed */
  uint64_t began = cp_clock_ns(CLOCK_THREAD_CPUTIME_ID);
  table_sources src;
  table_sources_open(&src, &r, f->path, f->build_id);
  if (file_build_table(f, &r, f->path, &src, began) != 0)
    file_drop_names(f); /* out of memory: no names */
  cp_elf_close(&r);
  cp_own_close(&own);
}

/* Narrows [*lo, *hi), a scan's range around a (in no stub of plt), to the
 * stubs on either side of a. */
static void clip_to_stubs(const cp_plt_stubs *plt, uint64_t a, uint64_t *lo,
                          uint64_t *hi) {
  size_t l = cp_plt_after(plt, a);
  if (l > 0) {
    uint64_t end = plt->v[l - 1].start + plt->v[l - 1].size;
    if (end > *lo)
      *lo = end;
  }
  if (l < plt->n && plt->v[l].start < *hi)
    *hi = plt->v[l].start;
}

/* Names addrs[0..n) (sorted, distinct) of the image r (the file at path,
 * with build id build_id) from the symbol sections its table would be
 * built from, by one scan: cp_scan_names. */
static int scan_symbols(const cp_elf_reader *r, const char *path,
                        const char *build_id, const uint64_t *addrs, size_t n,
                        cp_scan_answer *ans) {
  table_sources src;
  sources_open(&src, r, path, build_id, 0);
  int rc = cp_scan_names(src.secs, src.n, addrs, n, ans);
  sources_close(&src);
  return rc;
}

/* Names addrs[0..n) (sorted, distinct) of the image r as its table would:
 * those in a PLT stub after it, the others by scan_symbols. 0, or -1 (a
 * failed read). */
static int scan_image(const cp_elf_reader *r, const char *path,
                      const char *build_id, const uint64_t *addrs, size_t n,
                      cp_scan_answer *ans) {
  /* The PLT stubs first, as file_name looks them up before the table. */
  cp_plt_stubs plt = {0};
  if (cp_elf_plt_holds_any(r, addrs, n) && cp_elf_plt_stubs(r, &plt) != 0)
    return -1;
  if (plt.n == 0) /* no address in a PLT section: the usual scan */
    return scan_symbols(r, path, build_id, addrs, n, ans);
  for (size_t i = 0; i < n; i++)
    ans[i] = (cp_scan_answer){0};
  uint64_t *rest = malloc((n ? n : 1) * sizeof *rest);
  size_t *at = malloc((n ? n : 1) * sizeof *at);
  cp_scan_answer *sub = calloc(n ? n : 1, sizeof *sub);
  int rc = rest && at && sub ? 0 : -1;
  size_t k = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    const cp_plt_stub *s = cp_plt_find(&plt, addrs[i]);
    if (!s) {
      rest[k] = addrs[i];
      at[k++] = i;
      continue;
    }
    ans[i] = (cp_scan_answer){.known = 1,
                              .lo = s->start,
                              .hi = s->start + s->size,
                              .start = s->start,
                              .name = strdup(plt.names + s->name)};
    if (!ans[i].name)
      rc = -1;
  }
  if (rc == 0 && k > 0) {
    rc = scan_symbols(r, path, build_id, rest, k, sub);
    for (size_t j = 0; j < k && rc == 0; j++) {
      /* What holds for [lo, hi) holds only up to the stubs around it. */
      if (sub[j].known)
        clip_to_stubs(&plt, rest[j], &sub[j].lo, &sub[j].hi);
      ans[at[j]] = sub[j];
    }
  }
  if (rc != 0)
    for (size_t i = 0; i < n; i++) {
      free(ans[i].name);
      ans[i] = (cp_scan_answer){0};
    }
  free(rest);
  free(at);
  free(sub);
  cp_plt_free(&plt);
  return rc;
}

/* The range of f's scans holding address a, or NULL. */
static scan_range *range_find(const elf_file *f, uint64_t a) {
  size_t lo = 0, hi = f->nranges; /* first range starting above a */
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (f->ranges[mid].lo <= a)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo > 0 && a < f->ranges[lo - 1].hi)
    return &f->ranges[lo - 1];
  return NULL;
}

/* Keeps what a scan found (takes ans->name). Ranges of one file are the
 * same or disjoint (the symbols' addresses and ends cut them). */
static void range_add(elf_file *f, cp_scan_answer *ans) {
  if (range_find(f, ans->lo) || ans->hi <= ans->lo) {
    free(ans->name);
    return;
  }
  scan_range *v = cp_grow_array(f->ranges, &f->ranges_cap, f->nranges + 1,
                                sizeof *f->ranges);
  if (!v) {
    free(ans->name);
    return;
  }
  f->ranges = v;
  size_t i = f->nranges;
  while (i > 0 && v[i - 1].lo > ans->lo) {
    v[i] = v[i - 1];
    i--;
  }
  v[i] = (scan_range){
      .lo = ans->lo,
      .hi = ans->hi,
      .sym = {.start = ans->start,
              .name = ans->name,
              .size = 0,
              .flags = ans->name && ans->name[0] == '_' && ans->name[1] == 'Z'
                           ? SYM_MANGLED
                           : 0},
      .raw = ans->name};
  f->nranges++;
  size_t add = sizeof *v + (ans->name ? strlen(ans->name) + 1 : 0);
  f->bytes += add;
  symbols.table_bytes += add;
}

/* Names addrs[0..n) (sorted, distinct, none in a range yet) of f by one
 * scan; an address the scan leaves to the table marks f for building. */
static void file_scan(elf_file *f, const uint64_t *addrs, size_t n) {
  uint64_t began = cp_clock_ns(CLOCK_THREAD_CPUTIME_ID);
  cp_elf_reader r;
  cp_own_fd own;
  cp_scan_answer *ans = calloc(n, sizeof *ans);
  if (!ans || file_reopen(f, &r, &own) != 0) {
    free(ans);
    f->scan_undecided = 1;
    return;
  }
  size_t named = 0;
  if (scan_image(&r, f->path, f->build_id, addrs, n, ans) != 0) {
    f->scan_undecided = 1;
  } else {
    for (size_t i = 0; i < n; i++) {
      if (!ans[i].known) {
        f->scan_undecided = 1;
        continue;
      }
      named += ans[i].name != NULL;
      range_add(f, &ans[i]);
    }
  }
  cp_elf_close(&r);
  cp_own_close(&own);
  free(ans);
  uint64_t took = cp_clock_ns(CLOCK_THREAD_CPUTIME_ID) - began;
  /* Not counted against the gate's allowance: names are given whatever
   * the cap, and a file's scans stop at its table's cost (build_due). */
  f->scan_spent_ns += took;
  __atomic_add_fetch(&scans, 1, __ATOMIC_RELAXED);
  cp_debug("symbols: pid %d named %zu of %zu addresses of %s by a scan (%llu "
           "us)%s",
           (int)getpid(), named, n, f->path, (unsigned long long)(took / 1000),
           f->scan_undecided ? "; its table decides the rest" : "");
}

static sym_entry *file_find(const elf_file *f, uint64_t elf_address);
static sym_entry *plt_find(const elf_file *f, uint64_t elf_address);

/* Whether f's put-off table is to be built now: the gate allows it, the
 * scans have cost what it would, a scan could not tell, or its ranges are
 * many. */
static int build_due(const elf_file *f) {
  return f->scan_undecided || f->scan_spent_ns >= f->build_estimate_ns ||
         f->nranges >= SCAN_MAX_RANGES || build_allowed(f->build_estimate_ns);
}

/* Makes sure f can name addrs[0..n) (any order): builds its put-off table
 * when due, else scans for those no range holds. */
static void file_prepare(elf_file *f, const uint64_t *addrs, size_t n) {
  if (!f->table_deferred)
    return;
  uint64_t want[CP_SCAN_MAX];
  size_t k = 0;
  for (size_t i = 0; i < n && k <= CP_SCAN_MAX; i++) {
    if (range_find(f, addrs[i]))
      continue;
    if (k == CP_SCAN_MAX) {
      k++; /* too many for one scan */
      break;
    }
    want[k++] = addrs[i];
  }
  if (k == 0)
    return;
  if (k <= CP_SCAN_MAX && !build_due(f)) {
    qsort(want, k, sizeof *want, cmp_u64);
    size_t d = 0;
    for (size_t i = 0; i < k; i++)
      if (d == 0 || want[d - 1] != want[i])
        want[d++] = want[i];
    file_scan(f, want, d);
    if (!f->scan_undecided)
      return;
  }
  file_build_deferred(f);
}

/* The symbol covering elf_address in f: from its scans' ranges, or its
 * table (file_prepare first). */
static sym_entry *file_name(elf_file *f, uint64_t elf_address) {
  /* A range's answer is the table's: kept after the table is built (or
   * could not be, the file gone), and the names given stay the same. */
  scan_range *r = f->nranges ? range_find(f, elf_address) : NULL;
  if (r)
    return r->sym.name ? &r->sym : NULL;
  sym_entry *stub = plt_find(f, elf_address);
  if (stub)
    return stub;
  return f->table_deferred ? NULL : file_find(f, elf_address);
}

/* The PLT stub of f holding elf_address, or NULL. */
static sym_entry *plt_find(const elf_file *f, uint64_t elf_address) {
  const cp_plt_stub *s = cp_plt_find(&f->plt, elf_address);
  return s ? &f->plt_syms[s - f->plt.v] : NULL;
}

/* The symbol covering elf_address, or NULL. */
static sym_entry *file_find(const elf_file *f, uint64_t elf_address) {
  size_t lo = 0, hi = f->nsyms; /* first symbol starting after the address */
  if (f->page_first && elf_address >= f->page_lo) {
    uint64_t k = (elf_address - f->page_lo) >> PAGE_INDEX_SHIFT;
    if (k < f->npages) {
      lo = f->page_first[k];
      if (k + 1 < f->npages)
        hi = f->page_first[k + 1];
    } else {
      lo = f->page_first[f->npages - 1];
    }
  }
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (f->syms[mid].start <= elf_address)
      lo = mid + 1;
    else
      hi = mid;
  }
  for (size_t i = lo, seen = 0; i > 0 && seen < NESTED_LOOKBACK; i--, seen++) {
    sym_entry *s = &f->syms[i - 1];
    if (elf_address - s->start < s->size)
      return s;
  }
  return NULL;
}

/* ---- Mappings ------------------------------------------------------------ */

static const char deleted_suffix[] = " (deleted)";

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* elf_address = pc - start + file_offset - p_offset + p_vaddr, with the
 * PT_LOAD segment holding the mapping's file offset (an executable one when
 * page rounding makes two candidates). Without one, the file offset. */
static void map_compute_delta(map_rec *m) {
  const load_segment *best = NULL;
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  uint64_t off = m->pub.file_offset;
  for (size_t i = 0; m->file && i < m->file->nloads; i++) {
    const load_segment *s = &m->file->loads[i];
    uint64_t first = s->offset & ~(page - 1);
    if (s->filesz > 0 && off >= first &&
        off - first < s->filesz + (s->offset - first) &&
        (!best || ((s->flags & PF_X) && !(best->flags & PF_X))))
      best = s;
  }
  uint64_t delta = off - m->pub.start;
  if (best)
    delta += best->vaddr - best->offset;
  m->elf_delta = delta;
}

static elf_file *map_load_file(const map_rec *m) {
  if (strcmp(m->path, "[vdso]") == 0) {
    /* The kernel's image lives only in memory, mapped readable here. */
    cp_elf_reader r = {.fd = -1,
                       .memory = (const unsigned char *)(uintptr_t)m->pub.start,
                       .size = m->pub.limit - m->pub.start};
    return file_parse(&r, NULL, 0);
  }
  if (m->path[0] != '/')
    return NULL;
  if (ends_with(m->path, deleted_suffix)) {
    /* Still readable through map_files where we are privileged enough. */
    char link[64], *path = strdup(m->path);
    if (!path)
      return NULL;
    path[strlen(path) - strlen(deleted_suffix)] = '\0';
    snprintf(link, sizeof link, "/proc/self/map_files/%llx-%llx",
             (unsigned long long)m->pub.start,
             (unsigned long long)m->pub.limit);
    elf_file *f = file_get(link, path);
    free(path);
    return f;
  }
  return file_get(m->path, m->path);
}

static void map_free(map_rec *m) {
  file_unref(m->file);
  free(m->path);
  free(m);
}

/* One /proc/self/maps line; path is malloc'd. */
typedef struct maps_line {
  uint64_t start, limit, offset, dev, inode;
  char *path;
} maps_line;

/* Parses "start-limit perms offset major:minor inode   path". Returns 1 for
 * an executable mapping of a file or of the vdso (filling *out), else 0. */
static int parse_maps_line(char *line, maps_line *out) {
  char perms[5];
  unsigned major, minor;
  unsigned long long start, limit, offset, inode;
  int path_at = 0;
  if (sscanf(line, "%llx-%llx %4s %llx %x:%x %llu %n", &start, &limit, perms,
             &offset, &major, &minor, &inode, &path_at) < 7 ||
      path_at == 0 || perms[2] != 'x' || limit <= start)
    return 0;
  char *path = line + path_at;
  path[strcspn(path, "\n")] = '\0';
  /* Files are read from disk, so execute-only mappings of them count; the
   * vdso is read from its mapping. Anonymous (JIT) code and [vsyscall] have
   * no symbols to offer. */
  if (path[0] != '/' && (strcmp(path, "[vdso]") != 0 || perms[0] != 'r'))
    return 0;
  *out = (maps_line){start, limit, offset, makedev(major, minor), inode, NULL};
  out->path = strdup(path);
  return out->path != NULL;
}

static int maps_line_cmp(const void *pa, const void *pb) {
  const maps_line *a = pa, *b = pb;
  return a->start < b->start ? -1 : a->start > b->start;
}

static size_t find_map_index(uint64_t pc) {
  size_t lo = 0, hi = symbols.nmaps; /* first mapping starting after pc */
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (symbols.maps[mid]->pub.start <= pc)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo; /* the candidate is lo - 1 */
}

static map_rec *find_map(uint64_t pc) {
  size_t i = find_map_index(pc);
  if (i == 0 || pc >= symbols.maps[i - 1]->pub.limit)
    return NULL;
  return symbols.maps[i - 1];
}

static map_rec *map_create(maps_line *l) {
  map_rec *m = calloc(1, sizeof *m);
  if (!m)
    return NULL;
  m->pub.start = l->start;
  m->pub.limit = l->limit;
  m->pub.file_offset = l->offset;
  m->pub.path = m->path = l->path;
  l->path = NULL;
  m->dev = l->dev;
  m->inode = l->inode;
  m->pub.build_id = "";
  return m;
}

/* Reads the mapping's file the first time a pc in it is looked up: a
 * process that never symbolizes (one that lives too short for a sample)
 * never reads a symbol table. */
static void map_read_file(map_rec *m) {
  if (m->file_read)
    return;
  m->file_read = 1;
  symbols.prepare_pending = 1;
  m->file = map_load_file(m);
  m->pub.build_id = m->file ? m->file->build_id : "";
  if (m->file)
    snprintf(m->build_id, sizeof m->build_id, "%s", m->file->build_id);
  map_compute_delta(m);
}

/* Re-reads /proc/self/maps: keeps records of unchanged mappings, creates
 * records for new ones and retires the vanished ones (sets
 * change_pending). Returns 0 or -1. */
static int read_maps_locked(void) {
  cp_own_fd own = CP_OWN_FD_NONE;
  size_t len = 0;
  char *text = NULL;
  if (cp_own_open(&own, AT_FDCWD, "/proc/self/maps", O_RDONLY, 0, NULL) >= 0)
    text = cp_own_read_all(&own, MAX_MAPS_BYTES, &len);
  int err = errno;
  cp_own_close(&own);
  if (!text) {
    if (!symbols.maps_warned)
      cp_warn("symbols: cannot read /proc/self/maps: %s", strerror(err));
    symbols.maps_warned = 1;
    return -1;
  }
  maps_line *lines = NULL;
  size_t nlines = 0, cap = 0;
  int rc = 0;
  for (char *line = text, *end; line < text + len; line = end + 1) {
    end = memchr(line, '\n', (size_t)(text + len - line));
    if (!end)
      end = text + len;
    *end = '\0';
    maps_line l;
    if (!parse_maps_line(line, &l))
      continue;
    maps_line *grown = cp_grow_array(lines, &cap, nlines + 1, sizeof *lines);
    if (!grown) {
      free(l.path);
      rc = -1;
      break;
    }
    lines = grown;
    lines[nlines++] = l;
  }
  free(text);

  map_rec **maps = rc == 0 ? calloc(nlines ? nlines : 1, sizeof *maps) : NULL;
  unsigned char *kept = calloc(symbols.nmaps ? symbols.nmaps : 1, 1);
  if (!maps || !kept) {
    rc = -1;
    goto out;
  }
  qsort(lines, nlines, sizeof *lines, maps_line_cmp);
  size_t nmaps = 0;
  for (size_t i = 0; i < nlines; i++) {
    maps_line *l = &lines[i];
    size_t j = find_map_index(l->start);
    map_rec *old = j > 0 ? symbols.maps[j - 1] : NULL;
    if (old && !kept[j - 1] && old->pub.start == l->start &&
        old->pub.limit == l->limit && old->pub.file_offset == l->offset &&
        old->dev == l->dev && old->inode == l->inode &&
        strcmp(old->path, l->path) == 0) {
      kept[j - 1] = 1;
      maps[nmaps++] = old;
    } else if ((maps[nmaps] = map_create(l)) != NULL) {
      nmaps++;
      symbols.change_pending = 1;
    }
  }
  for (size_t i = 0; i < symbols.nmaps; i++) {
    if (kept[i])
      continue;
    map_rec *gone = symbols.maps[i];
    cp_debug("symbols: %s unmapped", gone->path);
    /* Samples taken before the unmap still name it: read it while the
     * file is surely still there. */
    map_read_file(gone);
    gone->next_retired = symbols.retired;
    symbols.retired = gone;
    symbols.change_pending = 1;
  }
  free(symbols.maps);
  symbols.maps = maps;
  symbols.nmaps = nmaps;
  maps = NULL;

out:
  for (size_t i = 0; i < nlines; i++)
    free(lines[i].path);
  free(lines);
  free(maps);
  free(kept);
  return rc;
}

/* ---- Change detection ---------------------------------------------------- */

static int dl_state_callback(struct dl_phdr_info *info, size_t size,
                             void *data) {
  dl_state *s = data;
  if (size >=
      offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
    s->has_counters = 1;
    s->adds = info->dlpi_adds;
    s->subs = info->dlpi_subs;
    return 1; /* the counters are global: the first object suffices */
  }
  /* Older C libraries: fingerprint the list of loaded objects. */
  s->fingerprint =
      (s->fingerprint ^ (uint64_t)info->dlpi_addr) * 1099511628211u;
  s->fingerprint =
      (s->fingerprint ^ (uint64_t)(uintptr_t)info->dlpi_phdr) * 1099511628211u;
  s->count++;
  return 0;
}

/* Re-reads the mappings when the loaded objects changed, or when force.
 * Returns 1 when they were re-read, 0 when not needed, -1 on error. */
static int refresh_locked(int force) {
  dl_state now = {0};
  /* Sampled before reading the maps: a load in between shows next time. */
  dl_iterate_phdr(dl_state_callback, &now);
  int changed = !symbols.have_dl_state ||
                now.has_counters != symbols.dl.has_counters ||
                now.adds != symbols.dl.adds || now.subs != symbols.dl.subs ||
                now.fingerprint != symbols.dl.fingerprint ||
                now.count != symbols.dl.count;
  if (!changed && !force)
    return 0;
  if (read_maps_locked() != 0)
    return -1;
  symbols.have_dl_state = 1;
  symbols.dl = now;
  return 1;
}

static int init_locked(void) {
  if (symbols.initialized)
    return 0;
  if (refresh_locked(1) < 0)
    return -1;
  __atomic_store_n(&symbols.initialized, 1, __ATOMIC_RELEASE);
  symbols.change_pending = 0; /* the first reading is no change */
  return 0;
}

/* A pc in no mapping: maybe a library was loaded since. */
static map_rec *refresh_for_miss_locked(uint64_t pc) {
  int r = refresh_locked(0);
  if (r == 0) {
    uint64_t now = cp_monotonic_ns();
    if (now - symbols.last_forced_read_ns < FORCED_MAPS_READ_INTERVAL_NS)
      return NULL;
    symbols.last_forced_read_ns = now;
    r = refresh_locked(1);
  }
  return r > 0 ? find_map(pc) : NULL;
}

/* ---- Public API ---------------------------------------------------------- */

/* Caller holds symbols_lock: the process that does (cp_symbols_reset). */
static void note_lock_owner(void) {
  if (!__atomic_load_n(&symbols_lock_pid, __ATOMIC_RELAXED))
    __atomic_store_n(&symbols_lock_pid, getpid(), __ATOMIC_RELAXED);
}

static void symbols_lock_acquire(void) {
  pthread_mutex_lock(&symbols_lock);
  note_lock_owner();
}

int cp_symbols_init(void) {
  symbols_lock_acquire();
  int rc = init_locked();
  pthread_mutex_unlock(&symbols_lock);
  return rc;
}

void cp_symbols_before_unload(void) {
  /* Never waits behind the drain thread (which may hold the lock for a
   * DWARF read): the caller is the application's dlclose. */
  if (pthread_mutex_trylock(&symbols_lock) != 0)
    return;
  note_lock_owner();
  if (symbols.initialized)
    refresh_locked(0); /* change_pending stays for the drain */
  else
    init_locked();
  pthread_mutex_unlock(&symbols_lock);
}

int cp_symbols_refresh(void) {
  symbols_lock_acquire();
  if (symbols.initialized)
    refresh_locked(0);
  else
    init_locked();
  int changed = symbols.change_pending;
  symbols.change_pending = 0;
  pthread_mutex_unlock(&symbols_lock);
  return changed;
}

/* The mapping of pc, under the lock: a current one, or an unloaded one not
 * yet collected (a sample taken just before dlclose), most recently retired
 * first; NULL in none. */
static map_rec *map_of_locked(uint64_t pc) {
  init_locked();
  map_rec *m = find_map(pc);
  if (!m)
    m = refresh_for_miss_locked(pc);
  for (map_rec *r = symbols.retired; !m && r; r = r->next_retired)
    if (pc >= r->pub.start && pc < r->pub.limit)
      m = r;
  return m;
}

/* Resolves pc in m, under the lock, reading m's file (or scanning it)
 * unless may_read is 0 (then returns 1 when that is needed). Returns 2 when
 * the lock was let go to resolve the demangler: the caller starts again. */
static int lookup_in_locked(map_rec *m, uint64_t pc, cp_symbol *out,
                            int may_read) {
  out->mapping = &m->pub;
  if (!m->file_read) {
    if (!may_read)
      return 1;
    map_read_file(m);
    /* A child of fork that reads a file its parent had not: the parent
     * reads it too, for the next child (fork_hints.h). */
    if (m->file)
      cp_fork_hints_put(pc, cp_fork_hints_path_hash(m->path));
  }
  out->elf_address = pc + m->elf_delta;
  if (m->file) {
    /* Not evicted before the caller marks its generation: at least as
     * recent as every live one. */
    m->file->last_used_tick = ++symbols.tick;
    if (m->file->last_used_gen < symbols.oldest_live_gen)
      m->file->last_used_gen = symbols.oldest_live_gen;
    if (m->file->table_deferred && !range_find(m->file, out->elf_address)) {
      if (!may_read)
        return 1;
      file_prepare(m->file, &out->elf_address, 1);
    }
  }
  sym_entry *s = m->file ? file_name(m->file, out->elf_address) : NULL;
  if (s && sym_needs_demangling(s) && !demangler_is_resolved()) {
    pthread_mutex_unlock(&symbols_lock);
    demangler_resolve();
    return 2; /* the tables may have changed meanwhile */
  }
  if (s) {
    sym_demangle(m->file, s);
    out->function = s->name;
  }
  return s ? 0 : -1;
}

/* pc resolved in `given`, or in its own mapping when given is NULL,
 * reading the mapping's file unless may_read is 0. */
static int lookup(map_rec *given, uint64_t pc, cp_symbol *out, int may_read) {
  for (;;) {
    *out = (cp_symbol){.mapping = NULL, .function = NULL, .elf_address = pc};
    symbols_lock_acquire();
    map_rec *m = given ? given : map_of_locked(pc);
    int rc = m ? lookup_in_locked(m, pc, out, may_read) : -1;
    if (rc == 2)
      continue;
    pthread_mutex_unlock(&symbols_lock);
    return rc;
  }
}

int cp_symbols_lookup(uint64_t pc, cp_symbol *out) {
  return lookup(NULL, pc, out, 1);
}

int cp_symbols_lookup_cached(uint64_t pc, cp_symbol *out) {
  return lookup(NULL, pc, out, 0);
}

int cp_symbols_lookup_in(const cp_mapping *mapping, uint64_t pc,
                         cp_symbol *out) {
  return lookup((map_rec *)((char *)mapping - offsetof(map_rec, pub)), pc, out,
                1);
}

void cp_symbols_lookup_batch(const cp_mapping *mapping, const uint64_t *pcs,
                             size_t n, const char **functions) {
  map_rec *m = (map_rec *)((char *)mapping - offsetof(map_rec, pub));
  for (size_t done = 0; done < n;) {
    size_t k = n - done < CP_SCAN_MAX ? n - done : CP_SCAN_MAX;
    uint64_t elf[CP_SCAN_MAX];
    symbols_lock_acquire();
    if (!m->file_read) {
      map_read_file(m);
      if (m->file) /* as lookup_in_locked */
        cp_fork_hints_put(pcs[done], cp_fork_hints_path_hash(m->path));
    }
    for (size_t i = 0; i < k; i++)
      elf[i] = pcs[done + i] + m->elf_delta;
    if (m->file)
      file_prepare(m->file, elf, k); /* one scan for the lot */
    pthread_mutex_unlock(&symbols_lock);
    for (size_t i = 0; i < k; i++) {
      cp_symbol sym;
      lookup(m, pcs[done + i], &sym, 1);
      functions[done + i] = sym.function;
    }
    done += k;
  }
}

void cp_symbols_mark_used(const cp_mapping *m, uint64_t gen) {
  if (!m)
    return;
  symbols_lock_acquire();
  map_rec *rec = (map_rec *)((char *)m - offsetof(map_rec, pub));
  if (gen && !rec->pub.last_used_generation)
    symbols.prepare_pending = 1;
  if (gen > rec->pub.last_used_generation)
    rec->pub.last_used_generation = gen;
  if (rec->file && gen > rec->file->last_used_gen)
    rec->file->last_used_gen = gen;
  pthread_mutex_unlock(&symbols_lock);
}

void cp_symbols_collect(uint64_t oldest_gen) {
  symbols_lock_acquire();
  if (oldest_gen > symbols.oldest_live_gen)
    symbols.oldest_live_gen = oldest_gen;
  map_rec **p = &symbols.retired;
  while (*p) {
    map_rec *m = *p;
    if (m->pub.last_used_generation < oldest_gen) {
      *p = m->next_retired;
      map_free(m);
    } else {
      p = &m->next_retired;
    }
  }
  pthread_mutex_unlock(&symbols_lock);
}

static void free_all_locked(void) {
  /* The tables cp_symbols_resolve_file keeps; file_unref edits the list. */
  for (elf_file *f = symbols.files; f;) {
    if (!f->kept_for_files) {
      f = f->next;
      continue;
    }
    f->kept_for_files = 0;
    file_unref(f);
    f = symbols.files; /* from the start: f may be gone */
  }
  for (size_t i = 0; i < symbols.nmaps; i++)
    map_free(symbols.maps[i]);
  free(symbols.maps);
  while (symbols.retired) {
    map_rec *m = symbols.retired;
    symbols.retired = m->next_retired;
    map_free(m);
  }
}

void cp_symbols_before_fork(void) {
  if (!__atomic_load_n(&names_off, __ATOMIC_RELAXED))
    cp_fork_hints_before_fork();
}

void cp_symbols_after_fork_parent(void) { cp_fork_hints_after_fork_parent(); }

/* In the child of a fork, call it before other threads use the module: it
 * tells a lock held by a thread lost in the fork by the lock's process. */
void cp_symbols_after_fork_child(void) {
  cp_fork_hints_after_fork_child();
  lines_read = lines_had = 0; /* the child's own from now on */
  __atomic_store_n(&spent_ns, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&scans, 0, __ATOMIC_RELAXED);
  /* Only the forking thread lives here. The lock was free at the fork: no
   * update was half done, and the tables describe this address space, the
   * parent's copied. They are kept, so that each child of a forking server
   * does not read its symbol tables again (docs/symbols.md, "fork"). */
  if (pthread_mutex_trylock(&symbols_lock) == 0) {
    __atomic_store_n(&symbols_lock_pid, getpid(), __ATOMIC_RELAXED);
    pthread_mutex_unlock(&symbols_lock);
    cp_debug("symbols: pid %d keeps the symbol tables of its parent",
             (int)getpid());
    return;
  }
  cp_debug("symbols: pid %d reads its symbol tables anew: a thread was "
           "updating them at the fork",
           (int)getpid());
  cp_symbols_reset(); /* held by a thread that is gone: made anew */
}

void cp_symbols_reset(void) {
  if (pthread_mutex_trylock(&symbols_lock) != 0) {
    pid_t owner = __atomic_load_n(&symbols_lock_pid, __ATOMIC_RELAXED);
    if (owner == 0 || owner == getpid()) {
      pthread_mutex_lock(&symbols_lock); /* a live thread of ours has it */
    } else {
      /* The child of a fork that happened while another thread held the
       * lock: that thread does not exist here and the tables may be
       * half-updated, so they are leaked rather than freed and the lock is
       * made anew. */
      size_t budget = symbols.budget;
      memset(&symbols, 0, sizeof symbols);
      symbols.budget = budget;
      pthread_mutex_init(&symbols_lock, NULL);
      __atomic_store_n(&symbols_lock_pid, 0, __ATOMIC_RELAXED);
      return;
    }
  }
  free_all_locked();
  size_t budget = symbols.budget;
  memset(&symbols, 0, sizeof symbols);
  symbols.budget = budget;
  __atomic_store_n(&symbols_lock_pid, 0, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&symbols_lock);
}

int cp_symbols_resolve_file(const char *path, uint64_t elf_address,
                            char *function, size_t function_size,
                            char *build_id, size_t build_id_size) {
  demangler_resolve();
  if (function_size)
    function[0] = '\0';
  if (build_id_size)
    build_id[0] = '\0';
  symbols_lock_acquire();
  elf_file *f = file_get(path, path);
  if (f && !f->kept_for_files) {
    f->kept_for_files = 1;
    f->refs++;
  }
  if (f) {
    f->last_used_tick = ++symbols.tick;
    file_prepare(f, &elf_address, 1);
  }
  sym_entry *s = f ? file_name(f, elf_address) : NULL;
  if (s)
    sym_demangle(f, s);
  if (s && function_size)
    snprintf(function, function_size, "%s", s->name);
  if (f && build_id_size)
    snprintf(build_id, build_id_size, "%s", f->build_id);
  file_unref(f);
  pthread_mutex_unlock(&symbols_lock);
  return s ? 0 : -1;
}

int cp_symbols_scan_file(const char *path, const uint64_t *elf_addresses,
                         size_t n, char **functions, int *known) {
  for (size_t i = 0; i < n; i++) {
    functions[i] = NULL;
    known[i] = 0;
  }
  if (n > CP_SCAN_MAX)
    return -1;
  demangler_resolve();
  struct stat st;
  cp_own_fd own;
  if (cp_own_open_regular(&own, path, &st) < 0)
    return -1;
  cp_elf_reader r = {.fd = own.fd, .size = (uint64_t)st.st_size};
  int rc = -1;
  cp_scan_answer *ans = calloc(n ? n : 1, sizeof *ans);
  if (ans && cp_elf_open(&r) == 0) {
    char build_id[CP_ELF_BUILD_ID_LEN];
    cp_elf_build_id(&r, build_id);
    if (scan_image(&r, path, build_id, elf_addresses, n, ans) == 0) {
      rc = 0;
      for (size_t i = 0; i < n; i++) {
        known[i] = ans[i].known;
        char *plain = ans[i].name ? cp_symbols_demangle(ans[i].name) : NULL;
        functions[i] = plain ? plain : ans[i].name;
        if (plain)
          free(ans[i].name);
      }
    }
  }
  cp_elf_close(&r);
  cp_own_close(&own);
  free(ans);
  return rc;
}

void cp_symbols_set_build_gate(cp_symbols_build_gate gate) {
  __atomic_store_n(&build_gate, gate, __ATOMIC_RELEASE);
}

uint64_t cp_symbols_spent_ns(void) {
  return __atomic_load_n(&spent_ns, __ATOMIC_RELAXED);
}

uint64_t cp_symbols_scans(void) {
  return __atomic_load_n(&scans, __ATOMIC_RELAXED);
}

void cp_symbols_set_budget(size_t bytes) {
  symbols_lock_acquire();
  symbols.budget = bytes;
  pthread_mutex_unlock(&symbols_lock);
}

size_t cp_symbols_memory_used(void) {
  symbols_lock_acquire();
  size_t used = symbols.table_bytes;
  pthread_mutex_unlock(&symbols_lock);
  return used;
}

void cp_symbols_demangle_prepare(void) { demangler_resolve(); }

char *cp_symbols_demangle(const char *mangled) {
  if (!demangler_is_resolved() || mangled[0] != '_' || mangled[1] != 'Z')
    return NULL;
  return demangle(mangled);
}

/* What the DWARF reader is to open for m: its path, and its build id or,
 * without one, its identity when read. 0 when it is not to be opened: not
 * a path, or a deleted file (opened again by name, it is another file).
 * Caller holds symbols_lock; path and build_id are obj's buffers. */
static int dwarf_object_locked(map_rec *m, cp_dwarf_object *obj, char *path,
                               size_t path_len, char *build_id, size_t id_len) {
  obj->path = path;
  obj->build_id = build_id;
  obj->dev = obj->ino = 0;
  snprintf(path, path_len, "%s", m->path);
  snprintf(build_id, id_len, "%s", m->build_id);
  if (m->file && !build_id[0]) {
    obj->dev = (uint64_t)m->file->dev;
    obj->ino = (uint64_t)m->file->ino;
  }
  return path[0] == '/' && !ends_with(path, deleted_suffix);
}

size_t cp_symbols_lines(const cp_mapping *pub, uint64_t pc,
                        cp_line_chain *out) {
  out->n = 0;
  out->used = 0;
  if (!pub)
    return 0;
  char path[PATH_MAX], build_id[sizeof((map_rec *)0)->build_id];
  cp_dwarf_object obj;
  symbols_lock_acquire();
  map_rec *m = (map_rec *)((char *)pub - offsetof(map_rec, pub));
  map_read_file(m); /* a current mapping whose table was evicted */
  uint64_t elf_address = pc + m->elf_delta;
  int readable = dwarf_object_locked(m, &obj, path, sizeof path, build_id,
                                     sizeof build_id);
  pthread_mutex_unlock(&symbols_lock);
  if (!readable)
    return 0;
  size_t n = cp_dwarf_lookup(&obj, elf_address, out);
  if (out->resolved) {
    __atomic_add_fetch(&lines_read, 1, __ATOMIC_RELAXED);
    /* As in cp_symbols_lookup; path is m->path, copied. */
    cp_fork_hints_put(pc, cp_fork_hints_path_hash(path));
  } else {
    __atomic_add_fetch(&lines_had, 1, __ATOMIC_RELAXED);
  }
  return n;
}

void cp_symbols_line_counts(uint64_t *read, uint64_t *had) {
  *read = __atomic_load_n(&lines_read, __ATOMIC_RELAXED);
  *had = __atomic_load_n(&lines_had, __ATOMIC_RELAXED);
}

/* The hints the process's children left (fork_hints.h), up to HINTS_PER_CALL
 * of them: each pc in one of its own mappings of that path is looked up as
 * an export would (its file's symbol table, its lines), so that children
 * forked from now on inherit the answer. Returns how many it looked up. */
#define HINTS_PER_CALL 16
static size_t prepare_hints(void) {
  cp_fork_hint h[HINTS_PER_CALL];
  size_t n = cp_fork_hints_take(h, HINTS_PER_CALL), done = 0;
  cp_line_chain *chain = n ? malloc(sizeof *chain) : NULL;
  for (size_t i = 0; chain && i < n; i++) {
    symbols_lock_acquire();
    init_locked();
    map_rec *m = find_map(h[i].pc);
    int ours = m && cp_fork_hints_path_hash(m->path) == h[i].path_hash;
    pthread_mutex_unlock(&symbols_lock);
    cp_symbol sym;
    if (!ours || cp_symbols_lookup(h[i].pc, &sym) != 0 || !sym.mapping)
      continue;
    cp_symbols_lines(sym.mapping, h[i].pc, chain);
    done++;
  }
  free(chain);
  if (done)
    cp_debug("symbols: pid %d looked up %zu addresses its children read "
             "themselves",
             (int)getpid(), done);
  return done;
}

int cp_symbols_prepare_lines(void) {
  if (__atomic_load_n(&names_off, __ATOMIC_RELAXED))
    return 0;
  if (prepare_hints())
    return 1;
  char path[PATH_MAX], build_id[sizeof((map_rec *)0)->build_id];
  cp_dwarf_object obj;
  for (;;) {
    int found = 0, candidate = 0;
    symbols_lock_acquire();
    for (size_t i = 0; symbols.prepare_pending && i < symbols.nmaps && !found;
         i++) {
      map_rec *m = symbols.maps[i];
      if (m->lines_prepared || !m->pub.last_used_generation || !m->file_read)
        continue;
      m->lines_prepared = 1;
      candidate = 1;
      found = dwarf_object_locked(m, &obj, path, sizeof path, build_id,
                                  sizeof build_id);
    }
    if (!candidate)
      symbols.prepare_pending = 0; /* until a mapping may become one */
    pthread_mutex_unlock(&symbols_lock);
    if (!found)
      return 0;
    /* Several mappings of one object: the first opens it, the others find
     * it tried and cost a lookup. */
    if (cp_dwarf_prepare(&obj))
      return 1;
  }
}

void cp_symbols_set_names(int on) {
  __atomic_store_n(&names_off, !on, __ATOMIC_RELAXED);
}

int cp_symbols_file_address(const char *path, uint64_t mapping_offset,
                            uint64_t file_offset, uint64_t *elf_address) {
  symbols_lock_acquire();
  elf_file *f = file_get(path, path);
  int rc = -1;
  for (size_t i = 0; f && i < f->nloads; i++) {
    const load_segment *s = &f->loads[i];
    if (file_offset >= s->offset && file_offset - s->offset < s->filesz) {
      *elf_address = file_offset - s->offset + s->vaddr;
      rc = 0;
      break;
    }
  }
  /* A separate debug file keeps its segments' addresses but not their file
   * offsets or sizes: the mapping is then taken to start at the first
   * executable segment's page (what the loader maps for it). */
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  for (size_t i = 0; rc != 0 && f && i < f->nloads; i++) {
    const load_segment *s = &f->loads[i];
    if ((s->flags & PF_X) && s->filesz == 0 && file_offset >= mapping_offset) {
      *elf_address = file_offset - mapping_offset + (s->vaddr & ~(page - 1));
      rc = 0;
    }
  }
  file_unref(f);
  pthread_mutex_unlock(&symbols_lock);
  return rc;
}
