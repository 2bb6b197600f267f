/* Oversized names and tags (issue #15, item 4): a 3000-byte CONTPROF_SERVICE
 * or a 2000-byte DD_TAGS value overflowed the Pyroscope sink's name buffer
 * on the stack (ASan reported it, a _FORTIFY_SOURCE=2 build aborted at
 * start). Checks the bounds of config.c (one `contprof:` line per variable,
 * a cut name, whole tags left out) and that the request a local Pyroscope
 * server gets names the application within PYROSCOPE_MAX_NAME, well formed.
 * Runs in the default build (_FORTIFY_SOURCE=2, CONTPROF_FORTIFY) and under
 * ASan (scripts/sanitize asan). */
#include <fcntl.h>
#include <inttypes.h>
#include <regex.h>

#include "aggregator/calltree.h"
#include "config.h"
#include "contprof/profiler.h"
#include "server.h"
#include "test.h"
#include "upload/http_sink.h"
#include "upload_test.h"

#define NAME_MAX_ENCODED 4096 /* PYROSCOPE_MAX_NAME in pyroscope.c */

/* "NAME=" followed by n copies of c (and a tail), in a static-free buffer
 * the caller frees. */
static char *repeat(const char *head, char c, size_t n, const char *tail) {
  size_t h = strlen(head), t = strlen(tail);
  char *s = malloc(h + n + t + 1);
  memcpy(s, head, h);
  memset(s + h, c, n);
  memcpy(s + h + n, tail, t + 1);
  return s;
}

/* ---- a Pyroscope upload -------------------------------------------------- */

/* Sends one small CPU profile through a Pyroscope sink for cfg to srv and
 * returns the application name of the request (still encoded), or NULL. */
static char *pyroscope_name(test_server *srv, const cp_config *cfg) {
  cp_sink *s = cp_pyroscope_sink_create(cfg);
  CHECK(s != NULL);
  if (!s)
    return NULL;
  cp_generation *g = cp_gen_create(1, 64 << 20);
  uint64_t stack[1] = {contprof_frame_intern("leaf", "a.c", 1)};
  cp_sample_key key = {.tid = 1};
  cp_gen_add(g, stack, 1, 0, &key, CONTPROF_KIND_CPU, 1, 10000000);
  uint64_t now = cp_realtime_ns();
  cp_export_meta m = {.cfg = cfg,
                      .host = "testhost",
                      .pid = getpid(),
                      .runtime_id = "11111111-2222-4333-8444-555555555555",
                      .runtime = "native",
                      .runtime_version = "2.36",
                      .start_ns = now - 2000000000ull,
                      .end_ns = now - 1000000000ull,
                      .cpu_period_ns = 10000000};
  size_t before = srv->nreqs;
  CHECK_EQ_INT(sink_send(s, g, &m), 0);
  CHECK_EQ_INT(srv_wait(srv, before + 1, 5000), before + 1);
  if (s->finish)
    s->finish(s, cp_monotonic_ns() + 2000000000ull);
  s->destroy(s);
  cp_gen_destroy(g);
  if (srv->nreqs <= before)
    return NULL;
  mp_part parts[2];
  int np = mp_parse(&srv->reqs[before], parts, 2);
  CHECK(mp_find(parts, np, "profile") != NULL);
  const char *t = srv->reqs[before].target;
  CHECK(strncmp(t, "/ingest?name=", 13) == 0);
  const char *end = strchr(t, '&');
  CHECK(end != NULL);
  if (!end || strncmp(t, "/ingest?name=", 13) != 0)
    return NULL;
  return strndup(t + 13, (size_t)(end - t - 13));
}

/* Percent-decodes s in place. */
static void url_decode(char *s) {
  char *o = s;
  for (; *s; s++) {
    unsigned v;
    if (*s == '%' && sscanf(s + 1, "%2x", &v) == 1) {
      *o++ = (char)v;
      s += 2;
    } else {
      *o++ = *s;
    }
  }
  *o = 0;
}

