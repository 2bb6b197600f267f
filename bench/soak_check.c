/* soak_check: what bench/soak.sh needs from the profiles of a run.
 *
 *   soak_check FILE...
 *
 * Prints one line per file, in the order given:
 *   start_ns duration_ns samples_dropped dropped_counts cpu_ns alloc_bytes
 * where samples_dropped is the profile's comment, dropped_counts the sum of
 * the count-type values (cpu-samples, wall-samples, alloc-samples,
 * lock-acquire) on the "[dropped]" stack, cpu_ns the cpu-time total and
 * alloc_bytes the alloc-space total (-1 when the type is absent). Exits 1
 * on an unreadable file. Reads them with src/exporter/pprof_read.h. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exporter/pprof_read.h"

static int64_t type_total(const pprof_profile *p, const char *type) {
  int t = pprof_sample_type_index(p, type);
  if (t < 0)
    return -1;
  int64_t sum = 0;
  for (size_t i = 0; i < p->n_sample; i++)
    sum += p->sample[i]->value[t];
  return sum;
}

static int64_t comment_u64(const pprof_profile *p, const char *key) {
  size_t klen = strlen(key);
  for (size_t i = 0; i < p->n_comment; i++) {
    const char *c = pprof_str(p, p->comment[i]);
    if (strncmp(c, key, klen) == 0 && c[klen] == '=')
      return strtoll(c + klen + 1, NULL, 10);
  }
  return -1;
}

static int64_t dropped_counts(const pprof_profile *p) {
  static const char *const counts[] = {"cpu-samples", "wall-samples",
                                       "alloc-samples", "lock-acquire"};
  int64_t sum = 0;
  for (size_t i = 0; i < p->n_sample; i++) {
    const Perftools__Profiles__Sample *s = p->sample[i];
    if (!pprof_sample_has_function(p, s, "[dropped]"))
      continue;
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
      int t = pprof_sample_type_index(p, counts[c]);
      if (t >= 0)
        sum += s->value[t];
    }
  }
  return sum;
}

int main(int argc, char **argv) {
  int status = 0;
  for (int i = 1; i < argc; i++) {
    pprof_profile *p;
    char err[256];
    if (pprof_read_file(argv[i], &p, err, sizeof err) != 0) {
      fprintf(stderr, "soak_check: %s: %s\n", argv[i], err);
      status = 1;
      continue;
    }
    printf("%" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64
           " %" PRId64 "\n",
           p->time_nanos, p->duration_nanos, comment_u64(p, "samples_dropped"),
           dropped_counts(p), type_total(p, "cpu-time"),
           type_total(p, "alloc-space"));
    pprof_profile_free(p);
  }
  return status;
}
