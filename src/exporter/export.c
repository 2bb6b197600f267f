/* Generation -> pprof: sample types of the enabled profiles, locations with
 * mappings and build ids, functions (module+offset when no symbol), labels
 * (`thread id`, `thread name`, the user's labels, trace ids) and metadata
 * comments. The wire format is pprof.c's business. */
#include "export.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "aggregator/calltree.h"
#include "aggregator/dwarf.h"
#include "aggregator/frames.h"
#include "aggregator/symbols.h"
#include "contprof/profiler.h"
#include "kinds.h"
#include "labels.h"
#include "pprof.h"
#include "stats.h"
#include "trace.h"

/* The names a dialect gives kind k (kinds.h). Pyroscope's have no '-' and
 * "samples" repeats across families, which is why a Pyroscope profile holds
 * one family (docs/formats.md). */
static const cp_kind_dialect *dialect_of(int k, cp_dialect dialect) {
  return dialect == CP_DIALECT_PYROSCOPE ? &cp_kinds[k].pyroscope
                                         : &cp_kinds[k].datadog;
}

#define MAX_LABELS 48

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

uint64_t cp_export_chain_location(pprof_builder *b, uint64_t mapping,
                                  uint64_t address,
                                  const cp_line_chain *chain) {
  pprof_line lines[CP_DWARF_MAX_FRAMES];
  size_t n = 0;
  for (size_t k = 0; k < chain->n && n < PPROF_MAX_LINES; k++) {
    const cp_line_frame *f = &chain->frames[k];
    if (!f->function[0])
      continue; /* a scope without a name: its caller carries the line */
    /* pprof shows a Line's file as its Function's: the file the line is
     * in (the function's own file but for #include'd bodies). */
    const char *file = f->file[0] ? f->file : f->decl_file;
    uint64_t fn =
        pprof_add_function(b, f->function, f->system_name, file, f->start_line);
    if (!fn)
      return 0;
    lines[n++] = (pprof_line){fn, f->line};
  }
  return n ? pprof_add_location_lines(b, mapping, address, lines, n) : 0;
}

void cp_export_module_offset_name(const char *path, uint64_t file_offset,
                                  char *out, size_t size) {
  snprintf(out, size, "%s+0x%" PRIx64, base_name(path), file_offset);
}

/* The pprof location id of generation location i (made on first use). */
static uint64_t location_id(pprof_builder *b, const cp_generation *g,
                            uint64_t *ids, size_t i, cp_line_chain *chain,
                            int symbolize) {
  if (ids[i])
    return ids[i];
  const cp_location *l = cp_gen_location(g, i);
  uint64_t mapping = 0;
  char fallback[320];
  const char *name = l->function;
  if (l->mapping) {
    const cp_mapping *m = l->mapping;
    mapping = pprof_add_mapping(b, m->start, m->limit, m->file_offset, m->path,
                                m->build_id, symbolize);
    if (!symbolize) {
      /* CONTPROF_SYMBOLIZE=none: address and mapping, for a symbolizer
       * elsewhere (`contprof symbolize`, the backend). */
      ids[i] = pprof_add_location_lines(b, mapping, l->address, NULL, 0);
      return ids[i];
    }
    if (chain && cp_symbols_lines(m, l->address, chain) &&
        (ids[i] = cp_export_chain_location(b, mapping, l->address, chain)))
      return ids[i];
    if (!name) {
      cp_export_module_offset_name(m->path,
                                   l->address - m->start + m->file_offset,
                                   fallback, sizeof fallback);
      name = fallback;
    }
  } else if (!name) {
    snprintf(fallback, sizeof fallback, "[unknown]");
    name = fallback;
  }
  uint64_t function =
      pprof_add_function(b, name, name, l->file ? l->file : "", 0);
  if (!function)
    return 0;
  ids[i] = pprof_add_location(b, mapping, l->address, function, l->line);
  return ids[i];
}

