/* Configuration: reads options and the environment (CONTPROF_*, then the
 * Datadog and Pyroscope variables users already set) into a cp_config. The
 * only file that calls getenv. Bad values get one `contprof:` line naming the
 * variable, the value and the fallback. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct source {
  cp_getenv_fn get;
  void *ctx;
} source;

static const char *env_get(const source *src, const char *name) {
  const char *v = src->get ? src->get(name, src->ctx) : getenv(name);
  return (v && *v) ? v : NULL;
}

/* The first set variable among names; *which receives its name. */
static const char *env_first(const source *src, const char *const *names,
                             const char **which) {
  for (; *names; names++) {
    const char *v = env_get(src, *names);
    if (v) {
      if (which)
        *which = *names;
      return v;
    }
  }
  return NULL;
}

static int parse_int(const char *s, long lo, long hi, long *out) {
  while (isspace((unsigned char)*s))
    s++;
  if (!*s)
    return -1;
  errno = 0;
  char *end;
  long v = strtol(s, &end, 10);
  while (isspace((unsigned char)*end))
    end++;
  if (errno || *end || v < lo || v > hi)
    return -1;
  *out = v;
  return 0;
}

/* An integer option: explicit option value if nonzero, else the variable. */
static int int_setting(const source *src, const char *name, int option, long lo,
                       long hi, long def, int *out) {
  if (option != 0) {
    if (option < lo || option > hi) {
      cp_error("option for %s=%d is out of range %ld..%ld", name, option, lo,
               hi);
      return CONTPROF_ERR_INVALID;
    }
    *out = option;
    return 0;
  }
  const char *v = env_get(src, name);
  long parsed;
  if (v && parse_int(v, lo, hi, &parsed) != 0) {
    cp_warn("%s='%s' is not an integer in %ld..%ld; using %ld", name, v, lo, hi,
            def);
    v = NULL;
  }
  *out = (int)(v ? parsed : def);
  return 0;
}

static int parse_bool(const char *s, int *out) {
  static const char *const yes[] = {"1", "true", "yes", "on"};
  static const char *const no[] = {"0", "false", "no", "off"};
  for (size_t i = 0; i < CP_ARRAY_SIZE(yes); i++) {
    if (strcasecmp(s, yes[i]) == 0)
      return *out = 1, 0;
    if (strcasecmp(s, no[i]) == 0)
      return *out = 0, 0;
  }
  return -1;
}

static const struct {
  const char *name;
  unsigned bit;
} profile_names[] = {
    {"cpu", CP_PROFILE_CPU},     {"wall", CP_PROFILE_WALL},
    {"alloc", CP_PROFILE_ALLOC}, {"heap", CP_PROFILE_HEAP},
    {"lock", CP_PROFILE_LOCK},
};

/* Parses "cpu,wall" (commas or spaces). Unknown names are counted in *bad. */
static unsigned parse_profiles(const char *s, int *bad) {
  unsigned mask = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", s);
  char *save = NULL;
  for (char *tok = strtok_r(buf, ", \t", &save); tok;
       tok = strtok_r(NULL, ", \t", &save)) {
    unsigned bit = 0;
    for (size_t i = 0; i < CP_ARRAY_SIZE(profile_names); i++)
      if (strcasecmp(tok, profile_names[i].name) == 0)
        bit = profile_names[i].bit;
    *bad += !bit;
    mask |= bit;
  }
  return mask;
}

const char *cp_profiles_string(unsigned profiles, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = 0;
  for (size_t i = 0; i < CP_ARRAY_SIZE(profile_names); i++) {
    if (!(profiles & profile_names[i].bit))
      continue;
    int n = snprintf(buf + used, len - used, "%s%s", used ? "," : "",
                     profile_names[i].name);
    if (n < 0 || (size_t)n >= len - used)
      break;
    used += (size_t)n;
  }
  return buf;
}

static int tag_key_ok(const char *k) { return *k != 0; }

