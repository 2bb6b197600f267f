/* Configuration: the one place that reads the environment. Everything else
 * receives a cp_config. */
#ifndef CP_CONFIG_H
#define CP_CONFIG_H

#include <stddef.h>

#include "common.h"
#include "contprof/profiler.h"
#include "kinds.h"

/* What drives CPU samples (CONTPROF_CPU_CLOCK). */
typedef enum cp_cpu_clock {
  CP_CPU_CLOCK_AUTO,  /* perf task clock where the kernel allows it */
  CP_CPU_CLOCK_PERF,  /* the same, and a warning where it does not */
  CP_CPU_CLOCK_POSIX, /* a POSIX timer on each thread's CPU clock */
} cp_cpu_clock;

/* Bounds of the names and tags that go into every profile, file name and
 * request (docs/configuration.md, "Names and tags"): a longer name is cut, a
 * longer or further tag is left out, with one `contprof:` line. */
enum {
  CP_MAX_NAME_BYTES = 100, /* service, env, version (Datadog's service bound) */
  CP_MAX_TAG_BYTES = 200,  /* one tag, key:value (Datadog's tag bound) */
  CP_MAX_TAGS = 64,        /* per variable: CONTPROF_TAGS, PYROSCOPE_LABELS */
};

/* Where a privileged program (setuid, setgid, file capabilities: the kernel's
 * AT_SECURE) writes profiles when root allows it to profile at all, by
 * creating CP_ALLOW_SETUID_FILE (docs/security.md, "Privileged programs"). */
#define CP_ALLOW_SETUID_FILE "/etc/contprof/allow-setuid"
#define CP_PRIVILEGED_OUTPUT_DIR "/var/lib/contprof/setuid"

typedef struct cp_tag {
  char *key;
  char *value;
} cp_tag;

/* CONTPROF_WALL_INTERVAL_MS's default (docs/configuration.md). */
#define CP_WALL_INTERVAL_MS_DEFAULT 50

typedef struct cp_config {
  int enabled;
  int privileged; /* AT_SECURE: the environment was not read */
  char *service;
  char *env;     /* "" when unset */
  char *version; /* "" when unset */
  cp_tag *tags;
  size_t ntags;
  unsigned profiles; /* CP_PROFILE_* bits */
  int cpu_hz;
  cp_cpu_clock cpu_clock; /* CONTPROF_CPU_CLOCK: what drives CPU samples */
  int unwind_mode; /* CONTPROF_UNWIND: samplers/fpwalk.h's cp_unwind_mode */
  int max_frames;
  int upload_period_s;
  char *output_dir;
  cp_log_level log_level;
  size_t max_memory_bytes;  /* bound of one generation of the call tree */
  size_t symbols_max_bytes; /* CONTPROF_SYMBOLS_MAX_MB: symbol tables */
  size_t dwarf_max_bytes;   /* CONTPROF_DWARF_MAX_MB: DWARF lines */
  /* CONTPROF_SYMBOLIZE=none: addresses, mappings and build ids only
   * (`contprof symbolize` later); 0 (local): names, files, lines. */
  int symbolize_none;

  /* Samplers other than cpu. */
  int wall_interval_ms;      /* CONTPROF_WALL_INTERVAL_MS */
  int wall_threads_per_tick; /* CONTPROF_WALL_THREADS_PER_TICK */
  int timeline;              /* CONTPROF_TIMELINE: end_timestamp_ns labels */
  int follow_fork;           /* CONTPROF_FOLLOW_FORK: children profile too */
  int direct_calls;  /* CONTPROF_DIRECT_CALLS: one thread's calls skip glibc's
                        cancellation bookkeeping (interpose/direct.h) */
  int follow_exec;   /* CONTPROF_FOLLOW_EXEC: exec'd programs too */
  int python_native; /* CONTPROF_PYTHON_NATIVE: mixed stacks */
  int python_reads_direct; /* CONTPROF_PYTHON_READS: direct (1), syscall */
  long alloc_sample_bytes; /* CONTPROF_ALLOC_SAMPLE_BYTES: Poisson mean */
  long heap_max_tracked;   /* CONTPROF_HEAP_MAX_TRACKED: live-table size */
  long lock_sample_ns;     /* CONTPROF_LOCK_SAMPLE_NS: Poisson mean */
  /* CONTPROF_MAX_OVERHEAD_PCT: the samplers slow down past it (governor.c);
   * 0: never. */
  double max_overhead_pct;

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
  long kernel_cost_after_ms; /* CONTPROF_KERNEL_COST_AFTER; -1: off */
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

/* Where values come from; tests pass their own. NULL means the environment
 * (cp_config_getenv). */
typedef const char *(*cp_getenv_fn)(const char *name, void *ctx);

/* Fills cfg from opts (may be NULL), then the environment, then defaults.
 * Bad values are reported with one `contprof:` line each (variable, value,
 * fallback) and replaced by the fallback; this never fails except for
 * CONTPROF_ERR_NOMEM. In a privileged program (cp_config_privileged) neither
 * the environment nor get is read: see cp_config_load_privileged. */
int cp_config_load(cp_config *cfg, const contprof_options *opts,
                   cp_getenv_fn get, void *ctx);

/* 1 when the invoking user's environment must not be trusted: the kernel
 * set AT_SECURE (setuid, setgid, file capabilities) or the real and
 * effective user or group ids differ. */
int cp_config_privileged(void);

/* The configuration of a privileged program: opts (the program's own code)
 * and built-in defaults only, the file sink into CP_PRIVILEGED_OUTPUT_DIR
 * unless opts names a directory; cfg->enabled only if allowed (root created
 * CP_ALLOW_SETUID_FILE). cp_config_load calls it; tests call it directly. */
int cp_config_load_privileged(cp_config *cfg, const contprof_options *opts,
                              int allowed);

/* 1 if CP_ALLOW_SETUID_FILE and its directory exist, are owned by root and
 * are writable by nobody else (not followed if a symbolic link). */
int cp_config_setuid_allowed(void);

/* The environment variable name, or NULL: secure_getenv, so NULL in a
 * privileged program whatever cp_config_load decided. For the bindings'
 * option callbacks, which fall back to the environment. */
const char *cp_config_getenv(const char *name);
void cp_config_free(cp_config *cfg);

/* The sampling rate of kind in force when its sampler's rate is slowed down
 * by `slowdown` (the governor's factor, 1: as configured;
 * docs/overhead.md, "The cap"), in its unit: cpu in Hz, wall the interval
 * in ms, alloc and heap the mean bytes between samples, lock the mean wait
 * in ns. */
double cp_config_rate(const cp_config *cfg, contprof_sample_kind kind,
                      unsigned slowdown);

/* "cpu,wall" for a CP_PROFILE_* mask, into buf. */
const char *cp_profiles_string(unsigned profiles, char *buf, size_t len);

#endif