/* pprof readers take the first mapping for the main binary: put the
 * executable's first. */
static void add_main_mapping_first(pprof_builder *b, const cp_generation *g,
                                   uint64_t *ids, cp_line_chain *chain,
                                   int symbolize) {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0)
    return;
  exe[n] = 0;
  for (size_t i = 0; i < cp_gen_location_count(g); i++) {
    const cp_mapping *m = cp_gen_location(g, i)->mapping;
    if (m && strcmp(m->path, exe) == 0) {
      location_id(b, g, ids, i, chain, symbolize);
      return;
    }
  }
}

static void add_comment(pprof_builder *b, const char *key, const char *value) {
  char line[512];
  snprintf(line, sizeof line, "%s=%s", key, value ? value : "");
  pprof_add_comment(b, line);
}

static void add_comment_u64(pprof_builder *b, const char *key, uint64_t v) {
  char buf[32];
  snprintf(buf, sizeof buf, "%" PRIu64, v);
  add_comment(b, key, buf);
}

/* The sampling rates in force at the period's end, after the governor's
 * slowdown (docs/overhead.md, "The cap"), and the most it slowed each one
 * down in the period. The live heap samples at the allocation rate. */
static void add_rate_comments(pprof_builder *b, const cp_config *cfg,
                              const cp_period_stats *s) {
  char buf[64];
  snprintf(buf, sizeof buf, "%g", cfg->max_overhead_pct);
  add_comment(b, "max_overhead_pct", buf);
  for (int k = 0; k < CONTPROF_KIND_COUNT; k++) {
    if (!(cfg->profiles & cp_kinds[k].profile))
      continue;
    int of = cp_kinds[k].sampled_as;
    unsigned f = cp_stats_slowdown(s, of);
    double rate = cp_config_rate(cfg, (contprof_sample_kind)k, f);
    switch (k) {
    case CONTPROF_KIND_CPU:
      /* Which clocks drive the samples: docs/signals.md, "Which clock". */
      snprintf(buf, sizeof buf, "perf:%u,posix:%u", s->cpu_clocks_perf,
               s->cpu_clocks_posix);
      add_comment(b, "cpu_clock_threads", buf);
      add_comment_u64(b, "cpu_clock_moved", s->cpu_clocks_moved);
      snprintf(buf, sizeof buf, "%gHz", rate);
      break;
    case CONTPROF_KIND_WALL:
      snprintf(buf, sizeof buf, "%gms", rate);
      break;
    case CONTPROF_KIND_ALLOC:
    case CONTPROF_KIND_INUSE:
      snprintf(buf, sizeof buf, "%.0fB", rate);
      break;
    default:
      snprintf(buf, sizeof buf, "%.0fns", rate);
      break;
    }
    const char *name = cp_kinds[k].name;
    char key[48];
    snprintf(key, sizeof key, "sampling.%s", name);
    add_comment(b, key, buf);
    snprintf(key, sizeof key, "slowdown.%s", name);
    add_comment_u64(b, key, f);
    snprintf(key, sizeof key, "slowdown_max.%s", name);
    add_comment_u64(b, key, cp_stats_slowdown_max(s, of));
  }
}

/* What the profiler cost in the period (docs/overhead.md): its CPU, over
 * the process's, its samples and drops per profile kind, its memory. */
