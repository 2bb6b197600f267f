/* The verbs of the contprof command. */
#ifndef CP_COMMANDS_H
#define CP_COMMANDS_H

int cp_cmd_run(int argc, char **argv);
int cp_cmd_top(int argc, char **argv);
int cp_cmd_symbolize(int argc, char **argv);

#endif
