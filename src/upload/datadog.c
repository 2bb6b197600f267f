/* The Datadog sink: each period becomes one multipart POST, to the agent's
 * /profiling/v1/input (http or unix socket) or, agentless, to the intake
 * with DD-API-KEY: part `event` (event.json: attachments, tags_profiler,
 * start, end, family, version "4", endpoint_counts, process_tags, internal,
 * info) and part `profile.pprof` (gzip pprof with every sample type), with
 * the DD-EVP-ORIGIN headers and the container headers. See docs/formats.md. */
#include "datadog.h"

#include <fcntl.h>
#include <inttypes.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>

#include "common.h"
#include "contprof/profiler.h"
#include "http_sink.h"
#include "own_fd.h"
#include "stats.h"

#define ORIGIN "contprof"

typedef struct dd_ctx {
  struct utsname uts;
  int agentless;
} dd_ctx;

/* ---- a small JSON writer ---------------------------------------------- */

typedef struct sbuf {
  char *p;
  size_t len, cap;
  int failed;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
  if (b->failed)
    return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + n + 1)
      cap *= 2;
    char *grown = realloc(b->p, cap);
    if (!grown) {
      b->failed = 1;
      return;
    }
    b->p = grown;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

static void sb_printf(sbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n > 0)
    sb_add(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void sb_json(sbuf *b, const char *s) {
  sb_add(b, "\"", 1);
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      char esc[2] = {'\\', (char)c};
      sb_add(b, esc, 2);
    } else if (c < 0x20) {
      sb_printf(b, "\\u%04x", c);
    } else {
      sb_add(b, (const char *)&c, 1);
    }
  }
  sb_add(b, "\"", 1);
}

/* A tag value may not contain the separator. */
static void sb_tag(sbuf *b, const char *key, const char *value) {
  if (!value || !*value)
    return;
  if (b->len)
    sb_add(b, ",", 1);
  sb_str(b, key);
  sb_add(b, ":", 1);
  for (const char *c = value; *c; c++)
    sb_add(b, *c == ',' ? "_" : c, 1);
}

static void rfc3339(uint64_t ns, char *out, size_t len) {
  cp_utc t;
  cp_utc_of((int64_t)(ns / 1000000000u), &t);
  snprintf(out, len, "%04d-%02d-%02dT%02d:%02d:%02d.%09" PRIu64 "Z", t.year,
           t.month, t.day, t.hour, t.minute, t.second, ns % 1000000000u);
}

static const char *language_of(const char *runtime) {
  if (runtime &&
      (strcmp(runtime, "cpython") == 0 || strcmp(runtime, "python") == 0))
    return "python";
  if (runtime &&
      (strcmp(runtime, "ruby") == 0 || strcmp(runtime, "cruby") == 0))
    return "ruby";
  return "native";
}

