/* `contprof merge`: one pprof from many (files or directories of .pb.gz),
 * merged by function identity so that profiles of different processes,
 * builds and hosts combine. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "profmerge.h"

static void merge_usage(FILE *out) {
  fprintf(out,
          "usage: contprof merge -o OUT [--type TYPE] [--drop-labels "
          "KEY,...]\n"
          "                      [--max-memory MIB] FILE|DIR...\n"
          "Merges pprof files (a DIR: its *.pb.gz files) into OUT (gzipped\n"
          "pprof; - for stdout) by function name, file and line, not by\n"
          "address. Values are summed exactly per sample type.\n"
          "  --type TYPE           keep only this sample type (needed when\n"
          "                        the inputs' sample types differ)\n"
          "  --drop-labels K,...   drop these labels (e.g. 'thread id') so\n"
          "                        that identical stacks fold\n"
          "  --max-memory MIB      for one input and the merged result\n"
          "                        (default %zu)\n",
          PPROF_READ_MAX_MEMORY >> 20);
}

/* The value of option `name` at argv[*i] ("--name V" or "--name=V"), or
 * NULL when argv[*i] is another option. Sets *missing when V is absent. */
const char *cp_option(int argc, char **argv, int *i, const char *name,
                      int *missing) {
  const char *a = argv[*i];
  size_t n = strlen(name);
  if (strncmp(a, name, n) != 0)
    return NULL;
  if (a[n] == '=')
    return a + n + 1;
  if (a[n] != '\0')
    return NULL;
  if (*i + 1 >= argc) {
    *missing = 1;
    return NULL;
  }
  return argv[++*i];
}

int cp_parse_mib(const char *s, size_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end || v == 0 || *s == '-' || v > (SIZE_MAX >> 21))
    return -1;
  *out = (size_t)v << 20;
  return 0;
}

int cp_cmd_merge(int argc, char **argv) {
  cp_merge_options opts = {0};
  const char *out = NULL;
  char **paths = calloc(argc > 0 ? (size_t)argc : 1, sizeof *paths);
  size_t npaths = 0;
  int status = 0, done_opts = 0;
  if (!paths)
    return 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    int missing = 0;
    if (done_opts || a[0] != '-' || strcmp(a, "-") == 0) {
      paths[npaths++] = argv[i];
    } else if (strcmp(a, "--") == 0) {
      done_opts = 1;
    } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      merge_usage(stdout);
      goto out;
    } else if ((v = cp_option(argc, argv, &i, "-o", &missing)) ||
               (v = cp_option(argc, argv, &i, "--output", &missing))) {
      out = v;
    } else if ((v = cp_option(argc, argv, &i, "--type", &missing))) {
      opts.type = v;
    } else if ((v = cp_option(argc, argv, &i, "--drop-labels", &missing))) {
      opts.drop_labels = v;
    } else if ((v = cp_option(argc, argv, &i, "--max-memory", &missing))) {
      if (cp_parse_mib(v, &opts.max_memory) != 0) {
        fprintf(stderr, "contprof: merge: --max-memory needs a size in MiB\n");
        status = 2;
        goto out;
      }
    } else {
      fprintf(stderr, "contprof: merge: %s %s\n",
              missing ? "a value is missing after" : "unknown option", a);
      merge_usage(stderr);
      status = 2;
      goto out;
    }
  }
  if (!out || npaths == 0) {
    merge_usage(stderr);
    status = 2;
    goto out;
  }
  cp_merge *m = cp_merge_create(&opts);
  char err[1024];
  if (!m) {
    fprintf(stderr, "contprof: merge: out of memory\n");
    status = 1;
    goto out;
  }
  if (cp_merge_add_paths(m, paths, npaths, err, sizeof err) != 0) {
    cp_report("merge", err);
    status = 1;
  }
  if (status == 0 && cp_merge_write(m, out, err, sizeof err) != 0) {
    cp_report("merge", err);
    status = 1;
  }
  cp_merge_destroy(m);
out:
  free(paths);
  return status;
}
