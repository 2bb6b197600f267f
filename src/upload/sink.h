/* A sink receives every finished period (cp_export: the encoded profile and
 * its metadata) and delivers it in its own form (a file, an HTTP backend).
 * Sinks are independent: one failing never stops another. They run on the
 * scheduler's thread only. */
#ifndef CP_SINK_H
#define CP_SINK_H

#include "config.h"
#include "exporter/export.h"

typedef struct cp_sink cp_sink;
struct cp_sink {
  const char *name;
  /* Returns 0 when delivered (or safely kept for later), -1 otherwise. */
  int (*send)(cp_sink *self, cp_export *e);
  /* Optional (NULL for sinks that never wait): at stop, deliver what is
   * queued until deadline_ns (CLOCK_MONOTONIC) without blocking the caller;
   * destroy then returns by the deadline. */
  void (*finish)(cp_sink *self, uint64_t deadline_ns);
  void (*destroy)(cp_sink *self);
};

/* Profiles as gzip pprof files in cfg->output_dir. */
cp_sink *cp_file_sink_create(const cp_config *cfg);

/* The sinks cfg->exports selects (falling back to files when none can be
 * made), in a malloc'd array; NULL on ENOMEM. */
cp_sink **cp_sinks_create(const cp_config *cfg, size_t *count);
void cp_sinks_destroy(cp_sink **sinks, size_t count);

#endif