static char *event_json(dd_ctx *c, const cp_export *e) {
  const cp_export_meta *m = &e->meta;
  const cp_config *cfg = m->cfg;
  char start[64], end[64];
  rfc3339(m->start_ns, start, sizeof start);
  rfc3339(m->end_ns, end, sizeof end);
  sbuf b = {0};
  sb_str(&b, "{\"attachments\":[\"profile.pprof\"],\"tags_profiler\":");
  sbuf tags = {0};
  char pid[32], seq[32], platform[96];
  snprintf(pid, sizeof pid, "%d", (int)m->pid);
  snprintf(seq, sizeof seq, "%" PRIu64, m->seq);
  snprintf(platform, sizeof platform, "%s-linux", c->uts.machine);
  sb_tag(&tags, "service", cfg->service);
  sb_tag(&tags, "env", cfg->env);
  sb_tag(&tags, "version", cfg->version);
  sb_tag(&tags, "host", m->host);
  sb_tag(&tags, "language", language_of(m->runtime));
  sb_tag(&tags, "runtime", m->runtime);
  sb_tag(&tags, "runtime_version", m->runtime_version);
  sb_tag(&tags, "runtime-id", m->runtime_id);
  sb_tag(&tags, "process_id", pid);
  sb_tag(&tags, "profiler_version", CONTPROF_VERSION_STRING);
  sb_tag(&tags, "profile_seq", seq);
  sb_tag(&tags, "runtime_platform", platform);
  for (size_t i = 0; i < cfg->ntags; i++)
    sb_tag(&tags, cfg->tags[i].key, cfg->tags[i].value);
  sb_json(&b, tags.failed ? "" : tags.p);
  free(tags.p);
  sb_str(&b, ",\"start\":");
  sb_json(&b, start);
  sb_str(&b, ",\"end\":");
  sb_json(&b, end);
  sb_str(&b, ",\"family\":");
  sb_json(&b, language_of(m->runtime));
  sb_str(&b, ",\"version\":\"4\",\"endpoint_counts\":");
  if (m->nendpoint_counts == 0) {
    sb_str(&b, "null");
  } else {
    sb_str(&b, "{");
    for (size_t i = 0; i < m->nendpoint_counts; i++) {
      if (i)
        sb_str(&b, ",");
      sb_json(&b, m->endpoint_counts[i].endpoint);
      sb_printf(&b, ":%" PRId64, m->endpoint_counts[i].count);
    }
    sb_str(&b, "}");
  }
  sb_str(&b, ",\"process_tags\":null,\"internal\":{");
  sb_printf(&b,
            "\"samples\":%" PRIu64 ",\"samples_dropped\":%" PRIu64
            ",\"samples_overflowed\":%" PRIu64,
            e->samples, m->drops, e->samples_overflowed);
  if (m->stats) {
    const cp_period_stats *s = m->stats;
    sb_printf(
        &b,
        ",\"profiler_cpu_ns\":%" PRIu64 ",\"profiler_threads_cpu_ns\":%" PRIu64
        ",\"profiler_hooks_ns\":%" PRIu64 ",\"profiler_kernel_ns\":%" PRIu64
        ",\"process_cpu_ns\":%" PRIu64
        ",\"profiler_overhead_pct\":%.3f,\"profiler_rss_bytes\":%" PRIu64
        ",\"kernel_ns_per_signal\":\"perf:%" PRIu64 ",queued:%" PRIu64 "\"",
        cp_stats_profiler_ns(s), s->threads_cpu_ns, s->hooks_ns, s->kernel_ns,
        s->process_cpu_ns, cp_stats_overhead_pct(s), s->memory_bytes,
        s->signal_cost_ns[CP_SIGNAL_PERF], s->signal_cost_ns[CP_SIGNAL_QUEUED]);
    for (int k = 0; k < CONTPROF_KIND_COUNT; k++) {
      if (!(cfg->profiles & cp_kinds[k].profile))
        continue;
      const char *name = cp_kinds[k].name;
      sb_printf(&b,
                ",\"samples.%s\":%" PRIu64 ",\"drops.%s\":%" PRIu64
                ",\"thinned.%s\":%" PRIu64,
                name, s->samples[k], name, s->drops[k], name, s->thinned[k]);
      sb_printf(&b,
                ",\"profiler_hooks_ns.%s\":%" PRIu64
                ",\"profiler_threads_cpu_ns.%s\":%" PRIu64
                ",\"profiler_kernel_ns.%s\":%" PRIu64,
                name, s->hook_ns[k], name, s->kind_threads_cpu_ns[k], name,
                s->kernel_kind_ns[k]);
    }
    sb_printf(&b, ",\"profiler_drain_ns\":%" PRIu64, s->drain_ns);
  }
  sb_str(&b, "}");
  sb_str(&b, ",\"info\":{\"application\":{\"service\":");
  sb_json(&b, cfg->service);
  sb_str(&b, ",\"env\":");
  sb_json(&b, cfg->env);
  sb_str(&b, ",\"version\":");
  sb_json(&b, cfg->version);
  sb_str(&b, "},\"platform\":{\"hostname\":");
  sb_json(&b, m->host);
  sb_str(&b, ",\"kernel_name\":");
  sb_json(&b, c->uts.sysname);
  sb_str(&b, ",\"kernel_release\":");
  sb_json(&b, c->uts.release);
  sb_str(&b, ",\"kernel_version\":");
  sb_json(&b, c->uts.version);
  sb_str(&b, "},\"profiler\":{\"version\":\"" CONTPROF_VERSION_STRING
             "\",\"upload_period_s\":");
  sb_printf(&b, "%d", cfg->upload_period_s);
  char profiles[64];
  sb_str(&b, ",\"profiles\":");
  sb_json(&b, cp_profiles_string(cfg->profiles, profiles, sizeof profiles));
  sb_str(&b, "},\"runtime\":{\"engine\":");
  sb_json(&b, m->runtime);
  sb_str(&b, ",\"version\":");
  sb_json(&b, m->runtime_version);
  sb_str(&b, "}}}");
  if (b.failed) {
    free(b.p);
    return NULL;
  }
  return b.p;
}

