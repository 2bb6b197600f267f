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

/* What drives CPU samples (CONTPROF_CPU_CLOCK). */
typedef enum cp_cpu_clock {
  CP_CPU_CLOCK_AUTO,  /* perf task clock where the kernel allows it */
  CP_CPU_CLOCK_PERF,  /* the same, and a warning where it does not */
  CP_CPU_CLOCK_POSIX, /* a POSIX timer on each thread's CPU clock */
} cp_cpu_clock;

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
  cp_cpu_clock cpu_clock; /* CONTPROF_CPU_CLOCK: what drives CPU samples */
  int max_frames;
  int upload_period_s;
  char *output_dir;
  cp_log_level log_level;
  size_t max_memory_bytes;  /* bound of one generation of the call tree */
  size_t symbols_max_bytes; /* CONTPROF_SYMBOLS_MAX_MB: symbol tables */

  /* Samplers other than cpu. */
  int wall_interval_ms;      /* CONTPROF_WALL_INTERVAL_MS */
  int wall_threads_per_tick; /* CONTPROF_WALL_THREADS_PER_TICK */
  int timeline;              /* CONTPROF_TIMELINE: end_timestamp_ns labels */
  int follow_fork;           /* CONTPROF_FOLLOW_FORK: children profile too */
  int follow_exec;           /* CONTPROF_FOLLOW_EXEC: exec'd programs too */
  long alloc_sample_bytes;   /* CONTPROF_ALLOC_SAMPLE_BYTES: Poisson mean */
  long heap_max_tracked;     /* CONTPROF_HEAP_MAX_TRACKED: live-table size */
  long lock_sample_ns;       /* CONTPROF_LOCK_SAMPLE_NS: Poisson mean */

  /* Upload (src/upload). Secrets are kept here only: never log them. */
  unsigned exports;         /* CP_EXPORT_* bits (CONTPROF_EXPORT or guessed) */
  char *dd_agent_url;       /* http://host:port or unix:///path */
  char *dd_intake_url;      /* agentless intake (from DD_SITE) */
  char *dd_api_key;         /* secret; NULL when unset */
  int dd_agentless;         /* DD_PROFILING_AGENTLESS and DD_API_KEY set */
  char *pyroscope_url;      /* PYROSCOPE_SERVER_ADDRESS */
  char *pyroscope_token;    /* secret: PYROSCOPE_AUTH_TOKEN */
  char *pyroscope_user;     /* PYROSCOPE_BASIC_AUTH_USER */
  char *pyroscope_password; /* secret: PYROSCOPE_BASIC_AUTH_PASSWORD */
  char *pyroscope_tenant;   /* PYROSCOPE_TENANT_ID */
  cp_tag *pyroscope_labels; /* PYROSCOPE_LABELS k=v pairs */
  size_t npyroscope_labels;
  long connect_timeout_ms;   /* CONTPROF_CONNECT_TIMEOUT */
  long upload_timeout_ms;    /* CONTPROF_UPLOAD_TIMEOUT */
  long exit_timeout_ms;      /* CONTPROF_EXIT_TIMEOUT */
  long retry_initial_ms;     /* CONTPROF_RETRY_INITIAL: first backoff */
  long retry_max_ms;         /* CONTPROF_RETRY_MAX: backoff cap */
  char *spool_dir;           /* CONTPROF_SPOOL_DIR; NULL: memory only */
  size_t spool_max_profiles; /* CONTPROF_SPOOL_MAX as a count */
  size_t spool_max_bytes;    /* CONTPROF_SPOOL_MAX as bytes */
} cp_config;

enum {
  CP_EXPORT_FILE = 1u << 0,
  CP_EXPORT_DATADOG = 1u << 1,
  CP_EXPORT_PYROSCOPE = 1u << 2,
};

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