static void add_cost_comments(pprof_builder *b, const cp_config *cfg,
                              const cp_period_stats *s) {
  add_comment_u64(b, "profiler_cpu_ns", cp_stats_profiler_ns(s));
  add_comment_u64(b, "profiler_threads_cpu_ns", s->threads_cpu_ns);
  add_comment_u64(b, "profiler_hooks_ns", s->hooks_ns);
  /* The kernel's side of the sampling signals, at the costs measured in
   * this process (docs/overhead.md, "The kernel's side of each signal"). */
  add_comment_u64(b, "profiler_kernel_ns", s->kernel_ns);
  char costs[64];
  snprintf(costs, sizeof costs, "perf:%" PRIu64 ",queued:%" PRIu64,
           s->signal_cost_ns[CP_SIGNAL_PERF],
           s->signal_cost_ns[CP_SIGNAL_QUEUED]);
  add_comment(b, "kernel_ns_per_signal", costs);
  add_comment_u64(b, "process_cpu_ns", s->process_cpu_ns);
  char pct[32];
  snprintf(pct, sizeof pct, "%.3f", cp_stats_overhead_pct(s));
  add_comment(b, "profiler_overhead_pct", pct);
  for (int k = 0; k < CONTPROF_KIND_COUNT; k++) {
    if (!(cfg->profiles & cp_kinds[k].profile))
      continue;
    const char *name = cp_kinds[k].name;
    char key[40];
    snprintf(key, sizeof key, "samples.%s", name);
    add_comment_u64(b, key, s->samples[k]);
    snprintf(key, sizeof key, "drops.%s", name);
    add_comment_u64(b, key, s->drops[k]);
    /* Samples the sampler took less often because the ring was filling
     * (docs/overhead.md, "A filling ring"). */
    snprintf(key, sizeof key, "thinned.%s", name);
    add_comment_u64(b, key, s->thinned[k]);
    /* Which sampler costs what: its handlers and hooks, its own thread. */
    snprintf(key, sizeof key, "profiler_hooks_ns.%s", name);
    add_comment_u64(b, key, s->hook_ns[k]);
    snprintf(key, sizeof key, "profiler_threads_cpu_ns.%s", name);
    add_comment_u64(b, key, s->kind_threads_cpu_ns[k]);
    snprintf(key, sizeof key, "profiler_kernel_ns.%s", name);
    add_comment_u64(b, key, s->kernel_kind_ns[k]);
  }
  add_comment_u64(b, "profiler_drain_ns", s->drain_ns);
  add_comment_u64(b, "profiler_rss_bytes", s->memory_bytes);
  add_rate_comments(b, cfg, s);
}

static void add_metadata(pprof_builder *b, const cp_generation *g,
                         const cp_export_meta *m) {
  const cp_config *cfg = m->cfg;
  add_comment(b, "service", cfg->service);
  add_comment(b, "env", cfg->env);
  add_comment(b, "version", cfg->version);
  add_comment(b, "host", m->host);
  add_comment_u64(b, "process_id", (uint64_t)m->pid);
  add_comment(b, "runtime-id", m->runtime_id);
  add_comment(b, "runtime", m->runtime);
  add_comment(b, "runtime_version", m->runtime_version);
  add_comment(b, "profiler_version", CONTPROF_VERSION_STRING);
  char profiles[64];
  add_comment(b, "profiles",
              cp_profiles_string(cfg->profiles, profiles, sizeof profiles));
  for (size_t i = 0; i < cfg->ntags; i++) {
    char key[300];
    snprintf(key, sizeof key, "tag.%s", cfg->tags[i].key);
    add_comment(b, key, cfg->tags[i].value);
  }
  add_comment_u64(b, "profile_seq", m->seq);
  add_comment_u64(b, "samples", cp_gen_samples_added(g));
  add_comment_u64(b, "samples_dropped", m->drops);
  add_comment_u64(b, "samples_overflowed", cp_gen_samples_overflowed(g));
  if (m->stats)
    add_cost_comments(b, cfg, m->stats);
}

/* ---- dialects ------------------------------------------------------------ */

/* How the Pyroscope dialect treats the labels the exporter adds (named here
 * in Datadog's spelling): a new name, or NULL to drop it. Per-thread and
 * per-request labels would become Pyroscope series. Other (user) labels keep
 * their name, reduced to [a-zA-Z0-9_]. */
