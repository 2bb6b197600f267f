/* One generation of aggregated samples: a call tree in which each unique call
 * path is one node, and a table of samples keyed by (leaf node, label set,
 * thread, trace ids, time bucket) holding the values of the sample kinds in
 * use. Identical stack-plus-labels samples therefore merge, and memory grows
 * with distinct paths, not samples. Frame words are resolved to locations when
 * first seen (program counters through symbols.h, runtime frames through
 * frames.h). Memory is bounded: past the limit, new paths fold into an
 * "[overflow]" stack and are counted. Not thread-safe: the aggregator
 * serialises access. */
#ifndef CP_CALLTREE_H
#define CP_CALLTREE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kinds.h"
#include "symbols.h"

typedef struct cp_location {
  uint64_t address;          /* pc (callers: return address - 1); 0 runtime */
  const cp_mapping *mapping; /* NULL for runtime and unmapped frames */
  const char *function;      /* NULL when unknown: exporters show module+off */
  const char *file;          /* source file of runtime frames, else NULL */
  int64_t line;
} cp_location;

typedef struct cp_node {
  uint32_t parent;   /* 0 is the root, which has no location */
  uint32_t location; /* index into the location table */
} cp_node;

typedef struct cp_sample_key {
  uint32_t node; /* leaf node */
  uint32_t labels;
  pid_t tid;
  uint64_t span_id;
  uint64_t local_root_span_id;
  uint64_t time_bucket_ns; /* timeline mode: end of the sample's time
                            * bucket (CLOCK_REALTIME ns), else 0 */
} cp_sample_key;

/* A sample as readers see it: the generation stores it more compactly
 * (calltree.c), cp_gen_sample expands it. */
typedef struct cp_sample {
  cp_sample_key key;
  int64_t values[CP_NVALUES]; /* 0 for kinds never added */
} cp_sample;

typedef struct cp_generation cp_generation;

/* memory_limit: bytes the tables may use before samples overflow. */
cp_generation *cp_gen_create(uint64_t id, size_t memory_limit);
void cp_gen_destroy(cp_generation *g);
uint64_t cp_gen_id(const cp_generation *g);

/* Adds one sample. frames are frame words, leaf first; for program counters
 * frames[0] is the interrupted pc and the others are return addresses (the
 * generation subtracts 1 from those). key->node is ignored. Returns 0, or 1 if
 * the sample went to the overflow stack. */
int cp_gen_add(cp_generation *g, const uint64_t *frames, size_t nframes,
               int truncated, const cp_sample_key *key,
               contprof_sample_kind kind, int64_t count, int64_t quantity);

/* Forgets pc -> location resolutions (after a library was unloaded). */
void cp_gen_forget_addresses(cp_generation *g);

/* With on, a new location whose object's symbol table is not read yet gets
 * its mapping only, and is pending until cp_gen_resolve_pending names it:
 * reading a large object's table takes tens of milliseconds, which the
 * thread that drains the sample ring must not spend while samples pile up.
 * Off (the default), each new location is named at once. */
void cp_gen_set_defer_reads(cp_generation *g, int on);

/* Names the pending locations, reading their objects' symbol tables, until
 * stop (NULL: never) returns true between two. Returns how many are left.
 * A generation is exported with none left. */
size_t cp_gen_resolve_pending(cp_generation *g, int (*stop)(void));

size_t cp_gen_location_count(const cp_generation *g);
const cp_location *cp_gen_location(const cp_generation *g, size_t i);
size_t cp_gen_node_count(const cp_generation *g); /* includes the root */
const cp_node *cp_gen_node(const cp_generation *g, size_t i);
size_t cp_gen_sample_count(const cp_generation *g);
/* Sample i (< cp_gen_sample_count), expanded into *out. */
void cp_gen_sample(const cp_generation *g, size_t i, cp_sample *out);

/* Thread names seen in this generation (the aggregator records them when a
 * thread first appears). The name is copied; NULL when unknown. */
void cp_gen_set_thread_name(cp_generation *g, pid_t tid, const char *name);
const char *cp_gen_thread_name(const cp_generation *g, pid_t tid);

/* Samples added, and how many of them went to the overflow stack. */
uint64_t cp_gen_samples_added(const cp_generation *g);
uint64_t cp_gen_samples_overflowed(const cp_generation *g);
size_t cp_gen_memory_used(const cp_generation *g);

/* Where cp_gen_memory_used goes (bytes, capacities as counted): for
 * benchmarks (bench/storage.c). */
typedef struct cp_gen_memory {
  size_t locations, nodes, node_index, rows, row_index, values, contexts,
      threads;
} cp_gen_memory;
void cp_gen_memory_breakdown(const cp_generation *g, cp_gen_memory *out);

#endif
