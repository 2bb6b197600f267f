/* The uploads against local servers that behave like a Datadog agent and
 * like Pyroscope's /ingest: every field and header of the requests, the
 * decoded profiles in each dialect, and the faults (backend down then up,
 * 500, 429, 400, a server that never answers, a full spool, a restart with
 * a spool directory). */
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <netdb.h>
#include <regex.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "aggregator/calltree.h"
#include "aggregator/frames.h"
#include "config.h"
#include "contprof/profiler.h"
#include "contprof/runtime.h"
#include "exporter/export.h"
#include "exporter/pprof_read.h"
#include "labels.h"
#include "server.h"
#include "stats.h"
#include "test.h"
#include "upload/datadog.h"
#include "upload/http.h"
#include "upload/http_sink.h"
#include "upload_test.h"

/* ---- generations ------------------------------------------------------------
 */

static uint64_t frame(const char *fmt, int i) {
  char name[64];
  snprintf(name, sizeof name, fmt, i);
  return contprof_frame_intern(name, "app.c", i + 1);
}

/* n distinct stacks main -> work_i -> leaf_i of kind, value i+1 each. */
static cp_generation *make_generation(int n, contprof_sample_kind kind,
                                      uint32_t labels, uint64_t span) {
  cp_generation *g = cp_gen_create(1, (size_t)512 << 20);
  uint64_t root = frame("main", 0);
  for (int i = 0; i < n; i++) {
    uint64_t stack[3] = {frame("leaf_%d", i), frame("work_%d", i), root};
    cp_sample_key key = {.labels = labels,
                         .tid = 1000 + i % 4,
                         .span_id = span,
                         .local_root_span_id = span};
    cp_gen_add(g, stack, 3, 0, &key, kind, 1, i + 1);
  }
  return g;
}

/* What the profiler cost in the period, as the uploader measures it. */
static const cp_period_stats test_costs = {
    .threads_cpu_ns = 3000000,
    .hooks_ns = 1000000,
    .process_cpu_ns = 400000000,
    .samples = {[CONTPROF_KIND_CPU] = 50},
    .memory_bytes = 3 << 20,
};

static cp_export_meta make_meta(const cp_config *cfg, uint64_t seq) {
  uint64_t base = 1767225600ull * 1000000000ull; /* 2026-01-01 */
  uint64_t now = cp_realtime_ns();
  if (now > base)
    base = now - (now % 1000000000ull) - 3600ull * 1000000000ull / 2;
  cp_export_meta m = {
      .cfg = cfg,
      .host = "testhost",
      .pid = getpid(),
      .runtime_id = "11111111-2222-4333-8444-555555555555",
      .runtime = "native",
      .runtime_version = "2.36",
      .start_ns = base + seq * 1000000000ull,
      .end_ns = base + (seq + 1) * 1000000000ull,
      .seq = seq,
      .cpu_period_ns = 10000000,
      .stats = &test_costs,
  };
  return m;
}

/* Sends generation(s) through a sink and finishes it with a deadline. */
static void send_one(cp_sink *s, const cp_config *cfg, uint64_t seq,
                     cp_generation *g) {
  cp_export_meta m = make_meta(cfg, seq);
  CHECK_EQ_INT(sink_send(s, g, &m), 0);
}

static void finish(cp_sink *s, int ms) {
  if (s->finish)
    s->finish(s, cp_monotonic_ns() + (uint64_t)ms * 1000000u);
  s->destroy(s);
}

/* ---- request checks -------------------------------------------------------
 */

static pprof_profile *decode_part(const mp_part *p) {
  pprof_profile *prof = NULL;
  char err[256];
  if (!p || pprof_read_buffer(p->data, p->len, 64 << 20, &prof, err,
                              sizeof err) != 0) {
    fprintf(stderr, "cannot decode: %s\n", p ? err : "no part");
    return NULL;
  }
  return prof;
}

/* No two samples with the same locations and labels. */
static int samples_merged(const pprof_profile *p) {
  for (size_t i = 0; i < p->n_sample; i++)
    for (size_t j = i + 1; j < p->n_sample; j++) {
      const Perftools__Profiles__Sample *a = p->sample[i], *b = p->sample[j];
      if (a->n_location_id != b->n_location_id || a->n_label != b->n_label ||
          memcmp(a->location_id, b->location_id,
                 a->n_location_id * sizeof *a->location_id))
        continue;
      int same = 1;
      for (size_t l = 0; l < a->n_label && same; l++)
        same = a->label[l]->key == b->label[l]->key &&
               a->label[l]->str == b->label[l]->str &&
               a->label[l]->num == b->label[l]->num;
      if (same)
        return 0;
    }
  return 1;
}

static int64_t total_of(const pprof_profile *p, const char *type) {
  int t = pprof_sample_type_index(p, type);
  int64_t sum = 0;
  for (size_t i = 0; t >= 0 && i < p->n_sample; i++)
    sum += p->sample[i]->value[t];
  return sum;
}

static int has_label_key(const pprof_profile *p, const char *key) {
  for (size_t i = 0; i < p->n_sample; i++)
    if (pprof_sample_label(p, p->sample[i], key))
      return 1;
  return 0;
}

/* The JSON string value of "key" in a flat-enough JSON text. */
static int json_string(const char *json, const char *key, char *out,
                       size_t len) {
  char pat[128];
  snprintf(pat, sizeof pat, "\"%s\":\"", key);
  const char *p = strstr(json, pat);
  if (!p)
    return 0;
  p += strlen(pat);
  const char *e = strchr(p, '"');
  snprintf(out, len, "%.*s", (int)(e - p), p);
  return 1;
}

static int has_tag(const char *tags, const char *tag) {
  size_t n = strlen(tag);
  for (const char *p = tags; (p = strstr(p, tag)) != NULL; p++)
    if ((p == tags || p[-1] == ',') && (p[n] == ',' || p[n] == 0))
      return 1;
  return 0;
}

static int matches(const char *text, const char *pattern) {
  regex_t re;
  regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB);
  int ok = regexec(&re, text, 0, NULL, 0) == 0;
  regfree(&re);
  return ok;
}

/* Checks one Datadog request completely; returns its profile_seq (or -1) and
 * the event's start/end. */
static long check_datadog_request(const srv_request *r, const char *path,
                                  char *start, char *end, char *runtime_id) {
  char h[512];
  CHECK_EQ_STR(r->method, "POST");
  CHECK_EQ_STR(r->target, path);
  CHECK(srv_header(r->headers, "DD-EVP-ORIGIN", h, sizeof h) &&
        strcmp(h, "contprof") == 0);
  CHECK(srv_header(r->headers, "DD-EVP-ORIGIN-VERSION", h, sizeof h) &&
        strcmp(h, CONTPROF_VERSION_STRING) == 0);
  mp_part parts[8];
  int n = mp_parse(r, parts, 8);
  CHECK_EQ_INT(n, 2);
  const mp_part *ev = mp_find(parts, n, "event");
  const mp_part *pp = mp_find(parts, n, "profile.pprof");
  CHECK(ev && pp);
  if (!ev || !pp)
    return -1;
  CHECK_EQ_STR(ev->filename, "event.json");
  CHECK_EQ_STR(ev->content_type, "application/json");
  CHECK_EQ_STR(pp->filename, "profile.pprof");
  CHECK(pp->len > 2 && pp->data[0] == 0x1f && pp->data[1] == 0x8b);
  char json[8192];
  snprintf(json, sizeof json, "%.*s", (int)ev->len, (const char *)ev->data);
  CHECK(strstr(json, "\"attachments\":[\"profile.pprof\"]") != NULL);
  CHECK(strstr(json, "\"family\":\"native\"") != NULL);
  CHECK(strstr(json, "\"version\":\"4\"") != NULL);
  CHECK(strstr(json, "\"endpoint_counts\":") != NULL);
  CHECK(strstr(json, "\"process_tags\":") != NULL);
  CHECK(strstr(json, "\"internal\":{") != NULL);
  /* What the profiler cost (docs/overhead.md), as the pprof's comments. */
  CHECK(strstr(json, "\"profiler_cpu_ns\":") != NULL);
  CHECK(strstr(json, "\"process_cpu_ns\":") != NULL);
  CHECK(strstr(json, "\"profiler_overhead_pct\":") != NULL);
  CHECK(strstr(json, "\"profiler_rss_bytes\":") != NULL);
  CHECK(strstr(json, "\"profiler_kernel_ns\":") != NULL);
  CHECK(strstr(json, "\"profiler_kernel_ns.cpu\":") != NULL);
  CHECK(strstr(json, "\"kernel_ns_per_signal\":\"perf:") != NULL);
  CHECK(strstr(json, "\"samples.cpu\":") != NULL);
  CHECK(strstr(json, "\"info\":{") != NULL);
  const char *ts = "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}"
                   "\\.[0-9]{9}Z$";
  CHECK(json_string(json, "start", start, 64) && matches(start, ts));
  CHECK(json_string(json, "end", end, 64) && matches(end, ts));
  char tags[2048] = "";
  CHECK(json_string(json, "tags_profiler", tags, sizeof tags));
  static const char *const keys[] = {
      "service:",         "host:",
      "language:native",  "runtime:native",
      "runtime_version:", "runtime-id:",
      "process_id:",      "profiler_version:" CONTPROF_VERSION_STRING,
      "profile_seq:",     "runtime_platform:"};
  for (size_t i = 0; i < CP_ARRAY_SIZE(keys); i++)
    if (!strstr(tags, keys[i])) {
      fprintf(stderr, "tags_profiler lacks %s: %s\n", keys[i], tags);
      CHECK(0);
    }
  const char *rid = strstr(tags, "runtime-id:");
  if (rid && runtime_id)
    snprintf(runtime_id, 37, "%.36s", rid + 11);
  const char *seq = strstr(tags, "profile_seq:");
  pprof_profile *p = decode_part(pp);
  CHECK(p != NULL);
  if (p) {
    char err[256];
    CHECK_EQ_INT(pprof_validate(p, err, sizeof err), 0);
    CHECK_EQ_STR(pprof_str(p, 0), "");
    CHECK(pprof_sample_type_index(p, "cpu-time") >= 0);
    CHECK(pprof_sample_type_index(p, "cpu-samples") >= 0);
    CHECK(samples_merged(p));
    for (size_t i = 0; i < p->n_sample; i++)
      CHECK_EQ_INT(p->sample[i]->n_value, p->n_sample_type);
    pprof_profile_free(p);
  }
  return seq ? strtol(seq + 12, NULL, 10) : -1;
}

