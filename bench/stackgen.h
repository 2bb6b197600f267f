/* The simulated sample stream of bench/storage.c and bench/drain.c: stacks
 * drawn from a shared call graph (Zipf-ranked or uniform, see storage.c), 16
 * threads running requests with one of 20 endpoint label sets and,
 * optionally, a span id each. Deterministic. Only the call tree's stable
 * interface (cp_sample_key, label and frame interning) is used, so that
 * drain.c builds against older libraries for paired runs. */
#ifndef CP_BENCH_STACKGEN_H
#define CP_BENCH_STACKGEN_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aggregator/calltree.h"
#include "contprof/runtime.h"
#include "labels.h"

#define FUNCTIONS 600
#define MAX_CALLEES 8
#define MIN_DEPTH 20
#define MAX_DEPTH 40
#define ENDPOINTS 20
/* Frame buffers: the walks are at most MAX_DEPTH deep, replayed stacks are
 * cut (leaf side kept, as the unwinder does) at MAX_FRAMES. */
#define MAX_FRAMES 128

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
/* replay: the stacks of a real profile (bench/stack_stats.py --catalogue),
 * drawn by their weight there. */
static int replay;
static uint64_t *replay_words;
static size_t *replay_start, *replay_len;
static double *replay_cdf;

/* The stack of catalogue entry i, leaf first; returns its depth. The walk is
 * a function of i alone, so the catalogue needs no memory. */
static size_t stack_of(uint64_t i, uint64_t *frames) {
  if (replay) {
    memcpy(frames, replay_words + replay_start[i],
           replay_len[i] * sizeof *frames);
    return replay_len[i];
  }
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
  if (!skewed && !replay)
    return splitmix(rng) % catalogue;
  const double *cdf = replay ? replay_cdf : zipf_cdf;
  double u = uniform01(rng) * cdf[catalogue - 1];
  size_t lo = 0, hi = catalogue - 1;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (cdf[mid] < u)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* The CPU time of one sample, as the default perf clock reports it: a
 * 10 ms period give or take where the sample fell (uniform in -480 to +512
 * us: the spread and the +16 us mean of one-period samples in a real
 * profile on this machine, bench/stacks/), not the exact period a POSIX
 * timer gives, which would flatter the call tree's narrow values. */
static uint64_t jitter_rng = 12345;
static int64_t cpu_quantity(void) {
  return 10000000 - 480000 + (int64_t)(splitmix(&jitter_rng) % 992000);
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

/* Builds the call graph, the Zipf table (skewed) and the label sets. */
static void stackgen_init(int skew, double s) {
  skewed = skew;
  zipf_s = s;
  catalogue = skewed ? 100000 : 1000000;
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
}

/* Replaces the walks by the stacks of a catalogue file: one line per stack,
 * "WEIGHT LOC..." with location ids leaf first; each id becomes one runtime
 * frame. Returns 0, or -1 (with a message) when the file is unusable. */
static int stackgen_replay(const char *path) {
  FILE *f = path ? fopen(path, "r") : NULL;
  if (!f) {
    fprintf(stderr, "stackgen: cannot read catalogue %s\n",
            path ? path : "(unset)");
    return -1;
  }
  size_t cap = 1024, words_cap = 65536, nwords = 0;
  replay_start = malloc(cap * sizeof *replay_start);
  replay_len = malloc(cap * sizeof *replay_len);
  replay_cdf = malloc(cap * sizeof *replay_cdf);
  replay_words = malloc(words_cap * sizeof *replay_words);
  catalogue = 0;
  double sum = 0;
  char line[65536];
  while (fgets(line, sizeof line, f)) {
    char *p = line, *end;
    double w = strtod(p, &end);
    if (end == p || w <= 0)
      continue;
    if (catalogue == cap) {
      cap *= 2;
      replay_start = realloc(replay_start, cap * sizeof *replay_start);
      replay_len = realloc(replay_len, cap * sizeof *replay_len);
      replay_cdf = realloc(replay_cdf, cap * sizeof *replay_cdf);
    }
    replay_start[catalogue] = nwords;
    size_t n = 0;
    for (p = end;; p = end) {
      unsigned long id = strtoul(p, &end, 10);
      if (end == p)
        break;
      if (n == MAX_FRAMES)
        continue;
      if (nwords == words_cap)
        replay_words =
            realloc(replay_words, (words_cap *= 2) * sizeof *replay_words);
      char name[32];
      snprintf(name, sizeof name, "real_location_%lu", id);
      replay_words[nwords++] =
          contprof_frame_intern(name, "real.c", (int)(id % 100000));
      n++;
    }
    replay_len[catalogue] = n;
    replay_cdf[catalogue++] = sum += w;
  }
  fclose(f);
  replay = catalogue > 0;
  if (!replay)
    fprintf(stderr, "stackgen: no stacks in %s\n", path);
  return replay ? 0 : -1;
}

#endif
