/* File, line and inline chains of native addresses from DWARF (elfutils'
 * libdw), for the exporter and `contprof symbolize`; never used from signal
 * handlers or hooks. Debug information is looked up in the object's own
 * .debug_* sections, then its .gnu_debuglink file, then the build-id tree
 * (docs/symbols.md). Modules are opened on first use, results are cached per
 * (module, address), and everything counts against one cap with LRU
 * eviction (CONTPROF_DWARF_MAX_MB). Thread-safe (one internal mutex). */
#ifndef CP_DWARF_H
#define CP_DWARF_H

#include <stddef.h>
#include <stdint.h>

/* The deepest inline chain kept (innermost frames first; deeper ones lose
 * their outermost callers), and the bytes of names one chain may carry. */
#define CP_DWARF_MAX_FRAMES 32
#define CP_DWARF_STRINGS 16384

typedef struct cp_line_frame {
  const char *function;    /* demangled name */
  const char *system_name; /* linkage (mangled) name, else function */
  const char *file;        /* source file of line, "" when unknown */
  int64_t line;            /* 0 when unknown */
  const char *decl_file;   /* where the function is declared, "" unknown */
  int64_t start_line;      /* its first line, 0 when unknown */
} cp_line_frame;

/* One address's chain: frames[0] is the innermost (inlined) function at the
 * address, frames[n-1] the out-of-line function holding it. Strings point
 * into strings[]. */
typedef struct cp_line_chain {
  size_t n;
  int resolved; /* read from the debug information now, not from the cache */
  cp_line_frame frames[CP_DWARF_MAX_FRAMES];
  size_t used;
  char strings[CP_DWARF_STRINGS];
} cp_line_chain;

/* The object to resolve in. dev/ino (both 0: not checked) must match the
 * file at path, and build_id (lowercase hex, "" or NULL: unknown) its GNU
 * build id: a file replaced on disk is refused (one message). */
typedef struct cp_dwarf_object {
  const char *path;
  uint64_t dev, ino;
  const char *build_id;
} cp_dwarf_object;

/* Fills *out with the chain of elf_address (an address in the object's own
 * vaddr space; for a caller frame, the return address - 1). Returns out->n,
 * 0 when the object has no usable debug information for it. */
size_t cp_dwarf_lookup(const cp_dwarf_object *obj, uint64_t elf_address,
                       cp_line_chain *out);

/* The cap (CONTPROF_DWARF_MAX_MB): debug sections of open modules (their
 * decompressed size), an estimate of libdw's parsed line tables, CU ranges
 * and the address cache. Least recently used modules are closed to make
 * room; a module whose sections alone exceed it gets no lines. */
#define CP_DWARF_DEFAULT_BUDGET ((size_t)256 << 20)

/* Whether a module whose reading is estimated at estimate_ns of CPU may be
 * read now, spent_ns having gone into the modules this process read so far.
 * 0: it is put off, its addresses get no lines from this lookup (not
 * cached), and a later lookup asks again. The estimate is the bytes read
 * and inflated (the file and its decompressed debug sections) at
 * CP_DWARF_READ_NS_PER_BYTE, measured on libc's debug file
 * (docs/symbols.md, "Short-lived processes"). */
typedef int (*cp_dwarf_read_gate)(uint64_t estimate_ns, uint64_t spent_ns);
#define CP_DWARF_READ_NS_PER_BYTE 2
/* NULL (the default: `contprof symbolize`) reads every module. */
void cp_dwarf_set_read_gate(cp_dwarf_read_gate gate);
/* Has the next lookup of each put-off module ask the gate again, without
 * waiting for the retry interval: at the last export, when the process's
 * CPU, and so the allowance, is the largest it will be. */
void cp_dwarf_ask_again(void);
/* CPU this process spent opening modules (what the gate is given); without
 * a lock, for the symbol tables' gate (symbols.h) to count it too. */
uint64_t cp_dwarf_spent_ns(void);
/* Lookups the gate left without lines, since the process started (the
 * export's debug line says how many). */
uint64_t cp_dwarf_deferred(void);
void cp_dwarf_set_budget(size_t bytes);

/* Opens obj's debug information now, as a first lookup would, if it has
 * not been tried and half the cap is still free: so that children forked
 * later inherit it instead of each reading it at its first export
 * (docs/symbols.md, "fork"). Returns 1 when it was opened (or refused) now,
 * 0 when it had been tried before, the cap is half used or DWARF is
 * unavailable. */
int cp_dwarf_prepare(const cp_dwarf_object *obj);
size_t cp_dwarf_memory_used(void);

/* Where the build-id tree and debuglink's global directory live
 * ("/usr/lib/debug"); for tests. NULL restores the default. */
void cp_dwarf_set_debug_root(const char *dir);

/* Closes every module and empties the caches (tests; the child of a fork
 * that happened while a lost thread held the lock, which is then replaced
 * and the state leaked). */
void cp_dwarf_reset(void);
/* In the child of fork: keeps the modules when no thread was reading one
 * at the fork, else cp_dwarf_reset. */
void cp_dwarf_after_fork_child(void);

#endif
