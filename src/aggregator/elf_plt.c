/* PLT stubs named from the relocations of their slots (elf_plt.h). */
#include "aggregator/elf_plt.h"

#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef ElfW(Rela) plt_rela;

#define RELAS_PER_READ 1024

/* How a stub names its slot: by the slot's address (its jump), or by its
 * index in .rela.plt (the `push` of an IBT object's lazy stub). */
enum { BY_SLOT = 0, BY_INDEX = 1 };

/* A stub as decoded, then what its relocation says. */
typedef struct raw_stub {
  uint64_t start;
  uint64_t key; /* the slot's address, or the .rela.plt index */
  uint32_t size;
  uint8_t by;
  uint8_t found; /* a relocation of a kind named below fills its slot */
  uint32_t type; /* R_X86_64_JUMP_SLOT, GLOB_DAT or IRELATIVE */
  uint32_t sym;  /* dynamic symbol (JUMP_SLOT, GLOB_DAT) */
  uint64_t addend;
} raw_stub;

/* A dynamic symbol wanted by index, or an IFUNC by its resolver's address;
 * name: offset in the dynamic string table, 0 when none was found. */
typedef struct wanted {
  uint64_t key;
  uint64_t name;
  int rank;
} wanted;

static int is_plt_section(const cp_elf_reader *r, const cp_elf_shdr *s) {
  const uint64_t flags = SHF_ALLOC | SHF_EXECINSTR;
  if (s->sh_type != SHT_PROGBITS || (s->sh_flags & flags) != flags ||
      s->sh_size == 0 || s->sh_addr + s->sh_size < s->sh_addr)
    return 0;
  const char *name = cp_elf_section_name(r, s);
  return strcmp(name, ".plt") == 0 || strcmp(name, ".plt.sec") == 0 ||
         strcmp(name, ".plt.got") == 0;
}

int cp_elf_plt_holds_any(const cp_elf_reader *r, const uint64_t *addrs,
                         size_t n) {
  if (r->ehdr.e_machine != EM_X86_64 || n == 0)
    return 0;
  for (size_t i = 0; i < r->shnum; i++) {
    const cp_elf_shdr *s = &r->shdrs[i];
    if (!is_plt_section(r, s))
      continue;
    for (size_t k = 0; k < n; k++)
      if (addrs[k] >= s->sh_addr && addrs[k] - s->sh_addr < s->sh_size)
        return 1;
  }
  return 0;
}

/* One entry of size bytes at ELF address addr: 1 when it is a stub (*st
 * filled), else 0 (the resolver's entry, padding). by_index: whether a
 * `push $index` counts (in .plt only). */
static int decode(const unsigned char *b, uint32_t size, uint64_t addr,
                  int by_index, raw_stub *st) {
  uint32_t p = 0;
  if (size >= 4 && b[0] == 0xf3 && b[1] == 0x0f && b[2] == 0x1e && b[3] == 0xfa)
    p = 4; /* endbr64 */
  if (p < size && b[p] == 0xf2)
    p++; /* bnd */
  if (p + 6 <= size && b[p] == 0xff && b[p + 1] == 0x25) {
    int32_t disp; /* jmp *disp32(%rip): the slot is after the instruction */
    memcpy(&disp, b + p + 2, sizeof disp);
    st->key = addr + p + 6 + (uint64_t)(int64_t)disp;
    st->by = BY_SLOT;
    return 1;
  }
  if (by_index && p + 5 <= size && b[p] == 0x68) {
    uint32_t index; /* push $index */
    memcpy(&index, b + p + 1, sizeof index);
    st->key = index;
    st->by = BY_INDEX;
    return 1;
  }
  return 0;
}

static int key_cmp(const void *pa, const void *pb) {
  const raw_stub *a = pa, *b = pb;
  if (a->by != b->by)
    return a->by < b->by ? -1 : 1;
  if (a->key != b->key)
    return a->key < b->key ? -1 : 1;
  return a->start < b->start ? -1 : a->start > b->start;
}

static int start_cmp(const void *pa, const void *pb) {
  const raw_stub *a = pa, *b = pb;
  return a->start < b->start ? -1 : a->start > b->start;
}

static int wanted_cmp(const void *pa, const void *pb) {
  const wanted *a = pa, *b = pb;
  return a->key < b->key ? -1 : a->key > b->key;
}

/* The stubs of every PLT section of r, decoded, into *v (n of them). 0, or
 * -1 when memory ran out. */