/* ---- tests
 * ------------------------------------------------------------------- */

static void test_config(void) {
  cp_config cfg;
  env_list none = {{NULL}};
  load_config(&cfg, &none);
  CHECK_EQ_INT(cfg.exports, CP_EXPORT_FILE);
  CHECK_EQ_STR(cfg.dd_agent_url, "http://localhost:8126");
  CHECK_EQ_INT(cfg.upload_timeout_ms, 10000);
  CHECK_EQ_INT(cfg.exit_timeout_ms, 5000);
  CHECK_EQ_INT(cfg.upload_period_s, 60);
  cp_config_free(&cfg);

  env_list dd = {
      {"DD_AGENT_HOST=agent", "DD_TRACE_AGENT_PORT=9126",
       "PYROSCOPE_SERVER_ADDRESS=http://pyro:4040/",
       "PYROSCOPE_UPLOAD_INTERVAL=15s", "PYROSCOPE_LABELS=region=eu, zone=b",
       "CONTPROF_SPOOL_MAX=10MiB", "CONTPROF_EXIT_TIMEOUT=500ms", NULL}};
  load_config(&cfg, &dd);
  CHECK_EQ_INT(cfg.exports, CP_EXPORT_DATADOG | CP_EXPORT_PYROSCOPE);
  CHECK_EQ_STR(cfg.dd_agent_url, "http://agent:9126");
  CHECK_EQ_STR(cfg.pyroscope_url, "http://pyro:4040");
  CHECK_EQ_INT(cfg.upload_period_s, 15);
  CHECK_EQ_INT(cfg.npyroscope_labels, 2);
  CHECK_EQ_INT(cfg.spool_max_bytes, 10 << 20);
  CHECK_EQ_INT(cfg.exit_timeout_ms, 500);
  cp_config_free(&cfg);

  /* DD_AGENT_HOST as users write it: an IPv6 address bare or bracketed,
   * and with a port, which is used. */
  static const char *const hosts[][2] = {
      {"DD_AGENT_HOST=agent:9999", "http://agent:9999"},
      {"DD_AGENT_HOST=::1", "http://[::1]:8126"},
      {"DD_AGENT_HOST=[::1]", "http://[::1]:8126"},
      {"DD_AGENT_HOST=[fd00::7]:9999", "http://[fd00::7]:9999"},
      {"DD_AGENT_HOST=fd00::7", "http://[fd00::7]:8126"},
      {"DD_AGENT_HOST=10.0.0.5", "http://10.0.0.5:8126"}};
  for (size_t i = 0; i < CP_ARRAY_SIZE(hosts); i++) {
    env_list h = {{hosts[i][0], NULL}};
    load_config(&cfg, &h);
    CHECK_EQ_STR(cfg.dd_agent_url, hosts[i][1]);
    CHECK(cp_http_check_url(cfg.dd_agent_url, NULL) != CP_URL_INVALID);
    cp_config_free(&cfg);
  }

  env_list sel = {{"CONTPROF_EXPORT=file,pyroscope",
                   "DD_TRACE_AGENT_URL=unix:///var/run/apm.sock",
                   "DD_PROFILING_UPLOAD_PERIOD=30", "CONTPROF_SPOOL_MAX=7",
                   NULL}};
  load_config(&cfg, &sel);
  CHECK_EQ_INT(cfg.exports, CP_EXPORT_FILE | CP_EXPORT_PYROSCOPE);
  CHECK_EQ_STR(cfg.dd_agent_url, "unix:///var/run/apm.sock");
  CHECK_EQ_INT(cfg.upload_period_s, 30);
  CHECK_EQ_INT(cfg.spool_max_profiles, 7);
  cp_config_free(&cfg);

  /* Bad values: one line each, no secret in them. */
  env_list bad = {{"CONTPROF_UPLOAD_TIMEOUT=soon", "DD_API_KEY=sekrit-key-1",
                   "DD_PROFILING_AGENTLESS=maybe", NULL}};
  capture_start();
  load_config(&cfg, &bad);
  char *err = capture_end();
  CHECK_EQ_INT(count_lines_with(err, "CONTPROF_UPLOAD_TIMEOUT"), 1);
  CHECK_EQ_INT(count_lines_with(err, "DD_PROFILING_AGENTLESS"), 1);
  CHECK(strstr(err, "sekrit") == NULL);
  CHECK_EQ_INT(cfg.upload_timeout_ms, 10000);
  CHECK_EQ_INT(cfg.dd_agentless, 0);
  cp_config_free(&cfg);
}

static void test_container_id(void) {
  char id[100];
  const char *docker =
      "12:memory:/docker/"
      "3726184226f5d3147c25fdeab5b60097e378e8a720503a5e19ecfdf29f869860\n"
      "0::/\n";
  CHECK(cp_datadog_container_id(docker, id, sizeof id));
  CHECK_EQ_STR(
      id, "3726184226f5d3147c25fdeab5b60097e378e8a720503a5e19ecfdf29f869860");
  const char *k8s =
      "0::/kubepods.slice/kubepods-pod1.slice/"
      "cri-containerd-"
      "2d3da189c8ed0a7b4a9c1bd3d5e6c5e0a1b2c3d4e5f60718293a4b5c6d7e"
      "8f90.scope\n";
  CHECK(cp_datadog_container_id(k8s, id, sizeof id));
  CHECK_EQ_STR(
      id, "2d3da189c8ed0a7b4a9c1bd3d5e6c5e0a1b2c3d4e5f60718293a4b5c6d7e8f90");
  const char *ecs = "1:name=systemd:/ecs/34dc0b5e626f2c5c4c5170e34b10e765-"
                    "1234567890\n";
  CHECK(cp_datadog_container_id(ecs, id, sizeof id));
  CHECK_EQ_STR(id, "34dc0b5e626f2c5c4c5170e34b10e765-1234567890");
  const char *host = "0::/user.slice/user-1000.slice/session-3.scope\n";
  CHECK(!cp_datadog_container_id(host, id, sizeof id));
  char path[256];
  CHECK(cp_datadog_cgroup_path(host, path, sizeof path));
  CHECK_EQ_STR(path, "/user.slice/user-1000.slice/session-3.scope");
}

static void set_env(const char *const *kv) {
  for (; *kv; kv++) {
    char name[128];
    const char *eq = strchr(*kv, '=');
    snprintf(name, sizeof name, "%.*s", (int)(eq - *kv), *kv);
    setenv(name, eq + 1, 1);
  }
}

static void unset_env(const char *const *kv) {
  for (; *kv; kv++) {
    char name[128];
    const char *eq = strchr(*kv, '=');
    snprintf(name, sizeof name, "%.*s", (int)(eq - *kv), *kv);
    unsetenv(name);
  }
}

/* The real profiler, every second, to a Datadog agent: back-to-back
 * periods, increasing profile_seq, every field checked. */
static void test_datadog_agent(void) {
  test_server *srv = srv_start(NULL);
  char url[64], svc[] = "DD_SERVICE=upload-test";
  snprintf(url, sizeof url, "DD_TRACE_AGENT_URL=http://127.0.0.1:%d",
           srv->port);
  const char *env[] = {url,
                       svc,
                       "DD_ENV=test",
                       "DD_VERSION=1.2.3",
                       "DD_TAGS=team:prof,region:eu",
                       "CONTPROF_UPLOAD_PERIOD=1",
                       "CONTPROF_LOG_LEVEL=error",
                       NULL};
  set_env(env);
  CHECK_EQ_INT(contprof_start(NULL), 0);
  contprof_label_scope scope;
  contprof_label_push("request kind", "upload", &scope);
  uint64_t stack[2] = {frame("dd_leaf", 0), frame("dd_root", 0)};
  for (int i = 0; i < 50; i++)
    contprof_record_sample(stack, 2, 0, CONTPROF_LABELS_OF_CALLER,
                           CONTPROF_KIND_CPU, 1, 1000);
  contprof_label_pop(&scope);
  srv_wait(srv, 2, 5000);
  CHECK_EQ_INT(contprof_stop(), 0);
  unset_env(env);
  pthread_mutex_lock(&srv->lock);
  size_t n = srv->nreqs;
  CHECK(n >= 2);
  char prev_end[64] = "";
  int64_t recorded = 0;
  for (size_t i = 0; i < n; i++) {
    char start[64], end[64];
    long seq = check_datadog_request(&srv->reqs[i], "/profiling/v1/input",
                                     start, end, NULL);
    CHECK_EQ_INT(seq, (long)i);
    if (i > 0)
      CHECK_EQ_STR(start, prev_end); /* no gap, no overlap */
    snprintf(prev_end, sizeof prev_end, "%s", end);
    mp_part parts[4];
    int np = mp_parse(&srv->reqs[i], parts, 4);
    const mp_part *ev = mp_find(parts, np, "event");
    char json[8192], tags[2048] = "";
    snprintf(json, sizeof json, "%.*s", (int)ev->len, (const char *)ev->data);
    json_string(json, "tags_profiler", tags, sizeof tags);
    CHECK(has_tag(tags, "service:upload-test"));
    CHECK(has_tag(tags, "env:test"));
    CHECK(has_tag(tags, "version:1.2.3"));
    CHECK(has_tag(tags, "team:prof"));
    CHECK(has_tag(tags, "region:eu"));
    pprof_profile *p = decode_part(mp_find(parts, np, "profile.pprof"));
    if (!p)
      continue;
    for (size_t s = 0; s < p->n_sample; s++) {
      const char *names[4];
      const Perftools__Profiles__Sample *smp = p->sample[s];
      pprof_location_functions(p, pprof_find_location(p, smp->location_id[0]),
                               names, 4);
      if (strcmp(names[0], "dd_leaf") != 0)
        continue;
      const Perftools__Profiles__Label *l =
          pprof_sample_label(p, smp, "request kind");
      CHECK(l && strcmp(pprof_label_str(p, l), "upload") == 0);
      CHECK(pprof_sample_label(p, smp, "thread id") != NULL);
      recorded += smp->value[pprof_sample_type_index(p, "cpu-samples")];
    }
    pprof_profile_free(p);
  }
  CHECK_EQ_INT(recorded, 50); /* 50 identical samples: merged, all there */
  pthread_mutex_unlock(&srv->lock);
  srv_stop(srv);
}

