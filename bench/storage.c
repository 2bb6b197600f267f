/* Storage of the call tree (calltree.c) against a flat per-sample log over a
 * simulated long session: THREADS threads sampled at HZ for MINUTES, stacks
 * drawn from a shared call graph, fed through cp_gen_add as the aggregator
 * does (thread id and label set in the key, CPU kind, one sample of about 10 ms
 * each).
 *
 *   storage DIST [MINUTES] [SPANS] [ZIPF_S]  ->  RESULT lines
 *   storage DIST SAMPLES SPANS ZIPF_S pprof OUT  ->  the first SAMPLES
 *     samples as one pprof file (bench/stack_stats.py compares mixes)
 *
 * DIST zipf: 100,000 stacks (random walks of depth 20-40 over 600 functions,
 * each with 2-8 callees, the first callee taken half the time, the next a
 * quarter...) drawn by Zipf rank (exponent ZIPF_S, default 1), so a few
 * thousand dominate and a long tail exists. DIST uniform: the worst case,
 * 1,000,000 walks with every callee equally likely, drawn uniformly. DIST
 * replay: the stacks of a real profile, from the catalogue file named by
 * STORAGE_REPLAY (bench/stack_stats.py --catalogue), drawn by their weight
 * there (a fixed catalogue: no tail grows with time, so this mix merges
 * more than the real program would over an hour). Each
 * thread runs requests of mean 0.5 s, each with one of 20 "endpoint" label sets
 * (drawn independently of the stack, which splits samples more than real code
 * would). SPANS 1 also gives each request its own span id (Datadog code
 * hotspots), the worst case for merging.
 *
 * Two passes over the same sample stream: first one generation per 60 s
 * period, as the aggregator keeps (memory as calltree.c counts it, heap growth
 * by mallinfo2, the gzip pprof of each period from the real exporter, and a
 * gzip of the flat log of the first period); then one generation for the
 * whole session (the most a call tree can merge). The flat log stores per
 * sample what a naive ring or log would: its frame words (8 bytes each), a
 * 2-byte frame count, the 4-byte thread id, the 4-byte label set id and the
 * 8-byte value; no timestamp (the call tree keeps none outside timeline
 * mode), and span ids only with SPANS 1 (16 bytes). */
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "aggregator/calltree.h"
#include "config.h"
#include "contprof/profiler.h"
#include "contprof/runtime.h"
#include "exporter/export.h"
#include "labels.h"
#include "stackgen.h"

#define PERIOD_S 60

static const char *lookup(const char *name, void *ctx) {
  (void)name;
  (void)ctx;
  return NULL;
}

/* Large blocks are mmapped by malloc and counted apart (hblkhd). */
static size_t heap_used(void) {
  struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

static size_t flat_bytes(size_t nframes) {
  return 8 * nframes + 2 + 4 + 4 + 8 + (spans ? 16 : 0);
}

/* The gzip pprof of g, its size; written to `path` unless NULL. */
static size_t gzip_pprof(const cp_generation *g, const cp_config *cfg,
                         uint64_t start_ns, uint64_t seq, const char *path) {
  cp_export_meta m = {.cfg = cfg,
                      .host = "bench",
                      .pid = getpid(),
                      .runtime_id = "00000000-0000-4000-8000-000000000000",
                      .runtime = "native",
                      .runtime_version = "2.36",
                      .start_ns = start_ns,
                      .end_ns = start_ns + PERIOD_S * 1000000000ull,
                      .seq = seq,
                      .cpu_period_ns = 10000000};
  uint8_t *out = NULL;
  size_t len = 0;
  if (cp_export_pprof(g, &m, CP_DIALECT_DATADOG, &out, &len) != 0)
    return 0;
  if (path) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(out, 1, len, f) != len || fclose(f) != 0)
      len = 0;
  }
  free(out);
  return len;
}

