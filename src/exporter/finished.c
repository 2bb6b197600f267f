/* The finished export of one period (cp_export, export.h): what the sinks
 * receive instead of the aggregator's generation. The whole profile is
 * encoded once, when the first sink asks, and shared by the others (a file
 * and a Datadog upload get the same bytes); a sink that needs only some
 * profiles (Pyroscope's families) has them encoded for it. */
#include <stdlib.h>
#include <string.h>

#include "aggregator/calltree.h"
#include "export.h"

void cp_export_init(cp_export *e, const cp_generation *g,
                    const cp_export_meta *meta) {
  memset(e, 0, sizeof *e);
  e->meta = *meta;
  e->samples = cp_gen_samples_added(g);
  e->samples_overflowed = cp_gen_samples_overflowed(g);
  e->source = g;
}

void cp_export_release(cp_export *e) {
  free(e->profile);
  e->profile = NULL;
  e->profile_len = 0;
}

int cp_export_profile(cp_export *e, const uint8_t **data, size_t *len) {
  if (!e->profile && cp_export_pprof(e->source, &e->meta, CP_DIALECT_DATADOG,
                                     &e->profile, &e->profile_len) != 0) {
    e->profile = NULL;
    return -1;
  }
  *data = e->profile;
  *len = e->profile_len;
  return 0;
}

int cp_export_has_samples(const cp_export *e, unsigned profiles) {
  const cp_generation *g = e->source;
  for (size_t i = 0; i < cp_gen_sample_count(g); i++) {
    cp_sample s;
    cp_gen_sample(g, i, &s);
    /* A kind's count and quantity are its pair of values (kinds.h). */
    for (int k = 0; k < CONTPROF_KIND_COUNT; k++) {
      int v = cp_kind_value_index((contprof_sample_kind)k);
      if ((profiles & cp_kinds[k].profile) && (s.values[v] || s.values[v + 1]))
        return 1;
    }
  }
  return 0;
}

int cp_export_encode(const cp_export *e, const cp_export_options *o,
                     uint8_t **out, size_t *out_len, size_t *samples_folded) {
  return cp_export_pprof_with(e->source, &e->meta, o, out, out_len,
                              samples_folded);
}