static const struct {
  const char *datadog, *pyroscope;
} pyroscope_label_names[] = {
    {"thread id", NULL},
    {"thread native id", NULL},
    {"thread name", NULL},
    {"task name", NULL}, /* the Python binding's asyncio task (one a task) */
    {"span id", "span_id"},
    {"local root span id", NULL},
    {CP_LABEL_TRACE_ENDPOINT, NULL},
    {CP_LABEL_END_TIMESTAMP, NULL},
};

typedef struct label_scratch {
  char names[MAX_LABELS][64];
  char span_hex[24];
} label_scratch;

/* Rewrites labels[0..n) for the dialect in place; returns the new count. */
static size_t dialect_labels(const cp_export_options *o, pprof_label *labels,
                             size_t n, label_scratch *scratch) {
  if (o->dialect != CP_DIALECT_PYROSCOPE)
    return o->max_labels && n > o->max_labels ? o->max_labels : n;
  size_t kept = 0;
  for (size_t i = 0; i < n; i++) {
    pprof_label l = labels[i];
    int known = 0;
    for (size_t k = 0; k < CP_ARRAY_SIZE(pyroscope_label_names); k++)
      if (strcmp(l.key, pyroscope_label_names[k].datadog) == 0) {
        known = 1;
        l.key = pyroscope_label_names[k].pyroscope;
        break;
      }
    if (!l.key)
      continue;
    if (known && strcmp(l.key, "span_id") == 0 && !l.str) {
      snprintf(scratch->span_hex, sizeof scratch->span_hex, "%016" PRIx64,
               (uint64_t)l.num);
      l.str = scratch->span_hex;
    } else if (!known) {
      char *name = scratch->names[kept];
      size_t j = 0;
      if (!((l.key[0] >= 'a' && l.key[0] <= 'z') ||
            (l.key[0] >= 'A' && l.key[0] <= 'Z') || l.key[0] == '_'))
        name[j++] = '_';
      for (const char *c = l.key; *c && j < 63; c++)
        name[j++] = ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                     (*c >= '0' && *c <= '9'))
                        ? *c
                        : '_';
      name[j] = 0;
      if (name[0] == '_' && name[1] == '_')
        name[0] = 'x'; /* "__" names are Pyroscope's own */
      l.key = name;
    }
    if (o->max_labels && kept >= o->max_labels)
      break;
    labels[kept++] = l;
  }
  return kept;
}

/* The period's value for kind k: its sampling interval or mean. */
static int64_t period_of(int k, const cp_export_meta *m) {
  switch (cp_kinds[k].sampled_as) {
  case CONTPROF_KIND_CPU:
    return m->cpu_period_ns;
  case CONTPROF_KIND_WALL:
    return (int64_t)m->cfg->wall_interval_ms * 1000000;
  case CONTPROF_KIND_ALLOC:
    return m->cfg->alloc_sample_bytes;
  default:
    return 1;
  }
}

/* Period type and default sample type: the first profile that names them
 * (kinds.h) gives the period; in Pyroscope's families, the last one of its
 * family gives the default type (inuse_space over alloc_space). */
static void set_period(pprof_builder *b, const cp_export_meta *m,
                       unsigned profiles, cp_dialect dialect) {
  for (int k = 0; k < CONTPROF_KIND_COUNT; k++) {
    const cp_kind_dialect *d = dialect_of(k, dialect);
    if (!(profiles & cp_kinds[k].profile) || !d->default_type)
      continue;
    pprof_set_period(b, d->period.type, d->period.unit, period_of(k, m));
    const char *type = d->default_type;
    for (int j = k + 1;
         dialect == CP_DIALECT_PYROSCOPE && j < CONTPROF_KIND_COUNT &&
         strcmp(cp_kinds[j].pyroscope_family, cp_kinds[k].pyroscope_family) ==
             0;
         j++)
      if (profiles & cp_kinds[j].profile)
        type = dialect_of(j, dialect)->default_type;
    pprof_set_default_sample_type(b, type);
    return;
  }
}

