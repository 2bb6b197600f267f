/* contprof run: sets the profiler's environment and LD_PRELOAD, then execs the
 * program in place, so its exit status (or the signal that killed it) is
 * exactly what the shell sees. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "common.h"
#include "config.h"

#define PRELOAD_NAME "libcontprof_preload.so"

/* The preload library next to this binary (build tree), in ../lib (install
 * tree), or in the configured install libdir. */
static int find_preload(char *out, size_t len) {
  const char *forced = secure_getenv("CONTPROF_PRELOAD_LIBRARY");
  if (forced && *forced) {
    if (access(forced, R_OK) == 0)
      return snprintf(out, len, "%s", forced), 0;
    fprintf(stderr,
            "contprof run: CONTPROF_PRELOAD_LIBRARY='%s': %s; looking for "
            "%s where contprof is installed\n",
            forced, strerror(errno), PRELOAD_NAME);
  }
  char exe[PATH_MAX - 64];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) {
      *slash = 0;
      const char *rel[] = {"", "/../lib", "/../lib64",
                           "/../lib/x86_64-linux-gnu"};
      for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        if (snprintf(out, len, "%s%s/%s", exe, rel[i], PRELOAD_NAME) >=
            (int)len)
          continue;
        if (access(out, R_OK) == 0) {
          char real[PATH_MAX];
          if (realpath(out, real))
            snprintf(out, len, "%s", real);
          return 0;
        }
      }
    }
  }
#ifdef CONTPROF_INSTALL_LIBDIR
  snprintf(out, len, "%s/%s", CONTPROF_INSTALL_LIBDIR, PRELOAD_NAME);
  if (access(out, R_OK) == 0)
    return 0;
#endif
  return -1;
}

static int set(const char *name, const char *value) {
  if (setenv(name, value, 1) != 0) {
    fprintf(stderr, "contprof: cannot set %s: %s\n", name, strerror(errno));
    return -1;
  }
  return 0;
}

static int usage(FILE *to) {
  fprintf(to,
          "usage: contprof run [--hz N] [--output DIR] [--period S] "
          "[--profiles LIST] [--service NAME] -- PROGRAM ARGS...\n"
          "Runs PROGRAM with the profiler preloaded; each option sets the "
          "variable of\nthe same meaning (CONTPROF_CPU_HZ, "
          "CONTPROF_OUTPUT_DIR, CONTPROF_UPLOAD_PERIOD,\nCONTPROF_PROFILES, "
          "CONTPROF_SERVICE: docs/configuration.md), also as --opt=VALUE.\n"
          "The exit status is PROGRAM's.\n");
  return to == stdout ? 0 : 2;
}

/* The options' variables alone, for cp_config_load. */
typedef struct option_values {
  const char *var[8];
  const char *value[8];
  int n;
} option_values;

static const char *option_getenv(const char *name, void *ctx) {
  const option_values *o = ctx;
  for (int i = o->n - 1; i >= 0; i--)
    if (strcmp(o->var[i], name) == 0)
      return o->value[i];
  return NULL;
}

int cp_cmd_run(int argc, char **argv) {
  option_values given = {.n = 0};
  static const struct {
    const char *flag;
    const char *var;
  } flags[] = {
      {"--hz", "CONTPROF_CPU_HZ"},
      {"--output", "CONTPROF_OUTPUT_DIR"},
      {"--period", "CONTPROF_UPLOAD_PERIOD"},
      {"--profiles", "CONTPROF_PROFILES"},
      {"--service", "CONTPROF_SERVICE"},
  };
  int i = 1;
  for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
      return usage(stdout);
    size_t f = 0, flen = 0;
    for (; f < sizeof flags / sizeof flags[0]; f++) {
      flen = strlen(flags[f].flag);
      if (strncmp(argv[i], flags[f].flag, flen) == 0 &&
          (argv[i][flen] == 0 || argv[i][flen] == '='))
        break;
    }
    if (f == sizeof flags / sizeof flags[0]) {
      if (argv[i][0] != '-')
        break; /* the program, without "--" */
      fprintf(stderr, "contprof run: unknown option '%s'\n", argv[i]);
      return usage(stderr);
    }
    const char *value = argv[i][flen] == '=' ? argv[i] + flen + 1 : NULL;
    if (!value && i + 1 >= argc) {
      fprintf(stderr, "contprof run: %s needs a value\n", argv[i]);
      return usage(stderr);
    }
    if (!value)
      value = argv[++i];
    if (set(flags[f].var, value) != 0)
      return 1;
    if (given.n < (int)(sizeof given.var / sizeof *given.var)) {
      given.var[given.n] = flags[f].var;
      given.value[given.n++] = value;
    }
  }
  /* Each option's value is checked as the library will read it, here and
   * once: a bad one would otherwise be reported by every process the
   * program runs, and replaced by a default. */
  if (given.n) {
    cp_config cfg;
    unsigned before = cp_log_complaints();
    if (cp_config_load(&cfg, NULL, option_getenv, &given) == 0)
      cp_config_free(&cfg);
    if (cp_log_complaints() != before) {
      fprintf(stderr, "contprof run: an option's value is refused (above); "
                      "nothing was run\n");
      return 2;
    }
  }
  if (i < argc && strcmp(argv[i], "--") == 0)
    i++;
  if (i >= argc) {
    fprintf(stderr, "contprof run: no program to run\n");
    return usage(stderr);
  }

  char lib[PATH_MAX];
  if (find_preload(lib, sizeof lib) != 0) {
    fprintf(stderr,
            "contprof run: cannot find %s (set "
            "CONTPROF_PRELOAD_LIBRARY); running the program "
            "unprofiled\n",
            PRELOAD_NAME);
  } else {
    const char *old = secure_getenv("LD_PRELOAD");
    char *preload = NULL;
    if (old && *old) {
      if (asprintf(&preload, "%s:%s", lib, old) < 0)
        preload = NULL;
    } else {
      preload = strdup(lib);
    }
    if (!preload || set("LD_PRELOAD", preload) != 0)
      return 1;
    free(preload);
  }
  execvp(argv[i], argv + i);
  int err = errno;
  fprintf(stderr, "contprof run: cannot run '%s': %s\n", argv[i],
          strerror(err));
  return err == ENOENT ? 127 : 126;
}
