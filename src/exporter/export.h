/* Turns one generation into a gzip-compressed pprof with the profile's
 * metadata, in the dialect a sink speaks. */
#ifndef CP_EXPORT_H
#define CP_EXPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "aggregator/calltree.h"
#include "config.h"
#include "trace.h"

typedef enum cp_dialect {
  CP_DIALECT_DATADOG = 0, /* Datadog names and labels: files, Datadog */
  /* Pyroscope: sample type names without '-', one profile family per
   * profile (see cp_export_options), no per-thread or per-request labels
   * (they would become series), span_id as a hex string, other label names
   * reduced to [a-zA-Z0-9_]. */
  CP_DIALECT_PYROSCOPE = 1,
} cp_dialect;

typedef struct cp_export_options {
  cp_dialect dialect;
  unsigned profiles;  /* CP_PROFILE_* to include (and enabled); 0: all */
  size_t max_samples; /* 0: none; else the lightest fold into "[other]" */
  size_t max_bytes;   /* bound of the uncompressed pprof; 0: none */
  size_t max_labels;  /* per sample; 0: no bound */
} cp_export_options;

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
  /* Requests per endpoint in the period (trace.h), for the Datadog
   * event's endpoint_counts; set by the uploader for every sink. */
  const cp_endpoint_count *endpoint_counts;
  size_t nendpoint_counts;
  /* What the profiler cost in the period (stats.h); NULL: not reported. */
  const struct cp_period_stats *stats;
} cp_export_meta;

/* Encodes g as a gzip pprof into a malloc'd buffer. Returns 0 or -1. */
int cp_export_pprof(const cp_generation *g, const cp_export_meta *meta,
                    cp_dialect dialect, uint8_t **out, size_t *out_len);

/* The same with options; *samples_folded (may be NULL) receives how many
 * samples went into the "[other]" stack to respect the bounds. */
int cp_export_pprof_with(const cp_generation *g, const cp_export_meta *meta,
                         const cp_export_options *opts, uint8_t **out,
                         size_t *out_len, size_t *samples_folded);

/* Shared with `contprof symbolize`, so that a profile symbolized later
 * equals one symbolized in the process: the location of address with one
 * Line per named frame of chain (innermost first), or 0 when none is
 * named; and the "libfoo.so+0x1234" name of a frame without a symbol. */
struct pprof_builder;
struct cp_line_chain;
uint64_t cp_export_chain_location(struct pprof_builder *b, uint64_t mapping,
                                  uint64_t address,
                                  const struct cp_line_chain *chain);
void cp_export_module_offset_name(const char *path, uint64_t file_offset,
                                  char *out, size_t size);

#endif
