/* Symbolization of native program counters, off the hot path.
 *
 * The module keeps the process's executable mappings (from /proc/self/maps)
 * and, per ELF file, a sorted table of its function symbols from .symtab
 * (static functions included) and .dynsym, C++ names demangled. Symbol tables
 * are cached per file (device, inode, size, mtime) and shared by every load of
 * that file; mapping records describe one load at one address. When libraries
 * are loaded or unloaded (dl_iterate_phdr's adds/subs counters move) the
 * mappings are re-read; records of unloaded mappings stay valid until
 * cp_symbols_collect says no generation uses them any more.
 *
 * Thread-safe (one internal mutex); never called from signal handlers. */
#ifndef CP_SYMBOLS_H
#define CP_SYMBOLS_H

#include <stddef.h>
#include <stdint.h>

typedef struct cp_mapping {
  uint64_t start;       /* first address of the executable range */
  uint64_t limit;       /* one past its last address */
  uint64_t file_offset; /* file offset mapped at start */
  const char *path;     /* "/usr/lib/x86_64-linux-gnu/libc.so.6", "[vdso]" */
  const char *build_id; /* GNU build id as lowercase hex, "" if none */
  uint64_t last_used_generation; /* set by cp_symbols_mark_used */
} cp_mapping;

typedef struct cp_symbol {
  const cp_mapping *mapping; /* NULL when pc is in no known mapping */
  const char *function;      /* demangled name, NULL when no symbol covers pc */
  uint64_t elf_address;      /* pc translated to the ELF file's vaddr space */
} cp_symbol;

/* Reads the current mappings. Idempotent. Returns 0 or -1 (logged). A
 * lookup or refresh reads them the first time too. */
int cp_symbols_init(void);

/* Before an object is unloaded (the application's dlclose): the mappings are
 * read if they were not, or read again if objects came or went since, so
 * that the object's mapping is known and, once it is gone, kept for the
 * samples taken in it (an object loaded and unloaded between two drains
 * was lost). Skipped, not waited for, while another thread holds the
 * symbols. */
void cp_symbols_before_unload(void);

/* Re-reads the mappings if a library was loaded or unloaded since the last
 * call. Returns 1 if some mapping appeared or disappeared since the previous
 * call (callers that cache pc -> symbol must drop those caches), else 0.
 * Cheap when nothing changed. */
int cp_symbols_refresh(void);

/* Resolves pc (the exact pc: callers pass return address - 1). Always fills
 * *out; returns 0 when a function was found, -1 otherwise. A pc in no
 * current mapping but in an unloaded one that is not yet collected resolves
 * to that one (a sample taken just before dlclose). */
int cp_symbols_lookup(uint64_t pc, cp_symbol *out);

/* As cp_symbols_lookup, but reads no file: returns 1 when pc's mapping is
 * known and its file not read yet (out->mapping is set, out->function
 * NULL; resolve it later with cp_symbols_lookup_in). Reading a large
 * object's symbol table takes tens of milliseconds, which the drain thread
 * must not spend while samples pile up in the ring. */
int cp_symbols_lookup_cached(uint64_t pc, cp_symbol *out);

/* Resolves pc in mapping (one that cp_symbols_lookup_cached returned and
 * that a generation marked used since, so it is not collected), reading
 * its file if needed. Returns as cp_symbols_lookup. */
int cp_symbols_lookup_in(const cp_mapping *mapping, uint64_t pc,
                         cp_symbol *out);

/* Resolves pcs[0..n) of one mapping (as cp_symbols_lookup_in each, the
 * function names into functions[0..n), NULL where none), reading the
 * mapping's file once: where its table is put off (the build gate), one
 * scan of its symbol sections names them all. */
void cp_symbols_lookup_batch(const cp_mapping *mapping, const uint64_t *pcs,
                             size_t n, const char **functions);

/* Records that generation `gen` references mapping m. */
void cp_symbols_mark_used(const cp_mapping *m, uint64_t gen);

/* Frees records of unloaded mappings whose last_used_generation < oldest_gen.
 */
void cp_symbols_collect(uint64_t oldest_gen);

/* Drops everything (tests; the child of a fork that happened while a lost
 * thread held the tables, which are then leaked); the budget stays. */
void cp_symbols_reset(void);
/* In the child of fork: keeps the tables when no thread was updating them
 * at the fork (they describe the child's address space too), else
 * cp_symbols_reset. */
void cp_symbols_after_fork_child(void);
/* Around fork in a profiled process: the table of what its children look
 * up themselves (fork_hints.h) is made before its first fork, and read
 * from then on. */
void cp_symbols_before_fork(void);
void cp_symbols_after_fork_parent(void);

