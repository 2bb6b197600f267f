/* libFuzzer target for the symbol tables (src/aggregator/symbols.c) and the
 * scan that names addresses without one (symbol_scan.c), over the ELF
 * reader (elf_image.c). The input, an ELF file, is written to a memfd; the
 * addresses around its first function symbols (start, next byte, middle,
 * last byte, end) and its first PLT stubs (the byte before, the first and
 * the last) are named by one scan and, each, by the file's table.
 * Checks: no crash, leak or undefined behaviour (ASan, LSan, UBSan), and
 * every address the scan names is named the same by the table (the scan's
 * promise, docs/symbols.md "Naming without a table").
 * Seeds: fuzz/corpus/symbols/, small programs and random symbol tables
 * (docs/hardening.md). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "aggregator/elf_image.h"
#include "aggregator/elf_plt.h"
#include "aggregator/symbol_scan.h"
#include "aggregator/symbols.h"

#include "fuzz.h"

#define MAX_SYMBOLS 48
#define MAX_STUBS 5 /* with MAX_SYMBOLS, at most CP_SCAN_MAX addresses */

static int mem_fd = -1;
static char mem_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  mem_fd = memfd_create("fuzz_symbols", MFD_CLOEXEC);
  if (mem_fd < 0)
    abort();
  snprintf(mem_path, sizeof mem_path, "/proc/self/fd/%d", mem_fd);
  return 0;
}

static int u64_cmp(const void *pa, const void *pb) {
  uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;
  return a < b ? -1 : a > b;
}

/* Addresses around the first MAX_SYMBOLS function symbols of the image,
 * and around its first MAX_STUBS PLT stubs (elf_plt.h). */
static size_t addresses_of(const uint8_t *data, size_t size, uint64_t *out,
                           size_t cap) {
  cp_elf_reader r = {.fd = -1, .memory = data, .size = size};
  size_t n = 0, seen = 0;
  if (cp_elf_open(&r) == 0) {
    cp_plt_stubs plt;
    if (cp_elf_plt_stubs(&r, &plt) == 0)
      for (size_t i = 0; i < plt.n && i < MAX_STUBS && n + 3 <= cap; i++) {
        const cp_plt_stub *s = &plt.v[i];
        EXPECT(cp_plt_find(&plt, s->start) == s);
        EXPECT(cp_elf_plt_holds_any(&r, &s->start, 1));
        EXPECT(s->name < plt.names_bytes);
        out[n++] = s->start - 1;
        out[n++] = s->start;
        out[n++] = s->start + s->size - 1;
      }
    cp_plt_free(&plt);
    for (size_t i = 0; i < r.shnum && seen < MAX_SYMBOLS; i++) {
      cp_elf_symbols t;
      uint32_t type = r.shdrs[i].sh_type;
      if ((type != SHT_SYMTAB && type != SHT_DYNSYM) ||
          cp_elf_symbols_of(&r, &r.shdrs[i], &t) != 0)
        continue;
      for (uint64_t k = 0; k < t.count && seen < MAX_SYMBOLS; k++) {
        cp_elf_sym s;
        if (cp_elf_read(&r, t.symtab->sh_offset + k * sizeof s, sizeof s, &s) !=
            0)
          break;
        if (!cp_elf_is_function(&t, &s))
          continue;
        seen++;
        uint64_t a = s.st_value, z = s.st_size;
        uint64_t around[] = {a, a + 1, a + z / 2, a + z - 1, a + z};
        for (size_t j = 0; j < 5 && n < cap; j++)
          out[n++] = around[j];
      }
    }
  }
  cp_elf_close(&r);
  qsort(out, n, sizeof *out, u64_cmp);
  size_t d = 0;
  for (size_t i = 0; i < n; i++)
    if (d == 0 || out[d - 1] != out[i])
      out[d++] = out[i];
  return d;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (ftruncate(mem_fd, 0) != 0 ||
      pwrite(mem_fd, data, size, 0) != (ssize_t)size)
    return 0;
  uint64_t addrs[MAX_SYMBOLS * 5 + MAX_STUBS * 3];
  size_t n = addresses_of(data, size, addrs, MAX_SYMBOLS * 5 + MAX_STUBS * 3);
  if (n == 0)
    addrs[n++] = 0x1000;
  cp_symbols_reset(); /* the memfd is one file: no table of an earlier one */
  char *names[MAX_SYMBOLS * 5 + MAX_STUBS * 3];
  int known[MAX_SYMBOLS * 5 + MAX_STUBS * 3];
  int rc = cp_symbols_scan_file(mem_path, addrs, n, names, known);
  for (size_t i = 0; i < n; i++) {
    char function[512], build_id[160];
    int found =
        cp_symbols_resolve_file(mem_path, addrs[i], function, sizeof function,
                                build_id, sizeof build_id);
    EXPECT(found == 0 || function[0] == '\0');
    EXPECT(strlen(build_id) < sizeof build_id);
    if (rc == 0 && known[i]) {
      EXPECT((names[i] != NULL) == (found == 0));
      if (names[i])
        EXPECT(strncmp(names[i], function, sizeof function - 1) == 0);
    }
    free(names[i]);
  }
  cp_symbols_reset();
  return 0;
}
