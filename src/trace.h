/* Trace correlation: the calling thread's span and local root span ids (read
 * by signal handlers, so samples carry them), a bounded mapping from local
 * root span id to endpoint name (the `trace endpoint` label at export), and
 * the per-endpoint request counts of each period (`endpoint_counts` in the
 * Datadog upload). */
#ifndef CP_TRACE_H
#define CP_TRACE_H

#include <stddef.h>
#include <stdint.h>

/* Label names this module adds at export (Datadog dialect; a dialect that
 * cannot take them maps or drops them by these names). */
#define CP_LABEL_TRACE_ENDPOINT "trace endpoint"
#define CP_LABEL_END_TIMESTAMP "end_timestamp_ns"

/* The calling thread's ids as last set by contprof_set_span (0 when unset).
 * Async-signal-safe: a handler that interrupts contprof_set_span on the same
 * thread sees either the old pair or the new one, never a mix. */
void cp_trace_current(uint64_t *span_id, uint64_t *local_root_span_id);

/* The endpoint of a local root span, or NULL. The string lives for the life
 * of the process. Thread-safe (takes a mutex), not async-signal-safe. */
const char *cp_trace_endpoint_of(uint64_t local_root_span_id);

/* endpoint_counts, as dd-trace defines them: the number of requests (local
 * root spans) per endpoint seen in a period. A request counts once, in the
 * period in which contprof_set_endpoint is first called for its local root
 * span id (tracers call it when the root span gets its resource, usually as
 * it finishes); a later call for the same id renames it without counting it
 * again. */
typedef struct cp_endpoint_count {
  const char *endpoint; /* lives for the life of the process */
  int64_t count;        /* > 0 */
} cp_endpoint_count;

/* Hands over the counts accumulated since the previous call and starts a new
 * count: *out receives a malloc'd array (free it; not the strings), or NULL
 * when there were none. Returns the number of entries. The scheduler calls
 * it once per period, right after the generation swap, and passes the result
 * to every sink in cp_export_meta.endpoint_counts (so sinks must not call
 * it).
 * Thread-safe. */
size_t cp_trace_endpoint_counts_take(cp_endpoint_count **out);

#endif
