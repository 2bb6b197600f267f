/* Turns one generation into a gzip-compressed pprof with the profile's
 * metadata, in the dialect a sink speaks. */
#ifndef CP_EXPORT_H
#define CP_EXPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "aggregator/calltree.h"
#include "config.h"

typedef enum cp_dialect {
  CP_DIALECT_DATADOG = 0, /* Datadog names and labels: files, Datadog */
} cp_dialect;

typedef struct cp_export_meta {
  const cp_config *cfg;
  const char *host;
  pid_t pid;
  const char *runtime_id; /* UUID made at start */
  const char *runtime;    /* "native", "cpython", ... */
  const char *runtime_version;
  uint64_t start_ns; /* period covered, CLOCK_REALTIME */
  uint64_t end_ns;
  uint64_t seq;   /* 0, 1, 2... per process */
  uint64_t drops; /* samples producers had to drop in the period */
  int64_t cpu_period_ns;
} cp_export_meta;

/* Encodes g as a gzip pprof into a malloc'd buffer. Returns 0 or -1. */
int cp_export_pprof(const cp_generation *g, const cp_export_meta *meta,
                    cp_dialect dialect, uint8_t **out, size_t *out_len);

#endif