/* The memory symbol tables may take (CONTPROF_SYMBOLS_MAX_MB): the tables
 * kept, and a file's sections while its table is built. To make room the
 * least recently used tables that no live generation uses are dropped (read
 * again when needed); a file whose table does not fit keeps its exported
 * functions (.dynsym) only, or no function names. */
#define CP_SYMBOLS_DEFAULT_BUDGET ((size_t)128 << 20)
void cp_symbols_set_budget(size_t bytes);

/* The gate a file's symbol table asks before it is built: estimate_ns is
 * what building it would cost (CP_SYMBOLS_BUILD_NS_PER_BYTE a byte of its
 * symbol sections and their names), spent_ns what this process spent on
 * tables so far. Refused, the table is put off: addresses in the
 * file are named by scans of its symbol sections (symbol_scan.h), which
 * read what those addresses need, until the gate allows the table, the
 * scans have cost what it would, or a scan cannot tell an address (docs/
 * symbols.md, "Short-lived processes"). NULL, the default: every table is
 * built. */
typedef int (*cp_symbols_build_gate)(uint64_t estimate_ns, uint64_t spent_ns);
#define CP_SYMBOLS_BUILD_NS_PER_BYTE 8
void cp_symbols_set_build_gate(cp_symbols_build_gate gate);
/* CPU this process spent building symbol tables (not scanning: a file's
 * scans stop at its table's estimated cost), and the scans made, since its
 * start (or in a child since the fork). */
uint64_t cp_symbols_spent_ns(void);
uint64_t cp_symbols_scans(void);

/* Bytes the symbol tables take now. */
size_t cp_symbols_memory_used(void);

/* Resolves elf_address (an address in the file's own vaddr space) in the ELF
 * file at path, without any mapping: for tools and for tests that feed
 * arbitrary (corrupt) files. Uses the same loader and per-file cache as
 * lookups, including separate debug files. Copies the demangled function name
 * and the build id (lowercase hex) into the caller's buffers, "" when
 * unknown. Returns 0 when a function was found, -1 otherwise. */
int cp_symbols_resolve_file(const char *path, uint64_t elf_address,
                            char *function, size_t function_size,
                            char *build_id, size_t build_id_size);

/* For tests: names elf_addresses[0..n) (sorted, distinct, at most 256) of
 * the file at path by one scan of its symbol sections, as a put-off table
 * does (symbol_scan.h): functions[i] the demangled name (malloc'd) or NULL,
 * known[i] 0 where only the table can tell. 0, or -1 (unreadable). */
int cp_symbols_scan_file(const char *path, const uint64_t *elf_addresses,
                         size_t n, char **functions, int *known);

/* Whether files are read for function names (CONTPROF_SYMBOLIZE=local, the
 * default) or for their build ids and segments only (none: the profile is
 * symbolized elsewhere). Set before the first lookup; tables already read
 * stay until cp_symbols_reset. */
void cp_symbols_set_names(int on);

/* The address in path's own vaddr space of file offset file_offset (through
 * its PT_LOAD segments), for symbolizing a profile offline; in a separate
 * debug file (segments without file contents), relative to the first
 * executable segment's page, taken to be what the mapping at file offset
 * mapping_offset holds. 0 or -1. */
int cp_symbols_file_address(const char *path, uint64_t mapping_offset,
                            uint64_t file_offset, uint64_t *elf_address);

/* The demangled form of a C++ name (malloc'd), or NULL when it is not one or
 * no demangler is at hand. cp_symbols_demangle_prepare (which may dlopen
 * libstdc++, so not under a lock a loader callback may take) must have run
 * for names to be demangled. */
void cp_symbols_demangle_prepare(void);
char *cp_symbols_demangle(const char *mangled);

/* File, line and inline chain of pc in mapping m (a cp_symbol's), from DWARF
 * (aggregator/dwarf.h); returns out->n, 0 when there is none. Off the hot
 * path: the exporter calls it. */
struct cp_line_chain;
size_t cp_symbols_lines(const cp_mapping *m, uint64_t pc,
                        struct cp_line_chain *out);

/* Opens the DWARF of one mapping that samples have used and whose DWARF
 * was not opened yet (cp_dwarf_prepare), so that a process that forks
 * hands it to its children instead of each child reading it at its first
 * export; first, looks up the addresses its children had to read themselves
 * (fork_hints.h), for the same reason. Off the hot path: the aggregator's
 * thread calls it after a drain. Returns 1 when it did some of that (call
 * again later for the next), 0 when there was nothing to do (or names are
 * off). */
int cp_symbols_prepare_lines(void);

/* How many addresses cp_symbols_lines has read from debug information, and
 * how many it had already (resolved before in this process or its parent
 * of fork), since the process started (or, in a child, since the fork). */
void cp_symbols_line_counts(uint64_t *read, uint64_t *had);

#endif
