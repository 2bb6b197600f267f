/* Configuration: reads options and the environment (CONTPROF_*, then the
 * Datadog and Pyroscope variables users already set) into a cp_config. The
 * only file that reads the environment (secure_getenv), and none of it in a
 * privileged program. Bad values get one `contprof:` line naming the
 * variable, the value and the fallback. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct source {
  cp_getenv_fn get;
  void *ctx;
} source;

const char *cp_config_getenv(const char *name) { return secure_getenv(name); }

static const char *env_get(const source *src, const char *name) {
  const char *v = src->get ? src->get(name, src->ctx) : secure_getenv(name);
  return (v && *v) ? v : NULL;
}

/* The source of a privileged program: nothing is set. */
static const char *no_env(const char *name, void *ctx) {
  (void)name;
  (void)ctx;
  return NULL;
}

int cp_config_privileged(void) {
  return getauxval(AT_SECURE) != 0 || getuid() != geteuid() ||
         getgid() != getegid();
}

/* Owned by root, not writable by group or others, of the given type. */
static int root_only(const char *path, mode_t type) {
  struct stat st;
  return lstat(path, &st) == 0 && (st.st_mode & S_IFMT) == type &&
         st.st_uid == 0 && !(st.st_mode & (S_IWGRP | S_IWOTH));
}

int cp_config_setuid_allowed(void) {
  char dir[sizeof CP_ALLOW_SETUID_FILE];
  memcpy(dir, CP_ALLOW_SETUID_FILE, sizeof dir);
  *strrchr(dir, '/') = 0;
  return root_only(dir, S_IFDIR) && root_only(CP_ALLOW_SETUID_FILE, S_IFREG);
}

