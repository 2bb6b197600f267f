/* Per-thread label sets. A label set is an interned, immutable, sorted list of
 * key=value pairs named by a 32-bit id; a thread's current set is one word in
 * initial-exec TLS, so signal handlers read it with one load. Id 0 is the
 * empty set. */
#ifndef CP_LABELS_H
#define CP_LABELS_H

#include <stddef.h>
#include <stdint.h>

typedef struct cp_label {
  const char *key;
  const char *value;
} cp_label;

/* The calling thread's label set id. Async-signal-safe. */
uint32_t cp_labels_current(void);

/* The labels of set `id`, sorted by key; the pointers stay valid for the life
 * of the process. Returns the count (0 for unknown ids). Thread-safe. */
size_t cp_labelset_get(uint32_t id, const cp_label **labels);

#endif
