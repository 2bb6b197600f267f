/* libFuzzer target for the pprof reader behind `contprof top`
 * (src/exporter/pprof_read.c): gunzip when the input is gzip, decode,
 * validate, then everything top does with a valid profile (the top table,
 * function names of every location, labels, every string printed escaped).
 * Hostile input must give -1 and a message, never a crash, a leak or an
 * unbounded allocation. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exporter/pprof_read.h"

/* Smaller than the command line's 512 MiB so that each run stays fast. */
#define FUZZ_MAX_BYTES ((size_t)16 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  pprof_profile *p = NULL;
  char err[256];
  err[0] = 0;
  if (pprof_read_buffer(data, size, FUZZ_MAX_BYTES, &p, err, sizeof err)) {
    if (p || !err[0])
      __builtin_trap(); /* failure must come with a reason, no profile */
    return 0;
  }
  const pprof_profile *const profiles[] = {p};
  pprof_top top;
  if (pprof_top_compute(profiles, 1, NULL, &top, err, sizeof err) == 0)
    pprof_top_free(&top);
  /* Every sample type by name, as `contprof top --type` would ask. */
  for (size_t t = 0; t < p->n_sample_type; t++) {
    const char *name = pprof_str(p, p->sample_type[t]->type);
    if (pprof_top_compute(profiles, 1, name, &top, err, sizeof err) == 0)
      pprof_top_free(&top);
  }
  (void)pprof_default_sample_type_index(p);
  const char *names[8];
  for (size_t i = 0; i < p->n_location; i++)
    (void)pprof_location_functions(p, p->location[i], names, 8);
  for (size_t i = 0; i < p->n_sample && i < 1000; i++) {
    const Perftools__Profiles__Sample *s = p->sample[i];
    (void)pprof_sample_has_function(p, s, "main");
    const Perftools__Profiles__Label *l = pprof_sample_label(p, s, "thread id");
    if (l)
      (void)pprof_label_str(p, l);
  }
  /* What top prints goes through the escaper; /dev/null keeps it quiet. */
  static FILE *devnull;
  if (!devnull)
    devnull = fopen("/dev/null", "w");
  for (size_t i = 0; devnull && i < p->n_string_table; i++)
    pprof_fput_escaped(p->string_table[i], devnull);
  pprof_profile_free(p);
  return 0;
}