/* The length of s cut to at most max bytes, not inside a UTF-8 sequence. */
static size_t cut_length(const char *s, size_t max) {
  size_t n = strlen(s);
  if (n <= max)
    return n;
  while (max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80)
    max--;
  return max;
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

/* The default cap on the profiler's share of the process's CPU: above what
 * the defaults cost on ordinary programs (0.2-1.5% measured, see
 * docs/overhead.md), so that they are never slowed, and low enough that a
 * pathological program (a 4 KiB allocation mean, 1 kHz on many threads) is. */
#define DEFAULT_MAX_OVERHEAD_PCT 2.0
/* CONTPROF_KERNEL_COST_AFTER: a process that lives less is not charged the
 * measurement's 20 ms of CPU (docs/overhead.md). */
#define CP_KERNEL_COST_AFTER_DEFAULT_MS 10000

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

/* Whether v is word, ignoring case and blanks around it. */
static int is_word(const char *v, const char *word) {
  size_t n = strlen(word);
  while (isspace((unsigned char)*v))
    v++;
  if (strncasecmp(v, word, n) != 0)
    return 0;
  for (v += n; isspace((unsigned char)*v); v++)
    ;
  return *v == 0;
}

/* The index of variable name's value among choices (is_word), 0
 * (the first: the default) when it is unset; any other value gets one
 * warning naming the choices, and 0. */
static int choice_setting(const source *src, const char *name,
                          const char *const *choices, size_t n) {
  const char *v = env_get(src, name);
  if (!v)
    return 0;
  for (size_t i = 0; i < n; i++)
    if (is_word(v, choices[i]))
      return (int)i;
  char list[128] = "";
  size_t len = 0;
  for (size_t i = 0; i < n && len < sizeof list; i++)
    len += (size_t)snprintf(list + len, sizeof list - len, "%s%s",
                            i ? ", " : "", choices[i]);
  cp_warn("%s='%s' is not one of %s; using %s", name, v, list, choices[0]);
  return 0;
}

static int parse_bool(const char *s, int *out) {
  static const char *const yes[] = {"1", "true", "yes", "on"};
  static const char *const no[] = {"0", "false", "no", "off"};
  for (size_t i = 0; i < CP_ARRAY_SIZE(yes); i++) {
    if (is_word(s, yes[i]))
      return *out = 1, 0;
    if (is_word(s, no[i]))
      return *out = 0, 0;
  }
  return -1;
}

/* Boolean variable name: def when unset, else its value; a value that is
 * not a boolean gets one warning and def. */
static int bool_setting(const source *src, const char *name, int def) {
  const char *v = env_get(src, name);
  int on = def;
  if (v && parse_bool(v, &on) != 0) {
    cp_warn("%s='%s' is not a boolean (1/0, true/false); using %s", name, v,
            def ? "true" : "false");
    on = def;
  }
  return on;
}

/* Parses "cpu,wall" (commas or spaces). Unknown names are counted in *bad. */
/* The next word of a list separated by commas and blanks, from *s into
 * word: 0 at the list's end. A word of len bytes or more comes back empty,
 * which names nothing. (The list itself may be of any length.) */
static int next_list_word(const char **s, char *word, size_t len) {
  const char *p = *s + strspn(*s, ", \t");
  if (!*p)
    return 0;
  size_t n = strcspn(p, ", \t");
  if (n < len)
    memcpy(word, p, n);
  word[n < len ? n : 0] = 0;
  *s = p + n;
  return 1;
}

static unsigned parse_profiles(const char *s, int *bad) {
  unsigned mask = 0;
  char word[32];
  while (next_list_word(&s, word, sizeof word)) {
    unsigned bit = cp_kind_profile_named(word);
    *bad += !bit;
    mask |= bit;
  }
  return mask;
}

const char *cp_profiles_string(unsigned profiles, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = 0;
  for (int k = 0; k < CONTPROF_KIND_COUNT; k++) {
    if (!(profiles & cp_kinds[k].profile))
      continue;
    int n = snprintf(buf + used, len - used, "%s%s", used ? "," : "",
                     cp_kinds[k].name);
    if (n < 0 || (size_t)n >= len - used)
      break;
    used += (size_t)n;
  }
  return buf;
}

static int tag_key_ok(const char *k) { return *k != 0; }

/* What a tag list left out, reported in one line for the variable. */
typedef struct tag_trouble {
  int malformed, too_long, too_many;
} tag_trouble;

static void report_tags(const char *name, const char *sep,
                        const tag_trouble *t) {
  if (!t->malformed && !t->too_long && !t->too_many)
    return;
  char what[256] = "";
  size_t used = 0;
  if (t->malformed)
    used += (size_t)snprintf(what + used, sizeof what - used,
                             "%d not key%svalue", t->malformed, sep);
  if (t->too_long && used < sizeof what)
    used += (size_t)snprintf(what + used, sizeof what - used,
                             "%s%d longer than %d bytes", used ? ", " : "",
                             t->too_long, CP_MAX_TAG_BYTES);
  if (t->too_many && used < sizeof what)
    snprintf(what + used, sizeof what - used, "%s%d beyond the first %d",
             used ? ", " : "", t->too_many, CP_MAX_TAGS);
  cp_warn("%s: entries ignored: %s", name, what);
}

/* Appends key/value to a tag list within the bounds of config.h; 1 if it
 * was left out (counted in *t), CONTPROF_ERR_NOMEM, or 0. */
static int add_tag(cp_tag **list, size_t *n, const char *key, const char *value,
                   tag_trouble *t) {
  if (strlen(key) + 1 + strlen(value) > CP_MAX_TAG_BYTES)
    return t->too_long++, 1;
  if (*n >= CP_MAX_TAGS)
    return t->too_many++, 1;
  cp_tag *grown = realloc(*list, (*n + 1) * sizeof *grown);
  if (!grown)
    return CONTPROF_ERR_NOMEM;
  *list = grown;
  cp_tag *tag = &grown[*n];
  tag->key = strdup(key);
  tag->value = strdup(value);
  if (!tag->key || !tag->value) {
    free(tag->key);
    free(tag->value);
    return CONTPROF_ERR_NOMEM;
  }
  (*n)++;
  return 0;
}

/* Parses "k1:v1,k2:v2" (DD_TAGS also allows spaces as separators). Malformed,
 * too long and too many entries are skipped with one message for the
 * variable. */
static int parse_tags(cp_config *cfg, const char *name, const char *s) {
  char *copy = strdup(s);
  if (!copy)
    return CONTPROF_ERR_NOMEM;
  tag_trouble trouble = {0};
  int rc = 0;
  char *save = NULL;
  for (char *tok = strtok_r(copy, ", \t", &save); tok;
       tok = strtok_r(NULL, ", \t", &save)) {
    char *colon = strchr(tok, ':');
    if (!colon || colon == tok || !tag_key_ok(tok)) {
      trouble.malformed++;
      continue;
    }
    *colon = 0;
    if ((rc = add_tag(&cfg->tags, &cfg->ntags, tok, colon + 1, &trouble)) < 0)
      break;
    rc = 0;
  }
  report_tags(name, ":", &trouble);
  free(copy);
  return rc;
}

static int set_string(char **dst, const char *value) {
  *dst = cp_strdup(value);
  return *dst ? 0 : CONTPROF_ERR_NOMEM;
}

/* A relative directory is taken from the working directory at the start:
 * the application may chdir later (a daemon to /), and its profiles would
 * follow it. Left relative when the working directory cannot be read. */
static int make_absolute(char **path) {
  if ((*path)[0] == '/')
    return 0;
  char cwd[PATH_MAX];
  if (!getcwd(cwd, sizeof cwd) || cwd[0] != '/')
    return 0;
  const char *rel = *path;
  while (rel[0] == '.' && rel[1] == '/')
    rel += 2;
  size_t len = strlen(cwd) + 1 + strlen(rel) + 1;
  char *abs = malloc(len);
  if (!abs)
    return CONTPROF_ERR_NOMEM;
  snprintf(abs, len, "%s%s%s", cwd, strcmp(cwd, "/") == 0 ? "" : "/",
           strcmp(rel, ".") == 0 ? "" : rel);
  free(*path);
  *path = abs;
  return 0;
}

/* ---- upload settings ---------------------------------------------------- */

/* A decimal number at *s ("12", "0.5", ".5", "3."), *s moved past it. Read
 * by hand, not with strtod, which would also take "nan", "inf", signs, hex
 * and exponents, and a locale's decimal comma. 0, or -1 when no digit. */
static int read_decimal(const char **s, double *out) {
  const char *p = *s, *start = p;
  double v = 0, scale = 1;
  for (; isdigit((unsigned char)*p); p++)
    v = v * 10 + (*p - '0');
  if (*p == '.')
    for (p++; isdigit((unsigned char)*p); p++)
      v += (*p - '0') * (scale /= 10);
  if (p == start || (p == start + 1 && *start == '.'))
    return -1;
  *s = p;
  *out = v;
  return 0;
}

/* Go-style durations ("15s", "1m30s", "500ms", "2h") or plain seconds
 * ("10", "0.5"), into milliseconds. */
static int parse_duration_ms(const char *s, long *out) {
  while (isspace((unsigned char)*s))
    s++;
  if (!*s)
    return -1;
  double total = 0;
  int parts = 0, bare = 0;
  while (*s) {
    double v;
    if (read_decimal(&s, &v) != 0)
      return -1;
    double unit = 1000; /* bare number: seconds */
    if (strncmp(s, "ms", 2) == 0)
      unit = 1, s += 2;
    else if (strncmp(s, "us", 2) == 0)
      unit = 0.001, s += 2;
    else if (strncmp(s, "ns", 2) == 0)
      unit = 0.000001, s += 2;
    else if (*s == 's')
      unit = 1000, s++;
    else if (*s == 'm')
      unit = 60000, s++;
    else if (*s == 'h')
      unit = 3600000, s++;
    else if (*s && !isspace((unsigned char)*s))
      return -1;
    else
      bare = 1;
    if (bare && parts > 0)
      return -1; /* "1m30", "5 1s": a bare number stands alone */
    total += v * unit;
    parts++;
    while (isspace((unsigned char)*s))
      s++;
  }
  if (!(total <= 86400000.0 * 365)) /* also false for a NaN */
    return -1;
  *out = (long)(total + 0.5);
  return 0;
}

/* The variable name's duration in lo_ms..hi_ms, else def_ms (with one
 * message when it is set). With or_off, the word "off" stands for -1. */
static long duration_setting(const source *src, const char *name, long lo_ms,
                             long hi_ms, long def_ms, int or_off) {
  const char *v = env_get(src, name);
  long ms;
  if (!v)
    return def_ms;
  if (or_off && is_word(v, "off"))
    return -1;
  if (parse_duration_ms(v, &ms) != 0 || ms < lo_ms || ms > hi_ms) {
    cp_warn("%s='%s' is not a duration in %ldms..%lds (like 10s, 500ms)%s; "
            "using %ldms",
            name, v, lo_ms, hi_ms / 1000, or_off ? " or off" : "", def_ms);
    return def_ms;
  }
  return ms;
}

/* A period variable (CONTPROF_UPLOAD_PERIOD, or the Datadog and Pyroscope
 * clients' own): a duration of 1s..86400s, in whole seconds (rounded); a
 * bare number is seconds. def_s when unset or malformed. */
static int period_var(const source *src, const char *name, int def_s) {
  long ms = duration_setting(src, name, 1000, 86400000L, def_s * 1000L, 0);
  return (int)((ms + 500) / 1000);
}

/* CONTPROF_UPLOAD_PERIOD, the option first. */
static int period_setting(const source *src, int option, int *out) {
  if (option != 0) {
    if (option < 1 || option > 86400) {
      cp_error("option for CONTPROF_UPLOAD_PERIOD=%d is out of range "
               "1..86400 s",
               option);
      return CONTPROF_ERR_INVALID;
    }
    *out = option;
    return 0;
  }
  *out = period_var(src, "CONTPROF_UPLOAD_PERIOD", 60);
  return 0;
}

/* "k=v,k2=v2" (PYROSCOPE_LABELS), within the bounds of the tags. */
static int parse_pyroscope_labels(cp_config *cfg, const char *s) {
  char *copy = strdup(s);
  if (!copy)
    return CONTPROF_ERR_NOMEM;
  tag_trouble trouble = {0};
  int rc = 0;
  char *save = NULL;
  for (char *tok = strtok_r(copy, ",", &save); tok;
       tok = strtok_r(NULL, ",", &save)) {
    while (isspace((unsigned char)*tok))
      tok++;
    char *eq = strchr(tok, '=');
    if (!eq || eq == tok) {
      trouble.malformed++;
      continue;
    }
    *eq = 0;
    if ((rc = add_tag(&cfg->pyroscope_labels, &cfg->npyroscope_labels, tok,
                      eq + 1, &trouble)) < 0)
      break;
    rc = 0;
  }
  report_tags("PYROSCOPE_LABELS", "=", &trouble);
  free(copy);
  return rc;
}

/* "100" profiles, or bytes with a unit: "64MiB", "64M", "500KB", "1000B". */
static int parse_spool_max(const char *s, size_t *profiles, size_t *bytes) {
  while (isspace((unsigned char)*s))
    s++;
  if (!isdigit((unsigned char)*s)) /* strtoull would negate a "-5" */
    return -1;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || v == 0)
    return -1;
  while (isspace((unsigned char)*end))
    end++;
  if (!*end) {
    *profiles = (size_t)v;
    return 0;
  }
  unsigned long long mult = 0;
  char c = (char)toupper((unsigned char)*end);
  if (c == 'B')
    mult = 1, end++;
  else if (c == 'K')
    mult = 1ull << 10, end++;
  else if (c == 'M')
    mult = 1ull << 20, end++;
  else if (c == 'G')
    mult = 1ull << 30, end++;
  else
    return -1;
  if (mult > 1) {
    if (*end == 'i' || *end == 'I')
      end++;
    if (*end == 'b' || *end == 'B')
      end++;
  }
  if (*end || v > (unsigned long long)SIZE_MAX / mult)
    return -1;
  *bytes = (size_t)(v * mult);
  *profiles = SIZE_MAX;
  return 0;
}