/* Parses "k1:v1,k2:v2" (DD_TAGS also allows spaces as separators). Malformed
 * entries are skipped with one message for the variable. */
static int parse_tags(cp_config *cfg, const char *name, const char *s) {
  char *copy = strdup(s);
  if (!copy)
    return CONTPROF_ERR_NOMEM;
  int bad = 0;
  char *save = NULL;
  for (char *tok = strtok_r(copy, ", \t", &save); tok;
       tok = strtok_r(NULL, ", \t", &save)) {
    char *colon = strchr(tok, ':');
    if (!colon || colon == tok || !tag_key_ok(tok)) {
      bad = 1;
      continue;
    }
    *colon = 0;
    cp_tag *grown = realloc(cfg->tags, (cfg->ntags + 1) * sizeof *grown);
    if (!grown) {
      free(copy);
      return CONTPROF_ERR_NOMEM;
    }
    cfg->tags = grown;
    cp_tag *t = &cfg->tags[cfg->ntags];
    t->key = strdup(tok);
    t->value = strdup(colon + 1);
    if (!t->key || !t->value) {
      free(t->key);
      free(t->value);
      free(copy);
      return CONTPROF_ERR_NOMEM;
    }
    cfg->ntags++;
  }
  if (bad)
    cp_warn("%s='%s': entries that are not key:value were ignored", name, s);
  free(copy);
  return 0;
}

static int set_string(char **dst, const char *value) {
  *dst = cp_strdup(value);
  return *dst ? 0 : CONTPROF_ERR_NOMEM;
}

