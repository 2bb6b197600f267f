/* The PLT stubs of an ELF image, named after the function each one jumps
 * to ("sin@plt"), as binutils' synthetic symbols and perf name them.
 *
 * A call to a function of another object goes through a stub of the
 * caller's procedure linkage table: an indirect jump through a slot of the
 * global offset table that the dynamic loader fills. The stubs have no
 * symbol of their own, so a sample that lands in one (a program calling
 * sin in a loop spends a few percent there) was shown as module+offset.
 * Each stub's jump is decoded (`jmp *disp32(%rip)`, after an `endbr64` and
 * a `bnd` prefix where the object was built for IBT or MPX) to the address
 * of its slot, and the slot is named by the relocation that fills it:
 * R_X86_64_JUMP_SLOT or GLOB_DAT, after its dynamic symbol; IRELATIVE,
 * after the IFUNC symbol whose resolver the relocation calls (libc's own
 * calls to memcpy and strlen), else "*ABS*+0xADDEND" as binutils does. A
 * lazy-binding stub of an IBT object (`endbr64; push $index`) is named by
 * the .rela.plt entry its index selects. Sections read: .plt, .plt.sec,
 * .plt.got, the SHT_RELA sections, the dynamic symbol table and its names;
 * only on x86-64 (elsewhere no stub is named). docs/symbols.md, "PLT
 * stubs".
 *
 * Every size and offset is checked against the image and bounded; the
 * answer depends only on the image. Off the hot path; allocates. */
#ifndef CP_ELF_PLT_H
#define CP_ELF_PLT_H

#include <stddef.h>
#include <stdint.h>

#include "aggregator/elf_image.h"

/* Bytes of PLT sections read at most: 2^18 stubs of 16 bytes. */
#define CP_PLT_MAX_BYTES ((uint64_t)4 << 20)
/* Longer names are not given (the stub stays unnamed). */
#define CP_PLT_MAX_NAME 4096
/* Bytes of names kept at most; the stubs after are not named. */
#define CP_PLT_MAX_NAMES_BYTES ((size_t)16 << 20)

typedef struct cp_plt_stub {
  uint64_t start; /* ELF address of the stub */
  uint32_t size;  /* its entry's size */
  uint32_t name;  /* offset of its NUL-terminated name in names */
} cp_plt_stub;

typedef struct cp_plt_stubs {
  cp_plt_stub *v; /* sorted by start, disjoint */
  size_t n;
  char *names; /* "sin@plt\0atof@plt\0..." */
  size_t names_bytes;
} cp_plt_stubs;

/* Whether one of addrs[0..n) lies in one of r's PLT sections (from its
 * section headers alone: cheap). */
int cp_elf_plt_holds_any(const cp_elf_reader *r, const uint64_t *addrs,
                         size_t n);

/* The named stubs of r into *out (empty when r has none, or on another
 * machine). 0, or -1 when memory ran out (then *out is empty). Free with
 * cp_plt_free. */
int cp_elf_plt_stubs(const cp_elf_reader *r, cp_plt_stubs *out);

/* The index of the first stub starting after addr (s->n: none). */
size_t cp_plt_after(const cp_plt_stubs *s, uint64_t addr);

/* The stub holding addr, or NULL. */
const cp_plt_stub *cp_plt_find(const cp_plt_stubs *s, uint64_t addr);

void cp_plt_free(cp_plt_stubs *s);

#endif
