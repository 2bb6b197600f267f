/* dwarf_export: what DWARF lines cost the exporter (docs/benchmarks.md,
 * "Native lines"), on the library's own code linked statically.
 *
 *   dwarf_export LIB ADDRS [PERIODS] [nodwarf]
 *   dwarf_export LIB ADDRS chains      (each address's chain, for a diff
 *                                       with addr2line -i -f)
 *
 * dlopens LIB, reads ELF addresses (hex, one a line) of its code from ADDRS,
 * and exports PERIODS generations (default 5) that each hold one sample per
 * address, as the aggregator's periods would: the first export opens the
 * DWARF and resolves every address, later ones hit the per-address cache.
 * Prints each export's wall and CPU time, the peak RSS, the DWARF memory
 * counted against CONTPROF_DWARF_MAX_MB, and how many locations have lines.
 * With nodwarf the cap is 1 byte (no module fits): the function-names-only cost
 * this change started from. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "aggregator/calltree.h"
#include "aggregator/dwarf.h"
#include "aggregator/symbols.h"
#include "config.h"
#include "exporter/export.h"
#include "exporter/pprof_read.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* This thread's CPU time: on a loaded machine, closer to the work done
 * than wall time (time spent waiting for a CPU is left out). */
static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long peak_rss_kb(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

static const char *no_env(const char *name, void *ctx) {
  (void)ctx;
  return strcmp(name, "CONTPROF_LOG_LEVEL") == 0 ? "error" : NULL;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: dwarf_export LIB ADDRS [PERIODS] [nodwarf]\n");
    return 2;
  }
  if (argc > 3 && strcmp(argv[3], "chains") == 0) {
    FILE *in = fopen(argv[2], "r");
    cp_line_chain *c = malloc(sizeof *c);
    cp_dwarf_object obj = {.path = argv[1], .build_id = ""};
    unsigned long long addr;
    cp_symbols_demangle_prepare();
    while (in && fscanf(in, "%llx", &addr) == 1) {
      cp_dwarf_lookup(&obj, addr, c);
      printf("%llx", addr);
      for (size_t k = 0; k < c->n; k++)
        printf(" %s:%" PRId64, c->frames[k].function, c->frames[k].line);
      printf("\n");
    }
    return 0;
  }
  int periods = argc > 3 ? atoi(argv[3]) : 5;
  int nodwarf = argc > 4 && strcmp(argv[4], "nodwarf") == 0;
  void *h = dlopen(argv[1], RTLD_NOW);
  if (!h) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  Dl_info info;
  if (!dladdr(dlsym(h, "big_fn_0"), &info)) {
    fprintf(stderr, "dladdr failed\n");
    return 1;
  }
  uint64_t base = (uint64_t)(uintptr_t)info.dli_fbase;
  FILE *f = fopen(argv[2], "r");
  size_t n = 0, cap = 16384;
  uint64_t *pcs = malloc(cap * sizeof *pcs);
  unsigned long long a;
  while (f && fscanf(f, "%llx", &a) == 1) {
    if (n == cap)
      pcs = realloc(pcs, (cap *= 2) * sizeof *pcs);
    pcs[n++] = base + a;
  }
  if (f)
    fclose(f);
  cp_config cfg;
  if (cp_config_load(&cfg, NULL, no_env, NULL) != 0)
    return 1;
  if (nodwarf)
    cp_dwarf_set_budget(1);
  cp_symbols_init();
  long rss0 = peak_rss_kb();
  printf("addresses=%zu periods=%d dwarf=%s baseline_peak_rss_kb=%ld\n", n,
         periods, nodwarf ? "off" : "on", rss0);
  for (int p = 0; p < periods; p++) {
    cp_generation *g = cp_gen_create((uint64_t)p + 1, (size_t)1 << 30);
    cp_sample_key key = {0};
    for (size_t i = 0; i < n; i++)
      cp_gen_add(g, &pcs[i], 1, 0, &key, CONTPROF_KIND_CPU, 1, 1000);
    cp_export_meta m = {.cfg = &cfg,
                        .host = "h",
                        .pid = 1,
                        .runtime_id = "r",
                        .runtime = "native",
                        .runtime_version = "1",
                        .start_ns = 1,
                        .end_ns = 2,
                        .cpu_period_ns = 10000000};
    uint8_t *out = NULL;
    size_t len = 0;
    double t0 = now_s(), c0 = cpu_s();
    int rc = cp_export_pprof(g, &m, CP_DIALECT_DATADOG, &out, &len);
    double t = now_s() - t0, cpu = cpu_s() - c0;
    size_t with_lines = 0, inlined = 0;
    pprof_profile *prof = NULL;
    char err[128];
    if (rc == 0 &&
        pprof_read_buffer(out, len, 512 << 20, &prof, err, sizeof err) == 0) {
      for (size_t i = 0; i < prof->n_location; i++) {
        const Perftools__Profiles__Location *l = prof->location[i];
        if (l->n_line && l->line[0]->line > 0)
          with_lines++;
        if (l->n_line > 1)
          inlined++;
      }
      pprof_profile_free(prof);
    }
    printf("export %d: %.3f s (cpu %.3f s), %zu bytes, %zu locations with "
           "lines, %zu with inline frames, peak_rss_kb=%ld, "
           "dwarf_counted_kb=%zu\n",
           p + 1, t, cpu, len, with_lines, inlined, peak_rss_kb(),
           cp_dwarf_memory_used() >> 10);
    free(out);
    cp_gen_destroy(g);
    cp_symbols_collect((uint64_t)p + 2);
  }
  cp_config_free(&cfg);
  return 0;
}