static int dd_build(void *ctx, cp_export *e, cp_spool_item **items,
                    size_t max) {
  dd_ctx *c = ctx;
  if (max < 1)
    return -1;
  const uint8_t *pprof = NULL;
  size_t len = 0;
  if (cp_export_profile(e, &pprof, &len) != 0)
    return -1;
  char *event = event_json(c, e);
  cp_spool_item *it =
      event ? cp_spool_item_new(c->agentless ? "" : "/profiling/v1/input",
                                e->meta.end_ns)
            : NULL;
  int rc = -1;
  if (it &&
      cp_spool_item_add_part(it, "event", "event.json", "application/json",
                             (const uint8_t *)event, strlen(event)) == 0 &&
      cp_spool_item_add_part(it, "profile.pprof", "profile.pprof",
                             "application/octet-stream", pprof, len) == 0) {
    items[0] = it;
    it = NULL;
    rc = 1;
  }
  cp_spool_item_free(it);
  free(event);
  return rc;
}

static void dd_free(void *ctx) { free(ctx); }

/* ---- containers ---------------------------------------------------------- */

/* One line of /proc/self/cgroup, "hierarchy:controllers:path", split in
 * place. */
typedef struct cgroup_line {
  char buf[1024];
  const char *hierarchy, *controllers, *path;
} cgroup_line;

/* The next well-formed line after *cursor (too long lines and lines without
 * two colons are skipped); 0 at the end of the text. */
static int next_cgroup_line(const char **cursor, cgroup_line *l) {
  while (*cursor && **cursor) {
    const char *line = *cursor, *nl = strchr(line, '\n');
    size_t n = nl ? (size_t)(nl - line) : strlen(line);
    *cursor = nl ? nl + 1 : NULL;
    if (n >= sizeof l->buf)
      continue;
    memcpy(l->buf, line, n);
    l->buf[n] = 0;
    char *c1 = strchr(l->buf, ':');
    char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2)
      continue;
    *c1 = 0;
    *c2 = 0;
    l->hierarchy = l->buf;
    l->controllers = c1 + 1;
    l->path = c2 + 1;
    return 1;
  }
  return 0;
}

int cp_datadog_container_id(const char *text, char *out, size_t len) {
  static const char *const pattern =
      "([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{"
      "12}|[0-9a-f]{64}|[0-9a-f]{32}-[0-9]+)(\\.scope)?$";
  regex_t re;
  if (regcomp(&re, pattern, REG_EXTENDED) != 0)
    return 0;
  int found = 0;
  cgroup_line l;
  for (const char *cursor = text; !found && next_cgroup_line(&cursor, &l);) {
    regmatch_t mt[2];
    if (l.path[0] && regexec(&re, l.path, 2, mt, 0) == 0 &&
        (size_t)(mt[1].rm_eo - mt[1].rm_so) < len) {
      snprintf(out, len, "%.*s", (int)(mt[1].rm_eo - mt[1].rm_so),
               l.path + mt[1].rm_so);
      found = 1;
    }
  }
  regfree(&re);
  return found;
}