static void test_datadog_unix_socket(void) {
  char path[108], url[160];
  snprintf(path, sizeof path, "/tmp/contprof-apm-%d.sock", (int)getpid());
  test_server *srv = srv_start(path);
  snprintf(url, sizeof url, "unix://%s", path);
  cp_config cfg;
  char var[200];
  snprintf(var, sizeof var, "DD_TRACE_AGENT_URL=%s", url);
  env_list e = {{var, "CONTPROF_LOG_LEVEL=error", NULL}};
  load_config(&cfg, &e);
  CHECK_EQ_INT(cfg.exports, CP_EXPORT_DATADOG);
  cp_sink *s = cp_datadog_sink_create(&cfg);
  CHECK(s != NULL);
  cp_generation *g = make_generation(10, CONTPROF_KIND_CPU, 0, 0);
  cp_export_meta m = make_meta(&cfg, 0);
  cp_endpoint_count counts[2] = {{"GET /users", 3}, {"POST \"q\"", 1}};
  m.endpoint_counts = counts;
  m.nendpoint_counts = 2;
  CHECK_EQ_INT(sink_send(s, g, &m), 0);
  CHECK_EQ_INT(srv_wait(srv, 1, 5000), 1);
  finish(s, 2000);
  char start[64], end[64];
  CHECK_EQ_INT(check_datadog_request(&srv->reqs[0], "/profiling/v1/input",
                                     start, end, NULL),
               0);
  CHECK(mem_find(srv->reqs[0].body, srv->reqs[0].body_len,
                 "\"endpoint_counts\":{\"GET /users\":3,\"POST \\\"q\\\"\":1}",
                 strlen("\"endpoint_counts\":{\"GET /users\":3,\"POST "
                        "\\\"q\\\"\":1}")) != NULL);
  cp_gen_destroy(g);
  cp_config_free(&cfg);
  srv_stop(srv);
}

static void test_datadog_agentless(void) {
  test_server *srv = srv_start(NULL);
  char intake[128];
  snprintf(intake, sizeof intake,
           "CONTPROF_DATADOG_INTAKE_URL=http://127.0.0.1:%d/api/v2/profile",
           srv->port);
  env_list e = {{intake, "DD_API_KEY=0123456789abcdef-secret",
                 "DD_PROFILING_AGENTLESS=true", "CONTPROF_LOG_LEVEL=debug",
                 NULL}};
  cp_config cfg;
  load_config(&cfg, &e);
  CHECK_EQ_INT(cfg.exports, CP_EXPORT_DATADOG);
  capture_start();
  cp_sink *s = cp_datadog_sink_create(&cfg);
  CHECK(s != NULL);
  cp_generation *g = make_generation(10, CONTPROF_KIND_CPU, 0, 0);
  send_one(s, &cfg, 0, g);
  CHECK_EQ_INT(srv_wait(srv, 1, 5000), 1);
  finish(s, 2000);
  char *err = capture_end();
  CHECK(strstr(err, "secret") == NULL);
  char start[64], end[64], key[128];
  check_datadog_request(&srv->reqs[0], "/api/v2/profile", start, end, NULL);
  CHECK(srv_header(srv->reqs[0].headers, "DD-API-KEY", key, sizeof key) &&
        strcmp(key, "0123456789abcdef-secret") == 0);
  cp_config_free(&cfg);

  /* Plain http to a remote host: refused, the key never printed. */
  env_list remote = {{"CONTPROF_DATADOG_INTAKE_URL=http://192.0.2.7/api/v2/"
                      "profile",
                      "DD_API_KEY=0123456789abcdef-secret",
                      "DD_PROFILING_AGENTLESS=1", NULL}};
  load_config(&cfg, &remote);
  capture_start();
  CHECK(cp_datadog_sink_create(&cfg) == NULL);
  err = capture_end();
  CHECK_EQ_INT(count_lines_with(err, "refusing to send credentials"), 1);
  CHECK(strstr(err, "secret") == NULL);
  cp_config_free(&cfg);
  cp_gen_destroy(g);
  srv_stop(srv);
}

/* Pyroscope: one upload per family, names and labels of its dialect. */
static void test_pyroscope_families(void) {
  test_server *srv = srv_start(NULL);
  char addr[96];
  snprintf(addr, sizeof addr, "PYROSCOPE_SERVER_ADDRESS=http://127.0.0.1:%d",
           srv->port);
  env_list e = {{addr, "CONTPROF_SERVICE=my app", "CONTPROF_TAGS=team:prof",
                 "PYROSCOPE_AUTH_TOKEN=tok-123-secret",
                 "PYROSCOPE_TENANT_ID=tenant-7",
                 "PYROSCOPE_LABELS=region=eu,zone=b",
                 "CONTPROF_PROFILES=cpu,wall,alloc,heap,lock",
                 "CONTPROF_LOG_LEVEL=error", NULL}};
  cp_config cfg;
  load_config(&cfg, &e);
  CHECK_EQ_INT(cfg.exports, CP_EXPORT_PYROSCOPE);
  cp_sink *s = cp_pyroscope_sink_create(&cfg);
  CHECK(s != NULL);
  contprof_label_scope scope, task_scope;
  contprof_label_push("user key", "v1", &scope);
  contprof_label_push("task name", "Task-17", &task_scope);
  uint32_t labels = cp_labels_current();
  contprof_label_pop(&task_scope);
  contprof_label_pop(&scope);
  cp_generation *g = cp_gen_create(1, 64 << 20);
  uint64_t st[2] = {frame("py_leaf", 0), frame("py_root", 0)};
  for (int k = 0; k < CONTPROF_KIND_COUNT; k++)
    for (int t = 0; t < 3; t++) {
      cp_sample_key key = {.labels = labels,
                           .tid = 500 + t,
                           .span_id = 0xabcdef,
                           .local_root_span_id = 77};
      cp_gen_add(g, st, 2, 0, &key, (contprof_sample_kind)k, 2, 100);
    }
  cp_export_meta m = make_meta(&cfg, 0);
  CHECK_EQ_INT(sink_send(s, g, &m), 0);
  CHECK_EQ_INT(srv_wait(srv, 4, 5000), 4);
  finish(s, 2000);
  static const struct {
    const char *types[4];
    int ntypes;
  } want[4] = {
      {{"samples", "cpu"}, 2},
      {{"samples", "wall"}, 2},
      {{"alloc_objects", "alloc_space", "inuse_objects", "inuse_space"}, 4},
      {{"contentions", "delay"}, 2}};
  CHECK_EQ_INT(srv->nreqs, 4);
  for (size_t i = 0; i < srv->nreqs && i < 4; i++) {
    const srv_request *r = &srv->reqs[i];
    char h[256], expect[512];
    CHECK_EQ_STR(r->method, "POST");
    snprintf(expect, sizeof expect,
             "/ingest?name=my_app%%7Bteam%%3Dprof%%2Cregion%%3Deu%%2Czone%%3Db"
             "%%7D&from=%" PRIu64 "&until=%" PRIu64 "&spyName=contprof"
             "&sampleRate=%d",
             m.start_ns, m.end_ns, i == 1 ? 20 : 100);
    CHECK_EQ_STR(r->target, expect);
    CHECK(srv_header(r->headers, "Authorization", h, sizeof h) &&
          strcmp(h, "Bearer tok-123-secret") == 0);
    CHECK(srv_header(r->headers, "X-Scope-OrgID", h, sizeof h) &&
          strcmp(h, "tenant-7") == 0);
    mp_part parts[4];
    int np = mp_parse(r, parts, 4);
    CHECK_EQ_INT(np, 1);
    const mp_part *pp = mp_find(parts, np, "profile");
    CHECK(pp && strcmp(pp->filename, "profile.pprof") == 0);
    pprof_profile *p = decode_part(pp);
    CHECK(p != NULL);
    if (!p)
      continue;
    char err[256];
    CHECK_EQ_INT(pprof_validate(p, err, sizeof err), 0);
    CHECK_EQ_INT(p->n_sample_type, want[i].ntypes);
    for (size_t t = 0; t < p->n_sample_type; t++) {
      const char *name = pprof_str(p, p->sample_type[t]->type);
      CHECK(strchr(name, '-') == NULL);
      CHECK_EQ_STR(name, want[i].types[t]);
    }
    CHECK(p->time_nanos == (int64_t)m.start_ns);
    CHECK(!has_label_key(p, "thread id") && !has_label_key(p, "thread name"));
    CHECK(!has_label_key(p, "local root span id"));
    /* One per asyncio task (bindings/python): it would be a series each. */
    CHECK(!has_label_key(p, "task name") && !has_label_key(p, "task_name"));
    CHECK(samples_merged(p));
    CHECK_EQ_INT(p->n_sample, 1); /* three threads merged: no thread label */
    const Perftools__Profiles__Label *span =
        pprof_sample_label(p, p->sample[0], "span_id");
    CHECK(span && strcmp(pprof_label_str(p, span), "0000000000abcdef") == 0);
    const Perftools__Profiles__Label *user =
        pprof_sample_label(p, p->sample[0], "user_key");
    CHECK(user && strcmp(pprof_label_str(p, user), "v1") == 0);
    for (size_t l = 0; l < p->sample[0]->n_label; l++)
      CHECK(matches(pprof_str(p, p->sample[0]->label[l]->key),
                    "^[a-zA-Z_][a-zA-Z0-9_]*$"));
    CHECK_EQ_INT(total_of(p, want[i].types[0]), 6);
    pprof_profile_free(p);
  }
  cp_gen_destroy(g);
  cp_config_free(&cfg);

  /* Basic auth. */
  srv->nreqs = 0;
  env_list basic = {{addr, "PYROSCOPE_BASIC_AUTH_USER=alice",
                     "PYROSCOPE_BASIC_AUTH_PASSWORD=pw-secret",
                     "CONTPROF_LOG_LEVEL=error", NULL}};
  load_config(&cfg, &basic);
  s = cp_pyroscope_sink_create(&cfg);
  g = make_generation(5, CONTPROF_KIND_CPU, 0, 0);
  send_one(s, &cfg, 0, g);
  CHECK_EQ_INT(srv_wait(srv, 1, 5000), 1);
  finish(s, 2000);
  char h[256];
  CHECK(srv_header(srv->reqs[0].headers, "Authorization", h, sizeof h) &&
        strcmp(h, "Basic YWxpY2U6cHctc2VjcmV0") == 0);
  cp_gen_destroy(g);
  cp_config_free(&cfg);
  srv_stop(srv);
}

