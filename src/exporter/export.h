/* Turns one generation into a gzip-compressed pprof with the profile's
 * metadata, in the dialect a sink speaks; and a finished period as the sinks
 * receive it (cp_export), which needs no aggregator header. */
#ifndef CP_EXPORT_H
#define CP_EXPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "config.h"
#include "trace.h"

/* The aggregator's (aggregator/calltree.h); sinks never look inside. */
typedef struct cp_generation cp_generation;

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
   * event's endpoint_counts; set by the scheduler for every sink. */
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

/* A finished period as the sinks receive it (sink.h): its metadata and
 * counts, and its profile, encoded when a sink first asks for it. Made by the
 * scheduler after the swap, on its stack; valid while the sinks are handed
 * it, on the scheduler's thread only (not thread-safe). */
typedef struct cp_export {
  cp_export_meta meta; /* with the period, seq, drops, costs, endpoints */
  uint64_t samples;    /* the samples the period recorded */
  uint64_t samples_overflowed; /* of which folded into [overflow] */
  /* The exporter's own (finished.c); sinks use the calls below. */
  const cp_generation *source;
  uint8_t *profile;
  size_t profile_len;
} cp_export;

/* Makes e the export of g with meta (copied; what it points to must outlive
 * e). Nothing is encoded yet; nothing can fail. */
void cp_export_init(cp_export *e, const cp_generation *g,
                    const cp_export_meta *meta);

/* Frees what e encoded (not the generation). */
void cp_export_release(cp_export *e);

/* The period as one gzip pprof in the Datadog dialect with every enabled
 * profile (files, Datadog): encoded at the first call, the same bytes for
 * every later one. The bytes belong to e. Returns 0, or -1 when it cannot be
 * encoded (a later call tries again). */
int cp_export_profile(cp_export *e, const uint8_t **data, size_t *len);

/* Whether a sample of the period holds a value of one of `profiles`
 * (CP_PROFILE_* bits). */
int cp_export_has_samples(const cp_export *e, unsigned profiles);

/* The profiles of o->profiles alone, with o's dialect and bounds, into a
 * malloc'd gzip pprof (Pyroscope's one profile family per request); as
 * cp_export_pprof_with. */
int cp_export_encode(const cp_export *e, const cp_export_options *o,
                     uint8_t **out, size_t *out_len, size_t *samples_folded);

#endif