static int matches(const char *text, const char *pattern) {
  regex_t re;
  if (regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB) != 0)
    return 0;
  int ok = regexec(&re, text, 0, NULL, 0) == 0;
  regfree(&re);
  return ok;
}

/* ---- tests --------------------------------------------------------------- */

/* The bounds of config.c: a 3000-byte service is cut to 100 bytes (not
 * inside a UTF-8 character), a 2000-byte tag and the tags beyond 64 are left
 * out; one `contprof:` line for each variable, without the long values. */
static void test_config_bounds(void) {
  char *service = repeat("CONTPROF_SERVICE=", 's', 3000, "");
  /* 60 two-byte characters: 120 bytes, cut to 50 characters. */
  char env[256] = "CONTPROF_ENV=";
  for (int i = 0; i < 60; i++)
    strcat(env, "\xc3\xa9");
  char *tags = repeat("DD_TAGS=team:prof,big:", 'v', 2000, "");
  size_t tl = strlen(tags);
  tags = realloc(tags, tl + 100 * 16 + 1);
  for (int i = 0; i < 100; i++)
    tl += (size_t)sprintf(tags + tl, ",t%02d:x", i);
  char *labels = repeat("PYROSCOPE_LABELS=zone=b,huge=", 'w', 300, "");
  env_list e = {{service, env, tags, labels, "CONTPROF_LOG_LEVEL=warn", NULL}};
  cp_config cfg;
  capture_start();
  int rc = cp_config_load(&cfg, NULL, env_lookup, &e);
  char *err = capture_end();
  CHECK_EQ_INT(rc, 0);
  if (rc == 0) {
    CHECK_EQ_INT(strlen(cfg.service), CP_MAX_NAME_BYTES);
    CHECK(strspn(cfg.service, "s") == CP_MAX_NAME_BYTES);
    CHECK_EQ_INT(strlen(cfg.env), 100);
    CHECK(strncmp(cfg.env, "\xc3\xa9", 2) == 0 &&
          strcmp(cfg.env + 98, "\xc3\xa9") == 0);
    CHECK_EQ_INT(cfg.ntags, CP_MAX_TAGS);
    CHECK_EQ_STR(cfg.tags[0].key, "team");
    CHECK_EQ_STR(cfg.tags[1].key, "t00");
    CHECK_EQ_STR(cfg.tags[CP_MAX_TAGS - 1].key, "t62");
    CHECK_EQ_INT(cfg.npyroscope_labels, 1);
    CHECK_EQ_STR(cfg.pyroscope_labels[0].key, "zone");
  }
  CHECK_EQ_INT(count_lines_with(err, "contprof:"), 4);
  CHECK_EQ_INT(count_lines_with(err, "CONTPROF_SERVICE is 3000 bytes"), 1);
  CHECK_EQ_INT(count_lines_with(err, "CONTPROF_ENV is 120 bytes"), 1);
  CHECK_EQ_INT(count_lines_with(err, "DD_TAGS: entries ignored: 1 longer "
                                     "than 200 bytes, 37 beyond the first 64"),
               1);
  CHECK_EQ_INT(count_lines_with(err, "PYROSCOPE_LABELS: entries ignored: 1 "
                                     "longer than 200 bytes"),
               1);
  CHECK(strstr(err, "sssssssssssssssssssssssssssssssss") == NULL);
  CHECK(strstr(err, "vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv") == NULL);
  if (rc == 0)
    cp_config_free(&cfg);
  free(service);
  free(tags);
  free(labels);
}

/* The reproduction of the issue: the variables, through config.c, into the
 * Pyroscope sink (which overflowed its stack buffer here) and the request
 * a server gets. */
