/* contprof: public C API of the always-on, in-process profiler.
 *
 * Include as <contprof/profiler.h> (it never clashes with gperftools'
 * <gperftools/profiler.h> or libprofiler.so). Link with -lcontprof, or use
 * pkg-config (contprof) or CMake's find_package(contprof).
 *
 * Every call is thread-safe. None of them may be called from a signal
 * handler, except where noted. */
#ifndef CONTPROF_PROFILER_H
#define CONTPROF_PROFILER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CONTPROF_VERSION_STRING "0.1.0"

/* Status codes: 0 is success, every failure is negative. */
typedef enum contprof_status {
  CONTPROF_OK = 0,
  CONTPROF_ERR_INVALID = -1,         /* an argument or option is invalid */
  CONTPROF_ERR_ALREADY_STARTED = -2, /* contprof_start while running */
  CONTPROF_ERR_NOT_STARTED = -3,     /* stop or flush while not running */
  CONTPROF_ERR_DISABLED = -4,        /* CONTPROF_ENABLED is false */
  CONTPROF_ERR_NOMEM = -5,           /* out of memory */
  CONTPROF_ERR_SYSTEM = -6,          /* a system call failed (see the log) */
  CONTPROF_ERR_IO = -7,              /* a profile could not be written */
  CONTPROF_ERR_LABELS_FULL = -8,     /* too many distinct label sets */
} contprof_status;

/* Options for contprof_start. A NULL string or a zero number means "take it
 * from the environment, else the default" (see docs/configuration.md); a
 * value set here wins over the environment. Zero-initialise the struct. */
typedef struct contprof_options {
  const char *service;    /* CONTPROF_SERVICE */
  const char *env;        /* CONTPROF_ENV */
  const char *version;    /* CONTPROF_VERSION */
  const char *tags;       /* CONTPROF_TAGS, "k1:v1,k2:v2" */
  const char *profiles;   /* CONTPROF_PROFILES, "cpu,wall,alloc,heap,lock" */
  const char *output_dir; /* CONTPROF_OUTPUT_DIR */
  const char *log_level;  /* CONTPROF_LOG_LEVEL: error, warn, info, debug */
  int cpu_hz;             /* CONTPROF_CPU_HZ, 1..1000 */
  int max_frames;         /* CONTPROF_MAX_FRAMES, 1..1024 */
  int upload_period_s;    /* CONTPROF_UPLOAD_PERIOD, seconds */
} contprof_options;

/* Starts profiling. opts may be NULL: everything comes from the environment.
 * Returns CONTPROF_ERR_ALREADY_STARTED if running (the running profiler is
 * untouched), CONTPROF_ERR_DISABLED when CONTPROF_ENABLED is false. */
int contprof_start(const contprof_options *opts);

/* Stops sampling and writes the last profile (covering the time since the
 * previous one). Returns CONTPROF_ERR_NOT_STARTED if not running. */
int contprof_stop(void);

/* Ends the current period now: the samples so far are written as one profile
 * and a new period starts. Returns CONTPROF_ERR_NOT_STARTED if not running. */
int contprof_flush(void);

/* 1 while the profiler runs, else 0. */
int contprof_is_running(void);

/* A static English sentence for a status code; never NULL. */
const char *contprof_strerror(int status);

/* Per-thread labels.
 *
 * contprof_label_push sets key=value on the calling thread (replacing an
 * earlier value of the same key) until the matching contprof_label_pop, which
 * restores exactly the labels the thread had before the push. Scopes nest:
 * pops must come in reverse order of pushes. Every sample of every type taken
 * on the thread while a label is set carries it. Labels may be set before
 * contprof_start and survive stop/start. */
typedef struct contprof_label_scope {
  uint32_t previous; /* the label set to restore; opaque */
  uint32_t valid;
} contprof_label_scope;

int contprof_label_push(const char *key, const char *value,
                        contprof_label_scope *scope);
void contprof_label_pop(contprof_label_scope *scope);

/* Removes every label of the calling thread. */
void contprof_labels_clear(void);

#if defined(__GNUC__) || defined(__clang__)
static inline void contprof__label_scope_end(contprof_label_scope *s) {
  contprof_label_pop(s);
}
#define CONTPROF__CAT2(a, b) a##b
#define CONTPROF__CAT(a, b) CONTPROF__CAT2(a, b)
/* CONTPROF_LABEL_SCOPE("endpoint", "/checkout"); labels the rest of the
 * enclosing block and restores the previous labels when it is left. */
#define CONTPROF_LABEL_SCOPE(key, value)                                       \
  contprof_label_scope CONTPROF__CAT(contprof__scope_, __LINE__)               \
      __attribute__((cleanup(contprof__label_scope_end)));                     \
  contprof_label_push((key), (value),                                          \
                      &CONTPROF__CAT(contprof__scope_, __LINE__))
#endif