/* Pyroscope's limits: at most 16000 samples and 4 MiB, totals exact. */
static void test_pyroscope_limits(void) {
  test_server *srv = srv_start(NULL);
  char addr[96];
  snprintf(addr, sizeof addr, "PYROSCOPE_SERVER_ADDRESS=http://127.0.0.1:%d",
           srv->port);
  env_list e = {{addr, "CONTPROF_LOG_LEVEL=error", NULL}};
  cp_config cfg;
  load_config(&cfg, &e);
  cp_sink *s = cp_pyroscope_sink_create(&cfg);
  int n = 20000;
  cp_generation *g = make_generation(n, CONTPROF_KIND_CPU, 0, 0);
  int64_t want_cpu = (int64_t)n * (n + 1) / 2;
  send_one(s, &cfg, 0, g);
  CHECK_EQ_INT(srv_wait(srv, 1, 10000), 1);
  finish(s, 2000);
  mp_part parts[2];
  int np = mp_parse(&srv->reqs[0], parts, 2);
  pprof_profile *p = decode_part(mp_find(parts, np, "profile"));
  CHECK(p != NULL);
  if (p) {
    CHECK(p->n_sample <= 16000);
    CHECK_EQ_INT(total_of(p, "cpu"), want_cpu);
    CHECK_EQ_INT(total_of(p, "samples"), n);
    int other = 0;
    for (size_t i = 0; i < p->n_sample; i++) {
      const char *names[2];
      pprof_location_functions(
          p, pprof_find_location(p, p->sample[i]->location_id[0]), names, 2);
      if (strcmp(names[0], "[other]") == 0) {
        other++;
        /* The lightest went there: 4001 stacks of values 1..4001. */
        CHECK_EQ_INT(p->sample[i]->value[1], (int64_t)4001 * 4002 / 2);
      }
    }
    CHECK_EQ_INT(other, 1);
    pprof_profile_free(p);
  }
  /* The byte bound, smaller here so the test stays quick. */
  cp_export_meta m = make_meta(&cfg, 0);
  cp_export_options o = {.dialect = CP_DIALECT_PYROSCOPE,
                         .profiles = CP_PROFILE_CPU,
                         .max_samples = 16000,
                         .max_bytes = 100000};
  uint8_t *out = NULL;
  size_t len = 0, folded = 0;
  CHECK_EQ_INT(cp_export_pprof_with(g, &m, &o, &out, &len, &folded), 0);
  uint8_t *raw = NULL;
  size_t raw_len = 0;
  char err[256];
  CHECK_EQ_INT(
      pprof_gunzip(out, len, 64 << 20, &raw, &raw_len, err, sizeof err), 0);
  CHECK(raw_len <= 100000);
  CHECK(folded > 4000);
  pprof_profile *q = NULL;
  CHECK_EQ_INT(pprof_read_buffer(out, len, 64 << 20, &q, err, sizeof err), 0);
  if (q) {
    CHECK_EQ_INT(total_of(q, "cpu"), want_cpu);
    pprof_profile_free(q);
  }
  free(raw);
  free(out);
  cp_gen_destroy(g);
  cp_config_free(&cfg);
  srv_stop(srv);
}

/* Fault tests share this: a Datadog sink against srv with quick retries. */
static cp_sink *fault_sink(test_server *srv, cp_config *cfg,
                           const char *extra) {
  static char url[96];
  snprintf(url, sizeof url, "DD_TRACE_AGENT_URL=http://127.0.0.1:%d",
           srv->port);
  static env_list e;
  memset(&e, 0, sizeof e);
  e.kv[0] = url;
  e.kv[1] = "CONTPROF_RETRY_INITIAL=20ms";
  e.kv[2] = "CONTPROF_RETRY_MAX=100ms";
  e.kv[3] = "CONTPROF_UPLOAD_TIMEOUT=2s";
  e.kv[4] = "CONTPROF_LOG_LEVEL=warn";
  e.kv[5] = extra;
  load_config(cfg, &e);
  return cp_datadog_sink_create(cfg);
}

/* The profile_seq of every request the server answered with 2xx, in order. */
static size_t delivered_seqs(test_server *srv, long *seqs, size_t max) {
  size_t n = 0;
  pthread_mutex_lock(&srv->lock);
  for (size_t i = 0; i < srv->nreqs && n < max; i++) {
    if (srv->reqs[i].status < 200 || srv->reqs[i].status >= 300)
      continue;
    char s[64], e[64];
    seqs[n++] =
        check_datadog_request(&srv->reqs[i], "/profiling/v1/input", s, e, NULL);
  }
  pthread_mutex_unlock(&srv->lock);
  return n;
}

static size_t wait_delivered(test_server *srv, size_t n, int timeout_ms) {
  long seqs[64];
  size_t got = 0;
  for (int waited = 0; waited < timeout_ms; waited += 20) {
    if ((got = delivered_seqs(srv, seqs, 64)) >= n)
      break;
    usleep(20000);
  }
  return got;
}

/* Profiles 0..n-1 were each delivered once, in order. */
static void check_delivered_in_order(test_server *srv, size_t n) {
  long seqs[64];
  size_t got = delivered_seqs(srv, seqs, 64);
  CHECK_EQ_INT(got, n);
  for (size_t i = 0; i < got; i++)
    CHECK_EQ_INT(seqs[i], (long)i);
}

static void test_backend_down_then_up(void) {
  test_server *srv = srv_create(NULL); /* bound, not listening: refused */
  cp_config cfg;
  capture_start();
  cp_sink *s = fault_sink(srv, &cfg, NULL);
  cp_generation *g = make_generation(20, CONTPROF_KIND_CPU, 0, 0);
  for (int i = 0; i < 3; i++)
    send_one(s, &cfg, (uint64_t)i, g);
  usleep(300000);
  CHECK_EQ_INT(srv->nreqs, 0);
  srv_listen(srv);
  CHECK_EQ_INT(wait_delivered(srv, 3, 5000), 3);
  finish(s, 2000);
  char *err = capture_end();
  CHECK_EQ_INT(count_lines_with(err, "cannot reach"), 1);
  check_delivered_in_order(srv, 3);
  cp_gen_destroy(g);
  cp_config_free(&cfg);
  srv_stop(srv);
}

/* Sends profiles 0, 1 and 2 to srv through a sink, waits until the three
 * are delivered (5 s at most) and stops the sink; returns what it logged
 * meanwhile (capture_end's). */
static char *send_three(test_server *srv) {
  cp_config cfg;
  capture_start();
  cp_sink *s = fault_sink(srv, &cfg, NULL);
  cp_generation *g = make_generation(20, CONTPROF_KIND_CPU, 0, 0);
  for (int i = 0; i < 3; i++)
    send_one(s, &cfg, (uint64_t)i, g);
  CHECK_EQ_INT(wait_delivered(srv, 3, 5000), 3);
  finish(s, 2000);
  char *err = capture_end();
  cp_gen_destroy(g);
  cp_config_free(&cfg);
  return err;
}

static void test_retry_status(int status) {
  test_server *srv = srv_start(NULL);
  srv->script[0] = status;
  srv->script[1] = status;
  srv->script[2] = 200;
  srv->script[3] = status;
  srv->nscript = 4;
  send_three(srv);
  check_delivered_in_order(srv, 3);
  CHECK_EQ_INT(srv->nreqs, 6); /* 3 failures retried, nothing duplicated */
  srv_stop(srv);
}

static void test_500(void) { test_retry_status(500); }
static void test_429(void) { test_retry_status(429); }

/* 429 with Retry-After: 1: not asked again before that second, where the
 * backoff alone (20 ms) would have. */
static void test_retry_after_is_honoured(void) {
  test_server *srv = srv_start(NULL);
  srv->script[0] = 429;
  srv->nscript = 1;
  srv->retry_after = 1;
  cp_config cfg;
  capture_start();
  cp_sink *s = fault_sink(srv, &cfg, NULL);
  cp_generation *g = make_generation(20, CONTPROF_KIND_CPU, 0, 0);
  uint64_t t0 = cp_monotonic_ns();
  send_one(s, &cfg, 0, g);
  CHECK_EQ_INT(wait_delivered(srv, 1, 5000), 1);
  double waited = (double)(cp_monotonic_ns() - t0) / 1e9;
  finish(s, 2000);
  capture_end();
  printf("  delivered after %.2f s\n", waited);
  CHECK(waited >= 0.95);
  CHECK_EQ_INT(srv->nreqs, 2);
  cp_gen_destroy(g);
  cp_config_free(&cfg);
  srv_stop(srv);
}

static void test_400_not_retried(void) {
  test_server *srv = srv_start(NULL);
  srv->script[0] = 400;
  srv->nscript = 1;
  snprintf(srv->reply_body, sizeof srv->reply_body, "bad tags: nope");
  cp_config cfg;
  capture_start();
  cp_sink *s = fault_sink(srv, &cfg, NULL);
  cp_generation *g = make_generation(20, CONTPROF_KIND_CPU, 0, 0);
  send_one(s, &cfg, 0, g);
  srv_wait(srv, 1, 5000);
  usleep(300000); /* retries would come within 20..100 ms */
  CHECK_EQ_INT(srv->nreqs, 1);
  send_one(s, &cfg, 1, g); /* the next profile goes through */
  CHECK_EQ_INT(wait_delivered(srv, 1, 5000), 1);
  finish(s, 2000);
  char *err = capture_end();
  CHECK_EQ_INT(count_lines_with(err, "HTTP 400"), 1);
  CHECK_EQ_INT(count_lines_with(err, "bad tags: nope"), 1);
  CHECK_EQ_INT(srv->nreqs, 2);
  cp_gen_destroy(g);
  cp_config_free(&cfg);
  srv_stop(srv);
}

