/* The Pyroscope sink: each period becomes one POST per profile family
 * (process_cpu, wall, memory, mutex) with samples, to
 * {PYROSCOPE_SERVER_ADDRESS}/ingest?name=APP{tags}&from=&until=&spyName=
 * &sampleRate=, multipart part `profile` (profile.pprof, gzip pprof in the
 * Pyroscope dialect: at most 16000 samples and 4 MiB uncompressed, the
 * lightest stacks folded into `[other]`). Bearer token or basic auth, and
 * X-Scope-OrgID. See FORMATS.md. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "http.h"
#include "http_sink.h"

#define PYROSCOPE_MAX_SAMPLES 16000
#define PYROSCOPE_MAX_BYTES ((size_t)4 << 20)
#define PYROSCOPE_MAX_LABEL_NAMES 30
/* The server takes time_nanos in [now - 1 h, now + 10 min]: older spooled
 * profiles would be refused. */
#define PYROSCOPE_MAX_AGE_NS (3300ull * 1000000000ull)

typedef struct family {
  const char *name;
  unsigned profiles;
  int values[4]; /* value indexes that make the family non-empty; -1 ends */
} family;

static const family families[] = {
    {"process_cpu", CP_PROFILE_CPU, {CP_V_CPU_SAMPLES, CP_V_CPU_TIME, -1, -1}},
    {"wall", CP_PROFILE_WALL, {CP_V_WALL_SAMPLES, CP_V_WALL_TIME, -1, -1}},
    {"memory",
     CP_PROFILE_ALLOC | CP_PROFILE_HEAP,
     {CP_V_ALLOC_SAMPLES, CP_V_ALLOC_SPACE, CP_V_INUSE_OBJECTS,
      CP_V_INUSE_SPACE}},
    {"mutex", CP_PROFILE_LOCK, {CP_V_LOCK_ACQUIRE, CP_V_LOCK_WAIT, -1, -1}},
};

typedef struct pyro_ctx {
  char name_escaped[2048]; /* APP{k=v,...}, percent-encoded */
  size_t max_labels;
} pyro_ctx;

static int has_values(const cp_generation *g, const family *f) {
  for (size_t i = 0; i < cp_gen_sample_count(g); i++) {
    const cp_sample *s = cp_gen_sample(g, i);
    for (size_t v = 0; v < 4 && f->values[v] >= 0; v++)
      if (s->values[f->values[v]])
        return 1;
  }
  return 0;
}

static int sample_rate(const cp_config *cfg, const family *f) {
  if (f->profiles & CP_PROFILE_WALL)
    return 1000 / (cfg->wall_interval_ms > 0 ? cfg->wall_interval_ms : 10);
  return cfg->cpu_hz;
}

static int pyro_build(void *ctx, const cp_generation *g,
                      const cp_export_meta *m, cp_spool_item **items,
                      size_t max) {
  pyro_ctx *c = ctx;
  int n = 0;
  for (size_t i = 0; i < CP_ARRAY_SIZE(families); i++) {
    const family *f = &families[i];
    if (!(m->cfg->profiles & f->profiles) || !has_values(g, f))
      continue;
    if ((size_t)n == max)
      break;
    cp_export_options o = {
        .dialect = CP_DIALECT_PYROSCOPE,
        .profiles = f->profiles,
        .max_samples = PYROSCOPE_MAX_SAMPLES,
        .max_bytes = PYROSCOPE_MAX_BYTES,
        .max_labels = c->max_labels,
    };
    uint8_t *pprof = NULL;
    size_t len = 0, folded = 0;
    if (cp_export_pprof_with(g, m, &o, &pprof, &len, &folded) != 0)
      goto fail;
    if (folded)
      cp_info("pyroscope: %zu light samples of %s folded into [other] "
              "(limits: %d samples, %zu bytes)",
              folded, f->name, PYROSCOPE_MAX_SAMPLES, PYROSCOPE_MAX_BYTES);
    char target[2600];
    snprintf(target, sizeof target,
             "/ingest?name=%s&from=%" PRIu64 "&until=%" PRIu64
             "&spyName=contprof&sampleRate=%d",
             c->name_escaped, m->start_ns, m->end_ns, sample_rate(m->cfg, f));
    cp_spool_item *it = cp_spool_item_new(target, m->end_ns);
    if (!it ||
        cp_spool_item_add_part(it, "profile", "profile.pprof",
                               "application/octet-stream", pprof, len) != 0) {
      cp_spool_item_free(it);
      free(pprof);
      goto fail;
    }
    free(pprof);
    items[n++] = it;
  }
  return n;
fail:
  while (n > 0)
    cp_spool_item_free(items[--n]);
  return -1;
}

