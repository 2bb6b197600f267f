/* CPU time and peak memory of one upload of a profile with 10,000 distinct
 * stacks: a generation is built once with cp_gen_add, then one sink (file,
 * datadog or pyroscope) receives it N times; a local server in a child
 * process answers 200. CPU is the whole process's (the encoding on the
 * calling thread plus the delivery on the sink's thread) divided by N;
 * memory is the peak RSS above the RSS once the generation is built.
 *
 *   upload_bench MODE N STACKS DEPTH  ->  one RESULT line */
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "../tests/upload/server.h"
#include "aggregator/calltree.h"
#include "config.h"
#include "contprof/runtime.h"
#include "exporter/export.h"
#include "upload/http_sink.h"

static double cpu_s(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (double)u.ru_utime.tv_sec + (double)u.ru_utime.tv_usec / 1e6 +
         (double)u.ru_stime.tv_sec + (double)u.ru_stime.tv_usec / 1e6;
}

static long rss_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld", &kb) == 1)
      break;
  if (f)
    fclose(f);
  return kb;
}

static long peak_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmHWM: %ld", &kb) == 1)
      break;
  if (f)
    fclose(f);
  return kb;
}

typedef struct env_list {
  const char *kv[8];
} env_list;
static const char *lookup(const char *name, void *ctx) {
  env_list *e = ctx;
  size_t n = strlen(name);
  for (size_t i = 0; e->kv[i]; i++)
    if (strncmp(e->kv[i], name, n) == 0 && e->kv[i][n] == '=')
      return e->kv[i] + n + 1;
  return NULL;
}

int main(int argc, char **argv) {
  (void)srv_start; /* server.h helpers this program does not use */
  (void)srv_stop;
  const char *mode = argc > 1 ? argv[1] : "datadog";
  int n = argc > 2 ? atoi(argv[2]) : 10;
  int stacks = argc > 3 ? atoi(argv[3]) : 10000;
  int depth = argc > 4 ? atoi(argv[4]) : 16;

  test_server *srv = srv_create(NULL);
  pid_t server = fork();
  if (server == 0) {
    srv_listen(srv);
    pause();
    _exit(0);
  }
  char url[128], out_dir[] = "/tmp/contprof-upload-bench-XXXXXX", dir[160];
  mkdtemp(out_dir);
  snprintf(url, sizeof url, "%s=http://127.0.0.1:%d",
           strcmp(mode, "pyroscope") == 0 ? "PYROSCOPE_SERVER_ADDRESS"
                                          : "DD_TRACE_AGENT_URL",
           srv->port);
  snprintf(dir, sizeof dir, "CONTPROF_OUTPUT_DIR=%s", out_dir);
  env_list e = {
      {url, dir, "CONTPROF_LOG_LEVEL=error", "CONTPROF_SPOOL_MAX=1000", NULL}};
  cp_config cfg;
  if (cp_config_load(&cfg, NULL, lookup, &e) != 0)
    return 1;

  /* 10,000 distinct stacks of depth frames (a shared root, distinct leaves
   * and middles), program counters inside this binary, symbolized. */
  cp_generation *g = cp_gen_create(1, (size_t)1 << 30);
  uint64_t *frames = calloc((size_t)depth, sizeof *frames);
  for (int i = 0; i < stacks; i++) {
    for (int d = 0; d < depth; d++) {
      char name[64];
      snprintf(name, sizeof name, "function_%d_at_depth_%d",
               d == depth - 1 ? 0 : i % (1000 + d), d);
      frames[d] = contprof_frame_intern(name, "bench/app.c", d);
    }
    char leaf[64];
    snprintf(leaf, sizeof leaf, "leaf_%d", i);
    frames[0] = contprof_frame_intern(leaf, "bench/app.c", i);
    cp_sample_key key = {.tid = 100 + i % 8};
    cp_gen_add(g, frames, (size_t)depth, 0, &key, CONTPROF_KIND_CPU, 1 + i % 7,
               10000000LL * (1 + i % 7));
  }
  long base_rss = rss_kb();

  cp_sink *s = strcmp(mode, "file") == 0        ? cp_file_sink_create(&cfg)
               : strcmp(mode, "pyroscope") == 0 ? cp_pyroscope_sink_create(&cfg)
                                                : cp_datadog_sink_create(&cfg);
  if (!s)
    return 1;
  double t0 = cpu_s();
  uint64_t w0 = cp_monotonic_ns();
  uint64_t start = cp_realtime_ns() - 60000000000ull;
  for (int i = 0; i < n; i++) {
    cp_export_meta m = {.cfg = &cfg,
                        .host = "bench",
                        .pid = getpid(),
                        .runtime_id = "00000000-0000-4000-8000-000000000000",
                        .runtime = "native",
                        .runtime_version = "2.36",
                        .start_ns = start + (uint64_t)i,
                        .end_ns = start + (uint64_t)i + 1,
                        .seq = (uint64_t)i,
                        .cpu_period_ns = 10000000};
    cp_export e;
    cp_export_init(&e, g, &m);
    s->send(s, &e);
    cp_export_release(&e);
  }
  if (s->finish)
    s->finish(s, cp_monotonic_ns() + 120000000000ull);
  s->destroy(s); /* returns once everything is delivered */
  double cpu = (cpu_s() - t0) / n;
  double wall = (double)(cp_monotonic_ns() - w0) / 1e9 / n;
  long peak = peak_kb();
  printf("RESULT mode=%s uploads=%d stacks=%d depth=%d cpu_ms=%.2f "
         "wall_ms=%.2f base_rss_kb=%ld peak_rss_kb=%ld extra_peak_kb=%ld\n",
         mode, n, stacks, depth, cpu * 1e3, wall * 1e3, base_rss, peak,
         peak - base_rss);
  kill(server, SIGKILL);
  waitpid(server, NULL, 0);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf %s", out_dir);
  if (system(cmd) != 0)
    return 1;
  return 0;
}