static int load_upload(cp_config *cfg, const source *src,
                       const contprof_options *opts) {
  int rc;
  /* The period: CONTPROF_UPLOAD_PERIOD (read above), else the variables of
   * the Datadog and Pyroscope clients. */
  static const char *const period_vars[] = {"DD_PROFILING_UPLOAD_PERIOD",
                                            "PYROSCOPE_UPLOAD_INTERVAL", NULL};
  const char *which = NULL;
  const char *period = env_first(src, period_vars, &which);
  if (!opts->upload_period_s && !env_get(src, "CONTPROF_UPLOAD_PERIOD") &&
      period)
    cfg->upload_period_s = period_var(src, which, cfg->upload_period_s);

  const char *agent_url = env_get(src, "DD_TRACE_AGENT_URL");
  const char *agent_host = env_get(src, "DD_AGENT_HOST");
  if (agent_url) {
    rc = set_string(&cfg->dd_agent_url, agent_url);
  } else {
    long port = 8126;
    const char *p = env_get(src, "DD_TRACE_AGENT_PORT");
    if (p && parse_int(p, 1, 65535, &port) != 0) {
      cp_warn("DD_TRACE_AGENT_PORT='%s' is not a port (1..65535); using 8126",
              p);
      port = 8126;
    }
    const char *host = agent_host ? agent_host : "localhost";
    /* A host, an IPv6 address bare or in brackets; and as users also write
     * it, with a port: "agent:9126", "[::1]:9126" (that port is used). */
    size_t host_len = strlen(host);
    const char *colon = host[0] == '[' ? strstr(host, "]:") : NULL;
    colon = colon ? colon + 1 : host[0] == '[' ? NULL : strchr(host, ':');
    if (colon && (host[0] == '[' || !strchr(colon + 1, ':'))) {
      long hp;
      if (parse_int(colon + 1, 1, 65535, &hp) == 0) {
        if (p && hp != port)
          cp_warn("DD_AGENT_HOST='%s' names port %ld, DD_TRACE_AGENT_PORT "
                  "%ld; using %ld",
                  host, hp, port, hp);
        port = hp;
        host_len = (size_t)(colon - host);
      }
    }
    int v6 = memchr(host, ':', host_len) != NULL && host[0] != '[';
    char url[512];
    snprintf(url, sizeof url, "http://%s%.*s%s:%ld", v6 ? "[" : "",
             (int)host_len, host, v6 ? "]" : "", port);
    rc = set_string(&cfg->dd_agent_url, url);
  }
  if (rc)
    return rc;

  const char *key = env_get(src, "DD_API_KEY");
  if (key && (rc = set_string(&cfg->dd_api_key, key)))
    return rc;
  const char *agentless = env_get(src, "DD_PROFILING_AGENTLESS");
  int agentless_on = 0;
  if (agentless && parse_bool(agentless, &agentless_on) != 0) {
    cp_warn("DD_PROFILING_AGENTLESS='%s' is not a boolean; using false",
            agentless);
    agentless_on = 0;
  }
  if (agentless_on && !key)
    cp_warn("DD_PROFILING_AGENTLESS is set but DD_API_KEY is not; profiles "
            "go to the agent");
  cfg->dd_agentless = agentless_on && key;
  const char *intake = env_get(src, "CONTPROF_DATADOG_INTAKE_URL");
  char intake_buf[512];
  if (!intake) {
    const char *site = env_get(src, "DD_SITE");
    snprintf(intake_buf, sizeof intake_buf,
             "https://intake.profile.%s/api/v2/profile",
             site ? site : "datadoghq.com");
    intake = intake_buf;
  }
  if ((rc = set_string(&cfg->dd_intake_url, intake)))
    return rc;

  const char *pyro = env_get(src, "PYROSCOPE_SERVER_ADDRESS");
  if ((rc = set_string(&cfg->pyroscope_url,
                       pyro ? pyro : "http://localhost:4040")))
    return rc;
  size_t len = strlen(cfg->pyroscope_url);
  while (len > 0 && cfg->pyroscope_url[len - 1] == '/')
    cfg->pyroscope_url[--len] = 0;
  static const struct {
    const char *name;
    size_t offset;
  } pyro_strings[] = {
      {"PYROSCOPE_AUTH_TOKEN", offsetof(cp_config, pyroscope_token)},
      {"PYROSCOPE_BASIC_AUTH_USER", offsetof(cp_config, pyroscope_user)},
      {"PYROSCOPE_BASIC_AUTH_PASSWORD",
       offsetof(cp_config, pyroscope_password)},
      {"PYROSCOPE_TENANT_ID", offsetof(cp_config, pyroscope_tenant)},
      {"CONTPROF_SPOOL_DIR", offsetof(cp_config, spool_dir)},
  };
  for (size_t i = 0; i < CP_ARRAY_SIZE(pyro_strings); i++) {
    const char *v = env_get(src, pyro_strings[i].name);
    char **dst = (char **)((char *)cfg + pyro_strings[i].offset);
    if (v && (rc = set_string(dst, v)))
      return rc;
  }
  const char *labels = env_get(src, "PYROSCOPE_LABELS");
  if (labels && (rc = parse_pyroscope_labels(cfg, labels)))
    return rc;

  const char *exports = env_get(src, "CONTPROF_EXPORT");
  if (exports) {
    static const struct {
      const char *name;
      unsigned bit;
    } export_names[] = {{"file", CP_EXPORT_FILE},
                        {"datadog", CP_EXPORT_DATADOG},
                        {"pyroscope", CP_EXPORT_PYROSCOPE}};
    char word[32];
    int bad = 0;
    for (const char *at = exports; next_list_word(&at, word, sizeof word);) {
      unsigned bit = 0;
      for (size_t i = 0; i < CP_ARRAY_SIZE(export_names); i++)
        if (strcasecmp(word, export_names[i].name) == 0)
          bit = export_names[i].bit;
      bad += !bit;
      cfg->exports |= bit;
    }
    if (bad || !cfg->exports)
      cp_warn("CONTPROF_EXPORT='%s' names unknown sinks (known: file, "
              "datadog, pyroscope)%s",
              exports,
              cfg->exports ? "; they were ignored"
                           : "; choosing as when it is unset");
  }
  if (!cfg->exports) {
    if (agent_url || agent_host || cfg->dd_agentless)
      cfg->exports |= CP_EXPORT_DATADOG;
    if (pyro)
      cfg->exports |= CP_EXPORT_PYROSCOPE;
    if (!cfg->exports)
      cfg->exports = CP_EXPORT_FILE;
  }

  long total =
      duration_setting(src, "CONTPROF_UPLOAD_TIMEOUT", 1, 3600000, 10000, 0);
  cfg->upload_timeout_ms = total;
  cfg->connect_timeout_ms =
      duration_setting(src, "CONTPROF_CONNECT_TIMEOUT", 1, 3600000, total, 0);
  cfg->exit_timeout_ms =
      duration_setting(src, "CONTPROF_EXIT_TIMEOUT", 0, 3600000, 5000, 0);
  /* When the kernel's side of a sampling signal is measured
   * (samplers/kernel_cost.h): `off`, or a delay after the start. */
  cfg->kernel_cost_after_ms =
      duration_setting(src, "CONTPROF_KERNEL_COST_AFTER", 0, 86400000,
                       CP_KERNEL_COST_AFTER_DEFAULT_MS, 1);
  cfg->retry_initial_ms =
      duration_setting(src, "CONTPROF_RETRY_INITIAL", 1, 3600000, 1000, 0);
  cfg->retry_max_ms =
      duration_setting(src, "CONTPROF_RETRY_MAX", 1, 86400000, 60000, 0);
  if (cfg->retry_max_ms < cfg->retry_initial_ms)
    cfg->retry_max_ms = cfg->retry_initial_ms;
  cfg->spool_max_profiles = 32;
  cfg->spool_max_bytes = (size_t)64 << 20;
  const char *spool_max = env_get(src, "CONTPROF_SPOOL_MAX");
  if (spool_max && parse_spool_max(spool_max, &cfg->spool_max_profiles,
                                   &cfg->spool_max_bytes) != 0) {
    cp_warn("CONTPROF_SPOOL_MAX='%s' is neither a count of profiles nor a "
            "size (like 64MiB); using 32 profiles",
            spool_max);
    cfg->spool_max_profiles = 32;
    cfg->spool_max_bytes = (size_t)64 << 20;
  }
  return 0;
}