/* App names take [a-zA-Z0-9_./-], tag keys [a-zA-Z0-9_.]; values may not
 * hold the syntax characters of APP{k=v,k2=v2}. */
static void add_clean(char *out, size_t len, const char *s, int kind) {
  size_t o = strlen(out);
  for (; *s && o + 1 < len; s++) {
    char ch = *s;
    int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
             (ch >= '0' && ch <= '9') || ch == '_' || ch == '.';
    if (kind == 0)
      ok |= ch == '/' || ch == '-';
    if (kind == 2)
      ok = ch != '{' && ch != '}' && ch != ',' && ch != '=' &&
           (unsigned char)ch >= 0x20;
    out[o++] = ok ? ch : '_';
  }
  out[o] = 0;
}

cp_sink *cp_pyroscope_sink_create(const cp_config *cfg) {
  pyro_ctx *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  char name[1600] = "";
  add_clean(name, sizeof name, cfg->service, 0);
  size_t ntags = 0;
  strcat(name, "{");
  for (int pass = 0; pass < 2; pass++) {
    const cp_tag *tags = pass ? cfg->pyroscope_labels : cfg->tags;
    size_t n = pass ? cfg->npyroscope_labels : cfg->ntags;
    for (size_t i = 0; i < n && strlen(name) + 8 < sizeof name; i++) {
      if (ntags++)
        strcat(name, ",");
      add_clean(name, sizeof name, tags[i].key, 1);
      strcat(name, "=");
      add_clean(name, sizeof name, tags[i].value, 2);
    }
  }
  strcat(name, "}");
  cp_url_escape(name, c->name_escaped, sizeof c->name_escaped);
  /* __name__ and service_name count too. */
  size_t room = PYROSCOPE_MAX_LABEL_NAMES - 2;
  c->max_labels = ntags + 1 < room ? room - ntags : 1;

  char auth[1024] = "", tenant[600] = "";
  const char *headers[2];
  size_t nh = 0;
  int secret = 0;
  if (cfg->pyroscope_token) {
    snprintf(auth, sizeof auth, "Authorization: Bearer %s",
             cfg->pyroscope_token);
    secret = 1;
  } else if (cfg->pyroscope_user || cfg->pyroscope_password) {
    char plain[700], b64[960];
    snprintf(plain, sizeof plain, "%s:%s",
             cfg->pyroscope_user ? cfg->pyroscope_user : "",
             cfg->pyroscope_password ? cfg->pyroscope_password : "");
    if (cp_base64(plain, strlen(plain), b64, sizeof b64) == 0)
      snprintf(auth, sizeof auth, "Authorization: Basic %s", b64);
    explicit_bzero(plain, sizeof plain);
    explicit_bzero(b64, sizeof b64);
    secret = 1;
  }
  if (*auth)
    headers[nh++] = auth;
  if (cfg->pyroscope_tenant) {
    snprintf(tenant, sizeof tenant, "X-Scope-OrgID: %s", cfg->pyroscope_tenant);
    headers[nh++] = tenant;
  }
  cp_http_sink_spec spec = {
      .name = "pyroscope",
      .base_url = cfg->pyroscope_url,
      .headers = headers,
      .nheaders = nh,
      .has_secret = secret,
      .max_age_ns = PYROSCOPE_MAX_AGE_NS,
      .build = pyro_build,
      .ctx = c,
      .free_ctx = free,
  };
  cp_sink *s = cp_http_sink_create(cfg, &spec);
  explicit_bzero(auth, sizeof auth);
  return s;
}