static int decode_sections(const cp_elf_reader *r, raw_stub **v, size_t *n) {
  size_t cap = 0;
  uint64_t read = 0;
  *v = NULL;
  *n = 0;
  for (size_t i = 0; i < r->shnum; i++) {
    const cp_elf_shdr *s = &r->shdrs[i];
    if (!is_plt_section(r, s) || s->sh_size > CP_PLT_MAX_BYTES - read)
      continue;
    const char *name = cp_elf_section_name(r, s);
    int got = strcmp(name, ".plt.got") == 0;
    int lazy = strcmp(name, ".plt") == 0; /* may hold `push $index` stubs */
    uint32_t ent = s->sh_entsize == 8 || s->sh_entsize == 16
                       ? (uint32_t)s->sh_entsize
                   : got ? 8
                         : 16;
    unsigned char *bytes =
        (unsigned char *)cp_elf_read_alloc(r, s->sh_offset, s->sh_size);
    if (!bytes)
      continue; /* out of the image (or of memory: then unnamed) */
    read += s->sh_size;
    for (uint64_t k = 0; k + ent <= s->sh_size; k += ent) {
      raw_stub st = {.start = s->sh_addr + k, .size = ent};
      if (!decode(bytes + k, ent, st.start, lazy, &st))
        continue;
      if (*n == cap) {
        size_t grown = cap ? cap * 2 : 64;
        raw_stub *w = realloc(*v, grown * sizeof *w);
        if (!w) {
          free(bytes);
          return -1;
        }
        *v = w;
        cap = grown;
      }
      (*v)[(*n)++] = st;
    }
    free(bytes);
  }
  return 0;
}

/* Gives every stub of v (sorted by key_cmp) that `by` key names the
 * relocation e, unless one was found for it before: how many it gave. */
static size_t assign(raw_stub *v, size_t n, uint8_t by, uint64_t key,
                     const plt_rela *e) {
  size_t given = 0;
  size_t lo = 0, hi = n; /* the first stub at or after (by, key) */
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (v[mid].by < by || (v[mid].by == by && v[mid].key < key))
      lo = mid + 1;
    else
      hi = mid;
  }
  for (; lo < n && v[lo].by == by && v[lo].key == key; lo++) {
    if (v[lo].found)
      continue;
    v[lo].found = 1;
    v[lo].type = (uint32_t)ELF64_R_TYPE(e->r_info);
    v[lo].sym = (uint32_t)ELF64_R_SYM(e->r_info);
    v[lo].addend = (uint64_t)e->r_addend;
    given++;
  }
  return given;
}

/* Looks in one SHT_RELA section s for the relocations of v's slots
 * (rela_plt: s is .rela.plt, whose indices the lazy stubs name), from
 * its end: a dynamic relocation section has its few GLOB_DAT entries
 * after the many R_X86_64_RELATIVE ones, and the search stops once every
 * stub has its relocation. */
static void search_section(const cp_elf_reader *r, const cp_elf_shdr *s,
                           int rela_plt, raw_stub *v, size_t n, size_t *unfound,
                           plt_rela *chunk) {
  uint64_t count = s->sh_size / sizeof(plt_rela);
  if (count == 0 || count * sizeof(plt_rela) > CP_ELF_MAX_SECTION_BYTES ||
      !cp_elf_range_ok(r->size, s->sh_offset, count * sizeof(plt_rela)))
    return;
  for (uint64_t end = count; end > 0 && *unfound > 0;) {
    uint64_t k = end < RELAS_PER_READ ? end : RELAS_PER_READ;
    uint64_t first = end - k;
    end = first;
    if (cp_elf_read(r, s->sh_offset + first * sizeof(plt_rela),
                    k * sizeof(plt_rela), chunk) != 0)
      return;
    for (uint64_t j = 0; j < k; j++) {
      uint64_t type = ELF64_R_TYPE(chunk[j].r_info);
      if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT &&
          type != R_X86_64_IRELATIVE)
        continue;
      *unfound -= assign(v, n, BY_SLOT, chunk[j].r_offset, &chunk[j]);
      if (rela_plt)
        *unfound -= assign(v, n, BY_INDEX, first + j, &chunk[j]);
    }
  }
}

/* Finds the relocation of each stub's slot in r's SHT_RELA sections that
 * refer to one dynamic symbol table (.rela.plt's, else the first's): its
 * index in *dynsym (0: none). .rela.plt first, the others while a stub
 * has none. */
