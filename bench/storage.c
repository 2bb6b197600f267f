/* Storage of the call tree (calltree.c) against a flat per-sample log over a
 * simulated long session: THREADS threads sampled at HZ for MINUTES, stacks
 * drawn from a shared call graph, fed through cp_gen_add as the aggregator
 * does (thread id and label set in the key, CPU kind, one 10 ms sample each).
 *
 *   storage DIST [MINUTES] [SPANS] [ZIPF_S]  ->  RESULT lines
 *
 * DIST zipf: 100,000 stacks (random walks of depth 20-40 over 600 functions,
 * each with 2-8 callees, the first callee taken half the time, the next a
 * quarter...) drawn by Zipf rank (exponent ZIPF_S, default 1), so a few
 * thousand dominate and a long tail exists. DIST uniform: the worst case,
 * 1,000,000 walks with every callee equally likely, drawn uniformly. Each
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

#define FUNCTIONS 600
#define MAX_CALLEES 8
#define MIN_DEPTH 20
#define MAX_DEPTH 40
#define ENDPOINTS 20
#define PERIOD_S 60

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double uniform01(uint64_t *s) {
  return (double)(splitmix(s) >> 11) / 9007199254740992.0;
}

static int ncallees[FUNCTIONS];
static int callee[FUNCTIONS][MAX_CALLEES];
static uint64_t frame_word[FUNCTIONS];
static int skewed; /* zipf: the first callee half the time, and so on */
static size_t catalogue;
static double zipf_s = 1.0;
static double *zipf_cdf; /* zipf: cumulative weights of ranks 1..catalogue */

/* The stack of catalogue entry i, leaf first; returns its depth. The walk is
 * a function of i alone, so the catalogue needs no memory. */
static size_t stack_of(uint64_t i, uint64_t *frames) {
  uint64_t s = i * 0x2545f4914f6cdd1dull + 1;
  size_t depth = MIN_DEPTH + splitmix(&s) % (MAX_DEPTH - MIN_DEPTH + 1);
  int f = 0; /* the thread's entry function */
  frames[depth - 1] = frame_word[f];
  for (size_t d = depth - 1; d-- > 0;) {
    uint64_t r = splitmix(&s);
    int j;
    if (skewed) {
      j = 0;
      while (j < ncallees[f] - 1 && (r & 1)) {
        j++;
        r >>= 1;
      }
    } else {
      j = (int)(r % (uint64_t)ncallees[f]);
    }
    f = callee[f][j];
    frames[d] = frame_word[f];
  }
  return depth;
}

