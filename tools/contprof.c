/* contprof: the command line. `contprof run` profiles an unmodified program;
 * `top`, `merge`, `folded`, `flame` and `diff` are the local view of
 * profiles; `symbolize` symbolizes a profile made with
 * CONTPROF_SYMBOLIZE=none. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "contprof/profiler.h"

static void usage(FILE *out) {
  fprintf(
      out,
      "usage: contprof run [--hz N] [--output DIR] [--period S]\n"
      "                    [--profiles LIST] [--service NAME] -- PROGRAM "
      "ARGS...\n"
      "       contprof top FILE|DIR... [-n N] [--type TYPE] [--list-types]\n"
      "                    [--max-memory MIB] [--lines] [--base BASE]\n"
      "       contprof merge -o OUT [--type T] [--drop-labels K,...] "
      "FILE|DIR...\n"
      "       contprof folded [--type T] [-o OUT] FILE|DIR...\n"
      "       contprof flame [-o OUT] [--type T] [--svg] FILE|DIR...\n"
      "       contprof diff [-o OUT] [--type T] BASE NEW\n"
      "       contprof symbolize IN -o OUT [--debug-dir DIR]\n"
      "       contprof version\n"
      "\n"
      "run    runs PROGRAM under the profiler (LD_PRELOAD) and exits with "
      "its status.\n"
      "top    prints flat and cumulative top functions of pprof files.\n"
      "merge  merges pprof files by function into one.\n"
      "folded prints collapsed stacks (root;...;leaf VALUE).\n"
      "flame  writes a flame graph: self-contained HTML, or SVG.\n"
      "diff   writes a differential flame graph of BASE and NEW.\n"
      "symbolize adds functions, files and lines to a profile made "
      "with\n       CONTPROF_SYMBOLIZE=none.\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *verb = argv[1];
  if (strcmp(verb, "run") == 0)
    return cp_cmd_run(argc - 1, argv + 1);
  if (strcmp(verb, "top") == 0)
    return cp_cmd_top(argc - 1, argv + 1);
  if (strcmp(verb, "merge") == 0)
    return cp_cmd_merge(argc - 1, argv + 1);
  if (strcmp(verb, "folded") == 0)
    return cp_cmd_folded(argc - 1, argv + 1);
  if (strcmp(verb, "flame") == 0)
    return cp_cmd_flame(argc - 1, argv + 1);
  if (strcmp(verb, "diff") == 0)
    return cp_cmd_diff(argc - 1, argv + 1);
  if (strcmp(verb, "symbolize") == 0)
    return cp_cmd_symbolize(argc - 1, argv + 1);
  if (strcmp(verb, "version") == 0 || strcmp(verb, "--version") == 0) {
    printf("contprof %s\n", CONTPROF_VERSION_STRING);
    return 0;
  }
  if (strcmp(verb, "help") == 0 || strcmp(verb, "--help") == 0 ||
      strcmp(verb, "-h") == 0) {
    usage(stdout);
    return 0;
  }
  fprintf(stderr, "contprof: unknown command '%s'\n", verb);
  usage(stderr);
  return 2;
}