/* A name cut to CP_MAX_NAME_BYTES, with one message naming its source. */
static int set_name(char **dst, const char *what, const char *value) {
  if (!value)
    return set_string(dst, "");
  size_t n = cut_length(value, CP_MAX_NAME_BYTES);
  if (value[n])
    cp_warn("%s is %zu bytes long; using its first %zu (at most %d)", what,
            strlen(value), n, CP_MAX_NAME_BYTES);
  *dst = strndup(value, n);
  return *dst ? 0 : CONTPROF_ERR_NOMEM;
}

/* The executable's file name: what the kernel ran, not argv[0], which the
 * invoking user chooses. */
static void exe_name(char *out, size_t len) {
  char path[4096];
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  path[n > 0 ? n : 0] = 0;
  const char *slash = strrchr(path, '/');
  snprintf(out, len, "%s", slash && slash[1] ? slash + 1 : "setuid");
}

static int load(cp_config *cfg, const contprof_options *opts, source src) {
  static const contprof_options no_options;
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
  static const char *const env_vars[] = {"CONTPROF_ENV", "DD_ENV", NULL};
  static const char *const version_vars[] = {"CONTPROF_VERSION", "DD_VERSION",
                                             NULL};
  const char *service_from = "service option", *env_from = "env option",
             *version_from = "version option";
  const char *service = opts->service
                            ? opts->service
                            : env_first(&src, service_vars, &service_from);
  if (!service) {
    service = program_invocation_short_name;
    service_from = "the program's name";
  }
  const char *env =
      opts->env ? opts->env : env_first(&src, env_vars, &env_from);
  const char *version = opts->version
                            ? opts->version
                            : env_first(&src, version_vars, &version_from);
  if ((rc = set_name(&cfg->service, service_from, service)) ||
      (rc = set_name(&cfg->env, env_from, env)) ||
      (rc = set_name(&cfg->version, version_from, version)))
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
    char used[64], known[64] = "";
    for (int k = 0; k < CONTPROF_KIND_COUNT; k++)
      snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s",
               k ? ", " : "", cp_kinds[k].name);
    if (opts->profiles && bad) {
      cp_error("profiles option '%s' names an unknown profile (known: %s)",
               profiles, known);
      rc = CONTPROF_ERR_INVALID;
      goto fail;
    }
    if (mask)
      cfg->profiles = mask;
    if (bad || !mask)
      cp_warn("CONTPROF_PROFILES='%s' names unknown profiles (known: %s); "
              "using %s",
              profiles, known,
              cp_profiles_string(cfg->profiles, used, sizeof used));
  }

  int memory_mb, symbols_mb, dwarf_mb;
  if ((rc = int_setting(&src, "CONTPROF_CPU_HZ", opts->cpu_hz, 1, 1000, 100,
                        &cfg->cpu_hz)) ||
      (rc = int_setting(&src, "CONTPROF_MAX_FRAMES", opts->max_frames, 1, 1024,
                        128, &cfg->max_frames)) ||
      (rc = int_setting(&src, "CONTPROF_MAX_MEMORY_MB", 0, 1, 65536, 64,
                        &memory_mb)) ||
      (rc = int_setting(&src, "CONTPROF_SYMBOLS_MAX_MB", 0, 1, 65536, 128,
                        &symbols_mb)) ||
      (rc = int_setting(&src, "CONTPROF_DWARF_MAX_MB", 0, 1, 65536, 256,
                        &dwarf_mb)))
    goto fail;
  if ((rc = period_setting(&src, opts->upload_period_s, &cfg->upload_period_s)))
    goto fail;
  cfg->dwarf_max_bytes = (size_t)dwarf_mb << 20;
  cfg->max_memory_bytes = (size_t)memory_mb << 20;
  cfg->symbols_max_bytes = (size_t)symbols_mb << 20;

  /* In the order of cp_cpu_clock. */
  static const char *const cpu_clocks[] = {"auto", "perf", "posix"};
  cfg->cpu_clock = (cp_cpu_clock)choice_setting(
      &src, "CONTPROF_CPU_CLOCK", cpu_clocks, CP_ARRAY_SIZE(cpu_clocks));

  /* In the order of samplers/fpwalk.h's cp_unwind_mode. */
  static const char *const unwind_modes[] = {"auto", "fp", "dwarf"};
  cfg->unwind_mode = choice_setting(&src, "CONTPROF_UNWIND", unwind_modes,
                                    CP_ARRAY_SIZE(unwind_modes));

  static const char *const symbolize[] = {"local", "none"};
  cfg->symbolize_none = choice_setting(&src, "CONTPROF_SYMBOLIZE", symbolize,
                                       CP_ARRAY_SIZE(symbolize));

  int alloc_bytes, lock_ns;
  if ((rc = int_setting(&src, "CONTPROF_WALL_INTERVAL_MS", 0, 1, 1000,
                        CP_WALL_INTERVAL_MS_DEFAULT, &cfg->wall_interval_ms)) ||
      (rc = int_setting(&src, "CONTPROF_WALL_THREADS_PER_TICK", 0, 1, 4096, 16,
                        &cfg->wall_threads_per_tick)) ||
      (rc = int_setting(&src, "CONTPROF_ALLOC_SAMPLE_BYTES", 0, 1, 1 << 30,
                        524288, &alloc_bytes)) ||
      (rc = int_setting(&src, "CONTPROF_LOCK_SAMPLE_NS", 0, 1, 1000000000,
                        1000000, &lock_ns)))
    goto fail;
  cfg->alloc_sample_bytes = alloc_bytes;
  int heap_tracked;
  if ((rc = int_setting(&src, "CONTPROF_HEAP_MAX_TRACKED", 0, 1024, 1000000,
                        65536, &heap_tracked)))
    goto fail;
  cfg->heap_max_tracked = heap_tracked;
  cfg->lock_sample_ns = lock_ns;
  cfg->max_overhead_pct = DEFAULT_MAX_OVERHEAD_PCT;
  const char *cap = env_get(&src, "CONTPROF_MAX_OVERHEAD_PCT");
  if (cap) {
    const char *end = cap;
    double v = -1;
    while (isspace((unsigned char)*end))
      end++;
    if (read_decimal(&end, &v) == 0)
      while (isspace((unsigned char)*end))
        end++;
    if (*end || !(v >= 0 && v <= 100))
      cp_warn("CONTPROF_MAX_OVERHEAD_PCT='%s' is not a percentage in 0..100; "
              "using %g",
              cap, DEFAULT_MAX_OVERHEAD_PCT);
    else
      cfg->max_overhead_pct = v;
  }
  cfg->timeline = bool_setting(&src, "CONTPROF_TIMELINE", 0);

  cfg->follow_fork = bool_setting(&src, "CONTPROF_FOLLOW_FORK", 1);
  cfg->direct_calls = bool_setting(&src, "CONTPROF_DIRECT_CALLS", 1);

  /* Read by the Python binding only (docs/python.md, "Native frames"). */
  cfg->python_native = bool_setting(&src, "CONTPROF_PYTHON_NATIVE", 0);

  /* Read by the Python binding only (docs/python.md, "Reading without
   * the GIL"). */
  static const char *const py_reads[] = {"direct", "syscall"};
  cfg->python_reads_direct =
      choice_setting(&src, "CONTPROF_PYTHON_READS", py_reads,
                     CP_ARRAY_SIZE(py_reads)) == 0;

  cfg->follow_exec = bool_setting(&src, "CONTPROF_FOLLOW_EXEC", 1);

  const char *dir = opts->output_dir ? opts->output_dir
                                     : env_get(&src, "CONTPROF_OUTPUT_DIR");
  if ((rc = set_string(&cfg->output_dir, dir ? dir : "profiles")))
    goto fail;
  if ((rc = load_upload(cfg, &src, opts)))
    goto fail;
  if ((rc = make_absolute(&cfg->output_dir)) ||
      (cfg->spool_dir && (rc = make_absolute(&cfg->spool_dir))))
    goto fail;
  return 0;