static uint64_t draw_stack(uint64_t *rng) {
  if (!skewed)
    return splitmix(rng) % catalogue;
  double u = uniform01(rng) * zipf_cdf[catalogue - 1];
  size_t lo = 0, hi = catalogue - 1;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (zipf_cdf[mid] < u)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

typedef struct thread_state {
  uint64_t rng;
  int request_left; /* samples left in the current request */
  uint32_t labels;
  uint64_t span;
} thread_state;

static uint32_t endpoint_labels[ENDPOINTS];
static int spans;
static int threads = 16, hz = 100;
static const char *lookup(const char *name, void *ctx) {
  (void)name;
  (void)ctx;
  return NULL;
}

static void threads_reset(thread_state *t) {
  for (int i = 0; i < threads; i++)
    t[i] = (thread_state){.rng = 0x1234567ull * (uint64_t)(i + 1)};
}

/* The next sample of thread i: its stack into frames, its key. */
static size_t next_sample(thread_state *t, int i, uint64_t *frames,
                          cp_sample_key *key) {
  thread_state *ts = &t[i];
  if (ts->request_left <= 0) {
    /* Exponential request length, mean 50 samples (0.5 s at 100 Hz). */
    double u = uniform01(&ts->rng);
    ts->request_left = 1 + (int)(-50.0 * log1p(-u));
    ts->labels = endpoint_labels[splitmix(&ts->rng) % ENDPOINTS];
    ts->span =
        spans ? ((uint64_t)(i + 1) << 40) + splitmix(&ts->rng) % 1000000 : 0;
  }
  ts->request_left--;
  size_t n = stack_of(draw_stack(&ts->rng), frames);
  *key = (cp_sample_key){.labels = ts->labels,
                         .tid = 1000 + i,
                         .span_id = ts->span,
                         .local_root_span_id = ts->span};
  return n;
}

/* Large blocks are mmapped by malloc and counted apart (hblkhd). */
static size_t heap_used(void) {
  struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

static size_t flat_bytes(size_t nframes) {
  return 8 * nframes + 2 + 4 + 4 + 8 + (spans ? 16 : 0);
}

static size_t gzip_pprof(const cp_generation *g, const cp_config *cfg,
                         uint64_t start_ns, uint64_t seq) {
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
  free(out);
  return len;
}

int main(int argc, char **argv) {
  const char *dist = argc > 1 ? argv[1] : "zipf";
  int minutes = argc > 2 ? atoi(argv[2]) : 60;
  spans = argc > 3 ? atoi(argv[3]) : 0;
  zipf_s = argc > 4 ? atof(argv[4]) : 1.0;
  skewed = strcmp(dist, "uniform") != 0;
  catalogue = skewed ? 100000 : 1000000;
  cp_config cfg;
  if (cp_config_load(&cfg, NULL, lookup, NULL) != 0)
    return 1;

  uint64_t rng = 42;
  for (int f = 0; f < FUNCTIONS; f++) {
    char name[64];
    snprintf(name, sizeof name, "app::module%d::function_%d", f % 40, f);
    frame_word[f] = contprof_frame_intern(name, "src/app.cc", 10 + f);
    ncallees[f] = 2 + (int)(splitmix(&rng) % (MAX_CALLEES - 1));
    for (int j = 0; j < ncallees[f]; j++)
      callee[f][j] = 1 + (int)(splitmix(&rng) % (FUNCTIONS - 1));
  }
  if (skewed) {
    zipf_cdf = malloc(catalogue * sizeof *zipf_cdf);
    double sum = 0;
    for (size_t r = 0; r < catalogue; r++)
      zipf_cdf[r] = sum += pow((double)(r + 1), -zipf_s);
  }
  for (int e = 0; e < ENDPOINTS; e++) {
    char v[32];
    snprintf(v, sizeof v, "GET /api/v1/resource%d", e);
    contprof_label_scope scope;
    contprof_label_push("endpoint", v, &scope);
    endpoint_labels[e] = cp_labels_hold(cp_labels_current());
    contprof_label_pop(&scope);
  }

  thread_state *t = calloc((size_t)threads, sizeof *t);
  uint64_t frames[MAX_DEPTH];
  const uint64_t per_period = (uint64_t)threads * hz * PERIOD_S;
  const uint64_t total = per_period * (uint64_t)minutes;
  const uint64_t start_ns = 1790000000000000000ull;

  /* Pass 1: one generation per period, with the default memory bound. */
  threads_reset(t);
  uint64_t flat = 0, pprof_sum = 0, overflowed = 0, flat_gz0 = 0, flat0 = 0;
  size_t mem_max = 0, heap_max = 0, pprof0 = 0, keys_max = 0, nodes_max = 0;
  double mem_sum = 0, heap_sum = 0;
  for (int p = 0; p < minutes; p++) {
    /* The flat log of the first period, to gzip it as a file would be;
     * allocated before the heap is measured. */
    uint8_t *log = NULL;
    size_t log_len = 0;
    if (p == 0)
      log = malloc(per_period * flat_bytes(MAX_DEPTH));
    size_t h0 = heap_used();
    cp_generation *g = cp_gen_create((uint64_t)p + 1, cfg.max_memory_bytes);
    for (uint64_t k = 0; k < per_period; k++) {
      int i = (int)(k % (uint64_t)threads);
      cp_sample_key key;
      size_t n = next_sample(t, i, frames, &key);
      cp_gen_add(g, frames, n, 0, &key, CONTPROF_KIND_CPU, 1, 10000000);
      flat += flat_bytes(n);
      if (log) {
        uint16_t n16 = (uint16_t)n;
        int32_t tid = key.tid;
        int64_t value = 10000000;
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
                   (uint64_t)p);
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
    cp_gen_add(g, frames, nf, 0, &key, CONTPROF_KIND_CPU, 1, 10000000);
  }
  size_t mem = cp_gen_memory_used(g), heap = heap_used() - h0;
  size_t gz = gzip_pprof(g, &cfg, start_ns, 0);
  /* Where the bytes go, without the tables' slack: the paths themselves
   * (nodes) against the keyed value rows (one per leaf, labels, thread and
   * span, each with every kind's values). */
  printf("RESULT pass=session nodes_payload_B_per_sample=%.3f "
         "rows_payload_B_per_sample=%.3f row_bytes=%zu\n",
         (double)(cp_gen_node_count(g) * sizeof(cp_node)) / n,
         (double)(cp_gen_sample_count(g) * sizeof(cp_sample)) / n,
         sizeof(cp_sample));
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
