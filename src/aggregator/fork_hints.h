/* What the children of fork had to symbolize themselves, told to their
 * parent (docs/symbols.md, "What children look up"). A child inherits its
 * parent's symbol tables, debug information and resolved addresses, and
 * reads the rest itself at its first export: a PostgreSQL backend forked
 * per connection read, at its exit, the line tables of the libc code the
 * postmaster never ran, each backend again. With the hints, a child that
 * resolves an address from a file (its symbol table or its debug
 * information) records it in a table shared with its parent; the parent
 * resolves it too, off the application's threads, so that the children it
 * forks later inherit the answer.
 *
 * The table is a shared anonymous mapping made before the first fork of a
 * profiled process: its children and theirs write into it, and each process
 * that has forked reads what it has not read yet. It holds program
 * counters and the hash of their mapping's path, nothing else; exec drops
 * it. A process of the family can write anything there, so a reader treats
 * each entry as a guess to check (a pc in one of its own mappings, of that
 * path). Bounded: CP_FORK_HINTS entries, then nothing more is recorded. */
#ifndef CP_FORK_HINTS_H
#define CP_FORK_HINTS_H

#include <stddef.h>
#include <stdint.h>

#define CP_FORK_HINTS 4096

typedef struct cp_fork_hint {
  uint64_t pc;        /* an address in the process (not a return address) */
  uint64_t path_hash; /* cp_fork_hints_path_hash of its mapping's path */
} cp_fork_hint;

/* In the parent, before fork (the prepare handler): maps the table if it
 * is not mapped yet. Not signal-safe. */
void cp_fork_hints_before_fork(void);

/* After fork, in the parent: from now on it reads the table. */
void cp_fork_hints_after_fork_parent(void);

/* After fork, in the child: from now on it writes into the table (when
 * there is one). */
void cp_fork_hints_after_fork_child(void);

/* Whether this process has forked (since it started or was forked): its
 * children inherit what it reads. */
int cp_fork_hints_has_forked(void);

/* In a child: records that it resolved pc itself. Lock-free across
 * processes; a full table or a hint already there records nothing. */
void cp_fork_hints_put(uint64_t pc, uint64_t path_hash);

/* In a process that has forked: up to max hints it has not taken yet, into
 * out. Returns how many. Scans the table only when something was added
 * since its last scan. */
size_t cp_fork_hints_take(cp_fork_hint *out, size_t max);

/* FNV-1a of a path. */
uint64_t cp_fork_hints_path_hash(const char *path);

#endif