/* A redirect (a proxy's http-to-https 308, a moved path) is not followed:
 * the request carries the backend's credentials. Nor is the profile
 * dropped: it is kept and retried, the message says where the server
 * pointed without the credentials or query in that URL, and once the
 * server answers 200 everything is delivered in order. */
static void test_redirect_kept_not_followed(void) {
  test_server *srv = srv_start(NULL);
  srv->script[0] = 308;
  srv->script[1] = 301;
  srv->nscript = 2;
  snprintf(srv->location, sizeof srv->location,
           "https://user:hunter2@elsewhere.example:4443/moved?token=s3cret");
  char *err = send_three(srv);
  CHECK_EQ_INT(count_lines_with(err, "HTTP 308"), 1);
  CHECK_EQ_INT(count_lines_with(err,
                                "redirected to "
                                "https://***@elsewhere.example:4443/moved;"),
               1);
  CHECK_EQ_INT(count_lines_with(err, "kept"), 1);
  CHECK(!strstr(err, "hunter2") && !strstr(err, "s3cret"));
  check_delivered_in_order(srv, 3);
  CHECK_EQ_INT(srv->nreqs, 5); /* two redirected, then three delivered */
  for (size_t i = 0; i < srv->nreqs; i++)
    CHECK_EQ_STR(srv->reqs[i].method, "POST"); /* every one to us */
  srv_stop(srv);
}

static double now_s(void) { return (double)cp_monotonic_ns() / 1e9; }

/* A 200 whose body never ends (1 GB announced, trickled): delivered as
 * soon as the status and the start of the body are in, where reading to the
 * end made it a timeout, retried and reported undelivered. A server that
 * echoes the request's credentials in its message does not get them into
 * the log. */
static void test_long_body_and_echoed_secret(void) {
  test_server *srv = srv_start(NULL);
  srv->endless_body = 1;
  memset(srv->reply_body, 'x', 100);
  srv->reply_body[100] = 0;
  cp_config cfg;
  capture_start();
  cp_sink *s = fault_sink(srv, &cfg, NULL);
  cp_generation *g = make_generation(20, CONTPROF_KIND_CPU, 0, 0);
  double t0 = now_s();
  send_one(s, &cfg, 0, g);
  CHECK_EQ_INT(wait_delivered(srv, 1, 5000), 1);
  finish(s, 3000);
  double took = now_s() - t0;
  char *err = capture_end();
  printf("  delivered and finished in %.2f s; log: %s\n", took, err);
  CHECK(took < 1.5); /* the upload timeout is 2 s */
  CHECK_EQ_INT(count_lines_with(err, "contprof:"), 0);
  cp_gen_destroy(g);
  cp_config_free(&cfg);
  srv_stop(srv);

  /* 401 with the Authorization header echoed, cut at the message's end. */
  test_server *echo = srv_start(NULL);
  echo->default_status = 401;
  snprintf(echo->reply_body, sizeof echo->reply_body,
           "invalid request: Authorization: Bearer tok-echoed-secret-12345 "
           "and again tok-echoed-secret-12345");
  char addr[96];
  snprintf(addr, sizeof addr, "PYROSCOPE_SERVER_ADDRESS=http://127.0.0.1:%d",
           echo->port);
  env_list e = {{addr, "PYROSCOPE_AUTH_TOKEN=tok-echoed-secret-12345",
                 "CONTPROF_LOG_LEVEL=warn", NULL}};
  load_config(&cfg, &e);
  capture_start();
  cp_sink *p = cp_pyroscope_sink_create(&cfg);
  if (p) {
    g = make_generation(3, CONTPROF_KIND_CPU, 0, 0);
    send_one(p, &cfg, 0, g);
    srv_wait(echo, 1, 5000);
    finish(p, 2000);
    cp_gen_destroy(g);
  }
  err = capture_end();
  CHECK(p != NULL);
  CHECK(count_lines_with(err, "HTTP 401") >= 1);
  CHECK(strstr(err, "tok-echoed") == NULL);
  CHECK(strstr(err, "Bearer ***") != NULL);
  cp_config_free(&cfg);
  srv_stop(echo);
}

static void test_spool_full(void) {
  test_server *srv = srv_create(NULL);
  cp_config cfg;
  capture_start();
  cp_sink *s = fault_sink(srv, &cfg, "CONTPROF_SPOOL_MAX=2");
  cp_generation *g = make_generation(20, CONTPROF_KIND_CPU, 0, 0);
  for (int i = 0; i < 5; i++) {
    send_one(s, &cfg, (uint64_t)i, g);
    usleep(30000);
  }
  srv_listen(srv);
  CHECK_EQ_INT(wait_delivered(srv, 2, 5000), 2);
  usleep(200000);
  finish(s, 2000);
  char *err = capture_end();
  CHECK(count_lines_with(err, "spool full") >= 1);
  CHECK(strstr(err, "3 dropped so far") != NULL);
  long seqs[8];
  size_t n = delivered_seqs(srv, seqs, 8);
  CHECK_EQ_INT(n, 2);
  if (n == 2) {
    CHECK_EQ_INT(seqs[0], 3); /* the oldest went first */
    CHECK_EQ_INT(seqs[1], 4);
  }
  cp_gen_destroy(g);
  cp_config_free(&cfg);
  srv_stop(srv);
}

/* A child process that profiles into srv and exits with status 7. */
static pid_t spawn_child(test_server *srv, const char *const *extra,
                         int flushes) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    char url[96];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", srv->port);
    setenv("DD_TRACE_AGENT_URL", url, 1);
    setenv("CONTPROF_LOG_LEVEL", "error", 1);
    setenv("CONTPROF_RETRY_INITIAL", "20ms", 1);
    set_env(extra);
    if (contprof_start(NULL) != 0)
      _exit(99);
    uint64_t stack[2] = {frame("child_leaf", 0), frame("child_root", 0)};
    for (int f = 0; f < flushes; f++) {
      contprof_record_sample(stack, 2, 0, 0, CONTPROF_KIND_CPU, 1, 1000);
      contprof_flush();
    }
    contprof_record_sample(stack, 2, 0, 0, CONTPROF_KIND_CPU, 1, 1000);
    exit(7); /* atexit: the last profile, within CONTPROF_EXIT_TIMEOUT */
  }
  return pid;
}

static void test_hung_server_exit_deadline(void) {
  if (CP_TEST_TSAN) { /* TSan cannot start threads in such a child */
    printf("SKIP under TSan: a forked child of a threaded test starts the "
           "profiler\n");
    return;
  }
  test_server *srv = srv_start(NULL);
  /* Under the lock: the server's threads already run. */
  pthread_mutex_lock(&srv->lock);
  srv->default_status = 0; /* accept, read, never answer */
  pthread_mutex_unlock(&srv->lock);
  const char *env[] = {"CONTPROF_EXIT_TIMEOUT=1", "CONTPROF_UPLOAD_TIMEOUT=30",
                       "CONTPROF_UPLOAD_PERIOD=3600", NULL};
  double t0 = now_s();
  pid_t pid = spawn_child(srv, env, 1);
  int status = 0;
  waitpid(pid, &status, 0);
  double elapsed = now_s() - t0;
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 7);
  if (!CP_TEST_SANITIZED) /* LeakSanitizer's scan at exit takes seconds */
    CHECK(elapsed < 1.8);
  CHECK(srv_wait(srv, 1, 0) >= 1); /* under its lock */
  fprintf(stderr, "hung server: child exited after %.3f s (deadline 1 s)\n",
          elapsed);
  srv_stop(srv);
}

static size_t count_spool_files(const char *dir, const char *secret,
                                int *leaked) {
  DIR *d = opendir(dir);
  size_t n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    if (!strstr(e->d_name, ".spool"))
      continue;
    n++;
    char path[512], buf[1 << 16];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    int fd = open(path, O_RDONLY);
    ssize_t len = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (len > 0 &&
        mem_find((uint8_t *)buf, (size_t)len, secret, strlen(secret)))
      *leaked = 1;
  }
  if (d)
    closedir(d);
  return n;
}

/* A fresh spool directory (dir: a "/tmp/contprof-spool-XXXXXX" buffer),
 * its CONTPROF_SPOOL_DIR setting in env, and a server that refuses
 * connections until srv_listen. */
static test_server *spool_setup(char *dir, char *env, size_t len) {
  CHECK(mkdtemp(dir) != NULL);
  snprintf(env, len, "CONTPROF_SPOOL_DIR=%s", dir);
  return srv_create(NULL);
}

/* Waits up to 2 s for n spool files in dir; returns how many there are. */
static size_t wait_spool_files(const char *dir, size_t n) {
  int leaked = 0;
  size_t on_disk = count_spool_files(dir, "DD-EVP", &leaked);
  for (int w = 0; w < 100 && on_disk < n; w++) {
    usleep(20000);
    on_disk = count_spool_files(dir, "DD-EVP", &leaked);
  }
  CHECK(!leaked);
  return on_disk;
}

/* Backend down while a process runs and exits: its profiles wait on disk
 * and the next process delivers them first, in order. */
static void test_spool_dir_restart(void) {
  if (CP_TEST_TSAN) { /* TSan cannot start threads in such a child */
    printf("SKIP under TSan: a forked child of a threaded test starts the "
           "profiler\n");
    return;
  }
  char dir[] = "/tmp/contprof-spool-XXXXXX", spool[128];
  test_server *srv = spool_setup(dir, spool, sizeof spool);
  const char *env[] = {spool, "CONTPROF_EXIT_TIMEOUT=300ms",
                       "CONTPROF_UPLOAD_PERIOD=3600", NULL};
  pid_t pid = spawn_child(srv, env, 2);
  int status;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 7);
  int leaked = 0;
  CHECK_EQ_INT(count_spool_files(dir, "DD-EVP", &leaked), 3);
  srv_listen(srv);
  pid = spawn_child(srv, env, 1);
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 7);
  /* The second process delivers the first one's 3 profiles, then its 2. */
  CHECK_EQ_INT(wait_delivered(srv, 5, 3000), 5);
  char first_id[40] = "", id[40];
  long prev_seq = -1;
  int switched = 0;
  pthread_mutex_lock(&srv->lock);
  for (size_t i = 0; i < srv->nreqs && i < 5; i++) {
    char s[64], e[64];
    long seq =
        check_datadog_request(&srv->reqs[i], "/profiling/v1/input", s, e, id);
    fprintf(stderr, "restart: request %zu: runtime-id %s profile_seq %ld\n", i,
            id, seq);
    /* profile_seq continues across starts within a process: compare
     * with the first of each runtime-id. */
    if (i == 0) {
      snprintf(first_id, sizeof first_id, "%s", id);
      prev_seq = seq - 1;
    }
    if (strcmp(id, first_id) != 0 && !switched) {
      switched = 1;
      CHECK_EQ_INT(i, 3);
      prev_seq = seq - 1;
    }
    CHECK_EQ_INT(seq, prev_seq + 1);
    prev_seq = seq;
  }
  pthread_mutex_unlock(&srv->lock);
  CHECK(switched);
  CHECK_EQ_INT(count_spool_files(dir, "x", &leaked), 0);
  rmdir(dir);
  srv_stop(srv);
}