/* Trace correlation (for tracers and instrumented services).
 *
 * contprof_set_span sets the calling thread's current span id and local root
 * span id (the id of the request's first span in this process); every sample
 * taken on the thread carries them as the `span id` and `local root span id`
 * labels until the next call. contprof_set_span(0, 0) clears them. Cheap (two
 * thread-local stores); may be called from a signal handler.
 *
 * contprof_set_endpoint names the endpoint (resource) of a local root span,
 * typically when that span finishes. Samples of that local root span get a
 * `trace endpoint` label at export, and the request counts once in the
 * period's endpoint_counts (Datadog). A second call for the same id renames
 * it without counting again. The most recent 32768 or more local root spans
 * are remembered. Returns CONTPROF_ERR_INVALID for id 0 or an empty or
 * over-1024-byte name, CONTPROF_ERR_LABELS_FULL past 4096 distinct names. */
void contprof_set_span(uint64_t span_id, uint64_t local_root_span_id);
int contprof_set_endpoint(uint64_t local_root_span_id, const char *endpoint);

/* What the profiler itself costs (docs/overhead.md), as every profile reports
 * it in its comments. */
typedef struct contprof_overhead {
  uint64_t profiler_cpu_ns;         /* threads + hooks below, + the kernel's
                                       side of the sampling signals
                                       (estimated) */
  uint64_t profiler_threads_cpu_ns; /* CPU of the profiler's own threads */
  uint64_t profiler_hooks_ns;       /* its signal handlers and sampled hooks
                                       on the application's threads */
  uint64_t process_cpu_ns;          /* CPU of the whole process */
  double profiler_overhead_pct;     /* profiler_cpu_ns / process_cpu_ns */
  uint64_t samples;                 /* samples taken, every kind */
  uint64_t drops;                   /* samples dropped, every kind */
  uint64_t profiler_rss_bytes;      /* memory the profiler holds */
} contprof_overhead;

/* Fills *last_period with the period of the last profile written (zeros
 * before the first) and *since_start with the sums since the profiler started
 * (profiler_rss_bytes: the latest); either may be NULL. Thread-safe. */
void contprof_stats(contprof_overhead *last_period,
                    contprof_overhead *since_start);

/* One profile type's part of contprof_detailed_stats: the per-profile
 * comments of every profile (`samples.cpu=`, `sampling.cpu=`...). */
typedef struct contprof_profile_stats {
  int enabled;             /* the profile type is on (else all zeros) */
  uint64_t samples;        /* taken (heap: live samples at the end) */
  uint64_t drops;          /* dropped (ring full, nested handlers) */
  uint64_t thinned;        /* of samples, taken at a raised mean (a filling
                              ring) */
  uint64_t hooks_ns;       /* of profiler_hooks_ns */
  uint64_t kernel_ns;      /* of the kernel's side of the signals */
  uint64_t threads_cpu_ns; /* of profiler_threads_cpu_ns: threads that work
                              for this profile alone (the wall timer) */
  double sampling;         /* the rate at the end: cpu in Hz, wall the
                              interval in ms, alloc and heap the mean bytes
                              between samples, lock the mean wait in ns */
  unsigned slowdown;       /* how far the cap lowered that rate at the end
                              (1: as configured) */
  unsigned slowdown_max;   /* the most it did in the period (since start:
                              in any period) */
} contprof_profile_stats;

/* Indexes of contprof_detailed_stats.profiles. */
enum {
  CONTPROF_PROFILE_CPU = 0,
  CONTPROF_PROFILE_WALL = 1,
  CONTPROF_PROFILE_ALLOC = 2,
  CONTPROF_PROFILE_HEAP = 3,
  CONTPROF_PROFILE_LOCK = 4,
  CONTPROF_PROFILE_TYPES = 5
};

/* Everything the cost comments of a profile say (docs/overhead.md). The
 * caller sets `size` to sizeof(contprof_detailed_stats): later versions
 * only append fields, and fill no more than `size` bytes. */
typedef struct contprof_detailed_stats {
  size_t size;
  contprof_overhead overhead;  /* as contprof_stats fills it */
  uint64_t profiler_kernel_ns; /* of overhead.profiler_cpu_ns: the kernel's
                                  side of the sampling signals (estimated) */
  uint64_t profiler_drain_ns;  /* of the threads' CPU: draining the sample
                                  ring */
  double max_overhead_pct;     /* CONTPROF_MAX_OVERHEAD_PCT (0: no cap) */
  contprof_profile_stats profiles[CONTPROF_PROFILE_TYPES];
} contprof_detailed_stats;

/* contprof_stats with every figure: fills *last_period and *since_start
 * (either may be NULL) as contprof_stats does. CONTPROF_ERR_INVALID when a
 * size is smaller than the first version's structure (then nothing is
 * filled), else CONTPROF_OK. Thread-safe. */
int contprof_stats_detailed(contprof_detailed_stats *last_period,
                            contprof_detailed_stats *since_start);

#ifdef __cplusplus
}
#endif
#endif
