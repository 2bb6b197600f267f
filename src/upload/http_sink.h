/* What the Datadog and Pyroscope sinks share: on the uploader thread a
 * profile is encoded into requests and queued in the sink's spool (never
 * waiting on the network); the sink's own thread delivers them in order,
 * retrying network errors, 5xx and 429 with exponential backoff and jitter,
 * dropping other 4xx with one message, and at stop delivers what it can
 * until the exit deadline. */
#ifndef CP_HTTP_SINK_H
#define CP_HTTP_SINK_H

#include "sink.h"
#include "spool.h"

/* Encodes a finished period into at most max requests (items), returns how
 * many (0 when there is nothing to send) or -1. */
typedef int (*cp_http_build_fn)(void *ctx, cp_export *e, cp_spool_item **items,
                                size_t max);

typedef struct cp_http_sink_spec {
  const char *name;     /* "datadog", "pyroscope": messages and spool files */
  const char *base_url; /* http(s)://host[:port][/prefix] or unix:///path */
  const char *const *headers; /* "Name: value", copied (may hold secrets) */
  size_t nheaders;
  int has_secret;      /* refuse plain http to a remote host */
  uint64_t max_age_ns; /* drop requests older than this (0: keep) */
  cp_http_build_fn build;
  void *ctx;
  void (*free_ctx)(void *ctx);
} cp_http_sink_spec;

/* NULL (after one message) when the sink cannot be made; the spec's ctx is
 * freed then. */
cp_sink *cp_http_sink_create(const cp_config *cfg,
                             const cp_http_sink_spec *spec);

cp_sink *cp_datadog_sink_create(const cp_config *cfg);
cp_sink *cp_pyroscope_sink_create(const cp_config *cfg);

#endif
