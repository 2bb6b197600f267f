/* Naming a few addresses of an ELF file without building its symbol table.
 *
 * A symbol table (symbols.c) reads every function symbol of a file and all
 * their names, sorts them and keeps them: for cc1's 28,900 symbols and 1.3
 * MB of names, 14 ms and 750 fresh pages, which a compiler pass that lives
 * 40 ms and took three samples pays at its exit. A scan reads the symbol
 * sections CP_ELF_SYMS_PER_READ symbols at a time, in two passes, keeps
 * only what the addresses asked for need, and reads only the names it
 * returns or must compare.
 *
 * Each address is named as the table would name it, or left to the table:
 * the table names an address after the nearest symbol at or below it (of
 * several at one address, the best by cp_elf_symbol_rank, then name), or,
 * when that one does not cover it, one of the 16 before it that does
 * (nested symbols); a size-0 symbol covers up to the next symbol or its
 * section's end and is dropped inside a sized one. A scan finds the nearest
 * symbol and its successor, and whether a sized symbol spans it; when one
 * does and the nearest symbol does not name the address itself, only the
 * table can tell (docs/symbols.md, "Naming without a table"). Off the hot
 * path; allocates. */
#ifndef CP_SYMBOL_SCAN_H
#define CP_SYMBOL_SCAN_H

#include <stddef.h>
#include <stdint.h>

#include "aggregator/elf_image.h"

/* The most addresses one scan names. */
#define CP_SCAN_MAX 256

typedef struct cp_scan_answer {
  int known;       /* 0: only the table can tell; the rest is unset */
  uint64_t lo, hi; /* every address in [lo, hi) has this answer */
  uint64_t start;  /* the function's address (name not NULL) */
  char *name;      /* malloc'd, as in the string table; NULL: no function */
} cp_scan_answer;

/* Names addrs[0..n) (sorted, distinct, n at most CP_SCAN_MAX) from the
 * symbol sections secs[0..nsecs), the table's sources in its order. Fills
 * out[0..n). 0, or -1 when a read failed or memory ran out (then nothing
 * is known and nothing allocated). */
int cp_scan_names(const cp_elf_symbols *secs, size_t nsecs,
                  const uint64_t *addrs, size_t n, cp_scan_answer *out);

#endif