/* Backend down: every queued profile is on disk as soon as the backend has
 * failed once, not at a clean exit that a kill or a crash skips (only the
 * one that failed was, and the others were lost). Then the backend comes
 * back: all delivered, in order, files removed. */
static void test_spool_written_while_down(void) {
  char dir[] = "/tmp/contprof-spool-XXXXXX", spool[128];
  test_server *srv = spool_setup(dir, spool, sizeof spool);
  cp_config cfg;
  capture_start();
  cp_sink *s = fault_sink(srv, &cfg, spool);
  cp_generation *g = make_generation(20, CONTPROF_KIND_CPU, 0, 0);
  for (int i = 0; i < 4; i++) {
    send_one(s, &cfg, (uint64_t)i, g);
    usleep(50000);
  }
  int leaked = 0;
  CHECK_EQ_INT(wait_spool_files(dir, 4), 4);
  srv_listen(srv);
  CHECK_EQ_INT(wait_delivered(srv, 4, 5000), 4);
  finish(s, 2000);
  capture_end();
  check_delivered_in_order(srv, 4);
  CHECK_EQ_INT(count_spool_files(dir, "x", &leaked), 0);
  rmdir(dir);
  cp_gen_destroy(g);
  cp_config_free(&cfg);
  srv_stop(srv);
}

/* A process with nothing of its own to send (a short-lived child) that
 * adopted another's spooled profile, aimed at a server that never answers:
 * it stops at once at exit, the file stays for the next process. It waited
 * the whole exit timeout, each such process. */
static void test_adopted_only_does_not_hold_the_exit(void) {
  char dir[] = "/tmp/contprof-spool-XXXXXX", spool[128];
  /* refused: the profile is spooled */
  test_server *srv = spool_setup(dir, spool, sizeof spool);
  cp_config cfg;
  capture_start();
  cp_sink *a = fault_sink(srv, &cfg, spool);
  cp_generation *g = make_generation(20, CONTPROF_KIND_CPU, 0, 0);
  send_one(a, &cfg, 0, g);
  usleep(200000);
  finish(a, 300);
  cp_config_free(&cfg);
  int leaked = 0;
  CHECK_EQ_INT(count_spool_files(dir, "DD-EVP", &leaked), 1);
  srv->default_status = 0; /* accepts, never answers */
  srv_listen(srv);
  cp_sink *b = fault_sink(srv, &cfg, spool);
  CHECK_EQ_INT(srv_wait(srv, 1, 3000), 1); /* the adopted one, in flight */
  double t0 = now_s();
  finish(b, 3000);
  double took = now_s() - t0;
  capture_end();
  printf("  finished in %.2f s\n", took);
  CHECK(took < 1.0);
  CHECK_EQ_INT(count_spool_files(dir, "DD-EVP", &leaked), 1);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK_EQ_INT(system(cmd), 0);
  cp_gen_destroy(g);
  cp_config_free(&cfg);
  srv_stop(srv);
}

/* A spool file whose owner still runs is left alone, whatever its pid
 * says: the owner holds a lock file (flock) for its life. Two sinks in one
 * process stand for two processes in different PID namespaces sharing a
 * volume, where kill(pid, 0) on the name's pid says nothing: the second
 * adopted the first's file (the same pid) and, the backend back, both
 * delivered it. */
static void test_spool_owner_alive_is_left_alone(void) {
  char dir[] = "/tmp/contprof-spool-XXXXXX", spool[128];
  test_server *srv = spool_setup(dir, spool, sizeof spool);
  cp_config cfg_a, cfg_b;
  capture_start();
  cp_sink *a = fault_sink(srv, &cfg_a, spool);
  cp_generation *g = make_generation(20, CONTPROF_KIND_CPU, 0, 0);
  send_one(a, &cfg_a, 0, g);
  int leaked = 0;
  CHECK_EQ_INT(wait_spool_files(dir, 1), 1);
  cp_sink *b = fault_sink(srv, &cfg_b, spool); /* must not adopt it */
  srv_listen(srv);
  CHECK_EQ_INT(wait_delivered(srv, 1, 3000), 1);
  usleep(300000); /* a second delivery would come meanwhile */
  finish(b, 1000);
  finish(a, 1000);
  capture_end();
  CHECK_EQ_INT(srv->nreqs, 1);
  CHECK_EQ_INT(count_spool_files(dir, "x", &leaked), 0);
  CHECK_EQ_INT(rmdir(dir), 0); /* no lock file left either */
  cp_config_free(&cfg_a);
  cp_config_free(&cfg_b);
  cp_gen_destroy(g);
  srv_stop(srv);
}

/* Secrets stay out of spool files. */
static void test_spool_no_secret(void) {
  char dir[] = "/tmp/contprof-spool-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  test_server *srv = srv_create(NULL);
  char intake[128], spool[128];
  snprintf(intake, sizeof intake,
           "CONTPROF_DATADOG_INTAKE_URL=http://127.0.0.1:%d/api/v2/profile",
           srv->port);
  snprintf(spool, sizeof spool, "CONTPROF_SPOOL_DIR=%s", dir);
  env_list e = {{intake, spool, "DD_API_KEY=key-must-not-leak",
                 "DD_PROFILING_AGENTLESS=1", "CONTPROF_RETRY_INITIAL=20ms",
                 "CONTPROF_LOG_LEVEL=error", NULL}};
  cp_config cfg;
  load_config(&cfg, &e);
  cp_sink *s = cp_datadog_sink_create(&cfg);
  cp_generation *g = make_generation(5, CONTPROF_KIND_CPU, 0, 0);
  send_one(s, &cfg, 0, g);
  usleep(100000);
  finish(s, 200);
  int leaked = 0;
  CHECK_EQ_INT(count_spool_files(dir, "key-must-not-leak", &leaked), 1);
  CHECK(!leaked);
  /* Clean up: a sink with a live server delivers and removes it. */
  srv_listen(srv);
  s = cp_datadog_sink_create(&cfg);
  CHECK_EQ_INT(srv_wait(srv, 1, 3000), 1);
  finish(s, 1000);
  CHECK_EQ_INT(count_spool_files(dir, "x", &leaked), 0);
  rmdir(dir);
  cp_gen_destroy(g);
  cp_config_free(&cfg);
  srv_stop(srv);
}

/* ---- URLs and credentials (docs/security.md) ------------------------------
 */

/* Where credentials may go: https anywhere, plain http only to a literal
 * loopback address. A URL without a scheme is plain http (libcurl speaks
 * http to it); a name that merely starts with 127. is a name. */
static void test_url_rules(void) {
  static const char *const insecure[] = {
      "192.0.2.2:9999", /* no scheme: libcurl speaks http */
      "pyroscope.example:4040",
      "http://127.attacker.example:4040",
      "http://127.0.0.1.nip.io:4040",
      "http://127.0.0.1@192.0.2.9/",
      "http://192.0.2.7/api/v2/profile",
      "http://[fd00::2]:4040",
      "ftp://127.0.0.1/",
      "file:///etc/passwd",
      "",
  };
  for (size_t i = 0; i < CP_ARRAY_SIZE(insecure); i++)
    if (!cp_http_is_insecure_remote(insecure[i])) {
      fprintf(stderr, "credentials allowed to '%s'\n", insecure[i]);
      CHECK(0);
    }
  static const char *const allowed[] = {
      "http://127.0.0.1:4040", "http://127.1.2.3/",    "http://localhost:8126",
      "http://LOCALHOST",      "http://[::1]:4040/x",  "127.0.0.1:4040",
      "https://192.0.2.2",     "https://pyro.example", "unix:///var/run/a.sock",
  };
  for (size_t i = 0; i < CP_ARRAY_SIZE(allowed); i++)
    if (cp_http_is_insecure_remote(allowed[i])) {
      fprintf(stderr, "credentials refused to '%s'\n", allowed[i]);
      CHECK(0);
    }
  /* The classifier itself: literal addresses only, no DNS. */
  CHECK(cp_http_host_is_loopback("127.0.0.1"));
  CHECK(cp_http_host_is_loopback("127.255.0.9"));
  CHECK(cp_http_host_is_loopback("[::1]"));
  CHECK(cp_http_host_is_loopback("localhost"));
  CHECK(!cp_http_host_is_loopback("127.attacker.example"));
  CHECK(!cp_http_host_is_loopback("127.0.0.1.nip.io"));
  CHECK(!cp_http_host_is_loopback("localhost.attacker.example"));
  CHECK(!cp_http_host_is_loopback("128.0.0.1"));
  CHECK(!cp_http_host_is_loopback("[::2]"));
  CHECK(!cp_http_host_is_loopback(""));
  cp_url_info info;
  CHECK_EQ_INT(cp_http_check_url("192.0.2.2:9999", &info), CP_URL_HTTP_REMOTE);
  CHECK_EQ_STR(info.shown, "http://192.0.2.2:9999");
  CHECK_EQ_INT(cp_http_check_url("http://u:pw@127.0.0.1:1/p?k=v", &info),
               CP_URL_HTTP_LOOPBACK);
  CHECK(info.has_userinfo);
  CHECK_EQ_STR(info.shown, "http://127.0.0.1:1/p");
  CHECK_EQ_INT(cp_http_check_url("gopher://h/", &info), CP_URL_INVALID);
  /* A scheme without "//" is not a URL: libcurl would have been handed
   * "http://http:/user:pw@host" (host "http", the password in the path, in
   * the clear) and "https:/host" would have gone to a host named https. */
  static const char *const bare[] = {"http:/user:pw@remote.example",
                                     "https:/pyro.example", "http:host:4040",
                                     "user:pw@remote.example:4040"};
  for (size_t i = 0; i < CP_ARRAY_SIZE(bare); i++)
    CHECK_EQ_INT(cp_http_check_url(bare[i], &info), CP_URL_INVALID);
  CHECK_EQ_INT(cp_http_check_url("localhost:4040", &info),
               CP_URL_HTTP_LOOPBACK);

  /* What a message shows of a URL: nothing before the last '@', however
   * malformed, nor the query. */
  static const char *const redact[][2] = {
      {"http://user:pa/ss@remote.example:4040",
       "http://***@remote.example:4040"},
      {"http://user:p#ss@remote.example/x", "http://***@remote.example/x"},
      {"http://user:p?ss@remote.example", "http://***@remote.example"},
      {"http:/user:secretpw@remote.example", "***@remote.example"},
      {"https://pyro.example/a?token=t", "https://pyro.example/a"},
      {"http://127.0.0.1:4040", "http://127.0.0.1:4040"}};
  for (size_t i = 0; i < CP_ARRAY_SIZE(redact); i++) {
    char shown[256];
    cp_http_redact_url(redact[i][0], shown, sizeof shown);
    CHECK_EQ_STR(shown, redact[i][1]);
  }

  /* A request's path never changes the host. */
  char url[512], why[160];
  CHECK_EQ_INT(cp_http_compose_url("http://127.0.0.1:4040/prefix/",
                                   "/ingest?name=a%7Bb%7D&x=1", url, sizeof url,
                                   why, sizeof why),
               0);
  CHECK_EQ_STR(url, "http://127.0.0.1:4040/prefix/ingest?name=a%7Bb%7D&x=1");
  CHECK_EQ_INT(cp_http_compose_url("https://intake.example/api/v2/profile", "",
                                   url, sizeof url, why, sizeof why),
               0);
  CHECK_EQ_STR(url, "https://intake.example/api/v2/profile");
  CHECK_EQ_INT(cp_http_compose_url("localhost:8126", "/profiling/v1/input", url,
                                   sizeof url, why, sizeof why),
               0);
  CHECK_EQ_STR(url, "http://localhost:8126/profiling/v1/input");
  CHECK_EQ_INT(cp_http_compose_url("http://127.0.0.1:4040", "//evil.example/x",
                                   url, sizeof url, why, sizeof why),
               0);
  CHECK(strncmp(url, "http://127.0.0.1:4040/", 22) == 0);
  static const char *const bad_targets[] = {
      "@127.0.0.2:9999/steal", ".evil.example/x", "evil", "/a b", "/a#b",
      "/a\r\nHost: x"};
  for (size_t i = 0; i < CP_ARRAY_SIZE(bad_targets); i++)
    CHECK_EQ_INT(cp_http_compose_url("https://intake.example", bad_targets[i],
                                     url, sizeof url, why, sizeof why),
                 -1);
}

