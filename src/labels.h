/* Per-thread label sets. A label set is an interned, immutable, sorted list of
 * key=value pairs named by a 32-bit id; a thread's current set is one word in
 * initial-exec TLS, so signal handlers read it with one load. Id 0 is the
 * empty set.
 *
 * Sets are reclaimed: each counts its holders (threads whose current set it
 * is, open scopes that will restore it, live heap samples), and one that no
 * one holds is freed two exported periods later (at once while the profiler
 * is stopped), when no sample that names it can still be exported. An id of
 * a freed set names no set: it reads as empty. Label memory is bounded by
 * cp_labels_set_memory_limit. See docs/security.md, "Bounded memory". */
#ifndef CP_LABELS_H
#define CP_LABELS_H

#include <stddef.h>
#include <stdint.h>

typedef struct cp_label {
  const char *key;
  const char *value;
} cp_label;

/* Longest key accepted (longer: CONTPROF_ERR_INVALID), and longest value
 * kept (longer: cut at a UTF-8 boundary and ended with "..."), in bytes. */
#define CP_LABEL_MAX_KEY_BYTES 128
#define CP_LABEL_MAX_VALUE_BYTES 1024

/* The calling thread's label set id. Async-signal-safe. */
uint32_t cp_labels_current(void);

/* The labels of set `id`, sorted by key. Returns the count (0 for the empty
 * set, unknown and freed ids). The caller holds a read pin
 * (cp_labels_read_begin) until it is done with the pointers. */
size_t cp_labelset_get(uint32_t id, const cp_label **labels);

/* A read pin: no set is freed between begin and end. Nests. Thread-safe,
 * not async-signal-safe (a short mutex section). */
void cp_labels_read_begin(void);
void cp_labels_read_end(void);

/* Takes one more hold on set id, for a record that outlives the thread's
 * scope (a live heap sample). Returns id, or 0 when id names no live set
 * (the record then carries no labels). Async-signal-safe and lock-free. */
uint32_t cp_labels_hold(uint32_t id);
/* Gives one hold back. Async-signal-safe and lock-free. */
void cp_labels_release(uint32_t id);

/* After each exported period (the uploader thread): advances the epoch and
 * frees the sets no one has held for two periods. */
void cp_labels_collect(void);

/* The profiler started (1) or stopped (0): while stopped no sample is
 * pending, so sets no one holds are freed at once (and now). */
void cp_labels_set_profiling(int on);

/* Bytes label sets may take (their labels and strings), a quarter of
 * CONTPROF_MAX_MEMORY_MB, at least 2 MiB; 16 MiB until the profiler first
 * starts. The tables come on top, at most 3.5 MiB. */
void cp_labels_set_memory_limit(size_t bytes);

/* Bytes label sets take now (for tests and the log). */
size_t cp_labels_memory_used(void);

#endif
