/* libFuzzer target for the configuration parser (src/config.c): the input is
 * a fake environment, NAME=VALUE lines, handed to cp_config_load through its
 * getenv callback. Checks that loading never crashes or leaks (ASan, LSan)
 * and that every setting lands in the range docs/configuration.md gives. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

#include "fuzz.h"

#define MAX_VARS 64

typedef struct fake_env {
  char *names[MAX_VARS];
  char *values[MAX_VARS];
  size_t n;
} fake_env;

static const char *fake_getenv(const char *name, void *ctx) {
  const fake_env *e = ctx;
  for (size_t i = 0; i < e->n; i++)
    if (strcmp(e->names[i], name) == 0)
      return e->values[i];
  return NULL;
}

#define IN(v, lo, hi) EXPECT((v) >= (lo) && (v) <= (hi))

static void check(const cp_config *c) {
  EXPECT(c->enabled == 0 || c->enabled == 1);
  EXPECT(c->service && c->env && c->version && c->output_dir);
  EXPECT(c->profiles != 0 && (c->profiles & ~0x1fu) == 0);
  IN(c->cpu_hz, 1, 1000);
  IN((int)c->cpu_clock, CP_CPU_CLOCK_AUTO, CP_CPU_CLOCK_POSIX);
  IN(c->max_frames, 1, 1024);
  IN(c->upload_period_s, 1, 86400);
  IN(c->max_memory_bytes, (size_t)1 << 20, (size_t)65536 << 20);
  IN(c->symbols_max_bytes, (size_t)1 << 20, (size_t)65536 << 20);
  IN((int)c->log_level, 0, 3);
  IN(c->wall_interval_ms, 1, 1000);
  IN(c->wall_threads_per_tick, 1, 4096);
  EXPECT(c->timeline == 0 || c->timeline == 1);
  IN(c->alloc_sample_bytes, 1, 1L << 30);
  IN(c->heap_max_tracked, 1024, 1000000);
  IN(c->lock_sample_ns, 1, 1000000000L);
  EXPECT(c->exports != 0 && (c->exports & ~7u) == 0);
  EXPECT(c->dd_agent_url && c->dd_intake_url && c->pyroscope_url);
  EXPECT(c->dd_agentless == 0 || (c->dd_agentless == 1 && c->dd_api_key));
  IN(c->upload_timeout_ms, 1, 3600000);
  IN(c->connect_timeout_ms, 1, 3600000);
  IN(c->exit_timeout_ms, 0, 3600000);
  IN(c->retry_initial_ms, 1, 3600000);
  IN(c->retry_max_ms, c->retry_initial_ms, 86400000);
  EXPECT(c->spool_max_profiles > 0 && c->spool_max_bytes > 0);
  /* The bounds of names and tags (config.h, docs/configuration.md). */
  EXPECT(strlen(c->service) <= CP_MAX_NAME_BYTES &&
         strlen(c->env) <= CP_MAX_NAME_BYTES &&
         strlen(c->version) <= CP_MAX_NAME_BYTES);
  EXPECT(c->ntags <= CP_MAX_TAGS && c->npyroscope_labels <= CP_MAX_TAGS);
  for (size_t i = 0; i < c->ntags; i++)
    EXPECT(c->tags[i].key && c->tags[i].key[0] && c->tags[i].value &&
           strlen(c->tags[i].key) + 1 + strlen(c->tags[i].value) <=
               CP_MAX_TAG_BYTES);
  for (size_t i = 0; i < c->npyroscope_labels; i++)
    EXPECT(c->pyroscope_labels[i].key && c->pyroscope_labels[i].value &&
           strlen(c->pyroscope_labels[i].key) + 1 +
                   strlen(c->pyroscope_labels[i].value) <=
               CP_MAX_TAG_BYTES);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* NUL-terminated copy, split into lines at '\n'; NAME=VALUE each. */
  char *text = malloc(size + 1);
  if (!text)
    return 0;
  memcpy(text, data, size);
  text[size] = 0;
  fake_env env = {.n = 0};
  char *save = NULL;
  for (char *line = strtok_r(text, "\n", &save); line && env.n < MAX_VARS;
       line = strtok_r(NULL, "\n", &save)) {
    char *eq = strchr(line, '=');
    if (!eq || eq == line)
      continue;
    *eq = 0;
    env.names[env.n] = line;
    env.values[env.n] = eq + 1;
    env.n++;
  }
  cp_config cfg;
  if (cp_config_load(&cfg, NULL, fake_getenv, &env) == 0) {
    check(&cfg);
    cp_config_free(&cfg);
  }
  free(text);
  return 0;
}
