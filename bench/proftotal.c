/* proftotal: the CPU time a profile reports.
 *
 *   proftotal FILE...
 *
 * Prints "samples N cpu_ns T" summed over the FILEs, which are either
 * contprof's gzip pprof files (N: the cpu-samples total, T: the cpu-time
 * total) or one gperftools CPU profile in its legacy binary format (N: the
 * sample count, T: N times the sampling period in its header). Exits 1 on an
 * unreadable file. Reads contprof's files with src/exporter/pprof_read.h. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exporter/pprof_read.h"

/* gperftools' format (profiledata.cc): machine words; a header
 * {0, 3, 0, period_us, 0}, records {count, depth, pc...}, a trailer
 * {0, 1, 0}, then the text of /proc/self/maps. */
static int read_gperftools(FILE *f, const char *path, int64_t *samples,
                           int64_t *ns) {
  uintptr_t hdr[5];
  if (fread(hdr, sizeof hdr[0], 5, f) != 5 || hdr[0] != 0 || hdr[1] != 3 ||
      hdr[2] != 0 || hdr[3] == 0) {
    fprintf(stderr, "proftotal: %s: not a gperftools CPU profile\n", path);
    return -1;
  }
  uint64_t period_us = hdr[3];
  int64_t n = 0;
  for (;;) {
    uintptr_t rec[2];
    if (fread(rec, sizeof rec[0], 2, f) != 2) {
      fprintf(stderr, "proftotal: %s: truncated gperftools profile\n", path);
      return -1;
    }
    if (rec[0] == 0 && rec[1] == 1) /* trailer */
      break;
    if (rec[1] > 4096 ||
        fseek(f, (long)(rec[1] * sizeof(uintptr_t)), SEEK_CUR) != 0) {
      fprintf(stderr, "proftotal: %s: bad gperftools record\n", path);
      return -1;
    }
    n += (int64_t)rec[0];
  }
  *samples += n;
  *ns += n * (int64_t)period_us * 1000;
  return 0;
}

static int read_contprof(const char *path, int64_t *samples, int64_t *ns) {
  char err[256];
  pprof_profile *p;
  if (pprof_read_file(path, &p, err, sizeof err) != 0) {
    fprintf(stderr, "proftotal: %s: %s\n", path, err);
    return -1;
  }
  int is = pprof_sample_type_index(p, "cpu-samples");
  int it = pprof_sample_type_index(p, "cpu-time");
  if (is >= 0 && it >= 0) {
    for (size_t i = 0; i < p->n_sample; i++) {
      *samples += p->sample[i]->value[is];
      *ns += p->sample[i]->value[it];
    }
  }
  pprof_profile_free(p);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: proftotal FILE...\n");
    return 2;
  }
  int64_t samples = 0, ns = 0;
  for (int i = 1; i < argc; i++) {
    FILE *f = fopen(argv[i], "rb");
    if (!f) {
      perror(argv[i]);
      return 1;
    }
    unsigned char magic[2] = {0, 0};
    size_t got = fread(magic, 1, 2, f);
    rewind(f);
    int rc;
    if (got == 2 && magic[0] == 0x1f && magic[1] == 0x8b) {
      fclose(f);
      rc = read_contprof(argv[i], &samples, &ns);
    } else {
      rc = read_gperftools(f, argv[i], &samples, &ns);
      fclose(f);
    }
    if (rc != 0)
      return 1;
  }
  printf("samples %" PRId64 " cpu_ns %" PRId64 "\n", samples, ns);
  return 0;
}
