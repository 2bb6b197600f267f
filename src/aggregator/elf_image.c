/* Reading an ELF image, bounds-checked (elf_image.h). */
#include "aggregator/elf_image.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

#if UINTPTR_MAX > 0xffffffffu
#define ELFCLASS_NATIVE ELFCLASS64
#else
#define ELFCLASS_NATIVE ELFCLASS32
#endif
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define ELFDATA_NATIVE ELFDATA2LSB
#else
#define ELFDATA_NATIVE ELFDATA2MSB
#endif
/* Identical for both classes. */
#define SYM_BIND(info) ELF64_ST_BIND(info)
#define SYM_TYPE(info) ELF64_ST_TYPE(info)
#define DEBUG_DIR "/usr/lib/debug"

typedef ElfW(Nhdr) elf_nhdr;

/* ---- The image ------------------------------------------------------------
 */

int cp_elf_range_ok(uint64_t size, uint64_t offset, uint64_t len) {
  return len <= size && offset <= size - len;
}

int cp_elf_read(const cp_elf_reader *r, uint64_t offset, uint64_t len,
                void *dst) {
  if (!cp_elf_range_ok(r->size, offset, len))
    return -1;
  if (r->memory) {
    memcpy(dst, r->memory + offset, len);
    return 0;
  }
  unsigned char *p = dst;
  while (len > 0) {
    ssize_t n = pread(r->fd, p, len, (off_t)offset);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) /* error, or the file shrank under us */
      return -1;
    p += n;
    offset += (uint64_t)n;
    len -= (uint64_t)n;
  }
  return 0;
}

/* A malloc'd copy of [offset, offset + len) plus a terminating NUL, or NULL. */
char *cp_elf_read_alloc(const cp_elf_reader *r, uint64_t offset, uint64_t len) {
  if (len > CP_ELF_MAX_SECTION_BYTES || !cp_elf_range_ok(r->size, offset, len))
    return NULL;
  char *buf = malloc((size_t)len + 1);
  if (!buf)
    return NULL;
  if (cp_elf_read(r, offset, len, buf) != 0) {
    free(buf);
    return NULL;
  }
  buf[len] = '\0';
  return buf;
}

void cp_elf_close(cp_elf_reader *r) {
  free(r->phdrs);
  free(r->shdrs);
  free(r->shstrtab);
  r->phdrs = NULL;
  r->shdrs = NULL;
  r->shstrtab = NULL;
}

/* Reads and checks the ELF header, program headers and section headers.
 * Either table may be missing (then its count is 0). Returns 0 or -1. */
int cp_elf_open(cp_elf_reader *r) {
  const unsigned char *id = r->ehdr.e_ident;
  if (cp_elf_read(r, 0, sizeof r->ehdr, &r->ehdr) != 0 ||
      memcmp(id, ELFMAG, SELFMAG) != 0 || id[EI_CLASS] != ELFCLASS_NATIVE ||
      id[EI_DATA] != ELFDATA_NATIVE || id[EI_VERSION] != EV_CURRENT ||
      (r->ehdr.e_type != ET_EXEC && r->ehdr.e_type != ET_DYN))
    return -1;

  /* Section headers first: with extended numbering, shdrs[0] holds the real
   * section, program header and string table counts. */
  cp_elf_shdr shdr0 = {0};
  int have_shdr0 = r->ehdr.e_shoff != 0 &&
                   r->ehdr.e_shentsize == sizeof(cp_elf_shdr) &&
                   cp_elf_read(r, r->ehdr.e_shoff, sizeof shdr0, &shdr0) == 0;
  if (have_shdr0) {
    uint64_t shnum = r->ehdr.e_shnum ? r->ehdr.e_shnum : shdr0.sh_size;
    uint64_t bytes = shnum * sizeof(cp_elf_shdr);
    if (shnum > 0 && shnum <= CP_ELF_MAX_SECTION_BYTES / sizeof(cp_elf_shdr) &&
        cp_elf_range_ok(r->size, r->ehdr.e_shoff, bytes)) {
      r->shdrs = (cp_elf_shdr *)cp_elf_read_alloc(r, r->ehdr.e_shoff, bytes);
      r->shnum = r->shdrs ? (size_t)shnum : 0;
    }
  }
  if (r->shnum > 0) {
    uint64_t strndx =
        r->ehdr.e_shstrndx == SHN_XINDEX ? shdr0.sh_link : r->ehdr.e_shstrndx;
    if (strndx != SHN_UNDEF && strndx < r->shnum &&
        r->shdrs[strndx].sh_type == SHT_STRTAB) {
      const cp_elf_shdr *s = &r->shdrs[strndx];
      r->shstrtab = cp_elf_read_alloc(r, s->sh_offset, s->sh_size);
      r->shstrtab_size = r->shstrtab ? s->sh_size : 0;
    }
  }

  uint64_t phnum = r->ehdr.e_phnum;
  if (phnum == PN_XNUM)
    phnum = have_shdr0 ? shdr0.sh_info : 0;
  if (phnum > 0 && r->ehdr.e_phoff != 0 &&
      r->ehdr.e_phentsize == sizeof(cp_elf_phdr)) {
    r->phdrs = (cp_elf_phdr *)cp_elf_read_alloc(r, r->ehdr.e_phoff,
                                                phnum * sizeof(cp_elf_phdr));
    r->phnum = r->phdrs ? (size_t)phnum : 0;
  }
  return 0;
}

