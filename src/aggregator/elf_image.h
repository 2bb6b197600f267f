/* Reading an ELF image, bounds-checked: its headers, build id and function
 * symbols, for the symbol tables (symbols.c) and for the scan that names a
 * few addresses without building one (symbol_scan.h).
 *
 * A file is read with pread, never mapped (a file truncated under a mapping
 * would fault in the profiled process), and never trusted: every offset and
 * size is checked against the image, every section read is bounded. Not for
 * signal handlers: it allocates. */
#ifndef CP_ELF_IMAGE_H
#define CP_ELF_IMAGE_H

#include <elf.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>

#include "own_fd.h"

/* The native ELF class's types (this process's own). */
typedef ElfW(Ehdr) cp_elf_ehdr;
typedef ElfW(Phdr) cp_elf_phdr;
typedef ElfW(Shdr) cp_elf_shdr;
typedef ElfW(Sym) cp_elf_sym;

/* Limits against corrupt or hostile files: one section read, the notes
 * scanned, the build ids accepted. */
#define CP_ELF_MAX_SECTION_BYTES ((uint64_t)512 << 20)
#define CP_ELF_MAX_NOTE_BYTES ((uint64_t)1 << 20)
#define CP_ELF_MAX_BUILD_ID_BYTES 64
#define CP_ELF_BUILD_ID_LEN (CP_ELF_MAX_BUILD_ID_BYTES * 2 + 1)

/* An ELF image in a file (fd) or in memory (the vdso). Fill fd (or
 * memory) and size, then cp_elf_open. */
typedef struct cp_elf_reader {
  int fd;
  const unsigned char *memory;
  uint64_t size; /* readable bytes */
  cp_elf_ehdr ehdr;
  cp_elf_phdr *phdrs;
  size_t phnum;
  cp_elf_shdr *shdrs;
  size_t shnum;
  char *shstrtab;
  uint64_t shstrtab_size;
} cp_elf_reader;

/* Whether [offset, offset + len) lies within size bytes. */
int cp_elf_range_ok(uint64_t size, uint64_t offset, uint64_t len);
/* Reads and checks the ELF header, program headers and section headers.
 * Either table may be missing (then its count is 0). 0 or -1; call
 * cp_elf_close either way. */
int cp_elf_open(cp_elf_reader *r);
void cp_elf_close(cp_elf_reader *r);
/* [offset, offset + len) of the image into dst: 0, or -1 when out of
 * bounds or unreadable (the file shrank). */
int cp_elf_read(const cp_elf_reader *r, uint64_t offset, uint64_t len,
                void *dst);
/* A malloc'd copy of [offset, offset + len) plus a terminating NUL, or
 * NULL (over CP_ELF_MAX_SECTION_BYTES, out of bounds, out of memory). */
char *cp_elf_read_alloc(const cp_elf_reader *r, uint64_t offset, uint64_t len);
/* The section's name, "" when unknown. */
const char *cp_elf_section_name(const cp_elf_reader *r, const cp_elf_shdr *s);
/* The GNU build id as lowercase hex into out (CP_ELF_BUILD_ID_LEN bytes),
 * from PT_NOTE segments, else SHT_NOTE sections; "" when none. */
void cp_elf_build_id(const cp_elf_reader *r, char *out);

/* ---- Function symbols ---------------------------------------------------- */

/* One usable SHT_SYMTAB or SHT_DYNSYM section: its symbols and their string
 * table, both within the image and each at most CP_ELF_MAX_SECTION_BYTES. */
typedef struct cp_elf_symbols {
  const cp_elf_reader *r;
  const cp_elf_shdr *symtab;
  uint64_t count; /* symbols */
  uint64_t str_offset, str_size;
} cp_elf_symbols;

/* Symbols read at a time: a buffer reused for a whole section, where a
 * copy of the section was 170 fresh pages for cc1's 28,900 symbols (each a
 * page fault, 5-10 us on a VM). */
#define CP_ELF_SYMS_PER_READ 1024

/* Fills *out for section symtab of r; 0, or -1 when it is unusable (its
 * entry size, string table or bounds are wrong, or it is empty). */
int cp_elf_symbols_of(const cp_elf_reader *r, const cp_elf_shdr *symtab,
                      cp_elf_symbols *out);

/* Whether s names a function: STT_FUNC or STT_GNU_IFUNC, defined, at a
 * nonzero address, with a name inside the string table. (An empty name,
 * which only the string table tells, does not count either.) */
int cp_elf_is_function(const cp_elf_symbols *t, const cp_elf_sym *s);

/* Which symbol names an address shared by several: one with a size, a global
 * or weak one, the fewest leading underscores (getpid, not __getpid), then a
 * global over a weak one. name: at least the symbol's first 8 bytes. */
int cp_elf_symbol_rank(const cp_elf_sym *s, const char *name);

/* End of the allocated section (or else the PT_LOAD segment) holding s's
 * address; bounds size-0 symbols. 0 when unknown. */
uint64_t cp_elf_symbol_bound(const cp_elf_reader *r, const cp_elf_sym *s);

/* The separate debug file of r (the file at path, build id build_id, ""
 * when none), found as gdb finds it (the build-id tree, then the
 * debuglink beside the file, in .debug/ beside it, and under
 * /usr/lib/debug), that has SHT_SYMTAB sections with data: opened into
 * *dbg (its descriptor in *own) and 1, else 0. Close with
 * cp_elf_close_debug. */
int cp_elf_open_debug(const cp_elf_reader *r, const char *path,
                      const char *build_id, cp_elf_reader *dbg, cp_own_fd *own);
void cp_elf_close_debug(cp_elf_reader *dbg, cp_own_fd *own);

#endif
