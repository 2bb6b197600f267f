/* libFuzzer target for the DWARF reader (src/aggregator/dwarf.c with
 * libdw, and our line-table reader src/aggregator/dwarf_line.c). An input
 * that starts with an ELF header is an object file: it is written to a
 * memfd and resolved through cp_dwarf_lookup as the exporter does (module
 * open, the padded copy libdw reads, unit ranges, the function index, line
 * tables, inline chains), over addresses around its code. Any other input
 * is a raw .debug_line section (also its .debug_str and .debug_line_str)
 * handed to cp_dwline_read at a few offsets, then searched. Checks: no
 * crash, leak or undefined behaviour (ASan, LSan, UBSan), chains within
 * their bounds with terminated strings, rows in address order.
 * Seeds: fuzz/corpus/dwarf/, small -O2 -g programs (docs/hardening.md). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "aggregator/dwarf.h"
#include "aggregator/dwarf_line.h"
#include "aggregator/symbols.h"

#include "fuzz.h"

/* dwarf.c demangles through symbols.c, which this target does not build
 * (names stay as they are; demangling is not what is fuzzed here). */
void cp_symbols_demangle_prepare(void) {}
char *cp_symbols_demangle(const char *mangled) {
  (void)mangled;
  return NULL;
}

static int mem_fd = -1;
static char mem_path[64];
static cp_line_chain *chain;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  mem_fd = memfd_create("fuzz_dwarf", MFD_CLOEXEC);
  if (mem_fd < 0)
    abort();
  snprintf(mem_path, sizeof mem_path, "/proc/self/fd/%d", mem_fd);
  chain = malloc(sizeof *chain);
  /* No separate debug files from this machine's tree. */
  cp_dwarf_set_debug_root("/nonexistent-fuzz-debug-root");
  return 0;
}

static void check_chain(const cp_line_chain *c, size_t n) {
  EXPECT(n == c->n && n <= CP_DWARF_MAX_FRAMES);
  EXPECT(c->used <= sizeof c->strings);
  for (size_t i = 0; i < n; i++) {
    const cp_line_frame *f = &c->frames[i];
    const char *s[] = {f->function, f->system_name, f->file, f->decl_file};
    for (size_t k = 0; k < 4; k++)
      EXPECT(s[k] && strlen(s[k]) < sizeof c->strings);
  }
}

static void fuzz_object(const uint8_t *data, size_t size) {
  if (ftruncate(mem_fd, 0) != 0 ||
      pwrite(mem_fd, data, size, 0) != (ssize_t)size)
    return;
  cp_dwarf_reset(); /* the previous input's module, cache and all */
  cp_dwarf_object obj = {.path = mem_path, .build_id = ""};
  /* Small programs' code sits at 0x1000-0x2000 (the seeds'). */
  for (uint64_t a = 0x1000; a < 0x2000; a += 13)
    check_chain(chain, cp_dwarf_lookup(&obj, a, chain));
  EXPECT(cp_dwarf_memory_used() <= CP_DWARF_DEFAULT_BUDGET);
}

static void fuzz_line_section(const uint8_t *data, size_t size) {
  cp_dwline_sections s = {data, size, data, size, data, size};
  uint64_t offsets[] = {0, 1, size / 2};
  for (size_t k = 0; k < 3; k++) {
    cp_dwline_table t;
    /* The last one with a small cap: refused (-2) rather than over it. */
    size_t max = k == 2 ? 4096 : (size_t)64 << 20;
    if (cp_dwline_read(&s, offsets[k], "/comp/dir", k == 1 ? 4 : 8, max, &t) !=
        0)
      continue;
    EXPECT(t.bytes <= max);
    EXPECT(t.nfiles >= 1);
    for (size_t i = 1; i < t.nrows; i++)
      EXPECT(t.rows[i - 1].addr <= t.rows[i].addr);
    char name[256];
    for (size_t i = 0; i < t.nrows; i += 1 + t.nrows / 16) {
      const cp_dwline_row *r = cp_dwline_find(&t, t.rows[i].addr);
      EXPECT(!r || (r->addr <= t.rows[i].addr && !(r->file & CP_DWLINE_END)));
      if (r && cp_dwline_file_name(&t, r->file, name, sizeof name) == 0)
        EXPECT(strlen(name) < sizeof name);
    }
    EXPECT(cp_dwline_file_name(&t, t.nfiles, name, sizeof name) == -1);
    cp_dwline_free(&t);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size >= 4 && memcmp(data, "\177ELF", 4) == 0)
    fuzz_object(data, size);
  else
    fuzz_line_section(data, size);
  return 0;
}