/* Encodes b, folding its lightest samples into "[other]" until the options'
 * bounds hold. */
static int encode_bounded(pprof_builder *b, const cp_export_options *o,
                          uint8_t **raw, size_t *raw_len, size_t *folded) {
  size_t n = pprof_sample_count(b);
  size_t keep = n;
  if (o->max_samples && n > o->max_samples)
    keep = o->max_samples - 1; /* and the [other] sample */
  for (int round = 0; round < 16; round++) {
    pprof_builder *use = b;
    if (keep < n && !(use = pprof_fold(b, keep, "[other]")))
      return -1;
    int rc = pprof_encode(use, raw, raw_len);
    if (use != b)
      pprof_builder_destroy(use);
    if (rc != 0)
      return -1;
    *folded = n - keep;
    if (!o->max_bytes || *raw_len <= o->max_bytes || keep == 0)
      return 0;
    /* Shrink in proportion, with a margin: the tables shrink more slowly
     * than the samples. */
    size_t next =
        (size_t)((double)keep * (double)o->max_bytes / (double)*raw_len * 0.9);
    keep = next < keep ? next : keep - 1;
    free(*raw);
    *raw = NULL;
  }
  return -1;
}

int cp_export_pprof(const cp_generation *g, const cp_export_meta *m,
                    cp_dialect dialect, uint8_t **out, size_t *out_len) {
  cp_export_options o = {.dialect = dialect};
  return cp_export_pprof_with(g, m, &o, out, out_len, NULL);
}

/* The debug line that says how many addresses' lines this process read
 * from debug information and how many it had (a child of fork inherits its
 * parent's: docs/symbols.md, "What children look up"), when they moved. */
static void log_line_counts(void) {
  static uint64_t logged_read = UINT64_MAX, logged_had, logged_put_off;
  uint64_t read, had;
  if (cp_log_get_level() < CP_LOG_DEBUG)
    return;
  cp_symbols_line_counts(&read, &had);
  uint64_t put_off = cp_dwarf_deferred();
  if (read == logged_read && had == logged_had && put_off == logged_put_off)
    return;
  logged_read = read;
  logged_had = had;
  logged_put_off = put_off;
  cp_debug("symbols: pid %d read the lines of %" PRIu64
           " addresses from debug information and had those of %" PRIu64
           "; %" PRIu64 " lookups found theirs put off (the cap); %" PRIu64
           " scans named addresses without a symbol table",
           (int)getpid(), read, had, put_off, cp_symbols_scans());
}

