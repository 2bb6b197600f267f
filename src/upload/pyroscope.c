/* The Pyroscope sink: each period becomes one POST per profile family
 * (process_cpu, wall, memory, mutex) with samples, to
 * {PYROSCOPE_SERVER_ADDRESS}/ingest?name=APP{tags}&from=&until=&spyName=
 * &sampleRate=, multipart part `profile` (profile.pprof, gzip pprof in the
 * Pyroscope dialect: at most 16000 samples and 4 MiB uncompressed, the
 * lightest stacks folded into `[other]`). Bearer token or basic auth, and
 * X-Scope-OrgID. See docs/formats.md. */
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
/* The application name with its tags, percent-encoded, in the request
 * target: whole tags are left out past it (docs/security.md, "Names and
 * tags"), so that the target stays well within the URL buffers and the
 * request lines servers and proxies accept (8 KiB is common). */
#define PYROSCOPE_MAX_NAME 4096
/* The server takes time_nanos in [now - 1 h, now + 10 min]: older spooled
 * profiles would be refused. */
#define PYROSCOPE_MAX_AGE_NS (3300ull * 1000000000ull)

/* A profile family (kinds.h): its name and CP_PROFILE_* bits. */
typedef struct family {
  const char *name;
  unsigned profiles;
} family;

typedef struct pyro_ctx {
  char name_escaped[PYROSCOPE_MAX_NAME + 1]; /* APP{k=v,...}, encoded */
  size_t max_labels;
} pyro_ctx;

static int sample_rate(const cp_config *cfg, const family *f) {
  if (f->profiles & CP_PROFILE_WALL)
    return 1000 / (cfg->wall_interval_ms > 0 ? cfg->wall_interval_ms
                                             : CP_WALL_INTERVAL_MS_DEFAULT);
  return cfg->cpu_hz;
}

static int pyro_build(void *ctx, cp_export *e, cp_spool_item **items,
                      size_t max) {
  pyro_ctx *c = ctx;
  const cp_export_meta *m = &e->meta;
  int n = 0;
  for (int k = 0; k < CONTPROF_KIND_COUNT; k++) {
    family fam = {cp_kinds[k].pyroscope_family,
                  cp_kind_pyroscope_family((contprof_sample_kind)k)};
    const family *f = &fam;
    if (!f->profiles || !(m->cfg->profiles & f->profiles) ||
        !cp_export_has_samples(e, f->profiles))
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
    if (cp_export_encode(e, &o, &pprof, &len, &folded) != 0)
      goto fail;
    if (folded)
      cp_info("pyroscope: %zu light samples of %s folded into [other] "
              "(limits: %d samples, %zu bytes)",
              folded, f->name, PYROSCOPE_MAX_SAMPLES, PYROSCOPE_MAX_BYTES);
    char target[PYROSCOPE_MAX_NAME + 256];
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

/* App names take [a-zA-Z0-9_./-] (kind 0), tag keys [a-zA-Z0-9_.] (kind 1);
 * values (kind 2) may not hold the syntax characters of APP{k=v,k2=v2}.
 * Other characters become '_'. */
static char clean_char(char ch, int kind) {
  int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
           (ch >= '0' && ch <= '9') || ch == '_' || ch == '.';
  if (kind == 0)
    ok |= ch == '/' || ch == '-';
  if (kind == 2)
    ok = ch != '{' && ch != '}' && ch != ',' && ch != '=' &&
         (unsigned char)ch >= 0x20;
  return ok ? ch : '_';
}

/* The percent-encoded length of a character (as cp_url_escape writes it). */
static size_t escaped_len(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                 (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' ||
                 ch == '.' || ch == '~'
             ? 1
             : 3;
}

/* The encoded length of s cleaned as kind. */
static size_t piece_len(const char *s, int kind) {
  size_t n = 0;
  for (; *s; s++)
    n += escaped_len(clean_char(*s, kind));
  return n;
}

/* Appends s cleaned as kind and percent-encoded (as cp_url_escape does) to
 * out at *used, as far as it fits in cap bytes; a NUL follows. */
static void add_piece(char *out, size_t *used, size_t cap, const char *s,
                      int kind) {
  static const char hex[] = "0123456789ABCDEF";
  for (; *s; s++) {
    unsigned char ch = (unsigned char)clean_char(*s, kind);
    size_t n = escaped_len((char)ch);
    if (*used + n > cap)
      break;
    if (n == 1) {
      out[(*used)++] = (char)ch;
    } else {
      out[(*used)++] = '%';
      out[(*used)++] = hex[ch >> 4];
      out[(*used)++] = hex[ch & 15];
    }
  }
  out[*used] = 0;
}

/* Appends literal (already encoded) text; the caller made room for it. */
static void add_raw(char *out, size_t *used, const char *text) {
  size_t n = strlen(text);
  memcpy(out + *used, text, n + 1);
  *used += n;
}

/* APP{k=v,...}, encoded, into out (PYROSCOPE_MAX_NAME + 1 bytes): the service
 * (cut if it alone would not fit), then whole tags while they fit and
 * Pyroscope's bound on label names allows; *ntags receives how many went in.
 * Returns how many were left out. */
static size_t build_name(const cp_config *cfg, char *out, size_t *ntags) {
  /* __name__ and service_name count too; one is kept for sample labels. */
  const size_t max_tags = PYROSCOPE_MAX_LABEL_NAMES - 3;
  const size_t braces = 6; /* %7B and %7D */
  size_t used = 0, left_out = 0;
  *out = 0;
  add_piece(out, &used, PYROSCOPE_MAX_NAME - braces, cfg->service, 0);
  add_raw(out, &used, "%7B");
  *ntags = 0;
  for (int pass = 0; pass < 2; pass++) {
    const cp_tag *tags = pass ? cfg->pyroscope_labels : cfg->tags;
    size_t n = pass ? cfg->npyroscope_labels : cfg->ntags;
    for (size_t i = 0; i < n; i++) {
      size_t need = (*ntags ? 3 : 0) + piece_len(tags[i].key, 1) + 3 +
                    piece_len(tags[i].value, 2);
      if (*ntags == max_tags || used + need + 3 > PYROSCOPE_MAX_NAME) {
        left_out++;
        continue;
      }
      if ((*ntags)++)
        add_raw(out, &used, "%2C");
      add_piece(out, &used, PYROSCOPE_MAX_NAME, tags[i].key, 1);
      add_raw(out, &used, "%3D");
      add_piece(out, &used, PYROSCOPE_MAX_NAME, tags[i].value, 2);
    }
  }
  add_raw(out, &used, "%7D");
  return left_out;
}

cp_sink *cp_pyroscope_sink_create(const cp_config *cfg) {
  pyro_ctx *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  size_t ntags = 0;
  size_t left_out = build_name(cfg, c->name_escaped, &ntags);
  if (left_out)
    cp_warn("pyroscope: %zu tag%s left out of the application name (at most "
            "%d tags and %d encoded bytes)",
            left_out, left_out == 1 ? "" : "s", PYROSCOPE_MAX_LABEL_NAMES - 3,
            PYROSCOPE_MAX_NAME);
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