fail:
  cp_config_free(cfg);
  return rc;
}

int cp_config_load_privileged(cp_config *cfg, const contprof_options *opts,
                              int allowed) {
  /* With nothing set, load gives the program's options and the defaults:
   * every variable, and a binding's options (which fall back to variables),
   * are the invoking user's to choose. Only the defaults that come from the
   * invocation change: the name (argv[0] is the user's too) and the
   * directory. */
  contprof_options o = opts ? *opts : (contprof_options){0};
  char name[256];
  if (!o.service) {
    exe_name(name, sizeof name);
    o.service = name;
  }
  if (!o.output_dir)
    o.output_dir = CP_PRIVILEGED_OUTPUT_DIR;
  int rc = load(cfg, &o, (source){no_env, NULL});
  if (rc)
    return rc;
  cfg->privileged = 1;
  cfg->enabled = allowed;
  if (allowed)
    cp_info("privileged program (setuid, setgid or capabilities): the "
            "environment is ignored; profiles go to %s (docs/security.md)",
            cfg->output_dir);
  else
    cp_info("privileged program (setuid, setgid or capabilities): profiling "
            "is off unless root creates " CP_ALLOW_SETUID_FILE
            " (docs/security.md)");
  return 0;
}

int cp_config_load(cp_config *cfg, const contprof_options *opts,
                   cp_getenv_fn get, void *ctx) {
  if (cp_config_privileged())
    return cp_config_load_privileged(cfg, opts, cp_config_setuid_allowed());
  return load(cfg, opts, (source){get, ctx});
}