/* A non-loopback IPv4 address of this host, or 0. */
static int local_address(char *out, size_t len) {
  struct ifaddrs *ifs = NULL, *i;
  int found = 0;
  if (getifaddrs(&ifs) != 0)
    return 0;
  for (i = ifs; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
      continue;
    struct sockaddr_in *a = (struct sockaddr_in *)i->ifa_addr;
    if ((ntohl(a->sin_addr.s_addr) >> 24) == 127)
      continue;
    found = inet_ntop(AF_INET, &a->sin_addr, out, (socklen_t)len) != NULL;
  }
  freeifaddrs(ifs);
  return found;
}

static size_t requests_with_header(test_server *srv, const char *name) {
  size_t n = 0;
  char h[512];
  pthread_mutex_lock(&srv->lock);
  for (size_t i = 0; i < srv->nreqs; i++)
    n += srv_header(srv->reqs[i].headers, name, h, sizeof h);
  pthread_mutex_unlock(&srv->lock);
  return n;
}

/* One Pyroscope sink to address with a token: returns whether it was made
 * and, when made, sends a profile and waits for the server. */
static int pyro_with_token(const char *address, const char *extra, char **err) {
  char addr[160];
  snprintf(addr, sizeof addr, "PYROSCOPE_SERVER_ADDRESS=%s", address);
  env_list e = {{addr, "PYROSCOPE_AUTH_TOKEN=tok-must-stay-secret",
                 "CONTPROF_LOG_LEVEL=warn", extra, NULL}};
  cp_config cfg;
  load_config(&cfg, &e);
  capture_start();
  cp_sink *s = cp_pyroscope_sink_create(&cfg);
  if (s) {
    cp_generation *g = make_generation(3, CONTPROF_KIND_CPU, 0, 0);
    send_one(s, &cfg, 0, g);
    finish(s, 2000);
    cp_gen_destroy(g);
  }
  *err = capture_end();
  cp_config_free(&cfg);
  return s != NULL;
}

/* The bypasses of the plain-http guard: a URL without a scheme (libcurl
 * speaks http to it) and names that start with 127. Nothing is sent, one
 * message, the token never printed. Loopback literals still get the
 * token. */
static void test_credentials_plain_http(void) {
  char *err;
  static const char *const refused[] = {"192.0.2.2:9999",
                                        "http://127.attacker.example:4040",
                                        "http://127.0.0.1.nip.io:4040"};
  for (size_t i = 0; i < CP_ARRAY_SIZE(refused); i++) {
    CHECK(!pyro_with_token(refused[i], NULL, &err));
    CHECK_EQ_INT(count_lines_with(err, "refusing to send credentials"), 1);
    CHECK(strstr(err, "tok-must-stay-secret") == NULL);
  }
  /* Basic auth in the URL itself is a credential too. */
  env_list ui = {{"PYROSCOPE_SERVER_ADDRESS=http://alice:pw-in-url@192.0.2.9",
                  "CONTPROF_LOG_LEVEL=warn", NULL}};
  cp_config cfg;
  load_config(&cfg, &ui);
  capture_start();
  CHECK(cp_pyroscope_sink_create(&cfg) == NULL);
  err = capture_end();
  CHECK_EQ_INT(count_lines_with(err, "refusing to send credentials"), 1);
  CHECK(strstr(err, "pw-in-url") == NULL);
  cp_config_free(&cfg);

  /* Malformed URLs with a password: one message, no password in it. */
  static const char *const malformed[] = {
      "PYROSCOPE_SERVER_ADDRESS=http:/alice:pw-in-url@192.0.2.9",
      "PYROSCOPE_SERVER_ADDRESS=http://alice:pw/in-url@192.0.2.9:4040",
      "PYROSCOPE_SERVER_ADDRESS=http://alice:pw?in-url@192.0.2.9"};
  for (size_t i = 0; i < CP_ARRAY_SIZE(malformed); i++) {
    env_list bad = {{malformed[i], "CONTPROF_LOG_LEVEL=warn", NULL}};
    load_config(&cfg, &bad);
    capture_start();
    CHECK(cp_pyroscope_sink_create(&cfg) == NULL);
    err = capture_end();
    CHECK_EQ_INT(count_lines_with(err, "contprof:"), 1);
    CHECK(strstr(err, "pw") == NULL);
    if (strstr(err, "pw"))
      fprintf(stderr, "%s", err);
    cp_config_free(&cfg);
  }

  /* For real: a server on this host's own non-loopback address, named
   * without a scheme, never sees the token. */
  char ip[64];
  test_server *far = local_address(ip, sizeof ip) ? srv_create_ip(ip) : NULL;
  if (far) {
    srv_listen(far);
    char address[96];
    snprintf(address, sizeof address, "%s:%d", ip, far->port);
    pyro_with_token(address, "CONTPROF_UPLOAD_TIMEOUT=2s", &err);
    CHECK_EQ_INT(requests_with_header(far, "Authorization"), 0);
    srv_stop(far);
  } else {
    printf("SKIP the live part: no non-loopback IPv4 address\n");
  }

  /* Loopback literals: 127.0.0.1 (also without a scheme), localhost and
   * [::1] get the token. */
  test_server *srv = srv_start(NULL);
  char address[96];
  snprintf(address, sizeof address, "http://127.0.0.1:%d", srv->port);
  CHECK(pyro_with_token(address, NULL, &err));
  snprintf(address, sizeof address, "127.0.0.1:%d", srv->port);
  CHECK(pyro_with_token(address, NULL, &err));
  snprintf(address, sizeof address, "http://localhost:%d", srv->port);
  CHECK(pyro_with_token(address, NULL, &err));
  CHECK_EQ_INT(requests_with_header(srv, "Authorization"), 3);
  srv_stop(srv);
  test_server *v6 = srv_create_ip("::1");
  if (v6) {
    srv_listen(v6);
    snprintf(address, sizeof address, "http://[::1]:%d", v6->port);
    CHECK(pyro_with_token(address, NULL, &err));
    CHECK_EQ_INT(requests_with_header(v6, "Authorization"), 1);
    srv_stop(v6);
  } else {
    printf("SKIP [::1]: no IPv6 loopback\n");
  }
}

/* ---- descriptors shared with the application ------------------------------
 */

/* user+system clock ticks of this process's thread named comm, or -1. */
static long thread_ticks(const char *comm) {
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;
  long ticks = -1;
  while (d && ticks < 0 && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.')
      continue;
    char path[300], buf[1024] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    int fd = open(path, O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0)
      close(fd);
    if (n <= 0 || strncmp(buf, comm, strlen(comm)) != 0)
      continue;
    snprintf(path, sizeof path, "/proc/self/task/%s/stat", e->d_name);
    fd = open(path, O_RDONLY);
    n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0)
      close(fd);
    if (n <= 0)
      continue;
    buf[n] = 0;
    const char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    /* After the name: state, then fields 4..13, then utime, stime. */
    if (p &&
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
               &ut, &st) == 2)
      ticks = (long)(ut + st);
  }
  if (d)
    closedir(d);
  return ticks;
}

#define APP_OBJECTS 12

/* What the application of test_app_closes_descriptors owns: files (fd,
 * inode, offset) and socket pairs. */
typedef struct app_fds {
  int file[APP_OBJECTS];
  ino_t ino[APP_OBJECTS];
  int pair[APP_OBJECTS][2];
} app_fds;

