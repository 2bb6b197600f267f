/* Configuration: the one place that reads the environment. Everything else
 * receives a cp_config. */
#ifndef CP_CONFIG_H
#define CP_CONFIG_H

#include <stddef.h>

#include "common.h"
#include "contprof/profiler.h"

enum {
  CP_PROFILE_CPU = 1u << 0,
  CP_PROFILE_WALL = 1u << 1,
  CP_PROFILE_ALLOC = 1u << 2,
  CP_PROFILE_HEAP = 1u << 3,
  CP_PROFILE_LOCK = 1u << 4,
};

typedef struct cp_tag {
  char *key;
  char *value;
} cp_tag;

typedef struct cp_config {
  int enabled;
  char *service;
  char *env;     /* "" when unset */
  char *version; /* "" when unset */
  cp_tag *tags;
  size_t ntags;
  unsigned profiles; /* CP_PROFILE_* bits */
  int cpu_hz;
  int max_frames;
  int upload_period_s;
  char *output_dir;
  cp_log_level log_level;
  size_t max_memory_bytes; /* bound of one generation of the call tree */

  /* Samplers other than cpu. */
  int wall_interval_ms;      /* CONTPROF_WALL_INTERVAL_MS */
  int wall_threads_per_tick; /* CONTPROF_WALL_THREADS_PER_TICK */
  int timeline;              /* CONTPROF_TIMELINE: end_timestamp_ns labels */
  long alloc_sample_bytes;   /* CONTPROF_ALLOC_SAMPLE_BYTES: Poisson mean */
  long lock_sample_ns;       /* CONTPROF_LOCK_SAMPLE_NS: Poisson mean */
} cp_config;

/* Where values come from; tests pass their own. NULL means getenv. */
typedef const char *(*cp_getenv_fn)(const char *name, void *ctx);

/* Fills cfg from opts (may be NULL), then the environment, then defaults.
 * Bad values are reported with one `contprof:` line each (variable, value,
 * fallback) and replaced by the fallback; this never fails except for
 * CONTPROF_ERR_NOMEM. */
int cp_config_load(cp_config *cfg, const contprof_options *opts,
                   cp_getenv_fn get, void *ctx);
void cp_config_free(cp_config *cfg);

/* "cpu,wall" for a CP_PROFILE_* mask, into buf. */
const char *cp_profiles_string(unsigned profiles, char *buf, size_t len);

#endif