static int find_relocations(const cp_elf_reader *r, raw_stub *v, size_t n,
                            size_t *dynsym) {
  *dynsym = 0;
  size_t unfound = n;
  plt_rela *chunk = malloc(RELAS_PER_READ * sizeof *chunk);
  if (!chunk)
    return -1;
  for (int pass = 0; pass < 2; pass++) {
    for (size_t i = 0; i < r->shnum && unfound > 0; i++) {
      const cp_elf_shdr *s = &r->shdrs[i];
      int rela_plt = strcmp(cp_elf_section_name(r, s), ".rela.plt") == 0;
      if (rela_plt != (pass == 0) || s->sh_type != SHT_RELA ||
          s->sh_entsize != sizeof(plt_rela) || s->sh_link == SHN_UNDEF ||
          s->sh_link >= r->shnum ||
          r->shdrs[s->sh_link].sh_type != SHT_DYNSYM ||
          (*dynsym && s->sh_link != *dynsym))
        continue;
      *dynsym = s->sh_link;
      search_section(r, s, rela_plt, v, n, &unfound, chunk);
    }
  }
  free(chunk);
  return 0;
}

static wanted *find_wanted(wanted *w, size_t n, uint64_t key) {
  wanted probe = {.key = key};
  return n ? bsearch(&probe, w, n, sizeof *w, wanted_cmp) : NULL;
}

/* Sorts w[0..*n) and drops repeated keys. */
static void sort_unique(wanted *w, size_t *n) {
  if (*n == 0)
    return;
  qsort(w, *n, sizeof *w, wanted_cmp);
  size_t d = 1;
  for (size_t i = 1; i < *n; i++)
    if (w[i].key != w[d - 1].key)
      w[d++] = w[i];
  *n = d;
}

/* The names of the symbols v's relocations want, from the dynamic symbol
 * table t: syms by index, ifuncs by value (the best of several by
 * cp_elf_symbol_rank). strtab: t's names, whole. */
static int read_names(const cp_elf_symbols *t, const char *strtab, wanted *syms,
                      size_t nsyms, wanted *ifuncs, size_t nifuncs) {
  cp_elf_sym *chunk = malloc(CP_ELF_SYMS_PER_READ * sizeof *chunk);
  if (!chunk)
    return -1;
  for (uint64_t done = 0; done < t->count; done += CP_ELF_SYMS_PER_READ) {
    uint64_t k = t->count - done < CP_ELF_SYMS_PER_READ ? t->count - done
                                                        : CP_ELF_SYMS_PER_READ;
    if (cp_elf_read(t->r, t->symtab->sh_offset + done * sizeof(cp_elf_sym),
                    k * sizeof(cp_elf_sym), chunk) != 0)
      break;
    for (uint64_t j = 0; j < k; j++) {
      const cp_elf_sym *s = &chunk[j];
      if (s->st_name == 0 || s->st_name >= t->str_size ||
          strtab[s->st_name] == '\0')
        continue;
      wanted *w = find_wanted(syms, nsyms, done + j);
      if (w)
        w->name = s->st_name;
      if (ELF64_ST_TYPE(s->st_info) == STT_GNU_IFUNC &&
          s->st_shndx != SHN_UNDEF &&
          (w = find_wanted(ifuncs, nifuncs, s->st_value))) {
        int rank = cp_elf_symbol_rank(s, strtab + s->st_name);
        if (!w->name || rank > w->rank ||
            (rank == w->rank &&
             strcmp(strtab + s->st_name, strtab + w->name) < 0)) {
          w->name = s->st_name;
          w->rank = rank;
        }
      }
    }
  }
  free(chunk);
  return 0;
}

/* Into buf (CP_PLT_MAX_NAME + 16 bytes): stub st's name, or "" when it has
 * none or it is too long. */
static void stub_name(const raw_stub *st, const char *strtab, wanted *syms,
                      size_t nsyms, wanted *ifuncs, size_t nifuncs, char *buf) {
  buf[0] = '\0';
  if (!st->found)
    return;
  const char *name = NULL;
  if (st->type == R_X86_64_IRELATIVE) {
    wanted *w = find_wanted(ifuncs, nifuncs, st->addend);
    if (!w || !w->name) {
      snprintf(buf, CP_PLT_MAX_NAME + 16, "*ABS*+0x%llx@plt",
               (unsigned long long)st->addend);
      return;
    }
    name = strtab + w->name;
  } else {
    wanted *w = st->sym ? find_wanted(syms, nsyms, st->sym) : NULL;
    if (!w || !w->name)
      return;
    name = strtab + w->name;
  }
  size_t len = strnlen(name, CP_PLT_MAX_NAME + 1);
  if (len <= CP_PLT_MAX_NAME) {
    memcpy(buf, name, len);
    memcpy(buf + len, "@plt", sizeof "@plt");
  }
}