static void test_pyroscope_oversized_variables(void) {
  test_server *srv = srv_start(NULL);
  char addr[96];
  snprintf(addr, sizeof addr, "PYROSCOPE_SERVER_ADDRESS=http://127.0.0.1:%d",
           srv->port);
  char *service = repeat("CONTPROF_SERVICE=", 's', 3000, "");
  char *tags = repeat("DD_TAGS=team:prof,big:", 'v', 2000, "");
  env_list e = {{addr, service, tags, "CONTPROF_LOG_LEVEL=error", NULL}};
  cp_config cfg;
  CHECK_EQ_INT(cp_config_load(&cfg, NULL, env_lookup, &e), 0);
  char *name = pyroscope_name(srv, &cfg);
  char *want = repeat("", 's', CP_MAX_NAME_BYTES, "%7Bteam%3Dprof%7D");
  CHECK_EQ_STR(name, want);
  free(want);
  free(name);
  cp_config_free(&cfg);

  /* Only DD_TAGS oversized, with a short service. */
  env_list e2 = {
      {addr, "CONTPROF_SERVICE=app", tags, "CONTPROF_LOG_LEVEL=error", NULL}};
  CHECK_EQ_INT(cp_config_load(&cfg, NULL, env_lookup, &e2), 0);
  name = pyroscope_name(srv, &cfg);
  CHECK_EQ_STR(name, "app%7Bteam%3Dprof%7D");
  free(name);
  cp_config_free(&cfg);
  free(service);
  free(tags);
  srv_stop(srv);
}

/* A configuration that did not come through config.c's bounds (the sink's
 * own bound). A 5000-byte service is cut to fit the name with its braces.
 * A 1000-byte one with 40 tags of 300 encoded bytes each: the name stays
 * within PYROSCOPE_MAX_NAME, keeps its braces and holds whole tags, the
 * first ones in order, at most 27 (Pyroscope's 30 label names less
 * __name__, service_name and one for the samples' labels). */
static void test_pyroscope_name_bound(void) {
  test_server *srv = srv_start(NULL);
  char addr[96];
  snprintf(addr, sizeof addr, "PYROSCOPE_SERVER_ADDRESS=http://127.0.0.1:%d",
           srv->port);
  env_list e = {{addr, "CONTPROF_LOG_LEVEL=error", NULL}};
  cp_config cfg;
  CHECK_EQ_INT(cp_config_load(&cfg, NULL, env_lookup, &e), 0);
  free(cfg.service);
  cfg.service = repeat("", 'a', 5000, "");
  char *name = pyroscope_name(srv, &cfg);
  char *want = repeat("", 'a', NAME_MAX_ENCODED - 6, "%7B%7D");
  CHECK_EQ_STR(name, want);
  free(want);
  free(name);

  free(cfg.service);
  cfg.service = repeat("", 'a', 1000, "");
  cfg.tags = calloc(40, sizeof *cfg.tags);
  cfg.ntags = 40;
  for (int i = 0; i < 40; i++) {
    char key[16];
    snprintf(key, sizeof key, "k%02d", i);
    cfg.tags[i].key = strdup(key);
    cfg.tags[i].value = repeat("", '/', 100, ""); /* %2F: 300 bytes */
  }
  name = pyroscope_name(srv, &cfg);
  CHECK(name != NULL);
  if (name) {
    size_t len = strlen(name);
    printf("encoded name: %zu bytes\n", len);
    CHECK(len <= NAME_MAX_ENCODED);
    CHECK(len >= 3 && strcmp(name + len - 3, "%7D") == 0);
    url_decode(name);
    CHECK(matches(name, "^a{1000}\\{k00=/{100}(,k[0-9]{2}=/{100})*\\}$"));
    int n = 0;
    for (const char *p = strchr(name, '{'); p && (p = strchr(p, 'k')); p++) {
      char key[16];
      snprintf(key, sizeof key, "k%02d=", n);
      CHECK(strncmp(p, key, 4) == 0);
      n++;
    }
    printf("%d of 40 tags in the name\n", n);
    /* (4096 - 1000 - 6) / (300 + 9) whole tags fit. */
    CHECK_EQ_INT(n, 10);
    free(name);
  }
  cp_config_free(&cfg);
  srv_stop(srv);
}

TEST_MAIN(T(test_config_bounds), T(test_pyroscope_oversized_variables),
          T(test_pyroscope_name_bound))
