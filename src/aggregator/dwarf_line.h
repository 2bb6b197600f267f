/* Our own reader of one DWARF line-number program (.debug_line, versions 2
 * to 5): the rows, sorted by address, and the file table, as libdw's
 * dwarf_getsrclines gives them but without its per-row malloc and sort of
 * pointers (docs/symbols.md: most of a first export's DWARF time). Reads
 * only the bytes it is given, every read bounds-checked; anything it does
 * not know (a form it cannot read, another byte order) is a failure, and
 * the caller falls back to libdw. No libdw or libelf here: fuzz_dwarf
 * feeds it raw sections. */
#ifndef CP_DWARF_LINE_H
#define CP_DWARF_LINE_H

#include <stddef.h>
#include <stdint.h>

/* The sections a line program refers to (NULL/0 when absent). Strings are
 * read in place: the table points into them, so they must outlive it. */
typedef struct cp_dwline_sections {
  const uint8_t *line;
  size_t line_size;
  const uint8_t *str; /* .debug_str: DW_FORM_strp */
  size_t str_size;
  const uint8_t *line_str; /* .debug_line_str: DW_FORM_line_strp */
  size_t line_str_size;
} cp_dwline_sections;

/* One row: an address, its line and file index; CP_DWLINE_END marks the
 * end of a sequence (the address after its last instruction). */
#define CP_DWLINE_END 0x80000000u
typedef struct cp_dwline_row {
  uint64_t addr;
  uint32_t line;
  uint32_t file; /* index in files, | CP_DWLINE_END */
} cp_dwline_row;

typedef struct cp_dwline_file {
  const char *dir; /* NULL: the name is used alone */
  const char *name;
} cp_dwline_file;

typedef struct cp_dwline_table {
  cp_dwline_row *rows; /* by address; at equal ones, ends first */
  size_t nrows;
  cp_dwline_file *files; /* by the index rows and DW_AT_*_file use */
  size_t nfiles;
  size_t bytes; /* heap held, for the caller's budget */
} cp_dwline_table;

/* Reads the program at offset in s->line. comp_dir is the unit's
 * DW_AT_comp_dir (directory 0 before DWARF 5; may be NULL), address_size
 * its address size (4 or 8). The table's arrays stay within max_bytes (a
 * one-byte opcode makes a 16-byte row: the table can be 16 times the size
 * of its program). Returns 0 and fills *t; -1 on anything malformed or
 * unsupported, -2 when it would take more than max_bytes (nothing
 * allocated either way). */
int cp_dwline_read(const cp_dwline_sections *s, uint64_t offset,
                   const char *comp_dir, unsigned address_size,
                   size_t max_bytes, cp_dwline_table *t);

/* The row that holds addr (the last one at or below it, unless that ends
 * a sequence), or NULL: libdw's dwarf_getsrc_die. */
const cp_dwline_row *cp_dwline_find(const cp_dwline_table *t, uint64_t addr);

/* File index i as libdw names it: "dir/name", name alone when absolute or
 * without a directory. Writes at most size bytes (always terminated);
 * returns 0, or -1 when i is not in the table. */
int cp_dwline_file_name(const cp_dwline_table *t, uint64_t i, char *out,
                        size_t size);

void cp_dwline_free(cp_dwline_table *t);

#endif
