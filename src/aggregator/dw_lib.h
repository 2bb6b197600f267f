/* elfutils' libdw and libelf, loaded with dlopen by the first DWARF lookup
 * of a process (docs/symbols.md, "Loading libdw"): a process that never
 * exports a profile with lines, or that ends first, does not load them, nor
 * liblzma and libbz2 with them. Calls go through cp_dw, whose members have
 * the libraries' own names and types: cp_dw.dwarf_child(die, &child). */
#ifndef CP_DW_LIB_H
#define CP_DW_LIB_H

#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <gelf.h>
#include <libelf.h>

/* Every function of libdw and libelf that contprof calls. */
#define CP_DW_FUNCTIONS(X)                                                     \
  X(dwarf_attr)                                                                \
  X(dwarf_begin_elf)                                                           \
  X(dwarf_child)                                                               \
  X(dwarf_cu_getdwarf)                                                         \
  X(dwarf_cuoffset)                                                            \
  X(dwarf_decl_file)                                                           \
  X(dwarf_diecu)                                                               \
  X(dwarf_dieoffset)                                                           \
  X(dwarf_end)                                                                 \
  X(dwarf_errmsg)                                                              \
  X(dwarf_filesrc)                                                             \
  X(dwarf_formaddr)                                                            \
  X(dwarf_formref_die)                                                         \
  X(dwarf_formstring)                                                          \
  X(dwarf_formudata)                                                           \
  X(dwarf_get_units)                                                           \
  X(dwarf_getattrs)                                                            \
  X(dwarf_getsrc_die)                                                          \
  X(dwarf_getsrcfiles)                                                         \
  X(dwarf_getsrclines)                                                         \
  X(dwarf_hasattr)                                                             \
  X(dwarf_haspc)                                                               \
  X(dwarf_lineno)                                                              \
  X(dwarf_linesrc)                                                             \
  X(dwarf_offdie)                                                              \
  X(dwarf_ranges)                                                              \
  X(dwarf_setalt)                                                              \
  X(dwarf_siblingof)                                                           \
  X(dwarf_tag)                                                                 \
  X(dwarf_whatattr)                                                            \
  X(dwelf_dwarf_gnu_debugaltlink)                                              \
  X(dwelf_elf_gnu_build_id)                                                    \
  X(dwelf_elf_gnu_debuglink)                                                   \
  X(elf_begin)                                                                 \
  X(elf_end)                                                                   \
  X(elf_getdata)                                                               \
  X(elf_getscn)                                                                \
  X(elf_getshdrnum)                                                            \
  X(elf_getshdrstrndx)                                                         \
  X(elf_kind)                                                                  \
  X(elf_memory)                                                                \
  X(elf_ndxscn)                                                                \
  X(elf_nextscn)                                                               \
  X(elf_strptr)                                                                \
  X(elf_version)                                                               \
  X(gelf_getclass)                                                             \
  X(gelf_getehdr)                                                              \
  X(gelf_getshdr)

typedef struct cp_dw_lib {
#define CP_DW_MEMBER(name) __typeof__(name) *name;
  CP_DW_FUNCTIONS(CP_DW_MEMBER)
#undef CP_DW_MEMBER
} cp_dw_lib;

/* Filled by cp_dw_load; read only after it returned 1. */
extern cp_dw_lib cp_dw;

/* Loads libdw.so.1 (and with it libelf.so.1) once and finds every function
 * in CP_DW_FUNCTIONS; the later calls return the first one's answer. 1
 * when all were found (libelf is then initialised: elf_version); 0, said
 * once, otherwise: lookups then find no lines. Not signal-safe; the caller
 * serialises the calls. */
int cp_dw_load(void);

#endif
