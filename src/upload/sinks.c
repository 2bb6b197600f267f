/* Which sinks a process gets: CONTPROF_EXPORT, or what the environment
 * suggests (a Datadog agent, a Pyroscope server, else files). */
#include <stdlib.h>

#include "common.h"
#include "http_sink.h"
#include "sink.h"

cp_sink **cp_sinks_create(const cp_config *cfg, size_t *count) {
  cp_sink **sinks = calloc(3, sizeof *sinks);
  size_t n = 0;
  if (!sinks)
    return NULL;
  if (cfg->exports & CP_EXPORT_DATADOG) {
    if ((sinks[n] = cp_datadog_sink_create(cfg)))
      n++;
  }
  if (cfg->exports & CP_EXPORT_PYROSCOPE) {
    if ((sinks[n] = cp_pyroscope_sink_create(cfg)))
      n++;
  }
  int want_file = (cfg->exports & CP_EXPORT_FILE) != 0;
  if (!want_file && n == 0) {
    cp_warn("no upload could be set up; writing profiles to %s instead",
            cfg->output_dir);
    want_file = 1;
  }
  if (want_file) {
    if ((sinks[n] = cp_file_sink_create(cfg)))
      n++;
    else if (n == 0) {
      free(sinks);
      return NULL;
    }
  }
  *count = n;
  return sinks;
}

void cp_sinks_destroy(cp_sink **sinks, size_t count) {
  for (size_t i = 0; i < count; i++)
    sinks[i]->destroy(sinks[i]);
  free(sinks);
}
