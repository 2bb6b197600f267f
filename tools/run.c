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

#define PRELOAD_NAME "libcontprof_preload.so"

/* The preload library next to this binary (build tree), in ../lib (install
 * tree), or in the configured install libdir. */
static int find_preload(char *out, size_t len) {
  const char *forced = secure_getenv("CONTPROF_PRELOAD_LIBRARY");
  if (forced && access(forced, R_OK) == 0)
    return snprintf(out, len, "%s", forced), 0;
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

static int usage(void) {
  fprintf(stderr, "usage: contprof run [--hz N] [--output DIR] [--period S] "
                  "[--profiles LIST] [--service NAME] -- PROGRAM ARGS...\n");
  return 2;
}

int cp_cmd_run(int argc, char **argv) {
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
    size_t f = 0;
    for (; f < sizeof flags / sizeof flags[0]; f++)
      if (strcmp(argv[i], flags[f].flag) == 0)
        break;
    if (f == sizeof flags / sizeof flags[0]) {
      if (argv[i][0] != '-')
        break; /* the program, without "--" */
      fprintf(stderr, "contprof run: unknown option '%s'\n", argv[i]);
      return usage();
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "contprof run: %s needs a value\n", argv[i]);
      return usage();
    }
    if (set(flags[f].var, argv[++i]) != 0)
      return 1;
  }
  if (i < argc && strcmp(argv[i], "--") == 0)
    i++;
  if (i >= argc)
    return usage();

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