const char *cp_elf_section_name(const cp_elf_reader *r, const cp_elf_shdr *s) {
  if (!r->shstrtab || s->sh_name >= r->shstrtab_size)
    return "";
  return r->shstrtab + s->sh_name; /* NUL-terminated by cp_elf_read_alloc */
}

/* ---- Build ids ----------------------------------------------------------- */

static uint64_t align_up(uint64_t v, uint64_t align) {
  return (v + align - 1) & ~(align - 1);
}

/* Scans a block of notes for NT_GNU_BUILD_ID; writes lowercase hex to out
 * (CP_ELF_MAX_BUILD_ID_BYTES * 2 + 1 bytes). Returns 0 when found. */
static int parse_build_id_notes(const unsigned char *p, uint64_t n,
                                uint64_t align, char *out) {
  uint64_t off = 0;
  while (cp_elf_range_ok(n, off, sizeof(elf_nhdr))) {
    elf_nhdr h;
    memcpy(&h, p + off, sizeof h);
    off += sizeof h;
    uint64_t name_off = off;
    uint64_t desc_off = name_off + align_up(h.n_namesz, align);
    if (!cp_elf_range_ok(n, name_off, h.n_namesz) ||
        !cp_elf_range_ok(n, desc_off, 0) ||
        !cp_elf_range_ok(n, desc_off, h.n_descsz))
      return -1;
    if (h.n_type == NT_GNU_BUILD_ID && h.n_namesz == 4 &&
        memcmp(p + name_off, "GNU", 4) == 0 && h.n_descsz > 0 &&
        h.n_descsz <= CP_ELF_MAX_BUILD_ID_BYTES) {
      static const char hex[] = "0123456789abcdef";
      for (uint64_t i = 0; i < h.n_descsz; i++) {
        out[2 * i] = hex[p[desc_off + i] >> 4];
        out[2 * i + 1] = hex[p[desc_off + i] & 15];
      }
      out[2 * h.n_descsz] = '\0';
      return 0;
    }
    off = desc_off + align_up(h.n_descsz, align);
  }
  return -1;
}

static int read_build_id_at(const cp_elf_reader *r, uint64_t offset,
                            uint64_t len, uint64_t align, char *out) {
  if (len > CP_ELF_MAX_NOTE_BYTES)
    len = CP_ELF_MAX_NOTE_BYTES;
  unsigned char *notes = (unsigned char *)cp_elf_read_alloc(r, offset, len);
  if (!notes)
    return -1;
  /* Notes are 4-aligned, except those in 8-aligned notes sections. */
  int rc = parse_build_id_notes(notes, len, align == 8 ? 8 : 4, out);
  free(notes);
  return rc;
}

/* From PT_NOTE segments (present even when sections are stripped), else
 * from SHT_NOTE sections. out is "" when there is none. */
void cp_elf_build_id(const cp_elf_reader *r, char *out) {
  out[0] = '\0';
  for (size_t i = 0; i < r->phnum; i++) {
    const cp_elf_phdr *ph = &r->phdrs[i];
    if (ph->p_type == PT_NOTE &&
        read_build_id_at(r, ph->p_offset, ph->p_filesz, ph->p_align, out) == 0)
      return;
  }
  for (size_t i = 0; i < r->shnum; i++) {
    const cp_elf_shdr *s = &r->shdrs[i];
    if (s->sh_type == SHT_NOTE && read_build_id_at(r, s->sh_offset, s->sh_size,
                                                   s->sh_addralign, out) == 0)
      return;
  }
  out[0] = '\0';
}

/* ---- Function symbols ---------------------------------------------------- */

int cp_elf_symbols_of(const cp_elf_reader *r, const cp_elf_shdr *symtab,
                      cp_elf_symbols *out) {
  if ((symtab->sh_entsize != 0 && symtab->sh_entsize != sizeof(cp_elf_sym)) ||
      symtab->sh_link == SHN_UNDEF || symtab->sh_link >= r->shnum)
    return -1;
  const cp_elf_shdr *strsec = &r->shdrs[symtab->sh_link];
  if (strsec->sh_type != SHT_STRTAB || strsec->sh_size == 0 ||
      strsec->sh_size > CP_ELF_MAX_SECTION_BYTES ||
      !cp_elf_range_ok(r->size, strsec->sh_offset, strsec->sh_size))
    return -1;
  uint64_t count = symtab->sh_size / sizeof(cp_elf_sym);
  if (count == 0 || count * sizeof(cp_elf_sym) > CP_ELF_MAX_SECTION_BYTES ||
      !cp_elf_range_ok(r->size, symtab->sh_offset, count * sizeof(cp_elf_sym)))
    return -1; /* out of bounds, or too big: skip the table */
  *out = (cp_elf_symbols){.r = r,
                          .symtab = symtab,
                          .count = count,
                          .str_offset = strsec->sh_offset,
                          .str_size = strsec->sh_size};
  return 0;
}

