/* Generates the merge benchmark's inputs (bench/merge.sh): N pprof files
 * (default 200), each 2,000 distinct stacks of depth 20 to 40 drawn from a
 * pool of random walks over one call graph of 600 functions, as processes of
 * one program would record them; each file has its own mapping address
 * (ASLR), so only function identity merges them.
 * usage: gen_profiles DIR [N] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exporter/pprof.h"

#define NFUNC 600
#define FANOUT 6
#define POOL 20000
#define PER_PROFILE 2000

static uint64_t rng_state = 0x243f6a8885a308d3ull;
static uint64_t rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static int callees[NFUNC][FANOUT];
static uint16_t pool[POOL][40];
static uint8_t depth[POOL];

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: gen_profiles DIR [N]\n");
    return 2;
  }
  int nprof = argc > 2 ? atoi(argv[2]) : 200;
  for (int f = 0; f < NFUNC; f++)
    for (int k = 0; k < FANOUT; k++)
      callees[f][k] = (int)(rng() % NFUNC);
  for (int s = 0; s < POOL; s++) {
    depth[s] = (uint8_t)(20 + rng() % 21);
    int f = (int)(rng() % 8); /* a few roots: main, thread starts */
    for (int d = 0; d < depth[s]; d++) {
      pool[s][d] = (uint16_t)f;
      f = callees[f][rng() % FANOUT];
    }
  }
  static uint8_t used[POOL];
  for (int p = 0; p < nprof; p++) {
    pprof_builder *b = pprof_builder_create();
    pprof_add_sample_type(b, "cpu-samples", "count");
    pprof_add_sample_type(b, "cpu-time", "nanoseconds");
    pprof_set_default_sample_type(b, "cpu-time");
    pprof_set_period(b, "cpu-time", "nanoseconds", 10000000);
    pprof_set_time(b, 1764590000000000000ll + p * 1000000000ll, 60000000000ll);
    uint64_t base = 0x555500000000ull + (rng() % 4096) * 0x1000000ull;
    uint64_t map = pprof_add_mapping(b, base, base + 0x1000000, 0,
                                     "/usr/bin/server", "0123abcd", 1);
    uint64_t fid[NFUNC], lid[NFUNC];
    char name[64], file[64];
    for (int f = 0; f < NFUNC; f++) {
      snprintf(name, sizeof name, "ns%d::Service::handler_%d", f % 17, f);
      snprintf(file, sizeof file, "src/module_%d.cc", f % 40);
      fid[f] = pprof_add_function(b, name, name, file, 10 + f);
      lid[f] = pprof_add_location(b, map, base + 0x1000 + 0x40 * (uint64_t)f,
                                  fid[f], 20 + f);
    }
    memset(used, 0, sizeof used);
    for (int n = 0; n < PER_PROFILE;) {
      int s = (int)(rng() % POOL);
      if (used[s])
        continue;
      used[s] = 1;
      n++;
      uint64_t ids[40];
      for (int d = 0; d < depth[s]; d++) /* leaf first */
        ids[d] = lid[pool[s][depth[s] - 1 - d]];
      int64_t count = 1 + (int64_t)(rng() % 50);
      int64_t v[2] = {count, count * 10000000};
      if (pprof_add_sample(b, ids, depth[s], v, 2, NULL, 0) != 0)
        return 1;
    }
    uint8_t *raw, *gz;
    size_t len, gzlen;
    if (pprof_encode(b, &raw, &len) || pprof_gzip(raw, len, &gz, &gzlen))
      return 1;
    char path[4096];
    snprintf(path, sizeof path, "%s/server.%d.pb.gz", argv[1], 1000 + p);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(gz, 1, gzlen, f) != gzlen || fclose(f) != 0) {
      perror(path);
      return 1;
    }
    free(raw);
    free(gz);
    pprof_builder_destroy(b);
  }
  return 0;
}
