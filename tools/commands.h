/* The verbs of the contprof command, and option parsing they share. */
#ifndef CP_COMMANDS_H
#define CP_COMMANDS_H

#include <stddef.h>

int cp_cmd_run(int argc, char **argv);
int cp_cmd_top(int argc, char **argv);
int cp_cmd_merge(int argc, char **argv);
int cp_cmd_folded(int argc, char **argv);
int cp_cmd_flame(int argc, char **argv);
int cp_cmd_diff(int argc, char **argv);
int cp_cmd_symbolize(int argc, char **argv);

/* The value of option `name` at argv[*i] ("--name V" or "--name=V"),
 * advancing *i past V; NULL when argv[*i] is not that option, or (with
 * *missing set) when V is absent. */
const char *cp_option(int argc, char **argv, int *i, const char *name,
                      int *missing);
/* A positive number of MiB into bytes; -1 when not one. */
int cp_parse_mib(const char *s, size_t *out);

#endif