int cp_elf_is_function(const cp_elf_symbols *t, const cp_elf_sym *s) {
  int type = SYM_TYPE(s->st_info);
  return (type == STT_FUNC || type == STT_GNU_IFUNC) && s->st_value != 0 &&
         s->st_shndx != SHN_UNDEF && s->st_name != 0 &&
         s->st_name < t->str_size;
}

int cp_elf_symbol_rank(const cp_elf_sym *s, const char *name) {
  int bind = SYM_BIND(s->st_info);
  int underscores = 0;
  while (name[underscores] == '_' && underscores < 7)
    underscores++;
  return (s->st_size ? 1000 : 0) + (bind != STB_LOCAL ? 100 : 0) +
         (7 - underscores) * 10 + (bind == STB_GLOBAL ? 1 : 0);
}

uint64_t cp_elf_symbol_bound(const cp_elf_reader *r, const cp_elf_sym *s) {
  uint64_t addr = s->st_value;
  if (s->st_shndx != SHN_UNDEF && s->st_shndx < SHN_LORESERVE &&
      s->st_shndx < r->shnum) {
    const cp_elf_shdr *sec = &r->shdrs[s->st_shndx];
    if ((sec->sh_flags & SHF_ALLOC) && addr >= sec->sh_addr &&
        addr - sec->sh_addr < sec->sh_size)
      return sec->sh_addr + sec->sh_size;
  }
  for (size_t i = 0; i < r->phnum; i++) {
    const cp_elf_phdr *ph = &r->phdrs[i];
    if (ph->p_type == PT_LOAD && addr >= ph->p_vaddr &&
        addr - ph->p_vaddr < ph->p_memsz)
      return ph->p_vaddr + ph->p_memsz;
  }
  return 0;
}

/* ---- Separate debug files ------------------------------------------------ */

/* Opens path into *dbg when it belongs to the file with build_id ("" when
 * unknown) and has SHT_SYMTAB sections with data: 1, else 0. */
static int open_debug_file(const char *path, const char *build_id,
                           cp_elf_reader *dbg, cp_own_fd *own) {
  struct stat st;
  int fd = cp_own_open_regular(own, path, &st);
  if (fd < 0)
    return 0;
  *dbg = (cp_elf_reader){.fd = fd, .size = (uint64_t)st.st_size};
  int ok = 0;
  if (cp_elf_open(dbg) == 0) {
    char debug_id[CP_ELF_BUILD_ID_LEN];
    cp_elf_build_id(dbg, debug_id);
    if (build_id[0] == '\0' || debug_id[0] == '\0' ||
        strcmp(build_id, debug_id) == 0)
      for (size_t i = 0; i < dbg->shnum && !ok; i++)
        ok = dbg->shdrs[i].sh_type == SHT_SYMTAB && dbg->shdrs[i].sh_size > 0;
  }
  if (!ok)
    cp_elf_close_debug(dbg, own);
  return ok;
}

/* The .gnu_debuglink file name, malloc'd, or NULL. */
static char *read_debuglink(const cp_elf_reader *r) {
  for (size_t i = 0; i < r->shnum; i++) {
    const cp_elf_shdr *s = &r->shdrs[i];
    if (s->sh_type != SHT_PROGBITS ||
        strcmp(cp_elf_section_name(r, s), ".gnu_debuglink") != 0 ||
        s->sh_size > PATH_MAX)
      continue;
    char *link = cp_elf_read_alloc(r, s->sh_offset, s->sh_size);
    if (link && link[0] != '\0' && !strchr(link, '/'))
      return link; /* read_alloc NUL-terminates */
    free(link);
  }
  return NULL;
}

int cp_elf_open_debug(const cp_elf_reader *r, const char *path,
                      const char *build_id, cp_elf_reader *dbg,
                      cp_own_fd *own) {
  char candidate[PATH_MAX];
  if (strlen(build_id) > 2) {
    snprintf(candidate, sizeof candidate, "%s/.build-id/%.2s/%s.debug",
             DEBUG_DIR, build_id, build_id + 2);
    if (open_debug_file(candidate, build_id, dbg, own))
      return 1;
  }
  char *link = path ? read_debuglink(r) : NULL;
  if (!link)
    return 0;
  const char *slash = strrchr(path, '/');
  int dir_len = slash ? (int)(slash - path) : 0;
  const char *formats[] = {"%.*s/%s", "%.*s/.debug/%s", DEBUG_DIR "%.*s/%s"};
  int found = 0;
  for (size_t i = 0; i < CP_ARRAY_SIZE(formats) && !found; i++) {
    int n =
        snprintf(candidate, sizeof candidate, formats[i], dir_len, path, link);
    found = n > 0 && (size_t)n < sizeof candidate &&
            strcmp(candidate, path) != 0 &&
            open_debug_file(candidate, build_id, dbg, own);
  }
  free(link);
  return found;
}

void cp_elf_close_debug(cp_elf_reader *dbg, cp_own_fd *own) {
  cp_elf_close(dbg);
  cp_own_close(own);
}