double cp_config_rate(const cp_config *cfg, contprof_sample_kind kind,
                      unsigned slowdown) {
  double f = slowdown ? slowdown : 1;
  switch (kind) {
  case CONTPROF_KIND_CPU:
    return cfg->cpu_hz / f;
  case CONTPROF_KIND_WALL:
    return cfg->wall_interval_ms * f;
  case CONTPROF_KIND_ALLOC:
  case CONTPROF_KIND_INUSE:
    return (double)cfg->alloc_sample_bytes * f;
  default:
    return (double)cfg->lock_sample_ns * f;
  }
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
  free(cfg->dd_agent_url);
  free(cfg->dd_intake_url);
  /* Secrets: not left in freed memory. */
  char *secrets[] = {cfg->dd_api_key, cfg->pyroscope_token,
                     cfg->pyroscope_password};
  for (size_t i = 0; i < CP_ARRAY_SIZE(secrets); i++)
    if (secrets[i])
      explicit_bzero(secrets[i], strlen(secrets[i]));
  free(cfg->dd_api_key);
  free(cfg->pyroscope_url);
  free(cfg->pyroscope_token);
  free(cfg->pyroscope_user);
  free(cfg->pyroscope_password);
  free(cfg->pyroscope_tenant);
  for (size_t i = 0; i < cfg->npyroscope_labels; i++) {
    free(cfg->pyroscope_labels[i].key);
    free(cfg->pyroscope_labels[i].value);
  }
  free(cfg->pyroscope_labels);
  free(cfg->spool_dir);
  memset(cfg, 0, sizeof *cfg);
}