/* Marks the open descriptors below 1024 in open_fds; returns how many were
 * not marked in before (NULL: none was). */
static int open_descriptors(const char *before, char *open_fds) {
  DIR *d = opendir("/proc/self/fd");
  struct dirent *e;
  int n = 0;
  if (open_fds)
    memset(open_fds, 0, 1024);
  while (d && (e = readdir(d)) != NULL) {
    int fd = atoi(e->d_name);
    if (e->d_name[0] == '.' || fd == dirfd(d) || fd >= 1024)
      continue;
    if (open_fds)
      open_fds[fd] = 1;
    n += !before || !before[fd];
  }
  if (d)
    closedir(d);
  return n;
}

static int wait_parent(int fd) {
  char c;
  return read(fd, &c, 1) == 1 ? 0 : -1;
}

/* The child of test_app_closes_descriptors: profiles into the server at
 * port, closes 3..63 once an upload went through, opens its own files and
 * sockets, uploads again (the server never answers that one) and checks
 * that nothing of its own was closed, read, moved or written, and that the
 * sink's thread waits instead of spinning. Exits 7 when all is well. */
static void app_child(int port, const char *dir, int from_parent) {
  /* The sink alone, as the uploader drives it: no sampler, whose unwinding
   * (libunwind keeps a descriptor of its own, a separate finding) would
   * run into the application's descriptors too. */
  char url[96];
  snprintf(url, sizeof url, "DD_TRACE_AGENT_URL=http://127.0.0.1:%d", port);
  env_list e = {
      {url, "CONTPROF_LOG_LEVEL=error", "CONTPROF_UPLOAD_TIMEOUT=30s", NULL}};
  cp_config cfg;
  load_config(&cfg, &e);
  static char inherited[1024]; /* the test's own, from fork */
  open_descriptors(NULL, inherited);
  cp_sink *s = cp_datadog_sink_create(&cfg);
  if (!s)
    _exit(99);
  cp_generation *g = make_generation(5, CONTPROF_KIND_CPU, 0, 0);
  send_one(s, &cfg, 0, g);
  if (wait_parent(from_parent) != 0) /* the first upload arrived */
    _exit(98);
  /* Between uploads no descriptor is ours: once the sink's thread is done
   * with the answer, only 0, 1, 2 and the pipe from the parent are open. */
  int bad = 0, kept = 0;
  for (int waited = 0; waited < 10000; waited += 10) {
    if ((kept = open_descriptors(inherited, NULL)) == 0)
      break;
    usleep(10000);
  }
  if (kept) {
    fprintf(stderr, "descriptors: %d kept between uploads\n", kept);
    bad = 1;
  }
  for (int fd = 3; fd < 64; fd++)
    close(fd);
  app_fds a;
  for (int i = 0; i < APP_OBJECTS; i++) {
    char path[256];
    snprintf(path, sizeof path, "%s/app-%d", dir, i);
    a.file[i] = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    char line[32];
    int n = snprintf(line, sizeof line, "file %02d\n", i);
    bad |= write(a.file[i], line, (size_t)n) != n;
    struct stat st;
    fstat(a.file[i], &st);
    a.ino[i] = st.st_ino;
    bad |= socketpair(AF_UNIX, SOCK_STREAM, 0, a.pair[i]) != 0;
  }
  send_one(s, &cfg, 1, g);
  if (wait_parent(from_parent) != 0) /* the second upload is in flight */
    _exit(98);
  long t0 = thread_ticks("contprof-datado");
  uint64_t w0 = cp_monotonic_ns();
  usleep(1500000);
  long t1 = thread_ticks("contprof-datado");
  double wall = (double)(cp_monotonic_ns() - w0) / 1e9;
  double cpu = (double)(t1 - t0) / (double)sysconf(_SC_CLK_TCK);
  fprintf(stderr, "descriptors: sink thread used %.2f s of CPU in %.2f s\n",
          cpu, wall);
  if (t0 < 0 || t1 < 0 || cpu > wall / 2) {
    fprintf(stderr, "descriptors: the sink's thread spins\n");
    bad = 1;
  }
  for (int i = 0; i < APP_OBJECTS; i++) {
    struct stat st;
    if (fstat(a.file[i], &st) != 0 || st.st_ino != a.ino[i] ||
        lseek(a.file[i], 0, SEEK_CUR) != 8) {
      fprintf(stderr, "descriptors: file %d (fd %d) closed or moved\n", i,
              a.file[i]);
      bad = 1;
    }
    for (int k = 0; k < 2; k++) {
      struct pollfd p = {a.pair[i][k], POLLIN, 0};
      int r = poll(&p, 1, 0);
      if (r != 0 || fcntl(a.pair[i][k], F_GETFD) < 0) {
        fprintf(stderr, "descriptors: socket %d (fd %d) closed or written\n", i,
                a.pair[i][k]);
        bad = 1;
      }
    }
  }
  /* As at exit: the stop aborts the upload in flight (a wakeup). */
  finish(s, 1000);
  cp_gen_destroy(g);
  cp_config_free(&cfg);
  /* _exit: the test's own memory, copied by fork (its server), is not
   * LeakSanitizer's business here. */
  _exit(bad ? 3 : 7);
}

static int wait_child(pid_t pid, int timeout_s, int *status) {
  for (int i = 0; i < timeout_s * 50; i++) {
    if (waitpid(pid, status, WNOHANG) == pid)
      return 0;
    usleep(20000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, status, 0);
  return -1;
}

/* A program that closes descriptors 3..63 between uploads (as daemons and
 * exec wrappers do) and opens its own: libcurl must not close, read, write
 * or spin on them (docs/security.md). */
static void test_app_closes_descriptors(void) {
  if (CP_TEST_TSAN) { /* TSan cannot start threads in such a child */
    printf("SKIP under TSan: a forked child of a threaded test starts the "
           "profiler\n");
    return;
  }
  char dir[] = "/tmp/contprof-fds-XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  test_server *srv = srv_start(NULL);
  pthread_mutex_lock(&srv->lock);
  srv->script[0] = 200;
  srv->script[1] = 0; /* the upload after the close: never answered */
  srv->nscript = 2;
  pthread_mutex_unlock(&srv->lock);
  int p[2];
  CHECK_EQ_INT(pipe(p), 0);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(p[0], 100); /* above what the application closes */
    close(p[0]);
    close(p[1]);
    app_child(srv->port, dir, 100);
  }
  close(p[0]);
  CHECK_EQ_INT(srv_wait(srv, 1, 10000), 1);
  CHECK_EQ_INT(write(p[1], "1", 1), 1);
  CHECK_EQ_INT(srv_wait(srv, 2, 10000), 2);
  CHECK_EQ_INT(write(p[1], "2", 1), 1);
  int status = 0;
  CHECK_EQ_INT(wait_child(pid, 60, &status), 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 7);
  close(p[1]);
  /* After exit too: nothing written into the application's files. */
  for (int i = 0; i < APP_OBJECTS; i++) {
    char path[256], buf[64] = "", want[32];
    snprintf(path, sizeof path, "%s/app-%d", dir, i);
    snprintf(want, sizeof want, "file %02d\n", i);
    int fd = open(path, O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0)
      close(fd);
    buf[n > 0 ? n : 0] = 0;
    CHECK_EQ_STR(buf, want);
    unlink(path);
  }
  rmdir(dir);
  srv_stop(srv);
}

/* ---- the exit deadline when libcurl cannot be woken ----------------------
 */

/* Name resolution that does not end for one name: libcurl waits for its
 * resolver thread where cp_http_abort cannot reach (like a DNS server that
 * does not answer). Exported to libcurl (tests.cmake). */
#define SLOW_HOST "contprof-slow-dns.test"
int getaddrinfo(const char *node, const char *service,
                const struct addrinfo *hints, struct addrinfo **res) {
  if (node && strcmp(node, SLOW_HOST) == 0) {
    sleep(600);
    return EAI_AGAIN;
  }
  static int (*real)(const char *, const char *, const struct addrinfo *,
                     struct addrinfo **);
  if (!real)
    *(void **)&real = dlsym(RTLD_NEXT, "getaddrinfo");
  return real(node, service, hints, res);
}

/* A process whose sink is stuck where no abort reaches still exits, by the
 * exit deadline, with its own status. */
static void test_stuck_sink_exit(void) {
  if (CP_TEST_TSAN) { /* TSan cannot start threads in such a child */
    printf("SKIP under TSan: a forked child of a threaded test starts the "
           "profiler\n");
    return;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    setenv("DD_TRACE_AGENT_URL", "http://" SLOW_HOST ":9", 1);
    setenv("CONTPROF_LOG_LEVEL", "warn", 1);
    setenv("CONTPROF_UPLOAD_PERIOD", "3600", 1);
    setenv("CONTPROF_EXIT_TIMEOUT", "1s", 1);
    if (contprof_start(NULL) != 0)
      _exit(99);
    uint64_t stack[2] = {frame("dns_leaf", 0), frame("dns_root", 0)};
    contprof_record_sample(stack, 2, 0, 0, CONTPROF_KIND_CPU, 1, 1000);
    contprof_flush();
    usleep(200000); /* the sink's thread is resolving by now */
    contprof_record_sample(stack, 2, 0, 0, CONTPROF_KIND_CPU, 1, 1000);
    exit(7);
  }
  int status = 0;
  /* Generous: a hang is 600 s, the deadline 1 s. */
  CHECK_EQ_INT(wait_child(pid, 30, &status), 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 7);
}

TEST_MAIN(T(test_config), T(test_container_id), T(test_datadog_agent),
          T(test_datadog_unix_socket), T(test_datadog_agentless),
          T(test_pyroscope_families), T(test_pyroscope_limits),
          T(test_backend_down_then_up), T(test_500), T(test_429),
          T(test_retry_after_is_honoured), T(test_400_not_retried),
          T(test_redirect_kept_not_followed),
          T(test_long_body_and_echoed_secret), T(test_spool_full),
          T(test_hung_server_exit_deadline), T(test_spool_dir_restart),
          T(test_spool_written_while_down),
          T(test_adopted_only_does_not_hold_the_exit),
          T(test_spool_owner_alive_is_left_alone), T(test_spool_no_secret),
          T(test_url_rules), T(test_credentials_plain_http),
          T(test_app_closes_descriptors), T(test_stuck_sink_exit))