int cp_export_pprof_with(const cp_generation *g, const cp_export_meta *m,
                         const cp_export_options *o, uint8_t **out,
                         size_t *out_len, size_t *samples_folded) {
  /* The sample types of the enabled kinds, in kind order: value t of each
   * sample is values[types[t]] of the aggregate. */
  int types[CP_NVALUES];
  size_t ntypes = 0;
  unsigned profiles = m->cfg->profiles & (o->profiles ? o->profiles : ~0u);
  for (int k = 0; k < CONTPROF_KIND_COUNT; k++)
    if (profiles & cp_kinds[k].profile) {
      types[ntypes++] = cp_kind_value_index((contprof_sample_kind)k);
      types[ntypes++] = cp_kind_value_index((contprof_sample_kind)k) + 1;
    }
  if (samples_folded)
    *samples_folded = 0;

  pprof_builder *b = pprof_builder_create();
  uint64_t *loc_ids = calloc(cp_gen_location_count(g) + 1, sizeof *loc_ids);
  size_t max_depth = cp_gen_node_count(g);
  uint64_t *stack = calloc(max_depth + 1, sizeof *stack);
  /* Scratch for one address's inline chain (16 kB: not on the stack). */
  cp_line_chain *chain = malloc(sizeof *chain);
  int rc = -1, pinned = 0;
  if (!b || !loc_ids || !stack)
    goto done;

  for (size_t i = 0; i < ntypes; i++) {
    const cp_value_name *v =
        &dialect_of(types[i] / 2, o->dialect)->values[types[i] % 2];
    pprof_add_sample_type(b, v->type, v->unit);
  }
  /* Datadog's period follows the enabled profiles, whichever this export
   * holds; Pyroscope's, the family it holds. */
  set_period(b, m,
             o->dialect == CP_DIALECT_PYROSCOPE ? profiles : m->cfg->profiles,
             o->dialect);
  pprof_set_time(b, (int64_t)m->start_ns, (int64_t)(m->end_ns - m->start_ns));
  add_metadata(b, g, m);
  add_main_mapping_first(b, g, loc_ids, chain, !m->cfg->symbolize_none);

  /* No label set is freed while its strings are being copied. */
  cp_labels_read_begin();
  pinned = 1;
  for (size_t i = 0; i < cp_gen_sample_count(g); i++) {
    cp_sample sample;
    cp_gen_sample(g, i, &sample);
    const cp_sample *s = &sample;
    int64_t values[CP_NVALUES];
    int nonzero = 0;
    for (size_t t = 0; t < ntypes; t++) {
      values[t] = s->values[types[t]];
      nonzero |= values[t] != 0;
    }
    if (!nonzero)
      continue;
    size_t depth = 0;
    for (uint32_t n = s->key.node; n != 0 && depth < max_depth;
         n = cp_gen_node(g, n)->parent) {
      uint64_t id = location_id(b, g, loc_ids, cp_gen_node(g, n)->location,
                                chain, !m->cfg->symbolize_none);
      if (!id)
        goto done;
      stack[depth++] = id;
    }
    pprof_label labels[MAX_LABELS];
    size_t nl = 0;
    if (s->key.tid > 0) {
      labels[nl++] = (pprof_label){"thread id", NULL, s->key.tid, NULL};
      const char *name = cp_gen_thread_name(g, s->key.tid);
      if (name && *name)
        labels[nl++] = (pprof_label){"thread name", name, 0, NULL};
    }
    if (s->key.span_id)
      labels[nl++] =
          (pprof_label){"span id", NULL, (int64_t)s->key.span_id, NULL};
    if (s->key.local_root_span_id)
      labels[nl++] = (pprof_label){"local root span id", NULL,
                                   (int64_t)s->key.local_root_span_id, NULL};
    const char *endpoint = cp_trace_endpoint_of(s->key.local_root_span_id);
    if (endpoint)
      labels[nl++] = (pprof_label){CP_LABEL_TRACE_ENDPOINT, endpoint, 0, NULL};
    if (s->key.time_bucket_ns)
      labels[nl++] = (pprof_label){CP_LABEL_END_TIMESTAMP, NULL,
                                   (int64_t)s->key.time_bucket_ns, NULL};
    const cp_label *user;
    size_t nuser = cp_labelset_get(s->key.labels, &user);
    for (size_t u = 0; u < nuser && nl < MAX_LABELS; u++)
      labels[nl++] = (pprof_label){user[u].key, user[u].value, 0, NULL};
    label_scratch scratch;
    nl = dialect_labels(o, labels, nl, &scratch);
    if (pprof_add_sample(b, stack, depth, values, ntypes, labels, nl) != 0)
      goto done;
  }

  cp_labels_read_end();
  pinned = 0;
  log_line_counts();

  uint8_t *raw = NULL;
  size_t raw_len = 0, folded = 0;
  if (encode_bounded(b, o, &raw, &raw_len, &folded) == 0) {
    rc = pprof_gzip(raw, raw_len, out, out_len);
    free(raw);
    if (samples_folded)
      *samples_folded = folded;
  }
done:
  if (pinned)
    cp_labels_read_end();
  free(chain);
  free(stack);
  free(loc_ids);
  pprof_builder_destroy(b);
  return rc;
}