int main(int argc, char **argv) {
  const char *dist = argc > 1 ? argv[1] : "zipf";
  int minutes = argc > 2 ? atoi(argv[2]) : 60;
  spans = argc > 3 ? atoi(argv[3]) : 0;
  double s = argc > 4 ? atof(argv[4]) : 1.0;
  cp_config cfg;
  if (cp_config_load(&cfg, NULL, lookup, NULL) != 0)
    return 1;
  stackgen_init(strcmp(dist, "uniform") != 0, s);
  /* replay: the stacks of a real profile, from the catalogue file named by
   * STORAGE_REPLAY (bench/stack_stats.py --catalogue). */
  if (strcmp(dist, "replay") == 0 && stackgen_replay(getenv("STORAGE_REPLAY")))
    return 1;
  if (argc > 6 && strcmp(argv[5], "pprof") == 0) {
    /* storage DIST SAMPLES SPANS ZIPF_S pprof OUT: the first SAMPLES samples
     * in one generation, as a pprof file, to compare the mix with a real
     * profile's (bench/stack_stats.py). */
    thread_state *t = calloc((size_t)threads, sizeof *t);
    uint64_t frames[MAX_FRAMES];
    threads_reset(t);
    cp_generation *g = cp_gen_create(1, (size_t)16 << 30);
    for (uint64_t k = 0; k < strtoull(argv[2], NULL, 10); k++) {
      cp_sample_key key;
      size_t n = next_sample(t, (int)(k % (uint64_t)threads), frames, &key);
      cp_gen_add(g, frames, n, 0, &key, CONTPROF_KIND_CPU, 1, cpu_quantity());
    }
    return gzip_pprof(g, &cfg, 1790000000000000000ull, 0, argv[6]) ? 0 : 1;
  }

  thread_state *t = calloc((size_t)threads, sizeof *t);
  uint64_t frames[MAX_FRAMES];
  const uint64_t per_period = (uint64_t)threads * hz * PERIOD_S;
  const uint64_t total = per_period * (uint64_t)minutes;
  const uint64_t start_ns = 1790000000000000000ull;

  /* Pass 1: one generation per period, with the default memory bound. */
  threads_reset(t);
  uint64_t flat = 0, pprof_sum = 0, overflowed = 0, flat_gz0 = 0, flat0 = 0;
  size_t mem_max = 0, heap_max = 0, pprof0 = 0, keys_max = 0, nodes_max = 0;
  double mem_sum = 0, heap_sum = 0;
  cp_gen_memory parts_sum = {0};
  for (int p = 0; p < minutes; p++) {
    /* The flat log of the first period, to gzip it as a file would be;
     * allocated before the heap is measured. */
    uint8_t *log = NULL;
    size_t log_len = 0;
    if (p == 0)
      log = malloc(per_period * flat_bytes(MAX_FRAMES));
    size_t h0 = heap_used();
    cp_generation *g = cp_gen_create((uint64_t)p + 1, cfg.max_memory_bytes);
    for (uint64_t k = 0; k < per_period; k++) {
      int i = (int)(k % (uint64_t)threads);
      cp_sample_key key;
      size_t n = next_sample(t, i, frames, &key);
      int64_t value = cpu_quantity();
      cp_gen_add(g, frames, n, 0, &key, CONTPROF_KIND_CPU, 1, value);
      flat += flat_bytes(n);
      if (log) {
        uint16_t n16 = (uint16_t)n;
        int32_t tid = key.tid;
        memcpy(log + log_len, &n16, 2);
        memcpy(log + log_len + 2, &tid, 4);
        memcpy(log + log_len + 6, &key.labels, 4);
        memcpy(log + log_len + 10, &value, 8);
        log_len += 18;
        if (spans) {
          memcpy(log + log_len, &key.span_id, 8);
          memcpy(log + log_len + 8, &key.local_root_span_id, 8);
          log_len += 16;
        }
        memcpy(log + log_len, frames, 8 * n);
        log_len += 8 * n;
      }
    }
    size_t mem = cp_gen_memory_used(g), heap = heap_used() - h0;
    cp_gen_memory parts;
    cp_gen_memory_breakdown(g, &parts);
    parts_sum.nodes += parts.nodes;
    parts_sum.node_index += parts.node_index;
    parts_sum.rows += parts.rows;
    parts_sum.row_index += parts.row_index;
    parts_sum.values += parts.values;
    parts_sum.contexts += parts.contexts;
    parts_sum.locations += parts.locations;
    parts_sum.threads += parts.threads;
    mem_sum += (double)mem;
    heap_sum += (double)heap;
    mem_max = mem > mem_max ? mem : mem_max;
    heap_max = heap > heap_max ? heap : heap_max;
    size_t keys = cp_gen_sample_count(g), nodes = cp_gen_node_count(g);
    keys_max = keys > keys_max ? keys : keys_max;
    nodes_max = nodes > nodes_max ? nodes : nodes_max;
    overflowed += cp_gen_samples_overflowed(g);
    size_t gz =
        gzip_pprof(g, &cfg, start_ns + (uint64_t)p * PERIOD_S * 1000000000ull,
                   (uint64_t)p, NULL);
    pprof_sum += gz;
    if (p == 0) {
      pprof0 = gz;
      flat0 = log_len;
      uLongf zlen = compressBound(log_len);
      uint8_t *z = malloc(zlen);
      /* Level 6 is gzip's default. */
      if (compress2(z, &zlen, log, log_len, 6) == Z_OK)
        flat_gz0 = zlen;
      free(z);
      free(log);
    }
    cp_gen_destroy(g);
  }
  double n = (double)total, np = (double)per_period;
  /* Where the bytes of a period go (see pass 2). */
  printf("RESULT pass=period B_per_sample: nodes=%.3f node_index=%.3f "
         "rows=%.3f row_index=%.3f values=%.3f contexts=%.3f "
         "locations=%.3f threads=%.3f\n",
         (double)parts_sum.nodes / n, (double)parts_sum.node_index / n,
         (double)parts_sum.rows / n, (double)parts_sum.row_index / n,
         (double)parts_sum.values / n, (double)parts_sum.contexts / n,
         (double)parts_sum.locations / n, (double)parts_sum.threads / n);
  printf("RESULT pass=period dist=%s zipf_s=%.2f minutes=%d threads=%d hz=%d "
         "spans=%d samples=%llu per_period=%llu\n",
         dist, skewed ? zipf_s : 0.0, minutes, threads, hz, spans,
         (unsigned long long)total, (unsigned long long)per_period);
  printf("RESULT pass=period tree_bytes_mean=%.0f tree_bytes_max=%zu "
         "tree_B_per_sample=%.2f heap_bytes_mean=%.0f heap_bytes_max=%zu "
         "heap_B_per_sample=%.2f max_nodes=%zu max_keys=%zu overflowed=%llu\n",
         mem_sum / minutes, mem_max, mem_sum / minutes / np, heap_sum / minutes,
         heap_max, heap_sum / minutes / np, nodes_max, keys_max,
         (unsigned long long)overflowed);
  printf("RESULT pass=period flat_bytes=%llu flat_B_per_sample=%.2f "
         "tree_reduction_pct=%.2f heap_reduction_pct=%.2f\n",
         (unsigned long long)flat, (double)flat / n,
         100.0 * (1 - mem_sum / minutes / np / ((double)flat / n)),
         100.0 * (1 - heap_sum / minutes / np / ((double)flat / n)));
  printf("RESULT pass=period pprof_gz_first=%zu pprof_gz_sum=%llu "
         "pprof_gz_B_per_sample=%.3f pprof_reduction_pct=%.3f "
         "flat_first=%llu flat_gz_first=%llu flat_gz_B_per_sample=%.3f "
         "pprof_vs_flat_gz_pct=%.2f\n",
         pprof0, (unsigned long long)pprof_sum, (double)pprof_sum / n,
         100.0 * (1 - (double)pprof_sum / (double)flat),
         (unsigned long long)flat0, (unsigned long long)flat_gz0,
         (double)flat_gz0 / np,
         100.0 * (1 - (double)pprof0 / (double)flat_gz0));
  fflush(stdout);

  /* Pass 2: the whole session in one generation, without a bound. */
  threads_reset(t);
  size_t h0 = heap_used();
  cp_generation *g = cp_gen_create(1000, (size_t)16 << 30);
  for (uint64_t k = 0; k < total; k++) {
    int i = (int)(k % (uint64_t)threads);
    cp_sample_key key;
    size_t nf = next_sample(t, i, frames, &key);
    cp_gen_add(g, frames, nf, 0, &key, CONTPROF_KIND_CPU, 1, cpu_quantity());
  }
  size_t mem = cp_gen_memory_used(g), heap = heap_used() - h0;
  size_t gz = gzip_pprof(g, &cfg, start_ns, 0, NULL);
  /* Where the bytes go, as counted (capacities): the paths (nodes and their
   * index), the sample rows (leaf node and context) and their index, the
   * value columns of the kinds in use, the contexts (thread, labels, span
   * ids) and the locations. */
  cp_gen_memory parts;
  cp_gen_memory_breakdown(g, &parts);
  printf("RESULT pass=session B_per_sample: nodes=%.3f node_index=%.3f "
         "rows=%.3f row_index=%.3f values=%.3f contexts=%.3f "
         "locations=%.3f threads=%.3f\n",
         (double)parts.nodes / n, (double)parts.node_index / n,
         (double)parts.rows / n, (double)parts.row_index / n,
         (double)parts.values / n, (double)parts.contexts / n,
         (double)parts.locations / n, (double)parts.threads / n);
  printf("RESULT pass=session tree_bytes=%zu tree_B_per_sample=%.3f "
         "heap_bytes=%zu heap_B_per_sample=%.3f nodes=%zu locations=%zu "
         "keys=%zu overflowed=%llu tree_reduction_pct=%.3f "
         "heap_reduction_pct=%.3f pprof_gz=%zu pprof_gz_B_per_sample=%.4f\n",
         mem, (double)mem / n, heap, (double)heap / n, cp_gen_node_count(g),
         cp_gen_location_count(g), cp_gen_sample_count(g),
         (unsigned long long)cp_gen_samples_overflowed(g),
         100.0 * (1 - (double)mem / (double)flat),
         100.0 * (1 - (double)heap / (double)flat), gz, (double)gz / n);
  cp_gen_destroy(g);
  return 0;
}