/* Names the stubs of v (found, sorted by start) into *out, overlapping
 * ones dropped. */
static int name_stubs(raw_stub *v, size_t n, const char *strtab, wanted *syms,
                      size_t nsyms, wanted *ifuncs, size_t nifuncs,
                      cp_plt_stubs *out) {
  char buf[CP_PLT_MAX_NAME + 16];
  size_t bytes = 0, kept = 0;
  uint64_t end = 0;
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1) {
      if (kept == 0)
        return 0;
      out->v = malloc(kept * sizeof *out->v);
      out->names = malloc(bytes);
      if (!out->v || !out->names) {
        cp_plt_free(out);
        return -1;
      }
      bytes = kept = 0;
      end = 0;
    }
    for (size_t i = 0; i < n; i++) {
      if (v[i].start < end)
        continue; /* overlaps the stub before it */
      stub_name(&v[i], strtab, syms, nsyms, ifuncs, nifuncs, buf);
      if (!buf[0])
        continue;
      size_t len = strlen(buf) + 1;
      if (bytes + len > CP_PLT_MAX_NAMES_BYTES)
        break;
      if (pass == 1) {
        out->v[kept] = (cp_plt_stub){
            .start = v[i].start, .size = v[i].size, .name = (uint32_t)bytes};
        memcpy(out->names + bytes, buf, len);
      }
      kept++;
      bytes += len;
      end = v[i].start + v[i].size;
      if (end < v[i].start)
        end = UINT64_MAX;
    }
  }
  out->n = kept;
  out->names_bytes = bytes;
  return 0;
}

int cp_elf_plt_stubs(const cp_elf_reader *r, cp_plt_stubs *out) {
  *out = (cp_plt_stubs){0};
  if (r->ehdr.e_machine != EM_X86_64 || r->shnum == 0)
    return 0;
  raw_stub *v;
  size_t n, dynsym;
  if (decode_sections(r, &v, &n) != 0) {
    free(v);
    return -1;
  }
  int rc = 0;
  char *strtab = NULL;
  wanted *syms = NULL, *ifuncs = NULL;
  cp_elf_symbols t;
  if (n == 0)
    goto done;
  qsort(v, n, sizeof *v, key_cmp);
  rc = -1;
  if (find_relocations(r, v, n, &dynsym) != 0)
    goto done;
  rc = 0;
  if (!dynsym || cp_elf_symbols_of(r, &r->shdrs[dynsym], &t) != 0)
    goto done; /* nothing to name them after */
  strtab = cp_elf_read_alloc(r, t.str_offset, t.str_size);
  syms = malloc(n * sizeof *syms);
  ifuncs = malloc(n * sizeof *ifuncs);
  rc = -1;
  if (!strtab || !syms || !ifuncs)
    goto done;
  size_t nsyms = 0, nifuncs = 0;
  for (size_t i = 0; i < n; i++) {
    if (!v[i].found)
      continue;
    if (v[i].type == R_X86_64_IRELATIVE)
      ifuncs[nifuncs++] = (wanted){.key = v[i].addend};
    else if (v[i].sym)
      syms[nsyms++] = (wanted){.key = v[i].sym};
  }
  sort_unique(syms, &nsyms);
  sort_unique(ifuncs, &nifuncs);
  if (read_names(&t, strtab, syms, nsyms, ifuncs, nifuncs) != 0)
    goto done;
  qsort(v, n, sizeof *v, start_cmp);
  rc = name_stubs(v, n, strtab, syms, nsyms, ifuncs, nifuncs, out);
done:
  free(v);
  free(strtab);
  free(syms);
  free(ifuncs);
  return rc;
}

size_t cp_plt_after(const cp_plt_stubs *s, uint64_t addr) {
  size_t lo = 0, hi = s->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (s->v[mid].start <= addr)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

const cp_plt_stub *cp_plt_find(const cp_plt_stubs *s, uint64_t addr) {
  size_t i = cp_plt_after(s, addr);
  if (i > 0 && addr - s->v[i - 1].start < s->v[i - 1].size)
    return &s->v[i - 1];
  return NULL;
}

void cp_plt_free(cp_plt_stubs *s) {
  free(s->v);
  free(s->names);
  *s = (cp_plt_stubs){0};
}