int cp_datadog_cgroup_path(const char *text, char *out, size_t len) {
  int found = 0;
  cgroup_line l;
  for (const char *cursor = text; next_cgroup_line(&cursor, &l);) {
    int unified = strcmp(l.hierarchy, "0") == 0 && !l.controllers[0];
    int memory = strstr(l.controllers, "memory") != NULL;
    if ((unified || memory) && strlen(l.path) < len) {
      snprintf(out, len, "%s%s", unified ? "" : "memory", l.path);
      found = 1;
      if (unified)
        break;
    }
  }
  return found;
}

static char *read_small_file(const char *path) {
  cp_own_fd own;
  if (cp_own_open(&own, AT_FDCWD, path, O_RDONLY, 0, NULL) < 0)
    return NULL;
  size_t len;
  char *text = cp_own_read_all(&own, 65535, &len);
  cp_own_close(&own);
  return text;
}

/* Datadog-Container-ID and Datadog-Entity-ID headers, into h[]. */
static size_t container_headers(char h[2][160]) {
  char *text = read_small_file("/proc/self/cgroup");
  if (!text)
    return 0;
  char id[100], path[900];
  size_t n = 0;
  if (cp_datadog_container_id(text, id, sizeof id)) {
    snprintf(h[n++], 160, "Datadog-Container-ID: %s", id);
    snprintf(h[n++], 160, "Datadog-Entity-ID: ci-%s", id);
  } else if (cp_datadog_cgroup_path(text, path, sizeof path)) {
    /* The host's cgroup namespace has this well-known inode: there the
     * cgroup says nothing about a container. */
    struct stat ns, st;
    char full[1024];
    snprintf(full, sizeof full, "/sys/fs/cgroup/%s", path);
    if (!(stat("/proc/self/ns/cgroup", &ns) == 0 && ns.st_ino == 0xEFFFFFFBu) &&
        stat(full, &st) == 0)
      snprintf(h[n++], 160, "Datadog-Entity-ID: in-%llu",
               (unsigned long long)st.st_ino);
  }
  free(text);
  return n;
}

cp_sink *cp_datadog_sink_create(const cp_config *cfg) {
  dd_ctx *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  uname(&c->uts);
  c->agentless = cfg->dd_agentless;

  char dd_headers[6][160];
  const char *headers[6];
  size_t nh = 0;
  snprintf(dd_headers[nh++], 160, "DD-EVP-ORIGIN: %s", ORIGIN);
  snprintf(dd_headers[nh++], 160, "DD-EVP-ORIGIN-VERSION: %s",
           CONTPROF_VERSION_STRING);
  char ch[2][160];
  size_t nc = container_headers(ch);
  for (size_t i = 0; i < nh; i++)
    headers[i] = dd_headers[i];
  for (size_t i = 0; i < nc; i++)
    headers[nh++] = ch[i];
  char *key_header = NULL;
  if (cfg->dd_agentless) {
    size_t klen = strlen(cfg->dd_api_key) + 16;
    key_header = malloc(klen);
    if (!key_header) {
      dd_free(c);
      return NULL;
    }
    snprintf(key_header, klen, "DD-API-KEY: %s", cfg->dd_api_key);
    headers[nh++] = key_header;
  }
  char base[4096];
  snprintf(base, sizeof base, "%s",
           cfg->dd_agentless ? cfg->dd_intake_url : cfg->dd_agent_url);
  size_t blen = strlen(base);
  while (!cfg->dd_agentless && blen > 0 && base[blen - 1] == '/')
    base[--blen] = 0;
  cp_http_sink_spec spec = {
      .name = "datadog",
      .base_url = base,
      .headers = headers,
      .nheaders = nh,
      .has_secret = cfg->dd_agentless,
      .build = dd_build,
      .ctx = c,
      .free_ctx = dd_free,
  };
  cp_sink *s = cp_http_sink_create(cfg, &spec);
  if (key_header) {
    explicit_bzero(key_header, strlen(key_header));
    free(key_header);
  }
  return s;
}