int cp_config_load(cp_config *cfg, const contprof_options *opts,
                   cp_getenv_fn get, void *ctx) {
  static const contprof_options no_options;
  const source src = {get, ctx};
  int rc;
  memset(cfg, 0, sizeof *cfg);
  if (!opts)
    opts = &no_options;

  /* Logging first, so that the other messages obey it. */
  cfg->log_level = CP_LOG_WARN;
  const char *lvl =
      opts->log_level ? opts->log_level : env_get(&src, "CONTPROF_LOG_LEVEL");
  if (lvl) {
    static const char *const levels[] = {"error", "warn", "info", "debug"};
    int found = -1;
    for (size_t i = 0; i < CP_ARRAY_SIZE(levels); i++)
      if (strcasecmp(lvl, levels[i]) == 0)
        found = (int)i;
    if (found < 0) {
      cp_warn("CONTPROF_LOG_LEVEL='%s' is not one of error, warn, info, "
              "debug; using warn",
              lvl);
      if (opts->log_level)
        return CONTPROF_ERR_INVALID;
    } else {
      cfg->log_level = (cp_log_level)found;
    }
  }
  cp_log_set_level(cfg->log_level);

  cfg->enabled = 1;
  const char *which = NULL;
  static const char *const enabled_vars[] = {"CONTPROF_ENABLED",
                                             "DD_PROFILING_ENABLED", NULL};
  const char *en = env_first(&src, enabled_vars, &which);
  if (en && parse_bool(en, &cfg->enabled) != 0) {
    cp_warn("%s='%s' is not a boolean (1/0, true/false); using true", which,
            en);
    cfg->enabled = 1;
  }

  static const char *const service_vars[] = {
      "CONTPROF_SERVICE", "DD_SERVICE", "PYROSCOPE_APPLICATION_NAME", NULL};
  const char *service =
      opts->service ? opts->service : env_first(&src, service_vars, NULL);
  if (!service)
    service = program_invocation_short_name;
  static const char *const env_vars[] = {"CONTPROF_ENV", "DD_ENV", NULL};
  static const char *const version_vars[] = {"CONTPROF_VERSION", "DD_VERSION",
                                             NULL};
  if ((rc = set_string(&cfg->service, service)) ||
      (rc = set_string(&cfg->env, opts->env
                                      ? opts->env
                                      : env_first(&src, env_vars, NULL))) ||
      (rc = set_string(&cfg->version,
                       opts->version ? opts->version
                                     : env_first(&src, version_vars, NULL))))
    goto fail;

  static const char *const tag_vars[] = {"CONTPROF_TAGS", "DD_TAGS", NULL};
  which = "tags option";
  const char *tags =
      opts->tags ? opts->tags : env_first(&src, tag_vars, &which);
  if (tags && (rc = parse_tags(cfg, which, tags)))
    goto fail;

  cfg->profiles = CP_PROFILE_CPU;
  const char *profiles =
      opts->profiles ? opts->profiles : env_get(&src, "CONTPROF_PROFILES");
  if (profiles) {
    int bad = 0;
    unsigned mask = parse_profiles(profiles, &bad);
    if (opts->profiles && bad) {
      cp_error("profiles option '%s' names an unknown profile (known: cpu, "
               "wall, alloc, heap, lock)",
               profiles);
      rc = CONTPROF_ERR_INVALID;
      goto fail;
    }
    char used[64];
    if (mask)
      cfg->profiles = mask;
    if (bad || !mask)
      cp_warn("CONTPROF_PROFILES='%s' names unknown profiles (known: cpu, "
              "wall, alloc, heap, lock); using %s",
              profiles, cp_profiles_string(cfg->profiles, used, sizeof used));
  }

  int memory_mb;
  if ((rc = int_setting(&src, "CONTPROF_CPU_HZ", opts->cpu_hz, 1, 1000, 100,
                        &cfg->cpu_hz)) ||
      (rc = int_setting(&src, "CONTPROF_MAX_FRAMES", opts->max_frames, 1, 1024,
                        128, &cfg->max_frames)) ||
      (rc = int_setting(&src, "CONTPROF_UPLOAD_PERIOD", opts->upload_period_s,
                        1, 86400, 60, &cfg->upload_period_s)) ||
      (rc = int_setting(&src, "CONTPROF_MAX_MEMORY_MB", 0, 1, 65536, 64,
                        &memory_mb)))
    goto fail;
  cfg->max_memory_bytes = (size_t)memory_mb << 20;

  int alloc_bytes, lock_ns;
  if ((rc = int_setting(&src, "CONTPROF_WALL_INTERVAL_MS", 0, 1, 1000, 10,
                        &cfg->wall_interval_ms)) ||
      (rc = int_setting(&src, "CONTPROF_WALL_THREADS_PER_TICK", 0, 1, 4096, 16,
                        &cfg->wall_threads_per_tick)) ||
      (rc = int_setting(&src, "CONTPROF_ALLOC_SAMPLE_BYTES", 0, 1, 1 << 30,
                        524288, &alloc_bytes)) ||
      (rc = int_setting(&src, "CONTPROF_LOCK_SAMPLE_NS", 0, 1, 1000000000,
                        100000, &lock_ns)))
    goto fail;
  cfg->alloc_sample_bytes = alloc_bytes;
  cfg->lock_sample_ns = lock_ns;
  const char *timeline = env_get(&src, "CONTPROF_TIMELINE");
  if (timeline && parse_bool(timeline, &cfg->timeline) != 0) {
    cp_warn("CONTPROF_TIMELINE='%s' is not a boolean (1/0, true/false); "
            "using false",
            timeline);
    cfg->timeline = 0;
  }

  const char *dir = opts->output_dir ? opts->output_dir
                                     : env_get(&src, "CONTPROF_OUTPUT_DIR");
  if ((rc = set_string(&cfg->output_dir, dir ? dir : "./profiles")))
    goto fail;
  return 0;

fail:
  cp_config_free(cfg);
  return rc;
}

void cp_config_free(cp_config *cfg) {
  free(cfg->service);
  free(cfg->env);
  free(cfg->version);
  for (size_t i = 0; i < cfg->ntags; i++) {
    free(cfg->tags[i].key);
    free(cfg->tags[i].value);
  }
  free(cfg->tags);
  free(cfg->output_dir);
  memset(cfg, 0, sizeof *cfg);
}
